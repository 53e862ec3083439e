/* The user-stack walker: a process's stack walked with the CFI tables the
 * daemon compiled from its binaries (daemon/unwind/: unwtab.c writes
 * unwind_procs and unwind_rows), or by frame pointers alone while it has
 * none. See docs/architecture.md, "User stacks: CFI unwinding". */
#include "jprof.bpf.h"

/* Every loaded table's rows, each table a contiguous range. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 21);
	__type(key, __u32);
	__type(value, struct jp_unwind_row);
} unwind_rows SEC(".maps");

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
	const struct jp_hs_proc *hs;  /* the process's JVM, if the daemon knows one */
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
	/* Java code: frames the CFI tables know nothing of (hotspot.bpf.c). */
	if (w->hs && hs_in_code(w->hs, pc))
		return hs_java_step(u, w->hs) ? 1 : 0;
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
	look = n && !u->interrupted ? pc - 1 : pc;
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
	u->st.ips[n] = pc | (u->interrupted && n ? JP_IP_INTERRUPTED : 0);
	u->interrupted = 0;
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
	if (r && r->kind == JP_UW_SIGNAL) {
		/* The kernel's signal frame on the stack: the interrupted code's
		 * registers, which may be on another stack (sigaltstack). */
		__u64 ctx[2];

		if (bpf_probe_read_user(ctx, sizeof(ctx), (void *)(u->sp + (__s64)r->cfa_off)) ||
		    bpf_probe_read_user(&bp, sizeof(bp), (void *)(u->sp + (__s64)r->rbp_off)))
			return 1;
		if (ctx[0] < 4096 || ctx[0] >= UW_USER_TOP || ctx[1] < 4096 || ctx[1] >= UW_USER_TOP)
			return 1;
		u->st.ips[n] |= JP_IP_SIGNAL;
		u->sp = ctx[0];
		u->pc = ctx[1];
		u->bp = bp;
		u->by_cfi = 1;
		u->interrupted = 1;
		return 0;
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

/* The current task's user stack walked into ustacks[gen]: with its process's
 * CFI tables, or by frame pointers alone while it has none (asked for). The
 * id (JP_USTACK_DWARF set), or -1 when the walk could not be stored: the
 * caller falls back to the kernel's frame-pointer walk. A global function:
 * the sampling and off-CPU programs both call it, and the verifier checks
 * it once. */
__noinline __s32 dwarf_stack_id(__u32 gen, __u32 tgid, struct jp_counters *c)
{
	void *ustacks = gen ? (void *)&ustacks1 : (void *)&ustacks0;
	__u32 zero = 0, id;
	struct jp_uw_state *u = bpf_map_lookup_elem(&unwind_scratch, &zero);
	const struct jp_unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	const struct jp_hs_proc *hs = bpf_map_lookup_elem(&hs_procs, &tgid);
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;
	struct jp_ustack *old;
	struct uw_walk walk;
	__u64 start = process_start();

	if (!u || !c)
		return -1;
	u->no_tables = 0;
	/* The daemon knows start times as /proc gives them: in USER_HZ (100)
	 * ticks. */
	if (p && p->start_ns != start - start % 10000000ULL)
		p = NULL;  /* an older process's tables, for this pid */
	if (hs && hs->start_ns != start - start % 10000000ULL)
		hs = NULL;
	if (p) {
		/* Marks its tables in use (unwtab_cold.c); one store a second
		 * at most, so the entry's cache line is not written at every
		 * sample. */
		__u32 now_s = (__u32)(bpf_ktime_get_boot_ns() / 1000000000ULL);

		if (p->sampled_s != now_s)
			((struct jp_unwind_proc *)p)->sampled_s = now_s;
	}
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
	u->ip0 = regs->ip;
	u->bp0 = regs->bp;
	u->no_tables = !p;
	u->heap_lo = BPF_CORE_READ(task, mm, start_brk);
	u->heap_hi = BPF_CORE_READ(task, mm, brk);
	u->tgid = tgid;
	u->n = 0;
	u->fp_frames = 0;
	u->root = 0;
	u->unmapped = 0;
	u->by_cfi = 0;
	u->interrupted = 0;
	u->last_map = -1;
	u->hs_frames = 0;
	u->hs_lost = 0;
	u->st.hash = 0xcbf29ce484222325ULL;
	walk.u = u;
	walk.p = p;
	walk.hs = hs;
	bpf_loop(JP_MAX_STACK_DEPTH, unwind_step, &walk, 0);
	if (u->unmapped)
		unwind_miss(tgid, start, c);
	if (u->hs_frames) {
		c->hs_walks++;
		c->hs_frames += u->hs_frames;
		c->hs_lost += u->hs_lost;
	}
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

/* Right after dwarf_stack_id found no tables for the current process: the
 * sample key as a ring record with the user registers and the top of the
 * user stack (struct jp_msg_ustack_copy), for the daemon to walk with the
 * same rows once the tables exist (perf's dwarf mode, for these samples
 * only). 1 when sent: the record stands for the sample; 0: the caller
 * counts it as usual, with the frame-pointer stack. */
__noinline int young_copy(struct jp_count_key *key, __u32 gen, struct jp_counters *c)
{
	__u32 zero = 0;
	struct jp_uw_state *u = bpf_map_lookup_elem(&unwind_scratch, &zero);
	struct task_struct *task = bpf_get_current_task_btf();
	struct jp_msg_ustack_copy *m;
	__u64 top, len = JP_USTACK_COPY_BYTES;

	if (!u || !key || !c || !u->no_tables)
		return 0;
	u->no_tables = 0;
	/* A JVM's walk through its Java frames is worth more than what the
	 * daemon's walk of the copy can give (CFI knows no JIT code). */
	if (u->hs_frames)
		return 0;
	/* The main thread's frames end below start_stack (argv and the
	 * environment above it): no more than that. */
	top = BPF_CORE_READ(task, mm, start_stack);
	if (u->sp0 < top && top - u->sp0 < len)
		len = top - u->sp0;
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return 0;
	}
	if (len > JP_USTACK_COPY_BYTES)
		len = JP_USTACK_COPY_BYTES;
	if (bpf_probe_read_user(m->stack, len, (void *)u->sp0)) {
		/* A thread's stack may end sooner (the next mapping is not
		 * readable): the rest of sp's page at least. */
		len = 4096 - (u->sp0 & 4095);
		if (len > JP_USTACK_COPY_BYTES)
			len = JP_USTACK_COPY_BYTES;
		if (bpf_probe_read_user(m->stack, len, (void *)u->sp0)) {
			c->young_copy_err++;
			bpf_ringbuf_discard(m, BPF_RB_NO_WAKEUP);
			return 0;
		}
	}
	m->type = JP_MSG_USTACK_COPY;
	m->gen = gen;
	__builtin_memcpy(&m->key, key, sizeof(m->key));
	m->time_ns = bpf_ktime_get_ns();
	m->ip = u->ip0;
	m->sp = u->sp0;
	m->bp = u->bp0;
	m->len = (__u32)len;
	m->pad = 0;
	c->young_copied++;
	bpf_ringbuf_submit(m, 0);
	return 1;
}
