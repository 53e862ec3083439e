/* The informational requests: hello (version negotiation, the command list)
 * and status (the daemon's health, recordings, host view, and the peer as
 * the daemon sees it). */
#include "requests.h"

#include <json-c/json.h>
#include <stdio.h>
#include <unistd.h>

#include "attach.h"
#include "authz.h"
#include "clock.h"
#include "hostview.h"
#include "jprof_proto.h"
#include "quota.h"
#include "sampler.h"
#include "server.h"
#include "session.h"

void req_status_hello(const struct request *r)
{
	const struct jprof_hello_req *h = &r->msg->hello;
	struct json_object *o, *cmds;
	const char *name;

	if (h->min_version > JPROF_PROTO_VERSION || h->max_version < JPROF_PROTO_VERSION) {
		requests_error(r, JPROF_E_UNSUPPORTED_VERSION,
			       "this jprofd speaks protocol version %d only; the client asked for %d..%d",
			       JPROF_PROTO_VERSION, h->min_version, h->max_version);
		return;
	}
	o = jprof_response_new(r->msg->id, "hello");
	cmds = json_object_new_array();
	if (!o || !cmds) {
		json_object_put(o);
		json_object_put(cmds);
		return;
	}
	json_object_object_add(o, "version", json_object_new_int(JPROF_PROTO_VERSION));
	json_object_object_add(o, "server", json_object_new_string("jprofd " JPROF_VERSION));
	for (size_t i = 0; (name = requests_kind_name(i)); i++)
		json_object_array_add(cmds, json_object_new_string(name));
	json_object_object_add(o, "commands", cmds);
	requests_send(r, o);
}

struct status_ctx {
	const struct authz_peer *peer;
	struct json_object *list;
	uint64_t shown;              /* recordings listed */
};

static int status_session(struct session *s, void *arg)
{
	struct status_ctx *sc = arg;
	struct session_info si;
	struct json_object *e;

	session_get_info(s, &si);
	/* Others' recordings are counted but not described to unprivileged peers. */
	if (!sc->peer->privileged && si.uid != sc->peer->uid)
		return 0;
	e = json_object_new_object();
	if (!e)
		return 0;
	json_object_object_add(e, "id", json_object_new_int64(si.id));
	json_object_object_add(e, "pid", json_object_new_int64(si.pid));
	json_object_object_add(e, "all", json_object_new_boolean(si.all));
	json_object_object_add(e, "uid", json_object_new_int64(si.uid));
	jprof_json_add_u64(e, "elapsed_ms", si.elapsed_ms);
	jprof_json_add_u64(e, "duration_ms", si.duration_ms);
	jprof_json_add_u64(e, "samples", si.samples);
	json_object_object_add(e, "threads", json_object_new_int64(si.threads));
	json_object_array_add(sc->list, e);
	sc->shown++;
	return 0;
}

/* The start gates since the daemon started (docs/protocol.md, status). */
static void add_gate_status(struct session_mgr *m, struct json_object *sess)
{
	struct json_object *g = json_object_new_object();
	struct session_gate_stats gs;

	if (!g)
		return;
	session_get_gate_stats(m, &gs);
	jprof_json_add_u64(g, "opened_ready", gs.opened_ready);
	jprof_json_add_u64(g, "opened_deadline", gs.opened_deadline);
	jprof_json_add_u64(g, "wait_ms_total", gs.wait_ms_total);
	jprof_json_add_u64(g, "wait_ms_max", gs.wait_ms_max);
	json_object_object_add(sess, "gate", g);
}

static void add_hostview_status(struct hostview *hv, struct json_object *st)
{
	struct json_object *h = json_object_new_object();
	struct hostview_config hc;
	struct hostview_stats hs;

	if (!h)
		return;
	json_object_object_add(h, "enabled", json_object_new_boolean(hv != NULL));
	if (hv) {
		hostview_get_config(hv, &hc);
		hostview_get_stats(hv, &hs);
		jprof_json_add_u64(h, "bucket_s", hc.bucket_s);
		jprof_json_add_u64(h, "retention_s", hc.retention_s);
		jprof_json_add_u64(h, "max_bytes", hc.max_bytes);
		jprof_json_add_u64(h, "bytes", hs.bytes);
		jprof_json_add_u64(h, "buckets", hs.buckets);
		jprof_json_add_u64(h, "samples", hs.samples);
		jprof_json_add_u64(h, "evicted_age", hs.evicted_age);
		jprof_json_add_u64(h, "evicted_memory", hs.evicted_memory);
		jprof_json_add_u64(h, "span_ms", hs.newest_ns > hs.oldest_ns ?
			(hs.newest_ns - hs.oldest_ns) / 1000000ull : 0);
	}
	json_object_object_add(st, "hostview", h);
}

/* Samples of processes without tables yet, sent with a copy of their
 * stack and walked in the daemon once the tables exist. */
static void add_young_status(const struct sampler_stats *ss, struct json_object *u)
{
	struct json_object *y = json_object_new_object();
	const struct unwtab_stats *t = &ss->unwind;

	if (!y)
		return;
	jprof_json_add_u64(y, "copied", ss->young_copied);
	jprof_json_add_u64(y, "copy_failed", ss->young_copy_err);
	jprof_json_add_u64(y, "held", t->young_held);
	jprof_json_add_u64(y, "held_bytes", t->young_held_bytes);
	jprof_json_add_u64(y, "unwound", t->young_unwound);
	jprof_json_add_u64(y, "unwound_to_root", t->young_to_root);
	jprof_json_add_u64(y, "short_copy", t->young_short_copy);
	jprof_json_add_u64(y, "dropped_exited", t->young_gone);
	jprof_json_add_u64(y, "dropped_expired", t->young_expired);
	jprof_json_add_u64(y, "dropped_memory", t->young_over_memory);
	jprof_json_add_u64(y, "dropped_uid_share", t->young_uid_share);
	json_object_object_add(u, "young", y);
}

/* Java frames of JVMs walked in BPF without an agent (docs/jvm.md). */
static void add_hotspot_status(const struct sampler_stats *ss, struct json_object *u)
{
	struct json_object *j = json_object_new_object();
	const struct hs_procs_stats *h = &ss->hotspot;

	if (!j)
		return;
	jprof_json_add_u64(j, "jvms", h->jvms);
	jprof_json_add_u64(j, "opened", h->opened);
	jprof_json_add_u64(j, "not_jvm", h->not_jvm);
	jprof_json_add_u64(j, "open_failed", h->open_failed);
	jprof_json_add_u64(j, "full", h->full);
	jprof_json_add_u64(j, "busy", h->busy);
	jprof_json_add_u64(j, "try_cpu_us", h->try_cpu_ns / 1000u);
	jprof_json_add_u64(j, "dropped", h->dropped);
	jprof_json_add_u64(j, "stacks", ss->hs_walks);
	jprof_json_add_u64(j, "frames", ss->hs_frames);
	jprof_json_add_u64(j, "stacks_lost", ss->hs_lost);
	jprof_json_add_u64(j, "frames_named", h->named);
	jprof_json_add_u64(j, "frames_unnamed", h->unnamed);
	jprof_json_add_u64(j, "name_cpu_us", h->name_cpu_ns / 1000u);
	jprof_json_add_u64(j, "names_reused", h->memo_hits);
	json_object_object_add(u, "hotspot", j);
}

/* DWARF unwinding: what the BPF unwinder did and the tables it read. */
static void add_unwind_status(const struct sampler_stats *ss, struct json_object *smp, bool all)
{
	struct json_object *u = json_object_new_object(), *rej = json_object_new_object();
	struct json_object *miss = json_object_new_object(), *list = NULL;
	const struct unwtab_stats *t = &ss->unwind;

	if (!u || !rej || !miss) {
		json_object_put(u);
		json_object_put(rej);
		json_object_put(miss);
		return;
	}
	json_object_object_add(u, "enabled", json_object_new_boolean(ss->unwind_on));
	jprof_json_add_u64(u, "stacks", ss->uw_dwarf);
	jprof_json_add_u64(u, "stacks_without_tables", ss->uw_no_tables);
	jprof_json_add_u64(u, "stacks_to_root", ss->uw_root);
	jprof_json_add_u64(u, "frames", ss->uw_frames);
	jprof_json_add_u64(u, "frame_pointer_frames", ss->uw_fp_frames);
	jprof_json_add_u64(u, "id_collisions", ss->uw_collision);
	jprof_json_add_u64(u, "processes", t->procs);
	jprof_json_add_u64(u, "tables", t->tables);
	jprof_json_add_u64(u, "rows", t->rows_used);
	jprof_json_add_u64(u, "rows_capacity", t->rows_capacity);
	jprof_json_add_u64(u, "requests", t->requests);
	jprof_json_add_u64(u, "requests_deferred", t->deferred);
	jprof_json_add_u64(u, "requests_deferred_exited", t->deferred_gone);
	jprof_json_add_u64(u, "process_reads", t->proc_reads);
	jprof_json_add_u64(u, "process_reads_unchanged", t->maps_unchanged);
	jprof_json_add_u64(u, "rows_uploaded", t->rows_uploaded);
	jprof_json_add_u64(u, "builds", t->builds);
	jprof_json_add_u64(u, "build_ms_max", t->build_ns_max / 1000000ull);
	jprof_json_add_u64(u, "evicted", t->evicted);
	jprof_json_add_u64(u, "rows_full", t->rows_full);
	jprof_json_add_u64(u, "room_retries", t->room_retries);
	jprof_json_add_u64(u, "evicted_cold", t->evicted_cold);
	jprof_json_add_u64(u, "cold_reloads", t->cold_reloads);
	jprof_json_add_u64(u, "open_failed", t->open_failed);
	jprof_json_add_u64(u, "untrusted_fs", t->untrusted_fs);
	jprof_json_add_u64(u, "too_many_mappings", t->too_many_maps);
	jprof_json_add_u64(u, "processes_full", t->procs_full);
	jprof_json_add_u64(u, "uid_share", t->uid_share);
	jprof_json_add_u64(u, "builds_deferred", t->builds_deferred);
	jprof_json_add_u64(u, "cache_hits", t->cache_hits);
	jprof_json_add_u64(u, "cache_writes", t->cache_writes);
	jprof_json_add_u64(u, "cache_rejected", t->cache_rejected);
	jprof_json_add_u64(u, "cache_evicted", t->cache_evicted);
	jprof_json_add_u64(u, "cache_bytes", t->cache_bytes);
	jprof_json_add_u64(u, "recording_wait_ms_max", t->urgent_wait_ns_max / 1000000ull);
	for (int i = CFI_OK + 1; i < CFI_NERRORS; i++)
		jprof_json_add_u64(rej, cfi_error_name((enum cfi_error)i), t->rejected[i]);
	json_object_object_add(u, "rejected", rej);
	add_hotspot_status(ss, u);
	/* Binaries sampled within the last minute that have no table: how many
	 * by cause for everyone; which ones (paths of any user's programs)
	 * for callers who may see the whole host. */
	for (int i = 0; i < UNWTAB_NWHY; i++)
		jprof_json_add_u64(miss, unwtab_why_name((enum unwtab_why)i), t->sampled_missing[i]);
	json_object_object_add(u, "sampled_without_tables", miss);
	if (all)
		list = json_object_new_array();
	for (size_t i = 0; list && i < ss->unwind_nmissing; i++) {
		const struct unwtab_missing *m = &ss->unwind_missing[i];
		struct json_object *b = json_object_new_object();

		if (!b)
			break;
		json_object_object_add(b, "path", json_object_new_string(m->path));
		json_object_object_add(b, "why", json_object_new_string(unwtab_why_name(m->why)));
		if (m->why == UNWTAB_REJECTED)
			json_object_object_add(b, "error", json_object_new_string(cfi_error_name(m->error)));
		if (m->rows)
			jprof_json_add_u64(b, "rows", m->rows);
		json_object_array_add(list, b);
	}
	if (list)
		json_object_object_add(u, "binaries_without_tables", list);
	add_young_status(ss, u);
	json_object_object_add(smp, "unwind", u);
}

/* A time in microseconds to 0.1 us (the buckets are 1 us wide); null when
 * nothing was timed. */
static struct json_object *json_us(double us)
{
	char txt[32];

	if (us < 0)
		return NULL;
	snprintf(txt, sizeof(txt), "%.1f", us);
	return json_object_new_double_s(us, txt);
}

/* The BPF programs' own time per sample (collect/samplehist.h). */
static void add_bpf_time_status(const struct samplehist *h, struct json_object *smp,
				const char *key)
{
	struct json_object *t = json_object_new_object();

	if (!t)
		return;
	jprof_json_add_u64(t, "count", h->count);
	json_object_object_add(t, "mean", json_us(samplehist_mean_us(h)));
	json_object_object_add(t, "p50", json_us(samplehist_quantile(h, 0.50)));
	json_object_object_add(t, "p90", json_us(samplehist_quantile(h, 0.90)));
	json_object_object_add(t, "p99", json_us(samplehist_quantile(h, 0.99)));
	json_object_object_add(smp, key, t);
}

static void add_sampler_status(struct sampler *sampler, struct json_object *smp,
			       struct json_object *lost, bool all)
{
	struct json_object *off = json_object_new_object();
	struct sampler_stats ss;

	sampler_get_stats(sampler, &ss);
	json_object_object_add(smp, "state", json_object_new_string("running"));
	jprof_json_add_u64(smp, "rate_hz", ss.host_rate_hz);
	jprof_json_add_u64(smp, "cpus", ss.cpus);
	jprof_json_add_u64(smp, "samples", ss.samples);
	jprof_json_add_u64(smp, "idle", ss.idle);
	jprof_json_add_u64(smp, "drains", ss.drains);
	jprof_json_add_u64(smp, "thread_events", ss.thread_events);
	jprof_json_add_u64(lost, "kernel_stack", ss.kstack_err);
	jprof_json_add_u64(lost, "user_stack", ss.ustack_err);
	jprof_json_add_u64(lost, "stack_collision", ss.collision);
	jprof_json_add_u64(lost, "map_full", ss.map_full);
	jprof_json_add_u64(lost, "ringbuf", ss.ringbuf_full);
	jprof_json_add_u64(lost, "throttled", ss.throttled);
	jprof_json_add_u64(lost, "foreign_namespace", ss.foreign_ns);
	jprof_json_add_u64(lost, "stack_missing", ss.stack_missing);
	jprof_json_add_u64(lost, "offcpu_start_full", ss.offcpu_start_full);
	json_object_object_add(smp, "lost", lost);
	if (off) {
		jprof_json_add_u64(off, "recordings", ss.offcpu_targets);
		jprof_json_add_u64(off, "intervals", ss.offcpu);
		jprof_json_add_u64(off, "below_threshold", ss.offcpu_short);
		jprof_json_add_u64(off, "held_stacks", ss.offcpu_held_stacks);
		json_object_object_add(smp, "offcpu", off);
	}
	add_bpf_time_status(&ss.bpf_time, smp, "bpf_sample_us");
	/* The samples of JVMs walked in BPF among them (bpf/hotspot.bpf.c). */
	add_bpf_time_status(&ss.bpf_time_java, smp, "bpf_java_sample_us");
	add_unwind_status(&ss, smp, all);
}

/* JVM attach helpers stopped without waiting (see attach.h). */
static void add_attach_status(struct json_object *st)
{
	struct json_object *a = json_object_new_object();
	struct attach_stats as;

	if (!a)
		return;
	attach_get_stats(&as);
	jprof_json_add_u64(a, "helpers_abandoned", as.helpers_abandoned);
	jprof_json_add_u64(a, "helpers_stuck", as.helpers_stuck);
	jprof_json_add_u64(a, "helpers_unreaped", as.helpers_unreaped);
	json_object_object_add(st, "attach", a);
}

void req_status(const struct request *r)
{
	struct requests *rq = r->rq;
	struct json_object *o = jprof_response_new(r->msg->id, "status");
	struct json_object *st = json_object_new_object(), *smp = json_object_new_object();
	struct json_object *lost = json_object_new_object(), *sess = json_object_new_object();
	struct json_object *peer = json_object_new_object();
	struct status_ctx sc = { .peer = r->peer, .list = json_object_new_array() };

	if (!o || !st || !smp || !lost || !sess || !peer || !sc.list) {
		json_object_put(o);
		json_object_put(st);
		json_object_put(smp);
		json_object_put(lost);
		json_object_put(sess);
		json_object_put(peer);
		json_object_put(sc.list);
		requests_error(r, JPROF_E_INTERNAL, "out of memory");
		return;
	}
	json_object_object_add(st, "version", json_object_new_string(JPROF_VERSION));
	json_object_object_add(st, "protocol", json_object_new_int(JPROF_PROTO_VERSION));
	jprof_json_add_u64(st, "pid", (uint64_t)getpid());
	jprof_json_add_u64(st, "uptime_ms", (clock_ns(CLOCK_MONOTONIC) - rq->start_mono_ns) / 1000000ull);
	add_sampler_status(rq->sampler, smp, lost, r->peer->privileged);
	json_object_object_add(st, "sampler", smp);
	/* What others do with the daemon (their recordings, start gates,
	 * connections, attach helpers) is shown to privileged callers only;
	 * anyone else gets counts of their own. The sampler and host-view
	 * counters are the host's, as /proc/stat is (docs/security.md). */
	session_foreach(rq->sessions, status_session, &sc);
	jprof_json_add_u64(sess, "active", r->peer->privileged ? session_count(rq->sessions) : sc.shown);
	if (r->peer->privileged)
		add_gate_status(rq->sessions, sess);
	json_object_object_add(sess, "list", sc.list);
	json_object_object_add(st, "sessions", sess);
	add_hostview_status(rq->hostview, st);
	if (r->peer->privileged)
		add_attach_status(st);
	jprof_json_add_u64(st, "clients",
			 r->peer->privileged || !rq->cfg.quota ?
				 server_client_count(rq->server) :
				 quota_used(rq->cfg.quota, r->peer->uid, QUOTA_CLIENTS));
	jprof_json_add_u64(peer, "uid", r->peer->uid);
	json_object_object_add(peer, "authorized_all", json_object_new_boolean(r->peer->privileged));
	json_object_object_add(st, "peer", peer);
	json_object_object_add(o, "status", st);
	requests_send(r, o);
}
