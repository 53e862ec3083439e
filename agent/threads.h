/* Java thread names with their OS tids, for the daemon's per-thread labels
 * (JPAG_THREAD_NAME). Agent thread and JVMTI callbacks only, never a signal
 * handler. */
#ifndef JPROF_AGENT_THREADS_H
#define JPROF_AGENT_THREADS_H

#include <jni.h>
#include <jvmti.h>
#include <stddef.h>
#include <stdint.h>

#include "jprof_agent.h"

/* The Java name of t (modified UTF-8, at most cap - 1 bytes, NUL-terminated
 * in buf); its length, or -ENOENT. */
int threads_name(jvmtiEnv *jvmti, JNIEnv *jni, jthread t, char *buf, size_t cap);

/* t's Java id (java.lang.Thread's tid field: what getId() and threadId()
 * return, JFR's javaThreadId), or 0. Any thread with a JNIEnv, not in a
 * signal handler. */
uint64_t threads_java_id(JNIEnv *jni, jthread t);

/* Calls fn(tid, name, len, java_id, arg) for every live Java thread whose
 * tid can be found (see threads.c); stops at fn's first non-zero return and
 * returns it. The agent thread only (it keeps the JVM structure offsets). */
typedef int (*threads_fn)(uint32_t tid, const char *name, size_t len, uint64_t java_id,
			  void *arg);
int threads_each(jvmtiEnv *jvmti, JNIEnv *jni, threads_fn fn, void *arg);

#endif
