/* Event types: what a collector measures and the typed values its samples
 * carry (pprof's sample types). One row per event; collectors, stores,
 * requests and exporters all read this table instead of assuming CPU.
 * Adding an event: a row here, a collector under collect/ and bpf/ (see
 * docs/architecture.md, "Add an event type"). */
#ifndef JPROF_EVENT_H
#define JPROF_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "sampletype.h"

#define EVENT_MAX_VALUES 4

enum event_id {
	EVENT_CPU = 0,         /* perf cpu-clock: on-CPU time, sampled every period of CPU time */
	EVENT_OFFCPU,          /* scheduler switches: each interval a task spent off the CPU */
	EVENT_WALL,            /* cpu and offcpu of the same threads together: wall-clock time */
	EVENT_ALLOC,           /* JVM: JVMTI sampled allocations, weighted to estimate all of them */
	EVENT_LOCK,            /* JVM: contended monitor entries, each with its wait */
	EVENT_COUNT
};

struct event_info {
	enum event_id id;
	const char *name;                  /* on the wire: "cpu" */
	const char *perf_name;             /* what profiles say was sampled: "cpu-clock" */
	const struct sample_type *types;   /* types[0] is always {"samples", "count"} */
	size_t ntypes;                     /* <= EVENT_MAX_VALUES */
	size_t main_value;                 /* the value flame graphs and text show */
	struct sample_type period_type;    /* pprof period type (the sampling interval's unit);
					    * {NULL, NULL}: not sampled at an interval */
};

/* NULL if out of range. */
const struct event_info *event_get(enum event_id id);
/* The values of `count` samples taken every period_ns, for events whose
 * weight is the sampling period (cpu): {count, count * period}. */
void event_values_periodic(const struct event_info *ev, uint64_t count, uint64_t period_ns,
			   uint64_t values[EVENT_MAX_VALUES]);

/* The events of one recording, in the order the user gave them (the first
 * is the profile's default value). */
struct event_set {
	enum event_id ids[EVENT_COUNT];
	size_t n;
};

/* A comma-separated list of event names ("cpu,alloc,lock") into set: any
 * distinct events, except wall with cpu or offcpu (wall holds both). 0, or
 * -EINVAL with why (naming the offending event) filled. */
int event_parse_list(const char *list, struct event_set *set, char *why, size_t len);
bool event_set_has(const struct event_set *set, enum event_id id);
/* The sample types of a recording of set: {"samples", "count"}, then each
 * event's own types in the set's order. *main is the index of the first
 * event's main value. -ENOSPC when more than max. */
int event_set_types(const struct event_set *set, struct sample_type *types, size_t max,
		    size_t *ntypes, size_t *main);
/* "cpu,alloc" into buf (always terminated). */
void event_set_name(const struct event_set *set, char *buf, size_t len);

/* Whether the event's samples come from the JVM agent (a JVM is required). */
static inline int event_needs_jvm(enum event_id id)
{
	return id == EVENT_ALLOC || id == EVENT_LOCK;
}

#endif
