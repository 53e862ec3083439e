/* How each Java frame of a walk runs (jpring_frame.type): interpreted,
 * compiled by C1 or C2, inlined. AsyncGetCallTrace does not say; the
 * interrupted pc and the frames' own layout do. Async-signal-safe. */
#include "ring_int.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk.h"

#include <ucontext.h>

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
		/* A method stepped over in the interpreter (its entry). */
		if (f[0].bci != JPRING_BCI_STUB)
			f[0].type = codemap_in_interpreter(pc) ? JPRING_TYPE_INTERPRETED :
				    codemap_in_method(f[0].method_id, pc);
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

/* Types a walk, retried or not, from where it started: every frame by the
 * thread's own frames (javawalk_type, which also completes a walk that
 * ended early), or, where that cannot run (no VMStructs walk), what the pc
 * and an interpreted leaf's rbp chain tell. Returns the frames' count. */
int32_t ring_type_walk(JNIEnv *env, struct jpring_frame *f, int32_t n, int32_t max,
		       const void *ucv, const struct ring_from *from, unsigned how)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucv;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
	int32_t first = 0, got;

	if (!codemap_all_interpreted()) {
		if (from->pc) {
			/* f[0] is the leaf stepped over (not after a walk
			 * from below native frames, whose leaf is native). */
			if (how != RING_HOW_NATIVE) {
				if (f[0].bci != JPRING_BCI_STUB)
					f[0].type = codemap_in_interpreter(pc) ?
						    JPRING_TYPE_INTERPRETED :
						    codemap_in_method(f[0].method_id, pc);
				first = 1;
			}
			pc = from->pc;
			sp = from->sp;
			fp = from->fp;
		} else if (how == RING_HOW_PUSHED) {
			sp += sizeof(uintptr_t);
		}
		if ((got = javawalk_type(env, f, first, n, max, pc, sp, fp)) >= 0)
			return got;
	}
	/* From below native frames: as if interrupted at the return address
	 * (an interpreted caller's rbp is not known there: only f[0] typed). */
	if (how == RING_HOW_NATIVE)
		ring_type_frames(f, n, from->pc, 0, 0);
	else
		ring_type_frames(f, n, (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
				 (uintptr_t)uc->uc_mcontext.gregs[REG_RBP], from->pc);
#else
	(void)env; (void)ucv; (void)how; (void)from; (void)max;
	ring_type_frames(f, n, 0, 0, 0);
#endif
	return n;
}
