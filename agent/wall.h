/* The wall-clock timer: every interval, the Java threads that are blocked
 * (sleeping or in uninterruptible sleep) get the recording's signal by
 * tgkill, and the handler writes their Java stack as a wall record. Running
 * threads are left to their perf events. */
#ifndef JPROF_AGENT_WALL_H
#define JPROF_AGENT_WALL_H

#include <stdbool.h>
#include <stdint.h>

#include "jprof_agent.h"

/* Threads followed at most (Java threads; the rest go unsampled), and
 * signalled per tick at most (round-robin beyond: a thread looked at less
 * often weighs the intervals since its last look). */
#define WALL_MAX_THREADS 8192
#define WALL_SIGNAL_MAX 1024

/* Starts the timer thread: every interval_ns, signal sig to the blocked
 * threads added. The agent thread only; 0 or -errno. */
int wall_start(uint64_t interval_ns, int sig);
/* Stops the timer thread and forgets every thread. The handler takes no
 * wall signal afterwards. Idempotent; the agent thread only. */
void wall_stop(void);
/* Follows (or stops following) a Java thread; no-op while stopped. The
 * agent thread only. */
void wall_add_thread(uint32_t tid);
void wall_remove_thread(uint32_t tid);
/* The timer thread's tid while it runs, else 0: it asks for no perf event. */
uint32_t wall_thread_tid(void);
/* A new signal for the recording (the old one was taken over). */
void wall_set_signal(int sig);

/* From the signal handler (async-signal-safe): true if the signal
 * SI_TKILL (code) from sender is the timer's for thread tid; then *state (enum
 * jpring_state) and *weight (intervals it stands for) are set and the
 * thread's due weight is taken; *cookie is for wall_keep. */
bool wall_take(int code, int32_t sender, uint32_t tid, uint16_t *state, uint32_t *weight,
	       uint32_t *cookie);
/* From the handler, after it wrote its record: keeps the frames, which the
 * timer copies while the thread stays blocked (async-signal-safe). */
void wall_keep(uint32_t cookie, int32_t num_frames, const struct jpring_frame *frames);

#endif
