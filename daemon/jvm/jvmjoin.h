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

/* Heap bytes shared by the joins of one uid's recordings (a refcounted
 * counter with a limit): one uid's recordings together stay under it. */
struct jvm_budget;

struct jvm_join_opts {
	uint64_t interval_ns;      /* match window: the larger of it and late_ns */
	uint64_t name_wait_ns;     /* how long a sample waits for names; default 2 s */
	uint64_t late_ns;          /* how long a BPF record waits for its agent record; default 50 ms */
	bool lines;                /* Class.method:line */
	bool signatures;           /* Class.method(sig) */
	/* Each Java frame's line (when its method has a table, with or without
	 * lines) and bytecode index: Class.method[(sig)][:line][@bci] (JFR). */
	bool positions;
	size_t max_pending;        /* records held in all queues; default 1,000,000 */
	/* Bounds against a hostile agent (the ring is written by the profiled
	 * process): */
	uint64_t start_ns;         /* agent records stamped before this are refused; 0: none */
	uint64_t future_ns;        /* ... and those after now + future_ns; default 1 s */
	size_t max_bytes;          /* heap bytes of this join; default 64 MiB */
	size_t max_methods;        /* method ids tracked; default 131072 */
	size_t max_tids;           /* thread queues; default 65536 */
	struct jvm_budget *budget; /* the uid's, or NULL; the join holds a reference */
	/* A wall-clock recording: CPU samples end in "[running]" (wall records
	 * bring their own state, jvm_join_add_wall). */
	bool running_leaf;
};

#define JVM_EVENT_VALUES 4

struct jvm_frame {
	uint64_t method_id;
	int32_t bci;
	uint8_t type;                  /* enum jpring_frame_type, checked */
};

/* One sample ready for the store. Java frames are root first; user and kernel
 * stacks leaf first as the sampler gives them (the caller cuts the user stack
 * where JIT code begins when there are Java frames). */
struct jvm_sample {
	uint32_t tid;
	uint64_t time_ns;              /* when BPF took the sample (CLOCK_MONOTONIC) */
	const struct jvm_frame *java;  /* root first */
	unsigned njava;
	const char *marker;            /* NULL, or e.g. "[gc_active]" for the Java part, or
					  the stepped-over leaf below the Java frames:
					  "[unknown_java_leaf]", "[vtable stub]"... */
	bool java_context;             /* the thread was in Java (cut native at JIT code) */
	const uint64_t *uips;
	unsigned nu;
	const uint64_t *kips;
	unsigned nk;
	bool kernel_mode;
	bool ustack_lost, kstack_lost;
	bool host_feed;                /* stands for its thread in the host view */
	/* An agent event sample (jvm_join_add_event): its event (> 0), values
	 * and the class frame below the Java frames. event 0: a CPU sample. */
	int event;
	const uint64_t *values;
	const char *leaf;
	/* The thread's state as the last frame (wall-clock recordings), or NULL. */
	const char *state;
};

struct jvm_join_stats {
	uint64_t bpf_records, agent_records;
	uint64_t joined;            /* BPF records with their agent record */
	uint64_t bpf_unmatched;     /* counted without Java frames */
	uint64_t agent_unmatched;   /* agent records with no BPF record (not counted) */
	uint64_t dropped;           /* records refused because max_pending was reached */
	uint64_t methods_named, methods_unknown, names_timed_out;
	/* What the bounds refused (see jvm_join_opts): */
	uint64_t agent_future;      /* agent records stamped after now + future_ns */
	uint64_t agent_before_start;/* agent records stamped before start_ns */
	uint64_t over_bytes;        /* records, names or held samples refused at max_bytes */
	uint64_t over_budget;       /* ... at the uid's budget */
	uint64_t over_tids;         /* records of threads past max_tids */
	uint64_t frames_over_methods; /* Java frames past max_methods: "[java_method_limit]" */
	size_t methods;             /* method ids tracked */
	size_t bytes, bytes_peak;   /* heap bytes of this join, now and at most */
};

typedef void (*jvm_emit_fn)(const struct jvm_sample *s, void *arg);

struct jvm_join *jvm_join_new(const struct jvm_join_opts *opts);
void jvm_join_free(struct jvm_join *j);

/* A budget of limit bytes, one reference; NULL on ENOMEM. */
struct jvm_budget *jvm_budget_new(size_t limit);
void jvm_budget_unref(struct jvm_budget *b);
/* The budget j charges (borrowed), or NULL. */
struct jvm_budget *jvm_join_budget(const struct jvm_join *j);
/* Bytes charged now, at most so far, and the limit. */
void jvm_budget_get(const struct jvm_budget *b, size_t *used, size_t *peak, size_t *limit);

/* Agent threads are named in the agent's pid namespace; map them. */
void jvm_join_map_tid(struct jvm_join *j, uint32_t ns_tid, uint32_t host_tid);

/* BPF record (copies the stacks). */
void jvm_join_add_bpf(struct jvm_join *j, uint32_t tid, uint64_t time_ns, const uint64_t *kips,
		      unsigned nk, const uint64_t *uips, unsigned nu, bool kernel_mode,
		      bool kstack_lost, bool ustack_lost, bool host_feed);
/* Agent record (copies the frames); tid in the agent's namespace. Refused
 * when its time is implausible: before start_ns, or after now_ns +
 * future_ns (CLOCK_MONOTONIC, the agent's clock too). Adding or taking a
 * record costs O(log n) whatever order the times come in. */
void jvm_join_add_agent(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
			int32_t num_frames, const struct jpring_frame *frames);

/* A sample of an agent event (alloc, lock): no BPF record to join; it waits
 * only for the names of its frames (leaf first, as the agent sends them).
 * event > 0 and values (nvalues <= JVM_EVENT_VALUES) are the caller's; cls is
 * the class signature in JVM form, the leaf frame. Times are checked as
 * for agent records. */
void jvm_join_add_event(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
			int event, const uint64_t *values, unsigned nvalues, const char *cls,
			size_t cls_len, const struct jpring_frame *frames, unsigned nframes);

/* A wall record (the agent's signal to a blocked thread): like an event
 * sample, no BPF record to join, Java frames (leaf first, or an ASGCT error
 * in num_frames) then the thread's state (an enum jpring_state, checked) as
 * the last frame. values as for jvm_join_add_event. */
void jvm_join_add_wall(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
		       int event, const uint64_t *values, unsigned nvalues, uint16_t state,
		       int32_t num_frames, const struct jpring_frame *frames);

/* True if the agent named host_tid as one of its Java threads. */
bool jvm_join_has_thread(const struct jvm_join *j, uint32_t host_tid);

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
/* jvm_join_run in slices: takes at most max records, then returns true if
 * records remain (call again, with the same or a later horizon and the
 * same final); false when it got through. The daemon joins in slices so
 * that a flood of records never holds its loop for long. */
bool jvm_join_run_some(struct jvm_join *j, uint64_t horizon_ns, uint64_t now_ns, bool final,
		       size_t max, jvm_emit_fn emit, void *arg);
/* Emits every held sample, unnamed frames as "[unknown_java_method]". */
void jvm_join_flush(struct jvm_join *j, jvm_emit_fn emit, void *arg);

/* Method ids seen in held samples that were never asked for; marks them
 * asked. Returns how many were written to ids (<= max). */
unsigned jvm_join_wanted(struct jvm_join *j, uint64_t *ids, unsigned max);
/* Samples still waiting for names. */
size_t jvm_join_held(const struct jvm_join *j);
/* Method ids asked for (handed out by jvm_join_wanted or waiting there)
 * and not answered yet: at 0, no held sample waits for a name. */
size_t jvm_join_unanswered(const struct jvm_join *j);
/* True once: the first call after a bound (see the stats) refused something. */
bool jvm_join_limit_news(struct jvm_join *j);

/* Frame name per the options: "java.util.HashMap.get", with ":123" or the
 * signature when asked; "[unknown_java_method]" when the agent could not name
 * it, "[java_method_limit]" when the id was past max_methods (or the byte
 * bounds). Returns the length written (truncated to len - 1). */
size_t jvm_join_frame_name(const struct jvm_join *j, const struct jvm_frame *f, char *buf,
			   size_t len);

/* The Java name of host_tid (from the agent, unchecked text of len bytes;
 * the caller checked the tid is the agent's). Kept as printable UTF-8, at
 * most max_tids names; a later name of the same tid replaces the earlier
 * one. 0 or -errno (-ENOBUFS/-EDQUOT past the byte bounds, -E2BIG past
 * max_tids). */
int jvm_join_thread_name(struct jvm_join *j, uint32_t host_tid, const char *name, size_t len);
/* The Java id (java.lang.Thread's, not 0) of a thread already named:
 * 0, or -ENOENT (not named), -EINVAL. */
int jvm_join_thread_java_id(struct jvm_join *j, uint32_t host_tid, uint64_t java_id);
/* That id, or 0 if not known. */
uint64_t jvm_join_thread_java_id_of(const struct jvm_join *j, uint32_t host_tid);
/* Calls fn for every thread name kept. */
void jvm_join_each_thread_name(const struct jvm_join *j,
			       void (*fn)(uint32_t host_tid, const char *name, void *arg), void *arg);

/* Marker name for an AsyncGetCallTrace error code, or NULL for codes that
 * need none (not a Java thread). */
const char *jvm_join_error_marker(int32_t code);
/* The marker of a stepped-over leaf of stub kind (enum jpring_stub_kind,
 * as the agent wrote it: untrusted); "[unknown_java_leaf]" for 0 and for
 * anything unknown. */
const char *jvm_join_stub_marker(uint64_t kind);

void jvm_join_get_stats(const struct jvm_join *j, struct jvm_join_stats *out);

#endif
