/* Unwind tables by use: which binaries sampled processes are left without
 * a table, and why (status); rows of tables whose processes are alive but have
 * not been sampled for a while (cold) go to a table that finds no free row
 * even after the idle tables went. BPF stamps each process's entry with the
 * second of its last CFI walk (jp_unwind_proc.sampled_s); the worker reads
 * the stamps when it needs room and at each sweep. A process that had a
 * table taken and is sampled again is read again at the next sweep, which
 * loads the table back (from its encoded copy, or built again). See
 * unwtab.h. */
#include "unwtab.h"

#include <bpf/bpf.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "unwtab_int.h"

/* Stamps are read again at most this often while room is being made. */
#define COLD_READ_NS 1000000000ull

static uint32_t boot_s(void)
{
	return (uint32_t)(clock_ns(CLOCK_BOOTTIME) / 1000000000ull);
}

/* Each process's sampled_s from its BPF entry (kept across rewrites of the
 * entry, which zero it). */
static void cold_read(struct unwtab *u, bool force)
{
	uint64_t now = clock_mono_ns();

	if (!force && now - u->cold_read_ns < COLD_READ_NS)
		return;
	u->cold_read_ns = now;
	if (!u->cold_ent)
		u->cold_ent = malloc(sizeof(*u->cold_ent));
	if (!u->cold_ent)
		return;
	for (size_t i = 0; i < u->nprocs; i++) {
		struct proc *p = &u->procs[i];

		if (bpf_map_lookup_elem(u->procs_fd, &p->tgid, u->cold_ent) == 0 &&
		    u->cold_ent->sampled_s > p->sampled_s)
			p->sampled_s = u->cold_ent->sampled_s;
	}
}

/* Points p's entry away from rows [first, first + count) (frame pointers
 * in that mapping until the table is back). */
static void entry_cut(struct unwtab *u, struct proc *p, uint32_t first, uint32_t count)
{
	struct jp_unwind_proc *e = u->cold_ent;
	bool cut = false;

	if (bpf_map_lookup_elem(u->procs_fd, &p->tgid, e) < 0)
		return;
	for (uint32_t i = 0; i < e->n && i < JP_UNWIND_MAX_MAPS; i++) {
		if (e->maps[i].row_count == count && e->maps[i].row_first == first) {
			e->maps[i].row_first = e->maps[i].row_count = 0;
			cut = true;
		}
	}
	if (cut)
		bpf_map_update_elem(u->procs_fd, &p->tgid, e, BPF_EXIST);
}

/* Each table's hot_s: the latest stamp of the processes that map it
 * (process tgid counts as sampled at now_s). */
static void tables_hot(struct unwtab *u, uint32_t tgid, uint32_t now_s)
{
	for (size_t i = 0; i < u->ntables; i++)
		u->tables[i]->hot_s = 0;
	for (size_t i = 0; i < u->nprocs; i++) {
		const struct proc *p = &u->procs[i];
		uint32_t s = tgid && p->tgid == tgid ? now_s : p->sampled_s;

		for (size_t k = 0; k < p->nrefs; k++)
			if (p->refs[k]->hot_s < s)
				p->refs[k]->hot_s = s;
	}
}

bool unwtab_evict_cold(struct unwtab *u, const struct table *keep)
{
	uint64_t now = clock_mono_ns();
	uint32_t now_s = boot_s(), cold_s = (uint32_t)(u->cold_ns / 1000000000ull);
	struct table *best = NULL;
	uint32_t best_hot = 0, first, count;

	cold_read(u, false);
	if (!u->cold_ent)
		return false;
	/* The process being loaded is in use: its other tables (libc,
	 * mapped after its binary) stay. */
	tables_hot(u, u->building, now_s);
	for (size_t i = 0; i < u->ntables; i++) {
		struct table *t = u->tables[i];

		/* Unreferenced tables are unwtab_evict_one's; a table loaded
		 * or mapped by a process lately has had no time to be used. */
		if (t == keep || !t->count || !t->refs || now - t->loaded_ns < u->cold_ns ||
		    now - t->last_used < u->cold_ns || (uint64_t)t->hot_s + cold_s > now_s)
			continue;
		/* The coldest; of those, the largest: fewest tables go. */
		if (!best || t->hot_s < best_hot || (t->hot_s == best_hot && t->count > best->count)) {
			best = t;
			best_hot = t->hot_s;
		}
	}
	if (!best)
		return false;
	first = best->first;
	count = best->count;
	/* The entries first: no walk may read the rows once they are reused. */
	for (size_t i = 0; i < u->nprocs; i++) {
		struct proc *p = &u->procs[i];

		for (size_t k = 0; k < p->nrefs; k++) {
			if (p->refs[k] != best)
				continue;
			entry_cut(u, p, first, count);
			p->short_rows = true;
			p->cold_s = now_s;
			break;
		}
	}
	log_debug("unwind: rows %u+%u taken from a table unsampled for %u s", first, count,
		  now_s - best_hot);
	unwtab_table_unload(u, best);
	u->st.evicted_cold++;
	return true;
}

void unwtab_cold_sweep(struct unwtab *u)
{
	cold_read(u, true);
}

bool unwtab_cold_woke(struct unwtab *u, struct proc *p)
{
	(void)u;
	return p->cold_s && p->sampled_s > p->cold_s;
}

static const char *const why_names[UNWTAB_NWHY] = {
	[UNWTAB_NO_ROOM] = "no_room",
	[UNWTAB_UID_SHARE] = "uid_share",
	[UNWTAB_TAKEN] = "taken_unsampled",
	[UNWTAB_REJECTED] = "rejected",
};

const char *unwtab_why_name(enum unwtab_why why)
{
	return (unsigned)why < UNWTAB_NWHY ? why_names[why] : "unknown";
}

static enum unwtab_why table_why(const struct unwtab *u, const struct table *t, uint32_t *rows)
{
	if (t->share_rows) {
		*rows = t->share_rows;
		return UNWTAB_UID_SHARE;
	}
	if (t->spill) {
		*rows = t->spill_rows;
		return UNWTAB_TAKEN;
	}
	*rows = t->want_rows;
	if (t->room_at || (t->want_rows && t->want_rows > u->cap) || (t->want_rows && !t->error))
		return UNWTAB_NO_ROOM;
	return UNWTAB_REJECTED;
}

void unwtab_missing_sweep(struct unwtab *u)
{
	uint32_t now_s = boot_s();
	uint64_t counts[UNWTAB_NWHY] = { 0 };
	struct unwtab_missing list[UNWTAB_MAX_MISSING];
	size_t n = 0;

	/* The stamps were read by unwtab_cold_sweep just before. */
	tables_hot(u, 0, 0);
	for (size_t i = 0; i < u->ntables; i++) {
		const struct table *t = u->tables[i];
		struct unwtab_missing m = { 0 };
		size_t at;

		/* (A stamp may be a second ahead of now_s, read before it.) */
		if (t->count || !t->refs || !t->hot_s || (uint64_t)t->hot_s + MISSING_S < now_s)
			continue;
		m.why = table_why(u, t, &m.rows);
		m.error = m.why == UNWTAB_REJECTED ? t->error : CFI_OK;
		snprintf(m.path, sizeof(m.path), "%s", t->path ? t->path : "?");
		counts[m.why]++;
		/* Kept sorted, the most rows first. */
		for (at = n; at > 0 && list[at - 1].rows < m.rows; at--)
			;
		if (at == UNWTAB_MAX_MISSING)
			continue;
		if (n == UNWTAB_MAX_MISSING)
			n--;
		memmove(&list[at + 1], &list[at], (n - at) * sizeof(list[0]));
		list[at] = m;
		n++;
	}
	memcpy(u->st.sampled_missing, counts, sizeof(counts));
	pthread_mutex_lock(&u->mu);
	memcpy(u->missing, list, n * sizeof(list[0]));
	u->nmissing = n;
	pthread_mutex_unlock(&u->mu);
}

size_t unwtab_missing(struct unwtab *u, struct unwtab_missing *out, size_t n)
{
	pthread_mutex_lock(&u->mu);
	if (n > u->nmissing)
		n = u->nmissing;
	memcpy(out, u->missing, n * sizeof(*out));
	pthread_mutex_unlock(&u->mu);
	return n;
}
