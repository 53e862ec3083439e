#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "agentlink.h"
#include "authz.h"
#include "buf.h"
#include "clock.h"
#include "control.h"
#include "hostview.h"
#include "http_pprof.h"
#include "log.h"
#include "netaddr.h"
#include "loop.h"
#include "sampler.h"
#include "session.h"
#include "symbols.h"

#define LOG_BURST 5                   /* lines a peer can cause, per second and kind */
#define UNIX_PER_UID 16               /* Unix socket connections of one uid but root */
#define UNIX_ROOT_RESERVE 4           /* Unix socket connections only root may use */

/* Lines anyone who can connect can cause (denials, libmicrohttpd's notes
 * on broken clients) are logged at most LOG_BURST a second; the next line
 * logged says how many were not. */
struct ratelimit {
	uint64_t second;              /* CLOCK_MONOTONIC second counted */
	unsigned lines;               /* logged in it */
	uint64_t dropped;             /* not logged since the last line */
};

struct http_uid {
	uid_t uid;
	unsigned n;                   /* its connections; 0: a free slot */
};

/* One MHD daemon: the TCP listener or the Unix socket listener. */
struct http_listener {
	struct http *h;
	struct MHD_Daemon *mhd;
	int epfd;
	struct loop_source *io;
	struct loop_source *timer;
	uint64_t timer_deadline_ms;   /* CLOCK_MONOTONIC ms of the armed timer */
	bool running;                 /* inside MHD_run: no nested runs */
	bool local;                   /* the Unix socket: peers known by SO_PEERCRED */
	char *path;                   /* the Unix socket's path, removed at the end */
	struct http_uid *uids;        /* Unix socket: max_connections slots */
	unsigned nonroot;             /* Unix socket: connections of uids but root */
};

struct http {
	struct loop *loop;
	struct http_config cfg;
	struct http_sources src;
	char *token;
	char group_name[64];
	struct http_listener lis[2];
	unsigned nlis;
	struct http_pprof *pprof;     /* /debug/pprof/profile and its waiting requests */
	unsigned port;
	struct metrics_self self;     /* start_time_s kept across reads */
	struct metrics_http stats;
	struct ratelimit audit_rl;    /* denials */
	struct ratelimit mhd_rl;      /* libmicrohttpd's messages */
	bool stopping;
};

/* ---- responses --------------------------------------------------------- */

static enum MHD_Result queue(struct http *h, struct MHD_Connection *c, unsigned status,
			     struct MHD_Response *resp)
{
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	h->stats.requests++;
	r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

struct MHD_Response *http_text_response(const char *ctype, bool go_pprof, const char *fmt, ...)
{
	struct MHD_Response *resp;
	struct buf b = BUF_INIT;
	va_list ap;
	size_t len;
	char *data;
	int r;

	va_start(ap, fmt);
	r = buf_vprintf(&b, fmt, ap);
	va_end(ap);
	if (r < 0) {
		buf_release(&b);
		return NULL;
	}
	data = buf_steal(&b, &len);
	resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(data);
		return NULL;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (go_pprof)
		MHD_add_response_header(resp, "X-Go-Pprof", "1");
	return resp;
}

static const char index_page[] =
	"<!DOCTYPE html>\n"
	"<html><head><meta charset=\"utf-8\"><title>jprofd</title></head><body>\n"
	"<h1>jprofd %s</h1>\n"
	"<ul>\n"
	"<li><a href=\"/metrics\">/metrics</a>: Prometheus metrics of the daemon's health</li>\n"
	"<li><a href=\"/debug/pprof/profile?seconds=30\">/debug/pprof/profile?seconds=N</a>: "
	"CPU profile of the whole host over the next N seconds (gzipped pprof; default 30, at most %u); "
	"filters: pid, comm, unit, cgroup. Needs the bearer token, or root or the daemon's group "
	"on the Unix socket listener</li>\n"
	"</ul>\n"
	"<p>Example: <code>go tool pprof -top -http_header 'Authorization: Bearer TOKEN' "
	"http://HOST:PORT/debug/pprof/profile?seconds=10</code></p>\n"
	"</body></html>\n";

static struct MHD_Response *metrics_response(struct http *h)
{
	struct sampler_stats ss;
	struct symbols_stats sy;
	struct agentlink_stats as;
	struct hostview_stats hs;
	struct session_gate_stats gs;
	struct metrics_input in = { .version = JPROF_VERSION, .self = &h->self, .http = &h->stats };
	struct MHD_Response *resp;
	struct buf b = BUF_INIT;
	size_t len;
	char *data;

	if (h->src.sampler) {
		sampler_get_stats(h->src.sampler, &ss);
		in.sampler = &ss;
	}
	if (h->src.symbols) {
		symbols_get_stats(h->src.symbols, &sy);
		in.symbols = &sy;
	}
	if (h->src.agents) {
		agentlink_get_stats(h->src.agents, &as);
		in.agents = &as;
	}
	if (h->src.hostview) {
		hostview_get_stats(h->src.hostview, &hs);
		in.hostview = &hs;
	}
	if (h->src.sessions) {
		in.sessions = (unsigned)session_count(h->src.sessions);
		session_get_gate_stats(h->src.sessions, &gs);
		in.gate = &gs;
	}
	if (h->src.control)
		in.clients = control_client_count(h->src.control);
	http_get_stats(h, &h->stats);
	metrics_read_self(&h->self);
	if (metrics_render(&in, &b) < 0) {
		buf_release(&b);
		return http_text_response(HTTP_TEXT_PLAIN, false, "out of memory\n");
	}
	data = buf_steal(&b, &len);
	resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(data);
		return NULL;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	return resp;
}

/* ---- access (the rule is in http.h) -------------------------------------- */

/* "Authorization: Bearer TOKEN", or Basic with the token as the password
 * (any user name): the one way `go tool pprof` sends a credential, from a
 * URL http://jprof:TOKEN@HOST/... */
static bool token_presented(struct http *h, struct MHD_Connection *c)
{
	const char *auth;
	char *user, *pass = NULL;
	bool ok;

	if (!h->token)
		return false;
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!auth)
		return false;
	if (strncasecmp(auth, "Bearer ", 7) == 0) {
		auth += 7;
		while (*auth == ' ')
			auth++;
		return http_token_equal(h->token, auth);
	}
	if (strncasecmp(auth, "Basic ", 6) != 0)
		return false;
	user = MHD_basic_auth_get_username_password(c, &pass);
	ok = pass && http_token_equal(h->token, pass);
	if (pass) {
		explicit_bzero(pass, strlen(pass));
		MHD_free(pass);
	}
	MHD_free(user);
	return ok;
}

/* The credentials of a Unix socket client. */
static int local_peer(struct http *h, struct MHD_Connection *c, struct authz_peer *peer)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

	if (!ci || ci->connect_fd < 0)
		return -EBADF;
	return authz_peer_from_fd(ci->connect_fd, h->cfg.group, peer);
}

/* "root or a member of group jprof", or "root" without a group. */
static const char *privileged_who(struct http *h, char *buf, size_t len)
{
	if (!h->group_name[0])
		return "root";
	snprintf(buf, len, "root or a member of group %s", h->group_name);
	return buf;
}

/* 0 when c may read the URL; else the status to deny with (401 when the
 * token would help, 403 when no credential this listener accepts would)
 * and why, saying how to get access. */
static unsigned access_check(struct http_listener *l, struct MHD_Connection *c, bool profile,
			     char *why, size_t len, const char **reason, bool *root)
{
	struct http *h = l->h;
	struct authz_peer peer = { 0 };
	const char *socket_path = h->nlis > 1 ? h->lis[1].path : NULL;
	char who[96];

	*root = l->local && local_peer(h, c, &peer) == 0 && peer.uid == 0;
	if (token_presented(h, c))
		return 0;
	if (l->local && peer.privileged)
		return 0;
	if (!profile && (l->local || !h->token))
		return 0;  /* counters only */
	if (l->local) {
		*reason = "not root, not in the group, no token";
		snprintf(why, len, "profile data needs %s on this socket, or %s",
			 privileged_who(h, who, sizeof(who)),
			 h->token ? "the bearer token (send \"Authorization: Bearer TOKEN\")"
				  : "a bearer token (none is configured: see http_token_file in jprofd(8))");
		return h->token ? MHD_HTTP_UNAUTHORIZED : MHD_HTTP_FORBIDDEN;
	}
	if (h->token) {
		*reason = "missing or wrong bearer token";
		snprintf(why, len, "missing or wrong bearer token (send \"Authorization: Bearer TOKEN\"; "
			 "go tool pprof: http://jprof:TOKEN@HOST:PORT/...)");
		return MHD_HTTP_UNAUTHORIZED;
	}
	*reason = "profile data, and no bearer token is configured";
	snprintf(why, len, "profile data needs authorization, on loopback too, and no bearer token is "
		 "configured: set http_token_file (jprofd.conf) or --http-token-file to a file holding "
		 "one and send \"Authorization: Bearer TOKEN\"; or %s%s as %s",
		 socket_path ? "read it from the Unix socket " : "configure http_socket and read it there",
		 socket_path ? socket_path : "", privileged_who(h, who, sizeof(who)));
	return MHD_HTTP_FORBIDDEN;
}

/* Who the client is, for audit lines: its address, or on the Unix socket
 * its uid and pid. */
static void describe_client(struct http_listener *l, struct MHD_Connection *c, char *out, size_t len)
{
	const union MHD_ConnectionInfo *ci;
	struct authz_peer peer;
	char addr[INET6_ADDRSTRLEN] = "?";

	if (l->local) {
		if (local_peer(l->h, c, &peer) == 0)
			snprintf(out, len, "uid %u pid %d on %s", (unsigned)peer.uid, (int)peer.pid, l->path);
		else
			snprintf(out, len, "? on %s", l->path);
		return;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr) {
		const struct sockaddr *sa = ci->client_addr;

		if (sa->sa_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof(addr));
		else if (sa->sa_family == AF_INET6)
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof(addr));
	}
	snprintf(out, len, "%s", addr);
}

/* A URL as a log may show it: at most 120 bytes, control bytes and
 * non-ASCII as '?'. */
static void printable(const char *s, char *out, size_t len)
{
	size_t i;

	for (i = 0; s[i] && i + 1 < len && i < 120; i++)
		out[i] = s[i] >= ' ' && s[i] <= '~' ? s[i] : '?';
	out[i] = '\0';
}

/* True when a line may be logged now; *dropped: lines not logged before it. */
static bool ratelimit_pass(struct ratelimit *rl, uint64_t *dropped)
{
	uint64_t sec = clock_ns(CLOCK_MONOTONIC) / 1000000000ull;

	if (sec != rl->second) {
		rl->second = sec;
		rl->lines = 0;
	}
	if (rl->lines >= LOG_BURST) {
		rl->dropped++;
		return false;
	}
	rl->lines++;
	*dropped = rl->dropped;
	rl->dropped = 0;
	return true;
}

/* msg at lvl under rl; the line after a pause says how many were dropped. */
static void log_limited(struct ratelimit *rl, enum log_level lvl, const char *what, const char *msg)
{
	uint64_t dropped;

	if (!ratelimit_pass(rl, &dropped))
		return;
	if (dropped)
		log_msg(lvl, "%s (%llu more %s not logged)", msg, (unsigned long long)dropped, what);
	else
		log_msg(lvl, "%s", msg);
}

/* One audit line per denial, under the rate limit. */
static void audit_denied(struct http_listener *l, struct MHD_Connection *c, const char *method,
			 const char *url, unsigned status, const char *reason)
{
	struct http *h = l->h;
	char who[160], u[128], msg[512];

	h->stats.unauthorized++;
	describe_client(l, c, who, sizeof(who));
	printable(url, u, sizeof(u));
	snprintf(msg, sizeof(msg), "audit: denied: http %s %s from %s: %u, %s", method, u, who, status,
		 reason);
	log_limited(&h->audit_rl, LOG_LVL_NOTICE, "denials", msg);
}

/* ---- routing ------------------------------------------------------------ */

static enum MHD_Result answer_profile(struct http *h, struct MHD_Connection *c, void **con_cls,
				       bool root)
{
	unsigned status;
	struct MHD_Response *resp = http_pprof_answer(h->pprof, c, con_cls, root, &status);

	if (!resp && !status)
		return MHD_YES;  /* suspended until its seconds have passed */
	return queue(h, c, status, resp);
}

static enum MHD_Result deny(struct http_listener *l, struct MHD_Connection *c, const char *method,
			    const char *url, bool pprof, unsigned status, const char *why, const char *reason)
{
	struct MHD_Response *resp;

	audit_denied(l, c, method, url, status, reason);
	resp = http_text_response(HTTP_TEXT_PLAIN, pprof, "%s\n", why);
	if (resp && status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"jprofd\"");
	/* A denied client does not keep its connection slot. */
	if (resp)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	return queue(l->h, c, status, resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http_listener *l = cls;
	struct http *h = l->h;
	bool pprof = strncmp(url, "/debug/pprof/", 13) == 0;
	struct MHD_Response *resp;
	const char *reason = "";
	bool root = false;
	char why[512];
	unsigned denied;

	if (*con_cls)  /* a resumed profile request */
		return answer_profile(h, c, con_cls, false);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
		resp = http_text_response(HTTP_TEXT_PLAIN, pprof, "only GET and HEAD\n");
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
		return queue(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
	}
	if (*upload_data_size)  /* a GET with a body: ignore the body */
		*upload_data_size = 0;
	denied = access_check(l, c, pprof, why, sizeof(why), &reason, &root);
	if (denied)
		return deny(l, c, method, url, pprof, denied, why, reason);
	if (strcmp(url, "/metrics") == 0)
		return queue(h, c, MHD_HTTP_OK, metrics_response(h));
	if (strcmp(url, "/debug/pprof/profile") == 0)
		return answer_profile(h, c, con_cls, root);
	if (strcmp(url, "/") == 0)
		return queue(h, c, MHD_HTTP_OK, http_text_response("text/html; charset=utf-8", false, index_page,
							     JPROF_VERSION, h->cfg.max_seconds));
	return queue(h, c, MHD_HTTP_NOT_FOUND, http_text_response(HTTP_TEXT_PLAIN, pprof, "not found; see /\n"));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_listener *l = cls;

	if (!*con_cls)
		return;
	http_pprof_completed(l->h->pprof, *con_cls);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct http *h = cls;
	char msg[512];
	size_t n;

	memcpy(msg, "http: ", 6);
	vsnprintf(msg + 6, sizeof(msg) - 6, fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_limited(&h->mhd_rl, LOG_LVL_WARNING, "messages", msg);
}

/* On the Unix socket a uid other than root holds at most UNIX_PER_UID
 * connections, and all of them together leave UNIX_ROOT_RESERVE to root, so
 * idle connections cannot lock root out. A connection past that is shut
 * down at once (MHD then closes it). TCP peers have no uid: MHD's
 * connection limit and idle timeout are their bound. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct http_listener *l = cls;
	struct http_uid *slot = *socket_context, *free_slot = NULL;
	struct authz_peer peer = { .uid = (uid_t)-1 };
	const union MHD_ConnectionInfo *ci;
	char msg[256];

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (slot) {
			slot->n--;
			l->nonroot--;
		}
		*socket_context = NULL;
		return;
	}
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || ci->connect_fd < 0)
		return;
	if (authz_peer_from_fd(ci->connect_fd, l->h->cfg.group, &peer) == 0 && peer.uid == 0)
		return;
	for (unsigned i = 0; i < l->h->cfg.max_connections && !slot; i++) {
		if (l->uids[i].n && l->uids[i].uid == peer.uid)
			slot = &l->uids[i];
		else if (!l->uids[i].n && !free_slot)
			free_slot = &l->uids[i];
	}
	if (!slot)
		slot = free_slot;
	if (!slot || slot->n >= UNIX_PER_UID || l->nonroot + UNIX_ROOT_RESERVE >= l->h->cfg.max_connections) {
		snprintf(msg, sizeof(msg), "audit: denied: http connection from uid %u pid %d on %s: %u "
			 "connections of this uid, %u of every uid but root", (unsigned)peer.uid,
			 (int)peer.pid, l->path, slot ? slot->n : 0, l->nonroot);
		log_limited(&l->h->audit_rl, LOG_LVL_NOTICE, "denials", msg);
		shutdown(ci->connect_fd, SHUT_RDWR);
		return;
	}
	slot->uid = peer.uid;
	slot->n++;
	l->nonroot++;
	*socket_context = slot;
}

/* ---- the loop ----------------------------------------------------------- */

static void listener_run(struct http_listener *l);

static void on_mhd_timer(struct loop_source *src, void *arg)
{
	struct http_listener *l = arg;

	loop_remove(l->timer);
	l->timer = NULL;
	listener_run(l);
}

/* Runs MHD, then arms the loop timer for MHD's next timeout if it is
 * earlier than the armed one (an early wakeup only runs MHD once more). */
static void listener_run(struct http_listener *l)
{
	MHD_UNSIGNED_LONG_LONG ms;
	uint64_t now_ms, due;

	if (l->running || !l->mhd)
		return;
	l->running = true;
	MHD_run(l->mhd);
	l->running = false;
	if (l->h->stopping || MHD_get_timeout(l->mhd, &ms) != MHD_YES)
		return;
	now_ms = clock_ns(CLOCK_MONOTONIC) / 1000000ull;
	if (ms < 1)
		ms = 1;
	due = now_ms + ms;
	if (l->timer && l->timer_deadline_ms <= due)
		return;
	loop_remove(l->timer);
	l->timer = NULL;
	if (loop_add_timer(l->h->loop, ms, 0, on_mhd_timer, l, &l->timer) == 0)
		l->timer_deadline_ms = due;
}

static void on_mhd_io(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	listener_run(arg);
}

/* A waiting profile request was resumed: MHD sends its answer (a request
 * may wait on either listener). */
static void on_pprof_resumed(void *arg)
{
	struct http *h = arg;

	for (unsigned i = 0; i < h->nlis; i++)
		listener_run(&h->lis[i]);
}

/* Starts one listener: TCP on addr, or the Unix socket at path. */
static int listener_start(struct http *h, struct http_listener *l, const char *addr, const char *path)
{
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *di;
	socklen_t slen;
	bool loopback;
	int fd = -1, r = 0;
	struct MHD_OptionItem opts[] = {
		{ MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, h },
		{ MHD_OPTION_SOCK_ADDR, 0, &ss },
		{ MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_connections, NULL },
		{ MHD_OPTION_CONNECTION_TIMEOUT, 30, NULL },
		{ MHD_OPTION_CONNECTION_MEMORY_LIMIT, 65536, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, l },
		{ MHD_OPTION_END, 0, NULL },  /* the Unix socket's NOTIFY_CONNECTION */
		{ MHD_OPTION_END, 0, NULL },
	};

	l->h = h;
	l->epfd = -1;
	if (path) {
		l->local = true;
		l->path = strdup(path);
		if (!l->path)
			return -ENOMEM;
		r = control_listen_unix(path, &fd);
		if (r < 0) {
			log_err("http: cannot listen on %s: %s", path,
				r == -EEXIST ? "a file that is not a socket is in the way" : strerror(-r));
			free(l->path);
			l->path = NULL;  /* not ours to remove */
			goto out;
		}
		opts[1] = (struct MHD_OptionItem){ MHD_OPTION_LISTEN_SOCKET, fd, NULL };
		opts[6] = (struct MHD_OptionItem){ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, l };
		l->uids = calloc(h->cfg.max_connections, sizeof(*l->uids));
		if (!l->uids) {
			close(fd);
			r = -ENOMEM;
			goto out;
		}
	} else if (netaddr_parse(addr, &ss, &slen, &loopback) == 0) {
		if (ss.ss_family == AF_INET6)
			flags |= MHD_USE_IPv6;
	} else {
		log_err("http: \"%s\" is not ADDR:PORT", addr);
		r = -EINVAL;
		goto out;
	}
	l->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, l, MHD_OPTION_ARRAY, opts,
				  MHD_OPTION_END);
	if (!l->mhd) {
		r = -EADDRNOTAVAIL;
		log_err("http: cannot listen on %s (address in use or not available; see the line above)",
			path ? path : addr);
		goto out;
	}
	di = MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	l->epfd = di ? di->epoll_fd : -1;
	if (l->epfd < 0) {
		r = -EIO;
		log_err("http: libmicrohttpd has no epoll fd");
		goto out;
	}
	if (!path) {
		di = MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_BIND_PORT);
		h->port = di ? di->port : 0;
	}
	r = loop_add_io(h->loop, l->epfd, EPOLLIN, on_mhd_io, l, &l->io);
	if (r == 0 && path)
		log_info("http: listening on %s (profiles for root, the group or the token)", path);
	else if (r == 0)
		log_info("http: listening on %s (port %u)%s", addr, h->port,
			 h->token ? ", bearer token required" : ", profiles refused: no token configured");
out:
	return r;
}

static void listener_stop(struct http_listener *l)
{
	/* The epoll fd is MHD's: stop watching it before MHD closes it. */
	loop_remove(l->io);
	l->io = NULL;
	if (l->mhd)
		MHD_stop_daemon(l->mhd);
	l->mhd = NULL;
	loop_remove(l->timer);
	l->timer = NULL;
	if (l->path)
		unlink(l->path);
	free(l->path);
	l->path = NULL;
	free(l->uids);
	l->uids = NULL;
}

int http_new(struct loop *loop, const struct http_config *cfg, const struct http_sources *src,
	     struct http **out)
{
	struct sockaddr_storage ss;
	struct http_pprof_config pcfg;
	struct http *h;
	socklen_t slen;
	bool loopback = true;
	int r;

	*out = NULL;
	if (!cfg->listen && !cfg->socket)
		return -EINVAL;
	if (cfg->listen && netaddr_parse(cfg->listen, &ss, &slen, &loopback) < 0) {
		log_err("http: \"%s\" is not ADDR:PORT", cfg->listen);
		return -EINVAL;
	}
	if (!loopback && !cfg->token) {
		/* config_check refuses this first; the module keeps its own rule. */
		log_err("http: %s is not a loopback address and no token is set", cfg->listen);
		return -EPERM;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->cfg = *cfg;
	h->src = *src;
	h->cfg.listen = NULL;
	h->cfg.socket = NULL;
	h->cfg.token = NULL;
	h->cfg.group_name = NULL;
	if (cfg->group != (gid_t)-1 && cfg->group_name)
		snprintf(h->group_name, sizeof(h->group_name), "%s", cfg->group_name);
	else
		h->cfg.group = (gid_t)-1;
	if (!h->cfg.max_profiles)
		h->cfg.max_profiles = 8;
	if (!h->cfg.max_seconds)
		h->cfg.max_seconds = 600;
	if (!h->cfg.default_seconds)
		h->cfg.default_seconds = 30;
	if (h->cfg.default_seconds > h->cfg.max_seconds)
		h->cfg.default_seconds = h->cfg.max_seconds;
	if (!h->cfg.max_connections)
		h->cfg.max_connections = 64;
	h->self.start_time_s = (double)clock_ns(CLOCK_REALTIME) / 1e9;
	if (cfg->token) {
		h->token = strdup(cfg->token);
		if (!h->token) {
			r = -ENOMEM;
			goto fail;
		}
	}
	pcfg = (struct http_pprof_config){
		.loop = loop,
		.hostview = src->hostview,
		.host_rate_hz = src->host_rate_hz,
		.render = src->render,
		.max_windows = h->cfg.max_profiles,
		.max_waiting = h->cfg.max_connections,
		.max_seconds = h->cfg.max_seconds,
		.default_seconds = h->cfg.default_seconds,
		.resumed = on_pprof_resumed,
		.ctx = h,
	};
	r = http_pprof_new(&pcfg, &h->pprof);
	if (r < 0)
		goto fail;
	/* Counted before starting: messages name the other listener. */
	h->nlis = (cfg->listen ? 1 : 0) + (cfg->socket ? 1 : 0);
	r = 0;
	if (cfg->listen)
		r = listener_start(h, &h->lis[0], cfg->listen, NULL);
	if (r == 0 && cfg->socket)
		r = listener_start(h, &h->lis[cfg->listen ? 1 : 0], NULL, cfg->socket);
	if (r < 0)
		goto fail;
	*out = h;
	return 0;
fail:
	http_free(h);
	return r;
}

void http_free(struct http *h)
{
	if (!h)
		return;
	h->stopping = true;
	/* Waiting profile requests get a 503 on their way out. */
	if (h->pprof)
		http_pprof_resume_all(h->pprof);
	for (unsigned i = 0; i < h->nlis; i++) {
		h->lis[i].running = false;
		if (h->lis[i].mhd)
			MHD_run(h->lis[i].mhd);
	}
	for (unsigned i = 0; i < h->nlis; i++)
		listener_stop(&h->lis[i]);
	http_pprof_free(h->pprof);
	if (h->token) {
		explicit_bzero(h->token, strlen(h->token));
		free(h->token);
	}
	free(h);
}

unsigned http_port(const struct http *h)
{
	return h->port;
}

void http_get_stats(const struct http *h, struct metrics_http *out)
{
	struct http_pprof_stats ps = { 0 };

	*out = h->stats;
	if (h->pprof)
		http_pprof_get_stats(h->pprof, &ps);
	out->profiles_in_flight = ps.waiting;
	out->profile_windows = ps.windows;
	out->rejected_busy = ps.rejected_busy;
	out->profiles_shared = ps.shared;
	out->profiles_cancelled = ps.cancelled;
}
