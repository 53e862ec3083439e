/* Java frames of a thread sampled while the JVM is in a garbage collection
 * pause, where AsyncGetCallTrace refuses every walk (-2, ticks_GC_active).
 * A thread on CPU then is not in Java code: it is in native code (zlib
 * through JNI), in the VM or on its way to block, and its last Java frame
 * is recorded in its frame anchor (JavaThread::_anchor). javawalk walks the
 * Java frames from there with HotSpot's own structures: interpreted frames
 * by their frame pointer, compiled ones by their blob's frame size, the
 * methods inlined at each call site from JVMTI CompiledMethodLoad's inline
 * records (kept here). x86_64 only; a JVM whose VMStructs lack a field
 * keeps [gc_active] (logged once). */
#ifndef JPROF_AGENT_JAVAWALK_H
#define JPROF_AGENT_JAVAWALK_H

#include <jvmti.h>
#include <stdbool.h>
#include <stdint.h>

#include "jprof_agent.h"

/* From codemap.c's CompiledMethodLoad / CompiledMethodUnload handlers (any
 * JVMTI thread): keeps or drops the nmethod's inline records. The first
 * load also reads the VMStructs offsets. */
void javawalk_method_load(jvmtiEnv *jvmti, const void *code_addr, jint code_size,
			  const void *compile_info);
void javawalk_method_unload(const void *code_addr);
/* From codemap.c's DynamicCodeGenerated handler: the same first-time set-up
 * for a JVM that compiles nothing (-Xint), where the interpreter walks
 * (javawalk_resume) and the anchor walks are still wanted. */
void javawalk_code_generated(jvmtiEnv *jvmti);

/* Async-signal-safe. For the current thread (env its JNIEnv), writes its
 * Java frames (leaf first, typed) into f (at most max) and returns how
 * many; JPRING_UNKNOWN_NOT_JAVA for a thread without any Java frame (its
 * anchor empty: a compiler thread), as AsyncGetCallTrace outside a pause;
 * failed (f's contents then undefined) when the thread runs Java code or
 * anything on the way is not as expected: a walk is complete or not
 * used. */
int32_t javawalk_gc_active(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t failed);

/* Async-signal-safe. For the current thread (env its JNIEnv), when
 * AsyncGetCallTrace answered code (JPRING_UNKNOWN_NOT_JAVA or
 * JPRING_NOT_WALKABLE_NOT_JAVA, "not Java") for a thread that is in the VM
 * or in native code with Java frames below (a runtime call from a Runtime1
 * or OptoRuntime stub, the interpreter): as javawalk_gc_active, with the
 * runtime stub at the top stepped over and nmethods not announced yet named
 * by their method (no inlined frames, no bci). Returns the frames' count;
 * code itself for a thread without Java frames (compiler threads) or with
 * the walker off; JPRING_UNKNOWN_JAVA when the Java frames are there but
 * a step failed or the walk would take over half of interval_ns (the
 * recording's; 0: 2 ms) or over the walks' share of time. */
int32_t javawalk_not_java(JNIEnv *env, struct jpring_frame *f, int32_t max, int32_t code,
			  uint64_t interval_ns);

/* Async-signal-safe. For the current thread (env its JNIEnv) interrupted
 * at uc, when AsyncGetCallTrace answered failed (JPRING_UNKNOWN_JAVA or
 * JPRING_NOT_WALKABLE_JAVA) and no retry walked: if the pc is outside the
 * code cache (VM code called from a runtime stub while the thread stays
 * in Java state: JDK 25's contended monitorenter spins so) and the frame
 * anchor is set, its Java frames from the anchor as javawalk_not_java;
 * else, or if a step fails, failed. A leaf call that sets no anchor keeps
 * failed. */
int32_t javawalk_in_java(JNIEnv *env, const void *uc, struct jpring_frame *f, int32_t max,
			 int32_t failed, uint64_t interval_ns);

/* Where a walk can start again when AsyncGetCallTrace gave up (-5, -6) on
 * a thread in Java code at a pc it cannot walk from, found with HotSpot's
 * own layout rather than guessed: a caller's frame (pc, sp, fp: fp_set
 * says whether fp replaces the interrupted rbp) and the frame stepped over
 * (leaf: a jmethodID, typed leaf_type, or a stub kind below
 * JPRING_STUB_KINDS). */
struct javawalk_resume {
	uintptr_t pc, sp, fp;
	bool fp_set;
	uint64_t leaf;
	int32_t leaf_type;
	unsigned how;            /* enum javawalk_how */
};
enum javawalk_how {
	JAVAWALK_INTERP_FRAME,   /* the interpreter building a method's frame */
	JAVAWALK_INTERP_ENTRY,   /* the interpreter's method entry, before it */
	JAVAWALK_STUB_CALL,      /* a stub that pushed words, called from Java */
};

/* Async-signal-safe. For the current thread (env its JNIEnv) interrupted
 * at uc (a ucontext_t), writes up to max candidates into r, best first,
 * and returns how many (0: none recognised). Every candidate's return
 * address is checked to be Java code (and, for a stub, a call into that
 * stub); the caller still asks AsyncGetCallTrace, which checks the rest. */
int javawalk_resume(JNIEnv *env, const void *uc, struct javawalk_resume *r, int max);

/* Async-signal-safe. For the current thread (env its JNIEnv), appends to
 * f[0..n) the Java frames from the frame at (pc, sp, fp) on to the bottom
 * of the thread's Java stack (at most max in all), typed, walked as
 * javawalk_gc_active does (at most 2 ms of CPU); returns the new count, or
 * n when a step fails (a walk is whole or not used). */
int32_t javawalk_extend(JNIEnv *env, struct jpring_frame *f, int32_t n, int32_t max,
			uintptr_t pc, uintptr_t sp, uintptr_t fp);

/* Async-signal-safe. Types f[first..n) (a walk's frames, leaf first) by
 * the thread's own frames, from the frame at (pc, sp, fp) where the walk
 * started, or from the frame anchor when pc is not Java code (a thread in
 * native code or in the VM): an interpreted frame is one frame, a compiled
 * one the methods inlined at its pc and then its own method (C1 or C2), an
 * entry frame goes on below the VM's call into Java. Each frame is typed
 * only once it is known to be that very frame (its Method* or its code's
 * method); the first that is not, or a frame the walk does not know, ends
 * it, and the rest keep their type. When every frame was matched and
 * the thread's Java frames go on past the last (AsyncGetCallTrace ended
 * the walk early: HotSpot's sanity checks refused a frame, as after a JFR
 * recording on JDK 17), the rest are appended (javawalk_extend, at most max
 * in all). Returns the frames' count, or -1 if the walk cannot run (no
 * VMStructs, no JNIEnv): nothing typed. */
int32_t javawalk_type(JNIEnv *env, struct jpring_frame *f, int32_t first, int32_t n,
		      int32_t max, uintptr_t pc, uintptr_t sp, uintptr_t fp);

#endif
