#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

#define STORE_DEFAULT_MAX_STACKS 200000
#define STORE_DEFAULT_MAX_FRAMES 200000
#define STORE_DEFAULT_MAX_BYTES ((size_t)256 << 20)

/* Arena blocks hold frame names, stack frame-id arrays and stack values:
 * one malloc per 16 KiB instead of one per stack keeps 100k+ stacks cheap
 * to add and free. Not more: the host view keeps a store per 1 s window
 * (about a hundred of them), and what a window counts against the host
 * view's cap includes its blocks' unused ends: half a 64 KiB block on
 * average was a quarter of a window. */
#define STORE_ARENA_BLOCK ((size_t)16 << 10)

/* Truncated marker stacks are exempt from max_stacks (one per process), but
 * pid_max can be millions; past this many, samples go to the pid 0 marker so
 * memory stays bounded even on a host that churns through pids. */
#define STORE_MAX_TRUNC_STACKS 4096

#define STORE_TRUNCATED_NAME "[truncated]"

/* ---- hashing ------------------------------------------------------------ */

static uint32_t store_hash_stack(uint32_t pid, uint32_t tid, const uint32_t *frames, size_t n)
{
	uint64_t h = htab_mix64(((uint64_t)pid << 32 | tid) ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));
	size_t i = 0;

	/* Two ids per multiply; the final mix spreads the result. */
	for (; i + 1 < n; i += 2) {
		h ^= (uint64_t)frames[i] << 32 | frames[i + 1];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 32;
	}
	if (i < n) {
		h ^= frames[i];
		h *= 0x9e3779b97f4a7c15ULL;
		h ^= h >> 32;
	}
	return (uint32_t)htab_mix64(h);
}

/* Kind, name and module, with a separator so "ab"+"c" and "a"+"bc" differ. */
static uint32_t store_hash_frame(enum frame_kind kind, const char *name, const char *module)
{
	uint64_t h = htab_fnv1a_byte(HTAB_FNV_SEED, (unsigned char)kind);

	h = htab_fnv1a_byte(htab_fnv1a_str(h, name), 0xff);
	return (uint32_t)htab_mix64(htab_fnv1a_str(h, module));
}

/* ---- memory accounting -------------------------------------------------- */

bool store_fits(const struct store *st, size_t extra)
{
	return extra <= st->lim.max_bytes && st->bytes <= st->lim.max_bytes - extra;
}

static void *store_arena_alloc(struct store *st, size_t size, size_t align)
{
	struct arena_block *b = st->arena;
	size_t off = 0, cap;

	if (b) {
		off = (b->used + align - 1) & ~(align - 1);
		if (off <= b->cap && size <= b->cap - off) {
			b->used = off + size;
			return b->data + off;
		}
	}
	cap = size > STORE_ARENA_BLOCK ? size : STORE_ARENA_BLOCK;
	b = malloc(sizeof(*b) + cap);
	if (!b)
		return NULL;
	b->next = st->arena;
	b->used = size;
	b->cap = cap;
	st->arena = b;
	st->bytes += sizeof(*b) + cap;
	return b->data;
}

static char *store_arena_strdup(struct store *st, const char *s)
{
	size_t len = strlen(s) + 1;
	char *p = store_arena_alloc(st, len, 1);

	if (p)
		memcpy(p, s, len);
	return p;
}

/* Bytes a new arena block would add if size does not fit the current one
 * (alignment slack ignored: the accounting is approximate by design). */
static size_t arena_growth(const struct store *st, size_t size)
{
	const struct arena_block *b = st->arena;

	if (b && size + 8 <= b->cap - b->used)
		return 0;
	return sizeof(*b) + (size > STORE_ARENA_BLOCK ? size : STORE_ARENA_BLOCK);
}

size_t store_array_growth(size_t n, size_t cap, size_t elem)
{
	if (n < cap)
		return 0;
	return (cap ? cap : 16) * elem;
}

int store_array_reserve(struct store *st, void **arr, size_t n, size_t *cap, size_t elem)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	if (ncap > SIZE_MAX / elem)
		return -ENOMEM;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -ENOMEM;
	st->bytes += (ncap - *cap) * elem;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* ---- sample types --------------------------------------------------------- */

static int store_set_types(struct store *st, const struct sample_type *types, size_t n)
{
	size_t len = 0, i;
	char *p;

	if (!n || n > STORE_MAX_VALUES || !sample_type_eq(&types[0], &sample_type_count))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (!types[i].type || !*types[i].type || !types[i].unit || !*types[i].unit)
			return -EINVAL;
		len += strlen(types[i].type) + strlen(types[i].unit) + 2;
	}
	p = st->type_names = malloc(len);
	if (!p)
		return -ENOMEM;
	st->bytes += len;
	for (i = 0; i < n; i++) {
		st->types[i].type = strcpy(p, types[i].type);
		p += strlen(p) + 1;
		st->types[i].unit = strcpy(p, types[i].unit);
		p += strlen(p) + 1;
	}
	st->nvalues = n;
	return 0;
}

size_t store_value_count(const struct store *st)
{
	return st ? st->nvalues : 0;
}

const struct sample_type *store_value_type(const struct store *st, size_t i)
{
	return st && i < st->nvalues ? &st->types[i] : NULL;
}

int store_value_find(const struct store *st, const char *type)
{
	return st ? sample_type_find(st->types, st->nvalues, type) : -ENOENT;
}

/* ---- frames ------------------------------------------------------------- */

static long store_frame_find(const struct store *st, uint32_t hash, enum frame_kind kind,
			     const char *name, const char *module)
{
	struct htab_probe p;
	uint32_t i;

	for (i = htab_index_first(&st->frame_idx, hash, &p); i != HTAB_NONE;
	     i = htab_index_next(&st->frame_idx, &p)) {
		const struct store_frame *f = &st->frames[i];

		if (f->kind == kind && !strcmp(f->name, name) && !strcmp(f->module, module))
			return (long)i;
	}
	return -1;
}

/* Room for one more frame whose own data takes need bytes: -ENOSPC past
 * the frame or memory limit, else the frame array has a free slot. */
static int store_frame_room(struct store *st, size_t need)
{
	need += store_array_growth(st->nframes, st->frames_cap, sizeof(*st->frames));
	if (st->nframes >= st->lim.max_frames || st->nframes >= INT32_MAX || !store_fits(st, need))
		return -ENOSPC;
	return store_array_reserve(st, (void **)&st->frames, st->nframes, &st->frames_cap,
				   sizeof(*st->frames));
}

int store_frame_intern(struct store *st, enum frame_kind kind, const char *name,
		       const char *module)
{
	struct store_frame *f;
	size_t need;
	uint32_t hash;
	long found;
	int r;

	if (!st || !name || (unsigned)kind >= FRAME_KIND_COUNT)
		return -EINVAL;
	if (!module)
		module = "";
	hash = store_hash_frame(kind, name, module);
	found = store_frame_find(st, hash, kind, name, module);
	if (found >= 0)
		return (int)found;

	need = strlen(name) + strlen(module) + 2;
	need += arena_growth(st, need) + htab_index_insert_cost(&st->frame_idx);
	/* The marker frame itself is interned by store_new, before any limit. */
	r = st->nframes ? store_frame_room(st, need) :
	    store_array_reserve(st, (void **)&st->frames, 0, &st->frames_cap, sizeof(*st->frames));
	if (r == -ENOSPC)
		st->truncated = true;
	if (r < 0)
		goto out;
	f = &st->frames[st->nframes];
	f->kind = kind;
	f->loc = NULL;
	f->function = (uint32_t)st->nframes;
	f->name = store_arena_strdup(st, name);
	/* Most frames have no module: share one static "" for them. */
	f->module = *module ? store_arena_strdup(st, module) : "";
	if (!f->name || !f->module) {
		r = -ENOMEM;
		goto out;
	}
	r = htab_index_insert(&st->frame_idx, hash, (uint32_t)st->nframes);
	if (r < 0)
		goto out;
	r = (int)st->nframes++;
out:
	return r;
}

/* A path or build-id of a location: the copy a recent location kept when
 * equal (a binary's addresses share one), else a new one. NULL: no memory. */
static const char *store_loc_str(struct store *st, const char *s)
{
	const unsigned n = sizeof(st->loc_strs) / sizeof(st->loc_strs[0]);
	char *p;

	if (!*s)
		return "";
	for (unsigned i = 0; i < n; i++)
		if (st->loc_strs[i] && !strcmp(st->loc_strs[i], s))
			return st->loc_strs[i];
	p = store_arena_strdup(st, s);
	if (p)
		st->loc_strs[st->loc_strs_next++ % n] = p;
	return p;
}

/* Bytes a copy of loc may take (its strings counted even when shared). */
static size_t store_loc_cost(const struct store *st, const struct frame_loc *loc)
{
	size_t need = sizeof(*loc) + strlen(loc->path) + strlen(loc->build_id) + 2;

	return need + arena_growth(st, need);
}

/* loc copied into the arena; NULL when it does not fit or no memory. */
static const struct frame_loc *store_loc_copy(struct store *st, const struct frame_loc *loc)
{
	struct frame_loc *l;

	if (!store_fits(st, store_loc_cost(st, loc)))
		return NULL;
	l = store_arena_alloc(st, sizeof(*l), _Alignof(struct frame_loc));
	if (!l)
		return NULL;
	*l = *loc;
	l->path = store_loc_str(st, loc->path);
	l->build_id = store_loc_str(st, loc->build_id);
	return l->path && l->build_id ? l : NULL;
}

void store_frame_set_loc(struct store *st, uint32_t id, const struct frame_loc *loc)
{
	if (!st || !loc || id >= st->nframes || id == st->trunc_frame || st->frames[id].loc)
		return;
	st->frames[id].loc = store_loc_copy(st, loc);
}

/* ---- address frames -------------------------------------------------------- */

static uint32_t store_hash_addr(uint32_t fn, uint32_t pid, uint64_t addr)
{
	return (uint32_t)htab_mix64(((uint64_t)fn << 32 | pid) * 0x9e3779b97f4a7c15ULL ^ addr);
}

static long store_addr_find(const struct store *st, uint32_t hash, uint32_t fn,
			    const struct frame_loc *loc)
{
	struct htab_probe p;
	uint32_t i;

	for (i = htab_index_first(&st->addr_idx, hash, &p); i != HTAB_NONE;
	     i = htab_index_next(&st->addr_idx, &p)) {
		const struct store_frame *f = &st->frames[i];

		if (f->function == fn && f->loc->pid == loc->pid && f->loc->addr == loc->addr)
			return (long)i;
	}
	return -1;
}

/* A new frame for one address of function fn (name and module shared with
 * it); -ENOSPC past a limit, -ENOMEM. */
static int store_addr_new(struct store *st, uint32_t hash, uint32_t fn, const struct frame_loc *loc)
{
	const struct frame_loc *l;
	struct store_frame *f;
	int r;

	r = store_frame_room(st, store_loc_cost(st, loc) + htab_index_insert_cost(&st->addr_idx));
	if (r < 0)
		goto out;
	l = store_loc_copy(st, loc);
	if (!l) {
		r = -ENOMEM;
		goto out;
	}
	r = htab_index_insert(&st->addr_idx, hash, (uint32_t)st->nframes);
	if (r < 0)
		goto out;
	f = &st->frames[st->nframes];
	*f = st->frames[fn];
	f->loc = l;
	f->function = fn;
	r = (int)st->nframes++;
out:
	return r;
}

uint32_t store_frame_ref_at(struct store *st, enum frame_kind kind, const char *name,
			    const char *module, const struct frame_loc *loc)
{
	int fn = store_frame_intern(st, kind, name, module), r;
	uint64_t *count;
	uint32_t hash;
	long found;

	if (fn < 0)
		return store_truncated_frame(st);
	if (!loc || !st->lim.max_addrs || (uint32_t)fn == st->trunc_frame) {
		r = fn;
		goto out;
	}
	hash = store_hash_addr((uint32_t)fn, loc->pid, loc->addr);
	found = store_addr_find(st, hash, (uint32_t)fn, loc);
	if (found >= 0)
		return (uint32_t)found;
	/* Past max_addrs of this function in this process (code that is hot
	 * all over), or past a limit, the function's own frame takes the
	 * sample: one address fewer is better than a truncated stack. */
	r = store_fits(st, htab_map_insert_cost(&st->addr_counts)) ?
	    htab_map_upsert(&st->addr_counts, (uint64_t)fn << 32 | loc->pid, &count) : -ENOSPC;
	if (r >= 0 && *count < st->lim.max_addrs)
		r = store_addr_new(st, hash, (uint32_t)fn, loc);
	else
		r = -ENOSPC;
	if (r >= 0) {
		(*count)++;   /* addr_counts untouched since the upsert */
		return (uint32_t)r;
	}
	r = fn;
out:
	store_frame_set_loc(st, (uint32_t)r, loc);
	return (uint32_t)r;
}

uint32_t store_frame_ref(struct store *st, enum frame_kind kind, const char *name,
			 const char *module)
{
	int id = store_frame_intern(st, kind, name, module);

	return id < 0 ? store_truncated_frame(st) : (uint32_t)id;
}

uint32_t store_truncated_frame(const struct store *st)
{
	return st ? st->trunc_frame : 0;
}

size_t store_frame_count(const struct store *st)
{
	return st ? st->nframes : 0;
}

const struct store_frame *store_frame_get(const struct store *st, uint32_t id)
{
	if (!st || id >= st->nframes)
		return NULL;
	return &st->frames[id];
}

/* ---- stacks ------------------------------------------------------------- */

static long store_stack_find(const struct store *st, uint32_t hash, uint32_t pid, uint32_t tid,
			     const uint32_t *frames, size_t n)
{
	struct htab_probe p;
	uint32_t i;

	for (i = htab_index_first(&st->stack_idx, hash, &p); i != HTAB_NONE;
	     i = htab_index_next(&st->stack_idx, &p)) {
		const struct store_stack *s = &st->stacks[i].pub;

		if (s->pid == pid && s->tid == tid && s->nframes == n &&
		    (n == 0 || !memcmp(s->frames, frames, n * sizeof(*frames))))
			return (long)i;
	}
	return -1;
}

static size_t store_stack_cost(const struct store *st, size_t n)
{
	size_t data = n * sizeof(uint32_t) + st->nvalues * sizeof(uint64_t);

	return data + arena_growth(st, data) + htab_index_insert_cost(&st->stack_idx) +
	       store_array_growth(st->nstacks, st->stacks_cap, sizeof(*st->stacks));
}

/* Appends a stack with zero values; its index goes to *idx. */
static int store_stack_new(struct store *st, uint32_t hash, uint32_t pid, uint32_t tid,
			   const uint32_t *frames, size_t n, size_t *idx)
{
	struct stack_ent *s;
	uint32_t *copy = NULL;
	uint64_t *values;
	int r;

	r = store_array_reserve(st, (void **)&st->stacks, st->nstacks, &st->stacks_cap,
			  sizeof(*st->stacks));
	if (r < 0)
		goto out;
	values = store_arena_alloc(st, st->nvalues * sizeof(*values), _Alignof(uint64_t));
	if (n && values)
		copy = store_arena_alloc(st, n * sizeof(*copy), _Alignof(uint32_t));
	if (!values || (n && !copy)) {
		r = -ENOMEM;
		goto out;
	}
	memset(values, 0, st->nvalues * sizeof(*values));
	if (n)
		memcpy(copy, frames, n * sizeof(*copy));
	r = htab_index_insert(&st->stack_idx, hash, (uint32_t)st->nstacks);
	if (r < 0)
		goto out;
	*idx = st->nstacks;
	s = &st->stacks[st->nstacks++];
	s->pub.pid = pid;
	s->pub.tid = tid;
	s->pub.frames = copy;
	s->pub.nframes = (uint32_t)n;
	s->pub.values = values;
	s->hash = hash;
out:
	return r;
}

/* The per-process marker stack that absorbs samples past a limit. */
static int store_truncated_stack(struct store *st, uint32_t pid, size_t *idx)
{
	uint32_t hash;
	long found;
	int r = 0;

	hash = store_hash_stack(pid, 0, &st->trunc_frame, 1);
	found = store_stack_find(st, hash, pid, 0, &st->trunc_frame, 1);
	if (found < 0 && st->ntrunc_stacks >= STORE_MAX_TRUNC_STACKS) {
		pid = 0;
		hash = store_hash_stack(pid, 0, &st->trunc_frame, 1);
		found = store_stack_find(st, hash, pid, 0, &st->trunc_frame, 1);
	}
	if (found >= 0) {
		*idx = (size_t)found;
		goto out;
	}
	r = store_stack_new(st, hash, pid, 0, &st->trunc_frame, 1, idx);
	if (r == 0)
		st->ntrunc_stacks++;
out:
	return r;
}

int store_add_at(struct store *st, const struct store_sample *s, size_t *idx)
{
	uint64_t *sum;
	uint32_t hash;
	long found;
	size_t i;
	int r = 0;

	if (!st || !s || !s->values || (s->nframes && !s->frames) || s->nframes > UINT32_MAX) {
		r = -EINVAL;
		goto out;
	}
	for (i = 0; i < s->nframes; i++) {
		if (s->frames[i] >= st->nframes) {
			r = -EINVAL;
			goto out;
		}
	}
	hash = store_hash_stack(s->pid, s->tid, s->frames, s->nframes);
	found = store_stack_find(st, hash, s->pid, s->tid, s->frames, s->nframes);
	if (found >= 0) {
		*idx = (size_t)found;
	} else if (st->nstacks - st->ntrunc_stacks >= st->lim.max_stacks ||
		   st->nstacks >= UINT32_MAX - 1 || !store_fits(st, store_stack_cost(st, s->nframes))) {
		r = store_truncated_stack(st, s->pid, idx);
		if (r < 0)
			goto out;
		st->truncated_samples += s->values[0];
		st->truncated = true;
		r = 1;
	} else {
		r = store_stack_new(st, hash, s->pid, s->tid, s->frames, s->nframes, idx);
		if (r < 0)
			goto out;
	}
	sum = (uint64_t *)st->stacks[*idx].pub.values;  /* the store's own arena memory */
	for (i = 0; i < st->nvalues; i++) {
		sum[i] += s->values[i];
		st->values[i] += s->values[i];
	}
	if (s->time_ns)
		store_record_time(st, *idx, s->tid, s->time_ns, s->values);
out:
	return r;
}

int store_add(struct store *st, const struct store_sample *s)
{
	size_t idx;

	return store_add_at(st, s, &idx);
}

int store_foreach_stack(const struct store *st,
			int (*cb)(const struct store_stack *s, void *arg), void *arg)
{
	size_t i;
	int r = 0;

	if (!st || !cb)
		return -EINVAL;
	for (i = 0; i < st->nstacks; i++) {
		r = cb(&st->stacks[i].pub, arg);
		if (r)
			break;
	}
	return r;
}

size_t store_stack_count(const struct store *st)
{
	return st ? st->nstacks : 0;
}

const struct store_stack *store_stack_get(const struct store *st, size_t idx)
{
	if (!st || idx >= st->nstacks)
		return NULL;
	return &st->stacks[idx].pub;
}

/* ---- sample times ---------------------------------------------------------- */

int store_keep_times(struct store *st, size_t max)
{
	if (!st || max > UINT32_MAX)
		return -EINVAL;
	st->times_max = max;
	return 0;
}

static int store_times_reserve(struct store *st)
{
	size_t ncap, vsize = st->nvalues * sizeof(uint64_t), add;
	struct time_rec *t;
	uint64_t *v;

	if (st->ntimes < st->times_cap)
		return 0;
	ncap = st->times_cap ? st->times_cap * 2 : 256;
	if (ncap > st->times_max)
		ncap = st->times_max;
	add = (ncap - st->times_cap) * (sizeof(*t) + vsize);
	if (!store_fits(st, add))
		return -ENOSPC;
	t = realloc(st->times, ncap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	st->times = t;
	v = realloc(st->time_values, ncap * vsize);
	if (!v)
		return -ENOMEM;
	st->time_values = v;
	st->times_cap = ncap;
	st->bytes += add;
	return 0;
}

/* Keeping a time is best effort: one that does not fit is counted. */
void store_record_time(struct store *st, size_t stack, uint32_t tid, uint64_t time_ns,
		       const uint64_t *values)
{
	if (!st->times_max)
		return;
	if (st->ntimes >= st->times_max || store_times_reserve(st) < 0) {
		st->times_dropped++;
		return;
	}
	st->times[st->ntimes] = (struct time_rec){ (uint32_t)stack, tid, time_ns };
	memcpy(st->time_values + st->ntimes * st->nvalues, values, st->nvalues * sizeof(*values));
	st->ntimes++;
}

int store_foreach_time(const struct store *st,
		       int (*cb)(const struct store_time *t, void *arg), void *arg)
{
	struct store_time t;
	size_t i;
	int r = 0;

	if (!st || !cb)
		return -EINVAL;
	for (i = 0; i < st->ntimes; i++) {
		t.stack = st->times[i].stack;
		t.tid = st->times[i].tid;
		t.time_ns = st->times[i].time_ns;
		t.values = st->time_values + i * st->nvalues;
		r = cb(&t, arg);
		if (r)
			break;
	}
	return r;
}

/* ---- lifetime ----------------------------------------------------------- */

void store_get_totals(const struct store *st, struct store_totals *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!st)
		return;
	memcpy(out->values, st->values, sizeof(out->values));
	out->truncated_samples = st->truncated_samples;
	out->times = st->ntimes;
	out->times_dropped = st->times_dropped;
	out->stacks = st->nstacks;
	out->frames = st->nframes;
	out->bytes = st->bytes;
	out->truncated = st->truncated;
}

struct store *store_new(const struct store_limits *lim, const struct sample_type *types,
			size_t ntypes)
{
	struct store *st = calloc(1, sizeof(*st));
	int r;

	if (!st)
		return NULL;
	if (lim)
		st->lim = *lim;
	if (!st->lim.max_stacks)
		st->lim.max_stacks = STORE_DEFAULT_MAX_STACKS;
	if (!st->lim.max_frames)
		st->lim.max_frames = STORE_DEFAULT_MAX_FRAMES;
	if (!st->lim.max_bytes)
		st->lim.max_bytes = STORE_DEFAULT_MAX_BYTES;
	st->bytes = sizeof(*st);
	st->frame_idx.bytes = &st->bytes;
	st->addr_idx.bytes = &st->bytes;
	st->addr_counts.bytes = &st->bytes;
	st->stack_idx.bytes = &st->bytes;
	st->threads.idx.bytes = &st->bytes;
	st->procs.idx.bytes = &st->bytes;
	st->cgroups.idx.bytes = &st->bytes;
	st->units.idx.bytes = &st->bytes;
	st->containers.idx.bytes = &st->bytes;
	if (!types) {
		types = sample_types_cpu;
		ntypes = SAMPLE_TYPES_CPU_N;
	}
	r = store_set_types(st, types, ntypes);
	if (r == 0)
		r = store_frame_intern(st, FRAME_MARKER, STORE_TRUNCATED_NAME, "");
	if (r < 0) {
		store_free(st);
		return NULL;
	}
	st->trunc_frame = (uint32_t)r;
	return st;
}

void store_free(struct store *st)
{
	struct arena_block *b, *next;

	if (!st)
		return;
	for (b = st->arena; b; b = next) {
		next = b->next;
		free(b);
	}
	free(st->frames);
	htab_index_release(&st->frame_idx);
	htab_index_release(&st->addr_idx);
	htab_map_release(&st->addr_counts);
	free(st->stacks);
	htab_index_release(&st->stack_idx);
	store_names_release(st);
	free(st->times);
	free(st->time_values);
	free(st->type_names);
	free(st);
}
