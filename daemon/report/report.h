/* Reporters: the host profile pushed out, beside the pull endpoints (the
 * profile request, /debug/pprof/profile) that answer a caller.
 *
 * A reporter ticks over host-view windows of period_s: a hostview tap holds
 * exactly the samples drained while its window was open, and when the window
 * closes the next tap opens in the same loop round (no drain between, so no
 * sample lands in two windows or in none). The closed window's store is
 * rendered in the sink's format (an exporter of the registry, export.h) on
 * the render worker, and the bytes go to the sink, on the loop.
 *
 * Every kind of sink is a row of report.c's table (report_kinds): a new
 * push exporter (OTLP profiles, pprof pushed to a backend) is a sink file
 * and one row there; the daemon starts whatever its settings configure
 * (reports_new). */
#ifndef JPROF_REPORT_H
#define JPROF_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "jprof_formats.h"

struct hostview;
struct loop;
struct render;
struct reporter;
struct reports;

/* One closed window, as the sink gets it. */
struct report_window {
	uint64_t seq;               /* 1, 2, ... per reporter */
	uint64_t start_unix_ns;     /* when its first drain's samples could start */
	uint64_t duration_ns;       /* the drains it holds: what the profile says */
	uint64_t samples;
	enum jprof_format format;
};

struct report_sink {
	const char *name;           /* for logs: "dir" */
	enum jprof_format format;   /* what each window is rendered as */
	/* A closed window and its rendering (data, borrowed). 0 or -errno:
	 * logged and counted as failed. On the loop. */
	int (*deliver)(void *ctx, const struct report_window *w, const struct buf *data);
	void (*free)(void *ctx);    /* NULL-safe ctx; may be NULL */
	void *ctx;
};

struct reporter_config {
	struct loop *loop;          /* its timer; NULL: only reporter_close_window */
	struct hostview *hostview;
	struct render *render;      /* NULL: rendered at once, on the caller */
	unsigned period_s;          /* window length; default 10 */
	unsigned host_rate_hz;      /* the host events' rate, for the profile's period */
};

struct reporter_stats {
	uint64_t windows;           /* closed */
	uint64_t delivered;
	uint64_t failed;            /* rendering or delivery */
	uint64_t bytes;             /* delivered */
};

/* Opens the first window; the sink is taken (its free runs with the
 * reporter's, or at once on failure). 0 or -errno. */
int reporter_new(const struct reporter_config *cfg, const struct report_sink *sink,
		 struct reporter **out);
/* Renderings in flight are cancelled; NULL-safe. */
void reporter_free(struct reporter *r);
/* Closes the open window (hands it to the render worker) and opens the
 * next: what the timer does every period_s. 0 or -errno. */
int reporter_close_window(struct reporter *r);
void reporter_get_stats(const struct reporter *r, struct reporter_stats *out);

/* ---- the configured reporters ------------------------------------------ */

/* What the configuration says about reporters; a kind is started when its
 * settings are given. */
struct report_settings {
	const char *dir;            /* report_dir: pprof files; NULL or "": none */
	unsigned period_s;          /* window length (the host view's bucket) */
	unsigned host_rate_hz;
};

/* Starts a reporter for every configured kind. 0, or -errno with the
 * reason in err (a kind's settings that cannot work: the daemon refuses to
 * start rather than report nothing). */
int reports_new(struct loop *loop, struct hostview *hv, struct render *render,
		const struct report_settings *set, struct reports **out, char *err, size_t errlen);
void reports_free(struct reports *rs);
size_t reports_count(const struct reports *rs);

#endif
