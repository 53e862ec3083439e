/* record and cancel: a recording is a session (record/session.c) whose lines go to
 * the client that asked; this file keeps each connection's recordings, by
 * request id, within the per-connection limit and the per-uid quotas. */
#include "requests.h"

#include <errno.h>
#include <json-c/json.h>

#include "authz.h"
#include "event.h"
#include "jprof_formats.h"
#include "jprof_proto.h"
#include "quota.h"
#include "server.h"
#include "session.h"

/* ---- the session's sink: the connection that asked ---- */

static void sink_send(void *ctx, const char *line, size_t len)
{
	server_client_send(ctx, line, len);
}

static void sink_done(void *ctx, struct session *s)
{
	struct requests_conn *conn = server_client_data(ctx);

	for (unsigned i = 0; i < conn->nrec; i++) {
		if (conn->rec[i].s == s) {
			conn->rec[i] = conn->rec[--conn->nrec];
			quota_give(conn->quota, conn->uid, QUOTA_SESSIONS, 1);
			return;
		}
	}
}

void req_record_abandon_all(struct requests_conn *conn)
{
	while (conn->nrec) {
		struct session *s = conn->rec[--conn->nrec].s;

		quota_give(conn->quota, conn->uid, QUOTA_SESSIONS, 1);
		session_abandon(s);
	}
}

/* ---- limits ---- */

/* Sends limit_exceeded for a quota_take() of kind k that failed with err. */
static void quota_error(const struct request *r, enum quota_kind k, int err)
{
	char why[256];

	quota_explain(r->rq->cfg.quota, r->peer->uid, k, err, why, sizeof(why));
	requests_error(r, JPROF_E_LIMIT, "%s", why);
}

/* 0 with one recording charged to the peer's uid, or -errno after the
 * reply was sent. */
static int check_limits(const struct request *r)
{
	const struct requests_config *cfg = &r->rq->cfg;
	struct requests_conn *conn = r->conn;
	int64_t id = r->msg->id;
	int ret;

	for (unsigned i = 0; i < conn->nrec; i++) {
		if (conn->rec[i].req_id == id) {
			requests_error(r, JPROF_E_BAD_REQUEST,
				       "request id %lld is already used by a running recording on this connection",
				       (long long)id);
			return -EEXIST;
		}
	}
	if (conn->nrec >= cfg->max_sessions_per_client) {
		requests_error(r, JPROF_E_LIMIT, "at most %u recordings per connection",
			       cfg->max_sessions_per_client);
		return -EMFILE;
	}
	/* A recording of a process needs perf events: refused at once when the
	 * uid has none left (past this point the threads beyond the quota are
	 * counted, not sampled). */
	if (!r->msg->record.all) {
		ret = quota_take(cfg->quota, r->peer->uid, QUOTA_PERF_EVENTS, 1);
		if (ret < 0) {
			quota_error(r, QUOTA_PERF_EVENTS, ret);
			return ret;
		}
		quota_give(cfg->quota, r->peer->uid, QUOTA_PERF_EVENTS, 1);
	}
	ret = quota_take(cfg->quota, r->peer->uid, QUOTA_SESSIONS, 1);
	if (ret < 0)
		quota_error(r, QUOTA_SESSIONS, ret);
	return ret;
}

/* ---- requests ---- */

/* The events and their options: 0, or -EINVAL after the reply was sent.
 * An option of an event that is not recorded is refused, naming it. */
static int record_event(const struct request *r, struct session_params *p)
{
	const struct jprof_record_req *rr = &r->msg->record;
	const struct event_set *set = &p->events;
	bool offcpu, lock, lock_only;
	char why[160];

	if (event_parse_list(rr->event, &p->events, why, sizeof(why)) < 0) {
		requests_error(r, JPROF_E_BAD_REQUEST, "%s; known events: %s", why,
			       jprof_event_names());
		return -EINVAL;
	}
	p->event = set->ids[0];
	offcpu = event_set_has(set, EVENT_OFFCPU) || event_set_has(set, EVENT_WALL);
	lock = event_set_has(set, EVENT_LOCK);
	/* Before lock_threshold_us, threshold_us carried -e lock's threshold. */
	lock_only = lock && set->n == 1;
	if (rr->threshold_us && !offcpu && !lock_only) {
		requests_error(r, JPROF_E_BAD_REQUEST,
			       "\"threshold_us\" applies to the offcpu, wall and lock events only "
			       "(lock's, beside other events, is \"lock_threshold_us\"), and none is "
			       "recorded");
		return -EINVAL;
	}
	if (rr->lock_threshold_us && !lock) {
		requests_error(r, JPROF_E_BAD_REQUEST,
			       "\"lock_threshold_us\" applies to the lock event only, which is not recorded");
		return -EINVAL;
	}
	if (rr->alloc_bytes && !event_set_has(set, EVENT_ALLOC)) {
		requests_error(r, JPROF_E_BAD_REQUEST,
			       "\"alloc_bytes\" applies to the alloc event only, which is not recorded");
		return -EINVAL;
	}
	for (size_t i = 0; i < set->n; i++) {
		const char *name = event_get(set->ids[i])->name;

		if (event_needs_jvm(set->ids[i]) && rr->all) {
			requests_error(r, JPROF_E_BAD_REQUEST,
				       "the %s event records one JVM (\"pid\"), not the whole host", name);
			return -EINVAL;
		}
		if (event_needs_jvm(set->ids[i]) && rr->java == JPROF_JAVA_OFF) {
			requests_error(r, JPROF_E_BAD_REQUEST,
				       "the %s event needs the JVM agent: \"java\": \"off\" is not possible",
				       name);
			return -EINVAL;
		}
		if (set->ids[i] != EVENT_CPU && jprof_format_info(p->format)->time_ordered) {
			requests_error(r, JPROF_E_BAD_REQUEST,
				       "format \"%s\" (time-ordered) is not available for the %s event yet%s",
				       jprof_format_info(p->format)->name, name,
				       set->n > 1 ? " (nor for several events)" : "");
			return -EINVAL;
		}
	}
	p->threshold_ns = (offcpu && rr->threshold_us ? rr->threshold_us
			   : JPROF_THRESHOLD_US_DEFAULT) * 1000;
	p->lock_threshold_ns = (rr->lock_threshold_us ? rr->lock_threshold_us
				: lock_only && rr->threshold_us ? rr->threshold_us
				: JPROF_LOCK_THRESHOLD_US_DEFAULT) * 1000;
	p->alloc_bytes = rr->alloc_bytes ? rr->alloc_bytes : JPROF_ALLOC_BYTES_DEFAULT;
	return 0;
}

void req_record(const struct request *r)
{
	const struct jprof_record_req *rr = &r->msg->record;
	struct session_params p = {
		.req_id = r->msg->id,
		.pid = rr->pid,
		.pidfd = -1,
		.all = rr->all,
		.uid = r->peer->uid,
		.peer = *r->peer,
		.duration_ms = rr->duration_ms,
		.interval_us = rr->interval_us,
		.progress = rr->progress,
		.thread_frames = rr->thread_frames,
		.java = rr->java,
		.java_lines = rr->java_lines,
		.java_signatures = rr->java_signatures,
		.java_types = rr->java_types,
	};
	struct session_sink sink = { .send = sink_send, .done = sink_done, .ctx = r->client };
	struct requests_conn *conn = r->conn;
	const char *code = NULL;
	char why[512];
	struct session *s;
	int fmt, ret;

	fmt = requests_format(r, rr->format);
	if (fmt < 0)
		return;
	p.format = (enum jprof_format)fmt;
	if (record_event(r, &p) < 0)
		return;
	if (rr->all && !r->peer->privileged) {
		requests_deny(r, "to record the whole host", "recording the whole host", "");
		return;
	}
	if (check_limits(r) < 0)
		return;
	if (!rr->all && requests_authorize_pid(r, rr->pid, "to record", &p.pidfd) < 0) {
		quota_give(r->rq->cfg.quota, r->peer->uid, QUOTA_SESSIONS, 1);
		return;
	}
	ret = session_start(r->rq->sessions, &p, &sink, &s, &code, why, sizeof(why));
	if (ret < 0) {
		quota_give(r->rq->cfg.quota, r->peer->uid, QUOTA_SESSIONS, 1);
		if (ret == -EDQUOT || ret == -EUSERS)
			quota_error(r, QUOTA_PERF_EVENTS, ret);
		else if (!requests_exhausted(r, ret))
			requests_error(r, code ? code : JPROF_E_INTERNAL, "%s", why);
		return;
	}
	conn->quota = r->rq->cfg.quota;
	conn->uid = r->peer->uid;
	conn->rec[conn->nrec].req_id = r->msg->id;
	conn->rec[conn->nrec].s = s;
	conn->nrec++;
}

void req_record_cancel(const struct request *r)
{
	struct requests_conn *conn = r->conn;
	int64_t target = r->msg->cancel.target;
	struct json_object *o;

	for (unsigned i = 0; i < conn->nrec; i++) {
		struct session *s = conn->rec[i].s;

		if (conn->rec[i].req_id != target)
			continue;
		o = jprof_response_new(r->msg->id, "cancelled");
		if (o) {
			json_object_object_add(o, "target", json_object_new_int64(target));
			requests_send(r, o);
		}
		session_stop(s, "cancelled");
		return;
	}
	requests_error(r, JPROF_E_NO_SUCH_SESSION,
		       "no running recording with request id %lld on this connection",
		       (long long)target);
}
