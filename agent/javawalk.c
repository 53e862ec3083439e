#include "javawalk.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk_int.h"
#include "vmstructs.h"

#include <errno.h>
#include <fcntl.h>
#include <jvmticmlr.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* A walk's time in the handler: each read is a syscall, and a deep stack
 * (javac's 150 frames) takes 0.5-3 ms. At a 1 ms interval that was longer
 * than the interval: the thread's next signals were lost (68 % of javac's
 * samples without an agent record) and the next sample found the thread
 * still in the VM, to walk again. So one walk gives up after half the
 * recording's interval (JW_WALK_NS_MAX when not known), and the "not Java"
 * walks of all threads together take at most 1/JW_SHARE of the time since
 * the first one (plus JW_SLACK_NS): past that, a Java thread's sample gets
 * [unknown_java] without a walk. Both count the walking thread's CPU time
 * (jw_cpu_ns), not the wall time a preempted walk took. */
#define JW_WALK_NS_MAX 2000000
#define JW_SHARE 10
#define JW_SLACK_NS 20000000ull

struct jw_state jw = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

/* Measurement only (JPROF_AGENT_WALK_STATS=path: written at exit): why
 * samples were or were not walked, for each of the two walks (GC pauses,
 * "not Java" answers), and how many frames came from code JVMTI had not
 * announced yet or stepped over a runtime stub. */
enum jw_stat {
	JW_ST_OK, JW_ST_STATE_JAVA, JW_ST_STATE_OTHER, JW_ST_NO_JAVA, JW_ST_BAD_READ,
	JW_ST_NO_METHOD, JW_ST_UNKNOWN_PC, JW_ST_NO_RECORD, JW_ST_BAD_FRAME, JW_ST_OFF,
	JW_ST_SLOW, JW_ST_N,
};
static const char *const jw_stat_names[JW_ST_N] = {
	"walked", "state_in_java", "state_other", "no_java_frames", "bad_read", "no_method_id",
	"unknown_pc", "no_inline_record", "bad_frame", "walker_off", "over_time_or_budget",
};
enum jw_kind { JW_GC, JW_VM, JW_JAVA, JW_EXT, JW_KINDS };
static unsigned long jw_stats[JW_KINDS][JW_ST_N];
static unsigned long jw_states[16];     /* _thread_state of the samples (15: other) */
static unsigned long jw_unannounced_n;   /* frames of nmethods JVMTI had not announced */
static unsigned long jw_stubs;          /* runtime stubs stepped over */
static uint64_t jw_vm_t0, jw_vm_spent;  /* the "not Java" walks' budget (ns) */
static unsigned long jw_vm_budget_n;    /* of over_time_or_budget: the budget's */
/* The "not Java" walks' times: < 0.25, 0.5, 1, 2, 4 ms, longer. */
static unsigned long jw_vm_ms[6];
static char jw_stats_path[256];

/* The calling thread's CPU time (ns; 0 if the clock fails). A walk's cost
 * is measured in it, not in wall time: the sampling event is a cpu-clock
 * one, so what a long walk delays is the thread's own next signal, and a
 * thread preempted in the middle of a walk (a loaded machine) has not
 * spent the time that was held against it. */
static uint64_t jw_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void jw_count(enum jw_kind k, enum jw_stat s)
{
	__atomic_add_fetch(&jw_stats[k][s], 1, __ATOMIC_RELAXED);
}

__attribute__((destructor)) static void jw_write_stats(void)
{
	int fd;

	if (!jw_stats_path[0])
		return;
	fd = open(jw_stats_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	dprintf(fd, "pid %d", (int)getpid());
	/* The GC walk's counts keep their old names. */
	for (int k = 0; k < JW_KINDS; k++)
		for (int i = 0; i < JW_ST_N; i++)
			dprintf(fd, " %s%s=%lu", k == JW_GC ? "" : k == JW_VM ? "vm_" :
				k == JW_JAVA ? "java_" : "ext_",
				jw_stat_names[i], jw_stats[k][i]);
	for (int i = 0; i < 16; i++)
		if (jw_states[i])
			dprintf(fd, " state%d=%lu", i, jw_states[i]);
	dprintf(fd, " unannounced_frames=%lu stubs_stepped=%lu", jw_unannounced_n, jw_stubs);
	dprintf(fd, " vm_over_budget=%lu vm_walk_ms=%lu/%lu/%lu/%lu/%lu/%lu", jw_vm_budget_n,
		jw_vm_ms[0], jw_vm_ms[1], jw_vm_ms[2], jw_vm_ms[3], jw_vm_ms[4], jw_vm_ms[5]);
	dprintf(fd, " record_bytes=%zu nmethods_without_records=%lu", jw.bytes, jw.dropped);
	dprintf(fd, "\n");
	close(fd);
}


/* The JavaThread of a JNIEnv lies at a fixed offset before it, which
 * VMStructs does not export (JavaThread::_jni_environment): learnt from
 * the current thread, whose JavaThread* java.lang.Thread keeps in its eetop
 * field, and checked: a thread in a JVMTI callback is _thread_in_native. */
static long jw_env_offset(jvmtiEnv *jvmti)
{
	JNIEnv *env = NULL;
	jthread thread = NULL;
	jclass klass = NULL;
	jfieldID eetop;
	uintptr_t jt;
	int32_t state = 0;
	long off = -1;

	if ((*agent_vm)->GetEnv(agent_vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK ||
	    (*jvmti)->GetCurrentThread(jvmti, &thread) != JVMTI_ERROR_NONE || !thread)
		goto out;
	klass = (*env)->GetObjectClass(env, thread);
	eetop = klass ? (*env)->GetFieldID(env, klass, "eetop", "J") : NULL;
	if (!eetop) {
		(*env)->ExceptionClear(env);
		goto out;
	}
	jt = (uintptr_t)(*env)->GetLongField(env, thread, eetop);
	if (jt && (uintptr_t)env > jt && (uintptr_t)env - jt < 65536 &&
	    agent_peek(jt + (uintptr_t)jw.o.thread_state, &state, sizeof(state)) &&
	    state == JW_IN_NATIVE)
		off = (long)((uintptr_t)env - jt);
out:
	if (klass)
		(*env)->DeleteLocalRef(env, klass);
	if (thread)
		(*env)->DeleteLocalRef(env, thread);
	return off;
}

static void jw_init(void)
{
	const char *stats = getenv("JPROF_AGENT_WALK_STATS");
	const char *rec = getenv("JPROF_AGENT_RECOVER");
	const char *gc = getenv("JPROF_AGENT_GC_WALK");
	const char *vm = getenv("JPROF_AGENT_VM_WALK");
	const char *missing = "";
	void *p;

	if (stats)
		snprintf(jw_stats_path, sizeof(jw_stats_path), "%s", stats);
	/* As ring.c's retry: off only for measuring what it gains
	 * (JPROF_AGENT_GC_WALK=0: this walk alone). */
	if ((rec && !strcmp(rec, "0")) || (gc && !strcmp(gc, "0")))
		return;
	/* JPROF_AGENT_VM_WALK=0: the GC walk alone, as before the "not
	 * Java" walk. */
	jw.vm_off = vm && !strcmp(vm, "0");
#if defined(__x86_64__)
	if (vmstructs_walk_init(&jw.o, &missing) < 0) {
		agent_warn("VMStructs lack %s: samples taken in GC pauses keep [gc_active]", missing);
		return;
	}
	p = mmap(NULL, JW_SLOTS * sizeof(struct jw_slot), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		agent_warn("no memory for inline records: samples taken in GC pauses keep "
			   "[gc_active]");
		return;
	}
	jw.slots = p;
#else
	(void)p;
	(void)missing;
#endif
}

/* Learns the JNIEnv's offset in its JavaThread, which turns the walks on.
 * Under jw.lock. A thread hidden from JVMTI (a compiler's) may not tell:
 * the next events try again, a few times. */
static void jw_learn_env(jvmtiEnv *jvmti)
{
	if (jw.on || jw.env_tries >= JW_ENV_TRIES)
		return;
	jw.env_off = jw_env_offset(jvmti);
	if (jw.env_off > 0)
		__atomic_store_n(&jw.on, true, __ATOMIC_RELEASE);
	else if (++jw.env_tries == JW_ENV_TRIES)
		agent_warn("JavaThread not found from JNIEnv: samples taken in GC pauses "
			   "keep [gc_active]");
}

void javawalk_code_generated(jvmtiEnv *jvmti)
{
	pthread_once(&jw.once, jw_init);
	if (!jw.slots || __atomic_load_n(&jw.on, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&jw.lock);
	jw_learn_env(jvmti);
	pthread_mutex_unlock(&jw.lock);
}

void javawalk_method_load(jvmtiEnv *jvmti, const void *code_addr, jint code_size,
			  const void *compile_info)
{
	uintptr_t code = (uintptr_t)code_addr, end = code + (uintptr_t)(code_size > 0 ? code_size : 0);
	struct jw_slot *s;
	struct jw_rec *rec;

	pthread_once(&jw.once, jw_init);
	if (!jw.slots || !code || end == code)
		return;
	pthread_mutex_lock(&jw.lock);
	jw_learn_env(jvmti);
	s = jw_find(code, true);
	if (!s) {
		jw.dropped++;
		goto out;
	}
	rec = jw_rec_build(code, end, compile_info);
	if (!rec)
		jw.dropped++;
	jw_slot_set(s, end, rec);
out:
	pthread_mutex_unlock(&jw.lock);
}

void javawalk_method_unload(const void *code_addr)
{
	struct jw_slot *s;

	if (!jw.slots)
		return;
	pthread_mutex_lock(&jw.lock);
	s = jw_find((uintptr_t)code_addr, false);
	if (s)
		jw_slot_set(s, 0, NULL);
	pthread_mutex_unlock(&jw.lock);
}

#if defined(__x86_64__)
bool jw_stack_word(const struct jw_stack *st, uintptr_t addr, uintptr_t *out)
{
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);

	if (addr % W || addr < st->lo || addr + W > st->hi)
		return false;
	/* Above the handler's own frame on the walked thread's stack (not an
	 * alternate signal stack): live, mapped memory, read directly. */
	if (here >= st->lo && here < addr) {
		*out = *(const volatile uintptr_t *)addr;
		return true;
	}
	return agent_peek(addr, out, W);
}

/* Method* -> jmethodID through its class's jmethodID cache
 * (InstanceKlass::_methods_jmethod_ids: [0] the length, [1 + idnum] the
 * id), checked (a jmethodID points at its Method*); 0 when there is none
 * (no id was made: the agent makes every method's at class load). */
uint64_t jw_method_id(uintptr_t m, uintptr_t *cm_out)
{
	const struct vmstructs_walk *o = &jw.o;
	uintptr_t cm, cp, ik, ids, len, id, back;
	uint16_t idnum;

	if (!agent_peek(m + (uintptr_t)o->method_const, &cm, W) ||
	    !agent_peek(cm + (uintptr_t)o->const_constants, &cp, W) ||
	    !agent_peek(cp + (uintptr_t)o->cp_holder, &ik, W) ||
	    !agent_peek(ik + (uintptr_t)o->ik_jmethod_ids, &ids, W) ||
	    !agent_peek(cm + (uintptr_t)o->const_idnum, &idnum, sizeof(idnum)) ||
	    !agent_peek(ids, &len, W) || (uintptr_t)idnum + 1 > len ||
	    !agent_peek(ids + ((uintptr_t)idnum + 1) * W, &id, W) ||
	    !agent_peek(id, &back, W) || back != m)
		return 0;
	*cm_out = cm;
	return id;
}

bool jw_is_native(uintptr_t m)
{
	uint16_t flags = 0;

	/* u4 on JDK 17, u2 on 25: the native bit is in the low half. */
	return agent_peek(m + (uintptr_t)jw.o.method_flags, &flags, sizeof(flags)) &&
	       (flags & JW_ACC_NATIVE);
}


/* The address of a blob's code (the address JVMTI announced). */
bool jw_blob_code(uintptr_t blob, uintptr_t *code)
{
	int32_t off;

	if (jw.o.blob_code_begin >= 0)
		return agent_peek(blob + (uintptr_t)jw.o.blob_code_begin, code, W);
	if (!agent_peek(blob + (uintptr_t)jw.o.blob_code_offset, &off, sizeof(off)) || off <= 0)
		return false;
	*code = blob + (uintptr_t)off;
	return true;
}

struct jw_walk {
	struct jw_stack st;
	uintptr_t sp, fp, pc;
	struct jpring_frame *f;
	int32_t n, max;
};

static void jw_put(struct jw_walk *w, uint64_t method, int32_t bci, int32_t type)
{
	if (w->n < w->max)
		w->f[w->n++] = (struct jpring_frame){ .bci = bci, .type = type, .method_id = method };
}

/* One interpreted frame at w->fp; steps to its caller. */
static enum jw_stat jw_interpreted(struct jw_walk *w)
{
	uintptr_t m, bcp, cm, ra, caller_fp, sender_sp;
	uint16_t code_size;
	uint64_t id;
	int32_t bci = -1;

	if (w->fp <= w->sp || !jw_stack_word(&w->st, w->fp + JW_INTERP_METHOD * (long)W, &m) ||
	    !jw_stack_word(&w->st, w->fp + JW_INTERP_BCP * (long)W, &bcp) ||
	    !jw_stack_word(&w->st, w->fp + JW_INTERP_SENDER_SP * (long)W, &sender_sp) ||
	    !jw_stack_word(&w->st, w->fp, &caller_fp) ||
	    !jw_stack_word(&w->st, w->fp + W, &ra))
		return JW_ST_BAD_READ;
	id = jw_method_id(m, &cm);
	if (!id)
		return JW_ST_NO_METHOD;
	/* The bytecodes follow the ConstMethod. */
	if (jw_is_native(m))
		bci = -3;
	else if (bcp >= cm + jw.o.const_size &&
		 agent_peek(cm + (uintptr_t)jw.o.const_code_size, &code_size, sizeof(code_size)) &&
		 bcp - (cm + jw.o.const_size) < code_size)
		bci = (int32_t)(bcp - (cm + jw.o.const_size));
	jw_put(w, id, bci, JPRING_TYPE_INTERPRETED);
	/* The caller: an interpreted one by its saved rbp, a compiled one from
	 * the sp it had before calling (a c2i adapter may have grown it). C2
	 * code uses rbp as any register: only an interpreted caller's saved
	 * rbp must lie above. */
	if (sender_sp < w->fp + 2 * W ||
	    (caller_fp <= w->fp && codemap_in_interpreter(ra)))
		return JW_ST_BAD_FRAME;
	w->sp = sender_sp;
	w->fp = caller_fp;
	w->pc = ra;
	return JW_ST_OK;
}

/* A compiled frame marked for deoptimization (a class redefined: on JDK 17
 * a JFR recording's first retransformation marks every nmethod) returns to
 * its nmethod's deopt handler, where no scope is recorded; the pc it had
 * is kept in the frame, at nmethod::_orig_pc_offset from its sp (0 can be:
 * DeoptRoots.outer()'s on JDK 25 is 0). True with
 * *pc that one, if it lies in the nmethod's code (code, announced). */
static bool jw_deopt_pc(const struct jw_walk *w, uintptr_t blob, uintptr_t code, uintptr_t *pc)
{
	int32_t off;
	uintptr_t orig;

	if (jw.o.nm_orig_pc_offset < 0 ||
	    !agent_peek(blob + (uintptr_t)jw.o.nm_orig_pc_offset, &off, sizeof(off)) ||
	    off < 0 || off > JW_FRAME_WORDS_MAX * (int32_t)W ||
	    !jw_stack_word(&w->st, w->sp + (uintptr_t)off, &orig) || orig < code ||
	    vmstructs_blob_at(orig) != blob)
		return false;
	*pc = orig;
	return true;
}

/* One compiled frame (with the methods inlined at w->pc) of the nmethod
 * of method at blob; steps to its caller. */
static enum jw_stat jw_compiled(struct jw_walk *w, uintptr_t blob, uint64_t method)
{
	struct jw_scope sc[JW_INLINE_MAX];
	uintptr_t code, m, sender_sp, ra, saved_fp, pc = w->pc;
	uint32_t ns = 0;
	int32_t words, type;
	int ret;

	if (!agent_peek(blob + (uintptr_t)jw.o.blob_frame_size, &words, sizeof(words)) ||
	    words <= 0 || words > JW_FRAME_WORDS_MAX || !jw_blob_code(blob, &code) ||
	    !agent_peek(method, &m, W))
		return JW_ST_BAD_READ;
	sender_sp = w->sp + (uintptr_t)words * W;
	if (!jw_stack_word(&w->st, sender_sp - W, &ra) ||
	    !jw_stack_word(&w->st, sender_sp - 2 * W, &saved_fp))
		return JW_ST_BAD_READ;
	ret = jw_scopes_at(code, w->pc, sc, &ns);
	if (ret == -ENOENT && jw_deopt_pc(w, blob, code, &pc))
		ret = jw_scopes_at(code, pc, sc, &ns);
	type = codemap_in_method(method, pc);
	if (!type)
		type = JPRING_TYPE_COMPILED;
	if (ret == -EAGAIN)
		return JW_ST_NO_RECORD;
	if (ret < 0) {
		/* No call site there: only a native method's wrapper, which
		 * inlines nothing, is its own method without a record. */
		if (!jw_is_native(m))
			return JW_ST_NO_RECORD;
		jw_put(w, method, -3, type);
	} else {
		/* The outermost scope is the compiled method itself. */
		if (sc[ns - 1].method != method)
			return JW_ST_BAD_FRAME;
		for (uint32_t i = 0; i < ns; i++)
			jw_put(w, sc[i].method, sc[i].bci, i + 1 < ns ? JPRING_TYPE_INLINED : type);
	}
	w->sp = sender_sp;
	w->fp = saved_fp;
	w->pc = ra;
	return JW_ST_OK;
}

/* A compiled frame of an nmethod JVMTI has not announced yet (installed,
 * its CompiledMethodLoad still queued on the service thread): its method
 * from the blob (nmethod::_method, checked through its jmethodID), with no
 * inline record, so neither inlined frames nor a bci; steps to its caller
 * by the blob's frame size. */
static enum jw_stat jw_unannounced(struct jw_walk *w, uintptr_t blob, uintptr_t m)
{
	uintptr_t cm, sender_sp, ra, saved_fp;
	int32_t words;
	uint64_t id;

	id = jw_method_id(m, &cm);
	if (!id)
		return JW_ST_NO_METHOD;
	if (!agent_peek(blob + (uintptr_t)jw.o.blob_frame_size, &words, sizeof(words)) ||
	    words < 2 || words > JW_FRAME_WORDS_MAX)
		return JW_ST_BAD_READ;
	sender_sp = w->sp + (uintptr_t)words * W;
	if (!jw_stack_word(&w->st, sender_sp - W, &ra) ||
	    !jw_stack_word(&w->st, sender_sp - 2 * W, &saved_fp))
		return JW_ST_BAD_READ;
	jw_put(w, id, jw_is_native(m) ? -3 : -1, JPRING_TYPE_COMPILED);
	__atomic_add_fetch(&jw_unannounced_n, 1, __ATOMIC_RELAXED);
	w->sp = sender_sp;
	w->fp = saved_fp;
	w->pc = ra;
	return JW_ST_OK;
}

/* Whether pc is where a Java frame's code can be: the interpreter, the
 * call stub's return, or an nmethod (announced or not). */
static bool jw_java_pc(uintptr_t pc, uintptr_t call_stub_ra)
{
	uintptr_t blob;

	if (pc == call_stub_ra || codemap_in_interpreter(pc) ||
	    codemap_leaf(pc) >= JPRING_STUB_KINDS)
		return true;
	blob = vmstructs_blob_at(pc);
	return blob && vmstructs_nmethod_method(blob);
}

/* The runtime stub the thread called the VM from (Runtime1's and
 * OptoRuntime's: counter_overflow, new_type_array, _new_instance_Java,
 * ...), at the top of its Java frames: stepped over to the Java frame that
 * called it. By the blob's frame size (C2's stubs, whose rbp is a general
 * register), or else by rbp (C1's stubs push it and pass it in the
 * anchor). Either is taken only if it leads to Java code, with the
 * caller's sp above the stub's. */
static enum jw_stat jw_stub(struct jw_walk *w, uintptr_t blob, uintptr_t call_stub_ra)
{
	uintptr_t sender_sp[2] = { 0, 0 }, ra, saved_fp;
	int32_t words = 0;

	if (agent_peek(blob + (uintptr_t)jw.o.blob_frame_size, &words, sizeof(words)) &&
	    words >= 2 && words <= JW_FRAME_WORDS_MAX)
		sender_sp[0] = w->sp + (uintptr_t)words * W;
	if (w->fp > w->sp && w->fp < w->st.hi)
		sender_sp[1] = w->fp + 2 * W;
	for (int i = 0; i < 2; i++) {
		if (!sender_sp[i] || !jw_stack_word(&w->st, sender_sp[i] - W, &ra) ||
		    !jw_stack_word(&w->st, sender_sp[i] - 2 * W, &saved_fp) ||
		    !jw_java_pc(ra, call_stub_ra))
			continue;
		__atomic_add_fetch(&jw_stubs, 1, __ATOMIC_RELAXED);
		w->sp = sender_sp[i];
		w->fp = saved_fp;
		w->pc = ra;
		return JW_ST_OK;
	}
	return JW_ST_BAD_FRAME;
}

/* HotSpot's x86_64 entry frame: the call stub's rbp, its JavaCallWrapper*
 * six words below. The wrapper keeps the anchor of the Java frames the
 * thread had before this call into Java (none: the bottom of its Java
 * stack), which the walk goes on from, as AsyncGetCallTrace does. */
#define JW_ENTRY_WRAPPER (-6)

static enum jw_stat jw_entry(struct jw_walk *w, bool *done)
{
	uintptr_t wrapper, anchor, sp, pc, fp;

	if (!jw_stack_word(&w->st, w->fp + JW_ENTRY_WRAPPER * (long)W, &wrapper))
		return JW_ST_BAD_READ;
	anchor = wrapper + (uintptr_t)jw.o.wrapper_anchor;
	if (anchor < w->st.lo || anchor >= w->st.hi ||
	    !agent_peek(anchor + (uintptr_t)jw.o.anchor_sp, &sp, W))
		return JW_ST_BAD_READ;
	if (!sp) {
		*done = true;
		return JW_ST_OK;
	}
	if (!agent_peek(anchor + (uintptr_t)jw.o.anchor_pc, &pc, W) ||
	    !agent_peek(anchor + (uintptr_t)jw.o.anchor_fp, &fp, W) ||
	    (!pc && !jw_stack_word(&w->st, sp - W, &pc)))
		return JW_ST_BAD_READ;
	w->sp = sp;
	w->pc = pc;
	w->fp = fp;
	return JW_ST_OK;
}

/* Walks on from the frame at w (pc, sp, fp), appending to w's frames until
 * the bottom of the thread's Java frames, max frames or a step that fails. */
static enum jw_stat jw_walk_frames(struct jw_walk *w, uintptr_t call_stub_ra, enum jw_kind kind,
				   uint64_t cap_ns, uint64_t cpu0)
{
	for (int32_t i = 0; i < JPRING_MAX_FRAMES && w->n < w->max; i++) {
		uintptr_t prev_sp = w->sp, blob, m;
		bool done = false;
		uint64_t tag;
		enum jw_stat st;

		if (w->pc == call_stub_ra) {
			/* Called from the VM (JavaCalls): done, or on from
			 * the Java frames before that call. */
			st = jw_entry(w, &done);
			if (st == JW_ST_OK && done)
				return JW_ST_OK;
		} else if (codemap_in_interpreter(w->pc)) {
			st = jw_interpreted(w);
		} else {
			tag = codemap_leaf(w->pc);
			blob = vmstructs_blob_at(w->pc);
			if (!blob)
				return JW_ST_UNKNOWN_PC;
			if (tag >= JPRING_STUB_KINDS)
				st = jw_compiled(w, blob, tag);
			else if ((m = vmstructs_nmethod_method(blob)))
				st = jw_unannounced(w, blob, m);
			else if (i == 0 && (kind == JW_VM || kind == JW_JAVA))
				/* Only the top frame: a stub below a Java
				 * frame is a deoptimization or a patched
				 * return, not walked. */
				st = jw_stub(w, blob, call_stub_ra);
			else
				return JW_ST_UNKNOWN_PC;
		}
		if (st != JW_ST_OK)
			return st;
		/* Every caller is higher up the stack. */
		if (w->sp <= prev_sp || w->sp >= w->st.hi)
			return JW_ST_BAD_FRAME;
		/* The GC walk is not capped: its reads are slow in a pause
		 * (the collector holds the address space's lock) and it is
		 * what the sample has. */
		if (kind != JW_GC && (i & 7) == 7 && jw_cpu_ns() - cpu0 > cap_ns)
			return JW_ST_SLOW;
	}
	return JW_ST_OK;
}

static enum jw_stat jw_walk(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t *n,
			    enum jw_kind kind, uint64_t cap_ns)
{
	const struct vmstructs_walk *o = &jw.o;
	uintptr_t jt = (uintptr_t)env - (uintptr_t)jw.env_off, anchor, base, size, call_stub_ra;
	struct jw_walk w = { .f = f, .max = max };
	uint64_t start_ns, cpu0;
	int32_t state;
	enum jw_stat st;

	if (!agent_peek(jt + (uintptr_t)o->thread_state, &state, sizeof(state)))
		return JW_ST_BAD_READ;
	__atomic_add_fetch(&jw_states[state >= 0 && state < 15 ? state : 15], 1, __ATOMIC_RELAXED);
	switch (state) {
	case JW_IN_NATIVE: case JW_IN_NATIVE_TRANS: case JW_IN_VM: case JW_IN_VM_TRANS:
	case JW_BLOCKED: case JW_BLOCKED_TRANS:
		break;
	case 8: case 9:
		/* In Java code but in the VM through a runtime stub that set
		 * the anchor (javawalk_in_java): the frames below are whole. */
		if (kind == JW_JAVA)
			break;
		return JW_ST_STATE_JAVA;
	default:
		return JW_ST_STATE_OTHER;
	}
	anchor = jt + (uintptr_t)o->anchor;
	if (!agent_peek(anchor + (uintptr_t)o->anchor_sp, &w.sp, W) ||
	    !agent_peek(anchor + (uintptr_t)o->anchor_pc, &w.pc, W) ||
	    !agent_peek(anchor + (uintptr_t)o->anchor_fp, &w.fp, W) ||
	    !agent_peek(jt + (uintptr_t)o->stack_base, &base, W) ||
	    !agent_peek(jt + (uintptr_t)o->stack_size, &size, W) || size > base)
		return JW_ST_BAD_READ;
	/* No Java frame at all (a compiler thread compiling, a thread
	 * attached from native code): what AsyncGetCallTrace says of such a
	 * thread outside a pause (ticks_unknown_not_Java). */
	if (!w.sp)
		return JW_ST_NO_JAVA;
	start_ns = agent_now_ns();
	cpu0 = jw_cpu_ns();
	if (kind != JW_GC) {
		uint64_t t0 = __atomic_load_n(&jw_vm_t0, __ATOMIC_RELAXED);

		if (!t0 && !__atomic_compare_exchange_n(&jw_vm_t0, &t0, start_ns, false,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			t0 = __atomic_load_n(&jw_vm_t0, __ATOMIC_RELAXED);
		if (!t0)
			t0 = start_ns;
		if (__atomic_load_n(&jw_vm_spent, __ATOMIC_RELAXED) >
		    (start_ns - t0) / JW_SHARE + JW_SLACK_NS) {
			__atomic_add_fetch(&jw_vm_budget_n, 1, __ATOMIC_RELAXED);
			return JW_ST_SLOW;
		}
	}
	w.st = (struct jw_stack){ .lo = base - size, .hi = base };
	/* No pc recorded: the return address just below sp (HotSpot's own
	 * rule, JavaFrameAnchor::capture_last_Java_pc). */
	if (!w.pc && !jw_stack_word(&w.st, w.sp - W, &w.pc))
		return JW_ST_BAD_READ;
	/* Set when the stubs were made, before any Java code ran. */
	if (!agent_peek(o->call_stub_ra, &call_stub_ra, W) || !call_stub_ra)
		return JW_ST_BAD_READ;
	st = jw_walk_frames(&w, call_stub_ra, kind, cap_ns, cpu0);
	if (st != JW_ST_OK)
		return st;
	*n = w.n;
	return w.n ? JW_ST_OK : JW_ST_BAD_FRAME;
}
#endif


int32_t javawalk_gc_active(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t failed)
{
	enum jw_stat st = JW_ST_OFF;
	int32_t n = 0;

#if defined(__x86_64__)
	if (__atomic_load_n(&jw.on, __ATOMIC_ACQUIRE) && env)
		st = jw_walk(env, f, max, &n, JW_GC, 0);
#endif
	jw_count(JW_GC, st);
	if (st == JW_ST_NO_JAVA)
		return JPRING_UNKNOWN_NOT_JAVA;
	return st == JW_ST_OK ? n : failed;
}

#if defined(__x86_64__)
/* A walk from the anchor of a thread in the VM (kind JW_VM or JW_JAVA),
 * its CPU time held against the walks' budget. */
static enum jw_stat jw_walk_vm(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t *n,
			       enum jw_kind kind, uint64_t interval_ns)
{
	uint64_t t = jw_cpu_ns();
	enum jw_stat st;
	unsigned b = 0;

	st = jw_walk(env, f, max, n, kind, interval_ns ? interval_ns / 2 : JW_WALK_NS_MAX);
	t = jw_cpu_ns() - t;
	__atomic_add_fetch(&jw_vm_spent, t, __ATOMIC_RELAXED);
	while (b < 5 && t >= (250000ull << b))
		b++;
	__atomic_add_fetch(&jw_vm_ms[b], 1, __ATOMIC_RELAXED);
	return st;
}
#endif

int32_t javawalk_not_java(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t code,
			  uint64_t interval_ns)
{
	enum jw_stat st = JW_ST_OFF;
	int32_t n = 0;

#if defined(__x86_64__)
	if (__atomic_load_n(&jw.on, __ATOMIC_ACQUIRE) && !jw.vm_off && env)
		st = jw_walk_vm(env, f, max, &n, JW_VM, interval_ns);
#endif
	jw_count(JW_VM, st);
	switch (st) {
	case JW_ST_OK:
		return n;
	case JW_ST_OFF: case JW_ST_NO_JAVA: case JW_ST_STATE_JAVA: case JW_ST_STATE_OTHER:
		/* No Java frame (a compiler thread), or not a state the walk
		 * knows: AsyncGetCallTrace's answer stands. */
		return code;
	default:
		/* A Java thread whose Java frames are there but could not be
		 * walked: counted as such, not shown as a native thread. */
		return JPRING_UNKNOWN_JAVA;
	}
}

int32_t javawalk_in_java(JNIEnv *env, const void *ucv, struct jpring_frame *f, int32_t max,
			 int32_t failed, uint64_t interval_ns)
{
	enum jw_stat st = JW_ST_OFF;
	int32_t n = 0;

#if defined(__x86_64__)
	const ucontext_t *uc = ucv;
	uintptr_t pc = uc ? (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] : 0;

	/* Only a pc outside the code cache: Java code and stubs are the
	 * retry's (ring.c), and there the anchor may be stale. */
	if (!pc || codemap_in_interpreter(pc) || codemap_leaf(pc) || vmstructs_blob_at(pc))
		return failed;
	if (__atomic_load_n(&jw.on, __ATOMIC_ACQUIRE) && !jw.vm_off && env)
		st = jw_walk_vm(env, f, max, &n, JW_JAVA, interval_ns);
#else
	(void)ucv; (void)interval_ns;
#endif
	jw_count(JW_JAVA, st);
	return st == JW_ST_OK ? n : failed;
}

int32_t javawalk_extend(JNIEnv *env, struct jpring_frame *f, int32_t n, int32_t max,
			uintptr_t pc, uintptr_t sp, uintptr_t fp)
{
	enum jw_stat st = JW_ST_OFF;
	int32_t got = 0;

#if defined(__x86_64__)
	struct jw_walk w = { .f = f + n, .max = max - n, .pc = pc, .sp = sp, .fp = fp };
	uintptr_t jt, base, size, call_stub_ra;

	if (n < max && env && __atomic_load_n(&jw.on, __ATOMIC_ACQUIRE) && !jw.vm_off) {
		jt = (uintptr_t)env - (uintptr_t)jw.env_off;
		st = JW_ST_BAD_READ;
		if (agent_peek(jt + (uintptr_t)jw.o.stack_base, &base, W) &&
		    agent_peek(jt + (uintptr_t)jw.o.stack_size, &size, W) && size <= base &&
		    sp >= base - size && sp < base &&
		    agent_peek(jw.o.call_stub_ra, &call_stub_ra, W) && call_stub_ra) {
			w.st = (struct jw_stack){ .lo = base - size, .hi = base };
			st = jw_walk_frames(&w, call_stub_ra, JW_EXT, JW_WALK_NS_MAX, jw_cpu_ns());
			got = w.n;
		}
	}
#else
	(void)f; (void)max; (void)pc; (void)sp; (void)fp; (void)env;
#endif
	jw_count(JW_EXT, st);
	/* As the anchor walks: whole, or not used. */
	return st == JW_ST_OK ? n + got : n;
}
