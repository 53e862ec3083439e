/* The signal side: the handler that writes AsyncGetCallTrace records into
 * the shared ring, the table of armed fds it trusts, and the ring's
 * activation and retirement. */
#ifndef JPROF_AGENT_RING_H
#define JPROF_AGENT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_MAX_FD 65536   /* fds at or above this are never armed */

/* Resolves AsyncGetCallTrace. A failed walk of a thread in Java code is
 * retried from the caller (ring.c, ring_retry) unless the JVM's environment
 * has JPROF_AGENT_RECOVER=0 (for measuring). Returns 0, or -ENOENT (records are then
 * written with JPRING_UNKNOWN_STATE). */
int ring_init(void);

/* True for a signal the agent may take over (not one the JVM relies on). */
bool ring_signal_usable(int sig);
/* Installs the handler for sig once; later calls are no-ops. The previous
 * action is kept for chaining and the handler is never uninstalled. */
int ring_install_signal(int sig);

/* Maps memfd (ring_bytes) and validates its header against the geometry of
 * START; on success the handler writes into it. Does not take memfd. */
int ring_activate(int memfd, uint64_t ring_bytes, uint32_t nslots);
/* Stops the handler writing (it sees no ring) and waits until no handler is
 * inside the ring. Safe from any thread, idempotent. */
void ring_quiesce(void);
/* ring_quiesce, then unmaps. Only from the thread that activates. */
void ring_retire(void);

/* The handler accepts POLL_* signals only from marked fds. */
void ring_mark_fd(int fd, bool armed);

#endif
