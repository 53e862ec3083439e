#include "http_pprof.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include "buf.h"
#include "clock.h"
#include "export.h"
#include "hostview.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "profile_msg.h"
#include "render.h"
#include "store.h"

#define FILTER_MAX 256                /* bytes of a comm/unit/cgroup filter */
#define JOIN_MAX_MS 1000              /* a window takes new requests this long at most */
#define MSG_MAX 160

/* An error of the pprof contract: text/plain with X-Go-Pprof: 1, which
 * makes `go tool pprof` print the message instead of a parse error. */
#define pprof_error(fmt, ...) http_text_response(HTTP_TEXT_PLAIN, true, fmt "\n", ##__VA_ARGS__)

/* A rendered profile, shared by the responses of every request of its
 * window; MHD reads it through a callback and the last user frees it. */
struct pp_blob {
	unsigned refs;
	size_t len;
	char *data;
};

/* What a request asks for; two requests with equal keys may share a window. */
struct pp_key {
	unsigned seconds;
	pid_t pid;
	const char *comm, *unit, *cgroup;   /* NULL: no filter */
};

struct pp_waiter;

/* One tap and one timer for the requests that share them. */
struct pp_window {
	struct http_pprof *pp;
	struct pp_window *next;
	struct pp_waiter *waiters;          /* still waiting */
	struct loop_source *timer;
	struct hostview_tap *tap;
	struct render_job *job;             /* due: its profile is being rendered */
	uint64_t t0_mono_ns, t0_unix_ns;
	uint64_t hv_samples_at_open;        /* the host view's sample count then */
	struct pp_key key;                  /* strings owned */
};

/* One request (one MHD connection's *con_cls) from its suspension until
 * MHD says the connection is done. */
struct pp_waiter {
	struct http_pprof *pp;
	struct pp_waiter *next, *prev;      /* every waiter of pp */
	struct pp_waiter *wnext;            /* in its window */
	struct pp_window *win;              /* NULL once answered or dropped */
	struct MHD_Connection *conn;
	struct loop_source *hup;            /* the client's socket, watched for a hang-up */
	struct pp_blob *blob;               /* the profile, once ready */
	unsigned status;                    /* 0: no answer (shutdown) */
	bool gone;                          /* hung up: close without answering */
	char msg[MSG_MAX];                  /* the error for a status other than 200 */
};

struct http_pprof {
	struct http_pprof_config cfg;
	struct pp_window *windows;
	struct pp_waiter *waiters;
	struct http_pprof_stats st;
};

int http_pprof_new(const struct http_pprof_config *cfg, struct http_pprof **out)
{
	struct http_pprof *pp = calloc(1, sizeof(*pp));

	*out = pp;
	if (!pp)
		return -ENOMEM;
	pp->cfg = *cfg;
	return 0;
}

/* ---- shared profile bytes ---------------------------------------------- */

static void blob_unref(struct pp_blob *b)
{
	if (!b || --b->refs)
		return;
	free(b->data);
	free(b);
}

static void blob_free_cb(void *cls)
{
	blob_unref(cls);
}

static ssize_t blob_read_cb(void *cls, uint64_t pos, char *out, size_t max)
{
	struct pp_blob *b = cls;
	size_t n;

	if (pos >= b->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	n = b->len - (size_t)pos;
	if (n > max)
		n = max;
	memcpy(out, b->data + pos, n);
	return (ssize_t)n;
}

/* A response reading b (one more reference on it); NULL on ENOMEM. */
static struct MHD_Response *blob_response(struct pp_blob *b)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_callback(b->len, 64 * 1024, blob_read_cb, b, blob_free_cb);
	if (!resp)
		return NULL;
	b->refs++;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION,
				"attachment; filename=\"profile\"");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	return resp;
}

/* ---- windows and waiters ------------------------------------------------- */

static void window_free(struct pp_window *w)
{
	struct http_pprof *pp;

	if (!w)
		return;
	pp = w->pp;
	for (struct pp_window **pw = &pp->windows; *pw; pw = &(*pw)->next) {
		if (*pw == w) {
			*pw = w->next;
			pp->st.windows--;
			break;
		}
	}
	loop_remove(w->timer);
	render_cancel(w->job);
	store_free(hostview_tap_close(w->tap));
	free((char *)w->key.comm);
	free((char *)w->key.unit);
	free((char *)w->key.cgroup);
	free(w);
}

/* Takes a waiter out of its window; the window goes with its last waiter. */
static void waiter_detach(struct pp_waiter *p)
{
	struct pp_window *w = p->win;

	loop_remove(p->hup);
	p->hup = NULL;
	if (!w)
		return;
	for (struct pp_waiter **pq = &w->waiters; *pq; pq = &(*pq)->wnext) {
		if (*pq == p) {
			*pq = p->wnext;
			p->pp->st.waiting--;
			break;
		}
	}
	p->win = NULL;
	p->wnext = NULL;
	if (!w->waiters)
		window_free(w);
}

static void waiter_free(struct pp_waiter *p)
{
	struct http_pprof *pp;

	if (!p)
		return;
	pp = p->pp;
	waiter_detach(p);
	if (p->prev)
		p->prev->next = p->next;
	else if (pp->waiters == p)
		pp->waiters = p->next;
	if (p->next)
		p->next->prev = p->prev;
	blob_unref(p->blob);
	free(p);
}

void http_pprof_free(struct http_pprof *pp)
{
	if (!pp)
		return;
	/* MHD calls on_completed for every connection it closed; anything
	 * left was never handed back. */
	while (pp->waiters)
		waiter_free(pp->waiters);
	while (pp->windows)
		window_free(pp->windows);
	free(pp);
}

void http_pprof_completed(struct http_pprof *pp, void *con_cls)
{
	waiter_free(con_cls);
}

/* Hands the window's result to each of its waiters and resumes them. */
static void window_finish(struct pp_window *w, struct pp_blob *blob, unsigned status, const char *msg)
{
	struct http_pprof *pp = w->pp;
	struct pp_waiter *p;

	while ((p = w->waiters)) {
		struct MHD_Connection *c = p->conn;
		bool last = !p->wnext;

		p->status = status;
		snprintf(p->msg, sizeof(p->msg), "%s", msg);
		if (blob) {
			blob->refs++;
			p->blob = blob;
		}
		waiter_detach(p);  /* the last one frees w */
		MHD_resume_connection(c);
		if (last) {
			w = NULL;
			break;
		}
	}
	window_free(w);
	pp->cfg.resumed(pp->cfg.ctx);
}

void http_pprof_resume_all(struct http_pprof *pp)
{
	/* Their status stays 0: answered 503 on the way out. */
	while (pp->windows)
		window_finish(pp->windows, NULL, 0, "");
}

void http_pprof_get_stats(const struct http_pprof *pp, struct http_pprof_stats *out)
{
	*out = pp->st;
}

/* The worker rendered a window (render.h): its bytes go to every request
 * still waiting. */
static void on_window_rendered(void *arg, int err, struct buf *out)
{
	struct pp_window *w = arg;
	struct pp_blob *b = NULL;
	char msg[MSG_MAX] = "";

	w->job = NULL;
	if (err < 0) {
		log_err("http: rendering a %u s profile failed: %s", w->key.seconds, strerror(-err));
		snprintf(msg, sizeof(msg), "could not render the profile: %s", strerror(-err));
	} else if ((b = calloc(1, sizeof(*b)))) {
		b->refs = 1;
		b->data = buf_steal(out, &b->len);
	} else {
		snprintf(msg, sizeof(msg), "out of memory");
	}
	window_finish(w, b, b ? MHD_HTTP_OK : MHD_HTTP_INTERNAL_SERVER_ERROR, msg);
	blob_unref(b);
}

/* Hands what the window's tap collected to the render worker, as gzipped
 * pprof; the window keeps its requests until on_window_rendered. */
static void on_window_due(struct loop_source *src, void *arg)
{
	struct pp_window *w = arg;
	struct export_meta meta = {
		.pid = (uint32_t)(w->key.pid > 0 ? w->key.pid : 0),
		.comm = w->key.comm,
		.status = "complete",
	};
	struct render_req req = { .meta = &meta, .fmt = JPROF_FMT_PPROF };
	uint64_t from, to;
	int r;

	loop_remove(w->timer);
	w->timer = NULL;
	profile_msg_host_meta(&meta, w->pp->cfg.host_rate_hz);
	/* The tap holds what the drains of the window delivered, taken from
	 * the drain before it opened to the last drain: that is the duration,
	 * not the timer's, or a busy host would show more than 100% per CPU. */
	hostview_tap_span(w->tap, &from, &to);
	if (!from || from > w->t0_mono_ns || to < from) {
		from = w->t0_mono_ns;
		to = clock_ns(CLOCK_MONOTONIC);
	}
	meta.start_unix_ns = w->t0_unix_ns - (w->t0_mono_ns - from);
	meta.duration_ns = to - from;
	req.st = hostview_tap_close(w->tap);
	w->tap = NULL;
	r = req.st ? render_submit(w->pp->cfg.render, &req, on_window_rendered, w, &w->job) : -ENOMEM;
	if (r < 0) {
		store_free(req.st);
		on_window_rendered(w, r, NULL);
	}
}

/* The client of a waiting request closed its end: drop the request now
 * (and its window's tap and timer with the last request), then let MHD
 * close the connection. */
static void on_hangup(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct pp_waiter *p = arg;
	struct http_pprof *pp = p->pp;

	pp->st.cancelled++;
	log_debug("http: a profile request's client hung up; request dropped");
	waiter_detach(p);
	p->gone = true;
	MHD_resume_connection(p->conn);
	pp->cfg.resumed(pp->cfg.ctx);
}

static uint64_t hostview_samples(struct hostview *hv)
{
	struct hostview_stats st;

	hostview_get_stats(hv, &st);
	return st.samples;
}

static bool str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* An open window k may join: the same key, opened within JOIN_MAX_MS, and
 * no sample taken in since, so its tap holds what a new one would. */
static struct pp_window *window_find(struct http_pprof *pp, const struct pp_key *k)
{
	uint64_t now = clock_ns(CLOCK_MONOTONIC);
	uint64_t samples = 0;
	bool have_samples = false;

	for (struct pp_window *w = pp->windows; w; w = w->next) {
		if (w->key.seconds != k->seconds || w->key.pid != k->pid || !str_eq(w->key.comm, k->comm) ||
		    !str_eq(w->key.unit, k->unit) || !str_eq(w->key.cgroup, k->cgroup))
			continue;
		if (now - w->t0_mono_ns >= (uint64_t)JOIN_MAX_MS * 1000000ull)
			continue;
		if (!have_samples) {
			samples = hostview_samples(pp->cfg.hostview);
			have_samples = true;
		}
		if (samples == w->hv_samples_at_open)
			return w;
	}
	return NULL;
}

static int dup_str(const char *s, const char **out)
{
	*out = NULL;
	if (!s)
		return 0;
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

/* Opens a window for k (strings copied): its tap and its timer. */
static int window_open(struct http_pprof *pp, const struct pp_key *k, struct pp_window **out)
{
	struct hostview_filter f = { .pid = k->pid, .comm = k->comm, .unit = k->unit, .cgroup = k->cgroup };
	struct pp_window *w;
	int r;

	*out = NULL;
	/* A pid means the process that holds it now, as for the profile
	 * request; one that is gone matches nothing new anyway. */
	if (k->pid > 0 && proc_read_start_boottime(k->pid, &f.start_ns) < 0)
		f.start_ns = 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->pp = pp;
	w->key = (struct pp_key){ .seconds = k->seconds, .pid = k->pid };
	r = dup_str(k->comm, &w->key.comm);
	if (r == 0)
		r = dup_str(k->unit, &w->key.unit);
	if (r == 0)
		r = dup_str(k->cgroup, &w->key.cgroup);
	w->t0_mono_ns = clock_ns(CLOCK_MONOTONIC);
	w->t0_unix_ns = clock_ns(CLOCK_REALTIME);
	w->hv_samples_at_open = hostview_samples(pp->cfg.hostview);
	/* Exactly the samples drained during the next N seconds, so
	 * back-to-back scrapes never share one. */
	if (r == 0)
		r = hostview_tap_open(pp->cfg.hostview, &f, &w->tap);
	if (r == 0)
		r = loop_add_timer(pp->cfg.loop, (uint64_t)k->seconds * 1000, 0, on_window_due, w, &w->timer);
	if (r < 0) {
		window_free(w);  /* not listed yet */
		return r;
	}
	w->next = pp->windows;
	pp->windows = w;
	pp->st.windows++;
	*out = w;
	return 0;
}

static bool parse_int(const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return s[0] && !*end && !errno;
}

/* The response a resumed request was waiting for. */
static struct MHD_Response *take_result(struct pp_waiter *p, unsigned *status)
{
	struct MHD_Response *resp;

	if (p->gone) {
		/* Nobody reads it: MHD's send fails and closes the connection
		 * quietly (returning MHD_NO would log an "internal error"). */
		*status = MHD_HTTP_SERVICE_UNAVAILABLE;
		return pprof_error("the client hung up");
	}
	if (!p->status) {
		*status = MHD_HTTP_SERVICE_UNAVAILABLE;
		return pprof_error("jprofd is shutting down");
	}
	*status = p->status;
	if (p->status != MHD_HTTP_OK || !p->blob)
		return pprof_error("%s", p->msg);
	resp = blob_response(p->blob);
	blob_unref(p->blob);
	p->blob = NULL;
	return resp;
}

static struct MHD_Response *answer(unsigned *status, unsigned code, struct MHD_Response *resp)
{
	*status = code;
	return resp;
}

/* A filter argument: NULL when absent or empty; -E2BIG when too long. */
static int filter_arg(struct MHD_Connection *c, const char *key, const char **out)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);

	*out = v && *v ? v : NULL;
	return v && strlen(v) >= FILTER_MAX ? -E2BIG : 0;
}

/* Reads the request's key. NULL, or the error response with *status. */
static struct MHD_Response *parse_key(struct http_pprof *pp, struct MHD_Connection *c,
				      struct pp_key *k, unsigned *status)
{
	const char *secs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	const char *pid = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pid");
	long n = 0, pidv = 0;

	if (secs && *secs && !parse_int(secs, &n))
		return answer(status, MHD_HTTP_BAD_REQUEST,
			      pprof_error("seconds must be an integer, not \"%.64s\"", secs));
	if (pid && *pid && (!parse_int(pid, &pidv) || pidv <= 0 || pidv > INT32_MAX))
		return answer(status, MHD_HTTP_BAD_REQUEST,
			      pprof_error("pid must be a process id, not \"%.64s\"", pid));
	if (filter_arg(c, "comm", &k->comm) < 0 || filter_arg(c, "unit", &k->unit) < 0 ||
	    filter_arg(c, "cgroup", &k->cgroup) < 0)
		return answer(status, MHD_HTTP_BAD_REQUEST,
			      pprof_error("a filter is longer than %d bytes", FILTER_MAX - 1));
	if (n <= 0)
		n = pp->cfg.default_seconds;
	k->seconds = n > (long)pp->cfg.max_seconds ? pp->cfg.max_seconds : (unsigned)n;
	k->pid = (pid_t)pidv;
	return NULL;
}

static struct MHD_Response *busy(struct http_pprof *pp, unsigned *status, const char *what, unsigned n)
{
	pp->st.rejected_busy++;
	return answer(status, MHD_HTTP_SERVICE_UNAVAILABLE,
		      pprof_error("too many profile requests: %u %s already (requests with the same filter "
				  "and seconds that start together share one); try again later", n, what));
}

/* Watches the client's socket for its hang-up while the request waits. */
static int waiter_watch(struct pp_waiter *p)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(p->conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	if (!ci || ci->connect_fd < 0)
		return -EBADF;
	/* EPOLLRDHUP alone: bytes a client pipelines do not wake us; its
	 * FIN, a reset or an error does. */
	return loop_add_io(p->pp->cfg.loop, ci->connect_fd, EPOLLRDHUP, on_hangup, p, &p->hup);
}

struct MHD_Response *http_pprof_answer(struct http_pprof *pp, struct MHD_Connection *c,
				       void **con_cls, bool root, unsigned *status)
{
	unsigned reserve = root ? HTTP_PPROF_ROOT_RESERVE : 0;
	struct pp_waiter *p = *con_cls;
	struct MHD_Response *err;
	struct pp_window *w;
	struct pp_key k = { 0 };
	int r;

	*status = 0;
	if (p)  /* resumed: the profile (or the error) is ready */
		return take_result(p, status);
	if (!pp->cfg.hostview)
		return answer(status, MHD_HTTP_SERVICE_UNAVAILABLE,
			      pprof_error("the host view is off (rate = 0): jprofd keeps no continuous "
					  "profile to serve; set rate to a non-zero Hz"));
	err = parse_key(pp, c, &k, status);
	if (err || *status)
		return err;
	if (pp->st.waiting >= pp->cfg.max_waiting + reserve)
		return busy(pp, status, "waiting", pp->st.waiting);
	w = window_find(pp, &k);
	if (w) {
		pp->st.shared++;
	} else {
		if (pp->st.windows >= pp->cfg.max_windows + reserve)
			return busy(pp, status, "distinct windows open", pp->st.windows);
		r = window_open(pp, &k, &w);
		if (r < 0)
			return answer(status, MHD_HTTP_INTERNAL_SERVER_ERROR,
				      pprof_error("cannot start the profile window: %s", strerror(-r)));
	}
	p = calloc(1, sizeof(*p));
	if (p) {
		p->pp = pp;
		p->conn = c;
		r = waiter_watch(p);
	} else {
		r = -ENOMEM;
	}
	if (r < 0) {
		free(p);
		if (!w->waiters)
			window_free(w);
		return answer(status, MHD_HTTP_INTERNAL_SERVER_ERROR,
			      pprof_error("cannot wait for the profile: %s", strerror(-r)));
	}
	p->win = w;
	p->wnext = w->waiters;
	w->waiters = p;
	pp->st.waiting++;
	p->next = pp->waiters;
	if (p->next)
		p->next->prev = p;
	pp->waiters = p;
	*con_cls = p;
	log_debug("http: profile of %u s (pid %d, comm %s, unit %s, cgroup %s)%s", k.seconds, (int)k.pid,
		  k.comm ? k.comm : "-", k.unit ? k.unit : "-", k.cgroup ? k.cgroup : "-",
		  w->waiters->wnext ? ", sharing an open window" : "");
	MHD_suspend_connection(c);
	return answer(status, 0, NULL);
}
