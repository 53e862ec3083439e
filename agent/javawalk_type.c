/* The type of every Java frame of a walk (javawalk_type, javawalk.h).
 * AsyncGetCallTrace gives the frames but not how each runs; the thread's
 * own frames say it, walked alongside: interpreted frames by their frame
 * pointer, compiled ones by their code's frame size, as HotSpot's own
 * frame::sender. The walk only types; the frames stay AsyncGetCallTrace's.
 * Cost: one read of the heap per interpreted frame (its Method*); stack
 * words are read directly (the handler runs on the walked stack). */
#include "javawalk.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk_int.h"

#if defined(__x86_64__)
#define JW_ENTRY_WRAPPER (-6)    /* as javawalk.c: the call stub's JavaCallWrapper* */
#define JW_IN_JAVA 8

struct jw_cursor {
	struct jw_stack st;
	uintptr_t pc, sp, fp;
};

/* The Method* a jmethodID stands for (0 if unreadable). */
static uintptr_t jw_type_method(uint64_t id)
{
	uintptr_t m = 0;

	return agent_peek((uintptr_t)id, &m, W) ? m : 0;
}

/* Continues at the Java frames recorded in the anchor at anchor (the
 * thread's own, or an entry frame's JavaCallWrapper's). False at the
 * bottom (no Java frame) or on a bad read. */
static bool jw_type_from_anchor(struct jw_cursor *c, uintptr_t anchor)
{
	uintptr_t sp, pc, fp;

	if (!agent_peek(anchor + (uintptr_t)jw.o.anchor_sp, &sp, W) || !sp ||
	    !agent_peek(anchor + (uintptr_t)jw.o.anchor_pc, &pc, W) ||
	    !agent_peek(anchor + (uintptr_t)jw.o.anchor_fp, &fp, W) ||
	    (!pc && !jw_stack_word(&c->st, sp - W, &pc)))
		return false;
	c->sp = sp;
	c->pc = pc;
	c->fp = fp;
	return true;
}

/* Steps from a frame of words words (return address included) at c->sp. */
static bool jw_type_pop(struct jw_cursor *c, uintptr_t words)
{
	uintptr_t sender_sp = c->sp + words * W, ra, saved_fp;

	if (!jw_stack_word(&c->st, sender_sp - W, &ra) ||
	    !jw_stack_word(&c->st, sender_sp - 2 * W, &saved_fp))
		return false;
	c->sp = sender_sp;
	c->fp = saved_fp;
	c->pc = ra;
	return true;
}

/* The frame size (words) of the nmethod at blob if it is method's (a
 * jmethodID), else 0. */
static unsigned jw_type_blob_words(uintptr_t blob, uint64_t method)
{
	uintptr_t m = blob ? vmstructs_nmethod_method(blob) : 0;
	int32_t words = 0;

	if (!m || m != jw_type_method(method) ||
	    !agent_peek(blob + (uintptr_t)jw.o.blob_frame_size, &words, sizeof(words)) ||
	    words < 2 || words > JW_FRAME_WORDS_MAX)
		return 0;
	return (unsigned)words;
}

/* The outermost of the frames f[i..] that the compiled code at pc (of
 * method, blob) stands for: the first frame of method, unless method
 * appears again within the inline depth (a method inlined into itself),
 * where the inline record at pc says how many scopes there are. -1 if not
 * known. */
static int32_t jw_type_outer(const struct jpring_frame *f, int32_t i, int32_t n, uint64_t method,
			     uintptr_t blob, uintptr_t pc)
{
	struct jw_scope sc[JW_INLINE_MAX];
	int32_t j = -1, again = -1;
	uintptr_t code;
	uint32_t ns = 0;

	for (int32_t k = i; k < n && k - i < JW_INLINE_MAX; k++) {
		if (f[k].method_id != method)
			continue;
		if (j < 0) {
			j = k;
		} else {
			again = k;
			break;
		}
	}
	if (again < 0)
		return j;
	if (!blob || !jw_blob_code(blob, &code) || jw_scopes_at(code, pc, sc, &ns) < 0 ||
	    i + (int32_t)ns > n || f[i + (int32_t)ns - 1].method_id != method)
		return -1;
	return i + (int32_t)ns - 1;
}

int32_t javawalk_type(JNIEnv *env, struct jpring_frame *f, int32_t first, int32_t n,
		      int32_t max, uintptr_t pc, uintptr_t sp, uintptr_t fp)
{
	uintptr_t jt, base, size, call_stub_ra, m, blob, wrapper;
	struct jw_cursor c = { .pc = pc, .sp = sp, .fp = fp };
	int32_t i = first, state, j, type;
	uint64_t tag;
	unsigned words;

	if (!env || !__atomic_load_n(&jw.on, __ATOMIC_ACQUIRE))
		return -1;
	jt = (uintptr_t)env - (uintptr_t)jw.env_off;
	if (!agent_peek(jt + (uintptr_t)jw.o.stack_base, &base, W) ||
	    !agent_peek(jt + (uintptr_t)jw.o.stack_size, &size, W) || size > base ||
	    !agent_peek(jw.o.call_stub_ra, &call_stub_ra, W))
		return -1;
	c.st = (struct jw_stack){ .lo = base - size, .hi = base };
	/* Not in Java code: AsyncGetCallTrace walked from the anchor, which
	 * only a thread out of Java state keeps (in Java it may be stale). */
	if (!codemap_in_interpreter(pc) && codemap_leaf(pc) < JPRING_STUB_KINDS &&
	    !vmstructs_nmethod_method(vmstructs_blob_at(pc))) {
		if (!agent_peek(jt + (uintptr_t)jw.o.thread_state, &state, sizeof(state)) ||
		    state == JW_IN_JAVA || state == JW_IN_JAVA + 1 ||
		    !jw_type_from_anchor(&c, jt + (uintptr_t)jw.o.anchor))
			return n;
	}
	for (int32_t step = 0; i < n && step < JPRING_MAX_FRAMES; step++) {
		uintptr_t prev_sp = c.sp;

		if (f[i].bci == JPRING_BCI_STUB)
			return n;
		if (c.pc == call_stub_ra) {
			/* An entry frame: on below the VM's call into Java. */
			if (!jw_stack_word(&c.st, c.fp + JW_ENTRY_WRAPPER * (long)W, &wrapper) ||
			    wrapper + (uintptr_t)jw.o.wrapper_anchor < c.st.lo ||
			    wrapper + (uintptr_t)jw.o.wrapper_anchor >= c.st.hi ||
			    !jw_type_from_anchor(&c, wrapper + (uintptr_t)jw.o.wrapper_anchor))
				return n;
		} else if (codemap_in_interpreter(c.pc)) {
			uintptr_t sender_sp, ra, caller_fp;

			if (c.fp <= c.sp ||
			    !jw_stack_word(&c.st, c.fp + JW_INTERP_METHOD * (long)W, &m) ||
			    !m || m != jw_type_method(f[i].method_id) ||
			    !jw_stack_word(&c.st, c.fp + JW_INTERP_SENDER_SP * (long)W, &sender_sp) ||
			    !jw_stack_word(&c.st, c.fp, &caller_fp) ||
			    !jw_stack_word(&c.st, c.fp + W, &ra) || sender_sp < c.fp + 2 * W)
				return n;
			f[i++].type = JPRING_TYPE_INTERPRETED;
			c.sp = sender_sp;
			c.fp = caller_fp;
			c.pc = ra;
		} else if ((tag = codemap_leaf(c.pc)) >= JPRING_STUB_KINDS) {
			blob = vmstructs_blob_at(c.pc);
			words = codemap_frame_words(tag, c.pc);
			/* Not in the code map (an OSR compilation, which is not
			 * the method's Method::_code): the blob's own. */
			if (!words)
				words = jw_type_blob_words(blob, tag);
			j = jw_type_outer(f, i, n, tag, blob, c.pc);
			if (!words || j < 0)
				return n;
			type = codemap_in_method(tag, c.pc);
			for (; i < j; i++)
				f[i].type = JPRING_TYPE_INLINED;
			f[i++].type = type ? type : JPRING_TYPE_COMPILED;
			if (!jw_type_pop(&c, words))
				return n;
		} else if ((blob = vmstructs_blob_at(c.pc)) && (m = vmstructs_nmethod_method(blob))) {
			/* Compiled code JVMTI has not announced yet: its
			 * method from the nmethod, the inlined frames (if
			 * any) before it within the inline depth. */
			int32_t w32 = 0;

			j = -1;
			for (int32_t k = i; k < n && k - i < JW_INLINE_MAX && j < 0; k++)
				if (jw_type_method(f[k].method_id) == m)
					j = k;
			if (j < 0 ||
			    !agent_peek(blob + (uintptr_t)jw.o.blob_frame_size, &w32, sizeof(w32)) ||
			    w32 < 2 || w32 > JW_FRAME_WORDS_MAX)
				return n;
			for (; i < j; i++)
				f[i].type = JPRING_TYPE_INLINED;
			f[i++].type = JPRING_TYPE_COMPILED;
			if (!jw_type_pop(&c, (uintptr_t)w32))
				return n;
		} else {
			return n;
		}
		/* Every caller is higher up the stack. */
		if (c.sp <= prev_sp || c.sp >= c.st.hi)
			return n;
	}
	/* Every frame matched, and Java code goes on below the last one: the
	 * walk ended early (at the bottom the next pc is the call stub's). */
	if (i == n && n < max && c.pc != call_stub_ra &&
	    (codemap_in_interpreter(c.pc) || codemap_leaf(c.pc) >= JPRING_STUB_KINDS ||
	     vmstructs_nmethod_method(vmstructs_blob_at(c.pc))))
		return javawalk_extend(env, f, n, max, c.pc, c.sp, c.fp);
	return n;
}
#else
int32_t javawalk_type(JNIEnv *env, struct jpring_frame *f, int32_t first, int32_t n,
		      int32_t max, uintptr_t pc, uintptr_t sp, uintptr_t fp)
{
	(void)env; (void)f; (void)first; (void)n; (void)max; (void)pc; (void)sp; (void)fp;
	return -1;
}
#endif
