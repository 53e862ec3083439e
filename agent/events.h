/* JVMTI events sampled for the daemon (JPAG_EVENT_ON): allocations
 * (SampledObjectAlloc) and contended monitor entries. They run in ordinary
 * JVMTI callbacks on the Java thread concerned, not in a signal handler, so
 * they take the stack with GetStackTrace and queue records under a mutex;
 * the agent thread sends them (JPAG_EVENTS). A JVMTI environment of their
 * own holds the capabilities only while an event is on. */
#ifndef JPROF_AGENT_EVENTS_H
#define JPROF_AGENT_EVENTS_H

#include <jni.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EVENTS_FLUSH_MS 100   /* the agent thread sends queued records at least this often */

typedef int (*events_send_fn)(int sock, uint16_t type, const void *payload, size_t len);

/* Turns event (enum jpag_event) on with param (bytes or ns), beside the
 * events already on (again for one that is on: it alone). Returns 0, or
 * -errno with the reason (JVMTI's error name) in why. Agent thread only. */
int events_on(uint32_t event, uint64_t param, char *why, size_t len);
/* Turns every event off, gives the capabilities back and restores the heap
 * sampling interval; queued records stay for events_flush. Idempotent. */
void events_off(void);
/* True while an event is on (the agent thread wakes every EVENTS_FLUSH_MS). */
bool events_active(void);
/* Sends the queued records as JPAG_EVENTS frames. Agent thread only. */
int events_flush(events_send_fn send, int sock);
/* Forgets queued records (a connection ended). */
void events_reset(void);

/* Lock waits timed outside JVMTI (park.c): the start of a wait, 0 when no
 * lock recording runs (gen then need not be read); ... */
uint64_t events_lock_start(uint32_t *gen);
/* ... the wait since start, 0 when shorter than the threshold or the
 * recording changed meanwhile; ... */
uint64_t events_lock_waited(uint64_t start, uint32_t gen);
/* ... and its record, the current thread's stack with cls as the lock. */
void events_lock_record(uint64_t wait_ns, jclass cls);

#endif
