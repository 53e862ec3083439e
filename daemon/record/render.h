/* The render worker: profiles are rendered off the event loop.
 *
 * Rendering a big store (a JFR of a million samples, a pprof waiting for
 * source lines, several events' collapsed stacks) and turning the output
 * into a protocol line (base64, JSON string escaping) takes seconds of CPU;
 * on the loop it held every other client's answer that long. A job here
 * owns everything it reads (the store, copies of the meta's and options'
 * strings, the message printed with empty data), so nothing it touches is
 * written while it runs; renderers read their store only (export.h) and
 * the one global they reach, pprof's source lines, is thread safe
 * (lines.h). The worker frees only what it allocated: the store and the
 * rest are freed on the loop, so that a worker preempted inside free()
 * never holds the loop's malloc arena.
 *
 * One thread takes the jobs in order. A finished job is handed back to the
 * loop through an eventfd, one job per loop round, and its done callback
 * runs there. A job whose requester went away is cancelled: a queued one
 * is freed at once, a running one stops at its next stack (the renderers
 * look at export_options.cancel) and is freed then, and its callback never
 * runs. render_free() stops the running job the same way and joins the
 * thread; jobs left are freed unanswered.
 *
 * Without a worker (render NULL: unit tests that build parts of the daemon)
 * render_submit() renders at once and calls done before it returns. */
#ifndef JPROF_RENDER_H
#define JPROF_RENDER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "export.h"

struct json_object;
struct loop;
struct render;
struct render_job;

/* On the loop, once per job that was not cancelled. err: 0 or the -errno of
 * the rendering. out: the protocol line (newline included) of a job with a
 * message, else the rendered bytes; the callback may steal them
 * (buf_steal), the rest is freed after it returns. */
typedef void (*render_done_fn)(void *arg, int err, struct buf *out);

struct render_req {
	struct store *st;                   /* taken (freed with the job) */
	const struct export_meta *meta;     /* copied, strings included; may be NULL */
	const struct export_options *opt;   /* copied, strings included; may be NULL */
	enum jprof_format fmt;
	/* A "profile" message (profile_msg_new with empty data), taken: it is
	 * printed now, and the job writes the line around the rendered data.
	 * NULL: out is the rendering itself. */
	struct json_object *msg;
	/* Jobs of this uid at once, queued or running (render_uid_jobs);
	 * 0: no limit here (the caller's own quotas bound them). */
	uid_t uid;
	unsigned max_per_uid;
};

struct render_stats {
	uint64_t jobs;          /* submitted */
	uint64_t cancelled;     /* whose requester went away first */
	uint64_t refused;       /* past max_per_uid */
	unsigned queued;        /* waiting or running now */
	uint64_t ms_max;        /* the longest job, from its start on the worker */
};

int render_new(struct loop *loop, struct render **out);
/* Cancels what is queued and the running job, joins the thread, frees
 * everything without calling back. NULL-safe. */
void render_free(struct render *rw);

/* Queues the job; *out (may be NULL) is its handle for render_cancel until
 * done runs. 0; -EDQUOT past max_per_uid (nothing taken: the caller still
 * owns st and msg); -ENOMEM. Without a worker the job runs now and done has
 * been called on success. */
int render_submit(struct render *rw, const struct render_req *req, render_done_fn done, void *arg,
		  struct render_job **out);
/* The requester is gone: done will not be called. Only before done ran. */
void render_cancel(struct render_job *job);

/* Jobs of uid queued or running. */
unsigned render_uid_jobs(const struct render *rw, uid_t uid);
void render_get_stats(const struct render *rw, struct render_stats *out);

#endif
