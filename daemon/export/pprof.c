#include "pprof.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "htab.h"
#include "profile.pb-c.h"

/* Where source lines come from (pprof_set_lines); set once at start-up. */
static pprof_lines_fn pprof_lines;
static void *pprof_lines_arg;
static unsigned pprof_lines_budget_ms;
/* Inlined frames taken per location, the function itself included. */
#define PPROF_MAX_INLINE 8

void pprof_set_lines(pprof_lines_fn fn, void *arg, unsigned budget_ms)
{
	pprof_lines = fn;
	pprof_lines_arg = arg;
	pprof_lines_budget_ms = budget_ms;
}

/* The kernel's mapping, named as perf and pprof users know it. */
static const char pprof_kernel_mapping[] = "[kernel.kallsyms]";

/* The profile's string table: index 0 is "", every string once. */
struct pprof_strings {
	struct buf data;   /* NUL-separated */
	size_t *off;
	size_t n, cap;
	struct htab_index idx;
};

static uint32_t pprof_str_hash(const char *s, size_t len)
{
	return (uint32_t)htab_mix64(htab_fnv1a(HTAB_FNV_SEED, s, len));
}

/* Index of s[0..len) in the table, adding it if new; -errno. */
static int64_t pprof_string(struct pprof_strings *t, const char *s, size_t len)
{
	uint32_t hash = pprof_str_hash(s, len), i;
	struct htab_probe p;
	int r;

	for (i = htab_index_first(&t->idx, hash, &p); i != HTAB_NONE; i = htab_index_next(&t->idx, &p)) {
		const char *have = t->data.data + t->off[i];

		if (strlen(have) == len && !memcmp(have, s, len))
			return i;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		size_t *off = realloc(t->off, cap * sizeof(*off));

		if (!off)
			return -ENOMEM;
		t->off = off;
		t->cap = cap;
	}
	if (t->n >= HTAB_NONE)
		return -E2BIG;
	t->off[t->n] = t->data.len;
	r = buf_append(&t->data, s, len);
	if (r == 0)
		r = buf_putc(&t->data, '\0');
	if (r == 0)
		r = htab_index_insert(&t->idx, hash, (uint32_t)t->n);
	if (r < 0)
		return r;
	return (int64_t)t->n++;
}

static int64_t pprof_cstring(struct pprof_strings *t, const char *s)
{
	return pprof_string(t, s, strlen(s));
}

/* A name under the shared naming rules (no control bytes, valid UTF-8,
 * which proto3 string fields require). */
static int64_t pprof_clean_string(struct pprof_strings *t, const char *s, struct buf *tmp)
{
	int r;

	buf_reset(tmp);
	r = export_text(s, 0, tmp);
	if (r < 0)
		return r;
	return pprof_string(t, tmp->data ? tmp->data : "", tmp->len);
}

static void pprof_strings_release(struct pprof_strings *t)
{
	buf_release(&t->data);
	free(t->off);
	htab_index_release(&t->idx);
}

/* Everything the packed message points to, freed in one place. */
struct pprof_ctx {
	const struct store *st;
	struct pprof_strings strs;
	struct buf tmp;
	/* Functions, the locations' own and inlined ones, one per (name,
	 * system name, file): a function sampled at several addresses is one
	 * function with several locations. id = index + 1. */
	Perftools__Profiles__Function *fns;
	Perftools__Profiles__Function **funcp;
	size_t nfns, fns_cap;
	struct htab_index fn_idx;
	Perftools__Profiles__Location *locs;
	Perftools__Profiles__Location **locp;
	Perftools__Profiles__Line *lines;
	Perftools__Profiles__Line **linep;
	size_t nlocs;
	/* Inlined frames: lines and line lists, one block each per location
	 * that has them (freed with the profile). */
	void **xblocks;
	size_t nxblocks, xblocks_cap;
	bool lines_on;                       /* a line source is set */
	uint64_t lines_deadline;             /* CLOCK_MONOTONIC ns; 0 = no waiting */
	uint64_t *loc_of_frame;              /* frame id -> location id, 0 = none yet */
	uint64_t no_stack_loc;
	Perftools__Profiles__Mapping *maps;
	Perftools__Profiles__Mapping **mapp;
	size_t nmaps, maps_cap;
	uint32_t *map_of_string;             /* string index -> mapping id, 0 = none */
	size_t map_of_string_len;
	struct htab_index map_idx;           /* mappings of frame locations, by path and start */
	Perftools__Profiles__Sample *samples;
	Perftools__Profiles__Sample **samplep;
	Perftools__Profiles__Label *labels;
	Perftools__Profiles__Label **labelp;
	uint64_t *locids;
	int64_t *values;
	char **strtab;
};

/* A new mapping (id = index + 1), zeroed. */
static Perftools__Profiles__Mapping *pprof_mapping_new(struct pprof_ctx *c)
{
	Perftools__Profiles__Mapping *m;

	if (c->nmaps == c->maps_cap) {
		/* Pointers into maps are taken only after the last mapping is
		 * made, so growing the array here is safe. */
		size_t cap = c->maps_cap ? c->maps_cap * 2 : 16;

		m = realloc(c->maps, cap * sizeof(*m));
		if (!m)
			return NULL;
		c->maps = m;
		c->maps_cap = cap;
	}
	m = &c->maps[c->nmaps];
	perftools__profiles__mapping__init(m);
	m->id = ++c->nmaps;
	return m;
}

/* The mapping a user frame's location lies in, as /proc/PID/maps had it:
 * path as mapped, start, limit, file offset and build-id, which is what a
 * backend needs to symbolize the address again. has_functions once a
 * location in it has a name from a symbol table (the file had one: the
 * others' module+0x names are what it has for them), has_line_numbers and
 * has_filenames once one has a source line: pprof then takes the names and
 * lines as given instead of looking for the file to symbolize it again. */
static Perftools__Profiles__Mapping *pprof_loc_mapping_find(struct pprof_ctx *c, uint32_t hash,
							     int64_t path, int64_t bid,
							     const struct frame_loc *loc)
{
	struct htab_probe p;

	for (uint32_t i = htab_index_first(&c->map_idx, hash, &p); i != HTAB_NONE;
	     i = htab_index_next(&c->map_idx, &p)) {
		Perftools__Profiles__Mapping *m = &c->maps[i];

		if (m->filename == path && m->memory_start == loc->map_start &&
		    m->memory_limit == loc->map_limit && m->file_offset == loc->map_offset &&
		    m->build_id == bid)
			return m;
	}
	return NULL;
}

static int pprof_loc_mapping(struct pprof_ctx *c, const struct frame_loc *loc, uint64_t *id)
{
	int64_t path = pprof_clean_string(&c->strs, loc->path, &c->tmp);
	int64_t bid = path < 0 ? path : pprof_cstring(&c->strs, loc->build_id);
	Perftools__Profiles__Mapping *m;
	uint32_t hash;
	int r;

	if (bid < 0)
		return (int)bid;
	hash = (uint32_t)htab_mix64((uint64_t)path * 0x9e3779b97f4a7c15ull ^ loc->map_start);
	m = pprof_loc_mapping_find(c, hash, path, bid, loc);
	if (!m) {
		m = pprof_mapping_new(c);
		if (!m)
			return -ENOMEM;
		m->memory_start = loc->map_start;
		m->memory_limit = loc->map_limit;
		m->file_offset = loc->map_offset;
		m->filename = path;
		m->build_id = bid;
		r = htab_index_insert(&c->map_idx, hash, (uint32_t)(m->id - 1));
		if (r < 0)
			return r;
	}
	if (loc->symbolized)
		m->has_functions = true;
	*id = m->id;
	return 0;
}

/* Mapping id for a module file name (string index), made on first use:
 * frames without a location (vdso, kernel). */
static int pprof_mapping(struct pprof_ctx *c, int64_t name, uint64_t *id)
{
	if ((size_t)name >= c->map_of_string_len) {
		size_t n = (size_t)name * 2 + 64;
		uint32_t *m = realloc(c->map_of_string, n * sizeof(*m));

		if (!m)
			return -ENOMEM;
		memset(m + c->map_of_string_len, 0, (n - c->map_of_string_len) * sizeof(*m));
		c->map_of_string = m;
		c->map_of_string_len = n;
	}
	if (!c->map_of_string[name]) {
		Perftools__Profiles__Mapping *m = pprof_mapping_new(c);

		if (!m)
			return -ENOMEM;
		m->filename = name;
		/* Names come from our symbolizer: pprof must not try to
		 * symbolize these (it would look for the files locally). */
		m->has_functions = true;
		c->map_of_string[name] = (uint32_t)m->id;
	}
	*id = c->map_of_string[name];
	return 0;
}

/* Id of the function (name, system name, file: string indexes), made on
 * first use. */
static int pprof_function(struct pprof_ctx *c, int64_t name, int64_t sysname, int64_t file,
			  uint64_t *id)
{
	uint32_t hash = (uint32_t)htab_mix64(((uint64_t)name * 0x9e3779b97f4a7c15ull ^ (uint64_t)sysname) *
					     0x9e3779b97f4a7c15ull ^ (uint64_t)file);
	Perftools__Profiles__Function *fn;
	struct htab_probe p;
	uint32_t i;
	int r;

	for (i = htab_index_first(&c->fn_idx, hash, &p); i != HTAB_NONE; i = htab_index_next(&c->fn_idx, &p)) {
		fn = &c->fns[i];
		if (fn->name == name && fn->system_name == sysname && fn->filename == file) {
			*id = fn->id;
			return 0;
		}
	}
	if (c->nfns == c->fns_cap) {
		/* Lines name functions by id: moving the array is safe. */
		size_t cap = c->fns_cap ? c->fns_cap * 2 : 256;

		fn = realloc(c->fns, cap * sizeof(*fn));
		if (!fn)
			return -ENOMEM;
		c->fns = fn;
		c->fns_cap = cap;
	}
	if (c->nfns >= HTAB_NONE)
		return -E2BIG;
	r = htab_index_insert(&c->fn_idx, hash, (uint32_t)c->nfns);
	if (r < 0)
		return r;
	fn = &c->fns[c->nfns];
	perftools__profiles__function__init(fn);
	fn->id = ++c->nfns;
	fn->name = name;
	fn->system_name = sysname;
	fn->filename = file;
	*id = fn->id;
	return 0;
}

static int pprof_keep_block(struct pprof_ctx *c, void *p)
{
	if (!p)
		return -ENOMEM;
	if (c->nxblocks == c->xblocks_cap) {
		size_t cap = c->xblocks_cap ? c->xblocks_cap * 2 : 64;
		void **b = realloc(c->xblocks, cap * sizeof(*b));

		if (!b) {
			free(p);
			return -ENOMEM;
		}
		c->xblocks = b;
		c->xblocks_cap = cap;
	}
	c->xblocks[c->nxblocks++] = p;
	return 0;
}

/* Inlined functions at a location (fl[0 .. n-1), innermost first, as
 * pprof wants them) become further lines before the location's own. */
static int pprof_inline_lines(struct pprof_ctx *c, Perftools__Profiles__Location *l,
			      const struct frame_line *fl, size_t n)
{
	Perftools__Profiles__Line *xl, **xlp;
	int r;

	xl = calloc(n, sizeof(*xl));
	r = pprof_keep_block(c, xl);
	xlp = r < 0 ? NULL : calloc(n, sizeof(*xlp));
	r = r < 0 ? r : pprof_keep_block(c, xlp);
	if (r < 0)
		return r;
	for (size_t i = 0; i + 1 < n; i++) {
		int64_t name = pprof_clean_string(&c->strs, *fl[i].function ? fl[i].function : "??",
						  &c->tmp);
		int64_t ifile = name < 0 ? name : pprof_clean_string(&c->strs, fl[i].file, &c->tmp);
		uint64_t fid;

		r = ifile < 0 ? (int)ifile : pprof_function(c, name, name, ifile, &fid);
		if (r < 0)
			return r;
		perftools__profiles__line__init(&xl[i]);
		xl[i].function_id = fid;
		xl[i].line = fl[i].line;
		xlp[i] = &xl[i];
	}
	xl[n - 1] = *l->line[0];
	xlp[n - 1] = &xl[n - 1];
	l->line = xlp;
	l->n_line = n;
	return 0;
}

size_t pprof_lines_prefetch(const struct store *st, size_t from)
{
	size_t nframes = store_frame_count(st);

	if (!pprof_lines)
		return nframes;
	for (size_t i = from; i < nframes; i++) {
		const struct store_frame *f = store_frame_get(st, (uint32_t)i);

		if (f && f->kind == FRAME_NATIVE && f->loc && *f->loc->build_id)
			pprof_lines(pprof_lines_arg, f->loc, 0, NULL, 0);
	}
	return nframes;
}

/* Queues the lookup of every user frame's line not asked for yet (answers
 * already given are cached), then sets how long the rendering may wait for
 * them. */
static void pprof_lines_start(struct pprof_ctx *c)
{
	struct timespec ts;

	if (!pprof_lines)
		return;
	pprof_lines_prefetch(c->st, 0);
	c->lines_on = true;
	if (!pprof_lines_budget_ms)
		return;   /* lines_deadline 0: answers at hand only */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	c->lines_deadline = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
			    (uint64_t)pprof_lines_budget_ms * 1000000ull;
}

/* Location (and function) for a frame; f NULL = the "[no_stack]" marker.
 * A frame with a location is one sampled address (of a store that keeps
 * them, store_frame_ref_at) or the function's first one: the location has
 * that address and its source line; the function is shared by name. */
static int pprof_location(struct pprof_ctx *c, const struct store_frame *f, uint64_t *loc)
{
	Perftools__Profiles__Location *l = &c->locs[c->nlocs];
	Perftools__Profiles__Line *line = &c->lines[c->nlocs];
	struct frame_line fl[PPROF_MAX_INLINE];
	uint64_t map = 0, address = 0, fid;
	int64_t name, sysname, file = 0;
	size_t nfl = 0;
	int r;

	buf_reset(&c->tmp);
	r = f ? export_frame_name(f, 0, &c->tmp) : buf_puts(&c->tmp, EXPORT_NO_STACK);
	if (r < 0)
		return r;
	name = pprof_string(&c->strs, c->tmp.data, c->tmp.len);
	if (name < 0)
		return (int)name;
	/* A typed Java frame's system name carries its type as async-profiler
	 * writes it ("Foo.bar_[j]"): the same method run two ways is two
	 * functions with one name. */
	sysname = name;
	if (f && (f->kind == FRAME_JAVA_JIT || f->kind == FRAME_JAVA_C1 ||
		  f->kind == FRAME_JAVA_INLINED || f->kind == FRAME_JAVA_INTERP)) {
		buf_reset(&c->tmp);
		r = export_frame_name(f, EXPORT_NAME_JAVA_SUFFIX, &c->tmp);
		if (r < 0)
			return r;
		sysname = pprof_string(&c->strs, c->tmp.data, c->tmp.len);
		if (sysname < 0)
			return (int)sysname;
	}
	if (f && f->kind == FRAME_KERNEL) {
		int64_t kname = pprof_cstring(&c->strs, pprof_kernel_mapping);

		if (kname < 0)
			return (int)kname;
		file = f->module && *f->module ? pprof_clean_string(&c->strs, f->module, &c->tmp) : kname;
		r = file < 0 ? (int)file : pprof_mapping(c, kname, &map);
	} else if (f && f->loc) {
		/* User code: the address, so a backend can symbolize it again.
		 * Kernel frames never get here: no kernel address leaves. */
		r = pprof_loc_mapping(c, f->loc, &map);
		file = r < 0 || !f->module || !*f->module ? 0 :
			pprof_clean_string(&c->strs, f->module, &c->tmp);
		if (file < 0)
			r = (int)file;
		address = f->loc->addr;
	} else if (f && f->module && *f->module) {
		file = pprof_clean_string(&c->strs, f->module, &c->tmp);
		r = file < 0 ? (int)file : pprof_mapping(c, file, &map);
	}
	if (r < 0)
		return r;
	/* Debug info's file and line of the address: the function keeps its
	 * symbol name and gets the source file. */
	if (f && f->kind == FRAME_NATIVE && f->loc && c->lines_on && *f->loc->build_id)
		nfl = pprof_lines(pprof_lines_arg, f->loc, c->lines_deadline, fl, PPROF_MAX_INLINE);
	if (nfl) {
		file = pprof_clean_string(&c->strs, fl[nfl - 1].file, &c->tmp);
		if (file < 0)
			return (int)file;
		if (f->loc) {
			Perftools__Profiles__Mapping *m = &c->maps[map - 1];

			m->has_line_numbers = m->has_filenames = true;
			if (nfl > 1)
				m->has_inline_frames = true;
		}
	}
	r = pprof_function(c, name, sysname, file, &fid);
	if (r < 0)
		return r;
	perftools__profiles__line__init(line);
	line->function_id = fid;
	line->line = nfl ? fl[nfl - 1].line : 0;
	perftools__profiles__location__init(l);
	l->id = c->nlocs + 1;
	l->mapping_id = map;
	l->address = address;
	l->n_line = 1;
	l->line = &c->linep[c->nlocs];
	c->linep[c->nlocs] = line;
	c->locp[c->nlocs] = l;
	*loc = l->id;
	c->nlocs++;
	return nfl > 1 ? pprof_inline_lines(c, l, fl, nfl) : 0;
}

/* Labels a sample may carry: thread, java_frame_type, tid, pid, comm,
 * cgroup, unit, container. */
#define PPROF_MAX_LABELS 8

/* The type of the sample's innermost Java frame ("interpreted", "compiled",
 * "c1", "inlined"), or NULL if it has none or its type is unknown: pprof labels
 * are per sample, so this is what a label can say (each frame's own type is
 * in its function's system name). */
static const char *pprof_java_leaf_type(const struct store *st, const struct store_stack *s)
{
	for (size_t j = s->nframes; j-- > 0;) {
		switch (store_frame_get(st, s->frames[j])->kind) {
		case FRAME_JAVA_INTERP:
			return "interpreted";
		case FRAME_JAVA_JIT:
			return "compiled";
		case FRAME_JAVA_C1:
			return "c1";
		case FRAME_JAVA_INLINED:
			return "inlined";
		case FRAME_JAVA:
			return NULL;
		default:
			break;
		}
	}
	return NULL;
}

static int pprof_label_str(struct pprof_ctx *c, Perftools__Profiles__Label *l, const char *key,
			   const char *v)
{
	int64_t k = pprof_cstring(&c->strs, key), s = k < 0 ? k : pprof_clean_string(&c->strs, v, &c->tmp);

	if (s < 0)
		return (int)s;
	perftools__profiles__label__init(l);
	l->key = k;
	l->str = s;
	return 0;
}

static int pprof_label_num(struct pprof_ctx *c, Perftools__Profiles__Label *l, const char *key,
			   int64_t v)
{
	int64_t k = pprof_cstring(&c->strs, key);

	if (k < 0)
		return (int)k;
	perftools__profiles__label__init(l);
	l->key = k;
	l->num = v;
	return 0;
}

static int pprof_value_type(struct pprof_ctx *c, Perftools__Profiles__ValueType *vt,
			    const char *type, const char *unit)
{
	int64_t t = pprof_cstring(&c->strs, type), u = t < 0 ? t : pprof_cstring(&c->strs, unit);

	if (u < 0)
		return (int)u;
	perftools__profiles__value_type__init(vt);
	vt->type = t;
	vt->unit = u;
	return 0;
}

/* Appends the gzip stream of data to out. */
static int pprof_gzip(const uint8_t *data, size_t len, struct buf *out)
{
	z_stream z = { 0 };
	size_t bound;
	int r, zr;

	zr = deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16 /* gzip header */, 8,
			  Z_DEFAULT_STRATEGY);
	if (zr != Z_OK)
		return -ENOMEM;
	/* gzip adds a header and trailer deflateBound() does not count */
	bound = deflateBound(&z, (uLong)len) + 64;
	r = buf_reserve(out, bound);
	if (r < 0)
		goto out;
	z.next_in = (Bytef *)data;
	z.avail_in = (uInt)len;
	z.next_out = (Bytef *)out->data + out->len;
	z.avail_out = (uInt)bound;
	zr = deflate(&z, Z_FINISH);
	if (zr != Z_STREAM_END) {
		r = -EIO;
		goto out;
	}
	out->len += bound - z.avail_out;
	out->data[out->len] = '\0';
	r = 0;
out:
	deflateEnd(&z);
	return r;
}

int pprof_render(const struct export_job *job, struct buf *out)
{
	const struct store *st = job->st;
	const struct export_meta *meta = job->meta;
	Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	Perftools__Profiles__ValueType types[STORE_MAX_VALUES + 1], *typep[STORE_MAX_VALUES];
	struct pprof_ctx c = { .st = st, .tmp = BUF_INIT };
	size_t nframes = store_frame_count(st), nstacks = store_stack_count(st);
	size_t nv = store_value_count(st);
	bool period = meta->period_type.type && meta->period_type.unit;
	size_t i, j, nlocids = 0, nlabels = 0, slots;
	int64_t comment[2];
	uint8_t *packed = NULL;
	size_t packed_len;
	int r;

	/* uInt lengths for zlib; a store is far below 4 GiB anyway */
	for (i = 0; i < nstacks; i++)
		nlocids += store_stack_get(st, i)->nframes ? store_stack_get(st, i)->nframes : 1;
	slots = nframes + 1;
	c.locs = calloc(slots, sizeof(*c.locs));
	c.locp = calloc(slots, sizeof(*c.locp));
	c.lines = calloc(slots, sizeof(*c.lines));
	c.linep = calloc(slots, sizeof(*c.linep));
	c.loc_of_frame = calloc(slots, sizeof(*c.loc_of_frame));
	c.samples = calloc(nstacks + 1, sizeof(*c.samples));
	c.samplep = calloc(nstacks + 1, sizeof(*c.samplep));
	c.labels = calloc(nstacks * PPROF_MAX_LABELS + 1, sizeof(*c.labels));
	c.labelp = calloc(nstacks * PPROF_MAX_LABELS + 1, sizeof(*c.labelp));
	c.locids = calloc(nlocids + 1, sizeof(*c.locids));
	c.values = calloc(nstacks * nv + 1, sizeof(*c.values));
	if (!c.locs || !c.locp || !c.lines || !c.linep || !c.loc_of_frame ||
	    !c.samples || !c.samplep || !c.labels || !c.labelp || !c.locids || !c.values) {
		r = -ENOMEM;
		goto out;
	}
	r = (int)pprof_cstring(&c.strs, "");   /* index 0 */
	for (i = 0; r == 0 && i < nv; i++) {
		const struct sample_type *vt = store_value_type(st, i);

		r = pprof_value_type(&c, &types[i], vt->type, vt->unit);
	}
	if (r == 0 && period)
		r = pprof_value_type(&c, &types[nv], meta->period_type.type, meta->period_type.unit);
	if (r < 0)
		goto out;
	pprof_lines_start(&c);

	nlocids = 0;
	for (i = 0; i < nstacks; i++) {
		const struct store_stack *s = store_stack_get(st, i);
		Perftools__Profiles__Sample *smp = &c.samples[i];

		if (export_cancelled(job)) {
			r = -ECANCELED;
			goto out;
		}
		Perftools__Profiles__Label *lab = &c.labels[nlabels];
		const char *tname = store_thread_name(st, s->pid, s->tid);
		const char *comm = store_process_name(st, s->pid);
		struct store_labels pl;
		const char *jtype;
		size_t nl = 0;

		perftools__profiles__sample__init(smp);
		smp->location_id = &c.locids[nlocids];
		/* pprof wants the leaf first; the store keeps the root first */
		for (j = s->nframes; j-- > 0;) {
			uint32_t fid = s->frames[j];

			if (!c.loc_of_frame[fid]) {
				r = pprof_location(&c, store_frame_get(st, fid), &c.loc_of_frame[fid]);
				if (r < 0)
					goto out;
			}
			c.locids[nlocids++] = c.loc_of_frame[fid];
		}
		if (!s->nframes) {
			if (!c.no_stack_loc) {
				r = pprof_location(&c, NULL, &c.no_stack_loc);
				if (r < 0)
					goto out;
			}
			c.locids[nlocids++] = c.no_stack_loc;
		}
		smp->n_location_id = (size_t)(&c.locids[nlocids] - smp->location_id);
		smp->value = &c.values[nv * i];
		smp->n_value = nv;
		for (j = 0; j < nv; j++)
			smp->value[j] = (int64_t)s->values[j];
		if (tname && *tname)
			r = pprof_label_str(&c, &lab[nl++], "thread", tname);
		if (r == 0 && (jtype = pprof_java_leaf_type(st, s)))
			r = pprof_label_str(&c, &lab[nl++], "java_frame_type", jtype);
		if (r == 0 && s->tid)
			r = pprof_label_num(&c, &lab[nl++], "tid", s->tid);
		if (r == 0)
			r = pprof_label_num(&c, &lab[nl++], "pid", s->pid);
		if (r == 0 && comm && *comm)
			r = pprof_label_str(&c, &lab[nl++], "comm", comm);
		if (r == 0 && store_process_labels(st, s->pid, &pl)) {
			/* Continuous profiles know where the process ran. */
			if (*pl.cgroup)
				r = pprof_label_str(&c, &lab[nl++], "cgroup", pl.cgroup);
			if (r == 0 && *pl.unit)
				r = pprof_label_str(&c, &lab[nl++], "unit", pl.unit);
			if (r == 0 && *pl.container)
				r = pprof_label_str(&c, &lab[nl++], "container", pl.container);
		}
		if (r < 0)
			goto out;
		for (j = 0; j < nl; j++)
			c.labelp[nlabels + j] = &lab[j];
		smp->label = &c.labelp[nlabels];
		smp->n_label = nl;
		nlabels += nl;
		c.samplep[i] = smp;
	}
	c.mapp = calloc(c.nmaps + 1, sizeof(*c.mapp));
	if (!c.mapp) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < c.nmaps; i++)
		c.mapp[i] = &c.maps[i];
	c.funcp = calloc(c.nfns + 1, sizeof(*c.funcp));
	if (!c.funcp) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < c.nfns; i++)
		c.funcp[i] = &c.fns[i];

	buf_reset(&c.tmp);
	r = buf_printf(&c.tmp, "jprofd %s profile, status %s",
		       meta->event ? meta->event : export_main_type(st)->type,
		       meta->status ? meta->status : "unknown");
	if (r < 0)
		goto out;
	comment[0] = pprof_cstring(&c.strs, c.tmp.data);
	comment[1] = pprof_cstring(&c.strs, store_stack_count(st) ? "" : "no samples");
	if (comment[0] < 0 || comment[1] < 0) {
		r = -ENOMEM;
		goto out;
	}
	c.strtab = calloc(c.strs.n, sizeof(*c.strtab));
	if (!c.strtab) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < c.strs.n; i++)
		c.strtab[i] = c.strs.data.data + c.strs.off[i];

	for (i = 0; i < nv; i++)
		typep[i] = &types[i];
	prof.n_sample_type = nv;
	prof.sample_type = typep;
	/* The value the one-value formats show when it is not the count (a
	 * recording of several events: the first one's main value), else the
	 * main value, the last type (pprof's own default too). */
	prof.default_sample_type = types[job->value ? job->value : nv - 1].type;
	prof.n_sample = nstacks;
	prof.sample = c.samplep;
	prof.n_mapping = c.nmaps;
	prof.mapping = c.mapp;
	prof.n_location = c.nlocs;
	prof.location = c.locp;
	prof.n_function = c.nfns;
	prof.function = c.funcp;
	prof.n_string_table = c.strs.n;
	prof.string_table = c.strtab;
	prof.time_nanos = (int64_t)meta->start_unix_ns;
	prof.duration_nanos = (int64_t)meta->duration_ns;
	prof.period_type = period ? &types[nv] : NULL;
	prof.period = (int64_t)meta->period;
	prof.comment = comment;
	prof.n_comment = comment[1] ? 2 : 1;

	packed_len = perftools__profiles__profile__get_packed_size(&prof);
	if (packed_len > UINT32_MAX) {
		r = -E2BIG;
		goto out;
	}
	packed = malloc(packed_len ? packed_len : 1);
	if (!packed) {
		r = -ENOMEM;
		goto out;
	}
	if (perftools__profiles__profile__pack(&prof, packed) != packed_len) {
		r = -EIO;
		goto out;
	}
	r = pprof_gzip(packed, packed_len, out);
out:
	free(packed);
	free(c.strtab);
	free(c.fns);
	free(c.funcp);
	htab_index_release(&c.fn_idx);
	free(c.locs);
	free(c.locp);
	free(c.lines);
	free(c.linep);
	free(c.loc_of_frame);
	for (i = 0; i < c.nxblocks; i++)
		free(c.xblocks[i]);
	free(c.xblocks);
	free(c.maps);
	free(c.mapp);
	free(c.map_of_string);
	htab_index_release(&c.map_idx);
	free(c.samples);
	free(c.samplep);
	free(c.labels);
	free(c.labelp);
	free(c.locids);
	free(c.values);
	buf_release(&c.tmp);
	pprof_strings_release(&c.strs);
	return r;
}
