#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STORE_DEFAULT_MAX_STACKS 200000
#define STORE_DEFAULT_MAX_FRAMES 200000
#define STORE_DEFAULT_MAX_BYTES ((size_t)256 << 20)

/* Arena blocks hold frame names and stack frame-id arrays: one malloc per
 * 64 KiB instead of one per stack keeps 100k+ stacks cheap to add and free. */
#define STORE_ARENA_BLOCK ((size_t)64 << 10)

/* Truncated marker stacks are exempt from max_stacks (one per process), but
 * pid_max can be millions; past this many, samples go to the pid 0 marker so
 * memory stays bounded even on a host that churns through pids. */
#define STORE_MAX_TRUNC_STACKS 4096

#define STORE_TRUNCATED_NAME "[truncated]"

struct arena_block {
	struct arena_block *next;
	size_t used;
	size_t cap;
	_Alignas(8) unsigned char data[];
};

/* Open-addressing slot: index + 1 of an entry (0 = empty) and the low hash
 * bits, so most probes settle without touching the entry itself. */
struct slot {
	uint32_t idx1;
	uint32_t hash;
};

struct table {
	struct slot *slots;
	size_t cap;   /* power of two, or 0 */
	size_t used;
};

struct frame_ent {
	struct store_frame pub;
	uint32_t hash;
};

struct stack_ent {
	struct store_stack pub;
	uint32_t hash;
};

struct name_ent {
	uint64_t key;
	char *name;
};

/* Names keyed by (pid << 32 | tid) or pid, kept in insertion order. */
struct name_map {
	struct name_ent *ents;
	size_t n;
	size_t cap;
	struct table tab;
};

struct store {
	struct store_limits lim;
	struct arena_block *arena;

	struct frame_ent *frames;
	size_t nframes;
	size_t frames_cap;
	struct table frame_tab;

	struct stack_ent *stacks;
	size_t nstacks;
	size_t stacks_cap;
	size_t ntrunc_stacks;
	struct table stack_tab;

	struct name_map threads;
	struct name_map procs;
	struct name_map cgroups;     /* per pid, "" never stored */
	struct name_map units;
	struct name_map containers;

	uint32_t trunc_frame;
	uint64_t samples;
	uint64_t weight_ns;
	uint64_t truncated_samples;
	size_t bytes;
	bool truncated;
};

/* ---- hashing ------------------------------------------------------------ */

/* splitmix64 finaliser: every input bit affects every output bit, which
 * linear probing needs (pids and small frame ids are far from random). */
static uint64_t store_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint32_t store_hash_stack(uint32_t pid, uint32_t tid, const uint32_t *frames, size_t n)
{
	uint64_t h = store_mix64(((uint64_t)pid << 32 | tid) ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));
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
	return (uint32_t)store_mix64(h);
}

/* FNV-1a over kind, name and module (with a separator so "ab"+"c" and
 * "a"+"bc" differ), then mixed. */
static uint32_t store_hash_frame(enum frame_kind kind, const char *name, const char *module)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	const unsigned char *p;

	h = (h ^ (unsigned)kind) * 0x100000001b3ULL;
	for (p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL;
	for (p = (const unsigned char *)module; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return (uint32_t)store_mix64(h);
}

/* ---- memory accounting -------------------------------------------------- */

static bool store_fits(const struct store *st, size_t extra)
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

/* Bytes a table grows by if one more entry is added (0 if no growth). */
static size_t table_growth(const struct table *t)
{
	size_t cap = t->cap ? t->cap : 8;

	/* Load factor at most 1/2: short probe runs with linear probing. */
	if ((t->used + 1) * 2 <= t->cap)
		return 0;
	return cap * 2 * sizeof(struct slot) - t->cap * sizeof(struct slot);
}

/* Bytes an entry array grows by if one more element is appended. */
static size_t array_growth(size_t n, size_t cap, size_t elem)
{
	if (n < cap)
		return 0;
	return (cap ? cap : 16) * elem;
}

static int array_reserve(struct store *st, void **arr, size_t n, size_t *cap, size_t elem)
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

/* ---- open-addressing index ---------------------------------------------- */

static int table_grow(struct store *st, struct table *t)
{
	size_t ncap = t->cap ? t->cap * 2 : 16, i, j;
	struct slot *ns;

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
	free(t->slots);
	st->bytes += (ncap - t->cap) * sizeof(*ns);
	t->slots = ns;
	t->cap = ncap;
	return 0;
}

/* Inserts idx (caller checked it is absent). */
static int table_insert(struct store *st, struct table *t, uint32_t hash, size_t idx)
{
	size_t j;
	int r;

	if ((t->used + 1) * 2 > t->cap) {
		r = table_grow(st, t);
		if (r < 0)
			return r;
	}
	for (j = hash & (t->cap - 1); t->slots[j].idx1; j = (j + 1) & (t->cap - 1))
		;
	t->slots[j].idx1 = (uint32_t)idx + 1;
	t->slots[j].hash = hash;
	t->used++;
	return 0;
}

static void table_release(struct table *t)
{
	free(t->slots);
	t->slots = NULL;
	t->cap = t->used = 0;
}

/* ---- frames ------------------------------------------------------------- */

static long store_frame_find(const struct store *st, uint32_t hash, enum frame_kind kind,
			     const char *name, const char *module)
{
	const struct table *t = &st->frame_tab;
	size_t j;

	if (!t->cap)
		return -1;
	for (j = hash & (t->cap - 1); t->slots[j].idx1; j = (j + 1) & (t->cap - 1)) {
		const struct frame_ent *f;

		if (t->slots[j].hash != hash)
			continue;
		f = &st->frames[t->slots[j].idx1 - 1];
		if (f->pub.kind == kind && !strcmp(f->pub.name, name) &&
		    !strcmp(f->pub.module, module))
			return (long)t->slots[j].idx1 - 1;
	}
	return -1;
}

int store_frame_intern(struct store *st, enum frame_kind kind, const char *name,
		       const char *module)
{
	struct frame_ent *f;
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
	need += arena_growth(st, need) + table_growth(&st->frame_tab) +
	       array_growth(st->nframes, st->frames_cap, sizeof(*st->frames));
	/* The marker frame itself is interned by store_new, before any limit. */
	if (st->nframes && (st->nframes >= st->lim.max_frames || !store_fits(st, need))) {
		st->truncated = true;
		r = -ENOSPC;
		goto out;
	}
	if (st->nframes >= INT32_MAX) {
		r = -ENOSPC;
		goto out;
	}
	r = array_reserve(st, (void **)&st->frames, st->nframes, &st->frames_cap,
			  sizeof(*st->frames));
	if (r < 0)
		goto out;
	f = &st->frames[st->nframes];
	f->pub.kind = kind;
	f->hash = hash;
	f->pub.name = store_arena_strdup(st, name);
	/* Most frames have no module: share one static "" for them. */
	f->pub.module = *module ? store_arena_strdup(st, module) : "";
	if (!f->pub.name || !f->pub.module) {
		r = -ENOMEM;
		goto out;
	}
	r = table_insert(st, &st->frame_tab, hash, st->nframes);
	if (r < 0)
		goto out;
	r = (int)st->nframes++;
out:
	return r;
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
	return &st->frames[id].pub;
}

/* ---- stacks ------------------------------------------------------------- */

static struct stack_ent *store_stack_find(const struct store *st, uint32_t hash, uint32_t pid,
					  uint32_t tid, const uint32_t *frames, size_t n)
{
	const struct table *t = &st->stack_tab;
	size_t j;

	if (!t->cap)
		return NULL;
	for (j = hash & (t->cap - 1); t->slots[j].idx1; j = (j + 1) & (t->cap - 1)) {
		struct stack_ent *s;

		if (t->slots[j].hash != hash)
			continue;
		s = &st->stacks[t->slots[j].idx1 - 1];
		if (s->pub.pid == pid && s->pub.tid == tid && s->pub.nframes == n &&
		    (n == 0 || !memcmp(s->pub.frames, frames, n * sizeof(*frames))))
			return s;
	}
	return NULL;
}

static size_t store_stack_cost(const struct store *st, size_t n)
{
	size_t ids = n * sizeof(uint32_t);

	return ids + arena_growth(st, ids) + table_growth(&st->stack_tab) +
	       array_growth(st->nstacks, st->stacks_cap, sizeof(*st->stacks));
}

static int store_stack_new(struct store *st, uint32_t hash, uint32_t pid, uint32_t tid,
			   const uint32_t *frames, size_t n, struct stack_ent **res)
{
	struct stack_ent *s;
	uint32_t *copy = NULL;
	int r;

	r = array_reserve(st, (void **)&st->stacks, st->nstacks, &st->stacks_cap,
			  sizeof(*st->stacks));
	if (r < 0)
		goto out;
	if (n) {
		copy = store_arena_alloc(st, n * sizeof(*copy), _Alignof(uint32_t));
		if (!copy) {
			r = -ENOMEM;
			goto out;
		}
		memcpy(copy, frames, n * sizeof(*copy));
	}
	r = table_insert(st, &st->stack_tab, hash, st->nstacks);
	if (r < 0)
		goto out;
	s = &st->stacks[st->nstacks++];
	s->pub.pid = pid;
	s->pub.tid = tid;
	s->pub.frames = copy;
	s->pub.nframes = (uint32_t)n;
	s->pub.samples = 0;
	s->pub.weight_ns = 0;
	s->hash = hash;
	*res = s;
out:
	return r;
}

/* The per-process marker stack that absorbs samples past a limit. */
static int store_add_truncated(struct store *st, uint32_t pid, uint64_t samples,
			       uint64_t weight_ns)
{
	struct stack_ent *s;
	uint32_t hash;
	int r = 0;

	hash = store_hash_stack(pid, 0, &st->trunc_frame, 1);
	s = store_stack_find(st, hash, pid, 0, &st->trunc_frame, 1);
	if (!s && st->ntrunc_stacks >= STORE_MAX_TRUNC_STACKS) {
		pid = 0;
		hash = store_hash_stack(pid, 0, &st->trunc_frame, 1);
		s = store_stack_find(st, hash, pid, 0, &st->trunc_frame, 1);
	}
	if (!s) {
		r = store_stack_new(st, hash, pid, 0, &st->trunc_frame, 1, &s);
		if (r < 0)
			goto out;
		st->ntrunc_stacks++;
	}
	s->pub.samples += samples;
	s->pub.weight_ns += weight_ns;
	st->samples += samples;
	st->weight_ns += weight_ns;
	st->truncated_samples += samples;
	st->truncated = true;
	r = 1;
out:
	return r;
}

int store_add(struct store *st, uint32_t pid, uint32_t tid, const uint32_t *frames,
	      size_t n, uint64_t samples, uint64_t weight_ns)
{
	struct stack_ent *s;
	uint32_t hash;
	size_t i;
	int r = 0;

	if (!st || (n && !frames) || n > UINT32_MAX) {
		r = -EINVAL;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (frames[i] >= st->nframes) {
			r = -EINVAL;
			goto out;
		}
	}
	hash = store_hash_stack(pid, tid, frames, n);
	s = store_stack_find(st, hash, pid, tid, frames, n);
	if (!s) {
		if (st->nstacks - st->ntrunc_stacks >= st->lim.max_stacks ||
		    st->nstacks >= UINT32_MAX - 1 ||
		    !store_fits(st, store_stack_cost(st, n))) {
			r = store_add_truncated(st, pid, samples, weight_ns);
			goto out;
		}
		r = store_stack_new(st, hash, pid, tid, frames, n, &s);
		if (r < 0)
			goto out;
	}
	s->pub.samples += samples;
	s->pub.weight_ns += weight_ns;
	st->samples += samples;
	st->weight_ns += weight_ns;
out:
	return r;
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

/* ---- thread and process names ------------------------------------------- */

static struct name_ent *name_map_find(const struct name_map *m, uint64_t key, uint32_t hash)
{
	size_t j;

	if (!m->tab.cap)
		return NULL;
	for (j = hash & (m->tab.cap - 1); m->tab.slots[j].idx1; j = (j + 1) & (m->tab.cap - 1)) {
		struct name_ent *e = &m->ents[m->tab.slots[j].idx1 - 1];

		if (e->key == key)
			return e;
	}
	return NULL;
}

static int name_map_set(struct store *st, struct name_map *m, uint64_t key, const char *name)
{
	uint32_t hash = (uint32_t)store_mix64(key);
	struct name_ent *e = name_map_find(m, key, hash);
	size_t len = strlen(name);
	char *copy;
	int r = 0;

	if (e && !strcmp(e->name, name))
		goto out;
	/* Renames of a known thread always succeed; new entries respect the
	 * memory limit like frames and stacks do. */
	if (!e && !store_fits(st, len + 1 + sizeof(*e) + table_growth(&m->tab) +
				      array_growth(m->n, m->cap, sizeof(*m->ents)))) {
		st->truncated = true;
		r = -ENOSPC;
		goto out;
	}
	copy = malloc(len + 1);
	if (!copy) {
		r = -ENOMEM;
		goto out;
	}
	memcpy(copy, name, len + 1);
	if (e) {
		st->bytes -= strlen(e->name) + 1;
		free(e->name);
		e->name = copy;
		st->bytes += len + 1;
		goto out;
	}
	r = array_reserve(st, (void **)&m->ents, m->n, &m->cap, sizeof(*m->ents));
	if (r == 0)
		r = table_insert(st, &m->tab, hash, m->n);
	if (r < 0) {
		free(copy);
		goto out;
	}
	m->ents[m->n].key = key;
	m->ents[m->n].name = copy;
	m->n++;
	st->bytes += len + 1;
out:
	return r;
}

static void name_map_release(struct name_map *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->ents[i].name);
	free(m->ents);
	table_release(&m->tab);
	m->ents = NULL;
	m->n = m->cap = 0;
}

int store_set_thread_name(struct store *st, uint32_t pid, uint32_t tid, const char *name)
{
	if (!st || !name)
		return -EINVAL;
	return name_map_set(st, &st->threads, (uint64_t)pid << 32 | tid, name);
}

int store_set_process_name(struct store *st, uint32_t pid, const char *comm)
{
	if (!st || !comm)
		return -EINVAL;
	return name_map_set(st, &st->procs, pid, comm);
}

int store_set_process_labels(struct store *st, uint32_t pid, const struct store_labels *l)
{
	int r = 0;

	if (!st || !l)
		return -EINVAL;
	if (l->cgroup && *l->cgroup)
		r = name_map_set(st, &st->cgroups, pid, l->cgroup);
	if (r == 0 && l->unit && *l->unit)
		r = name_map_set(st, &st->units, pid, l->unit);
	if (r == 0 && l->container && *l->container)
		r = name_map_set(st, &st->containers, pid, l->container);
	return r;
}

bool store_process_labels(const struct store *st, uint32_t pid, struct store_labels *out)
{
	uint32_t hash = (uint32_t)store_mix64(pid);
	const struct name_ent *c, *u, *k;

	*out = (struct store_labels){ "", "", "" };
	if (!st)
		return false;
	c = name_map_find(&st->cgroups, pid, hash);
	u = name_map_find(&st->units, pid, hash);
	k = name_map_find(&st->containers, pid, hash);
	if (c)
		out->cgroup = c->name;
	if (u)
		out->unit = u->name;
	if (k)
		out->container = k->name;
	return c || u || k;
}

const char *store_thread_name(const struct store *st, uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	const struct name_ent *e;

	if (!st)
		return NULL;
	e = name_map_find(&st->threads, key, (uint32_t)store_mix64(key));
	return e ? e->name : NULL;
}

const char *store_process_name(const struct store *st, uint32_t pid)
{
	const struct name_ent *e;

	if (!st)
		return NULL;
	e = name_map_find(&st->procs, pid, (uint32_t)store_mix64(pid));
	return e ? e->name : NULL;
}

int store_foreach_thread(const struct store *st,
			 int (*cb)(uint32_t pid, uint32_t tid, const char *name, void *arg),
			 void *arg)
{
	size_t i;
	int r = 0;

	if (!st || !cb)
		return -EINVAL;
	for (i = 0; i < st->threads.n; i++) {
		const struct name_ent *e = &st->threads.ents[i];

		r = cb((uint32_t)(e->key >> 32), (uint32_t)e->key, e->name, arg);
		if (r)
			break;
	}
	return r;
}

int store_foreach_process(const struct store *st,
			  int (*cb)(uint32_t pid, const char *comm, void *arg), void *arg)
{
	size_t i;
	int r = 0;

	if (!st || !cb)
		return -EINVAL;
	for (i = 0; i < st->procs.n; i++) {
		r = cb((uint32_t)st->procs.ents[i].key, st->procs.ents[i].name, arg);
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
	out->samples = st->samples;
	out->weight_ns = st->weight_ns;
	out->truncated_samples = st->truncated_samples;
	out->stacks = st->nstacks;
	out->frames = st->nframes;
	out->bytes = st->bytes;
	out->truncated = st->truncated;
}

struct store *store_new(const struct store_limits *lim)
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
	table_release(&st->frame_tab);
	free(st->stacks);
	table_release(&st->stack_tab);
	name_map_release(&st->threads);
	name_map_release(&st->procs);
	name_map_release(&st->cgroups);
	name_map_release(&st->units);
	name_map_release(&st->containers);
	free(st);
}
