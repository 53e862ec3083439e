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
enum ring_fd_state {
	RING_FD_OFF = 0,
	RING_FD_ON = 1,       /* armed, sampling every interval */
	RING_FD_PHASE = 2,    /* armed, first period random: the first signal sets the interval */
	RING_FD_PHASING = 3,  /* armed, ring_phase_fd is setting the first period */
	RING_FD_RESETTING = 4, /* armed, a handler is setting the interval */
};
/* Waits (100 ms at most) while a handler is setting fd's interval, so that
 * the fd can be closed after it. */
void ring_mark_fd(int fd, enum ring_fd_state st);
/* An event set's interval, which ring_end_phase restores; set before any
 * of its fds is armed. */
void ring_set_interval(uint32_t set, uint64_t interval_ns);
/* The event set fd belongs to (its records are tagged with it); before
 * the fd is marked armed. */
void ring_set_fd_set(int fd, uint32_t set);
/* The event set the wall timer's records belong to. */
void ring_set_wall_set(uint32_t set);
/* Whether the daemon reads native frames in wall records
 * (JPAG_FEATURE_WALL_NATIVE); set at START. */
void ring_set_wall_native(bool on);
/* For an fd marked RING_FD_PHASING and already armed (O_ASYNC): sets its
 * period to first_ns; its first signal sets the interval again. A
 * per-thread cpu-clock event samples after each interval of the thread's
 * CPU time, so a thread that runs less than one interval is never sampled
 * and every thread loses the part of an interval at its end; with a first
 * period drawn uniformly from (0, interval] each sample stands for one
 * interval on average whatever the thread's life (docs/agent.md). On
 * failure the fd keeps its interval (marked RING_FD_ON). */
int ring_phase_fd(int fd, uint64_t first_ns);

#endif
