/* The always-on host profile: a consumer of the pipeline's host-view
 * samples (the per-CPU host events, and per-thread recording samples that
 * stand in for threads the host events skip), kept in rolling time buckets
 * under a memory cap. A query merges the buckets of a time range that match
 * a filter into a store that any exporter renders.
 *
 * A process is (pid, start time), as samples carry it: a bucket holds one
 * process per pid, and a process that takes a pid another one already has
 * in the current window goes to another bucket of that window, so a query
 * for one process never gets the stacks, names or labels of another that
 * had the same pid. */
#ifndef JPROF_HOSTVIEW_H
#define JPROF_HOSTVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"

struct built_sample;
struct store;
struct hostview;

struct hostview_config {
	unsigned bucket_s;         /* default 10 */
	unsigned retention_s;      /* default 600 */
	size_t max_bytes;          /* memory cap for all buckets; default 64 MiB */
	/* CLOCK_MONOTONIC before the first sample can be taken (the sampler's
	 * start), where the first drain's samples begin; 0 = unknown (the first
	 * window's start is assumed). */
	uint64_t start_ns;
	/* Windows of the newest 10 buckets: 0 = a tenth of a bucket of 20 s
	 * or more (a multiple of 10 s), else 1 s; compacted into buckets as
	 * they age. bucket_s: one tier (tests of the window mechanics). */
	unsigned fine_s;
};

/* Any member left 0 / NULL matches everything. */
struct hostview_filter {
	pid_t pid;
	/* With pid: only the process that started then (as built_sample.start_ns,
	 * e.g. proc_read_start_boottime() of the pid now), not earlier ones that
	 * had the same pid; 0 = every process that had pid. */
	uint64_t start_ns;
	const char *comm;          /* process name, exact */
	const char *unit;          /* systemd unit, exact ("nginx.service") */
	const char *cgroup;        /* cgroup path prefix ("/system.slice/...") or container id */
};

struct hostview_stats {
	uint64_t samples;          /* added since start */
	uint64_t buckets;          /* retained now */
	uint64_t bytes;            /* approx. memory of retained buckets */
	uint64_t evicted_age;      /* buckets dropped for retention */
	uint64_t evicted_memory;   /* buckets dropped for the memory cap */
	uint64_t reuse_buckets;    /* extra buckets of a window: a pid held by two processes in it */
	uint64_t compacted;        /* fine windows merged into coarse ones */
	uint64_t oldest_ns, newest_ns;  /* CLOCK_MONOTONIC span retained */
};

int hostview_new(const struct hostview_config *cfg, struct hostview **out);
void hostview_free(struct hostview *hv);
/* A built host-view sample (the pipeline's host consumer); goes into the
 * bucket of now_ns and into every open tap whose filter it matches. */
void hostview_add(struct hostview *hv, const struct built_sample *bs, uint64_t now_ns);
/* The same as a pipeline consumer (now = CLOCK_MONOTONIC) and tick hook. */
void hostview_consume(const struct built_sample *bs, void *hv);
void hostview_on_tick(void *hv, uint64_t now_ns);
/* Rotates buckets and evicts by age and memory; call about once a second. */
void hostview_tick(struct hostview *hv, uint64_t now_ns);

/* Merges the buckets overlapping [from_ns, to_ns] (CLOCK_MONOTONIC) whose
 * samples match filter into a new store (caller frees). *span_from and
 * *span_to get the time the merged samples were taken in: from the drain
 * before the oldest merged bucket's first sample to the newest one's last
 * drain (now, for the open window). Whole buckets are merged, so this span
 * may be wider than the one asked for; it is what a profile's duration must
 * say. -ENOENT when nothing is retained there. */
int hostview_query(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
		   const struct hostview_filter *filter, struct store **out,
		   uint64_t *span_from, uint64_t *span_to);

/* Group frames a query may add at the root of every stack: the process
 * name, "[comm pid=N]", "[thread tid=N]", the unit ("[no unit]") or the
 * cgroup path ("[no cgroup]"). */
enum hostview_group {
	HOSTVIEW_GROUP_NONE = 0,
	HOSTVIEW_GROUP_COMM,
	HOSTVIEW_GROUP_PID,
	HOSTVIEW_GROUP_THREAD,
	HOSTVIEW_GROUP_UNIT,
	HOSTVIEW_GROUP_CGROUP,
	HOSTVIEW_GROUP_COUNT
};

/* "none", "comm", "pid", "thread", "unit", "cgroup". */
const char *hostview_group_name(enum hostview_group g);
int hostview_group_parse(const char *name);  /* -EINVAL if unknown */

/* hostview_query with a group frame at the root of every stack. addrs: user
 * frames stay per sampled address (store_limits.max_addrs, as the buckets
 * keep them) for pprof's locations; false merges them by function. */
int hostview_query_grouped(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
			   const struct hostview_filter *filter, enum hostview_group group,
			   bool addrs, struct store **out, uint64_t *span_from, uint64_t *span_to);

/* The effective configuration (defaults filled in, max_bytes at least 1 MiB). */
void hostview_get_config(const struct hostview *hv, struct hostview_config *out);

/* A tap collects every host-view sample added while it is open and matching
 * filter into its own store: an exact time window, as the pprof scrape
 * contract wants (buckets would merge whole 10 s windows, and consecutive
 * scrapes would share samples that scrapers then add up twice). A sample
 * goes to the taps open when it is drained. The filter's strings are copied;
 * the tap's store is bounded like any store (a "[truncated]" stack beyond). */
struct hostview_tap;
int hostview_tap_open(struct hostview *hv, const struct hostview_filter *filter,
		      struct hostview_tap **out);
/* The time the tap's samples were taken in so far: from the last drain
 * before it opened (0 = none yet: since the sampler started) to the latest
 * drain. */
void hostview_tap_span(const struct hostview_tap *t, uint64_t *from_ns, uint64_t *to_ns);
/* Closes the tap; returns its store (the caller frees it), or NULL. NULL-safe. */
struct store *hostview_tap_close(struct hostview_tap *t);

void hostview_get_stats(const struct hostview *hv, struct hostview_stats *out);

#endif
