/* Layer pipeline (daemon/pipeline/): raw sample -> stack builder -> built
 * sample -> consumers. Uses symbols, collect, jvm, profile.
 *
 * The sample pipeline: collectors → raw samples → the stack builder (and,
 * for JVMs, the join with the agent's Java frames) → built samples →
 * consumers. Every consumer (a recording's store, the host view and its HTTP
 * taps) subscribes here and receives the same built samples; none of them
 * sees a kernel address (user frames in files carry theirs, struct
 * frame_loc, for pprof).
 *
 * Routing is by source id (the bpf_cookie of the collector's events): a
 * source is a recording; source 0 is the host view. A sample flagged
 * host_feed (a recorded thread, skipped by the host events) goes to its
 * source's consumer and to the host consumer, so each thread is counted in
 * the host view exactly once.
 *
 * The pipeline also owns the drain tick: every drain_ms it drains the
 * collectors, then runs the tick hooks (JVM join steps, rescans, progress,
 * host view rotation) and trims the symbol and process caches. */
#ifndef JPROF_PIPELINE_H
#define JPROF_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "rawsample.h"
#include "sample.h"

struct jvm_join;
struct loop;
struct pipeline;
struct pipeline_source;
struct sampler;
struct symbols;

struct pipeline_consumer {
	void (*sample)(const struct built_sample *bs, void *arg);
	void *arg;
};

struct pipeline_config {
	uint64_t drain_ms;         /* default 1000 */
};

int pipeline_new(struct loop *loop, struct symbols *sym, const struct pipeline_config *cfg,
		 struct pipeline **out);
void pipeline_free(struct pipeline *p);

/* The collector; starts the drain timer. */
int pipeline_set_sampler(struct pipeline *p, struct sampler *s);
/* The sampler's sample callback (arg: the pipeline). */
void pipeline_on_sample(const struct raw_sample *rs, void *arg);

/* Host-view samples (source 0, and host_feed samples of any source). */
void pipeline_set_host(struct pipeline *p, const struct pipeline_consumer *c);

/* Runs fn(arg, now_ns) after every drain, in the order added; at most 8. */
int pipeline_add_tick(struct pipeline *p, void (*fn)(void *arg, uint64_t now_ns), void *arg);

/* Drains the collectors now (end of a recording); ticks do not run. */
void pipeline_drain(struct pipeline *p);

struct pipeline_source_config {
	bool process_root;         /* the process name as root frame (whole-host recordings) */
	bool thread_state;         /* the thread's state as leaf frame (wall-clock recordings) */
	bool per_sample;           /* its events send a record per sample (JP_COOKIE_RECORD):
				    * built one by one, each with its time */
	struct pipeline_consumer consumer;
};

/* A new source with a fresh id (never 0). */
int pipeline_source_open(struct pipeline *p, const struct pipeline_source_config *cfg,
			 struct pipeline_source **out);
/* Samples of the source are dropped from now on; NULL-safe. */
void pipeline_source_close(struct pipeline_source *src);
uint32_t pipeline_source_id(const struct pipeline_source *src);

/* An agent is on its way (attaching) or bound: until the agent arms a
 * thread's event, that thread's samples through JIT code lack their Java
 * frames and get a marker where the user stack is cut. */
void pipeline_source_expect_java(struct pipeline_source *src, bool on);

/* JVM recording of pid: the source's per-sample records go into the join
 * (borrowed; NULL detaches), each weighted as one sample of period_ns. */
void pipeline_source_set_join(struct pipeline_source *src, struct jvm_join *j, uint32_t pid,
			      uint64_t period_ns);
/* Runs the join (see jvm_join_run) and delivers what it emits. */
void pipeline_source_join_run(struct pipeline_source *src, uint64_t horizon_ns, bool final);
/* A slice of it (see jvm_join_run_some): true when more remains. */
bool pipeline_source_join_run_some(struct pipeline_source *src, uint64_t horizon_ns, bool final,
				   size_t max);
/* Delivers every sample still held by the join (names or not). */
void pipeline_source_join_flush(struct pipeline_source *src);

/* The procinfo cache shared by every consumer (labels for queries, tests). */
struct procinfo *pipeline_procinfo(struct pipeline *p);

#endif
