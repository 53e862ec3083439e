/* Walks started again where AsyncGetCallTrace gave up (-5, -6) on a thread
 * running Java code: from the caller of the leaf it cannot walk from (a
 * stub, a method's entry or exit, native code called without an anchor).
 * Async-signal-safe, as everything the handler calls (ring.c). */
#include "ring_int.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk.h"
#include "vmstructs.h"

#include <stddef.h>
#include <string.h>
#include <ucontext.h>
#include <unwind.h>

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
bool ring_read_stack(uintptr_t addr, uintptr_t *out)
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
 * real one is never changed. On success from->pc is the return address
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
 * *from the caller's frame (pc = ra); 0 if ASGCT found nothing there. */
static int32_t ring_walk_from(struct asgct_trace *caller, const ucontext_t *uc, uintptr_t ra,
			      uintptr_t sp, const uintptr_t *fp, struct ring_from *from)
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
	*from = (struct ring_from){ .pc = ra, .sp = sp,
				    .fp = fp ? *fp : (uintptr_t)uc->uc_mcontext.gregs[REG_RBP] };
	return caller->num_frames + 1;
}

/* The walk from the caller of a compiled method whose frame is built: the
 * return address at sp + frame size - 8 (HotSpot's frame size counts it),
 * the caller's rbp right below it (the prologue's push), the caller's sp
 * right above it. */
static int32_t ring_retry_frame(struct asgct_trace *caller, const ucontext_t *uc,
				unsigned words, struct ring_from *from)
{
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t top = sp + (uintptr_t)words * sizeof(uintptr_t);
	uintptr_t ra, saved_fp;

	if (!ring_read_stack(top - sizeof(uintptr_t), &ra) ||
	    !ring_read_stack(top - 2 * sizeof(uintptr_t), &saved_fp))
		return 0;
	return ring_walk_from(caller, uc, ra, top, &saved_fp, from);
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

void ring_unwind_warm(void)
{
	_Unwind_Backtrace(ring_unwind_stop, NULL);
}

/* ring_native_frames: every frame from the interrupted one on. */
struct ring_native {
	uintptr_t pc;          /* the interrupted pc */
	unsigned seen;         /* frames before it */
	bool past_signal;
	struct jpring_frame *f;
	int32_t n, max;
};

static _Unwind_Reason_Code ring_native_step(struct _Unwind_Context *ctx, void *arg)
{
	struct ring_native *u = arg;
	int before = 0;
	uintptr_t ip = (uintptr_t)_Unwind_GetIPInfo(ctx, &before);

	if (!u->past_signal) {
		if (!(before && ip == u->pc))
			return ++u->seen < RING_UNWIND_MAX ? _URC_NO_REASON : _URC_NORMAL_STOP;
		u->past_signal = true;
	}
	if (!ip || u->n >= u->max)
		return _URC_NORMAL_STOP;
	u->f[u->n++] = (struct jpring_frame){ .bci = JPRING_BCI_NATIVE, .method_id = ip };
	return _URC_NO_REASON;
}

int32_t ring_native_frames(const void *ucv, struct jpring_frame *f, int32_t max, int32_t failed)
{
	const ucontext_t *uc = ucv;
	struct ring_native u = { .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP], .f = f,
				 .max = max };

	_Unwind_Backtrace(ring_native_step, &u);
	return u.n > 0 ? u.n : failed;
}

static int32_t ring_retry_native(struct asgct_trace *trace, const ucontext_t *uc,
				 struct ring_from *from)
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
	*from = (struct ring_from){ .pc = u.ra, .sp = u.sp, .fp = u.fp };
	return trace->num_frames;
}

int32_t ring_retry(JNIEnv *env, struct asgct_trace *trace, const void *ucv, int32_t failed,
		   struct ring_from *from, uint64_t *leaf_tag, unsigned *how)
{
	const ucontext_t *uc = ucv;
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	struct asgct_trace caller = *trace;
	uint64_t leaf = codemap_leaf(pc);
	struct javawalk_resume rs[2];
	uintptr_t ra, saved_fp, disp;
	unsigned words;
	int32_t n;
	int nrs;

	*leaf_tag = leaf;
	caller.frames = trace->frames + 1;
	/* A native pc (no stub, no compiled method, no blob): the Java
	 * frames start where the native ones, unwound, return to Java code. */
	if (!leaf && !codemap_in_interpreter(pc) && !vmstructs_blob_at(pc)) {
		n = ring_retry_native(trace, uc, from);
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
				   from);
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
		n = words ? ring_retry_frame(&caller, uc, words, from) : 0;
		*how = n > 0 ? RING_HOW_BARRIER : RING_HOW_FAILED;
		return n > 0 ? n : failed;
	}
	/* The interpreter building a frame, a stub that pushed registers:
	 * the caller's frame from HotSpot's layout (javawalk.c), before the
	 * words at sp are tried. */
	nrs = leaf < JPRING_STUB_KINDS ? javawalk_resume(env, uc, rs, 2) : 0;
	for (int i = 0; i < nrs; i++) {
		n = ring_walk_from(&caller, uc, rs[i].pc, rs[i].sp, rs[i].fp_set ? &rs[i].fp : NULL,
				   from);
		if (n > 0) {
			*leaf_tag = rs[i].leaf;
			*how = RING_HOW_RESUME + rs[i].how;
			return n;
		}
	}
	for (unsigned pushed = 0; pushed < 2; pushed++) {
		uintptr_t at = sp + pushed * sizeof(uintptr_t);

		if (!ring_read_stack(at, &ra) || (pushed && !ring_read_stack(sp, &saved_fp)))
			return failed;
		n = ring_walk_from(&caller, uc, ra, at + sizeof(uintptr_t),
				   pushed ? &saved_fp : NULL, from);
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
void ring_leaf(struct asgct_frame *leaf, uint64_t tag)
{
	/* A jmethodID is a pointer, never below JPRING_STUB_KINDS. */
	leaf->lineno = tag >= JPRING_STUB_KINDS ? -1 : JPRING_BCI_STUB;
	leaf->method_id = (jmethodID)(uintptr_t)tag;
}
#else
int32_t ring_retry(JNIEnv *env, struct asgct_trace *trace, const void *uc, int32_t failed,
		   struct ring_from *from, uint64_t *leaf_tag, unsigned *how)
{
	return failed;
}

void ring_leaf(struct asgct_frame *leaf, uint64_t tag)
{
	(void)leaf; (void)tag;
}

int32_t ring_native_frames(const void *uc, struct jpring_frame *f, int32_t max, int32_t failed)
{
	(void)uc; (void)f; (void)max;
	return failed;
}

void ring_unwind_warm(void)
{
}
#endif
