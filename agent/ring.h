/* The signal side: the handler that writes AsyncGetCallTrace records into
 * the shared ring, the table of armed fds it trusts, and the ring's
 * activation and retirement. */
#ifndef JPROF_AGENT_RING_H
#define JPROF_AGENT_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jprof_agent.h"

#define RING_MAX_FD 65536   /* fds at or above this are never armed */

/* Resolves AsyncGetCallTrace. A failed walk of a thread in Java code is
 * retried from the caller (ring.c, ring_retry) unless the JVM's environment
 * has JPROF_AGENT_RECOVER=0 (for measuring). Returns 0, or -ENOENT (records are then
 * written with JPRING_UNKNOWN_STATE). */
int ring_init(void);

/* True for a signal the agent may take over (not one the JVM relies on). */
bool ring_signal_usable(int sig);
enum ring_disposition {
	RING_SIG_FREE,       /* default or ignored */
	RING_SIG_OURS,
	RING_SIG_FOREIGN,    /* another handler: another profiler's */
};
enum ring_disposition ring_signal_disposition(int sig);
/* The signal to record with: proposed if usable and not another handler's,
 * else a real-time signal with the default disposition (or already ours);
 * -EBUSY if none is left. */
int ring_choose_signal(int proposed);
/* Installs the handler for sig unless it is there already; -EBUSY when
 * another handler holds sig (it is never replaced). The handler is never
 * uninstalled; it chains what is not its own to the previous action. */
int ring_install_signal(int sig);
/* Maps memfd (ring_bytes) and validates its header against the geometry of
 * START; on success the handler writes into it. Does not take memfd. */
int ring_activate(int memfd, uint64_t ring_bytes, uint32_t nslots);
/* Stops the handler writing (it sees no ring) and waits until no handler is
 * inside the ring. Safe from any thread, idempotent. */
void ring_quiesce(void);
/* ring_quiesce, then unmaps. Only from the thread that activates. */
void ring_retire(void);

/* Writes a wall record of thread tid with these frames (the wall timer's
 * copy of the thread's last record, written from the timer thread, not a
 * handler). 0, or -ENOBUFS when there is no ring or it is full. */
int ring_write_copy(uint32_t tid, uint16_t state, uint32_t weight, int32_t n,
		    const struct jpring_frame *frames);

/* The handler accepts POLL_* signals only from marked fds. */
void ring_mark_fd(int fd, bool armed);

#endif
