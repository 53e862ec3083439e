/* record and cancel: a recording is a session (session.c) whose lines go to
 * the client that asked; this file keeps each connection's recordings, by
 * request id, within the per-connection and per-uid limits. */
#include "requests.h"

#include <errno.h>
#include <json-c/json.h>

#include "authz.h"
#include "jprof_proto.h"
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
			return;
		}
	}
}

void req_record_abandon_all(struct requests_conn *conn)
{
	while (conn->nrec) {
		struct session *s = conn->rec[--conn->nrec].s;

		session_abandon(s);
	}
}

/* ---- limits ---- */

struct uid_count {
	uid_t uid;
	unsigned n;
};

static int count_uid_sessions(struct session *s, void *arg)
{
	struct uid_count *uc = arg;
	struct session_info si;

	session_get_info(s, &si);
	if (si.uid == uc->uid)
		uc->n++;
	return 0;
}

/* 0, or -errno after the reply was sent. */
static int check_limits(const struct request *r)
{
	const struct requests_config *cfg = &r->rq->cfg;
	struct requests_conn *conn = r->conn;
	int64_t id = r->msg->id;

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
	if (!r->peer->privileged) {
		struct uid_count uc = { .uid = r->peer->uid };

		session_foreach(r->rq->sessions, count_uid_sessions, &uc);
		if (uc.n >= cfg->max_sessions_per_user) {
			requests_error(r, JPROF_E_LIMIT, "uid %u already runs %u recordings (the limit)",
				       (unsigned)r->peer->uid, uc.n);
			return -EMFILE;
		}
	}
	return 0;
}

/* ---- requests ---- */

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
	};
	struct session_sink sink = { .send = sink_send, .done = sink_done, .ctx = r->client };
	struct requests_conn *conn = r->conn;
	const char *code = NULL;
	char why[512];
	struct session *s;
	int fmt;

	fmt = requests_format(r, rr->format);
	if (fmt < 0 || check_limits(r) < 0)
		return;
	p.format = (enum jprof_format)fmt;
	if (rr->all && !r->peer->privileged) {
		requests_deny(r, "to record the whole host", "recording the whole host", "");
		return;
	}
	if (!rr->all && requests_authorize_pid(r, rr->pid, "to record", &p.pidfd) < 0)
		return;
	if (session_start(r->rq->sessions, &p, &sink, &s, &code, why, sizeof(why)) < 0) {
		requests_error(r, code ? code : JPROF_E_INTERNAL, "%s", why);
		return;
	}
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
