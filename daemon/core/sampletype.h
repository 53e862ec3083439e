/* Sample types, as pprof's ValueType: what each value of a sample measures
 * ("cpu" in "nanoseconds", "alloc_space" in "bytes", ...). A store holds a
 * list of them; by convention the first is always {"samples", "count"} and
 * the last is the main value (pprof's default sample type). */
#ifndef JPROF_SAMPLETYPE_H
#define JPROF_SAMPLETYPE_H

#include <stdbool.h>
#include <stddef.h>

struct sample_type {
	const char *type;
	const char *unit;
};

/* {"samples", "count"}: the first type of every store. */
extern const struct sample_type sample_type_count;
/* The CPU profile's types: samples/count, cpu/nanoseconds. */
extern const struct sample_type sample_types_cpu[2];
#define SAMPLE_TYPES_CPU_N 2
/* The off-CPU profile's types: samples/count (intervals), offcpu/nanoseconds. */
extern const struct sample_type sample_types_offcpu[2];
#define SAMPLE_TYPES_OFFCPU_N 2
/* The wall-clock profile's types: samples/count (CPU samples and off-CPU
 * intervals), wall/nanoseconds. */
extern const struct sample_type sample_types_wall[2];
#define SAMPLE_TYPES_WALL_N 2
/* Allocations: samples/count, alloc_objects/count, alloc_space/bytes (the
 * last two estimated totals, see docs/protocol.md). */
extern const struct sample_type sample_types_alloc[3];
#define SAMPLE_TYPES_ALLOC_N 3
/* Contended monitors: samples/count, lock/count, lock_wait/nanoseconds. */
extern const struct sample_type sample_types_lock[3];
#define SAMPLE_TYPES_LOCK_N 3

/* Same type and unit (NULL equals NULL only). */
bool sample_type_eq(const struct sample_type *a, const struct sample_type *b);
/* Index of the first type named type (the type, not the unit) in
 * types[0..n), or -ENOENT. */
int sample_type_find(const struct sample_type *types, size_t n, const char *type);

#endif
