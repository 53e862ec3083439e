/* The "known valid" jmethodIDs and their resolution into JPAG_METHOD
 * payloads. Only ids that GetClassMethods returned are ever passed to JVMTI:
 * a stale or forged jmethodID can crash the JVM. */
#ifndef JPROF_AGENT_METHODS_H
#define JPROF_AGENT_METHODS_H

#include <jni.h>
#include <jvmti.h>
#include <stddef.h>
#include <stdint.h>

/* Records every method of klass (creating its jmethodIDs, which
 * AsyncGetCallTrace cannot create in a signal handler). Any thread. */
void methods_add_class(jvmtiEnv *jvmti, jclass klass);
/* methods_add_class for every loaded class (at attach or VMInit). */
void methods_add_loaded(jvmtiEnv *jvmti, JNIEnv *jni);
/* Number of known ids (for logs and tests). */
size_t methods_count(void);

/* Writes the JPAG_METHOD payload for id into buf (cap >= 16 + 3 + 8) and
 * returns its length; returns -ENOENT for an id that is not known valid or
 * that JVMTI no longer resolves (send JPAG_METHOD_UNKNOWN). */
int methods_describe(jvmtiEnv *jvmti, JNIEnv *jni, uint64_t id, unsigned char *buf, size_t cap);

#endif
