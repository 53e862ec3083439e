/* Linear probing with backward-shift deletion (no tombstones), load <= 1/2. */
#include "map.h"

#include <errno.h>
#include <stdlib.h>

static size_t map_slot(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

void map_init(struct map *m, bool with_vals)
{
	*m = (struct map){ .with_vals = with_vals };
}

void map_fini(struct map *m)
{
	free(m->keys);
	free(m->vals);
	map_init(m, m->with_vals);
}

static void map_insert_raw(struct map *m, uint64_t key, uint64_t val)
{
	size_t i = map_slot(key, m->cap);

	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->keys[i])
		m->len++;
	m->keys[i] = key;
	if (m->vals)
		m->vals[i] = val;
}

static int map_grow(struct map *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	struct map n = { .cap = ncap, .with_vals = m->with_vals };

	n.keys = calloc(ncap, sizeof(*n.keys));
	if (n.keys && m->with_vals)
		n.vals = calloc(ncap, sizeof(*n.vals));
	if (!n.keys || (m->with_vals && !n.vals)) {
		free(n.keys);
		free(n.vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i])
			map_insert_raw(&n, m->keys[i], m->vals ? m->vals[i] : 0);
	free(m->keys);
	free(m->vals);
	*m = n;
	return 0;
}

int map_put(struct map *m, uint64_t key, uint64_t val)
{
	int ret;

	if (!key)
		return -EINVAL;
	if ((m->len + 1) * 2 > m->cap) {
		ret = map_grow(m);
		if (ret < 0)
			return ret;
	}
	map_insert_raw(m, key, val);
	return 0;
}

bool map_get(const struct map *m, uint64_t key, uint64_t *val)
{
	if (!m->cap || !key)
		return false;
	for (size_t i = map_slot(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key) {
			if (val)
				*val = m->vals ? m->vals[i] : 0;
			return true;
		}
	}
	return false;
}

bool map_del(struct map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!m->cap || !key)
		return false;
	for (i = map_slot(key, m->cap); m->keys[i] != key; i = (i + 1) & mask)
		if (!m->keys[i])
			return false;
	/* Shift back later members of the cluster whose home is at or before i. */
	for (j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = map_slot(m->keys[j], m->cap);

		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->keys[i] = m->keys[j];
			if (m->vals)
				m->vals[i] = m->vals[j];
			i = j;
		}
	}
	m->keys[i] = 0;
	m->len--;
	return true;
}
