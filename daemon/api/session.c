#include "session.h"

#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agentlink.h"
#include "attach.h"
#include "hostview.h"
#include "jprof_proto.h"
#include "jring.h"
#include "jvmjoin.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "sampler.h"
#include "store.h"
#include "symbols.h"
#include <linux/types.h>
#include "bpf/sampler.h"

#define MAX_FRAMES (2 * JP_MAX_STACK_DEPTH + 4)
#define JVM_MAX_FRAMES (MAX_FRAMES + JPRING_MAX_FRAMES)
#define JVM_RING_SLOTS 4096            /* 16 MiB: 4096 records between 100 ms reads */
#define JVM_RING_PERIOD_MS 100
#define JVM_ATTACH_TIMEOUT_MS 10000
#define JVM_CONNECT_WAIT_MS 5000       /* from a loaded agent to its connection */
#define JVM_NAME_WAIT_MS 1000          /* at the end, for the last method names */
#define JVM_SIGNAL SIGPROF
#define SYMBOLS_EXPIRE_EVERY 2         /* drains */
#define SYMBOLS_IDLE_S 60

enum java_state {
	JAVA_NONE = 0,       /* not a JVM recording (or java off) */
	JAVA_ATTACHING,      /* loading the agent */
	JAVA_WAIT_AGENT,     /* loaded, waiting for it to connect */
	JAVA_ACTIVE,         /* bound to a connected agent */
	JAVA_FAILED,         /* could not get an agent; native stacks only */
	JAVA_GONE,           /* the agent went away mid-recording */
};

static const char *const java_state_names[] = {
	[JAVA_NONE] = "off", [JAVA_ATTACHING] = "attaching", [JAVA_WAIT_AGENT] = "waiting_for_agent",
	[JAVA_ACTIVE] = "active", [JAVA_FAILED] = "failed", [JAVA_GONE] = "agent_gone",
};

struct tid_slot {
	pid_t tid;                  /* 0 = empty */
	uint32_t epoch;             /* last rescan that saw it */
	struct sampler_events *ev;
	bool agent;                 /* a record+signal event whose fd the agent holds */
};

struct session {
	struct session_mgr *mgr;
	struct session *next;
	uint32_t id;                /* sampler source id */
	struct session_params p;
	struct session_sink sink;
	uint64_t start_mono_ns;
	uint64_t start_unix_ns;
	uint64_t end_mono_ns;       /* set when finished */
	struct loop_source *end_timer;
	struct loop_source *pidfd_src;
	struct sampler_events *cpu_events;
	struct tid_slot *tids;
	size_t tid_cap, ntids;
	uint32_t epoch;
	bool watching;
	bool finishing;
	struct store *store;
	uint64_t samples;
	uint64_t stacks_lost;       /* samples with a stack that could not be read */
	uint64_t threads_over_limit;
	char comm[64];
	/* JVM */
	enum java_state java;
	bool java_finishing;        /* end reached, waiting for the last names */
	const char *final_status;
	char java_code[32];
	char java_msg[512];
	struct attach_req *attach;
	struct agent *agent;
	struct jvm_join *join;
	struct loop_source *ring_timer;
	struct loop_source *java_timer;  /* connect wait, then name wait at the end */
	uint64_t attach_ms;
	uint64_t first_java_ms;     /* 0 until the first sample with Java frames */
	bool ring_corrupt_reported;
	struct jring_stats ring_st; /* last seen */
};

struct session_mgr {
	struct loop *loop;
	struct sampler *sampler;
	struct symbols *symbols;
	struct session_limits lim;
	struct session *sessions;
	size_t count;
	uint32_t next_id;
	struct loop_source *drain_timer;
	struct agentlink *agents;
	const char *agent_path;
	const char *agent_socket;
	uint64_t drains;
	struct hostview *hostview;
	uint64_t host_period_ns;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- per-session thread table (open addressing, rebuilt on removal) ---- */

static struct tid_slot *tid_find(struct session *s, pid_t tid)
{
	if (!s->tid_cap)
		return NULL;
	for (size_t i = 0, h = (size_t)tid * 2654435761u; i < s->tid_cap; i++) {
		struct tid_slot *t = &s->tids[(h + i) & (s->tid_cap - 1)];

		if (t->tid == tid)
			return t;
		if (t->tid == 0)
			return NULL;
	}
	return NULL;
}

static int tid_table_resize(struct session *s, size_t cap)
{
	struct tid_slot *old = s->tids, *n = calloc(cap, sizeof(*n));
	size_t old_cap = s->tid_cap;

	if (!n)
		return -ENOMEM;
	s->tids = n;
	s->tid_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].tid)
			continue;
		for (size_t j = 0, h = (size_t)old[i].tid * 2654435761u;; j++) {
			struct tid_slot *t = &n[(h + j) & (cap - 1)];

			if (!t->tid) {
				*t = old[i];
				break;
			}
		}
	}
	free(old);
	return 0;
}

static int tid_insert(struct session *s, pid_t tid, struct sampler_events *ev)
{
	int r;

	if ((s->ntids + 1) * 2 > s->tid_cap) {
		r = tid_table_resize(s, s->tid_cap ? s->tid_cap * 2 : 64);
		if (r < 0)
			return r;
	}
	for (size_t j = 0, h = (size_t)tid * 2654435761u;; j++) {
		struct tid_slot *t = &s->tids[(h + j) & (s->tid_cap - 1)];

		if (!t->tid) {
			*t = (struct tid_slot){ .tid = tid, .epoch = s->epoch, .ev = ev };
			s->ntids++;
			return 0;
		}
	}
}

static void tid_close(struct session *s, struct tid_slot *t)
{
	sampler_uncover_tid(s->mgr->sampler, (uint32_t)t->tid, s->id);
	sampler_events_close(t->ev);
	t->ev = NULL;
}

/* ---- events ---- */

static uint64_t interval_ns(const struct session *s)
{
	return s->p.interval_us * 1000ull;
}

static int add_thread(struct session *s, pid_t tid)
{
	struct tid_slot *t = tid_find(s, tid);
	struct sampler_events *ev;
	int r;

	if (t) {
		t->epoch = s->epoch;
		return 0;
	}
	if (s->ntids >= s->mgr->lim.max_threads) {
		if (s->threads_over_limit++ == 0)
			log_warn("session %u: pid %d has more than %u threads; the rest are not sampled",
				 s->id, (int)s->p.pid, s->mgr->lim.max_threads);
		return 0;
	}
	r = sampler_thread_event_open(s->mgr->sampler, s->id, tid, interval_ns(s), 0, &ev);
	if (r == -ESRCH || r == -ENOENT)
		return 0;  /* the thread exited meanwhile */
	if (r < 0) {
		log_warn("session %u: cannot open event for pid %d tid %d: %s", s->id, (int)s->p.pid,
			 (int)tid, strerror(-r));
		return r;
	}
	r = tid_insert(s, tid, ev);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	sampler_cover_tid(s->mgr->sampler, (uint32_t)tid, s->id);
	return 0;
}

static int rescan_cb(pid_t tid, void *arg)
{
	add_thread(arg, tid);
	return 0;
}

/* Adds threads we missed and closes events of threads that are gone. */
static void rescan_threads(struct session *s)
{
	size_t live = 0;

	s->epoch++;
	if (proc_foreach_task(s->p.pid, rescan_cb, s) < 0)
		return;  /* process gone: its pidfd reports that */
	for (size_t i = 0; i < s->tid_cap; i++) {
		struct tid_slot *t = &s->tids[i];

		if (!t->tid)
			continue;
		if (t->epoch != s->epoch)
			tid_close(s, t);
		else
			live++;
	}
	if (live != s->ntids) {
		/* Rebuild without the closed entries. */
		struct tid_slot *old = s->tids;
		size_t old_cap = s->tid_cap;

		s->tids = NULL;
		s->tid_cap = 0;
		s->ntids = 0;
		for (size_t i = 0; i < old_cap; i++)
			if (old[i].tid && old[i].ev)
				tid_insert(s, old[i].tid, old[i].ev);
		free(old);
	}
}

static void close_events(struct session *s)
{
	for (size_t i = 0; i < s->tid_cap; i++)
		if (s->tids[i].tid && s->tids[i].ev)
			tid_close(s, &s->tids[i]);
	free(s->tids);
	s->tids = NULL;
	s->tid_cap = s->ntids = 0;
	sampler_events_close(s->cpu_events);
	s->cpu_events = NULL;
	if (s->watching) {
		sampler_unwatch_tgid(s->mgr->sampler, (uint32_t)s->p.pid);
		s->watching = false;
	}
}

/* ---- samples ---- */

static struct session *find_by_source(struct session_mgr *m, uint32_t source)
{
	for (struct session *s = m->sessions; s; s = s->next)
		if (s->id == source)
			return s;
	return NULL;
}

static uint32_t intern(struct session *s, enum frame_kind kind, const char *name, const char *module)
{
	int id = store_frame_intern(s->store, kind, name, module);

	return id < 0 ? store_truncated_frame(s->store) : (uint32_t)id;
}

static void name_thread(struct session *s, uint32_t pid, uint32_t tid)
{
	char name[64];

	if (!store_process_name(s->store, pid)) {
		if (proc_read_comm((pid_t)pid, 0, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "[exited]");
		store_set_process_name(s->store, pid, name);
	}
	if (!store_thread_name(s->store, pid, tid)) {
		if (proc_read_comm((pid_t)pid, (pid_t)tid, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "[exited]");
		store_set_thread_name(s->store, pid, tid, name);
	}
}

/* Kernel frames root first (the stack map gives them leaf first); every
 * frame but the leaf is a return address, looked up at addr-1. */
static size_t append_kernel(struct session *s, uint32_t *ids, size_t n, const uint64_t *kips,
			    uint32_t nk, bool lost)
{
	struct sym_result r;

	if (lost)
		ids[n++] = intern(s, FRAME_MARKER, "[kernel_stack_lost]", "");
	for (uint32_t i = nk; i-- > 0;) {
		uint64_t addr = i > 0 ? kips[i] - 1 : kips[i];

		if (symbols_resolve_kernel(s->mgr->symbols, addr, &r) < 0)
			continue;
		ids[n++] = intern(s, FRAME_KERNEL, r.name, r.module);
	}
	return n;
}

/* A recorded thread's stack also stands for it in the host view (its
 * events are covered, so the host events skip it). ids: frames in s->store. */
static void feed_hostview(struct session *s, uint32_t pid, uint32_t tid, const uint32_t *ids,
			  size_t n, uint64_t count, uint64_t weight_ns)
{
	enum frame_kind kinds[JVM_MAX_FRAMES];
	const char *names[JVM_MAX_FRAMES], *modules[JVM_MAX_FRAMES];

	if (!s->mgr->hostview || n > JVM_MAX_FRAMES)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct store_frame *f = store_frame_get(s->store, ids[i]);

		kinds[i] = f->kind;
		names[i] = f->name;
		modules[i] = f->module;
	}
	hostview_add_frames(s->mgr->hostview, pid, tid, kinds, names, modules, n, count, weight_ns,
			    clock_ns(CLOCK_MONOTONIC));
}

static void add_sample(struct session *s, const struct sampler_sample *smp)
{
	struct symbols *sym = s->mgr->symbols;
	uint32_t ids[MAX_FRAMES];
	struct sym_result r;
	size_t n = 0;

	name_thread(s, smp->tgid, smp->tid);
	if (s->p.all) {
		/* Whole-host profiles start with the process, as folded tools expect. */
		const char *comm = store_process_name(s->store, smp->tgid);

		ids[n++] = intern(s, FRAME_MARKER, comm ? comm : "[unknown]", "");
	}
	if (smp->ustack_lost)
		ids[n++] = intern(s, FRAME_MARKER, "[user_stack_lost]", "");
	for (uint32_t i = smp->nu; i-- > 0;) {
		/* Every user frame but an interrupted leaf is a return address; in
		 * kernel mode even the leaf points after the syscall instruction. */
		bool ret = i > 0 || smp->kernel_mode;

		if (symbols_resolve_user(sym, (pid_t)smp->tgid, smp->uips[i], ret, &r) < 0)
			continue;
		ids[n++] = intern(s, r.kind, r.name, r.module);
	}
	n = append_kernel(s, ids, n, smp->kips, smp->nk, smp->kstack_lost);
	if (smp->ustack_lost || smp->kstack_lost)
		s->stacks_lost += smp->count;
	s->samples += smp->count;
	store_add(s->store, &(struct store_sample){ .pid = smp->tgid, .tid = smp->tid, .frames = ids,
		.nframes = n, .values = (const uint64_t[]){ smp->count, smp->count * interval_ns(s) } });
	if (smp->host_feed && !s->p.all)
		feed_hostview(s, smp->tgid, smp->tid, ids, n, smp->count, smp->count * interval_ns(s));
}

void session_mgr_on_sample(const struct sampler_sample *smp, void *arg)
{
	struct session_mgr *m = arg;
	struct session *s;

	if (smp->source == JP_SRC_HOST) {
		/* Symbolized now: the process may be gone when someone asks. */
		if (m->hostview)
			hostview_add_sample(m->hostview, smp, smp->count * m->host_period_ns,
					    clock_ns(CLOCK_MONOTONIC));
		return;
	}
	s = find_by_source(m, smp->source);
	if (!s)
		return;
	if (smp->time_ns && s->join)
		jvm_join_add_bpf(s->join, smp->tid, smp->time_ns, smp->kips, smp->nk, smp->uips,
				 smp->nu, smp->kernel_mode, smp->kstack_lost, smp->ustack_lost);
	else if (!smp->time_ns)
		add_sample(s, smp);
}

void session_mgr_on_new_thread(uint32_t tgid, uint32_t tid, void *arg)
{
	struct session_mgr *m = arg;

	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->p.all || s->finishing || (uint32_t)s->p.pid != tgid)
			continue;
		if (tid)
			add_thread(s, (pid_t)tid);
		else
			rescan_threads(s);
	}
}

/* ---- messages ---- */

static void send_obj(struct session *s, struct json_object *o)
{
	size_t len;
	char *line = o ? jprof_json_line(o, &len) : NULL;

	if (line)
		s->sink.send(s->sink.ctx, line, len);
	else
		log_err("session %u: out of memory building a message", s->id);
	free(line);
	json_object_put(o);
}

static void send_error(struct session *s, const char *code, const char *msg)
{
	char *line = jprof_error_line(s->p.req_id, true, code, msg);

	if (line)
		s->sink.send(s->sink.ctx, line, strlen(line));
	free(line);
}

static uint64_t elapsed_ms(const struct session *s)
{
	uint64_t end = s->end_mono_ns ? s->end_mono_ns : clock_ns(CLOCK_MONOTONIC);

	return (end - s->start_mono_ns) / 1000000ull;
}

static void send_progress(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "progress");

	if (!o)
		return;
	json_object_object_add(o, "elapsed_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "samples", json_object_new_int64((int64_t)s->samples));
	json_object_object_add(o, "threads", json_object_new_int64((int64_t)s->ntids));
	send_obj(s, o);
}

static void send_started(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "started");
	struct json_object *t = json_object_new_object();

	if (!o || !t) {
		json_object_put(o);
		json_object_put(t);
		return;
	}
	json_object_object_add(o, "session", json_object_new_int64(s->id));
	json_object_object_add(t, "pid", json_object_new_int64(s->p.all ? 0 : s->p.pid));
	json_object_object_add(t, "comm", s->p.all ? NULL : json_object_new_string(s->comm));
	json_object_object_add(t, "all", json_object_new_boolean(s->p.all));
	json_object_object_add(o, "target", t);
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "interval_us", json_object_new_int64((int64_t)s->p.interval_us));
	send_obj(s, o);
}

static void add_java_summary(struct session *s, struct json_object *sum);

static void send_profile(struct session *s, const char *status)
{
	struct export_meta meta = {
		.pid = s->p.all ? 0 : (uint32_t)s->p.pid,
		.comm = s->p.all ? NULL : s->comm,
		.event = "cpu-clock",
		.start_unix_ns = s->start_unix_ns,
		.duration_ns = elapsed_ms(s) * 1000000ull,
		.period_type = sample_types_cpu[1],
		.period = interval_ns(s),
		.status = status,
	};
	struct export_options opt = { .thread_frames = s->p.thread_frames };
	struct buf out = BUF_INIT;
	struct store_totals tot;
	struct json_object *o, *sum;
	int r;

	r = export_render(s->store, &meta, &opt, s->p.format, &out);
	if (r < 0) {
		log_err("session %u: rendering %s failed: %s", s->id, jprof_format_info(s->p.format)->name,
			strerror(-r));
		send_error(s, JPROF_E_INTERNAL, "rendering the profile failed");
		goto out;
	}
	store_get_totals(s->store, &tot);
	o = jprof_response_new(s->p.req_id, "profile");
	sum = json_object_new_object();
	if (!o || !sum) {
		json_object_put(o);
		json_object_put(sum);
		send_error(s, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	json_object_object_add(o, "status", json_object_new_string(status));
	if (jprof_profile_add_data(o, jprof_format_info(s->p.format)->name,
				   jprof_format_info(s->p.format)->binary, out.data, out.len) < 0) {
		json_object_put(o);
		json_object_put(sum);
		send_error(s, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	json_object_object_add(sum, "samples", json_object_new_int64((int64_t)tot.values[0]));
	json_object_object_add(sum, "weight_ns", json_object_new_int64((int64_t)tot.values[1]));
	json_object_object_add(sum, "stacks", json_object_new_int64((int64_t)tot.stacks));
	json_object_object_add(sum, "truncated", json_object_new_boolean(tot.truncated));
	json_object_object_add(sum, "duration_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(sum, "lost", json_object_new_int64((int64_t)s->stacks_lost));
	json_object_object_add(sum, "threads", json_object_new_int64((int64_t)s->ntids));
	add_java_summary(s, sum);
	json_object_object_add(o, "summary", sum);
	send_obj(s, o);
out:
	buf_release(&out);
}

/* ---- JVM: agent binding, ring, join ---- */

static void complete(struct session *s, const char *status);
static void abort_session(struct session *s, const char *code, const char *msg);

static void send_warning(struct session *s, const char *code, const char *msg)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "warning");

	if (!o)
		return;
	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "message", json_object_new_string(msg));
	send_obj(s, o);
}

/* No Java frames for this recording. With "java":"require" that ends it;
 * otherwise the client is warned and native stacks go on. May free s. */
static void java_fail(struct session *s, enum java_state st, const char *code, const char *msg)
{
	s->java = st;
	snprintf(s->java_code, sizeof(s->java_code), "%s", code);
	snprintf(s->java_msg, sizeof(s->java_msg), "%s", msg);
	log_warn("session %u: pid %d: no Java frames: %s (%s)", s->id, (int)s->p.pid, msg, code);
	if (s->p.java == JPROF_JAVA_REQUIRE && !s->finishing) {
		abort_session(s, strcmp(code, "not_a_jvm") == 0 ? JPROF_E_NOT_A_JVM : JPROF_E_ATTACH_FAILED,
			      msg);
		return;
	}
	send_warning(s, code, msg);
}

static void add_jvm_sample(const struct jvm_sample *js, void *arg)
{
	struct session *s = arg;
	uint32_t ids[JVM_MAX_FRAMES], native[JP_MAX_STACK_DEPTH];
	char name[SYM_NAME_MAX];
	struct sym_result r;
	size_t n = 0, nn = 0;
	uint32_t pid = (uint32_t)s->p.pid;

	name_thread(s, pid, js->tid);
	for (unsigned i = 0; i < js->njava && n < JPRING_MAX_FRAMES; i++) {
		jvm_join_frame_name(s->join, &js->java[i], name, sizeof(name));
		ids[n++] = intern(s, FRAME_JAVA, name, "");
	}
	if (js->marker)
		ids[n++] = intern(s, FRAME_MARKER, js->marker, "");
	if (js->ustack_lost && !js->njava)
		ids[n++] = intern(s, FRAME_MARKER, "[user_stack_lost]", "");
	/* Native frames from the leaf up to the first address in JIT code: from
	 * there on the Java frames tell the story (and frame-pointer walks
	 * through JIT code are not to be trusted). */
	for (unsigned i = 0; i < js->nu && nn < JP_MAX_STACK_DEPTH; i++) {
		bool ret = i > 0 || js->kernel_mode;

		if (symbols_resolve_user(s->mgr->symbols, (pid_t)pid, js->uips[i], ret, &r) < 0)
			continue;
		if (js->java_context && r.kind == FRAME_JIT_UNKNOWN)
			break;
		native[nn++] = intern(s, r.kind, r.name, r.module);
	}
	while (nn > 0)
		ids[n++] = native[--nn];
	n = append_kernel(s, ids, n, js->kips, js->nk, js->kstack_lost);
	if (js->ustack_lost || js->kstack_lost)
		s->stacks_lost++;
	s->samples++;
	store_add(s->store, &(struct store_sample){ .pid = pid, .tid = js->tid, .frames = ids,
		.nframes = n, .values = (const uint64_t[]){ 1, interval_ns(s) } });
	/* Every thread of a recording is covered: the host view gets the
	 * joined stack, Java frames included. */
	feed_hostview(s, pid, js->tid, ids, n, 1, interval_ns(s));
	if (js->njava && js->time_ns > s->start_mono_ns) {
		/* The earliest sample taken, not the first one emitted: samples
		 * waiting for method names come out later than newer ones. */
		uint64_t ms = (js->time_ns - s->start_mono_ns + 999999) / 1000000;

		if (!s->first_java_ms || ms < s->first_java_ms)
			s->first_java_ms = ms;
	}
}

static void ring_record(const struct jring_record *rec, void *arg)
{
	struct session *s = arg;

	jvm_join_add_agent(s->join, rec->tid, rec->time_ns, rec->num_frames, rec->frames);
}

static void read_ring(struct session *s)
{
	struct jring *ring = s->agent ? agent_ring(s->agent) : NULL;

	if (!ring)
		return;
	jring_read(ring, jring_nslots(ring), 10, ring_record, s);
	jring_get_stats(ring, &s->ring_st);
	if ((s->ring_st.corrupt || s->ring_st.header_corrupt) && !s->ring_corrupt_reported) {
		char msg[256];

		s->ring_corrupt_reported = true;
		snprintf(msg, sizeof(msg),
			 "the agent's sample ring of pid %d is corrupt (%llu bad slots%s); bad records are skipped",
			 (int)s->p.pid, (unsigned long long)s->ring_st.corrupt,
			 s->ring_st.header_corrupt ? ", header tampered with" : "");
		log_warn("session %u: %s", s->id, msg);
		send_warning(s, "ring_corrupt", msg);
	}
}

static void request_names(struct session *s)
{
	uint64_t ids[JPAG_RESOLVE_MAX];
	unsigned n;

	while (s->agent && (n = jvm_join_wanted(s->join, ids, JPAG_RESOLVE_MAX)) > 0)
		if (agent_resolve(s->agent, ids, n) < 0)
			break;
}

static void jvm_step(struct session *s, uint64_t horizon)
{
	if (!s->join)
		return;
	read_ring(s);
	jvm_join_run(s->join, horizon, clock_ns(CLOCK_MONOTONIC), false, add_jvm_sample, s);
	request_names(s);
}

static void on_ring_timer(struct loop_source *src, void *arg)
{
	/* Only empties the ring into the join queues; joining waits for the
	 * drain, when the matching BPF records have arrived. */
	read_ring(arg);
}

static int jvm_perf_fd(void *ctx, uint32_t ns_tid, int *fd)
{
	struct session *s = ctx;
	struct sampler_events *ev;
	struct tid_slot *t;
	pid_t host;
	int r;

	if (s->finishing)
		return -ECANCELED;
	/* Only threads of the agent's own process: the recorded pid. */
	r = proc_ns_tid_to_host(s->p.pid, (pid_t)ns_tid, &host);
	if (r < 0) {
		log_audit("denied: the agent of pid %d asked for an event on tid %u, not one of its threads",
			  (int)s->p.pid, ns_tid);
		return -EPERM;
	}
	t = tid_find(s, host);
	if (t && t->agent) {
		*fd = sampler_events_fd(t->ev);
		return 0;
	}
	if (!t && s->ntids >= s->mgr->lim.max_threads)
		return -EMFILE;
	r = sampler_thread_event_open(s->mgr->sampler, s->id, host, interval_ns(s),
				      JP_COOKIE_RECORD | JP_COOKIE_SIGNAL, &ev);
	if (r < 0)
		return r;
	if (t) {
		sampler_events_close(t->ev);
		t->ev = ev;
	} else {
		r = tid_insert(s, host, ev);
		if (r < 0) {
			sampler_events_close(ev);
			return r;
		}
		sampler_cover_tid(s->mgr->sampler, (uint32_t)host, s->id);
		t = tid_find(s, host);
	}
	t->agent = true;
	t->epoch = s->epoch;
	jvm_join_map_tid(s->join, ns_tid, (uint32_t)host);
	log_audit("perf event of pid %d tid %d handed to its agent (session %u)", (int)s->p.pid,
		  (int)host, s->id);
	*fd = sampler_events_fd(ev);
	return 0;
}

static void jvm_method(void *ctx, const struct agentlink_method *m)
{
	struct session *s = ctx;

	jvm_join_method(s->join, m->id, m->cls, m->cls_len, m->name, m->name_len, m->sig,
			m->sig_len, m->lines, m->nlines, m->unknown);
	if (s->java_finishing) {
		jvm_join_run(s->join, UINT64_MAX, clock_ns(CLOCK_MONOTONIC), true, add_jvm_sample, s);
		if (jvm_join_held(s->join) == 0)
			complete(s, s->final_status);
	}
}

static void jvm_gone(void *ctx, const char *why)
{
	struct session *s = ctx;

	s->agent = NULL;
	if (s->java_finishing) {
		complete(s, s->final_status);
		return;
	}
	if (s->java == JAVA_ACTIVE) {
		s->java = JAVA_GONE;
		snprintf(s->java_code, sizeof(s->java_code), "agent_gone");
		snprintf(s->java_msg, sizeof(s->java_msg), "the JVM agent went away: %s", why);
		send_warning(s, s->java_code, s->java_msg);
	}
}

static const struct agentlink_ops jvm_ops = {
	.perf_fd = jvm_perf_fd,
	.method = jvm_method,
	.gone = jvm_gone,
};

static void bind_agent(struct session *s, struct agent *a)
{
	struct jvm_join_opts jo = {
		.interval_ns = interval_ns(s),
		.lines = s->p.java_lines,
		.signatures = s->p.java_signatures,
	};
	char msg[256];
	int r;

	if (!s->join) {
		s->join = jvm_join_new(&jo);
		if (!s->join) {
			java_fail(s, JAVA_FAILED, "internal", "out of memory");
			return;
		}
	}
	r = agent_start(a, interval_ns(s), JVM_SIGNAL, JVM_RING_SLOTS, &jvm_ops, s);
	if (r < 0) {
		snprintf(msg, sizeof(msg), r == -EBUSY ?
			 "another recording of pid %d is using its agent" :
			 "cannot start the agent of pid %d: %s", (int)s->p.pid, strerror(-r));
		java_fail(s, JAVA_FAILED, r == -EBUSY ? "agent_busy" : "internal", msg);
		return;
	}
	/* cpu-clock samples of one thread are an interval of CPU time apart;
	 * half of it leaves room for jitter and none for a shortened period. */
	sampler_set_min_gap(s->mgr->sampler, s->id, interval_ns(s) / 2);
	s->agent = a;
	s->java = JAVA_ACTIVE;
	s->java_code[0] = s->java_msg[0] = '\0';
	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (!s->ring_timer)
		loop_add_timer(s->mgr->loop, JVM_RING_PERIOD_MS, JVM_RING_PERIOD_MS, on_ring_timer, s,
			       &s->ring_timer);
	log_info("session %u: bound to the agent of pid %d (%s) %llu ms after the request", s->id,
		 (int)s->p.pid, agent_jvm(a), (unsigned long long)elapsed_ms(s));
}

void session_mgr_on_agent(struct agent *a, pid_t pid, void *arg)
{
	struct session_mgr *m = arg;

	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->p.all || s->p.pid != pid || s->finishing || s->agent ||
		    s->p.java == JPROF_JAVA_OFF || s->java == JAVA_NONE)
			continue;
		bind_agent(s, a);
		return;
	}
}

static void on_connect_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (s->java == JAVA_WAIT_AGENT)
		java_fail(s, JAVA_FAILED, "agent_silent",
			  "the agent was loaded but did not connect back to jprofd");
}

static void on_attach_done(const struct attach_result *res, void *arg)
{
	struct session *s = arg;
	struct agent *a;

	s->attach = NULL;
	s->attach_ms = elapsed_ms(s);
	if (s->java != JAVA_ATTACHING)
		return;  /* the agent connected first */
	if (res->status < 0) {
		java_fail(s, JAVA_FAILED, res->code[0] ? res->code : "attach_failed",
			  res->message[0] ? res->message : "cannot load the agent");
		return;
	}
	s->java = JAVA_WAIT_AGENT;
	a = agentlink_find(s->mgr->agents, s->p.pid);
	if (a) {
		bind_agent(s, a);
		return;
	}
	loop_add_timer(s->mgr->loop, JVM_CONNECT_WAIT_MS, 0, on_connect_timeout, s, &s->java_timer);
}

/* Decides, before anything starts, whether a JVM recording can go ahead.
 * Returns 0 (s->java set) or -errno with the client's error filled in. */
static int java_check(struct session *s, struct attach_result *res, const char **code,
		      char *msg, size_t len)
{
	struct session_mgr *m = s->mgr;

	res->status = 0;
	if (s->p.all || s->p.java == JPROF_JAVA_OFF || !m->agents)
		return 0;
	if (agentlink_find(m->agents, s->p.pid)) {
		s->java = JAVA_WAIT_AGENT;
		return 0;
	}
	if (attach_probe(s->p.pid, res) == 0) {
		s->java = JAVA_ATTACHING;
		return 0;
	}
	if (s->p.java == JPROF_JAVA_REQUIRE) {
		*code = strcmp(res->code, "not_a_jvm") == 0 ? JPROF_E_NOT_A_JVM : JPROF_E_ATTACH_FAILED;
		snprintf(msg, len, "%s", res->message);
		return -ENOEXEC;
	}
	/* auto: a non-JVM is simply a native recording; a JVM we cannot attach
	 * to is one too, with a warning once started. */
	s->java = strcmp(res->code, "not_a_jvm") == 0 ? JAVA_NONE : JAVA_FAILED;
	snprintf(s->java_code, sizeof(s->java_code), "%s", res->code);
	snprintf(s->java_msg, sizeof(s->java_msg), "%s", res->message);
	return 0;
}

/* After "started", from the loop (so the caller has registered the session
 * first): bind, attach or warn as java_check decided. May free s. */
static void java_begin(struct session *s)
{
	struct session_mgr *m = s->mgr;
	char opts[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	struct agent *a;
	int r;

	switch (s->java) {
	case JAVA_WAIT_AGENT:
		a = agentlink_find(m->agents, s->p.pid);
		if (a)
			bind_agent(s, a);
		break;
	case JAVA_ATTACHING:
		snprintf(opts, sizeof(opts), "socket=%s", m->agent_socket);
		r = attach_start(m->loop, s->p.pid, m->agent_path, opts, JVM_ATTACH_TIMEOUT_MS,
				 on_attach_done, s, &s->attach);
		if (r < 0) {
			char msg[256];

			snprintf(msg, sizeof(msg), "cannot start loading the agent: %s", strerror(-r));
			java_fail(s, JAVA_FAILED, "internal", msg);
		}
		break;
	case JAVA_FAILED: {
		char code[sizeof(s->java_code)], msg[sizeof(s->java_msg)];

		memcpy(code, s->java_code, sizeof(code));
		memcpy(msg, s->java_msg, sizeof(msg));
		java_fail(s, JAVA_FAILED, code, msg);
		break;
	}
	default:
		break;
	}
}

static void on_java_begin(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->java_timer);
	s->java_timer = NULL;
	java_begin(s);
}

static void add_java_summary(struct session *s, struct json_object *sum)
{
	struct json_object *j, *ring;
	struct jvm_join_stats js = { 0 };

	if (s->java == JAVA_NONE)
		return;
	j = json_object_new_object();
	ring = json_object_new_object();
	if (!j || !ring) {
		json_object_put(j);
		json_object_put(ring);
		return;
	}
	if (s->join)
		jvm_join_get_stats(s->join, &js);
	json_object_object_add(j, "state", json_object_new_string(java_state_names[s->java]));
	if (s->java_code[0]) {
		json_object_object_add(j, "code", json_object_new_string(s->java_code));
		json_object_object_add(j, "message", json_object_new_string(s->java_msg));
	}
	json_object_object_add(j, "attach_ms", json_object_new_int64((int64_t)s->attach_ms));
	json_object_object_add(j, "first_java_sample_ms", json_object_new_int64((int64_t)s->first_java_ms));
	json_object_object_add(j, "joined", json_object_new_int64((int64_t)js.joined));
	json_object_object_add(j, "without_java", json_object_new_int64((int64_t)js.bpf_unmatched));
	json_object_object_add(j, "agent_unmatched", json_object_new_int64((int64_t)js.agent_unmatched));
	json_object_object_add(j, "names_timed_out", json_object_new_int64((int64_t)js.names_timed_out));
	json_object_object_add(ring, "records", json_object_new_int64((int64_t)s->ring_st.records));
	json_object_object_add(ring, "dropped", json_object_new_int64((int64_t)s->ring_st.agent_dropped));
	json_object_object_add(ring, "overrun", json_object_new_int64((int64_t)s->ring_st.overrun));
	json_object_object_add(ring, "corrupt", json_object_new_int64((int64_t)s->ring_st.corrupt));
	json_object_object_add(ring, "stuck", json_object_new_int64((int64_t)s->ring_st.stuck));
	json_object_object_add(ring, "header_corrupt", json_object_new_boolean(s->ring_st.header_corrupt));
	json_object_object_add(j, "ring", ring);
	json_object_object_add(sum, "java", j);
}

/* ---- lifecycle ---- */

static void unlink_session(struct session *s)
{
	struct session **pp = &s->mgr->sessions;

	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = s->next;
		s->mgr->count--;
	}
}

static void session_free(struct session *s)
{
	if (!s)
		return;
	close_events(s);
	if (s->join)
		sampler_set_min_gap(s->mgr->sampler, s->id, 0);
	attach_cancel(s->attach);
	agent_stop(s->agent);
	loop_remove(s->ring_timer);
	loop_remove(s->java_timer);
	jvm_join_free(s->join);
	loop_remove(s->end_timer);
	loop_remove(s->pidfd_src);
	if (s->p.pidfd >= 0)
		close(s->p.pidfd);
	store_free(s->store);
	free(s);
}

/* Renders and sends the profile, then frees the session. */
static void complete(struct session *s, const char *status)
{
	struct store_totals tot;

	s->java_finishing = false;
	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (s->join)
		jvm_join_flush(s->join, add_jvm_sample, s);
	agent_stop(s->agent);  /* the agent closes its fds and unmaps the ring */
	s->agent = NULL;
	store_get_totals(s->store, &tot);
	log_info("session %u: %s after %llu ms, %llu samples, %zu stacks%s", s->id, status,
		 (unsigned long long)elapsed_ms(s), (unsigned long long)tot.values[0], tot.stacks,
		 tot.truncated ? " (truncated)" : "");
	if (s->first_java_ms)
		log_info("session %u: first sample with Java frames taken %llu ms after the request",
			 s->id, (unsigned long long)s->first_java_ms);
	send_profile(s, status);
	unlink_session(s);
	if (s->sink.done)
		s->sink.done(s->sink.ctx, s);
	session_free(s);
}

static void on_names_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	complete(s, s->final_status);
}

static void finish(struct session *s, const char *status)
{
	uint64_t now;

	if (s->finishing)
		return;
	s->finishing = true;
	s->end_mono_ns = clock_ns(CLOCK_MONOTONIC);
	attach_cancel(s->attach);
	s->attach = NULL;
	/* Stop sampling first (this also silences the agent's copies of the
	 * events), then drain: every sample taken so far arrives. */
	close_events(s);
	sampler_drain(s->mgr->sampler);
	if (s->join) {
		now = clock_ns(CLOCK_MONOTONIC);
		read_ring(s);
		jvm_join_run(s->join, UINT64_MAX, now, true, add_jvm_sample, s);
		request_names(s);
		if (jvm_join_held(s->join) && s->agent) {
			/* Give the agent a moment to name the last methods. */
			s->final_status = status;
			s->java_finishing = true;
			loop_remove(s->java_timer);
			s->java_timer = NULL;
			if (loop_add_timer(s->mgr->loop, JVM_NAME_WAIT_MS, 0, on_names_timeout, s,
					   &s->java_timer) == 0)
				return;
		}
	}
	complete(s, status);
}

/* Ends a recording with an error instead of a profile. */
static void abort_session(struct session *s, const char *code, const char *msg)
{
	s->finishing = true;
	log_info("session %u: ended: %s", s->id, msg);
	send_error(s, code, msg);
	unlink_session(s);
	if (s->sink.done)
		s->sink.done(s->sink.ctx, s);
	session_free(s);
}

void session_stop(struct session *s, const char *status)
{
	finish(s, status);
}

void session_abandon(struct session *s)
{
	if (!s || (s->finishing && !s->java_finishing))
		return;
	s->finishing = true;
	log_info("session %u: client gone after %llu ms; recording dropped", s->id,
		 (unsigned long long)elapsed_ms(s));
	unlink_session(s);
	session_free(s);
}

static void on_end_timer(struct loop_source *src, void *arg)
{
	finish(arg, "complete");
}

static void on_pidfd(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct session *s = arg;

	/* A pidfd polls readable once the process has exited. */
	log_info("session %u: pid %d exited", s->id, (int)s->p.pid);
	finish(s, "process_exited");
}

static void on_drain(struct loop_source *src, void *arg)
{
	struct session_mgr *m = arg;
	/* Agent records up to here have their BPF records in this drain. */
	uint64_t horizon = clock_ns(CLOCK_MONOTONIC) - 1000000ull;

	sampler_drain(m->sampler);
	/* Processes come and go: drop their cached maps and unused ELF tables
	 * once idle for a while, so memory follows the live set, not history.
	 * (The one owner of this: the host view may be off.) */
	if (++m->drains % SYMBOLS_EXPIRE_EVERY == 0)
		symbols_expire(m->symbols, SYMBOLS_IDLE_S);
	hostview_tick(m->hostview, clock_ns(CLOCK_MONOTONIC));
	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->finishing)
			continue;
		jvm_step(s, horizon);
		if (!s->p.all)
			rescan_threads(s);
		if (s->p.progress)
			send_progress(s);
	}
}

static uint32_t alloc_id(struct session_mgr *m)
{
	for (;;) {
		uint32_t id = ++m->next_id;

		if (id != JP_SRC_HOST && !find_by_source(m, id))
			return id;
	}
}

int session_start(struct session_mgr *m, const struct session_params *p,
		  const struct session_sink *sink, struct session **out,
		  const char **err_code, char *err_msg, size_t err_len)
{
	struct session *s = NULL;
	int r;

	*out = NULL;
	if (m->count >= m->lim.max_sessions) {
		*err_code = JPROF_E_LIMIT;
		snprintf(err_msg, err_len, "too many recordings (%u) are running", m->lim.max_sessions);
		r = -EBUSY;
		goto fail;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		r = -ENOMEM;
		goto fail_internal;
	}
	s->mgr = m;
	s->p = *p;
	s->sink = *sink;
	s->id = alloc_id(m);
	s->store = store_new(NULL, NULL, 0);
	if (!s->store) {
		r = -ENOMEM;
		goto fail_internal;
	}
	s->start_mono_ns = clock_ns(CLOCK_MONOTONIC);
	s->start_unix_ns = clock_ns(CLOCK_REALTIME);
	if (p->all) {
		r = sampler_cpu_events_open(m->sampler, s->id, interval_ns(s), &s->cpu_events);
		if (r < 0)
			goto fail_internal;
	} else {
		struct attach_result probe;

		r = java_check(s, &probe, err_code, err_msg, err_len);
		if (r < 0)
			goto fail;
		if (proc_read_comm(p->pid, 0, s->comm, sizeof(s->comm)) < 0)
			snprintf(s->comm, sizeof(s->comm), "?");
		store_set_process_name(s->store, (uint32_t)p->pid, s->comm);
		/* Watch before listing threads so none is created unseen. */
		r = sampler_watch_tgid(m->sampler, (uint32_t)p->pid);
		if (r < 0)
			goto fail_internal;
		s->watching = true;
		s->epoch = 1;
		r = proc_foreach_task(p->pid, rescan_cb, s);
		if (r < 0 || s->ntids == 0) {
			*err_code = JPROF_E_NO_SUCH_PROCESS;
			snprintf(err_msg, err_len, "pid %d exited before recording started", (int)p->pid);
			r = -ESRCH;
			goto fail;
		}
		r = loop_add_io(m->loop, p->pidfd, EPOLLIN, on_pidfd, s, &s->pidfd_src);
		if (r < 0)
			goto fail_internal;
	}
	r = loop_add_timer(m->loop, p->duration_ms, 0, on_end_timer, s, &s->end_timer);
	if (r < 0)
		goto fail_internal;
	s->next = m->sessions;
	m->sessions = s;
	m->count++;
	log_audit("session %u started: uid %u records %s%d for %llu ms every %llu us", s->id,
		  (unsigned)p->uid, p->all ? "the whole host" : "pid ", p->all ? 0 : (int)p->pid,
		  (unsigned long long)p->duration_ms, (unsigned long long)p->interval_us);
	send_started(s);
	if (s->java != JAVA_NONE)
		loop_add_timer(m->loop, 0, 0, on_java_begin, s, &s->java_timer);
	*out = s;
	return 0;
fail_internal:
	*err_code = JPROF_E_INTERNAL;
	snprintf(err_msg, err_len, "cannot start recording: %s", strerror(-r));
	log_err("cannot start recording of %s%d: %s", p->all ? "host " : "pid ", p->all ? 0 : (int)p->pid,
		strerror(-r));
fail:
	if (s) {
		s->finishing = true;
		session_free(s);  /* closes the pidfd */
	} else if (p->pidfd >= 0) {
		close(p->pidfd);
	}
	return r;
}

int session_mgr_new(struct loop *loop, struct symbols *symbols, const struct session_limits *lim,
		    struct session_mgr **out)
{
	struct session_mgr *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->loop = loop;
	m->symbols = symbols;
	if (lim)
		m->lim = *lim;
	if (!m->lim.max_sessions)
		m->lim.max_sessions = 64;
	if (!m->lim.max_threads)
		m->lim.max_threads = 8192;
	if (!m->lim.drain_ms)
		m->lim.drain_ms = 1000;
	*out = m;
	return 0;
}

void session_mgr_set_jvm(struct session_mgr *m, struct agentlink *agents, const char *agent_path,
			 const char *agent_socket)
{
	m->agents = agents;
	m->agent_path = agent_path;
	m->agent_socket = agent_socket;
}

void session_mgr_set_hostview(struct session_mgr *m, struct hostview *hv, unsigned rate_hz)
{
	m->hostview = hv;
	m->host_period_ns = rate_hz ? 1000000000ull / rate_hz : 0;
}

int session_mgr_set_sampler(struct session_mgr *m, struct sampler *sampler)
{
	m->sampler = sampler;
	return loop_add_timer(m->loop, m->lim.drain_ms, m->lim.drain_ms, on_drain, m, &m->drain_timer);
}

void session_mgr_free(struct session_mgr *m)
{
	if (!m)
		return;
	while (m->sessions) {
		struct session *s = m->sessions;

		s->finishing = true;
		send_error(s, JPROF_E_SHUTTING_DOWN, "jprofd is shutting down; the recording was stopped");
		unlink_session(s);
		if (s->sink.done)
			s->sink.done(s->sink.ctx, s);
		session_free(s);
	}
	loop_remove(m->drain_timer);
	free(m);
}

int64_t session_req_id(const struct session *s)
{
	return s->p.req_id;
}

size_t session_count(const struct session_mgr *m)
{
	return m->count;
}

void session_get_info(const struct session *s, struct session_info *out)
{
	*out = (struct session_info){
		.id = s->id,
		.req_id = s->p.req_id,
		.pid = s->p.all ? 0 : s->p.pid,
		.all = s->p.all,
		.uid = s->p.uid,
		.elapsed_ms = elapsed_ms(s),
		.duration_ms = s->p.duration_ms,
		.samples = s->samples,
		.threads = (unsigned)s->ntids,
	};
}

int session_foreach(struct session_mgr *m, int (*fn)(struct session *s, void *arg), void *arg)
{
	for (struct session *s = m->sessions, *next; s; s = next) {
		int r;

		next = s->next;
		r = fn(s, arg);
		if (r)
			return r;
	}
	return 0;
}
