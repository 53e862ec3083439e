#include "calltree.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"

struct calltree {
	const struct store *st;
	uint32_t nframes;                /* store frames; synthetic keys follow */
	struct calltree_node *nodes;
	size_t n, cap;
	size_t nvalues;                  /* values per node kept in vals, 0 = none */
	uint64_t *vals;                  /* per node: the total of every value */
	struct htab_map children;        /* (parent node, key) -> child node */
	struct htab_map threads;         /* (pid, tid) -> thread frame key */
	struct buf names;                /* display name of every key, NUL-separated */
	size_t *name_off;                /* key -> offset in names */
	size_t nkeys, keys_cap;
};

/* Adds a key with its display name; returns the key or -errno. */
static int64_t calltree_add_key(struct calltree *t, const char *text, size_t len)
{
	size_t *off;
	int r;

	if (t->nkeys == t->keys_cap) {
		size_t cap = t->keys_cap ? t->keys_cap * 2 : 256;

		off = realloc(t->name_off, cap * sizeof(*off));
		if (!off)
			return -ENOMEM;
		t->name_off = off;
		t->keys_cap = cap;
	}
	t->name_off[t->nkeys] = t->names.len;
	r = buf_append(&t->names, text, len);
	if (r == 0)
		r = buf_putc(&t->names, '\0');
	if (r < 0)
		return r;
	return (int64_t)t->nkeys++;
}

static int calltree_new_node(struct calltree *t, uint32_t parent, uint32_t key, uint32_t *idx)
{
	struct calltree_node *n;

	if (t->n >= CALLTREE_NONE - 1)
		return -E2BIG;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;

		n = realloc(t->nodes, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		t->nodes = n;
		if (t->nvalues) {
			uint64_t *v = realloc(t->vals, cap * t->nvalues * sizeof(*v));

			if (!v)
				return -ENOMEM;
			t->vals = v;
		}
		t->cap = cap;
	}
	if (t->nvalues)
		memset(&t->vals[t->n * t->nvalues], 0, t->nvalues * sizeof(*t->vals));
	n = &t->nodes[t->n];
	n->key = key;
	n->parent = parent;
	n->first_child = CALLTREE_NONE;
	n->next_sibling = CALLTREE_NONE;
	n->depth = parent == CALLTREE_NONE ? 0 : t->nodes[parent].depth + 1;
	n->self = 0;
	n->total = 0;
	if (parent != CALLTREE_NONE) {
		n->next_sibling = t->nodes[parent].first_child;
		t->nodes[parent].first_child = (uint32_t)t->n;
	}
	*idx = (uint32_t)t->n++;
	return 0;
}

static int calltree_child(struct calltree *t, uint32_t parent, uint32_t key, uint32_t *child)
{
	uint64_t *v;
	int r;

	r = htab_map_upsert(&t->children, (uint64_t)parent << 32 | key, &v);
	if (r == 0)
		*child = (uint32_t)*v;
	if (r != 1)
		return r;
	r = calltree_new_node(t, parent, key, child);
	if (r < 0) {
		htab_map_del(&t->children, (uint64_t)parent << 32 | key, NULL);
		return r;
	}
	*v = *child;
	return 0;
}

/* Key of the "[<name> tid=N]" frame of a thread, made on first use. */
static int calltree_thread_key(struct calltree *t, uint32_t pid, uint32_t tid, uint32_t *key)
{
	uint64_t k = (uint64_t)pid << 32 | tid, *known = htab_map_get(&t->threads, k);
	struct buf b = BUF_INIT;
	int64_t id;
	int r = 0;

	if (known) {
		*key = (uint32_t)*known;
		goto out;
	}
	r = export_thread_frame(t->st, pid, tid, 0, &b);
	if (r < 0)
		goto out;
	id = calltree_add_key(t, b.data, b.len);
	if (id < 0) {
		r = (int)id;
		goto out;
	}
	r = htab_map_put(&t->threads, k, (uint64_t)id);
	if (r < 0)
		goto out;
	*key = (uint32_t)id;
	r = 0;
out:
	buf_release(&b);
	return r;
}

static const char calltree_no_stack[] = EXPORT_NO_STACK;

void calltree_free(struct calltree *t)
{
	if (!t)
		return;
	free(t->nodes);
	free(t->vals);
	htab_map_release(&t->children);
	htab_map_release(&t->threads);
	buf_release(&t->names);
	free(t->name_off);
	free(t);
}

/* Adds a stack's values to its leaf node and every ancestor. */
static void calltree_add_values(struct calltree *t, uint32_t node, const uint64_t *values,
				size_t value)
{
	size_t nv = t->nvalues, k;

	t->nodes[node].self += values[value];
	for (; node != CALLTREE_NONE; node = t->nodes[node].parent) {
		t->nodes[node].total += values[value];
		for (k = 0; k < nv; k++)
			t->vals[node * nv + k] += values[k];
	}
}

int calltree_build(const struct export_job *job, bool all_values, struct calltree **out)
{
	const struct store *st = job ? job->st : NULL;
	bool thread_frames = job && job->opt && job->opt->thread_frames;
	struct calltree *t = NULL;
	size_t nframes, nstacks, i, j;
	uint32_t node, key = 0, no_stack, root;
	struct buf name = BUF_INIT;
	int64_t id;
	int r;

	if (!st || !out || job->value >= store_value_count(st))
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t) {
		r = -ENOMEM;
		goto out;
	}
	t->st = st;
	t->nvalues = all_values ? store_value_count(st) : 0;
	nframes = store_frame_count(st);
	nstacks = store_stack_count(st);
	/* Every store frame's name once, so sorting and rendering never redo it. */
	for (i = 0; i < nframes; i++) {
		buf_reset(&name);
		r = export_frame_name(store_frame_get(st, (uint32_t)i), 0, &name);
		if (r < 0)
			goto out;
		id = calltree_add_key(t, name.data ? name.data : "", name.len);
		if (id < 0) {
			r = (int)id;
			goto out;
		}
	}
	t->nframes = (uint32_t)nframes;
	id = calltree_add_key(t, calltree_no_stack, sizeof(calltree_no_stack) - 1);
	if (id < 0) {
		r = (int)id;
		goto out;
	}
	no_stack = (uint32_t)id;
	r = calltree_new_node(t, CALLTREE_NONE, CALLTREE_ROOT_KEY, &root);
	if (r < 0)
		goto out;

	for (i = 0; i < nstacks; i++) {
		const struct store_stack *s = store_stack_get(st, i);

		if (export_cancelled(job)) {
			r = -ECANCELED;
			goto out;
		}
		node = root;
		if (thread_frames) {
			r = calltree_thread_key(t, s->pid, s->tid, &key);
			if (r == 0)
				r = calltree_child(t, node, key, &node);
			if (r < 0)
				goto out;
		}
		if (!s->nframes) {
			r = calltree_child(t, node, no_stack, &node);
			if (r < 0)
				goto out;
		}
		for (j = 0; j < s->nframes; j++) {
			r = calltree_child(t, node, s->frames[j], &node);
			if (r < 0)
				goto out;
		}
		calltree_add_values(t, node, s->values, job->value);
	}
	/* The lookup map is only needed while building. */
	htab_map_release(&t->children);
	*out = t;
	t = NULL;
	r = 0;
out:
	buf_release(&name);
	calltree_free(t);
	return r;
}

size_t calltree_count(const struct calltree *t)
{
	return t ? t->n : 0;
}

const struct calltree_node *calltree_node(const struct calltree *t, uint32_t idx)
{
	return t && idx < t->n ? &t->nodes[idx] : NULL;
}

const uint64_t *calltree_total_values(const struct calltree *t, uint32_t idx)
{
	return t && t->nvalues && idx < t->n ? &t->vals[idx * t->nvalues] : NULL;
}

uint32_t calltree_key_count(const struct calltree *t)
{
	return t ? (uint32_t)t->nkeys : 0;
}

const char *calltree_key_name(const struct calltree *t, uint32_t key)
{
	if (key == CALLTREE_ROOT_KEY)
		return "all";
	if (!t || key >= t->nkeys)
		return "";
	return t->names.data + t->name_off[key];
}

enum frame_kind calltree_key_frame_kind(const struct calltree *t, uint32_t key)
{
	if (t && key < t->nframes)
		return store_frame_get(t->st, key)->kind;
	return FRAME_MARKER;
}

const char *calltree_key_kind(const struct calltree *t, uint32_t key)
{
	if (key == CALLTREE_ROOT_KEY)
		return "root";
	return frame_kind_name(calltree_key_frame_kind(t, key));
}

int calltree_key_text(const struct calltree *t, uint32_t key, unsigned flags, struct buf *out)
{
	if (t && key < t->nframes)
		return export_frame_name(store_frame_get(t->st, key), flags, out);
	/* synthetic names are already clean; they carry no kind suffix */
	return buf_puts(out, calltree_key_name(t, key));
}

/* ---- ordering ---------------------------------------------------------------- */

struct calltree_sort_ctx {
	const struct calltree *t;
	enum calltree_order order;
};

static int calltree_cmp(const void *a, const void *b, void *arg)
{
	const struct calltree_sort_ctx *c = arg;
	const struct calltree_node *x = &c->t->nodes[*(const uint32_t *)a];
	const struct calltree_node *y = &c->t->nodes[*(const uint32_t *)b];
	int r;

	if (c->order == CALLTREE_BY_TOTAL && x->total != y->total)
		return x->total > y->total ? -1 : 1;
	r = strcmp(calltree_key_name(c->t, x->key), calltree_key_name(c->t, y->key));
	if (r)
		return r;
	/* same name, different kind or module: keep the order stable */
	return x->key < y->key ? -1 : x->key > y->key;
}

int calltree_sort(struct calltree *t, enum calltree_order order)
{
	struct calltree_sort_ctx ctx = { t, order };
	uint32_t *kids = NULL, c;
	size_t i, n, cap = 0;
	int r = 0;

	if (!t)
		return -EINVAL;
	for (i = 0; i < t->n; i++) {
		n = 0;
		for (c = t->nodes[i].first_child; c != CALLTREE_NONE; c = t->nodes[c].next_sibling) {
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 64;
				uint32_t *k = realloc(kids, ncap * sizeof(*k));

				if (!k) {
					r = -ENOMEM;
					goto out;
				}
				kids = k;
				cap = ncap;
			}
			kids[n++] = c;
		}
		if (n < 2)
			continue;
		qsort_r(kids, n, sizeof(*kids), calltree_cmp, &ctx);
		t->nodes[i].first_child = kids[0];
		for (size_t k = 0; k + 1 < n; k++)
			t->nodes[kids[k]].next_sibling = kids[k + 1];
		t->nodes[kids[n - 1]].next_sibling = CALLTREE_NONE;
	}
out:
	free(kids);
	return r;
}

/* ---- the "json" format: jprofd-tree ------------------------------------------ */

/* Writes the nodes depth first without recursion: a stack can be hundreds of
 * frames deep, and each open node needs only its closing "]}". */
static int calltree_json_nodes(const struct calltree *t, struct buf *out)
{
	uint32_t i = 0;
	int r = 0;

	while (i != CALLTREE_NONE) {
		const struct calltree_node *n = &t->nodes[i];
		const struct store_frame *f = n->key < t->nframes ? store_frame_get(t->st, n->key) : NULL;

		r = buf_puts(out, "{\"name\":");
		if (r == 0)
			r = export_json_string(out, calltree_key_name(t, n->key));
		if (r == 0)
			r = export_json_strfield(out, "kind", calltree_key_kind(t, n->key), false);
		if (r == 0 && f && f->module && *f->module)
			r = export_json_strfield(out, "module", f->module, false);
		if (r == 0)
			r = export_json_u64(out, "self", n->self, false);
		if (r == 0)
			r = export_json_u64(out, "total", n->total, false);
		if (r == 0 && t->nvalues)
			r = export_json_values(out, "total_values", calltree_total_values(t, i), t->nvalues);
		if (r == 0)
			r = buf_puts(out, ",\"children\":[");
		if (r < 0)
			goto out;
		if (n->first_child != CALLTREE_NONE) {
			i = n->first_child;
			continue;
		}
		/* Close this node and every ancestor whose last child it ends. */
		for (;;) {
			r = buf_puts(out, "]}");
			if (r < 0)
				goto out;
			if (t->nodes[i].next_sibling != CALLTREE_NONE) {
				r = buf_putc(out, ',');
				if (r < 0)
					goto out;
				i = t->nodes[i].next_sibling;
				break;
			}
			i = t->nodes[i].parent;
			if (i == CALLTREE_NONE)
				break;
		}
	}
out:
	return r;
}

/* What "self" and "total" count: "samples" for the sample count (as
 * version 1 always said), else the unit of the shown value. */
static const char *calltree_json_unit(const struct sample_type *t)
{
	return export_value_is_count(t) ? "samples" : t->unit;
}

int calltree_render_json(const struct export_job *job, struct buf *out)
{
	const struct store *st = job->st;
	struct calltree *t = NULL;
	struct store_totals tot;
	int r;

	store_get_totals(st, &tot);
	r = calltree_build(job, true, &t);
	if (r == 0)
		r = calltree_sort(t, CALLTREE_BY_TOTAL);
	if (r < 0)
		goto out;
	r = buf_puts(out, "{\"format\":\"jprofd-tree\",\"version\":1,\"meta\":{");
	if (r == 0)
		r = export_json_meta(out, job->meta);
	if (r == 0)
		r = export_json_strfield(out, "unit", calltree_json_unit(store_value_type(st, job->value)),
					 false);
	if (r == 0)
		r = export_json_u64(out, "samples", tot.values[0], false);
	if (r == 0)
		r = export_json_weight(out, st, tot.values);
	if (r == 0)
		r = export_json_u64(out, "stacks", tot.stacks, false);
	if (r == 0)
		r = buf_printf(out, ",\"truncated\":%s", tot.truncated ? "true" : "false");
	if (r == 0)
		r = export_json_u64(out, "truncated_samples", tot.truncated_samples, false);
	if (r == 0)
		r = export_json_sample_types(out, st);
	if (r == 0)
		r = export_json_u64(out, "value", job->value, false);
	if (r == 0)
		r = export_json_values(out, "values", tot.values, store_value_count(st));
	if (r == 0)
		r = buf_puts(out, "},\"tree\":");
	if (r == 0)
		r = calltree_json_nodes(t, out);
	if (r == 0)
		r = buf_puts(out, "}\n");
out:
	calltree_free(t);
	return r;
}
