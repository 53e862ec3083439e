#include "event.h"

#include <errno.h>
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

/* The protocol's list (proto/) names the same events, in the same order. */
_Static_assert(EVENT_COUNT == JPROF_EVENT_COUNT, "event table and protocol event list differ");

int event_parse(const char *name)
{
	for (int i = 0; name && i < EVENT_COUNT; i++)
		if (strcmp(events[i].name, name) == 0)
			return i;
	return -EINVAL;
}

void event_values_periodic(const struct event_info *ev, uint64_t count, uint64_t period_ns,
			   uint64_t values[EVENT_MAX_VALUES])
{
	memset(values, 0, EVENT_MAX_VALUES * sizeof(values[0]));
	values[0] = count;
	for (size_t i = 1; i < ev->ntypes; i++)
		values[i] = count * period_ns;
}
