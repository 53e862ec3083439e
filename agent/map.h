/* A small open-addressing hash map from nonzero u64 keys to u64 values (or a
 * set, without values). Not thread-safe: callers lock. Never used from the
 * signal handler. */
#ifndef JPROF_AGENT_MAP_H
#define JPROF_AGENT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct map {
	uint64_t *keys;   /* 0 = empty slot */
	uint64_t *vals;   /* NULL for a set */
	size_t cap;       /* power of two, or 0 */
	size_t len;
	bool with_vals;
};

void map_init(struct map *m, bool with_vals);
void map_fini(struct map *m);
/* Insert or replace. Returns 0, or -ENOMEM (the map is unchanged). */
int map_put(struct map *m, uint64_t key, uint64_t val);
bool map_get(const struct map *m, uint64_t key, uint64_t *val);
bool map_del(struct map *m, uint64_t key);

#endif
