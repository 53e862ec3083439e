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
_Static_assert(sizeof(struct jp_counters) == 192, "jp_counters layout");
_Static_assert(sizeof(struct jp_msg_ustack_copy) == 112 + JP_USTACK_COPY_BYTES, "jp_msg_ustack_copy layout");
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
void sampler_wait_for_programs(bool membarrier_ok)
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
		sampler_wait_for_programs(s->membarrier_ok);
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
	s->ring = ring_buffer__new(bpf_map__fd(s->skel->maps.events), sampler_handle_ring_msg, s, NULL);
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
		unwtab_set_cold(s->unwind, cfg->unwind_cold_s * 1000000000ull);
		unwtab_set_cache(s->unwind, cfg->unwind_cache_dir, cfg->unwind_cache_max_bytes);
		r = hs_procs_new(bpf_map__fd(s->skel->maps.hs_procs), NULL, &s->hotspot);
		if (r < 0)
			goto fail;
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
		 "user stacks by %s (%u table rows)%s",
		 s->ncpus, s->host_rate_hz ? "at " : "off ", s->host_rate_hz, stack_entries,
		 s->unwind ? "CFI (.eh_frame) tables" : "frame pointers only",
		 bpf_map__max_entries(s->skel->maps.unwind_rows),
		 s->membarrier_ok ? "" : ", membarrier unavailable (drains wait 20 ms)");
	*out = s;
	return 0;
fail:
	sampler_free(s);
	return r;
}


struct hs_procs *sampler_hotspot(struct sampler *s)
{
	return s ? s->hotspot : NULL;
}

void sampler_free(struct sampler *s)
{
	if (!s)
		return;
	grace_stop(s);
	sampler_events_close(s->host);
	hs_procs_free(s->hotspot);
	unwtab_free(s->unwind);
	sampler_offcpu_free(s);
	ring_buffer__free(s->ring);
	sampler_bpf__destroy(s->skel);
	sampler_stack_cache_reset(s);
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

/* Sums the per-CPU histograms of the BPF time per sample. They are never
 * reset: the sum is the total since the programs were loaded. */
static void read_sample_hist(const struct sampler *s, uint32_t which, struct samplehist *out)
{
	struct jp_sample_hist *per = calloc(s->possible_cpus, sizeof(*per));

	if (!per || bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.sample_hist), &which, per) < 0)
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
			out->young_copied += per[i].young_copied;
			out->young_copy_err += per[i].young_copy_err;
			out->hs_walks += per[i].hs_walks;
			out->hs_frames += per[i].hs_frames;
			out->hs_lost += per[i].hs_lost;
		}
	}
	free(per);
	out->stack_missing = s->stack_missing;
	hs_procs_get_stats(s->hotspot, &out->hotspot);
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
	read_sample_hist(s, JP_HIST_ALL, &out->bpf_time);
	read_sample_hist(s, JP_HIST_JAVA, &out->bpf_time_java);
	out->unwind_on = s->unwind != NULL;
	if (s->unwind) {
		unwtab_get_stats(s->unwind, &out->unwind);
		out->unwind_nmissing = unwtab_missing(s->unwind, out->unwind_missing,
						      sizeof(out->unwind_missing) /
							      sizeof(out->unwind_missing[0]));
	}
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
