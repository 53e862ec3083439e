/* jprofd sampler: one perf_event program for per-CPU events (host view and
 * whole-host recordings) and one for per-thread events (recordings of one
 * process). Counts are aggregated in hash maps; stacks go to stack maps.
 * Both come in two generations: userspace flips jp_gen, waits for programs
 * that saw the old value to finish (an RCU grace period), then drains and
 * clears the old generation, so no sample is lost or counted twice. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sampler.h"

#define PF_KTHREAD 0x00200000
#define CLONE_THREAD 0x00010000
#define EEXIST 17

char LICENSE[] SEC("license") = "GPL";

/* Drain epoch, written by userspace: its low bit selects the active
 * generation; off-CPU intervals remember it to know where their stacks are. */
volatile __u32 jp_gen;
/* A whole-host off-CPU recording (source 0: none). */
volatile __u32 jp_offcpu_all_source;
volatile __u64 jp_offcpu_all_threshold_ns;
/* The daemon's pid namespace (nsfs dev and inode), set before any event is
 * attached when the daemon does not run in the initial one (a container):
 * then ids are taken in that namespace, which is what its /proc speaks. */
volatile __u64 jp_pidns_dev;
volatile __u64 jp_pidns_ino;

struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, __u64);
};

struct stacks_map {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, JP_MAX_STACK_DEPTH * sizeof(__u64));
};

/* Off-CPU intervals, aggregated like CPU samples but valued {count, ns}:
 * maps of their own keep the CPU path's value a plain counter. */
struct offcounts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, struct jp_offcpu_value);
};

struct counts_map counts0 SEC(".maps");
struct counts_map counts1 SEC(".maps");
struct offcounts_map offcounts0 SEC(".maps");
struct offcounts_map offcounts1 SEC(".maps");
struct stacks_map stacks0 SEC(".maps");
struct stacks_map stacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_counters);
} counters SEC(".maps");

/* BPF time per sample (bpf/sampler.h). Built with -DJP_BPF_TIMING=0 (CMake
 * option JPROF_BPF_TIMING=OFF) the programs do not time themselves and the
 * histogram stays empty: the switch exists to measure what timing costs. */
#ifndef JP_BPF_TIMING
#define JP_BPF_TIMING 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_sample_hist);
} sample_hist SEC(".maps");

/* tid -> source id of the per-thread event that feeds the host view. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} covered SEC(".maps");

/* tgids whose new threads userspace wants to hear about. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} watched SEC(".maps");

/* source -> least time between two records of one thread. An agent holds
 * copies of its record events and could shorten their period; this keeps
 * it from flooding the ring buffer that other recordings share. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} source_min_gap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} thread_last SEC(".maps");

/* tgid (as the daemon sees it) -> the off-CPU recording of that process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct jp_offcpu_target);
} offcpu_targets SEC(".maps");

/* Kernel tid -> a recorded task off the CPU since its switch-out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct jp_offcpu_start);
} offcpu_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* ---- DWARF unwinding: tables written by daemon/collect/unwinder.c ---- */

/* Every loaded table's rows, each table a contiguous range. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 21);
	__type(key, __u32);
	__type(value, struct jp_unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct jp_unwind_proc);
} unwind_procs SEC(".maps");

/* Stacks the unwinder walked, by id (JP_USTACK_DWARF | hash bits). */
struct ustacks_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct jp_ustack);
};

struct ustacks_map ustacks0 SEC(".maps");
struct ustacks_map ustacks1 SEC(".maps");

/* tgid -> when it last asked for tables (rate limit of JP_MSG_UNWIND_MISS). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} unwind_miss_last SEC(".maps");

/* The walk in progress on this CPU (too big for the BPF stack). */
struct jp_uw_state {
	__u64 pc, sp, bp;
	__u32 tgid;
	__u32 n;
	__u32 fp_frames;
	__u32 root;      /* the walk ended at a frame CFI calls outermost */
	__u32 unmapped;  /* ... or at an address outside the known mappings */
	__u32 by_cfi;    /* pc came from a CFI row (trusted), not a frame pointer */
	__s32 last_map;  /* the mapping of the last frame, or -1 */
	__u32 pad;
	__u64 sp0;       /* the interrupted sp: the stack starts there */
	__u64 heap_lo, heap_hi;  /* the brk heap: no code there */
	struct jp_ustack st;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_uw_state);
} unwind_scratch SEC(".maps");

/* Current tgid/tid as the daemon sees them; -1 for a task outside its pid
 * namespace. */
static __always_inline int current_ids(__u32 *tgid, __u32 *tid)
{
	struct bpf_pidns_info ns = {};
	__u64 id;

	if (!jp_pidns_ino) {
		id = bpf_get_current_pid_tgid();
		*tgid = id >> 32;
		*tid = (__u32)id;
		return 0;
	}
	if (bpf_get_ns_current_pid_tgid(jp_pidns_dev, jp_pidns_ino, &ns, sizeof(ns)))
		return -1;
	*tgid = ns.tgid;
	*tid = ns.pid;
	return 0;
}

static __always_inline struct jp_counters *get_counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&counters, &zero);
}

/* A program's start, for sample_timed (0 when timing is compiled out). */
static __always_inline __u64 sample_clock(void)
{
	return JP_BPF_TIMING ? bpf_ktime_get_ns() : 0;
}

/* Adds the time since t0 to this CPU's histogram: once per counted sample,
 * at its end. A CPU runs one perf_event program at a time (the kernel's
 * recursion guard), so plain increments are exact. */
static __always_inline void sample_timed(__u64 t0)
{
	__u32 zero = 0;
	struct jp_sample_hist *h;
	__u64 ns, b;

	if (!JP_BPF_TIMING)
		return;
	ns = bpf_ktime_get_ns() - t0;
	h = bpf_map_lookup_elem(&sample_hist, &zero);
	if (!h)
		return;
	b = ns / JP_HIST_BUCKET_NS;
	if (b > JP_HIST_BUCKETS - 1)
		b = JP_HIST_BUCKETS - 1;
	h->buckets[b]++;
	h->sum_ns += ns;
}

/* x86-64: kernel text lives in the upper canonical half, so the sign of the
 * interrupted IP tells the mode (perf context allows only 8-byte reads of
 * regs, which rules out testing cs). */
static __always_inline int in_user_mode(struct bpf_perf_event_data *ctx)
{
	return (long)ctx->regs.ip >= 0;
}

static __always_inline int is_kthread(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return task->flags & PF_KTHREAD;
}

/* One stack of the current task into a stack map: its id, or -1 with the
 * failure counted. ctx is the program's context, of any type; skip: kernel
 * frames to leave out at the leaf (the tracing glue of a tracepoint
 * program). */
static __always_inline __s32 stack_id(void *ctx, void *stacks, __u64 user, __u64 skip,
				      struct jp_counters *c)
{
	long r = bpf_get_stackid(ctx, stacks,
				 user ? BPF_F_USER_STACK : (skip & BPF_F_SKIP_FIELD_MASK));

	if (r >= 0)
		return r;
	if (r == -EEXIST)
		c->collision++;
	else if (user)
		c->ustack_err++;
	else
		c->kstack_err++;
	return -1;
}

/* The process's identity beside its pid: a sample drained after the process
 * exited must not be taken for one of a later process with the same pid. */
static __always_inline __u64 process_start(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return task->group_leader->start_boottime;
}

#define UW_USER_TOP 0x00007ffffffff000ULL
/* Largest frame the unwinder believes: beyond it a frame pointer is garbage. */
#define UW_MAX_FRAME (8ULL << 20)

static __always_inline void unwind_miss(__u32 tgid, __u64 start_ns, struct jp_counters *c)
{
	__u64 now = bpf_ktime_get_ns(), *last = bpf_map_lookup_elem(&unwind_miss_last, &tgid);
	struct jp_msg_unwind_miss *m;

	if (last && now - *last < 250000000ULL)
		return;
	bpf_map_update_elem(&unwind_miss_last, &tgid, &now, BPF_ANY);
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return;
	}
	m->type = JP_MSG_UNWIND_MISS;
	m->tgid = tgid;
	m->start_ns = start_ns;
	bpf_ringbuf_submit(m, 0);
}

/* The two searches are global functions: the verifier checks each once,
 * not once per path through the walk. */

/* The index of p's mapping holding pc, or -1. */
__noinline int unwind_find_map(const struct jp_unwind_proc *p, __u64 pc)
{
	__u32 lo = 0, hi, mid;

	if (!p)
		return -1;
	hi = p->n;
	if (hi > JP_UNWIND_MAX_MAPS)
		hi = JP_UNWIND_MAX_MAPS;
	for (int i = 0; i < 9 && lo < hi; i++) {
		mid = (lo + hi) / 2;
		if (p->maps[mid & (JP_UNWIND_MAX_MAPS - 1)].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || pc >= p->maps[(lo - 1) & (JP_UNWIND_MAX_MAPS - 1)].end)
		return -1;
	return (int)(lo - 1);
}

/* The index in unwind_rows of the row of table [first, first + count) in
 * effect at ELF address off, or -1. */
__noinline int unwind_find_row(__u32 first, __u32 count, __u32 off)
{
	__u32 lo = 0, hi = count, mid, idx;
	const struct jp_unwind_row *r;

	for (int i = 0; i < 24 && lo < hi; i++) {
		mid = (lo + hi) / 2;
		idx = first + mid;
		r = bpf_map_lookup_elem(&unwind_rows, &idx);
		if (!r)
			return -1;
		if (r->pc <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? (int)(first + lo - 1) : -1;
}

/* One frame: records pc, then finds the caller's pc, sp and bp. Returns 1
 * (stop) at the outermost frame, at an address outside the process's
 * executable mappings, or at anything implausible. */
/* What every step of one walk uses, looked up once. */
struct uw_walk {
	struct jp_uw_state *u;
	const struct jp_unwind_proc *p;
};

static long unwind_step(__u64 i, void *arg)
{
	struct uw_walk *w = arg;
	struct jp_uw_state *u = w->u;
	const struct jp_unwind_proc *p = w->p;
	const struct jp_unwind_map *m = NULL;
	const struct jp_unwind_row *r = NULL;
	__u64 pc, look, cfa, ra = 0, bp;
	int mi, ri;
	__u32 n;

	if (!u)
		return 1;
	n = u->n;
	if (n >= JP_MAX_STACK_DEPTH)
		return 1;
	pc = u->pc;
	if (pc < 4096 || pc >= UW_USER_TOP)
		return 1;
	if (!p) {
		/* No tables: frame pointers alone. A return address they give
		 * may be any word of the stack: one into the stack itself or the
		 * heap is not code, and the walk ends there. */
		if (n && ((pc >= u->sp0 && pc - u->sp0 < UW_MAX_FRAME) ||
			  (pc >= u->heap_lo && pc < u->heap_hi)))
			return 1;
		u->st.ips[n] = pc;
		u->n = n + 1;
		u->st.hash = (u->st.hash ^ pc) * 0x100000001b3ULL;
		goto frame_pointer;
	}
	/* A return address points after its call, which may be the last
	 * instruction of a function: look up the call itself. */
	look = n ? pc - 1 : pc;
	/* Consecutive frames are mostly in one binary: try the last mapping
	 * before searching. */
	mi = u->last_map;
	if (mi < 0 || look < p->maps[mi & (JP_UNWIND_MAX_MAPS - 1)].start ||
	    look >= p->maps[mi & (JP_UNWIND_MAX_MAPS - 1)].end)
		mi = unwind_find_map(p, look);
	u->last_map = mi;
	if (mi >= 0)
		m = &p->maps[mi & (JP_UNWIND_MAX_MAPS - 1)];
	/* A pc that is real (the interrupted one, or a return address CFI
	 * found) outside every known mapping is new code (dlopen): the
	 * process's tables are stale. One a frame pointer gave may be junk. */
	if (!m && (!n || u->by_cfi))
		u->unmapped = 1;
	if (!m && n)
		return 1;
	u->st.ips[n] = pc;
	u->n = n + 1;
	u->st.hash = (u->st.hash ^ pc) * 0x100000001b3ULL;
	if (!m)
		return 1;
	if (m->row_count && look - m->bias < 0xffffffffULL) {
		ri = unwind_find_row(m->row_first, m->row_count, (__u32)(look - m->bias));
		if (ri >= 0) {
			__u32 k = ri;

			r = bpf_map_lookup_elem(&unwind_rows, &k);
		}
	}
	if (r && r->kind == JP_UW_END) {
		u->root = 1;
		return 1;
	}
	if (r && (r->kind == JP_UW_CFA_RSP || r->kind == JP_UW_CFA_RBP)) {
		cfa = (r->kind == JP_UW_CFA_RSP ? u->sp : u->bp) + (__s64)r->cfa_off;
		if (cfa <= u->sp || cfa - u->sp > UW_MAX_FRAME)
			return 1;
		if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
			return 1;
		if (r->rbp_off) {
			if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + (__s64)r->rbp_off)))
				return 1;
			u->bp = bp;
		}
		u->sp = cfa;
		u->pc = ra;
		u->by_cfi = 1;
		return ra ? 0 : 1;
	}
	/* No CFI for this code: its frame pointer, if it is one. Each frame
	 * must lie above the last (sp grows with every step), so a frame
	 * pointer that points at itself or back down ends the walk instead of
	 * repeating one frame to the depth limit. */
frame_pointer:
	bp = u->bp;
	if (bp < u->sp || bp - u->sp > UW_MAX_FRAME || (bp & 7))
		return 1;
	{
		__u64 pair[2];

		if (bpf_probe_read_user(pair, sizeof(pair), (void *)bp))
			return 1;
		u->bp = pair[0];
		u->pc = pair[1];
	}
	u->sp = bp + 16;
	u->by_cfi = 0;
	u->fp_frames++;
	return u->pc ? 0 : 1;
}

/* The current task's user stack walked into ustacks: with its process's CFI
 * tables, or by frame pointers alone while it has none (asked for). The id
 * (JP_USTACK_DWARF set), or -1 when the walk could not be stored: the caller
 * falls back to the kernel's frame-pointer walk. */
static __always_inline __s32 dwarf_stack_id(void *ustacks, __u32 tgid, struct jp_counters *c)
{
	__u32 zero = 0, id;
	struct jp_uw_state *u = bpf_map_lookup_elem(&unwind_scratch, &zero);
	const struct jp_unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;
	struct jp_ustack *old;
	struct uw_walk walk;
	__u64 start = process_start();

	if (!u)
		return -1;
	/* The daemon knows start times as /proc gives them: in USER_HZ (100)
	 * ticks. */
	if (p && p->start_ns != start - start % 10000000ULL)
		p = NULL;  /* an older process's tables, for this pid */
	if (!p) {
		/* The frame-pointer walk below stands in (the kernel's own
		 * walk follows any chain, a looping one to the depth limit). */
		c->uw_no_tables++;
		unwind_miss(tgid, start, c);
	}
	/* The user registers saved at kernel entry (interrupt or syscall):
	 * the same whether the sample hit user or kernel code. */
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return -1;
	u->pc = regs->ip;
	u->sp = regs->sp;
	u->bp = regs->bp;
	u->sp0 = regs->sp;
	u->heap_lo = BPF_CORE_READ(task, mm, start_brk);
	u->heap_hi = BPF_CORE_READ(task, mm, brk);
	u->tgid = tgid;
	u->n = 0;
	u->fp_frames = 0;
	u->root = 0;
	u->unmapped = 0;
	u->by_cfi = 0;
	u->last_map = -1;
	u->st.hash = 0xcbf29ce484222325ULL;
	walk.u = u;
	walk.p = p;
	bpf_loop(JP_MAX_STACK_DEPTH, unwind_step, &walk, 0);
	if (u->unmapped)
		unwind_miss(tgid, start, c);
	if (!u->n)
		return -1;
	u->st.n = u->n;
	if (p) {
		c->uw_dwarf++;
		c->uw_frames += u->n;
		c->uw_fp_frames += u->fp_frames;
		if (u->root)
			c->uw_root++;
	}
	id = JP_USTACK_DWARF | ((__u32)(u->st.hash ^ (u->st.hash >> 32)) & JP_USTACK_ID_MASK);
	if (bpf_map_update_elem(ustacks, &id, &u->st, BPF_NOEXIST) == 0)
		return id;
	old = bpf_map_lookup_elem(ustacks, &id);
	if (old && old->hash == u->st.hash)
		return id;
	c->uw_collision++;  /* or the map is full */
	return -1;
}

/* The user stack: CFI walk when the process has tables, else a walk of its
 * frame pointers (dwarf_stack_id both); the kernel's frame-pointer walk only
 * when that walk could not be stored. */
static __always_inline __s32 user_stack_id(void *ctx, void *stacks, void *ustacks, __u32 tgid,
					   struct jp_counters *c)
{
	__s32 id = dwarf_stack_id(ustacks, tgid, c);

	return id >= 0 ? id : stack_id(ctx, stacks, 1, 0, c);
}

/* Reads both stacks into the generation's stack maps; counts failures. */
static __always_inline void read_stacks(struct bpf_perf_event_data *ctx, __u32 gen, __u32 tgid,
					struct jp_counters *c, __s32 *kstack, __s32 *ustack,
					__u32 *flags)
{
	void *stacks = gen ? (void *)&stacks1 : (void *)&stacks0;

	*kstack = -1;
	*ustack = -1;
	if (!in_user_mode(ctx)) {
		*flags |= JP_KEY_KERNEL_MODE;
		*kstack = stack_id(ctx, stacks, 0, 0, c);
	}
	if (is_kthread()) {
		*flags |= JP_KEY_KTHREAD;
		return;
	}
	*ustack = user_stack_id(ctx, stacks, gen ? (void *)&ustacks1 : (void *)&ustacks0, tgid, c);
}

/* The process's name now (its leader's comm, what /proc/PID/comm shows). */
static __always_inline void process_comm(char *comm)
{
	struct task_struct *task = bpf_get_current_task_btf();

	bpf_probe_read_kernel_str(comm, 16, task->group_leader->comm);
}

static __always_inline void count(void *counts, struct jp_count_key *key, struct jp_counters *c)
{
	__u64 one = 1, *v;

	v = bpf_map_lookup_elem(counts, key);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	if (bpf_map_update_elem(counts, key, &one, BPF_NOEXIST) == 0)
		return;
	/* Lost a race with another CPU inserting the same key, or full. */
	v = bpf_map_lookup_elem(counts, key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		c->map_full++;
}

static __always_inline void aggregate(struct bpf_perf_event_data *ctx, struct jp_counters *c,
				      __u32 tgid, __u32 tid, __u32 source, __u32 flags)
{
	__u32 gen = jp_gen & 1;
	struct jp_count_key key = {
		.tgid = tgid,
		.tid = tid,
		.source = source,
		.flags = flags,
		.start_ns = process_start(),
	};

	process_comm(key.comm);
	bpf_get_current_comm(key.tcomm, sizeof(key.tcomm));
	read_stacks(ctx, gen, tgid, c, &key.kstack, &key.ustack, &key.flags);
	count(gen ? (void *)&counts1 : (void *)&counts0, &key, c);
}

static __always_inline void emit_record(struct bpf_perf_event_data *ctx, struct jp_counters *c,
					__u32 tgid, __u32 tid, __u32 source, __u32 flags)
{
	struct jp_msg_sample *m;
	__u32 gen = jp_gen & 1;

	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return;
	}
	m->type = JP_MSG_SAMPLE;
	m->tgid = tgid;
	m->tid = tid;
	m->source = source;
	m->time_ns = bpf_ktime_get_ns();
	m->gen = gen;
	m->flags = flags;
	m->start_ns = process_start();
	__builtin_memset(m->comm, 0, sizeof(m->comm));
	process_comm(m->comm);
	bpf_get_current_comm(m->tcomm, sizeof(m->tcomm));
	read_stacks(ctx, gen, tgid, c, &m->kstack, &m->ustack, &m->flags);
	/* Records are polled at drain time; no wakeup per sample. */
	bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = sample_clock();
	__u32 tgid, tid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 source = (__u32)cookie;
	struct jp_counters *c = get_counters();

	if (!c)
		return 0;
	if ((__u32)bpf_get_current_pid_tgid() == 0) {
		c->idle++;
		return 0;
	}
	if (current_ids(&tgid, &tid)) {
		c->foreign_ns++;
		return 0;
	}
	if (source == JP_SRC_HOST && bpf_map_lookup_elem(&covered, &tid)) {
		c->skipped_covered++;
		return 0;
	}
	c->samples++;
	if (cookie & JP_COOKIE_RECORD)  /* a recording that keeps sample times */
		emit_record(ctx, c, tgid, tid, source, 0);
	else
		aggregate(ctx, c, tgid, tid, source, source == JP_SRC_HOST ? JP_KEY_HOST_FEED : 0);
	sample_timed(t0);
	return 0;
}

/* A record event of source that fires sooner than its minimum gap after
 * the thread's last record: dropped (counted as throttled). */
static __always_inline bool record_throttled(__u32 source, __u32 tid, struct jp_counters *c)
{
	__u64 now = bpf_ktime_get_ns(), *gap, *last;

	gap = bpf_map_lookup_elem(&source_min_gap, &source);
	if (!gap)
		return false;
	last = bpf_map_lookup_elem(&thread_last, &tid);
	if (last && now - *last < *gap) {
		c->throttled++;
		return true;
	}
	bpf_map_update_elem(&thread_last, &tid, &now, BPF_ANY);
	return false;
}

SEC("perf_event")
int sample_thread(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = sample_clock();
	__u32 tgid, tid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 source = (__u32)cookie, flags = 0, *owner;
	struct jp_counters *c = get_counters();
	int ret = (cookie & JP_COOKIE_SIGNAL) ? 1 : 0;

	if (!c)
		return 0;
	if (current_ids(&tgid, &tid)) {
		c->foreign_ns++;
		return 0;
	}
	c->samples++;
	owner = bpf_map_lookup_elem(&covered, &tid);
	if (owner && *owner == source)
		flags |= JP_KEY_HOST_FEED;
	if (cookie & JP_COOKIE_SIGNAL)
		flags |= JP_KEY_AGENT;
	if (!(cookie & JP_COOKIE_RECORD))
		aggregate(ctx, c, tgid, tid, source, flags);
	else if (record_throttled(source, tid, c))
		ret = 0;  /* no record, and no signal either */
	else
		emit_record(ctx, c, tgid, tid, source, flags);
	sample_timed(t0);
	return ret;
}

/* Tells userspace that a thread of a watched tgid was created (type
 * JP_MSG_NEW_THREAD) or that the process exec'd (JP_MSG_EXEC). */
static __always_inline void report_task(__u32 type, __u32 tgid, __u32 tid)
{
	struct jp_msg_new_thread *m;

	if (!bpf_map_lookup_elem(&watched, &tgid))
		return;
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		struct jp_counters *c = get_counters();

		if (c)
			c->ringbuf_full++;
		return;
	}
	m->type = type;
	m->tgid = tgid;
	m->tid = tid;
	m->pad = 0;
	m->time_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(m, 0);
}

SEC("tp_btf/task_newtask")
int BPF_PROG(on_fork, struct task_struct *task, __u64 clone_flags)
{
	__u32 tgid, tid = task->pid, ctid;

	if (!(clone_flags & CLONE_THREAD))
		return 0;
	tgid = task->tgid;
	if (jp_pidns_ino) {
		/* The creator is a thread of the same process: its tgid in our
		 * namespace is the new thread's. The new tid we cannot name
		 * here, so userspace rescans the process. */
		if (current_ids(&tgid, &ctid))
			return 0;
		tid = 0;
	}
	report_task(JP_MSG_NEW_THREAD, tgid, tid);
	return 0;
}

/* After an exec has installed its credentials: the daemon checks again
 * that whoever records the process may still read it (a setuid program). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid, tid;

	if (current_ids(&tgid, &tid))
		return 0;
	/* The old image's tables: the next sample asks for new ones. */
	bpf_map_delete_elem(&unwind_procs, &tgid);
	report_task(JP_MSG_EXEC, tgid, tid);
	return 0;
}

/* ---- off-CPU ----
 * One program on the scheduler switch. At switch-out of a recorded task it
 * runs in that task's context, so it reads both stacks then (into the
 * active generation) and keeps them with the time in offcpu_start. At the
 * task's switch-in it adds the interval to offcounts[gen] when the stacks
 * are of the same drain epoch; an interval that spans a drain cannot be
 * counted there (its stacks are in the other generation, cleared by the
 * drain), so it goes to the ring with its epoch and the daemon, which holds
 * the stacks of blocked tasks across drains, resolves it. Attached only
 * while an off-CPU recording runs. */

#define TASK_RUNNING 0
#define TASK_UNINTERRUPTIBLE 2
#define TASK_DEAD 0x80
/* Kernel frames between the switch and the stack a switch-out reads: the
 * program itself and bpf_trace_run4 (kernel 6.x tp_btf). */
#define OFFCPU_GLUE_FRAMES 2

static __always_inline void offcpu_add(void *counts, struct jp_count_key *key, __u64 ns,
				       struct jp_counters *c)
{
	struct jp_offcpu_value one = { 1, ns }, *v;

	v = bpf_map_lookup_elem(counts, key);
	if (!v) {
		if (bpf_map_update_elem(counts, key, &one, BPF_NOEXIST) == 0)
			return;
		v = bpf_map_lookup_elem(counts, key);  /* lost a race, or full */
		if (!v) {
			c->map_full++;
			return;
		}
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->ns, ns);
}

static __always_inline void offcpu_resume(struct task_struct *next, __u64 now, __u32 epoch,
					  struct jp_counters *c)
{
	__u32 ktid = next->pid;
	struct jp_offcpu_start *p = bpf_map_lookup_elem(&offcpu_start, &ktid);
	struct jp_offcpu_start st;
	struct jp_msg_offcpu *m;
	__u64 ns;

	if (!p)
		return;
	st = *p;
	bpf_map_delete_elem(&offcpu_start, &ktid);
	ns = now - st.ts;
	if (ns < st.threshold_ns) {
		c->offcpu_short++;
		return;
	}
	c->offcpu++;
	if (st.epoch == epoch) {
		struct jp_count_key key = {
			.tgid = st.tgid, .tid = st.tid, .kstack = st.kstack, .ustack = st.ustack,
			.source = st.source, .flags = st.flags, .start_ns = st.start_ns,
		};

		__builtin_memcpy(key.comm, st.comm, sizeof(key.comm));
		__builtin_memcpy(key.tcomm, st.tcomm, sizeof(key.tcomm));

		offcpu_add((epoch & 1) ? (void *)&offcounts1 : (void *)&offcounts0, &key, ns, c);
		return;
	}
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return;
	}
	m->type = JP_MSG_OFFCPU;
	m->tgid = st.tgid;
	m->tid = st.tid;
	m->source = st.source;
	m->ns = ns;
	m->kstack = st.kstack;
	m->ustack = st.ustack;
	m->epoch = st.epoch;
	m->flags = st.flags;
	m->start_ns = st.start_ns;
	__builtin_memcpy(m->comm, st.comm, sizeof(m->comm));
	__builtin_memcpy(m->tcomm, st.tcomm, sizeof(m->tcomm));
	bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
}

static __always_inline void offcpu_leave(void *ctx, bool preempt, struct task_struct *prev,
					 __u64 now, __u32 epoch, struct jp_counters *c)
{
	struct jp_offcpu_start st = { .ts = now, .epoch = epoch, .kstack = -1, .ustack = -1 };
	struct jp_offcpu_target *t;
	void *stacks = (epoch & 1) ? (void *)&stacks1 : (void *)&stacks0;
	__u32 ktid = prev->pid;
	unsigned int state;

	if (!ktid)
		return;  /* idle */
	state = BPF_CORE_READ(prev, __state);
	if (state & TASK_DEAD)
		return;  /* exiting: it will not come back */
	if (current_ids(&st.tgid, &st.tid))  /* current is prev here */
		return;
	t = bpf_map_lookup_elem(&offcpu_targets, &st.tgid);
	if (t) {
		st.source = t->source;
		st.threshold_ns = t->threshold_ns;
	} else if (jp_offcpu_all_source) {
		st.source = jp_offcpu_all_source;
		st.threshold_ns = jp_offcpu_all_threshold_ns;
	} else {
		return;
	}
	st.flags = JP_KEY_KERNEL_MODE;
	if (preempt || state == TASK_RUNNING)
		st.flags |= JP_KEY_OFF_PREEMPTED;
	else if (state & TASK_UNINTERRUPTIBLE)
		st.flags |= JP_KEY_OFF_UNINTERRUPTIBLE;
	st.start_ns = process_start();
	process_comm(st.comm);
	bpf_get_current_comm(st.tcomm, sizeof(st.tcomm));  /* current is prev */
	/* Read from inside the tracepoint: the program's own frame and
	 * bpf_trace_run4 sit above __schedule; the stack starts there. */
	st.kstack = stack_id(ctx, stacks, 0, OFFCPU_GLUE_FRAMES, c);
	if (prev->flags & PF_KTHREAD)
		st.flags |= JP_KEY_KTHREAD;
	else
		st.ustack = user_stack_id(ctx, stacks,
					  (epoch & 1) ? (void *)&ustacks1 : (void *)&ustacks0,
					  st.tgid, c);
	if (bpf_map_update_elem(&offcpu_start, &ktid, &st, BPF_ANY))
		c->offcpu_start_full++;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct jp_counters *c = get_counters();
	__u64 now = bpf_ktime_get_ns();
	__u32 epoch = jp_gen;

	if (!c)
		return 0;
	offcpu_resume(next, now, epoch, c);
	offcpu_leave(ctx, preempt, prev, now, epoch, c);
	return 0;
}
