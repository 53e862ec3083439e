/* The one record every collector emits: what was sampled, where, when, the
 * typed values and the raw stacks. The pipeline (daemon/pipeline/) turns it
 * into a built sample; nothing else reads raw stacks. */
#ifndef JPROF_RAWSAMPLE_H
#define JPROF_RAWSAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "event.h"

/* What the thread was doing: on a CPU (a cpu sample), or, for an off-CPU
 * interval, how it left the CPU (from the scheduler's task state). */
enum thread_state {
	THREAD_STATE_UNKNOWN = 0,
	THREAD_STATE_RUNNING,          /* on a CPU */
	THREAD_STATE_RUNNABLE,         /* preempted: waited for a CPU */
	THREAD_STATE_SLEEPING,         /* TASK_INTERRUPTIBLE: waited for an event, a timer, I/O on a socket or pipe */
	THREAD_STATE_UNINTERRUPTIBLE,  /* TASK_UNINTERRUPTIBLE: disk I/O, some kernel locks */
};

struct raw_sample {
	enum event_id event;
	uint32_t source;           /* who asked for it: 0 = the host view, else a recording */
	uint32_t pid;              /* tgid */
	uint32_t tid;
	uint64_t time_ns;          /* CLOCK_MONOTONIC when taken (per-sample records); 0 = aggregated */
	uint64_t start_ns;         /* when the process started (CLOCK_BOOTTIME); 0 = unknown */
	uint64_t values[EVENT_MAX_VALUES];  /* event_get(event)->types; values[0] = samples */
	const char *comm;          /* process name when sampled if the collector read it, else NULL */
	const char *thread_comm;   /* thread name when sampled, likewise */
	enum thread_state state;
	bool host_feed;            /* also stands for the host view (its thread is skipped there) */
	bool kernel_mode;          /* interrupted kernel code */
	bool kernel_thread;        /* no user stack to expect */
	bool agent;                /* from an agent's thread: joined with its Java frames */
	bool kstack_lost;          /* kernel mode but the kernel stack could not be read */
	bool ustack_lost;          /* user task but the user stack could not be read */
	const uint64_t *kips;      /* leaf first */
	uint32_t nk;
	const uint64_t *uips;      /* leaf first */
	uint32_t nu;
};

#endif
