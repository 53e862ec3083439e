/* Unwind tables: the row allocator, evicted rows kept encoded, and loading
 * a table's rows into BPF. See unwtab.h. */
#include "unwtab.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proc.h"
#include "procmaps.h"
#include "rowcode.h"
#include "unwtab_int.h"

/* ---- row allocator ---- */

static void rows_release(struct unwtab *u, uint32_t first, uint32_t count)
{
	size_t i = 0;
	struct range *r;

	if (!count)
		return;
	while (i < u->nfree && u->free[i].first < first)
		i++;
	if (i > 0 && u->free[i - 1].first + u->free[i - 1].count == first) {
		u->free[i - 1].count += count;
		if (i < u->nfree && first + count == u->free[i].first) {
			u->free[i - 1].count += u->free[i].count;
			memmove(&u->free[i], &u->free[i + 1], (u->nfree - i - 1) * sizeof(*r));
			u->nfree--;
		}
		return;
	}
	if (i < u->nfree && first + count == u->free[i].first) {
		u->free[i].first = first;
		u->free[i].count += count;
		return;
	}
	r = realloc(u->free, (u->nfree + 1) * sizeof(*r));
	if (!r)
		return;  /* the rows are lost to the allocator, not to correctness */
	u->free = r;
	memmove(&u->free[i + 1], &u->free[i], (u->nfree - i) * sizeof(*r));
	u->free[i] = (struct range){ first, count };
	u->nfree++;
}

static int rows_take(struct unwtab *u, uint32_t count, uint32_t *first)
{
	for (size_t i = 0; i < u->nfree; i++) {
		if (u->free[i].count < count)
			continue;
		*first = u->free[i].first;
		u->free[i].first += count;
		u->free[i].count -= count;
		if (!u->free[i].count) {
			memmove(&u->free[i], &u->free[i + 1], (u->nfree - i - 1) * sizeof(u->free[0]));
			u->nfree--;
		}
		return 0;
	}
	return -ENOSPC;
}

/* Reads rows [first, first + n) back from the BPF array. */
static int rows_read(struct unwtab *u, uint32_t first, struct jp_unwind_row *rows, size_t n)
{
	uint32_t keys[UPLOAD_CHUNK], in, out;
	int r = 0;

	if (u->rows_map) {
		for (size_t i = 0; i < n; i++)
			memcpy(&rows[i], u->rows_map + (first + i) * ROW_STRIDE, sizeof(*rows));
		return 0;
	}
	for (size_t done = 0; done < n && r == 0;) {
		__u32 cnt = (__u32)(n - done < UPLOAD_CHUNK ? n - done : UPLOAD_CHUNK);

		/* An array's batch starts after in_batch: the key before. */
		in = first + (uint32_t)done - 1;
		r = bpf_map_lookup_batch(u->rows_fd, first + done ? &in : NULL, &out, keys,
					 rows + done, &cnt, NULL);
		if ((r == 0 || r == -ENOENT) && cnt > 0 && keys[0] == first + done) {
			done += cnt;
			r = 0;
		} else if (r == 0) {
			r = -EIO;
		}
	}
	return r;
}

/* ---- tables ---- */

static void table_drop(struct unwtab *u, size_t i)
{
	struct table *t = u->tables[i];

	rows_release(u, t->first, t->count);
	u->st.rows_used -= t->count;
	u->st.tables -= t->count ? 1 : 0;
	u->st.spill_bytes -= t->spill_len;
	free(t->spill);
	free(t->path);
	free(t);
	u->tables[i] = u->tables[--u->ntables];
}

/* The least recently used unreferenced table (with rows in BPF, or with
 * rows kept encoded), or SIZE_MAX. */
static size_t lru_idle(const struct unwtab *u, bool with_rows, bool spilled)
{
	size_t best = SIZE_MAX;

	for (size_t i = 0; i < u->ntables; i++) {
		const struct table *t = u->tables[i];

		if (t->refs || (with_rows && !t->count) || (spilled && !t->spill))
			continue;
		if (best == SIZE_MAX || t->last_used < u->tables[best]->last_used)
			best = i;
	}
	return best;
}

/* Takes t's rows out of BPF, keeping them encoded when they fit the
 * budget (older copies go first); false when t has to go altogether. */
static bool table_spill(struct unwtab *u, struct table *t)
{
	struct jp_unwind_row *rows = malloc((size_t)t->count * sizeof(*rows));
	size_t len = 0;
	uint8_t *enc = NULL;

	if (rows && rows_read(u, t->first, rows, t->count) == 0)
		enc = rowcode_encode(rows, t->count, &len);
	free(rows);
	if (!enc || len > u->spill_max) {
		free(enc);
		return false;
	}
	while (u->st.spill_bytes + len > u->spill_max) {
		size_t old = lru_idle(u, false, true);

		if (old == SIZE_MAX || u->tables[old] == t) {
			free(enc);
			return false;
		}
		table_drop(u, old);
	}
	rows_release(u, t->first, t->count);
	u->st.rows_used -= t->count;
	u->st.tables--;
	t->spill = enc;
	t->spill_len = len;
	t->spill_rows = t->count;
	t->first = t->count = 0;
	u->st.spill_bytes += len;
	return true;
}

/* Evicts the least recently used unreferenced table; with_rows_only (room
 * is needed): one with rows in BPF, whose rows are kept encoded if they
 * can be. false if none. */
bool unwtab_evict_one(struct unwtab *u, bool with_rows_only)
{
	size_t best = lru_idle(u, with_rows_only, false);
	struct table *t;

	if (best == SIZE_MAX)
		return false;
	t = u->tables[best];
	u->st.evicted += t->count ? 1 : 0;
	if (!with_rows_only || !table_spill(u, t)) {
		/* table_spill may have dropped others: find it again. */
		for (best = 0; best < u->ntables && u->tables[best] != t; best++)
			;
		table_drop(u, best);
	}
	return true;
}

/* Takes a referenced table's rows out of BPF for another table's
 * (unwtab_cold.c; its processes' entries no longer point at them): kept
 * encoded when they fit the budget, else t is built again when it is next
 * needed (its room wait is over at once). */
void unwtab_table_unload(struct unwtab *u, struct table *t)
{
	u->st.evicted++;
	if (table_spill(u, t))
		return;
	rows_release(u, t->first, t->count);
	u->st.rows_used -= t->count;
	u->st.tables--;
	t->first = t->count = 0;
	t->room_wait = 0;
	t->room_at = clock_mono_ns();
}

static int upload(struct unwtab *u, uint32_t first, const struct jp_unwind_row *rows, size_t n)
{
	uint32_t keys[UPLOAD_CHUNK];
	int r = 0;

	if (u->rows_map) {
		/* Rows no process entry points at yet: BPF reads them only
		 * after the entry's update, a syscall after these stores. */
		for (size_t i = 0; i < n; i++)
			memcpy(u->rows_map + (first + i) * ROW_STRIDE, &rows[i], sizeof(*rows));
		u->st.rows_uploaded += n;
		return 0;
	}
	for (size_t done = 0; done < n && r == 0; done += UPLOAD_CHUNK) {
		__u32 cnt = (__u32)(n - done < UPLOAD_CHUNK ? n - done : UPLOAD_CHUNK);

		for (__u32 k = 0; k < cnt; k++)
			keys[k] = first + (uint32_t)(done + k);
		r = bpf_map_update_batch(u->rows_fd, keys, rows + done, &cnt, NULL);
		if (r == 0)  /* a failed batch counts none: the table is not loaded */
			u->st.rows_uploaded += cnt;
	}
	return r;
}

/* Loads a built table's rows into BPF, evicting idle tables for room, then
 * tables no process has been sampled in for a while. */
void unwtab_table_load(struct unwtab *u, struct table *t, const struct cfi_table *ct)
{
	uint32_t first;

	if (!ct->n || ct->n > u->cap)
		goto full;
	while (rows_take(u, (uint32_t)ct->n, &first) < 0)
		if (!unwtab_evict_one(u, true) && !unwtab_evict_cold(u, t))
			goto full;
	if (upload(u, first, ct->rows, ct->n) < 0) {
		rows_release(u, first, (uint32_t)ct->n);
		goto full;
	}
	t->first = first;
	t->count = (uint32_t)ct->n;
	t->loaded_ns = clock_mono_ns();
	u->st.rows_used += t->count;
	u->st.tables++;
	return;
full:
	u->st.rows_full++;
}

/* A table left without rows for want of room whose wait is over: to be
 * built again. */
bool unwtab_room_retry(const struct table *t)
{
	return t->room_at && !t->count && !t->spill && clock_mono_ns() >= t->room_at;
}

/* After a load: rows refused for room start (or lengthen) the wait. */
void unwtab_room_after_load(struct unwtab *u, struct table *t, size_t rows)
{
	t->want_rows = (uint32_t)rows;
	if (t->count || rows > u->cap) {
		t->room_at = t->room_wait = 0;  /* loaded, or never fits */
		return;
	}
	t->room_wait = !t->room_wait ? u->room_retry_ns :
		t->room_wait * 2 < ROOM_RETRY_MAX_NS ? t->room_wait * 2 : ROOM_RETRY_MAX_NS;
	t->room_at = clock_mono_ns() + t->room_wait;
}

/* An evicted table needed again: its kept rows back into BPF. */
void unwtab_table_unspill(struct unwtab *u, struct table *t)
{
	struct cfi_table ct = { .n = t->spill_rows };

	ct.rows = malloc((size_t)t->spill_rows * sizeof(*ct.rows));
	if (ct.rows && rowcode_decode(t->spill, t->spill_len, ct.rows, ct.n) == 0) {
		/* Referenced meanwhile, so making room never drops t itself. */
		t->refs++;
		unwtab_table_load(u, t, &ct);
		t->refs--;
		unwtab_room_after_load(u, t, ct.n);
	}
	free(ct.rows);
	/* No room even after evicting every idle table: like a new table that
	 * does not fit, it stays without rows (frame pointers), not retried at
	 * every load of a process that maps it (each try would evict all
	 * idle tables again). */
	u->st.reloads += t->count ? 1 : 0;
	u->st.spill_bytes -= t->spill_len;
	free(t->spill);
	t->spill = NULL;
	t->spill_len = 0;
	t->spill_rows = 0;
}
