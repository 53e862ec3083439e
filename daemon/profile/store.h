/* Aggregated stacks of one recording (or one time window): frames interned
 * once, stacks deduplicated per (pid, tid, frames) with sample count and
 * weight in nanoseconds. Memory is bounded: once a limit is hit, samples of
 * new stacks are added to a single "[truncated]" marker stack of their
 * thread's process, and the store reports truncated = true. Nothing is lost
 * silently: totals always include every sample added. */
#ifndef JPROF_STORE_H
#define JPROF_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"

struct store_limits {
	size_t max_stacks;  /* distinct stacks; default 200000 */
	size_t max_frames;  /* distinct frames; default 200000 */
	size_t max_bytes;   /* approximate heap bytes; default 256 MiB */
};

struct store_frame {
	enum frame_kind kind;
	const char *name;
	const char *module;  /* "" when none */
};

struct store_stack {
	uint32_t pid;
	uint32_t tid;
	const uint32_t *frames;  /* frame ids, root first */
	uint32_t nframes;
	uint64_t samples;
	uint64_t weight_ns;
};

struct store_totals {
	uint64_t samples;
	uint64_t weight_ns;
	uint64_t truncated_samples;  /* samples that went to "[truncated]" */
	size_t stacks;
	size_t frames;
	size_t bytes;
	bool truncated;
};

struct store;

/* lim NULL = defaults; zero fields take their default. */
struct store *store_new(const struct store_limits *lim);
void store_free(struct store *st);

/* Interns a frame; returns its id (>= 0), -ENOSPC when the frame limit is hit
 * (the caller then uses store_truncated_frame()), -ENOMEM. */
int store_frame_intern(struct store *st, enum frame_kind kind, const char *name,
		       const char *module);
/* Id of the "[truncated]" marker frame (always present). */
uint32_t store_truncated_frame(const struct store *st);

/* Adds samples for one stack (frame ids root first, n may be 0).
 * Returns 0 when stored as given, 1 when it went to the truncated marker
 * because a limit was hit, -EINVAL/-ENOMEM on error. */
int store_add(struct store *st, uint32_t pid, uint32_t tid, const uint32_t *frames,
	      size_t n, uint64_t samples, uint64_t weight_ns);

/* Names for grouping and titles; the latest call wins. */
int store_set_thread_name(struct store *st, uint32_t pid, uint32_t tid, const char *name);
int store_set_process_name(struct store *st, uint32_t pid, const char *comm);
const char *store_thread_name(const struct store *st, uint32_t pid, uint32_t tid);   /* NULL if unknown */
const char *store_process_name(const struct store *st, uint32_t pid);               /* NULL if unknown */

/* Labels of a process (continuous profiles): cgroup v2 path, systemd unit,
 * container id. Empty or NULL members are not stored. */
struct store_labels {
	const char *cgroup;
	const char *unit;
	const char *container;
};
int store_set_process_labels(struct store *st, uint32_t pid, const struct store_labels *l);
/* Fills out ("" for unknown members); false when pid has no label at all. */
bool store_process_labels(const struct store *st, uint32_t pid, struct store_labels *out);

size_t store_frame_count(const struct store *st);
const struct store_frame *store_frame_get(const struct store *st, uint32_t id);  /* NULL if out of range */

/* Visits every stack in insertion order; stop by returning non-zero. */
int store_foreach_stack(const struct store *st,
			int (*cb)(const struct store_stack *s, void *arg), void *arg);

/* Stacks by insertion index (0 .. count-1); NULL if out of range. */
size_t store_stack_count(const struct store *st);
const struct store_stack *store_stack_get(const struct store *st, size_t idx);

/* Visit known thread / process names in the order they were first set;
 * stop by returning non-zero. */
int store_foreach_thread(const struct store *st,
			 int (*cb)(uint32_t pid, uint32_t tid, const char *name, void *arg),
			 void *arg);
int store_foreach_process(const struct store *st,
			  int (*cb)(uint32_t pid, const char *comm, void *arg), void *arg);

void store_get_totals(const struct store *st, struct store_totals *out);

#endif
