/* Requests on the control socket: each line server.c frames is parsed with
 * the protocol codec (proto/), looked up in one table of request kinds
 * (requests.c: name, handler, whether the whole request needs privilege)
 * and answered by its handler, one file per family:
 *
 *   req_status.c   hello, status
 *   req_record.c   record, cancel (and this connection's recordings)
 *   req_profile.c  profile (the continuous host view)
 *
 * A new request kind is a new req_<family>.c plus one line in the table.
 * What several handlers share is here: the error reply, the format choice,
 * and the authorization of a pid or of the whole host. */
#ifndef JPROF_REQUESTS_H
#define JPROF_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct authz_peer;
struct hostview;
struct jprof_request;
struct json_object;
struct quota;
struct render;
struct render_job;
struct sampler;
struct server;
struct server_client;
struct session;
struct session_mgr;

#define REQUESTS_MAX_RECORDINGS 16   /* per connection, upper bound of the setting */
/* Host profiles of one uid (but root) being rendered at once, over all its
 * connections (each connection has one at most: it is held meanwhile). */
#define REQUESTS_PROFILE_RENDERS_PER_UID 4

struct requests_config {
	const char *group_name;          /* the authorized group, for messages; NULL: "jprof" */
	unsigned max_sessions_per_client;/* default 4, at most REQUESTS_MAX_RECORDINGS */
	struct quota *quota;             /* recordings per uid; NULL: none */
	struct render *render;           /* where host profiles are rendered; NULL: on the loop */
};

/* What the handlers read; set up by requests_new and the setters. */
struct requests {
	struct requests_config cfg;
	struct session_mgr *sessions;
	struct sampler *sampler;
	struct hostview *hostview;       /* NULL: the host view is off */
	const struct server *server;     /* for the client count */
	uint64_t start_mono_ns;
};

/* The recordings one connection runs (server_client_data of each client),
 * each charged to the peer's uid (QUOTA_SESSIONS) while it is listed. */
struct requests_conn {
	struct {
		int64_t req_id;
		struct session *s;
	} rec[REQUESTS_MAX_RECORDINGS];
	unsigned nrec;
	struct quota *quota;             /* where the recordings are charged, */
	uid_t uid;                       /* and to whom */
	/* The host profile being rendered for this connection (its requests
	 * are held until it is sent), and its request's id. */
	struct render_job *profile_job;
	int64_t profile_id;
};

/* One request being answered. */
struct request {
	struct requests *rq;
	struct server_client *client;
	const struct authz_peer *peer;
	struct requests_conn *conn;
	const struct jprof_request *msg;
};

int requests_new(struct session_mgr *sessions, struct sampler *sampler,
		 const struct requests_config *cfg, struct requests **out);
void requests_free(struct requests *rq);

/* The server_hooks of the control server (ctx: struct requests), and the
 * per-client data they need. */
void requests_on_line(void *rq, struct server_client *c, const struct authz_peer *peer,
		      const char *line, size_t len);
void requests_on_gone(void *rq, struct server_client *c);
#define REQUESTS_CLIENT_DATA_SIZE sizeof(struct requests_conn)

/* ---- for the handlers ---- */

/* The name of the i-th request kind in the table, NULL past the end. */
const char *requests_kind_name(size_t i);

/* Sends {"ok":false,"error":{code,message}} echoing the request's id. */
void requests_error(const struct request *r, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Sends o as one line and releases it (NULL: nothing is sent). */
void requests_send(const struct request *r, struct json_object *o);

/* The export format called name, or -EINVAL after a bad_request reply. */
int requests_format(const struct request *r, const char *name);

/* Whether the peer may profile pid: pins it with a pidfd first, so a
 * recycled pid cannot slip in after the check. 0 with *pidfd the pinned
 * process (taken by the caller; pidfd NULL: closed), or -errno after the
 * reply was sent: for root and the group no_such_process, or
 * permission_denied with the reason; for anyone else permission_denied with
 * REQUESTS_DENY_PID_FMT whatever the reason, so that the answer does not
 * tell whether another user's process exists. Each refusal but root's
 * no_such_process is an audit line "denied: uid U (pid P) asked <asked> pid
 * N: <reason>". resource_exhausted (for anyone) when the daemon has no fd
 * left to pin the process. */
#define REQUESTS_DENY_PID_FMT \
	"pid %d is not a process uid %u may record (no such process, or not the caller's: " \
	"all its uids and gids must be the caller's, dumpable, without capabilities)"
int requests_authorize_pid(const struct request *r, pid_t pid, const char *asked, int *pidfd);

/* When err says the daemon ran out of fds or memory (-EMFILE, -ENFILE,
 * -ENOMEM, -ENOBUFS): sends resource_exhausted and returns true (the
 * caller logs). */
bool requests_exhausted(const struct request *r, int err);

/* Refuses an unprivileged peer something only root or the group may do:
 * audit line "denied: uid U (pid P) asked <asked>", and permission_denied
 * "<what> needs root or membership in group G<hint>". */
void requests_deny(const struct request *r, const char *asked, const char *what, const char *hint);

/* Handlers, registered in requests.c's table. */
void req_status_hello(const struct request *r);
void req_status(const struct request *r);
void req_record(const struct request *r);
void req_record_cancel(const struct request *r);
void req_profile(const struct request *r);
/* The client is gone: its recordings are dropped, not finished. */
void req_record_abandon_all(struct requests_conn *conn);
/* ... and the host profile being rendered for it. */
void req_profile_abandon(struct requests_conn *conn);

#endif
