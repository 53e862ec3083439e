#include "event.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "jprof_proto.h"

static const struct event_info events[EVENT_COUNT] = {
	[EVENT_CPU] = {
		.id = EVENT_CPU,
		.name = JPROF_EVENT_CPU,
		.perf_name = "cpu-clock",
		.types = sample_types_cpu,
		.ntypes = SAMPLE_TYPES_CPU_N,
		.main_value = 1,
		.period_type = { "cpu", "nanoseconds" },
	},
	[EVENT_OFFCPU] = {
		.id = EVENT_OFFCPU,
		.name = JPROF_EVENT_OFFCPU,
		.perf_name = "offcpu",
		.types = sample_types_offcpu,
		.ntypes = SAMPLE_TYPES_OFFCPU_N,
		.main_value = 1,
	},
	/* Not a collector of its own: a recording runs the cpu and offcpu
	 * collectors and takes both kinds of samples as wall time (a CPU
	 * sample weighs its interval, an off-CPU interval its length). */
	[EVENT_WALL] = {
		.id = EVENT_WALL,
		.name = JPROF_EVENT_WALL,
		.perf_name = "wall",
		.types = sample_types_wall,
		.ntypes = SAMPLE_TYPES_WALL_N,
		.main_value = 1,
		/* Sampled at the interval (CPU samples, the agent's timer). */
		.period_type = { "wall", "nanoseconds" },
	},
	[EVENT_ALLOC] = {
		.id = EVENT_ALLOC,
		.name = JPROF_EVENT_ALLOC,
		.perf_name = "alloc",
		.types = sample_types_alloc,
		.ntypes = SAMPLE_TYPES_ALLOC_N,
		.main_value = 2,
	},
	[EVENT_LOCK] = {
		.id = EVENT_LOCK,
		.name = JPROF_EVENT_LOCK,
		.perf_name = "lock",
		.types = sample_types_lock,
		.ntypes = SAMPLE_TYPES_LOCK_N,
		.main_value = 2,
	},
};

const struct event_info *event_get(enum event_id id)
{
	if ((unsigned)id >= EVENT_COUNT)
		return NULL;
	return &events[id];
}

/* The protocol's list (proto/) names the same events, in the same order:
 * its indexes are event ids (event_parse_list). */
_Static_assert(EVENT_COUNT == JPROF_EVENT_COUNT, "event table and protocol event list differ");

void event_values_periodic(const struct event_info *ev, uint64_t count, uint64_t period_ns,
			   uint64_t values[EVENT_MAX_VALUES])
{
	memset(values, 0, EVENT_MAX_VALUES * sizeof(values[0]));
	values[0] = count;
	for (size_t i = 1; i < ev->ntypes; i++)
		values[i] = count * period_ns;
}

bool event_set_has(const struct event_set *set, enum event_id id)
{
	for (size_t i = 0; i < set->n; i++)
		if (set->ids[i] == id)
			return true;
	return false;
}

int event_parse_list(const char *list, struct event_set *set, char *why, size_t len)
{
	int ids[EVENT_COUNT];
	size_t n = 0;
	int r = jprof_event_list_parse(list, ids, &n, why, len);

	set->n = 0;
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		set->ids[set->n++] = (enum event_id)ids[i];
	return 0;
}

int event_set_types(const struct event_set *set, struct sample_type *types, size_t max,
		    size_t *ntypes, size_t *main)
{
	size_t n = 1;

	if (!max)
		return -ENOSPC;
	types[0] = sample_type_count;
	*main = 0;
	for (size_t i = 0; i < set->n; i++) {
		const struct event_info *ev = event_get(set->ids[i]);

		if (!ev)
			return -EINVAL;
		/* types[0] of every event is the shared count. */
		if (n + ev->ntypes - 1 > max)
			return -ENOSPC;
		if (i == 0)
			*main = n + ev->main_value - 1;
		for (size_t t = 1; t < ev->ntypes; t++)
			types[n++] = ev->types[t];
	}
	*ntypes = n;
	return 0;
}

void event_set_name(const struct event_set *set, char *buf, size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < set->n && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "",
					 event_get(set->ids[i])->name);
}
