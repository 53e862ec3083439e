/* Joining a JVM's two sample streams. For every sample of a recorded JVM
 * thread, BPF writes a record (kernel and user stack, time) and then the
 * agent's signal handler writes one (Java frames from AsyncGetCallTrace,
 * time). Per tid, in time order, each agent record is joined with the latest
 * unmatched BPF record at or before it and within one interval. BPF records
 * are the samples: one that finds no agent record still counts (its Java part
 * is a marker), an agent record that finds no BPF record is only counted.
 *
 * Java frames are method ids until the agent names them; joined samples whose
 * ids are not named yet are held (bounded in time) so every frame of the
 * profile has its real name. */
#ifndef JPROF_JVMJOIN_H
#define JPROF_JVMJOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jprof_agent.h"

struct jvm_join;

struct jvm_join_opts {
	uint64_t interval_ns;      /* match window */
	uint64_t name_wait_ns;     /* how long a sample waits for names; default 2 s */
	uint64_t late_ns;          /* how long a BPF record waits for its agent record; default 50 ms */
	bool lines;                /* Class.method:line */
	bool signatures;           /* Class.method(sig) */
	size_t max_pending;        /* records held in all queues; default 1,000,000 */
};

struct jvm_frame {
	uint64_t method_id;
	int32_t bci;
};

/* One sample ready for the store. Java frames are root first; user and kernel
 * stacks leaf first as the sampler gives them (the caller cuts the user stack
 * where JIT code begins when there are Java frames). */
struct jvm_sample {
	uint32_t tid;
	uint64_t time_ns;              /* when BPF took the sample (CLOCK_MONOTONIC) */
	const struct jvm_frame *java;  /* root first */
	unsigned njava;
	const char *marker;            /* NULL, or e.g. "[gc_active]" for the Java part */
	bool java_context;             /* the thread was in Java (cut native at JIT code) */
	const uint64_t *uips;
	unsigned nu;
	const uint64_t *kips;
	unsigned nk;
	bool kernel_mode;
	bool ustack_lost, kstack_lost;
	bool host_feed;                /* stands for its thread in the host view */
};

struct jvm_join_stats {
	uint64_t bpf_records, agent_records;
	uint64_t joined;            /* BPF records with their agent record */
	uint64_t bpf_unmatched;     /* counted without Java frames */
	uint64_t agent_unmatched;   /* agent records with no BPF record (not counted) */
	uint64_t dropped;           /* records refused because max_pending was reached */
	uint64_t methods_named, methods_unknown, names_timed_out;
};

typedef void (*jvm_emit_fn)(const struct jvm_sample *s, void *arg);

struct jvm_join *jvm_join_new(const struct jvm_join_opts *opts);
void jvm_join_free(struct jvm_join *j);

/* Agent threads are named in the agent's pid namespace; map them. */
void jvm_join_map_tid(struct jvm_join *j, uint32_t ns_tid, uint32_t host_tid);

/* BPF record (copies the stacks). */
void jvm_join_add_bpf(struct jvm_join *j, uint32_t tid, uint64_t time_ns, const uint64_t *kips,
		      unsigned nk, const uint64_t *uips, unsigned nu, bool kernel_mode,
		      bool kstack_lost, bool ustack_lost, bool host_feed);
/* Agent record (copies the frames); tid in the agent's namespace. */
void jvm_join_add_agent(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, int32_t num_frames,
			const struct jpring_frame *frames);

/* A name from the agent (or the news that it has none). */
void jvm_join_method(struct jvm_join *j, uint64_t id, const char *cls, size_t cls_len,
		     const char *name, size_t name_len, const char *sig, size_t sig_len,
		     const struct jpag_line *lines, unsigned nlines, bool unknown);

/* Joins what can be joined. Agent records up to horizon_ns are taken (all of
 * them when final); BPF records older than horizon - late_ns with no agent
 * record count as unmatched (all remaining ones when final). Samples whose
 * names are known, or waited longer than name_wait_ns, are emitted; the rest
 * stay held. now_ns: CLOCK_MONOTONIC. */
void jvm_join_run(struct jvm_join *j, uint64_t horizon_ns, uint64_t now_ns, bool final,
		  jvm_emit_fn emit, void *arg);
/* Emits every held sample, unnamed frames as "[unknown_java_method]". */
void jvm_join_flush(struct jvm_join *j, jvm_emit_fn emit, void *arg);

/* Method ids seen in held samples that were never asked for; marks them
 * asked. Returns how many were written to ids (<= max). */
unsigned jvm_join_wanted(struct jvm_join *j, uint64_t *ids, unsigned max);
/* Samples still waiting for names. */
size_t jvm_join_held(const struct jvm_join *j);

/* Frame name per the options: "java.util.HashMap.get", with ":123" or the
 * signature when asked; "[unknown_java_method]" when the agent could not name
 * it. Returns the length written (truncated to len - 1). */
size_t jvm_join_frame_name(const struct jvm_join *j, const struct jvm_frame *f, char *buf,
			   size_t len);

/* Marker name for an AsyncGetCallTrace error code, or NULL for codes that
 * need none (not a Java thread). */
const char *jvm_join_error_marker(int32_t code);

void jvm_join_get_stats(const struct jvm_join *j, struct jvm_join_stats *out);

#endif
