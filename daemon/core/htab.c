#include "htab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HTAB_FNV_PRIME 0x100000001b3ULL
#define HTAB_MIN_CAP 16

/* ---- hash functions ------------------------------------------------------ */

uint64_t htab_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t htab_fnv1a_byte(uint64_t h, unsigned char c)
{
	return (h ^ c) * HTAB_FNV_PRIME;
}

uint64_t htab_fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--)
		h = (h ^ *b++) * HTAB_FNV_PRIME;
	return h;
}

uint64_t htab_fnv1a_str(uint64_t h, const char *s)
{
	const unsigned char *b = (const unsigned char *)s;

	for (; *b; b++)
		h = (h ^ *b) * HTAB_FNV_PRIME;
	return h;
}

/* Capacity after growing from cap (doubling, at least HTAB_MIN_CAP). */
static size_t htab_next_cap(size_t cap)
{
	return cap ? cap * 2 : HTAB_MIN_CAP;
}

/* Load at most 1/2: linear probing keeps short runs. */
static bool htab_full(size_t used, size_t cap)
{
	return (used + 1) * 2 > cap;
}

/* Bytes of the slots the next insert allocates: 0 unless it grows. */
static size_t htab_insert_cost(size_t used, size_t cap, size_t slot)
{
	return htab_full(used, cap) ? htab_next_cap(cap) * slot : 0;
}

static void htab_count(size_t *bytes, size_t add, size_t sub)
{
	if (bytes)
		*bytes = *bytes + add - sub;
}

/* ---- index ----------------------------------------------------------------- */

uint32_t htab_index_next(const struct htab_index *t, struct htab_probe *p)
{
	size_t mask = t->cap - 1;

	if (!t->cap)
		return HTAB_NONE;
	for (; t->slots[p->pos].idx1; p->pos = (p->pos + 1) & mask) {
		const struct htab_slot *s = &t->slots[p->pos];

		if (s->hash == p->hash) {
			p->pos = (p->pos + 1) & mask;
			return s->idx1 - 1;
		}
	}
	return HTAB_NONE;
}

uint32_t htab_index_first(const struct htab_index *t, uint32_t hash, struct htab_probe *p)
{
	p->hash = hash;
	p->pos = t->cap ? hash & (t->cap - 1) : 0;
	return htab_index_next(t, p);
}

size_t htab_index_insert_cost(const struct htab_index *t)
{
	return htab_insert_cost(t->used, t->cap, sizeof(struct htab_slot));
}

static int htab_index_grow(struct htab_index *t)
{
	size_t ncap = htab_next_cap(t->cap), i, j;
	struct htab_slot *ns;

	if (ncap > UINT32_MAX)
		return -ENOMEM;
	ns = calloc(ncap, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	for (i = 0; i < t->cap; i++) {
		if (!t->slots[i].idx1)
			continue;
		for (j = t->slots[i].hash & (ncap - 1); ns[j].idx1; j = (j + 1) & (ncap - 1))
			;
		ns[j] = t->slots[i];
	}
	htab_count(t->bytes, ncap * sizeof(*ns), t->cap * sizeof(*ns));
	free(t->slots);
	t->slots = ns;
	t->cap = ncap;
	return 0;
}

int htab_index_insert(struct htab_index *t, uint32_t hash, uint32_t idx)
{
	size_t j;
	int r;

	if (idx == HTAB_NONE)
		return -EINVAL;
	if (htab_full(t->used, t->cap)) {
		r = htab_index_grow(t);
		if (r < 0)
			return r;
	}
	for (j = hash & (t->cap - 1); t->slots[j].idx1; j = (j + 1) & (t->cap - 1))
		;
	t->slots[j].idx1 = idx + 1;
	t->slots[j].hash = hash;
	t->used++;
	return 0;
}

size_t htab_index_count(const struct htab_index *t)
{
	return t->used;
}

void htab_index_release(struct htab_index *t)
{
	htab_count(t->bytes, 0, t->cap * sizeof(*t->slots));
	free(t->slots);
	t->slots = NULL;
	t->cap = t->used = 0;
}

void htab_index_clear(struct htab_index *t)
{
	if (t->slots)
		memset(t->slots, 0, t->cap * sizeof(*t->slots));
	t->used = 0;
}

/* ---- map ------------------------------------------------------------------- */

static size_t htab_map_home(const struct htab_map *m, uint64_t key)
{
	return (size_t)htab_mix64(key) & (m->cap - 1);
}

/* Slot holding key, or the empty slot where it would go (cap > 0). */
static size_t htab_map_slot(const struct htab_map *m, uint64_t key)
{
	size_t i;

	for (i = htab_map_home(m, key); m->slots[i].key != HTAB_MAP_EMPTY; i = (i + 1) & (m->cap - 1))
		if (m->slots[i].key == key)
			break;
	return i;
}

uint64_t *htab_map_get(const struct htab_map *m, uint64_t key)
{
	size_t i;

	if (key == HTAB_MAP_EMPTY)
		return m->has_empty_key ? (uint64_t *)&m->empty_key_val : NULL;
	if (!m->cap)
		return NULL;
	i = htab_map_slot(m, key);
	return m->slots[i].key == key ? &m->slots[i].val : NULL;
}

size_t htab_map_insert_cost(const struct htab_map *m)
{
	return htab_insert_cost(m->used, m->cap, sizeof(struct htab_pair));
}

static int htab_map_grow(struct htab_map *m)
{
	size_t ncap = htab_next_cap(m->cap), i, j;
	struct htab_pair *ns;

	if (ncap > SIZE_MAX / sizeof(*ns))
		return -ENOMEM;
	ns = malloc(ncap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	/* all-ones bytes: every key HTAB_MAP_EMPTY */
	memset(ns, 0xff, ncap * sizeof(*ns));
	for (i = 0; i < m->cap; i++) {
		if (m->slots[i].key == HTAB_MAP_EMPTY)
			continue;
		for (j = (size_t)htab_mix64(m->slots[i].key) & (ncap - 1); ns[j].key != HTAB_MAP_EMPTY;
		     j = (j + 1) & (ncap - 1))
			;
		ns[j] = m->slots[i];
	}
	htab_count(m->bytes, ncap * sizeof(*ns), m->cap * sizeof(*ns));
	free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return 0;
}

int htab_map_upsert(struct htab_map *m, uint64_t key, uint64_t **val)
{
	size_t i;
	int r;

	if (key == HTAB_MAP_EMPTY) {
		r = !m->has_empty_key;
		if (r)
			m->empty_key_val = 0;
		m->has_empty_key = true;
		*val = &m->empty_key_val;
		return r;
	}
	if (m->cap) {
		i = htab_map_slot(m, key);
		if (m->slots[i].key == key) {
			*val = &m->slots[i].val;
			return 0;
		}
	}
	if (htab_full(m->used, m->cap)) {
		r = htab_map_grow(m);
		if (r < 0)
			return r;
	}
	i = htab_map_slot(m, key);
	m->slots[i].key = key;
	m->slots[i].val = 0;
	m->used++;
	*val = &m->slots[i].val;
	return 1;
}

int htab_map_put(struct htab_map *m, uint64_t key, uint64_t val)
{
	uint64_t *v;
	int r = htab_map_upsert(m, key, &v);

	if (r >= 0)
		*v = val;
	return r;
}

/* Empties slot i and moves later entries of its run back into the gap, so
 * no probe run is cut (linear probing without tombstones). */
static void htab_map_remove_at(struct htab_map *m, size_t i)
{
	size_t mask = m->cap - 1, j = i, home;

	for (;;) {
		j = (j + 1) & mask;
		if (m->slots[j].key == HTAB_MAP_EMPTY)
			break;
		home = htab_map_home(m, m->slots[j].key);
		/* The entry at j may move to i only if i lies on its probe path,
		 * that is cyclically within [home, j). */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i].key = HTAB_MAP_EMPTY;
	m->used--;
}

bool htab_map_del(struct htab_map *m, uint64_t key, uint64_t *old)
{
	size_t i;

	if (key == HTAB_MAP_EMPTY) {
		if (!m->has_empty_key)
			return false;
		if (old)
			*old = m->empty_key_val;
		m->has_empty_key = false;
		return true;
	}
	if (!m->cap)
		return false;
	i = htab_map_slot(m, key);
	if (m->slots[i].key != key)
		return false;
	if (old)
		*old = m->slots[i].val;
	htab_map_remove_at(m, i);
	return true;
}

size_t htab_map_count(const struct htab_map *m)
{
	return m->used + (m->has_empty_key ? 1 : 0);
}

bool htab_map_next(const struct htab_map *m, size_t *pos, uint64_t *key, uint64_t *val)
{
	for (; *pos < m->cap; (*pos)++) {
		if (m->slots[*pos].key == HTAB_MAP_EMPTY)
			continue;
		*key = m->slots[*pos].key;
		*val = m->slots[*pos].val;
		(*pos)++;
		return true;
	}
	/* The side entry comes last. */
	if (*pos == m->cap && m->has_empty_key) {
		(*pos)++;
		*key = HTAB_MAP_EMPTY;
		*val = m->empty_key_val;
		return true;
	}
	return false;
}

size_t htab_map_retain(struct htab_map *m, bool (*keep)(uint64_t key, uint64_t *val, void *arg),
		       void *arg)
{
	size_t mask = m->cap - 1, start, i, n, deleted = 0;

	if (m->used) {
		/* Start after an empty slot: no run crosses it, so a backward
		 * shift only moves entries not visited yet, into the slot just
		 * emptied (visited again), and never past the start. */
		for (start = 0; m->slots[start].key != HTAB_MAP_EMPTY; start++)
			;
		i = (start + 1) & mask;
		for (n = 1; n < m->cap; n++) {
			while (m->slots[i].key != HTAB_MAP_EMPTY && !keep(m->slots[i].key, &m->slots[i].val, arg)) {
				htab_map_remove_at(m, i);
				deleted++;
			}
			i = (i + 1) & mask;
		}
	}
	if (m->has_empty_key && !keep(HTAB_MAP_EMPTY, &m->empty_key_val, arg)) {
		m->has_empty_key = false;
		deleted++;
	}
	return deleted;
}

void htab_map_release(struct htab_map *m)
{
	htab_count(m->bytes, 0, m->cap * sizeof(*m->slots));
	free(m->slots);
	m->slots = NULL;
	m->cap = m->used = 0;
	m->has_empty_key = false;
}
