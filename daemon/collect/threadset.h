/* The per-thread events of one recorded process: one cpu-clock event per
 * thread under the recording's source, the process watched for new threads
 * (tp_btf/task_newtask), rescans that add missed threads and close the
 * events of exited ones, and the record+signal events handed to a JVM agent.
 * Every thread with an event is "covered": the host events skip it and its
 * samples stand for it in the host view. */
#ifndef JPROF_THREADSET_H
#define JPROF_THREADSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct quota;
struct sampler;
struct threadset;

struct threadset_config {
	uint32_t source;           /* the recording's source id (also its session id in logs) */
	pid_t pid;
	uint64_t period_ns;
	unsigned max_threads;      /* events at most; the rest are counted, not sampled */
	struct quota *quota;       /* each event is charged to uid (QUOTA_PERF_EVENTS); NULL: none */
	uid_t uid;                 /* who asked for the recording */
	uint64_t event_flags;      /* JP_COOKIE_RECORD: a record per sample (times kept), else counts */
	bool gated;                /* events opened stopped until threadset_open_gate */
};

/* Watches pid for new threads, then opens an event for every thread in
 * /proc/PID/task. -ESRCH when the process has no thread left; when no
 * event could be opened, why: -EDQUOT/-EUSERS (the uid's perf-event
 * quota), -EMFILE, ... Past max_threads or the quota the rest of the
 * threads are counted, not sampled. */
int threadset_new(struct sampler *s, const struct threadset_config *cfg, struct threadset **out);
/* Closes every event and stops watching; NULL-safe. */
void threadset_free(struct threadset *ts);

/* A new thread (from the new-thread notification). */
int threadset_add(struct threadset *ts, pid_t tid);
/* Adds threads it missed and closes the events of threads that are gone. */
void threadset_rescan(struct threadset *ts);
/* The record+signal event of host_tid for the agent (opened once, replacing
 * the plain event); *fd is borrowed. 0 when opened now, 1 when the agent
 * already had it, -EMFILE (thread limit), -EDQUOT/-EUSERS (perf-event
 * quota), -errno. */
int threadset_agent_fd(struct threadset *ts, pid_t host_tid, int *fd);

/* A gated set (cfg.gated) starts every event it opened, and opens the
 * later ones started, as an ungated set does. 0, or the first -errno (the
 * other events are started all the same). */
int threadset_open_gate(struct threadset *ts);

size_t threadset_count(const struct threadset *ts);

/* The CPU time its events counted, those of threads gone or replaced
 * included (sampler_events_count_ns): what the samples should add up to. */
uint64_t threadset_cpu_ns(const struct threadset *ts);

#endif
