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

_Static_assert(sizeof(struct jp_count_key) == 64, "jp_count_key layout");
_Static_assert(sizeof(struct jp_counters) == 152, "jp_counters layout");
_Static_assert(sizeof(struct jp_offcpu_target) == 16, "jp_offcpu_target layout");
_Static_assert(sizeof(struct jp_offcpu_start) == 88, "jp_offcpu_start layout");
_Static_assert(sizeof(struct jp_offcpu_value) == 16, "jp_offcpu_value layout");
_Static_assert(sizeof(struct jp_msg_offcpu) == 80, "jp_msg_offcpu layout");
_Static_assert(sizeof(struct jp_msg_new_thread) == 24, "jp_msg_new_thread layout");
_Static_assert(sizeof(struct jp_msg_sample) == 80, "jp_msg_sample layout");
_Static_assert(sizeof(struct jp_unwind_row) == 12, "jp_unwind_row layout");
_Static_assert(sizeof(struct jp_unwind_map) == 32, "jp_unwind_map layout");
_Static_assert(sizeof(struct jp_unwind_proc) == 16 + 32 * JP_UNWIND_MAX_MAPS, "jp_unwind_proc layout");
_Static_assert(sizeof(struct jp_ustack) == 8 * JP_MAX_STACK_DEPTH + 16, "jp_ustack layout");
_Static_assert(sizeof(struct jp_msg_unwind_miss) == 16, "jp_msg_unwind_miss layout");
_Static_assert(sizeof(struct jp_sample_hist) == 8 * JP_HIST_BUCKETS + 8, "jp_sample_hist layout");
_Static_assert(JP_HIST_BUCKETS == SAMPLEHIST_BUCKETS && JP_HIST_BUCKET_NS == 1000,
	       "samplehist.h reads bpf/sampler.h's buckets as 1 us each");

#define DEFAULT_UNWIND_ROWS (1u << 20)

/* Parses a cpulist such as "0-3,5" from /sys/devices/system/cpu/online. */
static int read_online_cpus(int *cpus, unsigned max, unsigned *n)
{
	char line[4096], *p;
	FILE *f = fopen("/sys/devices/system/cpu/online", "re");
	int r = 0;

	*n = 0;
	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f)) {
		r = -EIO;
		goto out;
	}
	p = line;
	while (*p && *p != '\n') {
		char *end;
		long a = strtol(p, &end, 10), b;

		if (end == p || a < 0) {
			r = -EINVAL;
			goto out;
		}
		b = a;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a) {
				r = -EINVAL;
				goto out;
			}
			p = end;
		}
		for (long c = a; c <= b && *n < max; c++)
			cpus[(*n)++] = (int)c;
		if (*p == ',')
			p++;
	}
	if (*n == 0)
		r = -EINVAL;
out:
	fclose(f);
	return r;
}

static int perf_open(pid_t pid, int cpu, uint64_t period_ns)
{
	struct perf_event_attr attr;
	long fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = period_ns;
	/* No sample_type, no callchain, no mmap buffer: everything the BPF
	 * program needs it reads itself, and a consumer of this fd (an agent)
	 * learns nothing about kernel addresses from it. */
	fd = syscall(__NR_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	return (int)fd;
}

static int handle_ring_msg(void *ctx, void *data, size_t size);

/* The kernel's initial pid namespace always has this inode (PROC_PID_INIT_INO). */
#define INIT_PID_NS_INO 0xEFFFFFFCu

/* In a container, ids from BPF must be those of the daemon's own pid
 * namespace, or /proc lookups (symbols, threads, names) miss. */
static void set_pid_namespace(struct sampler *s)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) < 0 || st.st_ino == INIT_PID_NS_INO)
		return;
	s->skel->bss->jp_pidns_dev = st.st_dev;
	s->skel->bss->jp_pidns_ino = st.st_ino;
	s->in_pid_ns = true;
	log_notice("sampler: running in a pid namespace (inode %lu): only its processes are profiled",
		   (unsigned long)st.st_ino);
}

/* Waits until every program run that may have read the old generation has
 * finished: perf_event programs run inside RCU read-side sections, so one
 * grace period (membarrier GLOBAL = synchronize_rcu) is enough. */
static void wait_for_programs(bool membarrier_ok)
{
	if (membarrier_ok && syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
		return;
	usleep(20000);
}

/* The drain thread: waits one grace period per request. It touches nothing
 * of the sampler but its two eventfds and membarrier_ok (set before it
 * starts); signals stay blocked in it as in the thread that started it. */
static void *grace_main(void *arg)
{
	struct sampler *s = arg;
	uint64_t v, one = 1;

	for (;;) {
		if (read(s->grace_req_fd, &v, sizeof(v)) != sizeof(v)) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (v >= 2)
			break;
		wait_for_programs(s->membarrier_ok);
		while (write(s->grace_done_fd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
	}
	return NULL;
}

static int grace_start(struct sampler *s)
{
	int r;

	s->grace_req_fd = eventfd(0, EFD_CLOEXEC);
	s->grace_done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->grace_req_fd < 0 || s->grace_done_fd < 0)
		return -errno;
	r = pthread_create(&s->grace_thread, NULL, grace_main, s);
	if (r)
		return -r;
	s->grace_started = true;
	return 0;
}

static void grace_stop(struct sampler *s)
{
	uint64_t quit = 2;

	if (s->grace_started) {
		while (write(s->grace_req_fd, &quit, sizeof(quit)) < 0 && errno == EINTR)
			;
		pthread_join(s->grace_thread, NULL);
		s->grace_started = false;
	}
	if (s->grace_req_fd >= 0)
		close(s->grace_req_fd);
	if (s->grace_done_fd >= 0)
		close(s->grace_done_fd);
	s->grace_req_fd = s->grace_done_fd = -1;
}

int sampler_new(const struct sampler_config *cfg, const struct sampler_callbacks *cb,
		struct sampler **out)
{
	struct sampler *s = calloc(1, sizeof(*s));
	unsigned stack_entries = cfg->stack_entries ? cfg->stack_entries : 16384;
	unsigned count_entries = cfg->count_entries ? cfg->count_entries : 65536;
	int r;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->grace_req_fd = s->grace_done_fd = -1;
	s->cb = *cb;
	s->host_rate_hz = cfg->host_rate_hz;
	r = read_online_cpus(s->cpus, SAMPLER_MAX_CPUS, &s->ncpus);
	if (r < 0) {
		log_err("sampler: cannot read online CPUs: %s", strerror(-r));
		goto fail;
	}
	r = libbpf_num_possible_cpus();
	if (r <= 0) {
		r = r < 0 ? r : -EINVAL;
		goto fail;
	}
	s->possible_cpus = (unsigned)r;
	s->membarrier_ok = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) > 0 &&
			   (syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) & MEMBARRIER_CMD_GLOBAL);

	s->skel = sampler_bpf__open();
	if (!s->skel) {
		r = -errno;
		log_err("sampler: cannot open BPF object: %s", strerror(-r));
		goto fail;
	}
	bpf_map__set_max_entries(s->skel->maps.stacks0, stack_entries);
	bpf_map__set_max_entries(s->skel->maps.stacks1, stack_entries);
	bpf_map__set_max_entries(s->skel->maps.ustacks0, stack_entries);
	bpf_map__set_max_entries(s->skel->maps.ustacks1, stack_entries);
	bpf_map__set_max_entries(s->skel->maps.unwind_rows,
				 cfg->no_unwind ? 1 : cfg->unwind_rows ? cfg->unwind_rows : DEFAULT_UNWIND_ROWS);
	/* The unwind worker writes and evicts tables through a mapping of
	 * the rows: table loads and evictions were otherwise 13% of the daemon's
	 * CPU on a busy host, in bpf() batch copies (docs/benchmarks.md). */
	bpf_map__set_map_flags(s->skel->maps.unwind_rows,
			       bpf_map__map_flags(s->skel->maps.unwind_rows) | BPF_F_MMAPABLE);
	bpf_map__set_max_entries(s->skel->maps.counts0, count_entries);
	bpf_map__set_max_entries(s->skel->maps.counts1, count_entries);
	bpf_map__set_max_entries(s->skel->maps.offcounts0, count_entries);
	bpf_map__set_max_entries(s->skel->maps.offcounts1, count_entries);
	/* The switch program runs only while an off-CPU recording does. */
	bpf_program__set_autoattach(s->skel->progs.offcpu_switch, false);
	set_pid_namespace(s);
	r = sampler_bpf__load(s->skel);
	if (r < 0) {
		log_err("sampler: cannot load BPF programs: %s (root and a BTF kernel >= 5.17 are needed)",
			strerror(-r));
		goto fail;
	}
	/* The tracepoints (new threads, execs); perf_event programs are
	 * attached per event and skipped here. */
	r = sampler_bpf__attach(s->skel);
	if (r < 0) {
		log_err("sampler: cannot attach the task_newtask and sched_process_exec tracepoints: %s",
			strerror(-r));
		goto fail;
	}
	s->ring = ring_buffer__new(bpf_map__fd(s->skel->maps.events), handle_ring_msg, s, NULL);
	if (!s->ring) {
		r = -errno;
		log_err("sampler: cannot set up ring buffer: %s", strerror(-r));
		goto fail;
	}
	r = grace_start(s);
	if (r < 0) {
		log_err("sampler: cannot start the drain thread: %s", strerror(-r));
		goto fail;
	}
	if (!cfg->no_unwind) {
		r = unwtab_new(bpf_map__fd(s->skel->maps.unwind_rows),
			       bpf_map__fd(s->skel->maps.unwind_procs),
			       bpf_map__max_entries(s->skel->maps.unwind_rows), &s->unwind);
		if (r < 0) {
			log_err("sampler: cannot start the unwind table builder: %s", strerror(-r));
			goto fail;
		}
	}
	s->keys = calloc(DRAIN_BATCH, sizeof(*s->keys));
	/* Optional: without them the drain reads stacks one by one. */
	s->ustack_keys = calloc(USTACK_BATCH, sizeof(*s->ustack_keys));
	s->ustack_vals = calloc(USTACK_BATCH, sizeof(*s->ustack_vals));
	s->values = calloc(DRAIN_BATCH, sizeof(*s->values));
	s->off_values = calloc(DRAIN_BATCH, sizeof(*s->off_values));
	s->start_keys = calloc(DRAIN_BATCH, sizeof(*s->start_keys));
	s->start_vals = calloc(DRAIN_BATCH, sizeof(*s->start_vals));
	if (!s->keys || !s->values || !s->off_values || !s->start_keys || !s->start_vals) {
		r = -ENOMEM;
		goto fail;
	}
	if (s->host_rate_hz) {
		r = sampler_cpu_events_open(s, JP_SRC_HOST, 1000000000ull / s->host_rate_hz, 0,
					    &s->host);
		if (r < 0)
			goto fail;
	}
	log_info("sampler: %u CPUs, host view %s%u Hz, %u stack entries per generation, "
		 "user stacks by %s%s",
		 s->ncpus, s->host_rate_hz ? "at " : "off ", s->host_rate_hz, stack_entries,
		 s->unwind ? "CFI (.eh_frame) tables" : "frame pointers only",
		 s->membarrier_ok ? "" : ", membarrier unavailable (drains wait 20 ms)");
	*out = s;
	return 0;
fail:
	sampler_free(s);
	return r;
}

static bool drop_entry(uint64_t key, uint64_t *val, void *arg)
{
	return false;
}

/* Empties the per-drain stack cache, keeping its capacity. */
static void stack_cache_reset(struct sampler *s)
{
	for (size_t i = 0; i < s->ncached; i++)
		free(s->cached[i].ips);
	s->ncached = 0;
	htab_map_retain(&s->stack_cache, drop_entry, NULL);
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	grace_stop(s);
	sampler_events_close(s->host);
	unwtab_free(s->unwind);
	sampler_offcpu_free(s);
	ring_buffer__free(s->ring);
	sampler_bpf__destroy(s->skel);
	stack_cache_reset(s);
	htab_map_release(&s->stack_cache);
	free(s->cached);
	free(s->keys);
	free(s->values);
	free(s->off_values);
	free(s->start_keys);
	free(s->start_vals);
	free(s->stack_ids);
	free(s->ustack_keys);
	free(s->ustack_vals);
	free(s->watches);
	free(s->periods);
	free(s);
}

int sampler_ring_fd(const struct sampler *s)
{
	return ring_buffer__epoll_fd(s->ring);
}

int sampler_poll_ring(struct sampler *s)
{
	int r = ring_buffer__consume(s->ring);

	return r < 0 ? r : 0;
}

void sampler_unwind_prepare(struct sampler *s, uint32_t tgid)
{
	if (s->unwind)
		unwtab_request(s->unwind, tgid, 0, true);
}

bool sampler_unwind_pending(struct sampler *s, uint32_t tgid)
{
	return s->unwind && unwtab_pending(s->unwind, tgid);
}

int sampler_unwind_wait(struct sampler *s, uint64_t timeout_ns)
{
	return s->unwind ? unwtab_wait_idle(s->unwind, timeout_ns) : 0;
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

static int source_period_ref(struct sampler *s, uint32_t source, uint64_t period_ns)
{
	struct source_period *n;

	for (size_t i = 0; i < s->nperiods; i++) {
		if (s->periods[i].source == source) {
			s->periods[i].refs++;
			s->periods[i].period_ns = period_ns;
			return 0;
		}
	}
	n = realloc(s->periods, (s->nperiods + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	s->periods = n;
	s->periods[s->nperiods++] = (struct source_period){ source, 1, period_ns, 0 };
	return 0;
}

static void source_period_unref(struct sampler *s, uint32_t source)
{
	for (size_t i = 0; i < s->nperiods; i++) {
		if (s->periods[i].source == source) {
			if (--s->periods[i].refs == 0)
				s->periods[i].retire_after = s->drains + 1;
			return;
		}
	}
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

static int handle_ring_msg(void *ctx, void *data, size_t size)
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

		if (s->cb.exec)
			s->cb.exec(m->tgid, s->cb.new_thread_arg);
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
	} else if (type == JP_MSG_UNWIND_MISS && size >= sizeof(struct jp_msg_unwind_miss)) {
		const struct jp_msg_unwind_miss *m = data;

		if (s->unwind)
			unwtab_request(s->unwind, m->tgid, m->start_ns, false);
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
	if (r == 0)
		r = sampler_offcpu_drain(s, old);
	if (r == 0)
		r = clear_stacks(s, old);
	if (r == 0)
		sampler_offcpu_drained(s);
	stack_cache_reset(s);
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
			wait_for_programs(s->membarrier_ok);
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
			wait_for_programs(s->membarrier_ok);
		r = drain_finish(s);
		if (r < 0)
			return r;
	}
	flip(s);
	wait_for_programs(s->membarrier_ok);
	return drain_finish(s);
}

static struct sampler_events *events_new(struct sampler *s, unsigned n)
{
	struct sampler_events *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	ev->owner = s;
	ev->fds = malloc(n * sizeof(int));
	ev->links = calloc(n, sizeof(*ev->links));
	if (!ev->fds || !ev->links) {
		free(ev->fds);
		free(ev->links);
		free(ev);
		return NULL;
	}
	for (unsigned i = 0; i < n; i++)
		ev->fds[i] = -1;
	return ev;
}

/* Opens one event and attaches prog with cookie; on success the link owns fd. */
static int events_attach(struct sampler_events *ev, struct bpf_program *prog, pid_t pid, int cpu,
			 uint64_t period_ns, uint64_t cookie)
{
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
	struct bpf_link *link;
	int fd = perf_open(pid, cpu, period_ns);

	if (fd < 0)
		return fd;
	link = bpf_program__attach_perf_event_opts(prog, fd, &opts);
	if (!link) {
		int r = -errno;

		close(fd);
		return r;
	}
	ev->fds[ev->n] = fd;
	ev->links[ev->n] = link;
	ev->n++;
	return 0;
}

int sampler_cpu_events_open(struct sampler *s, uint32_t source, uint64_t period_ns,
			    uint64_t flags, struct sampler_events **out)
{
	uint64_t cookie = source | (flags & JP_COOKIE_RECORD);

	struct sampler_events *ev = events_new(s, s->ncpus);
	int r = 0;

	*out = NULL;
	if (!ev)
		return -ENOMEM;
	ev->source = source;
	s->cpu_event_sets++;
	r = source_period_ref(s, source, period_ns);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	ev->has_period = true;
	for (unsigned i = 0; i < s->ncpus; i++) {
		r = events_attach(ev, s->skel->progs.sample_cpu, -1, s->cpus[i], period_ns, cookie);
		if (r < 0) {
			log_err("sampler: cpu-clock event on CPU %d: %s", s->cpus[i], strerror(-r));
			sampler_events_close(ev);
			return r;
		}
	}
	*out = ev;
	return 0;
}

int sampler_thread_event_open(struct sampler *s, uint32_t source, pid_t tid, uint64_t period_ns,
			      uint64_t flags, struct sampler_events **out)
{
	struct sampler_events *ev = events_new(s, 1);
	uint64_t cookie = source | JP_COOKIE_THREAD |
			  (flags & (JP_COOKIE_RECORD | JP_COOKIE_SIGNAL));
	int r;

	*out = NULL;
	if (!ev)
		return -ENOMEM;
	ev->is_thread = true;
	ev->source = source;
	s->thread_events++;
	r = source_period_ref(s, source, period_ns);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	ev->has_period = true;
	r = events_attach(ev, s->skel->progs.sample_thread, tid, -1, period_ns, cookie);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	*out = ev;
	return 0;
}

int sampler_events_fd(const struct sampler_events *ev)
{
	return ev && ev->n == 1 ? ev->fds[0] : -1;
}

int sampler_events_count_ns(const struct sampler_events *ev, uint64_t *ns)
{
	uint64_t sum = 0, v;

	for (unsigned i = 0; ev && i < ev->n; i++) {
		/* read_format 0: the count alone, one u64. */
		ssize_t n = read(ev->fds[i], &v, sizeof(v));

		if (n < 0)
			return -errno;
		if (n != (ssize_t)sizeof(v))
			return -EIO;
		sum += v;
	}
	*ns = sum;
	return 0;
}

void sampler_events_close(struct sampler_events *ev)
{
	if (!ev)
		return;
	/* Disable first: an agent holding the same event (passed over
	 * SCM_RIGHTS, same open file) stops getting signals at once.
	 * bpf_link__destroy then also closes the perf event fd. */
	for (unsigned i = 0; i < ev->n; i++) {
		ioctl(ev->fds[i], PERF_EVENT_IOC_DISABLE, 0);
		bpf_link__destroy(ev->links[i]);
	}
	if (ev->has_period)
		source_period_unref(ev->owner, ev->source);
	if (ev->is_thread)
		ev->owner->thread_events--;
	else
		ev->owner->cpu_event_sets--;
	free(ev->fds);
	free(ev->links);
	free(ev);
}

int sampler_events_enable(struct sampler_events *ev, bool on)
{
	int r = 0;

	for (unsigned i = 0; ev && i < ev->n; i++)
		if (ioctl(ev->fds[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) < 0 &&
		    r == 0)
			r = -errno;
	return r;
}

int sampler_watch_tgid(struct sampler *s, uint32_t tgid)
{
	uint32_t one = 1;
	struct watch *w;
	int r;

	for (size_t i = 0; i < s->nwatches; i++) {
		if (s->watches[i].tgid == tgid) {
			s->watches[i].refs++;
			return 0;
		}
	}
	w = realloc(s->watches, (s->nwatches + 1) * sizeof(*w));
	if (!w)
		return -ENOMEM;
	s->watches = w;
	r = bpf_map_update_elem(bpf_map__fd(s->skel->maps.watched), &tgid, &one, BPF_ANY);
	if (r < 0)
		return r;
	s->watches[s->nwatches++] = (struct watch){ .tgid = tgid, .refs = 1 };
	return 0;
}

void sampler_unwatch_tgid(struct sampler *s, uint32_t tgid)
{
	for (size_t i = 0; i < s->nwatches; i++) {
		if (s->watches[i].tgid != tgid)
			continue;
		if (--s->watches[i].refs == 0) {
			bpf_map_delete_elem(bpf_map__fd(s->skel->maps.watched), &tgid);
			s->watches[i] = s->watches[--s->nwatches];
		}
		return;
	}
}

int sampler_cover_tid(struct sampler *s, uint32_t tid, uint32_t source)
{
	int r = bpf_map_update_elem(bpf_map__fd(s->skel->maps.covered), &tid, &source, BPF_NOEXIST);

	/* Already covered by another source: that one keeps feeding the host view. */
	return r == -EEXIST ? 0 : r;
}

void sampler_uncover_tid(struct sampler *s, uint32_t tid, uint32_t source)
{
	int fd = bpf_map__fd(s->skel->maps.covered);
	uint32_t owner;

	if (bpf_map_lookup_elem(fd, &tid, &owner) == 0 && owner == source)
		bpf_map_delete_elem(fd, &tid);
}

int sampler_set_min_gap(struct sampler *s, uint32_t source, uint64_t gap_ns)
{
	int fd = bpf_map__fd(s->skel->maps.source_min_gap);

	if (!gap_ns)
		return bpf_map_delete_elem(fd, &source) < 0 && errno != ENOENT ? -errno : 0;
	return bpf_map_update_elem(fd, &source, &gap_ns, BPF_ANY) < 0 ? -errno : 0;
}

/* Sums the per-CPU histograms of the BPF time per sample. They are never
 * reset: the sum is the total since the programs were loaded. */
static void read_sample_hist(const struct sampler *s, struct samplehist *out)
{
	struct jp_sample_hist *per = calloc(s->possible_cpus, sizeof(*per));
	uint32_t zero = 0;

	if (!per || bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.sample_hist), &zero, per) < 0)
		goto out;
	for (unsigned i = 0; i < s->possible_cpus; i++) {
		for (unsigned b = 0; b < JP_HIST_BUCKETS; b++) {
			out->buckets[b] += per[i].buckets[b];
			out->count += per[i].buckets[b];
		}
		out->sum_ns += per[i].sum_ns;
	}
out:
	free(per);
}

void sampler_get_stats(const struct sampler *s, struct sampler_stats *out)
{
	struct jp_counters *per = calloc(s->possible_cpus, sizeof(*per));
	uint32_t zero = 0;

	memset(out, 0, sizeof(*out));
	if (per && bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.counters), &zero, per) == 0) {
		for (unsigned i = 0; i < s->possible_cpus; i++) {
			out->samples += per[i].samples;
			out->idle += per[i].idle;
			out->skipped_covered += per[i].skipped_covered;
			out->kstack_err += per[i].kstack_err;
			out->ustack_err += per[i].ustack_err;
			out->collision += per[i].collision;
			out->map_full += per[i].map_full;
			out->ringbuf_full += per[i].ringbuf_full;
			out->throttled += per[i].throttled;
			out->foreign_ns += per[i].foreign_ns;
			out->offcpu += per[i].offcpu;
			out->offcpu_short += per[i].offcpu_short;
			out->offcpu_start_full += per[i].offcpu_start_full;
			out->uw_dwarf += per[i].uw_dwarf;
			out->uw_no_tables += per[i].uw_no_tables;
			out->uw_root += per[i].uw_root;
			out->uw_frames += per[i].uw_frames;
			out->uw_fp_frames += per[i].uw_fp_frames;
			out->uw_collision += per[i].uw_collision;
		}
	}
	free(per);
	out->stack_missing = s->stack_missing;
	out->drains = s->drains;
	out->drain_ns_total = s->drain_ns_total;
	out->last_drain_counts = s->last_drain_counts;
	out->last_drain_stacks = s->last_drain_stacks;
	out->count_capacity = bpf_map__max_entries(s->skel->maps.counts0);
	out->stack_capacity = bpf_map__max_entries(s->skel->maps.stacks0);
	out->cpus = s->ncpus;
	out->host_rate_hz = s->host_rate_hz;
	out->cpu_event_sets = s->cpu_event_sets;
	out->thread_events = s->thread_events;
	out->offcpu_targets = s->offcpu_targets;
	out->offcpu_held_stacks = s->held.n;
	read_sample_hist(s, &out->bpf_time);
	out->unwind_on = s->unwind != NULL;
	if (s->unwind)
		unwtab_get_stats(s->unwind, &out->unwind);
}

static int log_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	enum log_level lvl = level == LIBBPF_WARN ? LOG_LVL_WARNING :
			     level == LIBBPF_INFO ? LOG_LVL_INFO : LOG_LVL_DEBUG;
	char prefixed[512];

	if (lvl > log_get_level())
		return 0;
	snprintf(prefixed, sizeof(prefixed), "libbpf: %s", fmt);
	log_vmsg(lvl, prefixed, ap);
	return 0;
}

void sampler_setup_logging(void)
{
	libbpf_set_print(log_libbpf);
}
