#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "export.h"
#include "hostview.h"
#include "log.h"
#include "loop.h"
#include "profile_msg.h"
#include "render.h"
#include "report_dir.h"
#include "store.h"

#define REPORT_PERIOD_DEFAULT_S 10

/* A closed window on the render worker. */
struct report_job {
	struct reporter *r;
	struct report_job *next;
	struct render_job *rj;
	struct report_window w;
};

struct reporter {
	struct reporter_config cfg;
	struct report_sink sink;
	struct loop_source *timer;
	struct hostview_tap *tap;   /* the open window */
	uint64_t t0_mono_ns, t0_unix_ns;  /* when it opened */
	uint64_t seq;
	struct report_job *jobs;    /* rendering */
	struct reporter_stats st;
};

static void report_job_unlink(struct report_job *j)
{
	for (struct report_job **pp = &j->r->jobs; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			return;
		}
	}
}

static void on_rendered(void *arg, int err, struct buf *out)
{
	struct report_job *j = arg;
	struct reporter *r = j->r;

	report_job_unlink(j);
	if (err == 0)
		err = r->sink.deliver(r->sink.ctx, &j->w, out);
	if (err < 0) {
		r->st.failed++;
		log_warn("report %s: window %llu not delivered: %s", r->sink.name,
			 (unsigned long long)j->w.seq, strerror(-err));
	} else {
		r->st.delivered++;
		r->st.bytes += out->len;
	}
	free(j);
}

static int report_open_window(struct reporter *r)
{
	int ret = hostview_tap_open(r->cfg.hostview, NULL, &r->tap);

	r->t0_mono_ns = clock_ns(CLOCK_MONOTONIC);
	r->t0_unix_ns = clock_ns(CLOCK_REALTIME);
	return ret;
}

int reporter_close_window(struct reporter *r)
{
	struct export_meta meta = { .status = "complete" };
	struct render_req req = { .meta = &meta, .fmt = r->sink.format };
	struct store_totals tot;
	struct report_job *j;
	uint64_t from, to;
	int ret;

	if (!r->tap)
		return report_open_window(r);  /* the last opening failed */
	profile_msg_host_meta(&meta, r->cfg.host_rate_hz);
	/* The drains the tap holds, from the one before it opened to the last
	 * (as the pprof scrape window says it), not the timer's period. */
	hostview_tap_span(r->tap, &from, &to);
	if (!from || from > r->t0_mono_ns || to < from) {
		from = r->t0_mono_ns;
		to = clock_ns(CLOCK_MONOTONIC);
	}
	meta.start_unix_ns = r->t0_unix_ns - (r->t0_mono_ns - from);
	meta.duration_ns = to - from;
	req.st = hostview_tap_close(r->tap);
	/* The next window opens before anything is drained again. */
	ret = report_open_window(r);
	if (ret < 0)
		log_warn("report %s: cannot open the next window: %s", r->sink.name, strerror(-ret));
	r->st.windows++;
	j = req.st ? calloc(1, sizeof(*j)) : NULL;
	if (!j) {
		store_free(req.st);
		r->st.failed++;
		return -ENOMEM;
	}
	store_get_totals(req.st, &tot);
	j->r = r;
	j->w = (struct report_window){
		.seq = ++r->seq, .start_unix_ns = meta.start_unix_ns, .duration_ns = meta.duration_ns,
		.samples = tot.values[0], .format = r->sink.format,
	};
	j->next = r->jobs;
	r->jobs = j;
	ret = render_submit(r->cfg.render, &req, on_rendered, j, &j->rj);
	if (ret < 0) {  /* nothing was taken */
		store_free(req.st);
		on_rendered(j, ret, NULL);
	}
	return ret < 0 ? ret : 0;
}

static void on_timer(struct loop_source *src, void *arg)
{
	reporter_close_window(arg);
}

int reporter_new(const struct reporter_config *cfg, const struct report_sink *sink,
		 struct reporter **out)
{
	struct reporter *r = calloc(1, sizeof(*r));
	int ret = -ENOMEM;

	*out = NULL;
	if (!r)
		goto out;
	r->cfg = *cfg;
	r->sink = *sink;
	if (!r->cfg.period_s)
		r->cfg.period_s = REPORT_PERIOD_DEFAULT_S;
	ret = report_open_window(r);
	if (ret == 0 && cfg->loop)
		ret = loop_add_timer(cfg->loop, r->cfg.period_s * 1000ull, r->cfg.period_s * 1000ull,
				     on_timer, r, &r->timer);
	if (ret < 0)
		goto out;
	*out = r;
	r = NULL;
out:
	if (!r && ret < 0 && sink->free)
		sink->free(sink->ctx);  /* taken even on failure */
	reporter_free(r);
	return ret;
}

void reporter_free(struct reporter *r)
{
	if (!r)
		return;
	loop_remove(r->timer);
	while (r->jobs) {
		struct report_job *j = r->jobs;

		r->jobs = j->next;
		render_cancel(j->rj);
		free(j);
	}
	store_free(hostview_tap_close(r->tap));
	if (r->sink.free)
		r->sink.free(r->sink.ctx);
	free(r);
}

void reporter_get_stats(const struct reporter *r, struct reporter_stats *out)
{
	*out = r->st;
}

/* ---- the configured reporters ------------------------------------------
 * Every kind of reporter, in one place: its sink from the settings (1 when
 * its settings are not given). */

static int report_dir_kind(const struct report_settings *set, struct report_sink *out, char *err,
			   size_t errlen)
{
	if (!set->dir || !set->dir[0])
		return 1;
	return report_dir_open(set->dir, 0, out, err, errlen);
}

static const struct report_kind {
	const char *name;
	int (*open)(const struct report_settings *set, struct report_sink *out, char *err,
		    size_t errlen);
} report_kinds[] = {
	{ "dir", report_dir_kind },
};

#define REPORT_NKINDS (sizeof(report_kinds) / sizeof(report_kinds[0]))

struct reports {
	struct reporter *r[REPORT_NKINDS];
	size_t n;
};

int reports_new(struct loop *loop, struct hostview *hv, struct render *render,
		const struct report_settings *set, struct reports **out, char *err, size_t errlen)
{
	struct reporter_config rc = {
		.loop = loop, .hostview = hv, .render = render, .period_s = set->period_s,
		.host_rate_hz = set->host_rate_hz,
	};
	struct reports *rs = calloc(1, sizeof(*rs));
	int ret = -ENOMEM;

	*out = NULL;
	if (!rs) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < REPORT_NKINDS; i++) {
		struct report_sink sink = { 0 };

		ret = report_kinds[i].open(set, &sink, err, errlen);
		if (ret == 1)
			continue;
		if (ret == 0 && !hv) {
			if (sink.free)
				sink.free(sink.ctx);
			snprintf(err, errlen, "the %s reporter needs the host view (rate > 0)",
				 report_kinds[i].name);
			ret = -EINVAL;
		}
		if (ret == 0) {
			ret = reporter_new(&rc, &sink, &rs->r[rs->n]);
			if (ret < 0)
				snprintf(err, errlen, "cannot start the %s reporter: %s",
					 report_kinds[i].name, strerror(-ret));
		}
		if (ret < 0)
			goto out;
		rs->n++;
		log_info("report: %s reporter started, a window every %u s", report_kinds[i].name,
			 rc.period_s ? rc.period_s : REPORT_PERIOD_DEFAULT_S);
	}
	*out = rs;
	rs = NULL;
	ret = 0;
out:
	reports_free(rs);
	return ret;
}

void reports_free(struct reports *rs)
{
	if (!rs)
		return;
	for (size_t i = 0; i < rs->n; i++)
		reporter_free(rs->r[i]);
	free(rs);
}

size_t reports_count(const struct reports *rs)
{
	return rs ? rs->n : 0;
}
