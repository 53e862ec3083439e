#include "event.h"

#include <errno.h>
#include <string.h>

static const struct event_info events[EVENT_COUNT] = {
	[EVENT_CPU] = {
		.id = EVENT_CPU,
		.name = "cpu",
		.perf_name = "cpu-clock",
		.types = sample_types_cpu,
		.ntypes = SAMPLE_TYPES_CPU_N,
		.main_value = 1,
		.period_type = { "cpu", "nanoseconds" },
	},
};

const struct event_info *event_get(enum event_id id)
{
	if ((unsigned)id >= EVENT_COUNT)
		return NULL;
	return &events[id];
}

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
