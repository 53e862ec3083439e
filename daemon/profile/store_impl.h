/* The store's insides, shared by its parts (store.c: frames, stacks,
 * values, times; store_names.c: thread and process names and labels;
 * store_merge.c: copying one store into another). Only those include it. */
#ifndef JPROF_STORE_IMPL_H
#define JPROF_STORE_IMPL_H

#include "htab.h"
#include "store.h"

struct arena_block {
	struct arena_block *next;
	size_t used;
	size_t cap;
	_Alignas(8) unsigned char data[];
};

/* pub.values points into the store's arena (written by store_add). */
struct stack_ent {
	struct store_stack pub;
	uint32_t hash;
};

struct name_ent {
	uint64_t key;
	char *name;
	uint64_t java_id;    /* threads: java.lang.Thread's id, 0 if unknown */
};

/* Names keyed by (pid << 32 | tid) or pid, kept in insertion order; the map
 * goes from key to index in ents. */
struct name_map {
	struct name_ent *ents;
	size_t n;
	size_t cap;
	struct htab_map idx;
};

struct time_rec {
	uint32_t stack;
	uint32_t tid;
	uint64_t time_ns;
};

struct store {
	struct store_limits lim;
	struct arena_block *arena;

	struct sample_type types[STORE_MAX_VALUES];
	size_t nvalues;
	char *type_names;            /* the strings types[] point to */

	struct store_frame *frames;
	size_t nframes;
	size_t frames_cap;
	struct htab_index frame_idx;
	struct htab_index addr_idx;  /* address frames, by (function, pid, addr) */
	struct htab_map addr_counts; /* (function << 32 | pid) -> address frames */
	/* Paths and build-ids of recent locations: address frames of one
	 * binary share one copy instead of one per address. */
	const char *loc_strs[8];
	unsigned loc_strs_next;

	struct stack_ent *stacks;
	size_t nstacks;
	size_t stacks_cap;
	size_t ntrunc_stacks;
	struct htab_index stack_idx;

	struct name_map threads;
	struct name_map procs;
	struct name_map cgroups;     /* per pid, "" never stored */
	struct name_map units;
	struct name_map containers;

	struct time_rec *times;
	uint64_t *time_values;       /* nvalues per record */
	size_t ntimes, times_cap, times_max;
	uint64_t times_dropped;

	uint32_t trunc_frame;
	uint64_t values[STORE_MAX_VALUES];
	uint64_t truncated_samples;
	size_t bytes;
	bool truncated;
};

/* Room for extra bytes under the memory limit. */
bool store_fits(const struct store *st, size_t extra);
/* Bytes an entry array grows by if one more element is appended. */
size_t store_array_growth(size_t n, size_t cap, size_t elem);
/* Makes room for element n (doubling), counting the bytes. */
int store_array_reserve(struct store *st, void **arr, size_t n, size_t *cap, size_t elem);
/* store_add; the index of the stack the sample went to goes to *idx. */
int store_add_at(struct store *st, const struct store_sample *s, size_t *idx);
/* Keeps a sample time if asked and there is room, else counts it dropped. */
void store_record_time(struct store *st, size_t stack, uint32_t tid, uint64_t time_ns,
		       const uint64_t *values);
/* Frees every name map. */
void store_names_release(struct store *st);

#endif
