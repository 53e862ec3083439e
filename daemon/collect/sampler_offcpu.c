/* Off-CPU recording, the sampler's side (bpf/offcpu.bpf.c: offcpu_switch).
 *
 * Targets: a recording names a tgid (map offcpu_targets) or the whole host
 * (jp_offcpu_all_*); the switch program is attached while any exists.
 *
 * Intervals within one drain epoch are aggregated in offcounts[gen] and
 * drained like CPU counts. An interval that spans a drain arrives as a ring
 * record whose stack ids belong to the epoch of its switch-out; that
 * epoch's stack map may be cleared by then, so each drain, before it reads
 * the ring and clears the old generation, copies the stacks every blocked
 * task refers to (the offcpu_start map) into `held`. A record written after
 * that scan is of a task the scan saw blocked; one written before it is
 * read by this drain, while the old generation is still intact or its
 * stacks are in the previous drain's copy (`held_prev`, the task was
 * blocked at that scan too). */
#include "sampler.h"
#include "sampler_int.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static void held_reset(struct held_stacks *h)
{
	for (size_t i = 0; i < h->n; i++)
		free(h->stacks[i].ips);
	free(h->stacks);
	htab_map_release(&h->index);
	memset(h, 0, sizeof(*h));
}

static const struct cached_stack *held_get(const struct held_stacks *h, uint32_t epoch,
					   int32_t id)
{
	uint64_t *i = htab_map_get(&h->index, (uint64_t)epoch << 32 | (uint32_t)id);

	return i ? &h->stacks[*i] : NULL;
}

static int held_put(struct held_stacks *h, uint32_t epoch, int32_t id, const uint64_t *ips,
		    uint32_t n)
{
	uint64_t key = (uint64_t)epoch << 32 | (uint32_t)id;
	struct cached_stack *c;

	if (htab_map_get(&h->index, key))
		return 0;
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 256;
		struct cached_stack *p = realloc(h->stacks, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		h->stacks = p;
		h->cap = cap;
	}
	c = &h->stacks[h->n];
	c->ips = malloc((n ? n : 1) * sizeof(*ips));
	if (!c->ips)
		return -ENOMEM;
	memcpy(c->ips, ips, n * sizeof(*ips));
	c->n = n;
	if (htab_map_put(&h->index, key, h->n) < 0) {
		free(c->ips);
		return -ENOMEM;
	}
	h->n++;
	return 0;
}

/* Whether the stack map of epoch still holds that epoch's stacks. */
static bool epoch_live(const struct sampler *s, uint32_t epoch)
{
	return !s->cleared_any || (int32_t)(epoch - s->cleared_epoch) > 0;
}

/* A stack of an off-CPU interval: from its epoch's map while that is
 * intact, else from the copies held for blocked tasks. */
static const uint64_t *offcpu_stack(struct sampler *s, uint32_t epoch, int32_t id, uint32_t *n)
{
	const struct cached_stack *c;

	*n = 0;
	if (id < 0)
		return NULL;
	if (epoch_live(s, epoch))
		return sampler_get_stack(s, epoch & 1, id, n);
	c = held_get(&s->held, epoch, id);
	if (!c)
		c = held_get(&s->held_prev, epoch, id);
	if (!c) {
		s->stack_missing++;
		return NULL;
	}
	*n = c->n;
	return c->ips;
}

static void offcpu_deliver(struct sampler *s, uint32_t epoch, const struct jp_count_key *k,
			   uint64_t count, uint64_t ns)
{
	uint64_t values[EVENT_MAX_VALUES] = { count, ns };
	const uint64_t *kips, *uips;
	uint32_t nk, nu;

	kips = offcpu_stack(s, epoch, k->kstack, &nk);
	uips = offcpu_stack(s, epoch, k->ustack, &nu);
	sampler_emit(s, k, EVENT_OFFCPU, values, 0, kips, nk, uips, nu);
}

void sampler_offcpu_record(struct sampler *s, const struct jp_msg_offcpu *m)
{
	struct jp_count_key k = {
		.tgid = m->tgid, .tid = m->tid, .kstack = m->kstack, .ustack = m->ustack,
		.source = m->source, .flags = m->flags, .start_ns = m->start_ns,
	};

	memcpy(k.comm, m->comm, sizeof(k.comm));
	memcpy(k.tcomm, m->tcomm, sizeof(k.tcomm));
	offcpu_deliver(s, m->epoch, &k, 1, m->ns);
}

/* Copies one stack a blocked task refers to into next. */
static int hold_one(struct sampler *s, struct held_stacks *next, uint32_t epoch, int32_t id)
{
	const uint64_t *ips;
	uint32_t n;

	if (id < 0)
		return 0;
	ips = offcpu_stack(s, epoch, id, &n);
	return ips ? held_put(next, epoch, id, ips, n) : 0;
}

int sampler_offcpu_hold(struct sampler *s)
{
	int fd = bpf_map__fd(s->skel->maps.offcpu_start);
	struct held_stacks next = { 0 };
	uint32_t in, out_batch;
	bool first = true, done = false;
	int r = 0;

	if (!s->offcpu_targets && !s->held.n && !s->held_prev.n)
		return 0;
	while (!done && r == 0) {
		__u32 n = DRAIN_BATCH;

		r = bpf_map_lookup_batch(fd, first ? NULL : &in, &out_batch, s->start_keys,
					 s->start_vals, &n, NULL);
		if (r < 0 && r != -ENOENT) {
			log_err("sampler: reading blocked tasks failed: %s", strerror(-r));
			break;
		}
		done = r == -ENOENT;
		r = 0;
		for (__u32 i = 0; i < n && r == 0; i++) {
			const struct jp_offcpu_start *st = &s->start_vals[i];

			/* Switched out after the flip: its stacks stay in the
			 * active generation until the next drain scans it. */
			if (st->epoch == s->pending_epoch + 1)
				continue;
			r = hold_one(s, &next, st->epoch, st->kstack);
			if (r == 0)
				r = hold_one(s, &next, st->epoch, st->ustack);
		}
		in = out_batch;
		first = false;
	}
	held_reset(&s->held_prev);
	s->held_prev = s->held;
	s->held = next;
	return r;
}

static void deliver_offcount(struct sampler *s, uint32_t i)
{
	offcpu_deliver(s, s->pending_epoch, &s->keys[i], s->off_values[i].count,
		       s->off_values[i].ns);
}

int sampler_offcpu_drain(struct sampler *s, unsigned gen)
{
	int fd = gen ? bpf_map__fd(s->skel->maps.offcounts1) : bpf_map__fd(s->skel->maps.offcounts0);

	return sampler_drain_map(s, fd, "off-CPU counts", s->off_values, deliver_offcount);
}

void sampler_offcpu_drained(struct sampler *s)
{
	s->cleared_any = true;
	s->cleared_epoch = s->pending_epoch;
}

/* Forgets the blocked tasks of source (all with source 0): their open
 * intervals will not be counted. A program running now may still add one;
 * its source is gone by then and the pipeline drops it. */
static void forget_blocked(struct sampler *s, uint32_t source)
{
	int fd = bpf_map__fd(s->skel->maps.offcpu_start);
	struct jp_offcpu_start st;
	uint32_t key, next;
	size_t n = 0;
	int r;

	for (r = bpf_map_get_next_key(fd, NULL, &next); r == 0;
	     r = bpf_map_get_next_key(fd, &key, &next)) {
		key = next;
		if (bpf_map_lookup_elem(fd, &key, &st) < 0 || (source && st.source != source))
			continue;
		if (n < DRAIN_BATCH)
			s->start_keys[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &s->start_keys[i]);
}

void sampler_offcpu_restart(struct sampler *s, uint32_t source)
{
	if (source)
		forget_blocked(s, source);
}

int sampler_offcpu_add(struct sampler *s, uint32_t source, uint32_t tgid, uint64_t threshold_ns)
{
	struct jp_offcpu_target t = { .source = source, .threshold_ns = threshold_ns };
	int fd = bpf_map__fd(s->skel->maps.offcpu_targets);
	int r = 0;

	if (tgid) {
		r = bpf_map_update_elem(fd, &tgid, &t, BPF_NOEXIST);
		if (r < 0)
			return r == -EEXIST ? -EBUSY : r;
	} else {
		if (s->offcpu_all_source)
			return -EBUSY;
		s->skel->bss->jp_offcpu_all_threshold_ns = threshold_ns;
		__atomic_store_n(&s->skel->bss->jp_offcpu_all_source, source, __ATOMIC_SEQ_CST);
		s->offcpu_all_source = source;
	}
	if (!s->offcpu_link) {
		s->offcpu_link = bpf_program__attach(s->skel->progs.offcpu_switch);
		if (!s->offcpu_link) {
			r = -errno;
			log_err("sampler: cannot attach the sched_switch program: %s", strerror(-r));
			sampler_offcpu_remove(s, source, tgid);
			return r;
		}
	}
	s->offcpu_targets++;
	return 0;
}

void sampler_offcpu_remove(struct sampler *s, uint32_t source, uint32_t tgid)
{
	struct jp_offcpu_target t;
	int fd = bpf_map__fd(s->skel->maps.offcpu_targets);
	bool had = false;

	if (tgid) {
		had = bpf_map_lookup_elem(fd, &tgid, &t) == 0 && t.source == source &&
		      bpf_map_delete_elem(fd, &tgid) == 0;
	} else if (s->offcpu_all_source == source) {
		__atomic_store_n(&s->skel->bss->jp_offcpu_all_source, 0, __ATOMIC_SEQ_CST);
		s->offcpu_all_source = 0;
		had = true;
	}
	if (!had)
		return;
	if (s->offcpu_link && s->offcpu_targets) {
		s->offcpu_targets--;
		if (!s->offcpu_targets) {
			bpf_link__destroy(s->offcpu_link);
			s->offcpu_link = NULL;
		}
	}
	forget_blocked(s, s->offcpu_targets ? source : 0);
}

void sampler_offcpu_free(struct sampler *s)
{
	bpf_link__destroy(s->offcpu_link);
	s->offcpu_link = NULL;
	held_reset(&s->held);
	held_reset(&s->held_prev);
}
