#include "http_pprof.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "buf.h"
#include "clock.h"
#include "export.h"
#include "hostview.h"
#include "http.h"
#include "log.h"
#include "profile_msg.h"
#include "loop.h"
#include "store.h"

#define FILTER_MAX 256                /* bytes of a comm/unit/cgroup filter */

/* An error of the pprof contract: text/plain with X-Go-Pprof: 1, which
 * makes `go tool pprof` print the message instead of a parse error. */
#define pprof_error(fmt, ...) http_text_response(HTTP_TEXT_PLAIN, true, fmt "\n", ##__VA_ARGS__)

/* One /debug/pprof/profile request waiting for its seconds to pass. */
struct pending {
	struct http_pprof *pp;
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

struct http_pprof {
	struct http_pprof_config cfg;
	struct pending *pending;
	unsigned npending;
	uint64_t rejected_busy;
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

void http_pprof_free(struct http_pprof *pp)
{
	if (!pp)
		return;
	/* MHD calls on_completed for every connection it closed; anything
	 * left was never handed back. */
	while (pp->pending) {
		struct pending *p = pp->pending;

		pp->pending = p->next;
		pending_free(p);
	}
	free(pp);
}

void http_pprof_completed(struct http_pprof *pp, void *con_cls)
{
	struct pending *p = con_cls;

	for (struct pending **pq = &pp->pending; *pq; pq = &(*pq)->next) {
		if (*pq == p) {
			*pq = p->next;
			pp->npending--;
			break;
		}
	}
	pending_free(p);
}

void http_pprof_resume_all(struct http_pprof *pp)
{
	/* Their resp stays NULL: answered 503 on the way out. */
	for (struct pending *p = pp->pending; p; p = p->next) {
		loop_remove(p->timer);
		p->timer = NULL;
		MHD_resume_connection(p->conn);
	}
}

unsigned http_pprof_waiting(const struct http_pprof *pp)
{
	return pp->npending;
}

uint64_t http_pprof_rejected(const struct http_pprof *pp)
{
	return pp->rejected_busy;
}

/* Renders what the request's tap collected as gzipped pprof into p->resp. */
static void profile_render(struct pending *p)
{
	unsigned rate = p->pp->cfg.host_rate_hz;
	struct export_meta meta = {
		.pid = (uint32_t)(p->pid > 0 ? p->pid : 0),
		.comm = p->comm,
		.start_unix_ns = p->t0_unix_ns,
		.status = "complete",
	};
	struct export_options opt = { 0 };
	struct store *st = NULL;
	struct buf b = BUF_INIT;
	size_t len;
	char *data;
	int r;

	profile_msg_host_meta(&meta, rate);
	st = hostview_tap_close(p->tap);
	p->tap = NULL;
	if (!st) {
		p->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
		p->resp = pprof_error("out of memory");
		goto out;
	}
	meta.duration_ns = clock_ns(CLOCK_MONOTONIC) - p->t0_mono_ns;
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

static void on_profile_due(struct loop_source *src, void *arg)
{
	struct pending *p = arg;
	struct http_pprof *pp = p->pp;

	loop_remove(p->timer);
	p->timer = NULL;
	profile_render(p);
	MHD_resume_connection(p->conn);
	pp->cfg.resumed(pp->cfg.ctx);
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

/* The response a resumed request was waiting for. */
static struct MHD_Response *take_result(struct pending *p, unsigned *status)
{
	struct MHD_Response *resp = p->resp;

	p->resp = NULL;
	if (!resp)
		resp = pprof_error("jprofd is shutting down");
	*status = resp && p->status ? p->status : MHD_HTTP_SERVICE_UNAVAILABLE;
	return resp;
}

/* Starts the wait: the tap and the timer. 0 or -errno. */
static int pending_start(struct http_pprof *pp, struct pending *p)
{
	struct hostview_filter f = { .pid = p->pid, .comm = p->comm, .unit = p->unit,
				     .cgroup = p->cgroup };
	int r;

	p->t0_mono_ns = clock_ns(CLOCK_MONOTONIC);
	p->t0_unix_ns = clock_ns(CLOCK_REALTIME);
	/* Exactly the samples drained during the next N seconds, so
	 * back-to-back scrapes never share one. */
	r = hostview_tap_open(pp->cfg.hostview, &f, &p->tap);
	if (r == 0)
		r = loop_add_timer(pp->cfg.loop, (uint64_t)p->seconds * 1000, 0, on_profile_due, p,
				   &p->timer);
	return r;
}

static struct MHD_Response *answer(unsigned *status, unsigned code, struct MHD_Response *resp)
{
	*status = code;
	return resp;
}

struct MHD_Response *http_pprof_answer(struct http_pprof *pp, struct MHD_Connection *c,
				       void **con_cls, unsigned *status)
{
	struct pending *p = *con_cls;
	const char *secs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	const char *pid = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pid");
	long n = 0, pidv = 0;
	int r;

	if (p)  /* resumed: the profile (or the error) is ready */
		return take_result(p, status);
	if (!pp->cfg.hostview)
		return answer(status, MHD_HTTP_SERVICE_UNAVAILABLE,
			      pprof_error("the host view is off (rate = 0): jprofd keeps no continuous "
					  "profile to serve; set rate to a non-zero Hz"));
	if (secs && *secs && !parse_int(secs, &n))
		return answer(status, MHD_HTTP_BAD_REQUEST,
			      pprof_error("seconds must be an integer, not \"%.64s\"", secs));
	if (pid && *pid && (!parse_int(pid, &pidv) || pidv <= 0 || pidv > INT32_MAX))
		return answer(status, MHD_HTTP_BAD_REQUEST,
			      pprof_error("pid must be a process id, not \"%.64s\"", pid));
	if (pp->npending >= pp->cfg.max_profiles) {
		pp->rejected_busy++;
		return answer(status, MHD_HTTP_SERVICE_UNAVAILABLE,
			      pprof_error("too many profile requests waiting (%u); try again later",
					  pp->npending));
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return answer(status, MHD_HTTP_INTERNAL_SERVER_ERROR, pprof_error("out of memory"));
	p->pp = pp;
	p->conn = c;
	p->pid = (pid_t)pidv;
	if (n <= 0)
		n = pp->cfg.default_seconds;
	p->seconds = n > (long)pp->cfg.max_seconds ? pp->cfg.max_seconds : (unsigned)n;
	r = dup_arg(c, "comm", &p->comm);
	if (r == 0)
		r = dup_arg(c, "unit", &p->unit);
	if (r == 0)
		r = dup_arg(c, "cgroup", &p->cgroup);
	if (r < 0) {
		pending_free(p);
		if (r == -E2BIG)
			return answer(status, MHD_HTTP_BAD_REQUEST,
				      pprof_error("a filter is longer than %d bytes", FILTER_MAX - 1));
		return answer(status, MHD_HTTP_INTERNAL_SERVER_ERROR, pprof_error("out of memory"));
	}
	r = pending_start(pp, p);
	if (r < 0) {
		pending_free(p);
		return answer(status, MHD_HTTP_INTERNAL_SERVER_ERROR,
			      pprof_error("cannot start a timer: %s", strerror(-r)));
	}
	p->next = pp->pending;
	pp->pending = p;
	pp->npending++;
	*con_cls = p;
	log_debug("http: profile of %u s (pid %d, comm %s, unit %s, cgroup %s)", p->seconds, (int)p->pid,
		  p->comm ? p->comm : "-", p->unit ? p->unit : "-", p->cgroup ? p->cgroup : "-");
	MHD_suspend_connection(c);
	return answer(status, 0, NULL);
}
