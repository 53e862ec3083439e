/* The signal handler and the ring it writes.
 *
 * Everything reachable from ring_on_signal is async-signal-safe: atomics on
 * static or shared memory, clock_gettime, syscall(SYS_gettid), the JavaVM's
 * GetEnv lookup and AsyncGetCallTrace (made for this), and for a native pc
 * libgcc's _Unwind_Backtrace (ring_retry_native: it finds unwind tables with
 * glibc's lock-free _dl_find_object, and takes a lock only in a process that
 * registered tables with __register_frame, which HotSpot does not). No
 * malloc, no locks, no stdio, no thread-local storage of this library (a
 * dlopen'd library's TLS may be allocated lazily, which is not signal-safe).
 */
#include "ring.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk.h"
#include "jprof_agent.h"
#include "vmstructs.h"
#include "wall.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

/* AsyncGetCallTrace's interface (HotSpot, not in any JDK header). */
struct asgct_frame {
	jint lineno;           /* bci, or -3 for a native method */
	jmethodID method_id;
};

struct asgct_trace {
	JNIEnv *env;
	jint num_frames;       /* out: frames, or < 0 error */
	struct asgct_frame *frames;
};

typedef void (*asgct_fn)(struct asgct_trace *trace, jint depth, void *ucontext);

/* ASGCT writes straight into the slot's frames. */
_Static_assert(sizeof(struct asgct_frame) == sizeof(struct jpring_frame), "frame size");
_Static_assert(offsetof(struct asgct_frame, lineno) == offsetof(struct jpring_frame, bci),
	       "frame bci");
_Static_assert(offsetof(struct asgct_frame, method_id) ==
	       offsetof(struct jpring_frame, method_id), "frame method_id");
_Static_assert(sizeof(jmethodID) == sizeof(uint64_t), "jmethodID is 64-bit");

struct ring_state {
	unsigned char *base;   /* the mapping: header page, then slots */
	size_t bytes;
	uint32_t nslots;       /* our validated copy, never reread from the ring */
};

static asgct_fn ring_asgct;
static bool ring_recover;        /* retry failed walks; set once before any handler */

/* Each thread's root: the outermost method of its last whole ASGCT walk
 * (not retried, not cut at JPRING_MAX_FRAMES), which a retried walk must
 * reach (ring_root_ok). One slot per tid modulo RING_ROOTS, overwritten by
 * whichever thread of that residue walked last: a slot holds a root only
 * for the tid it names. No TLS (see above): a static table, lock-free. */
#define RING_ROOTS 16384u
struct ring_root {
	uint32_t tid;
	uint32_t seq;            /* odd while written */
	uint64_t method;
};
static struct ring_root ring_roots[RING_ROOTS];
static struct ring_state ring_slot_state;       /* owned by the activating thread */
static struct ring_state *ring_active;          /* what handlers see; NULL = off */
static unsigned long ring_inflight;             /* handlers inside the ring */
static unsigned char ring_armed[RING_MAX_FD];   /* atomic bytes: enum ring_fd_state */
static uint64_t ring_interval_ns;               /* the recording's period, for ring_end_phase */
static struct sigaction ring_prev[_NSIG];
static pthread_mutex_t ring_install_lock = PTHREAD_MUTEX_INITIALIZER;

/* Measurement only (JPROF_AGENT_RETRY_STATS=FILE, appended at the JVM's
 * exit): per failed ASGCT answer (-5, -6) and where the pc was, how the
 * retry ended (enum ring_how), and the first RING_KEEP walks that stayed
 * failed: pc, the code bytes at it, the words at sp, the blob holding pc.
 * Counters and a fixed array claimed by an atomic index: signal-safe. */
enum ring_how {
	RING_HOW_FAILED, RING_HOW_SPILL, RING_HOW_BARRIER, RING_HOW_SP, RING_HOW_SP1,
	RING_HOW_PUSHED, RING_HOW_NOT_ROOT, RING_HOW_OFF, RING_HOW_NATIVE, RING_HOW_N,
};
/* Where: a stub kind (below JPRING_STUB_KINDS), compiled code, a blob of
 * the code cache the code map does not know, outside the code cache (libjvm,
 * libc: named at exit with dladdr). */
enum {
	RING_AT_COMPILED = JPRING_STUB_KINDS, RING_AT_BLOB, RING_AT_NATIVE, RING_AT_N,
};
#define RING_KEEP 512
struct ring_failed {
	int32_t code;
	uint32_t at;
	uint32_t frame_words;
	uintptr_t pc, blob;
	unsigned char bytes[16];
	uintptr_t sp_words[4];
	uintptr_t frame_ra;
	uint64_t frame_ra_tag;
};
static char ring_stats_path[256];
static unsigned long ring_stats[2][RING_AT_N][RING_HOW_N];
static unsigned long ring_short[2][RING_AT_N][RING_HOW_N];   /* recovered, 2 frames or fewer */
static unsigned long ring_root_changed;   /* whole ASGCT walks not ending at the thread's root */
static struct ring_failed ring_kept[RING_KEEP];
static unsigned ring_nkept;
/* Why an unwind of native frames gave up. */
enum {
	RING_NATIVE_NO_SIGNAL_FRAME, RING_NATIVE_NO_JAVA, RING_NATIVE_BAD_CFA, RING_NATIVE_ASGCT,
	RING_NATIVE_STUB_STEPPED,  /* not a failure: walked over a runtime stub */
	RING_NATIVE_N,
};
static unsigned long ring_native_failed[RING_NATIVE_N];


static const char *ring_at_name(unsigned at)
{
	static const char *const names[] = {
		"unknown", "stub", "vtable", "itable", "mh_adapter", "call_stub", "i2c_c2i",
		"interpreter", "arraycopy", "resolve", "vtable_itable", "invokeBasic",
		"linkToVirtual", "linkToStatic", "linkToSpecial", "linkToInterface",
		"linkToNative", "compiled", "blob_unannounced", "native",
	};
	_Static_assert(sizeof(names) / sizeof(names[0]) == RING_AT_N, "names");
	return at < RING_AT_N ? names[at] : "?";
}

__attribute__((destructor)) static void ring_write_stats(void)
{
	static const char *const how[RING_HOW_N] = {
		"failed", "spill", "barrier", "sp", "sp+1", "pushed", "not_root", "recover_off",
		"native",
	};
	unsigned n = __atomic_load_n(&ring_nkept, __ATOMIC_ACQUIRE);
	/* Appended: every JVM of a bench run writes to the same file. */
	FILE *out = ring_stats_path[0] ? fopen(ring_stats_path, "ae") : NULL;

	if (!out)
		return;
	for (int c = 0; c < 2; c++)
		for (unsigned at = 0; at < RING_AT_N; at++)
			for (int h = 0; h < RING_HOW_N; h++)
				if (ring_stats[c][at][h])
					fprintf(out, "pid %d code %d at %s how %s n %lu short %lu\n",
						(int)getpid(),
						c ? JPRING_NOT_WALKABLE_JAVA : JPRING_UNKNOWN_JAVA,
						ring_at_name(at), how[h], ring_stats[c][at][h],
						ring_short[c][at][h]);
	fprintf(out, "pid %d whole walks with another root %lu\n", (int)getpid(), ring_root_changed);
#if defined(__x86_64__)
	fprintf(out, "pid %d native unwinds failed: no signal frame %lu, no Java frame %lu, "
		"bad CFA %lu, ASGCT %lu; walked over a runtime stub %lu\n", (int)getpid(),
		ring_native_failed[0], ring_native_failed[1], ring_native_failed[2],
		ring_native_failed[3], ring_native_failed[4]);
#endif
	for (unsigned i = 0; i < n && i < RING_KEEP; i++) {
		const struct ring_failed *f = &ring_kept[i];
		Dl_info di = { 0 };
		char name[64] = "";

		/* CodeBlob::_name: the first word of the blob's header that
		 * points at a printable string (diagnostic: a guess is fine). */
		for (unsigned w = 1; f->blob && w < 12 && !name[0]; w++) {
			uintptr_t p = 0;
			char got[sizeof(name)];

			if (!agent_peek(f->blob + w * sizeof(uintptr_t), &p, sizeof(p)) ||
			    !agent_peek(p, got, sizeof(got)))
				continue;
			got[sizeof(got) - 1] = 0;
			size_t len = strlen(got);
			bool ok = len >= 3;

			for (size_t k = 0; k < len; k++)
				ok = ok && got[k] >= 0x20 && got[k] < 0x7f;
			if (ok)
				memcpy(name, got, len + 1);
		}
		if (f->at == RING_AT_NATIVE)
			dladdr((void *)f->pc, &di);
		fprintf(out, "pid %d failed code %d at %s pc %#lx frame %u blob %#lx '%s' sym %s+%#lx bytes",
			(int)getpid(), f->code, ring_at_name(f->at),
			(unsigned long)f->pc, f->frame_words, (unsigned long)f->blob, name,
			di.dli_sname ? di.dli_sname : "-",
			di.dli_saddr ? (unsigned long)(f->pc - (uintptr_t)di.dli_saddr) : 0ul);
		for (unsigned k = 0; k < sizeof(f->bytes); k++)
			fprintf(out, " %02x", f->bytes[k]);
		fprintf(out, " sp");
		for (unsigned k = 0; k < 4; k++)
			fprintf(out, " %#lx", (unsigned long)f->sp_words[k]);
		fprintf(out, " frame_ra %#lx at %s", (unsigned long)f->frame_ra,
			f->frame_ra_tag >= JPRING_STUB_KINDS ? "compiled" : ring_at_name(
				(unsigned)f->frame_ra_tag));
		fprintf(out, "\n");
	}
	fclose(out);
}

#if defined(__x86_64__)
static _Unwind_Reason_Code ring_unwind_stop(struct _Unwind_Context *ctx, void *arg);
#endif

int ring_init(void)
{
	const char *rec = getenv("JPROF_AGENT_RECOVER");
	const char *stats = getenv("JPROF_AGENT_RETRY_STATS");

	/* Off only for measuring what the retry gains (bench/java_stacks.sh). */
	ring_recover = !(rec && !strcmp(rec, "0"));
	ring_asgct = (asgct_fn)agent_jvm_sym("AsyncGetCallTrace");
	if (stats)
		snprintf(ring_stats_path, sizeof(ring_stats_path), "%s", stats);
#if defined(__x86_64__)
	if (ring_recover)
		_Unwind_Backtrace(ring_unwind_stop, NULL);
#endif
	return ring_asgct ? 0 : -ENOENT;
}

bool ring_signal_usable(int sig)
{
	/* HotSpot owns SEGV, BUS, ILL, FPE, QUIT, USR2, PIPE, XFSZ, TRAP; the
	 * rest of the classic signals mean something to the application. */
	if (sig == SIGPROF || sig == SIGVTALRM || sig == SIGIO)
		return true;
	return sig >= SIGRTMIN && sig <= SIGRTMAX;
}

static void ring_chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *prev = &ring_prev[sig];

	if (prev->sa_flags & SA_SIGINFO) {
		if (prev->sa_sigaction)
			prev->sa_sigaction(sig, si, uc);
	} else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN && prev->sa_handler) {
		prev->sa_handler(sig);
	}
	/* SIG_DFL is not re-raised: a stray pending signal after a recording
	 * must not kill the JVM (the default for SIGPROF and SIGIO is to
	 * terminate). */
}

static bool ring_is_ours(const siginfo_t *si)
{
	if (si->si_code < POLL_IN || si->si_code > POLL_HUP)
		return false;
	if (si->si_fd < 0 || si->si_fd >= RING_MAX_FD)
		return false;
	return __atomic_load_n(&ring_armed[si->si_fd], __ATOMIC_RELAXED);
}

#if defined(__x86_64__)
/* How far above the handler's own frame the interrupted frames may lie: the
 * kernel's signal frame, the handler and ASGCT's own frames take a few KiB;
 * a Java thread's whole stack is 1 MiB by default (-Xss). */
#define RING_STACK_SPAN (8u << 20)

/* Reads one word of this thread's stack. addr must lie between the handler's
 * frame and RING_STACK_SPAN above it, which is this thread's stack as long as
 * the handler runs on it (not on a sigaltstack: then the interrupted sp is
 * far away and nothing is read); agent_peek turns an unmapped word past the
 * stack's top into an error instead of a fault. */
static bool ring_read_stack(uintptr_t addr, uintptr_t *out)
{
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);

	if (addr % sizeof(uintptr_t) || addr <= here || addr - here >= RING_STACK_SPAN)
		return false;
	return agent_peek(addr, out, sizeof(*out));
}

/* AsyncGetCallTrace gave up on a thread running Java: the pc is in code it
 * cannot walk from (a vtable or itable stub, an adapter, a compiled method's
 * entry before its frame is complete or its exit after the frame is gone).
 * There the return address into the calling Java frame is the word at sp
 * or, between a compiled method's `push rbp` and its `sub rsp` (and between
 * `add rsp` and `pop rbp` on the way out), the word above the saved rbp.
 * Retry from the caller, with sp just above that return address; the
 * stepped-over leaf becomes frames[0] (ring_leaf), so its time is not
 * counted as the caller's own. c is a copy of the interrupted context; the
 * real one is never changed. On success *caller_pc is the return address
 * the walk started from. (Retrying from a frame-pointer frame of the leaf
 * gained 0.3 points at most, within the noise: not done.) */
#define RING_SPILL_MAX 65536u   /* largest frame whose prologue is recognised */

/* True if the instruction at pc is `mov [rsp+disp], rbp` (REX.W 89 /5 with
 * an rsp base: disp8 or disp32), with the displacement in *disp. HotSpot's
 * compiled methods (JDK 17 and 25 alike) open with `sub rsp, N` and then
 * this store of rbp at the top of the new frame, N - 8; a thread stopped
 * between the two has its return address at sp + N, not at sp or above a
 * saved rbp, and AsyncGetCallTrace refuses it (the frame is not complete
 * yet). The bytes are read with agent_peek: the code may be freed at the
 * same time. */
static bool ring_rbp_spill(uintptr_t pc, uintptr_t *disp)
{
	unsigned char b[8];
	uint32_t d32;

	if (!agent_peek(pc, b, sizeof(b)) || b[0] != 0x48 || b[1] != 0x89 || b[3] != 0x24)
		return false;
	if (b[2] == 0x6c && b[4] < 0x80) {
		*disp = b[4];
		return true;
	}
	if (b[2] == 0xac) {
		memcpy(&d32, b + 4, sizeof(d32));
		if (d32 < RING_SPILL_MAX) {
			*disp = d32;
			return true;
		}
	}
	return false;
}

/* True if pc is on JDK 25's nmethod entry barrier, which C1 and C2 put
 * after `push rbp; sub rsp, N` and before the point HotSpot counts the frame
 * complete (AsyncGetCallTrace refuses it): `cmp dword [r15+d], imm32`
 * (41 81 7f d8 imm32, or 41 81 bf d32 imm32), or the branch right after it
 * (C2's `jne rel32`, 0f 85; C1's `je rel8`, 74), where a sample lands once
 * the compare is done. Bytes read with agent_peek. */
static bool ring_entry_barrier(uintptr_t pc)
{
	/* b[11] is the byte at pc. */
	unsigned char b[11 + 3];

	if (!agent_peek(pc - 11, b, sizeof(b)))
		return false;
	if (b[11] == 0x41)
		return b[12] == 0x81 && (b[13] == 0x7f || b[13] == 0xbf);
	if ((b[11] == 0x0f && b[12] == 0x85) || b[11] == 0x74)
		return (b[3] == 0x41 && b[4] == 0x81 && b[5] == 0x7f) ||
		       (b[0] == 0x41 && b[1] == 0x81 && b[2] == 0xbf);
	return false;
}

/* ASGCT again from a caller's frame: the interrupted context with pc = ra,
 * sp and, if fp is given, rbp replaced (a copy: the real context is never
 * changed). The caller's frames count plus the stepped-over leaf's, with
 * *caller_pc = ra; 0 if ASGCT found nothing there. */
static int32_t ring_walk_from(struct asgct_trace *caller, const ucontext_t *uc, uintptr_t ra,
			      uintptr_t sp, const uintptr_t *fp, uintptr_t *caller_pc)
{
	ucontext_t c = *uc;

	c.uc_mcontext.gregs[REG_RIP] = (greg_t)ra;
	c.uc_mcontext.gregs[REG_RSP] = (greg_t)sp;
	if (fp)
		c.uc_mcontext.gregs[REG_RBP] = (greg_t)*fp;
	ring_asgct(caller, JPRING_MAX_FRAMES - 1, &c);
	if (caller->num_frames <= 0) {
		caller->num_frames = 0;
		return 0;
	}
	*caller_pc = ra;
	return caller->num_frames + 1;
}

/* The walk from the caller of a compiled method whose frame is built: the
 * return address at sp + frame size - 8 (HotSpot's frame size counts it),
 * the caller's rbp right below it (the prologue's push), the caller's sp
 * right above it. */
static int32_t ring_retry_frame(struct asgct_trace *caller, const ucontext_t *uc,
				unsigned words, uintptr_t *caller_pc)
{
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t top = sp + (uintptr_t)words * sizeof(uintptr_t);
	uintptr_t ra, saved_fp;

	if (!ring_read_stack(top - sizeof(uintptr_t), &ra) ||
	    !ring_read_stack(top - 2 * sizeof(uintptr_t), &saved_fp))
		return 0;
	return ring_walk_from(caller, uc, ra, top, &saved_fp, caller_pc);
}

/* A leaf call from compiled Java code into the VM or libc (C2's call of
 * SharedRuntime::complete_monitor_unlocking_C, which wakes a waiter with
 * pthread_cond_signal) sets no frame anchor and leaves the thread in state
 * Java, so ASGCT looks for Java code at a native pc and gives up (-5) when
 * the leaf, libc built without frame pointers, holds anything in rbp. The
 * native frames' own unwind tables (.eh_frame, through libgcc's unwinder:
 * no malloc, FDEs found with glibc's lock-free _dl_find_object) lead back
 * to the first frame in the code cache; ASGCT walks from there. Each frame
 * the unwinder reports: the handler's own and the kernel's signal frame
 * until the interrupted pc, then at most RING_NATIVE_MAX native frames. */
#define RING_UNWIND_MAX 16   /* the handler's frames, the signal frame */
#define RING_NATIVE_MAX 12   /* native frames between the pc and Java code */

struct ring_unwind {
	uintptr_t pc;          /* the interrupted pc */
	unsigned seen;         /* frames before the interrupted one */
	unsigned native;       /* native frames from the interrupted one on */
	bool past_signal;
	bool stub;             /* out: a runtime stub stepped over */
	uintptr_t ra, sp, fp;  /* out: the first Java frame */
};

static void ring_native_note(unsigned why)
{
	__atomic_add_fetch(&ring_native_failed[why], 1, __ATOMIC_RELAXED);
}

static bool ring_in_code_cache(uintptr_t pc)
{
	return codemap_leaf(pc) || codemap_in_interpreter(pc) || vmstructs_blob_at(pc);
}

/* Java code: a compiled method (announced or not) or the interpreter. */
static bool ring_java_pc(uintptr_t pc)
{
	return codemap_leaf(pc) >= JPRING_STUB_KINDS || codemap_in_interpreter(pc) ||
	       vmstructs_nmethod_method(vmstructs_blob_at(pc));
}

static _Unwind_Reason_Code ring_unwind_step(struct _Unwind_Context *ctx, void *arg)
{
	struct ring_unwind *u = arg;
	int before = 0;
	uintptr_t ip = (uintptr_t)_Unwind_GetIPInfo(ctx, &before);
	uintptr_t at;

	if (!u->past_signal) {
		/* The frame the kernel's signal frame returns to is the only
		 * one whose ip is not a return address. */
		if (before && ip == u->pc) {
			u->past_signal = true;
			return _URC_NO_REASON;
		}
		return ++u->seen < RING_UNWIND_MAX ? _URC_NO_REASON : _URC_NORMAL_STOP;
	}
	if (!ring_in_code_cache(ip))
		return ++u->native < RING_NATIVE_MAX ? _URC_NO_REASON : _URC_NORMAL_STOP;
	/* The caller's sp is its callee's CFA, right above the return
	 * address the call pushed: checked, so a misread table gives up. */
	u->sp = (uintptr_t)_Unwind_GetCFA(ctx);
	if (!ring_read_stack(u->sp - sizeof(uintptr_t), &at) || at != ip)
		return _URC_NORMAL_STOP;
	u->fp = (uintptr_t)_Unwind_GetGR(ctx, 6);   /* DWARF 6: rbp */
	if (ring_java_pc(ip)) {
		u->ra = ip;
		return _URC_NORMAL_STOP;
	}
	/* A runtime stub: C1's (monitorenter, monitorexit) build a frame
	 * with rbp (`push rbp; mov rbp, rsp`) and set an anchor without a
	 * pc, which ASGCT cannot walk. Stepped over by that rbp, only to a
	 * return address into Java code. */
	uintptr_t link[2];

	if (u->fp >= u->sp && ring_read_stack(u->fp, &link[0]) &&
	    ring_read_stack(u->fp + sizeof(uintptr_t), &link[1]) && ring_java_pc(link[1])) {
		u->ra = link[1];
		u->sp = u->fp + 2 * sizeof(uintptr_t);
		u->fp = link[0];
		u->stub = true;
	}
	return _URC_NORMAL_STOP;
}

/* Warms the unwinder up outside any handler: its first call initialises
 * tables under pthread_once. */
static _Unwind_Reason_Code ring_unwind_stop(struct _Unwind_Context *ctx, void *arg)
{
	return _URC_NORMAL_STOP;
}

static int32_t ring_retry_native(struct asgct_trace *trace, const ucontext_t *uc,
				 uintptr_t *caller_pc)
{
	struct ring_unwind u = { .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] };
	ucontext_t c;

	_Unwind_Backtrace(ring_unwind_step, &u);
	if (!u.ra) {
		ring_native_note(!u.past_signal ? RING_NATIVE_NO_SIGNAL_FRAME
				 : u.sp ? RING_NATIVE_BAD_CFA : RING_NATIVE_NO_JAVA);
		return 0;
	}
	c = *uc;
	c.uc_mcontext.gregs[REG_RIP] = (greg_t)u.ra;
	c.uc_mcontext.gregs[REG_RSP] = (greg_t)u.sp;
	c.uc_mcontext.gregs[REG_RBP] = (greg_t)u.fp;
	ring_asgct(trace, JPRING_MAX_FRAMES, &c);
	if (trace->num_frames <= 0) {
		ring_native_note(RING_NATIVE_ASGCT);
		return 0;
	}
	if (u.stub)
		ring_native_note(RING_NATIVE_STUB_STEPPED);
	*caller_pc = u.ra;
	return trace->num_frames;
}

static int32_t ring_retry(struct asgct_trace *trace, const ucontext_t *uc, int32_t failed,
			  uintptr_t *caller_pc, uint64_t *leaf_tag, unsigned *how)
{
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	struct asgct_trace caller = *trace;
	uint64_t leaf = codemap_leaf(pc);
	uintptr_t ra, saved_fp, disp;
	unsigned words;
	int32_t n;

	*leaf_tag = leaf;
	caller.frames = trace->frames + 1;
	/* A native pc (no stub, no compiled method, no blob): the Java
	 * frames start where the native ones, unwound, return to Java code. */
	if (!leaf && !codemap_in_interpreter(pc) && !vmstructs_blob_at(pc)) {
		n = ring_retry_native(trace, uc, caller_pc);
		if (n > 0) {
			*how = RING_HOW_NATIVE;
			return n;
		}
	}
	/* Inside a compiled method's prologue, before rbp is stored: the words
	 * at sp are stale spill slots, the return address is at sp + disp + 8,
	 * and rbp is still the caller's. Only in a compiled method's code (the
	 * code map), where the prologue is HotSpot's. */
	if (leaf >= JPRING_STUB_KINDS && ring_rbp_spill(pc, &disp) &&
	    ring_read_stack(sp + disp + sizeof(uintptr_t), &ra)) {
		n = ring_walk_from(&caller, uc, ra, sp + disp + 2 * sizeof(uintptr_t), NULL,
				   caller_pc);
		if (n > 0) {
			*how = RING_HOW_SPILL;
			return n;
		}
	}
	/* On the entry barrier the frame is complete but for HotSpot's own
	 * bookkeeping: the words at sp are the new frame's stale slots, so
	 * only the frame size (from the code map) finds the return address;
	 * no fallback to sp either way. */
	if (leaf >= JPRING_STUB_KINDS && ring_entry_barrier(pc)) {
		words = codemap_frame_words(leaf, pc);
		n = words ? ring_retry_frame(&caller, uc, words, caller_pc) : 0;
		*how = n > 0 ? RING_HOW_BARRIER : RING_HOW_FAILED;
		return n > 0 ? n : failed;
	}
	for (unsigned pushed = 0; pushed < 2; pushed++) {
		uintptr_t at = sp + pushed * sizeof(uintptr_t);

		if (!ring_read_stack(at, &ra) || (pushed && !ring_read_stack(sp, &saved_fp)))
			return failed;
		n = ring_walk_from(&caller, uc, ra, at + sizeof(uintptr_t),
				   pushed ? &saved_fp : NULL, caller_pc);
		if (n > 0) {
			*how = pushed ? RING_HOW_SP1 : RING_HOW_SP;
			return n;
		}
	}
	/* In a compiled method's body with a word pushed on top of its frame:
	 * C2's string intrinsics (compareTo, equals, indexOf: TreeMap and
	 * HashMap keys) save a register around their loops (push ... pop), so
	 * the frame and its return address lie one word higher than the frame
	 * size says from sp, and ASGCT refuses the frame. ASGCT again at the
	 * same pc with sp past that word: the whole walk, leaf scopes included,
	 * or nothing (ASGCT checks the return address it finds there). */
	if (leaf >= JPRING_STUB_KINDS && codemap_frame_words(leaf, pc)) {
		ucontext_t c = *uc;

		c.uc_mcontext.gregs[REG_RSP] = (greg_t)(sp + sizeof(uintptr_t));
		ring_asgct(trace, JPRING_MAX_FRAMES, &c);
		if (trace->num_frames > 0) {
			*how = RING_HOW_PUSHED;
			return trace->num_frames;
		}
	}
	return failed;
}

/* The leaf a retried walk stepped over, from the code map (tag, as
 * ring_retry looked it up): the compiled method whose code holds pc (its
 * entry or exit: bci unknown), or a pseudo-frame naming the stub kind (0:
 * not known). */
static void ring_leaf(struct asgct_frame *leaf, uint64_t tag)
{
	/* A jmethodID is a pointer, never below JPRING_STUB_KINDS. */
	leaf->lineno = tag >= JPRING_STUB_KINDS ? -1 : JPRING_BCI_STUB;
	leaf->method_id = (jmethodID)(uintptr_t)tag;
}
#else
static int32_t ring_retry(struct asgct_trace *trace, const void *uc, int32_t failed,
			  uintptr_t *caller_pc, uint64_t *leaf_tag, unsigned *how)
{
	return failed;
}
#endif

#define RING_INLINE_MAX 24   /* deeper than HotSpot's MaxInlineLevel (15) */

#if defined(__x86_64__)
/* ASGCT's frames from first on are the scopes at pc, a return address into
 * compiled code: methods inlined into the compiled method, innermost first,
 * then the compiled method itself (the first whose own code contains pc;
 * with a method inlined into itself the innermost copy is taken for it).
 * True if typed. */
static bool ring_type_compiled(struct jpring_frame *f, int32_t first, int32_t n, uintptr_t pc)
{
	for (int32_t i = first; i < n && i - first < RING_INLINE_MAX; i++) {
		if (f[i].bci == -3)
			return false;
		int type = codemap_in_method(f[i].method_id, pc);

		if (type) {
			for (int32_t j = first; j < i; j++)
				f[j].type = JPRING_TYPE_INLINED;
			f[i].type = type;
			return true;
		}
	}
	return false;
}

/* HotSpot's x86_64 interpreter frame: rbp points at the saved caller rbp,
 * the return address above it, the frame's Method* three words below. */
#define RING_INTERP_METHOD_OFF (3 * sizeof(uintptr_t))
#define RING_CALLERS_MAX 32   /* two process_vm_readv per frame */

/* The leaf f[0] runs in the interpreter and rbp is the interrupted rbp. If
 * rbp is f[0]'s own frame (its Method* slot holds f[0]'s method: not so in
 * the method's entry, before the frame is built), walk the frame-pointer
 * chain up: each interpreted frame is one ASGCT frame, a return address in
 * the interpreter makes the next frame interpreted, one in compiled code
 * types the next frames as at a compiled pc and ends the walk (compiled code
 * keeps no frame pointer), anything else ends it. */
static void ring_type_callers(struct jpring_frame *f, int32_t n, uintptr_t fp)
{
	uintptr_t slot, method, link[2];
	int32_t i = 0;

	if (!ring_read_stack(fp - RING_INTERP_METHOD_OFF, &slot) ||
	    !agent_peek((uintptr_t)f[0].method_id, &method, sizeof(method)) || slot != method)
		return;
	while (i + 1 < n && i < RING_CALLERS_MAX) {
		/* link[0]: the caller's rbp, link[1]: the return address. */
		if (!ring_read_stack(fp, &link[0]) || !ring_read_stack(fp + sizeof(uintptr_t), &link[1]))
			return;
		if (f[i + 1].bci == -3)
			return;
		if (!codemap_in_interpreter(link[1])) {
			ring_type_compiled(f, i + 1, n, link[1]);
			return;
		}
		/* The chain only goes up the stack. */
		if (link[0] <= fp)
			return;
		f[++i].type = JPRING_TYPE_INTERPRETED;
		fp = link[0];
	}
}
#endif

/* Types what the interrupted pc tells (jpring_frame.type); the rest stay
 * unknown rather than guessed. frames[0] is the pc's own frame; when the
 * walk was retried past the leaf (caller_pc != 0) frames[0] is that leaf
 * (ring_leaf) and the callers' frames are typed from caller_pc. */
static void ring_type_frames(struct jpring_frame *f, int32_t n, uintptr_t pc, uintptr_t fp,
			     uintptr_t caller_pc)
{
	if (codemap_all_interpreted()) {
		for (int32_t i = 0; i < n; i++)
			if (f[i].bci != -3 && f[i].bci != JPRING_BCI_STUB && f[i].method_id)
				f[i].type = JPRING_TYPE_INTERPRETED;
		return;
	}
#if defined(__x86_64__)
	if (caller_pc) {
		if (f[0].bci != JPRING_BCI_STUB)
			f[0].type = codemap_in_method(f[0].method_id, pc);
		if (codemap_in_interpreter(caller_pc)) {
			if (n > 1 && f[1].bci != -3)
				f[1].type = JPRING_TYPE_INTERPRETED;
		} else {
			ring_type_compiled(f, 1, n, caller_pc);
		}
		return;
	}
	if (f[0].bci == JPRING_BCI_STUB || f[0].bci == -3)
		return;
	if (codemap_in_interpreter(pc)) {
		f[0].type = JPRING_TYPE_INTERPRETED;
		ring_type_callers(f, n, fp);
		return;
	}
	ring_type_compiled(f, 0, n, pc);
#else
	(void)pc; (void)fp; (void)caller_pc;
#endif
}

/* Types a walk, retried or not, from where it started. */
static void ring_type_walk(struct jpring_frame *f, int32_t n, const void *ucv, uintptr_t caller_pc,
			   unsigned how)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucv;

	/* From below native frames: as if interrupted at the return address
	 * (an interpreted caller's rbp is not known there: only f[0] typed). */
	if (how == RING_HOW_NATIVE)
		ring_type_frames(f, n, caller_pc, 0, 0);
	else
		ring_type_frames(f, n, (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
				 (uintptr_t)uc->uc_mcontext.gregs[REG_RBP], caller_pc);
#else
	ring_type_frames(f, n, 0, 0, 0);
#endif
}

/* What a record is: a perf-event sample (kind JPRING_KIND_CPU, state and
 * weight 0) or the wall timer's (wall.c). */
struct ring_kind {
	uint16_t kind, state;
	uint32_t weight;
};

/* Reserves a slot and stamps it (time, tid, kind); NULL when the ring is
 * full (counted in the header's dropped). *idx: the slot's index, which
 * ring_commit publishes. */
static struct jpring_slot *ring_reserve(const struct ring_state *r, uint32_t tid,
					const struct ring_kind *k, uint64_t *idx)
{
	struct jpring_header *h = (struct jpring_header *)r->base;
	struct jpring_slot *slot;
	struct timespec ts;
	uint64_t w, rd;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	w = __atomic_load_n(&h->write_idx, __ATOMIC_RELAXED);
	for (;;) {
		rd = __atomic_load_n(&h->read_idx, __ATOMIC_ACQUIRE);
		/* Also drops when the reader's index is ahead of ours (garbage). */
		if (w - rd >= r->nslots) {
			__atomic_add_fetch(&h->dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
		if (__atomic_compare_exchange_n(&h->write_idx, &w, w + 1, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	slot = (struct jpring_slot *)(r->base + JPRING_HEADER_BYTES +
				      (size_t)(w % r->nslots) * JPRING_SLOT_BYTES);
	slot->time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	slot->tid = tid;
	slot->kind = k->kind;
	slot->state = k->state;
	slot->weight = k->weight;
	*idx = w;
	return slot;
}

static void ring_commit(struct jpring_slot *slot, uint64_t idx, int32_t n)
{
	slot->num_frames = n;
	__atomic_store_n(&slot->seq, idx + 1, __ATOMIC_RELEASE);
}

static void ring_root_set(uint32_t tid, uint64_t method)
{
	struct ring_root *r = &ring_roots[tid % RING_ROOTS];
	uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);

	/* Unchanged (the common case): no write. Another writer of this slot
	 * right now (two threads of one residue, or a handler nested in a
	 * handler of the same thread): leave it to that one. */
	if (seq & 1 || (__atomic_load_n(&r->tid, __ATOMIC_RELAXED) == tid &&
			__atomic_load_n(&r->method, __ATOMIC_RELAXED) == method))
		return;
	if (!__atomic_compare_exchange_n(&r->seq, &seq, seq + 1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&r->tid, tid, __ATOMIC_RELAXED);
	__atomic_store_n(&r->method, method, __ATOMIC_RELAXED);
	__atomic_store_n(&r->seq, seq + 2, __ATOMIC_RELEASE);
}

/* True unless tid's root is known and the walk's outermost frame (f[n-1],
 * n > 0) is another method: then the walk started from a stale return
 * address and ASGCT stopped where the garbage ran out (deep recursion
 * leaves return addresses into the same method all over the stack; on
 * JDK 25 such walks ended at `fib;fib` without reaching main). A walk as
 * deep as the ring keeps cannot show its root and is taken. */
static bool ring_root_ok(uint32_t tid, const struct jpring_frame *f, int32_t n)
{
	const struct ring_root *r = &ring_roots[tid % RING_ROOTS];
	uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
	uint64_t method;
	uint32_t owner;

	if (n >= JPRING_MAX_FRAMES || seq & 1)
		return true;
	owner = __atomic_load_n(&r->tid, __ATOMIC_RELAXED);
	method = __atomic_load_n(&r->method, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != seq || owner != tid || !method)
		return true;
	return f[n - 1].method_id == method;
}

/* JPROF_AGENT_RETRY_STATS: counts a failed walk by where its pc was and how
 * the retry ended; keeps the first RING_KEEP that stayed failed. */
static void ring_note(const void *ucv, int32_t code, uint64_t tag, unsigned how, int32_t n)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucv;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t blob = 0;
	unsigned at;

	if (!ring_recover)
		tag = codemap_leaf(pc);
	if (tag >= JPRING_STUB_KINDS)
		at = RING_AT_COMPILED;
	else if (tag)
		at = (unsigned)tag;
	else if ((blob = vmstructs_blob_at(pc)))
		at = RING_AT_BLOB;
	else
		at = RING_AT_NATIVE;
	__atomic_add_fetch(&ring_stats[code == JPRING_NOT_WALKABLE_JAVA][at][how], 1,
			   __ATOMIC_RELAXED);
	if (n > 0 && n <= 2)
		__atomic_add_fetch(&ring_short[code == JPRING_NOT_WALKABLE_JAVA][at][how], 1,
				   __ATOMIC_RELAXED);
	if (n > 0)
		return;
	unsigned i = __atomic_fetch_add(&ring_nkept, 1, __ATOMIC_ACQ_REL);

	if (i >= RING_KEEP)
		return;
	struct ring_failed *f = &ring_kept[i];

	f->code = code;
	f->at = at;
	f->pc = pc;
	f->blob = blob ? blob : vmstructs_blob_at(pc);
	f->frame_words = tag >= JPRING_STUB_KINDS ? codemap_frame_words(tag, pc) : 0;
	if (f->frame_words &&
	    ring_read_stack(sp + f->frame_words * sizeof(uintptr_t) - sizeof(uintptr_t), &f->frame_ra))
		f->frame_ra_tag = codemap_leaf(f->frame_ra);
	agent_peek(pc, f->bytes, sizeof(f->bytes));
	for (unsigned k = 0; k < 4; k++)
		ring_read_stack(sp + k * sizeof(uintptr_t), &f->sp_words[k]);
#else
	(void)ucv; (void)code; (void)tag; (void)how; (void)n;
#endif
}

static const struct jpring_slot *ring_write(const struct ring_state *r, void *uc,
					    const struct ring_kind *k)
{
	struct jpring_slot *slot;
	uint64_t w;
	JNIEnv *env;
	int32_t n;

	/* Not the armed fd's owner tid: a signal still pending from a closed
	 * fd whose number was re-armed for another thread would lie. */
	slot = ring_reserve(r, (uint32_t)syscall(SYS_gettid), k, &w);
	if (!slot)
		return NULL;
	if (!ring_asgct) {
		n = JPRING_UNKNOWN_STATE;
	} else if ((*agent_vm)->GetEnv(agent_vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK) {
		/* GC, compiler-support and foreign threads: no JavaThread. */
		n = JPRING_UNKNOWN_NOT_JAVA;
	} else {
		struct asgct_trace trace = {
			.env = env,
			.frames = (struct asgct_frame *)(void *)slot->frames,
		};
		uintptr_t caller_pc = 0;
		uint64_t leaf_tag = 0;
		unsigned how = RING_HOW_OFF;

		ring_asgct(&trace, JPRING_MAX_FRAMES, uc);
		n = trace.num_frames;
		if ((n == JPRING_UNKNOWN_JAVA || n == JPRING_NOT_WALKABLE_JAVA) && uc) {
			int32_t failed = n;

			if (ring_recover) {
				how = RING_HOW_FAILED;
				n = ring_retry(&trace, uc, n, &caller_pc, &leaf_tag, &how);
				if (n > 0 && !ring_root_ok(slot->tid, slot->frames, n)) {
					how = RING_HOW_NOT_ROOT;
					n = failed;
					caller_pc = 0;
				}
			}
			if (ring_stats_path[0])
				ring_note(uc, failed, leaf_tag, how, n);
		} else if (n > 0 && n < JPRING_MAX_FRAMES) {
			if (ring_stats_path[0] && !ring_root_ok(slot->tid, slot->frames, n))
				__atomic_add_fetch(&ring_root_changed, 1, __ATOMIC_RELAXED);
			ring_root_set(slot->tid, slot->frames[n - 1].method_id);
		}
		if (n > JPRING_MAX_FRAMES)
			n = JPRING_MAX_FRAMES;
		/* ASGCT leaves the padding alone. */
		for (int32_t i = 0; i < n; i++)
			slot->frames[i].type = JPRING_TYPE_UNKNOWN;
#if defined(__x86_64__)
		/* A walk from below native frames has no leaf stepped over:
		 * the native frames are the BPF sample's. */
		if (caller_pc && how != RING_HOW_NATIVE)
			ring_leaf(trace.frames, leaf_tag);
#endif
		/* In a GC pause: walk from the thread's frame anchor (javawalk.c);
		 * its frames come typed. */
		if (n == JPRING_GC_ACTIVE)
			n = javawalk_gc_active(env, slot->frames, JPRING_MAX_FRAMES, n);
		else if (n == JPRING_UNKNOWN_NOT_JAVA || n == JPRING_NOT_WALKABLE_NOT_JAVA)
			n = javawalk_not_java(env, slot->frames, JPRING_MAX_FRAMES, n,
					      __atomic_load_n(&ring_interval_ns, __ATOMIC_RELAXED));
		else if (n > 0 && uc)
			ring_type_walk(slot->frames, n, uc, caller_pc, how);
	}
	ring_commit(slot, w, n);
	return slot;
}

int ring_write_copy(uint32_t tid, uint16_t state, uint32_t weight, int32_t n,
		    const struct jpring_frame *frames)
{
	struct ring_kind k = { .kind = JPRING_KIND_WALL, .state = state, .weight = weight };
	struct jpring_slot *slot = NULL;
	struct ring_state *r;
	uint64_t w;

	if (n < 0 || n > JPRING_MAX_FRAMES)
		return -EINVAL;
	/* As a handler: ring_quiesce waits for us. */
	__atomic_add_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	r = __atomic_load_n(&ring_active, __ATOMIC_SEQ_CST);
	if (r)
		slot = ring_reserve(r, tid, &k, &w);
	if (slot) {
		memcpy(slot->frames, frames, (size_t)n * sizeof(*frames));
		ring_commit(slot, w, n);
	}
	__atomic_sub_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	return slot ? 0 : -ENOBUFS;
}

/* The first signal of an fd armed with a random first period (ring_phase_fd)
 * sets the recording's interval from now on: the kernel restarts a cpu-clock
 * event's period at PERF_EVENT_IOC_PERIOD, so the random phase is kept. One
 * syscall, async-signal-safe; the byte's compare-and-swap makes it once. */
static void ring_end_phase(int fd)
{
	unsigned char v = __atomic_load_n(&ring_armed[fd], __ATOMIC_ACQUIRE);

	if (v == RING_FD_PHASE &&
	    __atomic_compare_exchange_n(&ring_armed[fd], &v, RING_FD_RESETTING, false,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		/* RESETTING keeps the fd open until the ioctl is done
		 * (ring_mark_fd waits): never an ioctl on a reused number. */
		ioctl(fd, PERF_EVENT_IOC_PERIOD, &ring_interval_ns);
		__atomic_store_n(&ring_armed[fd], RING_FD_ON, __ATOMIC_RELEASE);
	} else if (v == RING_FD_PHASING)
		/* Before the random period was set: ring_phase_fd sees the
		 * change and restarts the interval itself. */
		__atomic_compare_exchange_n(&ring_armed[fd], &v, RING_FD_ON, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void ring_on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct ring_kind k = { .kind = JPRING_KIND_CPU };
	const struct jpring_slot *slot;
	struct ring_state *r;
	uint32_t cookie = 0;
	bool ours;

	if (!si) {
		ring_chain(sig, si, uc);
		goto out;
	}
	/* seq_cst pairs with ring_quiesce: either it sees us in flight, or we
	 * see its NULL (and wall_stop's wall_on 0, before the wall table is
	 * reused). */
	__atomic_add_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	ours = ring_is_ours(si);
	if (ours)
		ring_end_phase(si->si_fd);
	if (!ours && wall_take(si->si_code, si->si_pid, (uint32_t)syscall(SYS_gettid), &k.state,
			       &k.weight, &cookie)) {
		k.kind = JPRING_KIND_WALL;
		ours = true;
	}
	r = ours ? __atomic_load_n(&ring_active, __ATOMIC_SEQ_CST) : NULL;
	slot = r ? ring_write(r, uc, &k) : NULL;
	if (slot && cookie)
		wall_keep(cookie, slot->num_frames, slot->frames);
	__atomic_sub_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	if (!ours)
		ring_chain(sig, si, uc);
out:
	errno = saved_errno;
}

/* The handler installed for sig right now: ours, none (default or
 * ignored: nobody relies on receiving it), or someone else's. */
static enum ring_disposition ring_disposition_of(const struct sigaction *sa)
{
	if (sa->sa_flags & SA_SIGINFO)
		return sa->sa_sigaction == ring_on_signal ? RING_SIG_OURS :
		       sa->sa_sigaction ? RING_SIG_FOREIGN : RING_SIG_FREE;
	if (sa->sa_handler == SIG_DFL || sa->sa_handler == SIG_IGN)
		return RING_SIG_FREE;
	return RING_SIG_FOREIGN;
}

enum ring_disposition ring_signal_disposition(int sig)
{
	struct sigaction sa;

	if (sig <= 0 || sig >= _NSIG || sigaction(sig, NULL, &sa) < 0)
		return RING_SIG_FOREIGN;
	return ring_disposition_of(&sa);
}

int ring_choose_signal(int proposed)
{
	struct sigaction sa;

	if (ring_signal_usable(proposed) && ring_signal_disposition(proposed) != RING_SIG_FOREIGN)
		return proposed;
	/* Another profiler's signal (async-profiler, JFR's CPU-time sampler on
	 * JDK 25, a test agent): take a real-time signal nobody handles, from
	 * the top, where libraries that pick one from SIGRTMIN up are least
	 * likely to look. Default disposition only: an ignored real-time
	 * signal was ignored on purpose. A real-time signal also never merges
	 * with a pending one of another source, as two SIGPROFs do. */
	for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
		if (sig == proposed || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL)
			return sig;
		if (ring_disposition_of(&sa) == RING_SIG_OURS)
			return sig;
	}
	return -EBUSY;
}

int ring_install_signal(int sig)
{
	struct sigaction sa, cur;
	int ret = 0;

	if (sig <= 0 || sig >= _NSIG || !ring_signal_usable(sig))
		return -EINVAL;
	pthread_mutex_lock(&ring_install_lock);
	if (sigaction(sig, NULL, &cur) < 0) {
		ret = -errno;
		goto out;
	}
	switch (ring_disposition_of(&cur)) {
	case RING_SIG_OURS:
		goto out;
	case RING_SIG_FOREIGN:
		/* Never over another profiler's handler: its signals would be
		 * ours to chain, and a SIGPROF of ours pending at the moment
		 * one of its own comes makes the kernel drop its one
		 * (async-profiler re-enables its event only in its handler, so
		 * that thread's samples stop for good). */
		ret = -EBUSY;
		goto out;
	case RING_SIG_FREE:
		break;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ring_on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	/* The previous action (default or ignored) is set before the swap, so
	 * the handler never chains to an unset one. */
	ring_prev[sig] = cur;
	if (sigaction(sig, &sa, NULL) < 0) {
		ret = -errno;
		goto out;
	}
out:
	pthread_mutex_unlock(&ring_install_lock);
	return ret;
}

int ring_activate(int memfd, uint64_t ring_bytes, uint32_t nslots)
{
	const struct jpring_header *h;
	struct stat st;
	void *map;

	if (ring_slot_state.base)
		return -EBUSY;
	if (nslots == 0 ||
	    ring_bytes != JPRING_HEADER_BYTES + (uint64_t)nslots * JPRING_SLOT_BYTES)
		return -EINVAL;
	if (fstat(memfd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < ring_bytes)
		return -EINVAL;
	/* Populated now: no page fault in the handler on a slot's first use. */
	map = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
	if (map == MAP_FAILED)
		return -errno;
	h = map;
	if (h->magic != JPRING_MAGIC || h->version != JPRING_VERSION ||
	    h->slot_bytes != JPRING_SLOT_BYTES || h->nslots != nslots) {
		munmap(map, ring_bytes);
		return -EPROTO;
	}
	ring_slot_state = (struct ring_state){ .base = map, .bytes = ring_bytes, .nslots = nslots };
	__atomic_store_n(&ring_active, &ring_slot_state, __ATOMIC_SEQ_CST);
	return 0;
}

void ring_quiesce(void)
{
	const struct timespec tick = { .tv_nsec = 200000 };

	__atomic_store_n(&ring_active, NULL, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&ring_inflight, __ATOMIC_SEQ_CST))
		nanosleep(&tick, NULL);
}

void ring_retire(void)
{
	ring_quiesce();
	if (ring_slot_state.base)
		munmap(ring_slot_state.base, ring_slot_state.bytes);
	ring_slot_state = (struct ring_state){ 0 };
}

void ring_mark_fd(int fd, enum ring_fd_state st)
{
	const struct timespec tick = { .tv_nsec = 100000 };
	unsigned char v;

	if (fd < 0 || fd >= RING_MAX_FD)
		return;
	/* A handler between its compare-and-swap and its ioctl on this fd
	 * (one syscall) is waited for, 100 ms at most (a stopped thread). */
	for (int i = 0; i < 1000; i++) {
		v = __atomic_load_n(&ring_armed[fd], __ATOMIC_SEQ_CST);
		if (v != RING_FD_RESETTING &&
		    __atomic_compare_exchange_n(&ring_armed[fd], &v, (unsigned char)st, false,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return;
		if (v == RING_FD_RESETTING)
			nanosleep(&tick, NULL);
	}
	__atomic_store_n(&ring_armed[fd], (unsigned char)st, __ATOMIC_SEQ_CST);
}

void ring_set_interval(uint64_t interval_ns)
{
	__atomic_store_n(&ring_interval_ns, interval_ns, __ATOMIC_SEQ_CST);
}

int ring_phase_fd(int fd, uint64_t first_ns)
{
	unsigned char want = RING_FD_PHASING;
	uint64_t interval = __atomic_load_n(&ring_interval_ns, __ATOMIC_SEQ_CST);
	int ret = 0;

	if (fd < 0 || fd >= RING_MAX_FD)
		return -EBADF;
	if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &first_ns) < 0) {
		/* The event keeps the interval from its opening: the fixed
		 * phase of before, nothing overcounted. */
		ret = -errno;
		ring_mark_fd(fd, RING_FD_ON);
		goto out;
	}
	if (__atomic_compare_exchange_n(&ring_armed[fd], &want, RING_FD_PHASE, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		goto out;
	/* A signal came while the first period was being set (an overflow of
	 * the interval the event was opened with, or the first period already
	 * ended): the handler did not restore the interval, so do it here. */
	if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &interval) < 0)
		ret = -errno;
out:
	return ret;
}
