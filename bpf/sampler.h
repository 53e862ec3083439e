/* Types shared by the sampler's BPF files (bpf/<collector>.bpf.c) and the daemon (daemon/collect/sampler.c).
 * Only __u32/__u64/__s32, explicit padding; sizes are pinned with
 * _Static_assert on the userspace side. */
#ifndef JPROF_BPF_SAMPLER_H
#define JPROF_BPF_SAMPLER_H

#define JP_MAX_STACK_DEPTH 127

/* Source id 0: the always-on host view (per-CPU events). Recording sessions
 * use their own ids >= 1. */
#define JP_SRC_HOST 0

/* bpf_cookie of an attached perf event: low 32 bits = source id, high bits: */
#define JP_COOKIE_THREAD (1ULL << 32)   /* per-thread event (pid=tid, cpu=-1) */
#define JP_COOKIE_RECORD (1ULL << 33)   /* emit a ring record per sample (its time kept; joined
					 * with agent data when JP_COOKIE_SIGNAL is set too) */
#define JP_COOKIE_SIGNAL (1ULL << 34)   /* return 1: kernel delivers the overflow signal */

/* jp_count_key.flags */
#define JP_KEY_HOST_FEED 1u    /* this per-thread sample also stands for the host view */
#define JP_KEY_KERNEL_MODE 2u  /* the sample interrupted kernel code */
#define JP_KEY_KTHREAD 4u      /* kernel thread: no user stack to read */
#define JP_KEY_AGENT 8u        /* record of an agent's thread (its event signals the agent):
				* joined with the agent's Java frames */
/* Off-CPU entries: how the task left the CPU (neither: an interruptible sleep). */
#define JP_KEY_OFF_PREEMPTED 16u       /* still runnable: preempted, waited for a CPU */
#define JP_KEY_OFF_UNINTERRUPTIBLE 32u /* TASK_UNINTERRUPTIBLE (disk I/O, some locks) */

struct jp_count_key {
	__u32 tgid;
	__u32 tid;
	__s32 kstack;   /* stack id in stacks[gen], or < 0 (none / failed) */
	__s32 ustack;
	__u32 source;
	__u32 flags;
	__u64 start_ns;  /* when the process (thread group leader) started, CLOCK_BOOTTIME:
			  * with tgid it names one process, whatever reuses the pid later */
	char comm[16];   /* the process's name (its leader's comm) when sampled: a
			  * process gone by the drain keeps it */
	char tcomm[16];  /* the thread's name when sampled */
};

/* ---- DWARF unwinding (daemon/unwind/unwtab.c builds the tables; bpf/unwind.bpf.c walks them) ----
 * A user stack id with this bit names an entry of ustacks[gen] (a stack the
 * BPF unwinder walked with the daemon's CFI tables), not of stacks[gen]. */
#define JP_USTACK_DWARF 0x40000000
#define JP_USTACK_ID_MASK 0x3fffffff

/* How a row recovers the caller's frame. CFA = the canonical frame
 * address (the caller's rsp); the return address is at CFA - 8. */
#define JP_UW_FP 0       /* no usable CFI here: frame pointers for this frame */
#define JP_UW_CFA_RSP 1  /* CFA = rsp + cfa_off */
#define JP_UW_CFA_RBP 2  /* CFA = rbp + cfa_off */
#define JP_UW_END 3      /* the return address is undefined: the outermost frame */
/* A signal frame (the return trampoline, __restore_rt): the interrupted
 * context's rsp is saved at sp + cfa_off, its rip 8 bytes after, its rbp
 * at sp + rbp_off. */
#define JP_UW_SIGNAL 4

/* Tags on user frames the CFI walk stored (never on valid user addresses,
 * which are below 2^47): the signal trampoline's frame, and the frame a
 * signal interrupted (its pc is no return address: looked up as is). */
#define JP_IP_SIGNAL (1ULL << 63)
#define JP_IP_INTERRUPTED (1ULL << 62)
/* A Java frame of a HotSpot JVM the BPF walk stepped through (bpf/hotspot.bpf.c):
 * an interpreted frame is stored as its Method* with this tag (no pc: the
 * interpreter's code names nothing); a compiled frame is its plain pc, in
 * the JVM's code heap (named by the nmethod there at drain time). */
#define JP_IP_JAVA_METHOD (1ULL << 61)

/* ---- HotSpot JVMs (daemon/hotspot/hs_proc.c writes hs_procs; bpf/hotspot.bpf.c walks) ---- */
#define JP_HS_MAX_HEAPS 4
#define JP_HS_MAX_PROCS 64       /* JVMs the walk knows at once */

/* One code heap: committed code [low, high), a segment map byte per
 * 2^log2 bytes of it at segmap. */
struct jp_hs_heap {
	__u64 low;
	__u64 high;
	__u64 segmap;
	__u32 log2;
	__u32 pad;
};

/* Value of hs_procs (key: tgid as the daemon sees it). Offsets in bytes,
 * the interpreter frame's slots in words from rbp. */
struct jp_hs_proc {
	__u64 start_ns;          /* as jp_unwind_proc.start_ns (10 ms ticks) */
	struct jp_hs_heap heaps[JP_HS_MAX_HEAPS];
	__u64 interp_lo;         /* the Interpreter blob's code */
	__u64 interp_hi;
	__u32 nheaps;
	__s32 hblock_size;       /* sizeof(HeapBlock): the CodeBlob follows */
	__s32 blob_frame_size;   /* CodeBlob::_frame_size (int, words) */
	__s32 iframe_method;     /* interpreter frame: Method* at rbp + 8 * this */
	__s32 iframe_sender_sp;  /* ... the caller's sp at rbp + 8 * this */
	__u32 pad;
};

/* One row of a binary's table, in effect from pc up to the next row's pc.
 * pc is an address of the ELF file (its p_vaddr space). */
struct jp_unwind_row {
	__u32 pc;
	__s32 cfa_off;
	__s16 rbp_off;   /* caller's rbp saved at CFA + rbp_off; 0: rbp unchanged */
	__u8 kind;       /* JP_UW_* */
	__u8 pad;
};

#define JP_UNWIND_MAX_MAPS 256

/* An executable mapping of a process. Its table is rows
 * [row_first, row_first + row_count) of unwind_rows; row_count 0: none
 * (JIT code, the vdso, a binary without CFI): frame pointers. */
struct jp_unwind_map {
	__u64 start;
	__u64 end;
	__u64 bias;      /* ELF address = pc - bias */
	__u32 row_first;
	__u32 row_count;
};

/* Value of unwind_procs (key: tgid as the daemon sees it). */
struct jp_unwind_proc {
	__u64 start_ns;  /* as jp_count_key.start_ns rounded down to a 10 ms tick
			  * (/proc's precision): a reused pid does not match */
	__u32 n;         /* maps in use, sorted by start */
	__u32 sampled_s; /* CLOCK_BOOTTIME second of its last CFI walk, written
			  * by BPF (0: none since the daemon wrote the entry):
			  * the daemon takes rows back from tables of processes
			  * not sampled for a while */
	struct jp_unwind_map maps[JP_UNWIND_MAX_MAPS];
};

/* Value of ustacks0/1: n frames, leaf first (what follows is stale), and
 * the hash the id was taken from (two stacks whose ids collide differ here). */
struct jp_ustack {
	__u64 ips[JP_MAX_STACK_DEPTH];
	__u64 hash;
	__u32 n;
	__u32 pad;
};

/* Per-CPU counters; userspace sums them. */
struct jp_counters {
	__u64 samples;          /* every program run that was not idle */
	__u64 idle;             /* pid 0 on a per-CPU event */
	__u64 skipped_covered;  /* host event skipped: the thread has its own event */
	__u64 kstack_err;       /* kernel stack read failed (not collisions) */
	__u64 ustack_err;       /* user stack read failed (not collisions) */
	__u64 collision;        /* stack map bucket held another stack */
	__u64 map_full;         /* count map full: sample dropped */
	__u64 ringbuf_full;     /* ring reserve failed: record dropped */
	__u64 throttled;        /* record event fired faster than its source allows */
	__u64 foreign_ns;       /* task outside the daemon's pid namespace: not stored */
	__u64 offcpu;           /* off-CPU intervals counted (at or above their threshold) */
	__u64 offcpu_short;     /* off-CPU intervals below their recording's threshold */
	__u64 offcpu_start_full;  /* switch-out not recorded: the blocked-task map was full */
	__u64 uw_dwarf;         /* user stacks walked with CFI tables */
	__u64 uw_no_tables;     /* user stacks of a process without tables yet: frame pointers */
	__u64 uw_root;          /* ... of which reached the outermost frame (CFI said so) */
	__u64 uw_frames;        /* frames in those stacks */
	__u64 uw_fp_frames;     /* ... of which found by frame pointers (no CFI for that code) */
	__u64 uw_collision;     /* DWARF stack id held another stack: frame-pointer stack kept */
	__u64 young_copied;     /* samples without tables sent with a copy of their user stack */
	__u64 young_copy_err;   /* ... whose stack could not be read: frame-pointer stack kept */
	__u64 hs_walks;         /* user stacks that met a known JVM's code heap */
	__u64 hs_frames;        /* Java frames (compiled, interpreted, stubs) they stepped */
	__u64 hs_lost;          /* walks that stopped in the code heap (no blob, bad frame) */
};

/* BPF time of each sample (sample_cpu / sample_thread runs that counted a
 * sample: not idle, foreign or covered ones), from program entry to its
 * end, measured by the programs themselves. Linear 1 us buckets: bucket i
 * holds [i, i + 1) us, the last one everything from JP_HIST_BUCKETS - 1 us
 * up. Linear rather than log-linear because the interesting range (a
 * frame-pointer sample at 1-3 us, a DWARF walk at 5-30 us, the 10 us
 * target) needs the same fine steps all the way, and a division is all the
 * verifier has to see. Per CPU; userspace sums them. */
#define JP_HIST_BUCKETS 64
#define JP_HIST_BUCKET_NS 1000
/* sample_hist's entries: every sample, and those among them whose user
 * stack walk stepped Java frames (bpf/hotspot.bpf.c). */
#define JP_HIST_ALL 0
#define JP_HIST_JAVA 1

struct jp_sample_hist {
	__u64 buckets[JP_HIST_BUCKETS];
	__u64 sum_ns;           /* exact total of the times counted */
};

/* Off-CPU. A recording's target: a tgid (map offcpu_targets) or, for a
 * whole-host recording, the globals jp_offcpu_all_*. */
struct jp_offcpu_target {
	__u32 source;
	__u32 pad;
	__u64 threshold_ns;     /* shorter intervals are counted as offcpu_short only */
};

/* A recorded task off the CPU, keyed by its kernel tid: written at its
 * switch-out (its own context, so both stacks can be read), consumed at
 * its switch-in. The stack ids belong to the drain epoch `epoch`. */
struct jp_offcpu_start {
	__u64 ts;               /* switch-out, CLOCK_MONOTONIC */
	__u64 threshold_ns;
	__u64 start_ns;         /* as jp_count_key.start_ns */
	__u32 tgid;             /* ids as the daemon sees them */
	__u32 tid;
	__u32 source;
	__u32 flags;            /* JP_KEY_* */
	__s32 kstack;
	__s32 ustack;
	__u32 epoch;            /* jp_gen at switch-out */
	__u32 pad;
	char comm[16];          /* as jp_count_key.comm */
	char tcomm[16];
};

/* Value of the off-CPU count maps (key: struct jp_count_key). */
struct jp_offcpu_value {
	__u64 count;
	__u64 ns;
};

/* Ring buffer messages. */
enum jp_msg_type {
	JP_MSG_NEW_THREAD = 1,
	JP_MSG_SAMPLE = 2,
	JP_MSG_EXEC = 3,     /* struct jp_msg_new_thread: a watched tgid exec'd */
	JP_MSG_OFFCPU = 4,   /* struct jp_msg_offcpu: an interval that spanned a drain */
	JP_MSG_UNWIND_MISS = 5,  /* struct jp_msg_unwind_miss: tables wanted */
	JP_MSG_USTACK_COPY = 6,  /* struct jp_msg_ustack_copy: a sample to unwind later */
};

/* The most user stack a sample of a process without tables carries (from
 * its sp up): twice perf's default of 8 KiB, for compilers' recursive
 * parsers; walks that run off the copy are counted
 * (status.sampler.unwind.young.short_copy). */
#define JP_USTACK_COPY_BYTES 16384

/* A host-view sample of a process that has no
 * unwind tables in BPF yet: everything its count key holds, the registers
 * the CFI walk starts from, and the top of its user stack. It stands for the
 * sample: not counted in counts0/1. The daemon unwinds it once the
 * process's tables are loaded (daemon/unwind/young.c), or delivers the
 * frame-pointer stack (key.ustack) when they never come. */
struct jp_msg_ustack_copy {
	__u32 type;      /* JP_MSG_USTACK_COPY */
	__u32 gen;       /* which stack maps key's ids refer to */
	struct jp_count_key key;
	__u64 time_ns;   /* CLOCK_MONOTONIC */
	__u64 ip, sp, bp;  /* the interrupted user registers */
	__u32 len;       /* bytes of stack[] read from sp up */
	__u32 pad;
	__u8 stack[JP_USTACK_COPY_BYTES];
};

/* A sampled process has no unwind tables, or a pc outside the mappings its
 * tables know (dlopen). At most one per process per 250 ms. */
struct jp_msg_unwind_miss {
	__u32 type;      /* JP_MSG_UNWIND_MISS */
	__u32 tgid;
	__u64 start_ns;
};

struct jp_msg_new_thread {
	__u32 type;      /* JP_MSG_NEW_THREAD */
	__u32 tgid;
	__u32 tid;       /* 0: unknown (daemon in a pid namespace): rescan the process */
	__u32 pad;
	__u64 time_ns;   /* CLOCK_MONOTONIC */
};

struct jp_msg_sample {
	__u32 type;      /* JP_MSG_SAMPLE */
	__u32 tgid;
	__u32 tid;
	__u32 source;
	__u64 time_ns;   /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__s32 kstack;
	__s32 ustack;
	__u32 gen;       /* which stack map the ids refer to */
	__u32 flags;
	__u64 start_ns;  /* as jp_count_key.start_ns */
	char comm[16];
	char tcomm[16];
};

/* An off-CPU interval whose switch-out was in an earlier drain epoch than
 * its switch-in: its stack ids are those of `epoch`, which the daemon still
 * holds (see collect/sampler_offcpu.c). Rare: once per blocked task per drain. */
struct jp_msg_offcpu {
	__u32 type;      /* JP_MSG_OFFCPU */
	__u32 tgid;
	__u32 tid;
	__u32 source;
	__u64 ns;        /* time off the CPU */
	__s32 kstack;
	__s32 ustack;
	__u32 epoch;
	__u32 flags;
	__u64 start_ns;
	char comm[16];
	char tcomm[16];
};

#endif
