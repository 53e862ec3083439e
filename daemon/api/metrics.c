#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The renderer keeps the first failure and skips the rest, so the body reads
 * as a list of families. */
struct out {
	struct buf *b;
	int err;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;

	if (o->err)
		return;
	va_start(ap, fmt);
	o->err = buf_vprintf(o->b, fmt, ap);
	va_end(ap);
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
	family(o, name, "counter", help);
	put(o, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
	family(o, name, "gauge", help);
	put(o, "%s %llu\n", name, (unsigned long long)v);
}

/* %.9g keeps nanosecond resolution for seconds without trailing noise. */
static void fcounter(struct out *o, const char *name, const char *help, double v)
{
	family(o, name, "counter", help);
	put(o, "%s %.9g\n", name, v);
}

/* What the unwind worker did for the requests it got: its cost on a busy
 * host (docs/benchmarks.md). */
static const struct {
	const char *name, *help;
	size_t off;  /* of a uint64_t in struct unwtab_stats */
} unwind_work[] = {
	{ "jprofd_unwind_requests_total",
	  "Processes the unwind worker was asked to load (BPF misses, recordings).",
	  offsetof(struct unwtab_stats, requests) },
	{ "jprofd_unwind_requests_deferred_total",
	  "Of those, processes younger than 100 ms, held until that age.",
	  offsetof(struct unwtab_stats, deferred) },
	{ "jprofd_unwind_requests_deferred_exited_total",
	  "Of those, processes that exited before: their maps were never read.",
	  offsetof(struct unwtab_stats, deferred_gone) },
	{ "jprofd_unwind_process_reads_total",
	  "Process memory maps the unwind worker read for those requests.",
	  offsetof(struct unwtab_stats, proc_reads) },
	{ "jprofd_unwind_process_reads_unchanged_total",
	  "Of those, maps read again that showed no new code.",
	  offsetof(struct unwtab_stats, maps_unchanged) },
	{ "jprofd_unwind_rows_uploaded_total",
	  "Unwind table rows written to BPF (builds and reloads).",
	  offsetof(struct unwtab_stats, rows_uploaded) },
};

static void unwind_metrics(struct out *o, const struct sampler_stats *s)
{
	const struct unwtab_stats *t = &s->unwind;

	counter(o, "jprofd_unwind_stacks_total", "User stacks walked with CFI unwind tables.", s->uw_dwarf);
	counter(o, "jprofd_unwind_stacks_to_root_total",
		"User stacks walked with CFI tables that reached the outermost frame.", s->uw_root);
	counter(o, "jprofd_unwind_stacks_without_tables_total",
		"User stacks of processes without tables yet: frame pointers only.", s->uw_no_tables);
	counter(o, "jprofd_unwind_frames_total", "Frames in stacks walked with CFI tables.", s->uw_frames);
	counter(o, "jprofd_unwind_frame_pointer_frames_total",
		"Frames of those stacks found by frame pointers (code without CFI).", s->uw_fp_frames);
	counter(o, "jprofd_unwind_young_copied_total",
		"Samples of processes without tables sent with a copy of their user stack.",
		s->young_copied);
	counter(o, "jprofd_unwind_young_unwound_total",
		"Of those, walked in the daemon with the tables once loaded.", t->young_unwound);
	counter(o, "jprofd_unwind_young_unwound_to_root_total",
		"Of those, walks that reached the outermost frame.", t->young_to_root);
	family(o, "jprofd_unwind_young_dropped_total", "counter",
	       "Copied samples delivered with frame pointers only, by cause.");
	put(o, "jprofd_unwind_young_dropped_total{cause=\"exited\"} %llu\n",
	    (unsigned long long)t->young_gone);
	put(o, "jprofd_unwind_young_dropped_total{cause=\"expired\"} %llu\n",
	    (unsigned long long)t->young_expired);
	put(o, "jprofd_unwind_young_dropped_total{cause=\"memory\"} %llu\n",
	    (unsigned long long)t->young_over_memory);
	put(o, "jprofd_unwind_young_dropped_total{cause=\"uid_share\"} %llu\n",
	    (unsigned long long)t->young_uid_share);
	put(o, "jprofd_unwind_young_dropped_total{cause=\"copy_failed\"} %llu\n",
	    (unsigned long long)s->young_copy_err);
	gauge(o, "jprofd_unwind_young_held_bytes", "Memory of copied samples waiting for tables.",
	      t->young_held_bytes);
	gauge(o, "jprofd_unwind_processes", "Processes with unwind tables loaded.", t->procs);
	gauge(o, "jprofd_unwind_tables", "Binaries with unwind tables loaded.", t->tables);
	gauge(o, "jprofd_unwind_rows", "Unwind table rows loaded.", t->rows_used);
	gauge(o, "jprofd_unwind_rows_capacity", "Unwind table rows that fit.", t->rows_capacity);
	for (size_t i = 0; i < sizeof(unwind_work) / sizeof(unwind_work[0]); i++)
		counter(o, unwind_work[i].name, unwind_work[i].help,
			*(const uint64_t *)((const char *)t + unwind_work[i].off));
	counter(o, "jprofd_unwind_table_builds_total", "Unwind tables built.", t->builds);
	fcounter(o, "jprofd_unwind_table_build_seconds_total", "Time spent building unwind tables.",
		 (double)t->build_ns_total / 1e9);
	fcounter(o, "jprofd_unwind_table_build_cpu_seconds_total",
		 "CPU time of the unwind worker spent building unwind tables.",
		 (double)t->build_cpu_ns_total / 1e9);
	counter(o, "jprofd_unwind_table_builds_deferred_total",
		"Unwind table builds put off because the file's owner spent its build time.",
		t->builds_deferred);
	counter(o, "jprofd_unwind_tables_evicted_total", "Unwind tables evicted to make room.", t->evicted);
	counter(o, "jprofd_unwind_cache_hits_total",
		"Unwind tables loaded from the disk cache rather than built.", t->cache_hits);
	counter(o, "jprofd_unwind_cache_writes_total", "Unwind tables written to the disk cache.",
		t->cache_writes);
	counter(o, "jprofd_unwind_cache_rejected_total",
		"Disk cache entries refused (corrupt, truncated): built again.", t->cache_rejected);
	gauge(o, "jprofd_unwind_cache_bytes", "Size of the disk cache of unwind tables.",
	      t->cache_bytes);
	counter(o, "jprofd_unwind_table_room_retries_total",
		"Unwind tables refused for want of room, built again later.", t->room_retries);
	counter(o, "jprofd_unwind_table_evicted_cold_total",
		"Unwind tables in use whose rows went to another table: none of their processes "
		"had been sampled for unwind_cold_s (30 s by default).", t->evicted_cold);
	counter(o, "jprofd_unwind_table_cold_reloads_total",
		"Processes given such a table back when sampled again.", t->cold_reloads);
	counter(o, "jprofd_unwind_table_reloads_total",
		"Evicted unwind tables loaded again from the daemon's copy, not rebuilt.", t->reloads);
	gauge(o, "jprofd_unwind_evicted_copy_bytes", "Memory of the copies of evicted unwind tables.",
	      t->spill_bytes);
	family(o, "jprofd_unwind_sampled_without_tables", "gauge",
	       "Binaries that processes sampled within the last minute map and that have no "
	       "unwind table (frame pointers there), by cause.");
	for (int i = 0; i < UNWTAB_NWHY; i++)
		put(o, "jprofd_unwind_sampled_without_tables{cause=\"%s\"} %llu\n",
		    unwtab_why_name((enum unwtab_why)i), (unsigned long long)t->sampled_missing[i]);
	family(o, "jprofd_unwind_tables_rejected_total", "counter",
	       "Binaries left without unwind tables (frame pointers then), by cause.");
	for (int i = CFI_OK + 1; i < CFI_NERRORS; i++)
		put(o, "jprofd_unwind_tables_rejected_total{cause=\"%s\"} %llu\n",
		    cfi_error_name((enum cfi_error)i), (unsigned long long)t->rejected[i]);
	put(o, "jprofd_unwind_tables_rejected_total{cause=\"no_room\"} %llu\n",
	    (unsigned long long)t->rows_full);
	put(o, "jprofd_unwind_tables_rejected_total{cause=\"open_failed\"} %llu\n",
	    (unsigned long long)t->open_failed);
	put(o, "jprofd_unwind_tables_rejected_total{cause=\"untrusted_fs\"} %llu\n",
	    (unsigned long long)t->untrusted_fs);
	put(o, "jprofd_unwind_tables_rejected_total{cause=\"uid_share\"} %llu\n",
	    (unsigned long long)t->uid_share);
}

/* Upper bounds (us) of the exported buckets of the BPF time per sample:
 * the BPF side's 1 us buckets merged where a coarser step is enough, fine
 * around the 10 us target. Every bound is a bucket edge, so each exported
 * count is exact; the last one is where the open BPF bucket starts. */
static const unsigned bpf_time_le_us[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 25, 30, 40, 50,
					   SAMPLEHIST_BUCKETS - 1 };

static void bpf_time_metrics(struct out *o, const struct samplehist *h)
{
	const char *name = "jprofd_bpf_sample_duration_seconds";
	uint64_t cum = 0;
	unsigned b = 0;

	family(o, name, "histogram",
	       "BPF time of each sample, measured by the sampling programs (entry to end, idle runs excluded).");
	for (size_t i = 0; i < sizeof(bpf_time_le_us) / sizeof(bpf_time_le_us[0]); i++) {
		for (; b < bpf_time_le_us[i]; b++)
			cum += h->buckets[b];
		put(o, "%s_bucket{le=\"%.9g\"} %llu\n", name, bpf_time_le_us[i] / 1e6,
		    (unsigned long long)cum);
	}
	put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
	put(o, "%s_sum %.9g\n", name, (double)h->sum_ns / 1e9);
	put(o, "%s_count %llu\n", name, (unsigned long long)h->count);
}

static void sampler_metrics(struct out *o, const struct sampler_stats *s)
{
	gauge(o, "jprofd_host_rate_hertz", "Always-on host sampling rate per CPU (0 = off).",
	      s->host_rate_hz);
	gauge(o, "jprofd_cpus", "CPUs with a host sampling event.", s->cpus);
	counter(o, "jprofd_samples_total", "Samples taken by the BPF programs (all sources, idle excluded).",
		s->samples);
	counter(o, "jprofd_idle_samples_total", "Samples of idle CPUs, counted but not stored.", s->idle);
	counter(o, "jprofd_samples_skipped_covered_total",
		"Host samples skipped because the thread has its own recording event.", s->skipped_covered);
	family(o, "jprofd_samples_lost_total", "counter",
	       "Samples or stack parts lost, by cause (see docs/architecture.md).");
	put(o, "jprofd_samples_lost_total{cause=\"kernel_stack\"} %llu\n", (unsigned long long)s->kstack_err);
	put(o, "jprofd_samples_lost_total{cause=\"user_stack\"} %llu\n", (unsigned long long)s->ustack_err);
	put(o, "jprofd_samples_lost_total{cause=\"stack_collision\"} %llu\n", (unsigned long long)s->collision);
	put(o, "jprofd_samples_lost_total{cause=\"map_full\"} %llu\n", (unsigned long long)s->map_full);
	put(o, "jprofd_samples_lost_total{cause=\"ringbuf_full\"} %llu\n", (unsigned long long)s->ringbuf_full);
	put(o, "jprofd_samples_lost_total{cause=\"throttled\"} %llu\n", (unsigned long long)s->throttled);
	put(o, "jprofd_samples_lost_total{cause=\"stack_missing\"} %llu\n", (unsigned long long)s->stack_missing);
	put(o, "jprofd_samples_lost_total{cause=\"offcpu_start_full\"} %llu\n",
	    (unsigned long long)s->offcpu_start_full);
	counter(o, "jprofd_offcpu_intervals_total", "Off-CPU intervals recorded.", s->offcpu);
	counter(o, "jprofd_offcpu_below_threshold_total",
		"Off-CPU intervals skipped: shorter than their recording's threshold.", s->offcpu_short);
	counter(o, "jprofd_drains_total", "Drains of the BPF maps.", s->drains);
	fcounter(o, "jprofd_drain_seconds_total", "Time spent draining the BPF maps.",
		 (double)s->drain_ns_total / 1e9);
	family(o, "jprofd_bpf_map_entries", "gauge",
	       "Entries the last drain found in one generation of a BPF map.");
	put(o, "jprofd_bpf_map_entries{map=\"counts\"} %llu\n", (unsigned long long)s->last_drain_counts);
	put(o, "jprofd_bpf_map_entries{map=\"stacks\"} %llu\n", (unsigned long long)s->last_drain_stacks);
	family(o, "jprofd_bpf_map_capacity", "gauge", "Capacity of one generation of a BPF map.");
	put(o, "jprofd_bpf_map_capacity{map=\"counts\"} %llu\n", (unsigned long long)s->count_capacity);
	put(o, "jprofd_bpf_map_capacity{map=\"stacks\"} %llu\n", (unsigned long long)s->stack_capacity);
	gauge(o, "jprofd_perf_cpu_event_sets", "Per-CPU perf event sets open (host view and --all recordings).",
	      s->cpu_event_sets);
	gauge(o, "jprofd_perf_thread_events", "Per-thread perf events open.", s->thread_events);
	bpf_time_metrics(o, &s->bpf_time);
	unwind_metrics(o, s);
}

static void agent_metrics(struct out *o, const struct agentlink_stats *a)
{
	gauge(o, "jprofd_agents", "JVM agents connected now.", a->connected);
	counter(o, "jprofd_agents_accepted_total", "JVM agent connections accepted.", a->accepted);
	counter(o, "jprofd_agents_rejected_total", "JVM agent connections rejected.", a->rejected);
	counter(o, "jprofd_agent_fds_passed_total", "Perf fds passed to JVM agents.", a->fds_passed);
	counter(o, "jprofd_agent_fds_denied_total", "Perf fd requests of JVM agents denied.", a->fds_denied);
	counter(o, "jprofd_agent_protocol_errors_total", "JVM agents dropped for protocol errors.",
		a->protocol_errors);
	counter(o, "jprofd_agent_identity_lost_total",
		"JVM agent connections closed because the process that connected had exited.",
		a->identity_lost);
}

static void hostview_metrics(struct out *o, const struct hostview_stats *h)
{
	counter(o, "jprofd_hostview_samples_total", "Samples added to the host view windows.", h->samples);
	gauge(o, "jprofd_hostview_buckets", "Host view time buckets retained.", h->buckets);
	gauge(o, "jprofd_hostview_bytes", "Approximate memory of the retained host view buckets.", h->bytes);
	family(o, "jprofd_hostview_evictions_total", "counter", "Host view buckets dropped, by reason.");
	put(o, "jprofd_hostview_evictions_total{reason=\"age\"} %llu\n", (unsigned long long)h->evicted_age);
	put(o, "jprofd_hostview_evictions_total{reason=\"memory\"} %llu\n",
	    (unsigned long long)h->evicted_memory);
	family(o, "jprofd_hostview_retained_seconds", "gauge", "Time span the host view holds.");
	put(o, "jprofd_hostview_retained_seconds %.3f\n",
	    h->newest_ns > h->oldest_ns ? (double)(h->newest_ns - h->oldest_ns) / 1e9 : 0.0);
}

static void symbols_metrics(struct out *o, const struct symbols_stats *s)
{
	counter(o, "jprofd_symbols_cache_hits_total", "ELF symbol table lookups served from the cache.",
		s->elf_cache_hits);
	counter(o, "jprofd_symbols_cache_misses_total", "ELF symbol table lookups that loaded a file.",
		s->elf_cache_misses);
	counter(o, "jprofd_symbols_elf_errors_total", "ELF files that could not be read.", s->elf_errors);
	counter(o, "jprofd_symbols_maps_reads_total", "/proc/PID/maps files parsed.", s->maps_reads);
	counter(o, "jprofd_symbols_debuginfod_loaded_total",
		"Stripped binaries named from a debuginfod server's debug file.", s->debuginfod_loaded);
	counter(o, "jprofd_symbols_debuginfod_requests_total",
		"Debug files asked of the debuginfod servers.", s->debuginfod_requested);
	counter(o, "jprofd_symbols_debuginfod_failed_total",
		"debuginfod lookups that found no debug file (or timed out).", s->debuginfod_failed);
	counter(o, "jprofd_symbols_debuginfod_refused_total",
		"debuginfod lookups refused for now: the asking uid's budget was spent.",
		s->debuginfod_refused);
	counter(o, "jprofd_symbols_untrusted_fs_total",
		"Mappings of files on FUSE, left unread (module+offset names).", s->untrusted_fs);
	counter(o, "jprofd_symbols_over_budget_total",
		"ELF symbol tables not read: past symbols_max_memory or the uid's share of it "
		"(module+offset names).", s->over_budget);
	counter(o, "jprofd_symbols_evicted_total",
		"Unused ELF symbol tables dropped to make room under symbols_max_memory.", s->evicted);
	counter(o, "jprofd_symbols_deferred_loads_total",
		"ELF symbol tables too big for the event loop, read on the worker thread.",
		s->deferred_loads);
	counter(o, "jprofd_symbols_deferred_dropped_total",
		"ELF symbol tables not read: the worker's queue was full (module+offset names).",
		s->deferred_dropped);
	gauge(o, "jprofd_symbols_memory_bytes", "Bytes held by cached ELF symbol tables.",
	      s->mem_bytes);
	counter(o, "jprofd_lines_resolved_total", "User addresses given a source file and line.",
		s->lines_resolved);
	counter(o, "jprofd_lines_unresolved_total",
		"User addresses without a line (no DWARF there, or the file unreadable).",
		s->lines_unresolved);
	counter(o, "jprofd_lines_timeouts_total",
		"Addresses a pprof rendering stopped waiting for (its 2 s budget).",
		s->lines_timeouts);
	counter(o, "jprofd_lines_files_failed_total",
		"Files whose debug info was not read (none, corrupt, or beyond lines_max_memory).",
		s->lines_files_failed);
	gauge(o, "jprofd_lines_memory_bytes", "Debug sections held for source lines.",
	      s->lines_mem_bytes);
	gauge(o, "jprofd_symbols_cached_elfs", "ELF symbol tables cached.", s->cached_elfs);
	gauge(o, "jprofd_symbols_cached_pids", "Processes whose maps are cached.", s->cached_pids);
}

static void http_metrics(struct out *o, const struct metrics_http *h)
{
	counter(o, "jprofd_http_requests_total", "HTTP requests answered.", h->requests);
	counter(o, "jprofd_http_unauthorized_total",
		"HTTP requests refused for missing authorization (401 or 403).", h->unauthorized);
	counter(o, "jprofd_http_profiles_rejected_total",
		"Profile requests refused because too many were waiting.", h->rejected_busy);
	counter(o, "jprofd_http_profiles_shared_total",
		"Profile requests that joined the window of an identical one.", h->profiles_shared);
	counter(o, "jprofd_http_profiles_cancelled_total",
		"Profile requests dropped because their client hung up.", h->profiles_cancelled);
	gauge(o, "jprofd_http_profiles_in_flight", "Profile requests waiting for their duration to pass.",
	      h->profiles_in_flight);
	gauge(o, "jprofd_http_profile_windows", "Distinct profile windows (host view taps) open.",
	      h->profile_windows);
}

static void gate_metrics(struct out *o, const struct session_gate_stats *g)
{
	family(o, "jprofd_record_gate_opened_total", "counter",
	       "Start gates of record --pid opened: the process was ready, or the deadline passed.");
	put(o, "jprofd_record_gate_opened_total{reason=\"ready\"} %llu\n",
	    (unsigned long long)g->opened_ready);
	put(o, "jprofd_record_gate_opened_total{reason=\"deadline\"} %llu\n",
	    (unsigned long long)g->opened_deadline);
	fcounter(o, "jprofd_record_gate_wait_seconds_total",
		 "Time recordings waited at their start gate, from the request to the opening.",
		 (double)g->wait_ms_total / 1e3);
}

static void self_metrics(struct out *o, const struct metrics_self *s)
{
	family(o, "jprofd_process_cpu_seconds_total", "counter", "CPU time used by the daemon, by mode.");
	put(o, "jprofd_process_cpu_seconds_total{mode=\"user\"} %.6f\n", s->cpu_user_s);
	put(o, "jprofd_process_cpu_seconds_total{mode=\"system\"} %.6f\n", s->cpu_system_s);
	gauge(o, "jprofd_process_resident_memory_bytes", "Resident memory of the daemon.", s->rss_bytes);
	gauge(o, "jprofd_process_virtual_memory_bytes", "Virtual memory of the daemon.", s->virtual_bytes);
	gauge(o, "jprofd_process_open_fds", "File descriptors the daemon has open.", s->open_fds);
	family(o, "jprofd_process_start_time_seconds", "gauge", "Start of the daemon, Unix time.");
	put(o, "jprofd_process_start_time_seconds %.3f\n", s->start_time_s);
}

int metrics_render(const struct metrics_input *in, struct buf *out)
{
	struct out o = { .b = out };

	family(&o, "jprofd_build_info", "gauge", "Version of the running daemon (always 1).");
	put(&o, "jprofd_build_info{version=\"%s\"} 1\n", in->version ? in->version : "unknown");
	if (in->sampler)
		sampler_metrics(&o, in->sampler);
	gauge(&o, "jprofd_sessions", "Recordings running now.", in->sessions);
	if (in->gate)
		gate_metrics(&o, in->gate);
	gauge(&o, "jprofd_clients", "Control socket connections now.", in->clients);
	if (in->agents)
		agent_metrics(&o, in->agents);
	if (in->hostview)
		hostview_metrics(&o, in->hostview);
	if (in->symbols)
		symbols_metrics(&o, in->symbols);
	if (in->http)
		http_metrics(&o, in->http);
	if (in->self)
		self_metrics(&o, in->self);
	return o.err;
}

int metrics_read_self(struct metrics_self *out)
{
	unsigned long long size, resident;
	struct rusage ru;
	struct dirent *de;
	long page = sysconf(_SC_PAGESIZE);
	double start = out->start_time_s;
	int r = 0;
	FILE *f;
	DIR *d;

	memset(out, 0, sizeof(*out));
	out->start_time_s = start;
	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		out->cpu_user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
		out->cpu_system_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	} else {
		r = -errno;
	}
	f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%llu %llu", &size, &resident) == 2 && page > 0) {
			out->virtual_bytes = size * (uint64_t)page;
			out->rss_bytes = resident * (uint64_t)page;
		} else {
			r = -EIO;
		}
		fclose(f);
	} else {
		r = -errno;
	}
	d = opendir("/proc/self/fd");
	if (d) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				out->open_fds++;
		out->open_fds--;  /* the directory's own fd */
		closedir(d);
	} else {
		r = -errno;
	}
	return r;
}
