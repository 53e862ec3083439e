/* java.util.concurrent lock waits for -e lock. j.u.c locks block in
 * jdk.internal.misc.Unsafe.park, not in a monitor, so JVMTI reports nothing:
 * while a lock recording runs, Unsafe.park is rebound (JNI RegisterNatives)
 * to a wrapper that times the JVM's own implementation (Unsafe_Park, found in
 * libjvm's .symtab) and hands waits on a lock-like blocker to events.c.
 * Agent thread only, except the wrapper itself. */
#ifndef JPROF_AGENT_PARK_H
#define JPROF_AGENT_PARK_H

#include <jni.h>
#include <stddef.h>

/* Rebinds Unsafe.park to the timing wrapper. 0, or -errno with the reason in
 * why (the JVM's park is not found, or RegisterNatives failed): monitors are
 * still recorded then. */
int park_hook(JNIEnv *jni, char *why, size_t len);
/* Binds Unsafe.park back to the JVM's own function. Idempotent. Threads
 * parked in the wrapper return through it; it stays mapped (the agent is
 * never unloaded). */
void park_unhook(JNIEnv *jni);

#endif
