/* The sampler's drains: the generation flip, count maps and stacks to
 * samples, ring records. See sampler.h. */
#include "sampler.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "htab.h"
#include "log.h"
#include "sampler.h"
#include "sampler_int.h"


static bool drop_entry(uint64_t key, uint64_t *val, void *arg)
{
	return false;
}

/* Empties the per-drain stack cache, keeping its capacity. */
void sampler_stack_cache_reset(struct sampler *s)
{
	for (size_t i = 0; i < s->ncached; i++)
		free(s->cached[i].ips);
	s->ncached = 0;
	htab_map_retain(&s->stack_cache, drop_entry, NULL);
}

/* Reads stack id of generation gen: a stack map's (zero after the last
 * frame) or, for JP_USTACK_DWARF ids, one the BPF unwinder stored. */
static int read_stack(struct sampler *s, unsigned gen, int32_t id, uint64_t *raw, uint32_t *n)
{
	struct jp_ustack us;
	int fd;

	*n = 0;
	if (id & JP_USTACK_DWARF) {
		fd = gen ? bpf_map__fd(s->skel->maps.ustacks1) : bpf_map__fd(s->skel->maps.ustacks0);
		if (bpf_map_lookup_elem(fd, &id, &us) < 0)
			return -ENOENT;
		*n = us.n < JP_MAX_STACK_DEPTH ? us.n : JP_MAX_STACK_DEPTH;
		memcpy(raw, us.ips, *n * sizeof(uint64_t));
		return 0;
	}
	fd = gen ? bpf_map__fd(s->skel->maps.stacks1) : bpf_map__fd(s->skel->maps.stacks0);
	if (bpf_map_lookup_elem(fd, &id, raw) < 0)
		return -ENOENT;
	while (*n < JP_MAX_STACK_DEPTH && raw[*n])
		(*n)++;
	return 0;
}

/* Caches cnt frames as the stack of key (gen << 32 | id) for this drain. */
static const uint64_t *stack_cache_add(struct sampler *s, uint64_t key, const uint64_t *ips,
				       uint32_t cnt)
{
	struct cached_stack *c;

	if (s->ncached == s->cached_cap) {
		size_t cap = s->cached_cap ? 2 * s->cached_cap : 1024;
		struct cached_stack *nc = realloc(s->cached, cap * sizeof(*nc));

		if (!nc)
			return NULL;
		s->cached = nc;
		s->cached_cap = cap;
	}
	c = &s->cached[s->ncached];
	c->ips = malloc((cnt ? cnt : 1) * sizeof(uint64_t));
	if (!c->ips)
		return NULL;
	if (htab_map_put(&s->stack_cache, key, s->ncached) < 0) {
		free(c->ips);
		return NULL;
	}
	memcpy(c->ips, ips, cnt * sizeof(uint64_t));
	c->n = cnt;
	s->ncached++;
	return c->ips;
}

/* Looks up a stack of generation gen, caching it for this drain. A NULL
 * return with *n = 0 means the stack is gone. */
const uint64_t *sampler_get_stack(struct sampler *s, unsigned gen, int32_t id, uint32_t *n)
{
	uint64_t raw[JP_MAX_STACK_DEPTH], key = (uint64_t)gen << 32 | (uint32_t)id;
	uint64_t *idx = htab_map_get(&s->stack_cache, key);
	const uint64_t *ips;
	uint32_t cnt = 0;

	*n = 0;
	if (idx) {
		*n = s->cached[*idx].n;
		return s->cached[*idx].ips;
	}
	if (read_stack(s, gen, id, raw, &cnt) < 0) {
		s->stack_missing++;
		return NULL;
	}
	ips = stack_cache_add(s, key, raw, cnt);
	if (ips)
		*n = cnt;
	return ips;
}

/* Every stack the unwinder stored in generation gen, read and deleted in a
 * few batch calls into the drain's cache, before the counts that refer to
 * them are delivered: one by one, each was a lookup, a key walk step and a
 * delete, three syscalls (a third of the daemon's time on a busy host).
 * What a failed batch leaves is read and cleared one by one as before. */
static void preload_ustacks(struct sampler *s, unsigned gen)
{
	int fd = gen ? bpf_map__fd(s->skel->maps.ustacks1) : bpf_map__fd(s->skel->maps.ustacks0);
	uint32_t in = 0, out = 0;
	bool first = true;
	int r = 0;

	if (!s->ustack_keys || !s->ustack_vals)
		return;
	while (r == 0) {
		__u32 n = USTACK_BATCH;

		r = bpf_map_lookup_and_delete_batch(fd, first ? NULL : &in, &out, s->ustack_keys,
						    s->ustack_vals, &n, NULL);
		if (r < 0 && r != -ENOENT)
			n = 0;  /* -ENOSPC (a bucket larger than the batch): the rest one by one */
		for (__u32 i = 0; i < n; i++) {
			const struct jp_ustack *us = &s->ustack_vals[i];
			uint64_t key = (uint64_t)gen << 32 | s->ustack_keys[i];

			/* Read already (an off-CPU record's) while it was live. */
			if (!htab_map_get(&s->stack_cache, key))
				stack_cache_add(s, key, (const uint64_t *)us->ips,
						us->n < JP_MAX_STACK_DEPTH ? us->n : JP_MAX_STACK_DEPTH);
		}
		in = out;
		first = false;
	}
}

static uint64_t source_period(const struct sampler *s, uint32_t source)
{
	if (source == JP_SRC_HOST)
		return s->host_rate_hz ? 1000000000ull / s->host_rate_hz : 0;
	for (size_t i = 0; i < s->nperiods; i++)
		if (s->periods[i].source == source)
			return s->periods[i].period_ns;
	return 0;
}

/* After a drain: forget the periods of sources closed before it. */
static void source_periods_retire(struct sampler *s)
{
	for (size_t i = 0; i < s->nperiods;) {
		if (s->periods[i].refs == 0 && s->drains >= s->periods[i].retire_after)
			s->periods[i] = s->periods[--s->nperiods];
		else
			i++;
	}
}

/* A comm from BPF (16 bytes, NUL-terminated by the kernel, but doubted)
 * as a printable string in out (17 bytes); NULL when empty. */
static const char *printable_comm(const char *in, char *out)
{
	memcpy(out, in, 16);
	out[16] = '\0';
	for (char *c = out; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
			*c = '?';
	return out[0] ? out : NULL;
}

void sampler_emit(struct sampler *s, const struct jp_count_key *k, enum event_id ev,
		  const uint64_t *values, uint64_t time_ns, const uint64_t *kips, uint32_t nk,
		  const uint64_t *uips, uint32_t nu)
{
	char comm[sizeof(k->comm) + 1], tcomm[sizeof(k->tcomm) + 1];
	struct raw_sample smp = {
		.event = ev,
		.pid = k->tgid,
		.tid = k->tid,
		.source = k->source,
		.host_feed = k->flags & JP_KEY_HOST_FEED,
		.kernel_mode = k->flags & JP_KEY_KERNEL_MODE,
		.kernel_thread = k->flags & JP_KEY_KTHREAD,
		.agent = k->flags & JP_KEY_AGENT,
		.state = ev == EVENT_CPU ? THREAD_STATE_RUNNING
			 : (k->flags & JP_KEY_OFF_PREEMPTED)       ? THREAD_STATE_RUNNABLE
			 : (k->flags & JP_KEY_OFF_UNINTERRUPTIBLE) ? THREAD_STATE_UNINTERRUPTIBLE
								   : THREAD_STATE_SLEEPING,
		.time_ns = time_ns,
		.start_ns = k->start_ns,
		.kips = kips,
		.nk = kips ? nk : 0,
		.uips = uips,
		.nu = uips ? nu : 0,
	};

	memcpy(smp.values, values, sizeof(smp.values));
	/* The names the process and thread had when sampled (BPF's copies
	 * of their comm), printable as proc_read_comm() makes /proc's. */
	smp.comm = printable_comm(k->comm, comm);
	smp.thread_comm = printable_comm(k->tcomm, tcomm);
	smp.kstack_lost = smp.kernel_mode && smp.nk == 0;
	smp.ustack_lost = smp.nu == 0 && !smp.kernel_thread;
	if (s->cb.sample)
		s->cb.sample(&smp, s->cb.sample_arg);
}

/* A CPU entry (count samples) or record (count 1, its time) of generation gen. */
static void deliver(struct sampler *s, unsigned gen, const struct jp_count_key *k, uint64_t count,
		    uint64_t time_ns)
{
	uint64_t values[EVENT_MAX_VALUES];
	const uint64_t *kips = NULL, *uips = NULL;
	uint32_t nk = 0, nu = 0;

	event_values_periodic(event_get(EVENT_CPU), count, source_period(s, k->source), values);
	if (k->kstack >= 0)
		kips = sampler_get_stack(s, gen, k->kstack, &nk);
	if (k->ustack >= 0)
		uips = sampler_get_stack(s, gen, k->ustack, &nu);
	sampler_emit(s, k, EVENT_CPU, values, time_ns, kips, nk, uips, nu);
}

/* Processes sampled without tables younger than this have their maps read
 * at once; older ones (the host's long-running processes when the daemon
 * starts) are loaded by the worker before they exit. */
#define YOUNG_SNAPSHOT_AGE_NS 2000000000ull

/* A young sample walked (or given up) by the unwinder: delivered as the
 * count entry it stands for would have been, with the time it was taken
 * for the host view (a recording that counts takes no times). */
static void young_deliver(const struct unwtab_young_out *o, void *arg)
{
	struct sampler *s = arg;
	uint64_t values[EVENT_MAX_VALUES];

	event_values_periodic(event_get(EVENT_CPU), 1, source_period(s, o->key->source), values);
	sampler_emit(s, o->key, EVENT_CPU, values, o->key->source == JP_SRC_HOST ? o->time_ns : 0,
		     o->kips, o->nk, o->uips, o->nu);
}

/* A JP_MSG_USTACK_COPY record: its stacks read while their ids are valid,
 * held for the unwinder; delivered at once with the frame-pointer stack
 * when it cannot be held. */
static void young_record(struct sampler *s, const struct jp_msg_ustack_copy *m)
{
	const uint64_t *kips = NULL, *uips = NULL;
	uint32_t nk = 0, nu = 0;

	if (m->key.kstack >= 0)
		kips = sampler_get_stack(s, m->gen & 1, m->key.kstack, &nk);
	if (m->key.ustack >= 0)
		uips = sampler_get_stack(s, m->gen & 1, m->key.ustack, &nu);
	if (s->unwind && unwtab_young_add(s->unwind, m, kips, kips ? nk : 0, uips, uips ? nu : 0) == 0)
		return;
	young_deliver(&(struct unwtab_young_out){ .key = &m->key, .time_ns = m->time_ns,
						  .kips = kips, .nk = kips ? nk : 0, .uips = uips,
						  .nu = uips ? nu : 0 }, s);
}

int sampler_handle_ring_msg(void *ctx, void *data, size_t size)
{
	struct sampler *s = ctx;
	uint32_t type;

	if (size < sizeof(uint32_t))
		return 0;
	memcpy(&type, data, sizeof(type));
	if (type == JP_MSG_NEW_THREAD && size >= sizeof(struct jp_msg_new_thread)) {
		const struct jp_msg_new_thread *m = data;

		if (s->cb.new_thread)
			s->cb.new_thread(m->tgid, m->tid, s->cb.new_thread_arg);
	} else if (type == JP_MSG_EXEC && size >= sizeof(struct jp_msg_new_thread)) {
		const struct jp_msg_new_thread *m = data;

		hs_procs_exec(s->hotspot, (pid_t)m->tgid);
		if (s->cb.exec)
			s->cb.exec(m->tgid, s->cb.exec_arg);
	} else if (type == JP_MSG_SAMPLE && size >= sizeof(struct jp_msg_sample)) {
		const struct jp_msg_sample *m = data;
		struct jp_count_key k = {
			.tgid = m->tgid, .tid = m->tid, .kstack = m->kstack, .ustack = m->ustack,
			.source = m->source, .flags = m->flags, .start_ns = m->start_ns,
		};

		memcpy(k.comm, m->comm, sizeof(k.comm));
		memcpy(k.tcomm, m->tcomm, sizeof(k.tcomm));
		deliver(s, m->gen & 1, &k, 1, m->time_ns);
	} else if (type == JP_MSG_OFFCPU && size >= sizeof(struct jp_msg_offcpu)) {
		sampler_offcpu_record(s, data);
	} else if (type == JP_MSG_USTACK_COPY && size >= sizeof(struct jp_msg_ustack_copy)) {
		young_record(s, data);
	} else if (type == JP_MSG_UNWIND_MISS && size >= sizeof(struct jp_msg_unwind_miss)) {
		const struct jp_msg_unwind_miss *m = data;

		/* A young process may exit before the worker gets to it (it may
		 * be building a large binary's table): its maps are read now, so
		 * its young samples can still be walked and named. */
		if (s->unwind && clock_ns(CLOCK_BOOTTIME) - m->start_ns < YOUNG_SNAPSHOT_AGE_NS) {
			unwtab_young_snapshot(s->unwind, m->tgid, m->start_ns);
			if (s->cb.young)
				s->cb.young(m->tgid, m->start_ns, s->cb.young_arg);
		}
		if (s->unwind)
			unwtab_request(s->unwind, m->tgid, m->start_ns, false);
		/* Any process may be a JVM; whether it is gets read at the tick. */
		hs_procs_consider(s->hotspot, (pid_t)m->tgid, m->start_ns);
	}
	return 0;
}


int sampler_drain_map(struct sampler *s, int fd, const char *what, void *values,
		      void (*each)(struct sampler *s, uint32_t i))
{
	struct jp_count_key in, out_batch;
	bool first = true, done = false;
	int r = 0;

	while (!done) {
		__u32 n = DRAIN_BATCH;

		r = bpf_map_lookup_and_delete_batch(fd, first ? NULL : &in, &out_batch, s->keys,
						    values, &n, NULL);
		if (r < 0 && r != -ENOENT) {
			log_err("sampler: draining %s failed: %s", what, strerror(-r));
			return r;
		}
		done = r == -ENOENT;
		r = 0;
		for (__u32 i = 0; i < n; i++)
			each(s, i);
		s->last_drain_counts += n;
		in = out_batch;
		first = false;
	}
	return r;
}

static void deliver_count(struct sampler *s, uint32_t i)
{
	deliver(s, s->pending_gen, &s->keys[i], s->values[i], 0);
}

static int drain_counts(struct sampler *s, unsigned gen)
{
	int fd = gen ? bpf_map__fd(s->skel->maps.counts1) : bpf_map__fd(s->skel->maps.counts0);

	return sampler_drain_map(s, fd, "counts", s->values, deliver_count);
}

static int clear_stack_map(struct sampler *s, int fd, size_t *cleared)
{
	uint32_t key, next;
	size_t n = 0;
	int r;

	/* Collect first: deleting while walking restarts the kernel's scan. */
	for (r = bpf_map_get_next_key(fd, NULL, &next); r == 0;
	     r = bpf_map_get_next_key(fd, &key, &next)) {
		if (n == s->stack_ids_cap) {
			size_t cap = s->stack_ids_cap ? s->stack_ids_cap * 2 : 1024;
			uint32_t *p = realloc(s->stack_ids, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			s->stack_ids = p;
			s->stack_ids_cap = cap;
		}
		s->stack_ids[n++] = next;
		key = next;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(fd, &s->stack_ids[i]);
	*cleared += n;
	return 0;
}

static int clear_stacks(struct sampler *s, unsigned gen)
{
	size_t n = 0;
	int r = clear_stack_map(s, gen ? bpf_map__fd(s->skel->maps.stacks1)
				       : bpf_map__fd(s->skel->maps.stacks0), &n);

	if (r == 0)
		r = clear_stack_map(s, gen ? bpf_map__fd(s->skel->maps.ustacks1)
					   : bpf_map__fd(s->skel->maps.ustacks0), &n);
	s->last_drain_stacks = n;
	return r;
}

/* Delivers and empties the generation the pending drain flipped away from;
 * its grace period is over. */
static int drain_finish(struct sampler *s)
{
	uint64_t t0 = clock_mono_ns();
	unsigned old = s->pending_gen;
	int r;

	s->drain_pending = false;
	if (s->unwind)
		preload_ustacks(s, old);
	/* Before the ring: an off-CPU record written after this scan is of a
	 * task the scan saw blocked (see sampler_offcpu.c). */
	r = sampler_offcpu_hold(s);
	ring_buffer__consume(s->ring);
	s->last_drain_counts = 0;
	if (r == 0)
		r = drain_counts(s, old);
	/* Young samples the unwinder has walked since the last drain. */
	if (r == 0 && s->unwind)
		unwtab_young_take(s->unwind, young_deliver, s);
	if (r == 0)
		r = sampler_offcpu_drain(s, old);
	if (r == 0)
		r = clear_stacks(s, old);
	if (r == 0)
		sampler_offcpu_drained(s);
	sampler_stack_cache_reset(s);
	/* After the samples were named: a JVM gone is forgotten only now. */
	hs_procs_tick(s->hotspot);
	s->drains++;
	source_periods_retire(s);
	s->drain_ns_total += clock_mono_ns() - t0;
	return r;
}

/* Flips the generation: programs from now on write the other one. jp_gen
 * counts drain epochs; its low bit is the generation. */
static void flip(struct sampler *s)
{
	uint32_t old = s->skel->bss->jp_gen;

	__atomic_store_n(&s->skel->bss->jp_gen, old + 1, __ATOMIC_SEQ_CST);
	s->pending_gen = old & 1;
	s->pending_epoch = old;
	s->drain_pending = true;
}

int sampler_drain_fd(const struct sampler *s)
{
	return s->grace_done_fd;
}

int sampler_drain_begin(struct sampler *s)
{
	uint64_t one = 1;

	if (s->drain_pending)
		return 0;
	flip(s);
	while (write(s->grace_req_fd, &one, sizeof(one)) < 0) {
		if (errno != EINTR) {
			/* Cannot happen short of a broken eventfd: wait here. */
			sampler_wait_for_programs(s->membarrier_ok);
			return drain_finish(s) < 0 ? -EIO : 1;
		}
	}
	return 1;
}

int sampler_drain_end(struct sampler *s)
{
	uint64_t n;

	if (read(s->grace_done_fd, &n, sizeof(n)) != sizeof(n) || !s->drain_pending)
		return 0;
	/* One request is outstanding at a time: this count is its answer. */
	return drain_finish(s) < 0 ? -EIO : 1;
}

int sampler_drain(struct sampler *s)
{
	int r;

	if (s->drain_pending) {
		/* Wait for the thread's answer to the pending flip. */
		struct pollfd pfd = { .fd = s->grace_done_fd, .events = POLLIN };
		uint64_t n;

		while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
			;
		if (read(s->grace_done_fd, &n, sizeof(n)) < 0)
			sampler_wait_for_programs(s->membarrier_ok);
		r = drain_finish(s);
		if (r < 0)
			return r;
	}
	flip(s);
	sampler_wait_for_programs(s->membarrier_ok);
	return drain_finish(s);
}
