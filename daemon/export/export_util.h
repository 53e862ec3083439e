/* What every renderer shares: a profile's meta and options, the job a
 * renderer is handed, and the helpers for numbers, names (one set of naming
 * rules, see symbols.h for how names are made), JSON and values. Values
 * come with the store's sample types; nothing here assumes an event.
 * Renderers include this, never the registry (export.h) above them. */
#ifndef JPROF_EXPORT_UTIL_H
#define JPROF_EXPORT_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "jprof_formats.h"
#include "store.h"

/* What a profile is, for titles and pprof's header. */
struct export_meta {
	uint32_t pid;              /* 0 = whole host */
	const char *comm;          /* process name, or NULL */
	const char *event;         /* the event as the user named it ("cpu-clock"), or NULL */
	uint64_t start_unix_ns;    /* wall clock at start */
	uint64_t start_mono_ns;    /* CLOCK_MONOTONIC at start (the clock of sample times); 0 = unknown */
	uint64_t duration_ns;
	/* What one sampling period measures, and its length in that unit
	 * (pprof's period_type and period; a CPU profile's is cpu/nanoseconds
	 * and the interval). {NULL, NULL} and 0: not a periodic event. JSON
	 * and text show a period in nanoseconds as the interval. */
	struct sample_type period_type;
	uint64_t period;
	const char *status;        /* "complete", "cancelled", "process_exited", ... */
};

struct export_options {
	bool thread_frames;        /* prefix each stack with "[<thread name> tid=<tid>]" */
	bool java_types;           /* collapsed: Java frames with their type suffix */
	/* The sample type that the formats showing one value (collapsed, html,
	 * text, and json's self/total) show, by type name ("cpu"); NULL = the
	 * sample count ("samples"), which flame-graph tools expect. Formats
	 * that carry every value (raw, pprof, json's value lists) ignore it. */
	const char *value;
	/* A recording of several events: each event's main value, by type name,
	 * in the order the events were given (value is the first). Text shows
	 * a section per value, the html flame graph a selector between them;
	 * nevent_values <= 1: only value. */
	const char *const *event_values;
	size_t nevent_values;
	/* Set (by another thread: the render worker's owner) to stop a
	 * rendering: it ends with -ECANCELED at its next stack. NULL: never. */
	const atomic_bool *cancel;
};

/* One rendering: everything a renderer reads. meta and opt are never NULL
 * (zeroed defaults when the caller gave none); value is the resolved
 * export_value_index(). */
struct export_job {
	const struct store *st;
	const struct export_meta *meta;
	const struct export_options *opt;
	size_t value;
};

typedef int (*export_render_fn)(const struct export_job *job, struct buf *out);

/* Index of the value the one-value formats show (see export_options.value):
 * >= 0, or -EINVAL when opt->value names no sample type of st. */
int export_value_index(const struct store *st, const struct export_options *opt);

/* ---- helpers for renderers ------------------------------------------------ */

/* Whether the rendering was cancelled (export_options.cancel): renderers
 * look once per stack (or call-tree node) and return -ECANCELED. */
static inline bool export_cancelled(const struct export_job *job)
{
	return job->opt && job->opt->cancel &&
	       atomic_load_explicit(job->opt->cancel, memory_order_relaxed);
}

/* A period in nanoseconds (the interval), or 0 when meta's period is in
 * another unit or absent. */
uint64_t export_interval_ns(const struct export_meta *meta);
/* Index of the value that readers of version-1 JSON know as "weight_ns":
 * the main value (the last type) when its unit is nanoseconds and no other
 * value is (several events); -1 if none. */
int export_weight_index(const struct store *st);
/* The main value's type: the store's last (pprof's default sample type). */
const struct sample_type *export_main_type(const struct store *st);
/* True for {"samples", "count"}. */
bool export_value_is_count(const struct sample_type *t);
/* "<n> sample(s)" for the count, else the amount in its unit ("1.500 s of
 * cpu", "12 contentions", "2048 bytes of alloc_space"), appended to out. */
int export_value_text(const struct sample_type *t, uint64_t v, struct buf *out);
/* A thread's root frame "[<name> tid=<tid>]" ("[tid=<tid>]" when unnamed),
 * the name under export_text()'s rules with flags. */
int export_thread_frame(const struct store *st, uint32_t pid, uint32_t tid, unsigned flags,
			struct buf *out);
/* The frame every format shows for a stack without frames. */
#define EXPORT_NO_STACK "[no_stack]"

/* ---- frame naming, shared by every renderer ------------------------------
 *
 * A frame's display name is its symbol name, plus " [module]" for a kernel
 * module's frame, with control bytes, DEL and bytes that are not well-formed
 * UTF-8 written as "\xNN". EXPORT_NAME_SUFFIX appends the kernel suffix
 * "_[k]", EXPORT_NAME_JAVA_SUFFIX a typed Java frame's, as async-profiler
 * writes them ("_[j]" compiled, "_[1]" C1, "_[i]" inlined, "_[0]" interpreted; a Java
 * frame of unknown type has none); EXPORT_NAME_NO_SEMICOLON also writes ';'
 * as "\x3b". Collapsed uses the kernel suffix and ';' (the Java suffix with
 * java_types), text and timeline both suffixes, the rest neither (they carry
 * the kind separately). */
enum {
	EXPORT_NAME_SUFFIX = 1,
	EXPORT_NAME_NO_SEMICOLON = 2,
	EXPORT_NAME_JAVA_SUFFIX = 4,
};
int export_frame_name(const struct store_frame *f, unsigned flags, struct buf *out);
/* What a profile is of, for titles: "all processes", or "comm (pid N)". */
int export_target_text(const struct export_meta *meta, struct buf *out);
/* Any string (thread, process names) under the same rules. */
int export_text(const char *s, unsigned flags, struct buf *out);

/* Helpers for the renderers: a JSON string literal (safe inside an HTML
 * <script>, see docs/formats.md), NULL as null; an unsigned decimal. */
int export_json_string(struct buf *out, const char *s);
int export_put_u64(struct buf *out, uint64_t v);

/* JSON members: `"key":` (a comma first unless first; keys are our own
 * literals), then a number, a string, or a list of numbers (always after
 * a comma). */
int export_json_key(struct buf *out, const char *key, bool first);
int export_json_u64(struct buf *out, const char *key, uint64_t v, bool first);
int export_json_strfield(struct buf *out, const char *key, const char *v, bool first);
int export_json_values(struct buf *out, const char *key, const uint64_t *v, size_t n);
/* The "meta" members both JSON formats share, first member first: pid,
 * comm, event, start_unix_ns, duration_ns, interval_ns, status, and
 * period_type and period when meta has a period type. */
int export_json_meta(struct buf *out, const struct export_meta *meta);
/* ,"sample_types":[{"type":..,"unit":..},...] */
int export_json_sample_types(struct buf *out, const struct store *st);
/* ,"weight_ns":N from values (export_weight_index), nothing if none. */
int export_json_weight(struct buf *out, const struct store *st, const uint64_t *values);

#endif
