#include "requests.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "authz.h"
#include "clock.h"
#include "export.h"
#include "jprof_proto.h"
#include "log.h"
#include "proc.h"
#include "server.h"

/* Every request kind: a new one is one line here. privileged: the whole
 * request needs root or the group (record and profile decide by their
 * arguments instead: a pid of one's own is allowed, the whole host is not). */
static const struct requests_kind {
	const char *name;
	void (*handle)(const struct request *r);
	bool privileged;
} kinds[] = {
	{ "hello", req_status_hello, false },
	{ "status", req_status, false },
	{ "record", req_record, false },
	{ "cancel", req_record_cancel, false },
	{ "profile", req_profile, false },
};

const char *requests_kind_name(size_t i)
{
	return i < sizeof(kinds) / sizeof(kinds[0]) ? kinds[i].name : NULL;
}

static const struct requests_kind *kind_find(const char *name)
{
	for (size_t i = 0; name && i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(kinds[i].name, name) == 0)
			return &kinds[i];
	return NULL;
}

int requests_new(struct session_mgr *sessions, struct sampler *sampler,
		 const struct requests_config *cfg, struct requests **out)
{
	struct requests *rq = calloc(1, sizeof(*rq));

	*out = NULL;
	if (!rq)
		return -ENOMEM;
	rq->sessions = sessions;
	rq->sampler = sampler;
	rq->cfg = *cfg;
	if (!rq->cfg.max_sessions_per_client)
		rq->cfg.max_sessions_per_client = 4;
	if (rq->cfg.max_sessions_per_client > REQUESTS_MAX_RECORDINGS)
		rq->cfg.max_sessions_per_client = REQUESTS_MAX_RECORDINGS;
	rq->start_mono_ns = clock_ns(CLOCK_MONOTONIC);
	*out = rq;
	return 0;
}

void requests_free(struct requests *rq)
{
	free(rq);
}

/* ---- replies ---- */

void requests_error(const struct request *r, const char *code, const char *fmt, ...)
{
	const struct jprof_request *m = r->msg;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	server_client_send_error(r->client, m ? m->id : 0, m && m->has_id, code, msg);
}

void requests_send(const struct request *r, struct json_object *o)
{
	size_t len;
	char *line = o ? jprof_json_line(o, &len) : NULL;

	if (line)
		server_client_send(r->client, line, len);
	free(line);
	json_object_put(o);
}

/* ---- what record and profile share ---- */

int requests_format(const struct request *r, const char *name)
{
	int fmt = jprof_format_parse(name);

	if (fmt < 0)
		requests_error(r, JPROF_E_BAD_REQUEST, "unknown format \"%s\" (supported: %s)", name,
			       jprof_format_names());
	return fmt < 0 ? -EINVAL : fmt;
}

static int pidfd_open_checked(pid_t pid)
{
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -errno : (int)fd;
}

/* One answer for every refusal of a pid to an unprivileged caller: whether
 * another user's process exists, and whose it is, is not the caller's to
 * learn (/proc may hide it: hidepid). The audit line keeps the reason. */
static void deny_pid(const struct request *r, pid_t pid, const char *asked, int err,
		     const char *why)
{
	const struct authz_peer *peer = r->peer;

	if (peer->privileged && err == -ESRCH) {
		requests_error(r, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)pid);
		return;
	}
	log_audit("denied: uid %u (pid %d) asked %s pid %d: %s", (unsigned)peer->uid,
		  (int)peer->pid, asked, (int)pid, why);
	if (peer->privileged)
		requests_error(r, JPROF_E_PERMISSION_DENIED, "pid %d: %s", (int)pid, why);
	else
		requests_error(r, JPROF_E_PERMISSION_DENIED, REQUESTS_DENY_PID_FMT, (int)pid,
			       (unsigned)peer->uid);
}

bool requests_exhausted(const struct request *r, int err)
{
	if (err != -EMFILE && err != -ENFILE && err != -ENOMEM && err != -ENOBUFS)
		return false;
	requests_error(r, JPROF_E_RESOURCE_EXHAUSTED, "jprofd is out of %s; try again later",
		       err == -EMFILE || err == -ENFILE ? "file descriptors" : "memory");
	return true;
}

int requests_authorize_pid(const struct request *r, pid_t pid, const char *asked, int *pidfd)
{
	char why[512] = "no such process";
	int fd, ret = -ESRCH;

	fd = pidfd_open_checked(pid);
	if (fd < 0 && requests_exhausted(r, fd)) {
		/* Out of fds is not "no such process". */
		log_warn("cannot pin pid %d for uid %u: %s", (int)pid, (unsigned)r->peer->uid,
			 strerror(-fd));
		return fd;
	}
	if (fd >= 0) {
		ret = authz_check_pid(r->peer, pid, 0, why, sizeof(why));
		/* The pidfd was taken first: still running means pid was this
		 * process all along, not a successor. */
		if (ret == 0 && proc_pidfd_running(fd) != 1) {
			snprintf(why, sizeof(why), "no such process");
			ret = -ESRCH;
		}
	}
	if (ret < 0)
		deny_pid(r, pid, asked, ret, why);
	if (ret == 0 && pidfd)
		*pidfd = fd;
	else if (fd >= 0)
		close(fd);
	return ret;
}

void requests_deny(const struct request *r, const char *asked, const char *what, const char *hint)
{
	log_audit("denied: uid %u (pid %d) asked %s", (unsigned)r->peer->uid, (int)r->peer->pid, asked);
	requests_error(r, JPROF_E_PERMISSION_DENIED, "%s needs root or membership in group %s%s", what,
		       r->rq->cfg.group_name ? r->rq->cfg.group_name : "jprof", hint);
}

/* ---- dispatch ---- */

void requests_on_line(void *ctx, struct server_client *c, const struct authz_peer *peer,
		      const char *line, size_t len)
{
	struct jprof_request msg;
	struct jprof_error err;
	struct request r = { .rq = ctx, .client = c, .peer = peer, .conn = server_client_data(c),
			     .msg = &msg };
	const struct requests_kind *k;
	char asked[64], what[64];

	memset(&msg, 0, sizeof(msg));
	if (jprof_request_parse(line, len, &msg, &err) < 0) {
		requests_error(&r, err.code, "%s", err.message);
		return;
	}
	k = kind_find(jprof_cmd_name(msg.cmd));
	if (!k) {
		requests_error(&r, JPROF_E_UNKNOWN_COMMAND, "unknown command");
		return;
	}
	if (k->privileged && !peer->privileged) {
		snprintf(asked, sizeof(asked), "for \"%s\"", k->name);
		snprintf(what, sizeof(what), "\"%s\"", k->name);
		requests_deny(&r, asked, what, "");
		return;
	}
	k->handle(&r);
}

void requests_on_gone(void *ctx, struct server_client *c)
{
	req_record_abandon_all(server_client_data(c));
	req_profile_abandon(server_client_data(c));
}
