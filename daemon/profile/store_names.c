#include "store_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct name_ent *name_map_find(const struct name_map *m, uint64_t key)
{
	const uint64_t *i = htab_map_get(&m->idx, key);

	return i ? &m->ents[*i] : NULL;
}

static int name_map_set(struct store *st, struct name_map *m, uint64_t key, const char *name)
{
	struct name_ent *e = name_map_find(m, key);
	size_t len = strlen(name);
	char *copy;
	int r = 0;

	if (e && !strcmp(e->name, name))
		goto out;
	/* Renames of a known thread always succeed; new entries respect the
	 * memory limit like frames and stacks do. */
	if (!e && !store_fits(st, len + 1 + sizeof(*e) + htab_map_insert_cost(&m->idx) +
				      store_array_growth(m->n, m->cap, sizeof(*m->ents)))) {
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
	r = store_array_reserve(st, (void **)&m->ents, m->n, &m->cap, sizeof(*m->ents));
	if (r == 0)
		r = htab_map_put(&m->idx, key, m->n);
	if (r < 0) {
		free(copy);
		goto out;
	}
	m->ents[m->n].key = key;
	m->ents[m->n].name = copy;
	m->ents[m->n].java_id = 0;
	m->n++;
	st->bytes += len + 1;
	r = 0;
out:
	return r;
}

static void name_map_release(struct name_map *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->ents[i].name);
	free(m->ents);
	htab_map_release(&m->idx);
	m->ents = NULL;
	m->n = m->cap = 0;
}

void store_names_release(struct store *st)
{
	name_map_release(&st->threads);
	name_map_release(&st->procs);
	name_map_release(&st->cgroups);
	name_map_release(&st->units);
	name_map_release(&st->containers);
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
	const struct name_ent *c, *u, *k;

	*out = (struct store_labels){ "", "", "" };
	if (!st)
		return false;
	c = name_map_find(&st->cgroups, pid);
	u = name_map_find(&st->units, pid);
	k = name_map_find(&st->containers, pid);
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
	const struct name_ent *e;

	if (!st)
		return NULL;
	e = name_map_find(&st->threads, (uint64_t)pid << 32 | tid);
	return e ? e->name : NULL;
}

int store_set_thread_java_id(struct store *st, uint32_t pid, uint32_t tid, uint64_t java_id)
{
	struct name_ent *e;

	if (!st)
		return -EINVAL;
	e = name_map_find(&st->threads, (uint64_t)pid << 32 | tid);
	if (!e)
		return -ENOENT;
	if (java_id)
		e->java_id = java_id;
	return 0;
}

uint64_t store_thread_java_id(const struct store *st, uint32_t pid, uint32_t tid)
{
	const struct name_ent *e = st ? name_map_find(&st->threads, (uint64_t)pid << 32 | tid) : NULL;

	return e ? e->java_id : 0;
}

const char *store_process_name(const struct store *st, uint32_t pid)
{
	const struct name_ent *e;

	if (!st)
		return NULL;
	e = name_map_find(&st->procs, pid);
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

