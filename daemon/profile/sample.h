/* A built sample: what every consumer (a recording's store, the host view,
 * an HTTP tap) receives from the pipeline. Frames are symbolized and root
 * first, Java frames already joined; values are typed by the event. The one
 * way a built sample enters a store is sample_store_add(). */
#ifndef JPROF_SAMPLE_H
#define JPROF_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"
#include "frame.h"
#include "store.h"

struct sample_frame {
	enum frame_kind kind;
	const char *name;
	const char *module;        /* "" when none */
	const struct frame_loc *loc;  /* user code in a file: address and mapping; else NULL */
};

/* The name of a process found gone before its names were read. */
#define SAMPLE_NAME_EXITED STORE_NAME_EXITED

/* The process's names and labels ("" when unknown). */
struct sample_names {
	const char *comm;
	const char *cgroup;        /* cgroup v2 path */
	const char *unit;          /* systemd unit from the cgroup path */
	const char *container;     /* container id from the cgroup path */
};

struct built_sample {
	const struct event_info *event;
	uint32_t pid, tid;
	/* With pid, the process's identity: when it started (CLOCK_BOOTTIME ns
	 * at the clock-tick resolution of /proc/PID/stat, as
	 * proc_read_start_boottime() gives it); 0 = unknown. A pid is reused,
	 * (pid, start) is not. */
	uint64_t start_ns;
	uint64_t time_ns;          /* CLOCK_MONOTONIC when taken; 0 = aggregated over a drain */
	const uint64_t *values;    /* event->ntypes of them */
	const struct sample_frame *frames;  /* root first */
	size_t nframes;
	const struct sample_names *names;
	/* The thread's name, asked for only by stores that do not know it yet
	 * (reading it costs a /proc read). Writes into buf, returns buf. */
	const char *(*thread_name)(const struct built_sample *bs, char *buf, size_t len);
	void *thread_name_ctx;
	const char *thread_comm;   /* the thread's name when sampled, if known: thread_name's answer */
	bool stack_lost;           /* a kernel or user stack could not be read */
	bool has_java;             /* at least one Java frame */
};

/* Interns the frames, sets the process/thread names and labels the store
 * does not know yet, maps the event's values onto the store's sample types
 * (by type and unit; a type the store lacks is dropped, one the event lacks
 * is 0) and adds the sample (with its time, if the store keeps times).
 * prefix: an optional frame put before the sample's own root frame (group
 * frames of host queries), NULL for none. Returns store_add()'s result. */
int sample_store_add(struct store *st, const struct built_sample *bs,
		     const struct sample_frame *prefix);

#endif
