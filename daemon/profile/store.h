/* Aggregated stacks of one recording (or one time window): frames interned
 * once, stacks deduplicated per (pid, tid, frames), each with one value per
 * sample type of the store (sampletype.h: value 0 is the sample count).
 * Memory is bounded: once a limit is hit, samples of new stacks are added to
 * a single "[truncated]" marker stack of their thread's process, and the
 * store reports truncated = true. Nothing is lost silently: totals always
 * include every sample added. When asked, the store also keeps each
 * sample's time (bounded, with a count of those it had to drop). */
#ifndef JPROF_STORE_H
#define JPROF_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "sampletype.h"

/* Most sample types one store holds. */
#define STORE_MAX_VALUES 8

struct store_limits {
	size_t max_stacks;  /* distinct stacks; default 200000 */
	size_t max_frames;  /* distinct frames; default 200000 */
	size_t max_bytes;   /* approximate heap bytes; default 256 MiB */
	/* User frames with a location are kept per sampled address (one
	 * frame per process and address, store_frame_ref_at) up to this many
	 * addresses per function and process, the rest on the function's own
	 * frame; 0 (default): per function only. For pprof, whose locations
	 * then say which lines of a function are hot. */
	size_t max_addrs;
};

/* What a pprof store keeps per function and process (store_limits.max_addrs):
 * enough for the hot spots of a big function, bounded for one that is all
 * hot (docs/benchmarks.md). */
#ifndef STORE_PPROF_ADDRS
#define STORE_PPROF_ADDRS 64
#endif

struct store_frame {
	enum frame_kind kind;
	const char *name;
	const char *module;  /* "" when none */
	/* Where the frame's code lies (user code in a file), NULL if unknown:
	 * the first one given (store_frame_set_loc). Frames are interned by
	 * name, so this is one address of that function, not every one.
	 * store_merge copies it only with a stack of the process it is from. */
	const struct frame_loc *loc;
	/* The frame of the function as a whole: its own id, unless this frame
	 * is one address of that function (store_frame_ref_at), whose loc then
	 * is that address's. Formats without addresses aggregate by it. */
	uint32_t function;
};

struct store_stack {
	uint32_t pid;
	uint32_t tid;
	const uint32_t *frames;  /* frame ids, root first */
	uint32_t nframes;
	const uint64_t *values;  /* store_value_count() values, [0] = samples */
};

struct store_totals {
	uint64_t values[STORE_MAX_VALUES];  /* sums over every stack; [0] = samples */
	uint64_t truncated_samples;  /* samples that went to "[truncated]" */
	uint64_t times;              /* sample times kept (store_keep_times) */
	uint64_t times_dropped;      /* sample times not kept: past max, or memory */
	size_t stacks;
	size_t frames;
	size_t bytes;
	bool truncated;
};

struct store;

/* lim NULL = defaults; zero fields take their default. types: 1 ..
 * STORE_MAX_VALUES sample types, the first {"samples", "count"}; NULL = the
 * CPU profile's (sample_types_cpu). The strings are copied. NULL on bad
 * types or no memory. */
struct store *store_new(const struct store_limits *lim, const struct sample_type *types,
			size_t ntypes);
void store_free(struct store *st);

/* The store's sample types: every stack and sample has one value per type. */
size_t store_value_count(const struct store *st);
const struct sample_type *store_value_type(const struct store *st, size_t i);  /* NULL if out of range */
/* Index of the value of type name (the type, e.g. "cpu"), or -ENOENT. */
int store_value_find(const struct store *st, const char *type);

/* Interns a frame; returns its id (>= 0), -ENOSPC when the frame limit is hit
 * (the caller then uses store_truncated_frame()), -ENOMEM. */
int store_frame_intern(struct store *st, enum frame_kind kind, const char *name,
		       const char *module);
/* Gives frame id its location (copied) unless it has one: pprof's address
 * and mapping. Within the memory limit, else it stays without. */
void store_frame_set_loc(struct store *st, uint32_t id, const struct frame_loc *loc);
/* The frame for code at loc: with a store that keeps addresses
 * (store_limits.max_addrs) and loc set, one frame per (loc->pid, loc->addr),
 * sharing the function's name; past max_addrs of that function and process,
 * or past a limit, the function's own frame. Otherwise store_frame_ref and
 * store_frame_set_loc. loc is copied. */
uint32_t store_frame_ref_at(struct store *st, enum frame_kind kind, const char *name,
			    const char *module, const struct frame_loc *loc);
/* Id of the "[truncated]" marker frame (always present). */
uint32_t store_truncated_frame(const struct store *st);
/* store_frame_intern, or the "[truncated]" marker when the frame does not
 * fit (limit or no memory): what a stack uses for a frame it cannot keep. */
uint32_t store_frame_ref(struct store *st, enum frame_kind kind, const char *name,
			 const char *module);

/* One or more samples of one stack. */
struct store_sample {
	uint32_t pid, tid;
	const uint32_t *frames;   /* frame ids, root first; may be NULL when nframes is 0 */
	size_t nframes;
	const uint64_t *values;   /* store_value_count() values, [0] = how many samples */
	uint64_t time_ns;         /* when it was taken (CLOCK_MONOTONIC); 0 = none */
};

/* Adds a sample's values to its stack. Returns 0 when stored as given, 1
 * when it went to the truncated marker because a limit was hit,
 * -EINVAL/-ENOMEM on error. */
int store_add(struct store *st, const struct store_sample *s);

/* Sample times (for timelines): from now on every store_add with a time_ns
 * records (stack, tid, time, values), up to max records and within the
 * store's memory limit (their bytes count in totals.bytes); the rest are
 * counted in totals.times_dropped. Calling it again changes max (records
 * already kept stay); max 0 stops keeping and counting. 0, or -EINVAL for
 * max above UINT32_MAX. */
int store_keep_times(struct store *st, size_t max);

struct store_time {
	uint32_t stack;           /* store_stack_get() index */
	uint32_t tid;
	uint64_t time_ns;
	const uint64_t *values;   /* store_value_count() values */
};

/* Visits the kept times in the order they were added; stop by returning
 * non-zero (returned). */
int store_foreach_time(const struct store *st,
		       int (*cb)(const struct store_time *t, void *arg), void *arg);

/* Copies the stacks of src into dst (its frames interned into dst, the names
 * and labels of their threads and processes copied when dst lacks them, and
 * the sample times when both keep times). Values go to the type of dst with
 * the same type and unit; types dst does not have are dropped, and dst's
 * types that src lacks get 0. filter (may be NULL: every stack) decides per
 * stack: false skips it; it may set *prefix to a frame id of dst (it starts
 * as STORE_NO_FRAME) to put at the root of the copied stack, e.g. a group
 * frame. Samples past dst's limits go to its truncated markers as with
 * store_add. 0 or -errno. */
#define STORE_NO_FRAME UINT32_MAX
typedef bool (*store_merge_fn)(const struct store *src, const struct store_stack *s,
			       struct store *dst, uint32_t *prefix, void *arg);
int store_merge(struct store *dst, const struct store *src, store_merge_fn filter, void *arg);

/* The name of a process found gone before its names were read: it never
 * replaces a known name (sample.c, store_merge.c). */
#define STORE_NAME_EXITED "[exited]"

/* Names for grouping and titles; the latest call wins. */
int store_set_thread_name(struct store *st, uint32_t pid, uint32_t tid, const char *name);
int store_set_process_name(struct store *st, uint32_t pid, const char *comm);
const char *store_thread_name(const struct store *st, uint32_t pid, uint32_t tid);   /* NULL if unknown */
const char *store_process_name(const struct store *st, uint32_t pid);               /* NULL if unknown */
/* A named thread's Java id (java.lang.Thread's; JFR's javaThreadId): 0 sets
 * none; -ENOENT if the thread has no name. */
int store_set_thread_java_id(struct store *st, uint32_t pid, uint32_t tid, uint64_t java_id);
uint64_t store_thread_java_id(const struct store *st, uint32_t pid, uint32_t tid);  /* 0 if unknown */

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
