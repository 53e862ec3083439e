/* What the BPF files of the sampler share; bpf/sampler.h is what they share
 * with the daemon. The sampler is one BPF object (one skeleton) linked by
 * `bpftool gen object` from a file per collector:
 *   maps.bpf.c        the maps and variables several files use (defined
 *                     there; the others see them through JP_EXTERN)
 *   sample.bpf.c      perf-event sampling: sample_cpu, sample_thread
 *   unwind.bpf.c      the user-stack walker (CFI tables, frame pointers)
 *   offcpu.bpf.c      the scheduler switch: offcpu_switch
 *   procevents.bpf.c  new threads and execs: on_fork, on_exec
 *   hotspot.bpf.c     Java frames of HotSpot JVMs, for unwind.bpf.c's walk
 * A new unwinder or collector is a new file beside these (and a line in
 * CMakeLists.txt's jprof_bpf_skeleton(sampler ...)).
 *
 * A map used by one file only is defined in it. Extern maps repeat the
 * whole definition: libbpf's linker matches them field by field. */
#ifndef JPROF_BPF_H
#define JPROF_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sampler.h"

#define PF_KTHREAD 0x00200000
#define CLONE_THREAD 0x00010000
#define EEXIST 17

#ifdef JP_DEFINE_SHARED
#define JP_EXTERN
#else
#define JP_EXTERN extern
#endif

/* Drain epoch, written by userspace: its low bit selects the active
 * generation; off-CPU intervals remember it to know where their stacks are. */
JP_EXTERN volatile __u32 jp_gen;
/* A whole-host off-CPU recording (source 0: none). */
JP_EXTERN volatile __u32 jp_offcpu_all_source;
JP_EXTERN volatile __u64 jp_offcpu_all_threshold_ns;
/* The daemon's pid namespace (nsfs dev and inode), set before any event is
 * attached when the daemon does not run in the initial one (a container):
 * then ids are taken in that namespace, which is what its /proc speaks. */
JP_EXTERN volatile __u64 jp_pidns_dev;
JP_EXTERN volatile __u64 jp_pidns_ino;

struct stacks_map {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, JP_MAX_STACK_DEPTH * sizeof(__u64));
};

/* Kernel stacks and frame-pointer user stacks, by generation. */
JP_EXTERN struct stacks_map stacks0 SEC(".maps");
JP_EXTERN struct stacks_map stacks1 SEC(".maps");

JP_EXTERN struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_counters);
} counters SEC(".maps");

/* Messages to the daemon (records, new threads, execs, table requests). */
JP_EXTERN struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* tgid -> its unwind tables (written by daemon/unwind/unwtab.c). */
JP_EXTERN struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct jp_unwind_proc);
} unwind_procs SEC(".maps");

/* unwind.bpf.c: the walk in progress on this CPU (too big for the BPF stack). */
struct jp_uw_state {
	__u64 pc, sp, bp;
	__u32 tgid;
	__u32 n;
	__u32 fp_frames;
	__u32 root;      /* the walk ended at a frame CFI calls outermost */
	__u32 unmapped;  /* ... or at an address outside the known mappings */
	__u32 by_cfi;    /* pc came from a CFI row (trusted), not a frame pointer */
	__u32 interrupted;  /* pc came from a signal frame: not a return address */
	__s32 last_map;  /* the mapping of the last frame, or -1 */
	__u32 hs_frames; /* Java frames stepped (hotspot.bpf.c) */
	__u64 sp0;       /* the interrupted sp: the stack starts there */
	__u64 ip0, bp0;  /* ... and the interrupted ip and bp (young_copy) */
	__u32 no_tables; /* the process had none: young_copy may send the stack */
	__u32 hs_lost;   /* a Java walk stopped in the code heap */
	__u64 heap_lo, heap_hi;  /* the brk heap: no code there */
	struct jp_ustack st;
};

/* The walk's state per CPU (unwind.bpf.c; sample.bpf.c reads hs_frames). */
JP_EXTERN struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_uw_state);
} unwind_scratch SEC(".maps");

/* tgid -> its JVM's code heaps and offsets (written by daemon/hotspot/hs_proc.c). */
JP_EXTERN struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JP_HS_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct jp_hs_proc);
} hs_procs SEC(".maps");

/* hotspot.bpf.c: true when pc lies in one of hp's code heaps. */
static __always_inline int hs_in_code(const struct jp_hs_proc *hp, __u64 pc)
{
	for (int i = 0; i < JP_HS_MAX_HEAPS; i++)
		if (i < hp->nheaps && pc >= hp->heaps[i].low && pc < hp->heaps[i].high)
			return 1;
	return 0;
}

/* hotspot.bpf.c: one Java frame at u->pc (in hp's code heap) recorded, and
 * the caller's pc, sp and bp found. 0: go on, 1: stop. */
int hs_java_step(struct jp_uw_state *u, const struct jp_hs_proc *hp);

/* unwind.bpf.c: the current task's user stack walked into the ustacks map
 * of generation gen (see there). */
__s32 dwarf_stack_id(__u32 gen, __u32 tgid, struct jp_counters *c);
/* unwind.bpf.c: after dwarf_stack_id, a sample of a process without tables
 * sent with a copy of its user stack instead of counted (1). */
int young_copy(struct jp_count_key *key, __u32 gen, struct jp_counters *c);

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

/* The process's name now (its leader's comm, what /proc/PID/comm shows). */
static __always_inline void process_comm(char *comm)
{
	struct task_struct *task = bpf_get_current_task_btf();

	bpf_probe_read_kernel_str(comm, 16, task->group_leader->comm);
}

/* The user stack: CFI walk when the process has tables, else a walk of its
 * frame pointers (dwarf_stack_id both); the kernel's frame-pointer walk only
 * when that walk could not be stored. */
static __always_inline __s32 user_stack_id(void *ctx, __u32 gen, __u32 tgid,
					   struct jp_counters *c)
{
	__s32 id = dwarf_stack_id(gen, tgid, c);

	return id >= 0 ? id : stack_id(ctx, gen ? (void *)&stacks1 : (void *)&stacks0, 1, 0, c);
}

#endif
