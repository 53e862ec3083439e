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
#include "control.h"
#include "export.h"
#include "hostview.h"
#include "log.h"
#include "loop.h"
#include "sampler.h"
#include "session.h"
#include "store.h"
#include "symbols.h"

#define FILTER_MAX 256                /* bytes of a comm/unit/cgroup filter */

/* One /debug/pprof/profile request waiting for its seconds to pass. */
struct pending {
	struct http *h;
	struct pending *next;
	struct MHD_Connection *conn;
	struct loop_source *timer;
	uint64_t t0_mono_ns, t0_unix_ns;
	struct hostview_tap *tap;     /* collects exactly this request's window */
	unsigned seconds;
	pid_t pid;
	char *comm, *unit, *cgroup;
	struct MHD_Response *resp;    /* ready to queue after resume */
	unsigned status;
};

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
	struct pending *pending;
	unsigned npending;
	unsigned port;
	struct metrics_self self;     /* start_time_s kept across reads */
	struct metrics_http stats;
	bool running;                 /* inside MHD_run: no nested runs */
	bool stopping;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static struct MHD_Response *text_response(const char *ctype, bool go_pprof, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static struct MHD_Response *text_response(const char *ctype, bool go_pprof, const char *fmt, ...)
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

#define TEXT_PLAIN "text/plain; charset=utf-8"

/* An error of the pprof contract: text/plain with X-Go-Pprof: 1, which
 * makes `go tool pprof` print the message instead of a parse error. */
#define pprof_error(fmt, ...) text_response(TEXT_PLAIN, true, fmt "\n", ##__VA_ARGS__)

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
	h->stats.profiles_in_flight = h->npending;
	metrics_read_self(&h->self);
	if (metrics_render(&in, &b) < 0) {
		buf_release(&b);
		return text_response(TEXT_PLAIN, false, "out of memory\n");
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

/* ---- the profile contract ---------------------------------------------- */

static void pending_free(struct pending *p)
{
	if (!p)
		return;
	loop_remove(p->timer);
	store_free(hostview_tap_close(p->tap));
	if (p->resp)
		MHD_destroy_response(p->resp);
	free(p->comm);
	free(p->unit);
	free(p->cgroup);
	free(p);
}

static void pending_unlink(struct http *h, struct pending *p)
{
	for (struct pending **pp = &h->pending; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			h->npending--;
			return;
		}
	}
}

/* Renders what the request's tap collected as gzipped pprof into p->resp. */
static void profile_render(struct http *h, struct pending *p)
{
	uint64_t now = mono_ns();
	struct export_meta meta = {
		.pid = (uint32_t)(p->pid > 0 ? p->pid : 0),
		.comm = p->comm,
		.event = "cpu-clock",
		.start_unix_ns = p->t0_unix_ns,
		.period_type = sample_types_cpu[1],
		.period = h->src.host_rate_hz ? 1000000000ull / h->src.host_rate_hz : 0,
		.status = "complete",
	};
	struct export_options opt = { 0 };
	struct store *st = NULL;
	struct buf b = BUF_INIT;
	size_t len;
	char *data;
	int r;

	st = hostview_tap_close(p->tap);
	p->tap = NULL;
	if (!st) {
		p->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		p->resp = pprof_error("out of memory");
		goto out;
	}
	meta.duration_ns = now - p->t0_mono_ns;
	r = export_render(st, &meta, &opt, JPROF_FMT_PPROF, &b);
	if (r < 0) {
		log_err("http: rendering a %u s profile failed: %s", p->seconds, strerror(-r));
		p->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		p->resp = pprof_error("could not render the profile: %s", strerror(-r));
		goto out;
	}
	data = buf_steal(&b, &len);
	p->resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!p->resp) {
		free(data);
		goto out;
	}
	MHD_add_response_header(p->resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(p->resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION,
				"attachment; filename=\"profile\"");
	MHD_add_response_header(p->resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	p->status = MHD_HTTP_OK;
out:
	buf_release(&b);
	store_free(st);
}

static void http_run(struct http *h);

static void on_profile_due(struct loop_source *src, void *arg)
{
	struct pending *p = arg;
	struct http *h = p->h;

	loop_remove(p->timer);
	p->timer = NULL;
	profile_render(h, p);
	MHD_resume_connection(p->conn);
	http_run(h);
}

static int dup_arg(struct MHD_Connection *c, const char *key, char **out)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

	*out = NULL;
	if (!v || !*v)
		return 0;
	if (strlen(v) >= FILTER_MAX)
		return -E2BIG;
	*out = strdup(v);
	return *out ? 0 : -ENOMEM;
}

static bool parse_int(const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return s[0] && !*end && !errno;
}

static enum MHD_Result handle_profile(struct http *h, struct MHD_Connection *c, void **con_cls)
{
	struct pending *p = *con_cls;
	const char *secs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	const char *pid = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pid");
	long n = 0, pidv = 0;
	int r;

	if (p) {
		/* Resumed: the profile (or the error) is ready. */
		struct MHD_Response *resp = p->resp;

		p->resp = NULL;
		if (!resp)
			resp = pprof_error("jprofd is shutting down");
		return queue(h, c, resp && p->status ? p->status : MHD_HTTP_SERVICE_UNAVAILABLE, resp);
	}
	if (!h->src.hostview)
		return queue(h, c, MHD_HTTP_SERVICE_UNAVAILABLE,
			     pprof_error("the host view is off (rate = 0): jprofd keeps no continuous "
					 "profile to serve; set rate to a non-zero Hz"));
	if (secs && *secs && !parse_int(secs, &n))
		return queue(h, c, MHD_HTTP_BAD_REQUEST,
			     pprof_error("seconds must be an integer, not \"%.64s\"", secs));
	if (pid && *pid && (!parse_int(pid, &pidv) || pidv <= 0 || pidv > INT32_MAX))
		return queue(h, c, MHD_HTTP_BAD_REQUEST,
			     pprof_error("pid must be a process id, not \"%.64s\"", pid));
	if (h->npending >= h->cfg.max_profiles) {
		h->stats.rejected_busy++;
		return queue(h, c, MHD_HTTP_SERVICE_UNAVAILABLE,
			     pprof_error("too many profile requests waiting (%u); try again later",
					 h->npending));
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return queue(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR, pprof_error("out of memory"));
	p->h = h;
	p->conn = c;
	p->pid = (pid_t)pidv;
	if (n <= 0)
		n = h->cfg.default_seconds;
	p->seconds = n > (long)h->cfg.max_seconds ? h->cfg.max_seconds : (unsigned)n;
	r = dup_arg(c, "comm", &p->comm);
	if (r == 0)
		r = dup_arg(c, "unit", &p->unit);
	if (r == 0)
		r = dup_arg(c, "cgroup", &p->cgroup);
	if (r < 0) {
		pending_free(p);
		if (r == -E2BIG)
			return queue(h, c, MHD_HTTP_BAD_REQUEST,
				     pprof_error("a filter is longer than %d bytes", FILTER_MAX - 1));
		return queue(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR, pprof_error("out of memory"));
	}
	p->t0_mono_ns = mono_ns();
	p->t0_unix_ns = unix_ns();
	{
		struct hostview_filter f = { .pid = p->pid, .comm = p->comm, .unit = p->unit,
					     .cgroup = p->cgroup };

		/* Exactly the samples drained during the next N seconds, so
		 * back-to-back scrapes never share one. */
		r = hostview_tap_open(h->src.hostview, &f, &p->tap);
	}
	if (r == 0)
		r = loop_add_timer(h->loop, (uint64_t)p->seconds * 1000, 0, on_profile_due, p,
				   &p->timer);
	if (r < 0) {
		pending_free(p);
		return queue(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR,
			     pprof_error("cannot start a timer: %s", strerror(-r)));
	}
	p->next = h->pending;
	h->pending = p;
	h->npending++;
	*con_cls = p;
	log_debug("http: profile of %u s (pid %d, comm %s, unit %s, cgroup %s)", p->seconds, (int)p->pid,
		  p->comm ? p->comm : "-", p->unit ? p->unit : "-", p->cgroup ? p->cgroup : "-");
	MHD_suspend_connection(c);
	return MHD_YES;
}

/* ---- routing ------------------------------------------------------------ */

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
		return handle_profile(h, c, con_cls);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
		resp = text_response(TEXT_PLAIN, pprof, "only GET and HEAD\n");
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
		resp = text_response(TEXT_PLAIN, pprof, "missing or wrong bearer token "
				     "(send \"Authorization: Bearer TOKEN\")\n");
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"jprofd\"");
		return queue(h, c, MHD_HTTP_UNAUTHORIZED, resp);
	}
	if (strcmp(url, "/metrics") == 0)
		return queue(h, c, MHD_HTTP_OK, metrics_response(h));
	if (strcmp(url, "/debug/pprof/profile") == 0)
		return handle_profile(h, c, con_cls);
	if (strcmp(url, "/") == 0)
		return queue(h, c, MHD_HTTP_OK, text_response("text/html; charset=utf-8", false, index_page,
							     JPROF_VERSION, h->cfg.max_seconds));
	return queue(h, c, MHD_HTTP_NOT_FOUND, text_response(TEXT_PLAIN, pprof, "not found; see /\n"));
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http *h = cls;
	struct pending *p = *con_cls;

	if (!p)
		return;
	pending_unlink(h, p);
	pending_free(p);
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
	now_ms = mono_ns() / 1000000ull;
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

int http_new(struct loop *loop, const struct http_config *cfg, const struct http_sources *src,
	     struct http **out)
{
	struct sockaddr_storage ss;
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
	h->self.start_time_s = (double)unix_ns() / 1e9;
	if (cfg->token) {
		h->token = strdup(cfg->token);
		if (!h->token) {
			r = -ENOMEM;
			goto fail;
		}
	}
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
	/* Waiting profile requests get a 503 (resp NULL) on their way out. */
	for (struct pending *p = h->pending; p; p = p->next) {
		loop_remove(p->timer);
		p->timer = NULL;
		if (h->mhd)
			MHD_resume_connection(p->conn);
	}
	if (h->mhd) {
		h->running = false;
		MHD_run(h->mhd);
	}
	/* The epoll fd is MHD's: stop watching it before MHD closes it. */
	loop_remove(h->io);
	h->io = NULL;
	if (h->mhd)
		MHD_stop_daemon(h->mhd);
	/* MHD calls on_completed for every connection it closed; anything
	 * left was never handed back. */
	while (h->pending) {
		struct pending *p = h->pending;

		h->pending = p->next;
		pending_free(p);
	}
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
	out->profiles_in_flight = h->npending;
}
