/* Where a walk can start again when AsyncGetCallTrace gave up on a thread
 * in Java code (javawalk_resume, javawalk.h): the interpreter building a
 * frame or entering a method, a stub called from Java that pushed words. */
#include "javawalk.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk_int.h"

#include <string.h>
#include <ucontext.h>

#if defined(__x86_64__)

/* HotSpot's x86_64 interpreter, building a method's frame
 * (TemplateInterpreterGenerator::generate_fixed_frame): after `push rax`
 * (the return address) and `enter`, it pushes the sender's sp (fp - 1
 * word), a null last_sp (fp - 2), the Method* (fp - 3), the mirror, the
 * method data, the cache, the locals and the bcp (fp - 8). The frame is
 * walkable only once sp reaches fp - 9 words; before that AsyncGetCallTrace
 * refuses it (-6), while the method and its caller are already known. */
#define JW_INTERP_LAST_SP (-2)
#define JW_INTERP_BUILT (-9)
/* Words above sp where a stub called from Java may have pushed registers
 * (Runtime1's slow_subtype_check: four; g1_post_barrier_slow: rbp and
 * two) before the return address. */
#define JW_STUB_PUSHED_MAX 16
#define JW_SENDER_SP_SPAN (64u << 10)   /* interpreter's sender sp above sp */

/* Whether pc is a return address into Java code the walk can go on from:
 * a compiled method (announced or not yet: C1 code just installed calls
 * Runtime1's stubs), or the interpreter. */
static bool jw_java_return(uintptr_t pc)
{
	uintptr_t blob;

	if (codemap_leaf(pc) >= JPRING_STUB_KINDS || codemap_in_interpreter(pc))
		return true;
	blob = vmstructs_blob_at(pc);
	return blob && vmstructs_nmethod_method(blob);
}

/* The interpreter between `enter` and a walkable frame: rbp is the new
 * frame's. Once its Method* is pushed (fp - 3 words) that word is the
 * method (checked through its jmethodID) and last_sp is still null; in the
 * three instructions before, sp is fp, fp - 1 or fp - 2 words and rbx still
 * holds the Method* (the sender's sp is r13 until `push r13` saved it).
 * The caller: pc above the saved rbp, sp the sender's (the compiled
 * caller's sp before a c2i adapter extended it). */
static bool jw_resume_interp_frame(const struct jw_stack *st, const ucontext_t *uc,
				   struct javawalk_resume *r)
{
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
	uintptr_t m, last_sp = 0, sender_sp, ra, caller_fp, cm;
	uint64_t id;

	if (fp < sp || fp - sp > (uintptr_t)-JW_INTERP_BUILT * W - W ||
	    !jw_stack_word(st, fp, &caller_fp) || !jw_stack_word(st, fp + W, &ra))
		return false;
	if (fp - sp >= 3 * W) {
		if (!jw_stack_word(st, fp + JW_INTERP_METHOD * (long)W, &m) ||
		    !jw_stack_word(st, fp + JW_INTERP_LAST_SP * (long)W, &last_sp))
			return false;
	} else {
		m = (uintptr_t)uc->uc_mcontext.gregs[REG_RBX];
		if (fp - sp == 2 * W && !jw_stack_word(st, fp + JW_INTERP_LAST_SP * (long)W, &last_sp))
			return false;
	}
	if (fp == sp)
		sender_sp = (uintptr_t)uc->uc_mcontext.gregs[REG_R13];
	else if (!jw_stack_word(st, fp + JW_INTERP_SENDER_SP * (long)W, &sender_sp))
		return false;
	if (last_sp || sender_sp < fp + 2 * W || sender_sp >= st->hi || sender_sp % W ||
	    !jw_java_return(ra))
		return false;
	id = jw_method_id(m, &cm);
	if (!id)
		return false;
	*r = (struct javawalk_resume){ .pc = ra, .sp = sender_sp, .fp = caller_fp, .fp_set = true,
				       .leaf = id, .leaf_type = JPRING_TYPE_INTERPRETED,
				       .how = JAVAWALK_INTERP_FRAME };
	return true;
}

/* The interpreter's method entry before `enter` (the stack check, the
 * locals being pushed): rbx is the Method*, r13 the sender's sp (elsewhere
 * in the interpreter r13 is the bcp, never a stack address), and the
 * return address is at sp until the entry pops it into rax to push the
 * locals below it. */
static int jw_resume_interp_entry(const struct jw_stack *st, const ucontext_t *uc,
				  struct javawalk_resume *r, int max)
{
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t sender_sp = (uintptr_t)uc->uc_mcontext.gregs[REG_R13];
	uintptr_t ra[2] = { 0, (uintptr_t)uc->uc_mcontext.gregs[REG_RAX] }, cm;
	uint64_t id;
	int n = 0;

	if (sender_sp <= sp || sender_sp - sp > JW_SENDER_SP_SPAN || sender_sp >= st->hi ||
	    sender_sp % W)
		return 0;
	id = jw_method_id((uintptr_t)uc->uc_mcontext.gregs[REG_RBX], &cm);
	if (!id)
		return 0;
	if (!jw_stack_word(st, sp, &ra[0]))
		ra[0] = 0;
	for (int i = 0; i < 2 && n < max; i++) {
		if (!ra[i] || !jw_java_return(ra[i]) || (i && ra[1] == ra[0]))
			continue;
		r[n++] = (struct javawalk_resume){ .pc = ra[i], .sp = sender_sp,
						   .leaf = id, .leaf_type = JPRING_TYPE_INTERPRETED,
						   .how = JAVAWALK_INTERP_ENTRY };
	}
	return n;
}

/* A stub called from Java code that pushed registers (Runtime1's
 * slow_subtype_check, g1_post_barrier_slow): the return address is the
 * first word above sp that follows a `call rel32` into the very blob that
 * holds pc. If the stub opens with `push rbp`, the caller's rbp is the word
 * below that return address. */
static bool jw_resume_stub(const struct jw_stack *st, uintptr_t sp, uintptr_t pc, uint64_t kind,
			   struct javawalk_resume *r)
{
	uintptr_t blob = vmstructs_blob_at(pc), ra, target, fp = 0;
	unsigned char call[5], first;
	int32_t rel;

	/* Compiled code the code map does not know yet is no stub. */
	if (!blob || vmstructs_nmethod_method(blob))
		return false;
	for (unsigned i = 0; i < JW_STUB_PUSHED_MAX; i++) {
		uintptr_t at = sp + i * W;

		if (!jw_stack_word(st, at, &ra))
			return false;
		if (ra < 5 || !jw_java_return(ra) || !agent_peek(ra - 5, call, sizeof(call)) ||
		    call[0] != 0xe8)
			continue;
		memcpy(&rel, call + 1, sizeof(rel));
		target = ra + (uintptr_t)(intptr_t)rel;
		if (target > pc || vmstructs_blob_at(target) != blob)
			continue;
		*r = (struct javawalk_resume){ .pc = ra, .sp = at + W, .leaf = kind,
					       .how = JAVAWALK_STUB_CALL };
		if (agent_peek(target, &first, 1) && first == 0x55 && i > 0 &&
		    jw_stack_word(st, at - W, &fp)) {
			r->fp = fp;
			r->fp_set = true;
		}
		return true;
	}
	return false;
}
#endif

int javawalk_resume(JNIEnv *env, const void *ucv, struct javawalk_resume *r, int max)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucv;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t jt, base, size;
	struct jw_stack st;
	uint64_t kind;

	if (max <= 0 || !env || !__atomic_load_n(&jw.on, __ATOMIC_ACQUIRE))
		return 0;
	jt = (uintptr_t)env - (uintptr_t)jw.env_off;
	if (!agent_peek(jt + (uintptr_t)jw.o.stack_base, &base, W) ||
	    !agent_peek(jt + (uintptr_t)jw.o.stack_size, &size, W) || size > base ||
	    sp < base - size || sp >= base)
		return 0;
	st = (struct jw_stack){ .lo = base - size, .hi = base };
	if (codemap_in_interpreter(pc)) {
		if (jw_resume_interp_frame(&st, uc, r))
			return 1;
		return jw_resume_interp_entry(&st, uc, r, max);
	}
	kind = codemap_leaf(pc);
	if (kind >= JPRING_STUB_KINDS)
		return 0;
	return jw_resume_stub(&st, sp, pc, kind, r) ? 1 : 0;
#else
	(void)env; (void)ucv; (void)r; (void)max;
	return 0;
#endif
}
