#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agentlink.h"
#include "buf.h"
#include "clock.h"
#include "control.h"
#include "hostview.h"
#include "http_pprof.h"
#include "log.h"
#include "loop.h"
#include "sampler.h"
#include "session.h"
#include "symbols.h"

struct http {
	struct loop *loop;
	struct http_config cfg;
	struct http_sources src;
	char *token;
	struct MHD_Daemon *mhd;
	int epfd;
	struct loop_source *io;
	struct loop_source *timer;
	uint64_t timer_deadline_ms;   /* CLOCK_MONOTONIC ms of the armed timer */
	struct http_pprof *pprof;     /* /debug/pprof/profile and its waiting requests */
	unsigned port;
	struct metrics_self self;     /* start_time_s kept across reads */
	struct metrics_http stats;
	bool running;                 /* inside MHD_run: no nested runs */
	bool stopping;
};

/* ---- configuration helpers ------------------------------------------- */

static int parse_port(const char *s, unsigned *port)
{
	unsigned long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 65535)
		return -EINVAL;
	*port = (unsigned)v;
	return 0;
}

int http_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len, bool *loopback)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *port_s;
	unsigned port;
	size_t hl;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		hl = (size_t)(close - s - 1);
		if (hl == 0 || hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hl);
		host[hl] = '\0';
		port_s = close + 2;
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			snprintf(host, sizeof(host), "127.0.0.1");
			port_s = s;
		} else {
			hl = (size_t)(colon - s);
			if (hl >= sizeof(host) || memchr(s, ':', hl))
				return -EINVAL;  /* a bare IPv6 address needs brackets */
			memcpy(host, s, hl);
			host[hl] = '\0';
			if (!hl)
				snprintf(host, sizeof(host), "127.0.0.1");
			port_s = colon + 1;
		}
	}
	if (parse_port(port_s, &port) < 0)
		return -EINVAL;
	if (strchr(host, ':')) {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
			return -EINVAL;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a6);
		*loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ||
			    (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127);
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
			return -EINVAL;
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*len = sizeof(*a4);
		*loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	}
	return 0;
}

int http_token_read(const char *path, char **out, char *err, size_t errlen)
{
	char data[HTTP_TOKEN_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd, r = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		snprintf(err, errlen, "http token file %s: not a regular file", path);
		goto out;
	}
	if (st.st_mode & (S_IROTH | S_IWOTH)) {
		r = -EPERM;
		snprintf(err, errlen, "http token file %s: mode %04o lets other users read or write it; "
			 "chmod o-rw %s", path, (unsigned)(st.st_mode & 07777), path);
		goto out;
	}
	n = read(fd, data, sizeof(data) - 1);
	if (n < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		goto out;
	}
	len = (size_t)n;
	while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		len--;
	data[len] = '\0';
	if ((size_t)n > HTTP_TOKEN_MAX + 1 || len > HTTP_TOKEN_MAX || len < HTTP_TOKEN_MIN) {
		r = -EINVAL;
		snprintf(err, errlen, "http token file %s: the token must be %d..%d bytes long", path,
			 HTTP_TOKEN_MIN, HTTP_TOKEN_MAX);
		goto out;
	}
	for (size_t i = 0; i < len; i++) {
		if (data[i] <= ' ' || data[i] > '~') {
			r = -EINVAL;
			snprintf(err, errlen, "http token file %s: the token must be one line of visible "
				 "ASCII characters (no spaces)", path);
			goto out;
		}
	}
	*out = strdup(data);
	if (!*out) {
		r = -ENOMEM;
		snprintf(err, errlen, "http token file %s: out of memory", path);
	}
out:
	explicit_bzero(data, sizeof(data));
	close(fd);
	return r;
}

bool http_token_equal(const char *expected, const char *presented)
{
	size_t el = strlen(expected), i, pl = 0;
	unsigned char diff = 0;
	bool ended = false;

	/* Walks the expected token only; a shorter presented token is read up
	 * to its NUL and then compared against zeros. */
	for (i = 0; i < el; i++) {
		unsigned char p = ended ? 0 : (unsigned char)presented[i];

		if (!p)
			ended = true;
		else
			pl++;
		diff |= (unsigned char)expected[i] ^ p;
	}
	if (!ended && presented[el] != '\0')
		diff |= 1;
	return diff == 0 && pl == el;
}

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
	"filters: pid, comm, unit, cgroup</li>\n"
	"</ul>\n"
	"<p>Example: <code>go tool pprof -top http://HOST:PORT/debug/pprof/profile?seconds=10</code></p>\n"
	"</body></html>\n";

static struct MHD_Response *metrics_response(struct http *h)
{
	struct sampler_stats ss;
	struct symbols_stats sy;
	struct agentlink_stats as;
	struct hostview_stats hs;
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
	if (h->src.sessions)
		in.sessions = (unsigned)session_count(h->src.sessions);
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

/* ---- routing ------------------------------------------------------------ */

static enum MHD_Result answer_profile(struct http *h, struct MHD_Connection *c, void **con_cls)
{
	unsigned status;
	struct MHD_Response *resp = http_pprof_answer(h->pprof, c, con_cls, &status);

	if (!resp && !status)
		return MHD_YES;  /* suspended until its seconds have passed */
	return queue(h, c, status, resp);
}

static bool authorized(struct http *h, struct MHD_Connection *c)
{
	const char *auth;

	if (!h->token)
		return true;
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
		return false;
	auth += 7;
	while (*auth == ' ')
		auth++;
	return http_token_equal(h->token, auth);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http *h = cls;
	bool pprof = strncmp(url, "/debug/pprof/", 13) == 0;
	struct MHD_Response *resp;

	if (*con_cls)  /* a resumed profile request */
		return answer_profile(h, c, con_cls);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
		resp = http_text_response(HTTP_TEXT_PLAIN, pprof, "only GET and HEAD\n");
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
		return queue(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
	}
	if (*upload_data_size)  /* a GET with a body: ignore the body */
		*upload_data_size = 0;
	if (!authorized(h, c)) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		char addr[INET6_ADDRSTRLEN] = "?";

		if (ci && ci->client_addr) {
			const struct sockaddr *sa = ci->client_addr;

			if (sa->sa_family == AF_INET)
				inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof(addr));
			else if (sa->sa_family == AF_INET6)
				inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof(addr));
		}
		h->stats.unauthorized++;
		log_audit("denied: http %s %s from %s: missing or wrong bearer token", method, url, addr);
		resp = http_text_response(HTTP_TEXT_PLAIN, pprof, "missing or wrong bearer token "
				     "(send \"Authorization: Bearer TOKEN\")\n");
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"jprofd\"");
		return queue(h, c, MHD_HTTP_UNAUTHORIZED, resp);
	}
	if (strcmp(url, "/metrics") == 0)
		return queue(h, c, MHD_HTTP_OK, metrics_response(h));
	if (strcmp(url, "/debug/pprof/profile") == 0)
		return answer_profile(h, c, con_cls);
	if (strcmp(url, "/") == 0)
		return queue(h, c, MHD_HTTP_OK, http_text_response("text/html; charset=utf-8", false, index_page,
							     JPROF_VERSION, h->cfg.max_seconds));
	return queue(h, c, MHD_HTTP_NOT_FOUND, http_text_response(HTTP_TEXT_PLAIN, pprof, "not found; see /\n"));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http *h = cls;

	if (!*con_cls)
		return;
	http_pprof_completed(h->pprof, *con_cls);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_warn("http: %s", msg);
}

/* ---- the loop ----------------------------------------------------------- */

static void http_run(struct http *h);

static void on_mhd_timer(struct loop_source *src, void *arg)
{
	struct http *h = arg;

	loop_remove(h->timer);
	h->timer = NULL;
	http_run(h);
}

/* Runs MHD, then arms the loop timer for MHD's next timeout if it is
 * earlier than the armed one (an early wakeup only runs MHD once more). */
static void http_run(struct http *h)
{
	MHD_UNSIGNED_LONG_LONG ms;
	uint64_t now_ms, due;

	if (h->running || !h->mhd)
		return;
	h->running = true;
	MHD_run(h->mhd);
	h->running = false;
	if (h->stopping || MHD_get_timeout(h->mhd, &ms) != MHD_YES)
		return;
	now_ms = clock_ns(CLOCK_MONOTONIC) / 1000000ull;
	if (ms < 1)
		ms = 1;
	due = now_ms + ms;
	if (h->timer && h->timer_deadline_ms <= due)
		return;
	loop_remove(h->timer);
	h->timer = NULL;
	if (loop_add_timer(h->loop, ms, 0, on_mhd_timer, h, &h->timer) == 0)
		h->timer_deadline_ms = due;
}

static void on_mhd_io(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	http_run(arg);
}

/* A waiting profile request was resumed: MHD sends its answer. */
static void on_pprof_resumed(void *arg)
{
	http_run(arg);
}

int http_new(struct loop *loop, const struct http_config *cfg, const struct http_sources *src,
	     struct http **out)
{
	struct sockaddr_storage ss;
	struct http_pprof_config pcfg;
	const union MHD_DaemonInfo *di;
	struct http *h;
	socklen_t slen;
	bool loopback;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	int r;

	*out = NULL;
	if (http_addr_parse(cfg->listen, &ss, &slen, &loopback) < 0) {
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
	h->epfd = -1;
	h->cfg.listen = NULL;
	h->cfg.token = NULL;
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
		.max_profiles = h->cfg.max_profiles,
		.max_seconds = h->cfg.max_seconds,
		.default_seconds = h->cfg.default_seconds,
		.resumed = on_pprof_resumed,
		.ctx = h,
	};
	r = http_pprof_new(&pcfg, &h->pprof);
	if (r < 0)
		goto fail;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
				  MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_CONNECTION_LIMIT, h->cfg.max_connections,
				  MHD_OPTION_CONNECTION_TIMEOUT, 30u,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				  MHD_OPTION_END);
	if (!h->mhd) {
		r = -EADDRNOTAVAIL;
		log_err("http: cannot listen on %s (address in use or not available; see the line above)",
			cfg->listen);
		goto fail;
	}
	di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	h->epfd = di ? di->epoll_fd : -1;
	if (h->epfd < 0) {
		r = -EIO;
		log_err("http: libmicrohttpd has no epoll fd");
		goto fail;
	}
	di = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
	h->port = di ? di->port : 0;
	r = loop_add_io(loop, h->epfd, EPOLLIN, on_mhd_io, h, &h->io);
	if (r < 0)
		goto fail;
	log_info("http: listening on %s (port %u)%s", cfg->listen, h->port,
		 h->token ? ", bearer token required" : "");
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
	if (h->mhd) {
		http_pprof_resume_all(h->pprof);
		h->running = false;
		MHD_run(h->mhd);
	}
	/* The epoll fd is MHD's: stop watching it before MHD closes it. */
	loop_remove(h->io);
	h->io = NULL;
	if (h->mhd)
		MHD_stop_daemon(h->mhd);
	http_pprof_free(h->pprof);
	loop_remove(h->timer);
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
	*out = h->stats;
	out->profiles_in_flight = h->pprof ? http_pprof_waiting(h->pprof) : 0;
	out->rejected_busy = h->pprof ? http_pprof_rejected(h->pprof) : 0;
}
