/* Hash tables and hash functions for every layer: one implementation of
 * open addressing with linear probing instead of one per module.
 *
 * - struct htab_index maps a 32-bit hash to entry numbers the caller keeps
 *   in its own array (frames, stacks, strings: variable-sized keys). A
 *   lookup yields the entries whose hash matches; the caller compares keys.
 * - struct htab_map maps a u64 key to a u64 value (pids, tids, method ids,
 *   (parent, key) pairs), with deletion by backward shift (no tombstones).
 *
 * Both keep their load at most 1/2, so probe runs stay short, and both can
 * count their heap bytes into a caller's counter (the store's memory limit).
 * Neither is thread-safe; a zeroed struct is an empty table. */
#ifndef JPROF_HTAB_H
#define JPROF_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- hash functions ------------------------------------------------------ */

/* splitmix64 finaliser: every input bit affects every output bit, which
 * linear probing needs (pids, small ids and packed pairs are far from random). */
uint64_t htab_mix64(uint64_t x);

/* FNV-1a, continued from h (start with HTAB_FNV_SEED). Not mixed: pass the
 * result through htab_mix64() before using its low bits. */
#define HTAB_FNV_SEED 0xcbf29ce484222325ULL
uint64_t htab_fnv1a(uint64_t h, const void *p, size_t n);
uint64_t htab_fnv1a_str(uint64_t h, const char *s);
/* Adds one byte (a kind, a separator) to an FNV-1a hash. */
uint64_t htab_fnv1a_byte(uint64_t h, unsigned char c);

/* ---- index: hash -> caller's entry numbers ------------------------------- */

struct htab_slot {
	uint32_t idx1;   /* entry number + 1; 0 = empty */
	uint32_t hash;
};

struct htab_index {
	struct htab_slot *slots;
	size_t cap;      /* power of two, or 0 */
	size_t used;
	size_t *bytes;   /* if set, heap bytes of the slots are added / removed here */
};

/* A lookup in progress (htab_index_first / htab_index_next). */
struct htab_probe {
	size_t pos;
	uint32_t hash;
};

#define HTAB_NONE UINT32_MAX

/* Entry numbers inserted with this hash, one per call, HTAB_NONE at the end:
 *   for (i = htab_index_first(t, h, &p); i != HTAB_NONE; i = htab_index_next(t, &p))
 *           if (equal(entries[i], key)) ...
 * Valid until the next insert. */
uint32_t htab_index_first(const struct htab_index *t, uint32_t hash, struct htab_probe *p);
uint32_t htab_index_next(const struct htab_index *t, struct htab_probe *p);
/* Adds entry idx (< HTAB_NONE) under hash; the caller checked it is absent.
 * 0 or -ENOMEM. */
int htab_index_insert(struct htab_index *t, uint32_t hash, uint32_t idx);
/* Bytes the next insert would allocate (0 when it fits), to check a memory
 * limit first. */
size_t htab_index_insert_cost(const struct htab_index *t);
size_t htab_index_count(const struct htab_index *t);
/* Frees the slots (subtracting them from *bytes); the table is empty after. */
void htab_index_release(struct htab_index *t);
/* Empties the table but keeps its slots: re-inserting at most as many
 * entries as it held cannot fail. */
void htab_index_clear(struct htab_index *t);

/* ---- map: u64 key -> u64 value ------------------------------------------- */

struct htab_pair {
	uint64_t key;
	uint64_t val;
};

struct htab_map {
	struct htab_pair *slots;  /* key HTAB_MAP_EMPTY = empty slot */
	size_t cap;               /* power of two, or 0 */
	size_t used;              /* in slots, not counting the side entry */
	bool has_empty_key;       /* key HTAB_MAP_EMPTY itself lives here: */
	uint64_t empty_key_val;
	size_t *bytes;            /* as in htab_index */
};

#define HTAB_MAP_EMPTY UINT64_MAX

/* Pointer to the value of key, or NULL. Valid until the next insert or delete. */
uint64_t *htab_map_get(const struct htab_map *m, uint64_t key);
/* Finds key or adds it with value 0: *val points at its value (valid until the
 * next insert or delete). 1 added, 0 found, -ENOMEM. */
int htab_map_upsert(struct htab_map *m, uint64_t key, uint64_t **val);
/* Sets key to val, adding it if absent. 1 added, 0 replaced, -ENOMEM. */
int htab_map_put(struct htab_map *m, uint64_t key, uint64_t val);
/* Removes key; its value goes to *old if old is set. false when absent.
 * Entries are shifted back into the gap, so every other key stays findable. */
bool htab_map_del(struct htab_map *m, uint64_t key, uint64_t *old);
size_t htab_map_count(const struct htab_map *m);
/* Bytes the next insert would allocate (0 when it fits). */
size_t htab_map_insert_cost(const struct htab_map *m);

/* Iteration in no particular order: start with *pos = 0;
 *   while (htab_map_next(m, &pos, &key, &val)) ...
 * The map must not change meanwhile (use htab_map_retain to delete). */
bool htab_map_next(const struct htab_map *m, size_t *pos, uint64_t *key, uint64_t *val);
/* Visits every entry once; keep() may change *val and returns false to delete
 * the entry. Returns how many were deleted. */
size_t htab_map_retain(struct htab_map *m, bool (*keep)(uint64_t key, uint64_t *val, void *arg),
		       void *arg);
void htab_map_release(struct htab_map *m);

#endif
