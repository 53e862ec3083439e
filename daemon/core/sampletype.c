#include "sampletype.h"

#include <errno.h>
#include <string.h>

const struct sample_type sample_type_count = { "samples", "count" };
const struct sample_type sample_types_cpu[SAMPLE_TYPES_CPU_N] = {
	{ "samples", "count" },
	{ "cpu", "nanoseconds" },
};
const struct sample_type sample_types_offcpu[SAMPLE_TYPES_OFFCPU_N] = {
	{ "samples", "count" },
	{ "offcpu", "nanoseconds" },
};
const struct sample_type sample_types_wall[SAMPLE_TYPES_WALL_N] = {
	{ "samples", "count" },
	{ "wall", "nanoseconds" },
};
const struct sample_type sample_types_alloc[SAMPLE_TYPES_ALLOC_N] = {
	{ "samples", "count" },
	{ "alloc_objects", "count" },
	{ "alloc_space", "bytes" },
};
const struct sample_type sample_types_lock[SAMPLE_TYPES_LOCK_N] = {
	{ "samples", "count" },
	{ "lock", "count" },
	{ "lock_wait", "nanoseconds" },
};

static bool sample_type_str_eq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

bool sample_type_eq(const struct sample_type *a, const struct sample_type *b)
{
	return sample_type_str_eq(a->type, b->type) && sample_type_str_eq(a->unit, b->unit);
}

int sample_type_find(const struct sample_type *types, size_t n, const char *type)
{
	size_t i;

	if (!type)
		return -ENOENT;
	for (i = 0; i < n; i++)
		if (types[i].type && !strcmp(types[i].type, type))
			return (int)i;
	return -ENOENT;
}
