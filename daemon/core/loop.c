/* The event loop on sd-event: see loop.h for why this layer exists. */
#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>
#include <time.h>

struct loop_source {
	struct loop *loop;
	sd_event_source *es;          /* NULL once removed */
	union {
		loop_io_fn io;
		loop_timer_fn timer;
		loop_signal_fn signal;
		loop_child_fn child;
	} fn;
	void *arg;
	uint64_t interval_us;         /* repeating timers; 0 = once */
	/* On the loop's live list, or on its dead list once removed. */
	struct loop_source *prev, *next;
};

struct loop {
	sd_event *event;
	bool quit;
	struct loop_source *live;     /* doubly linked */
	struct loop_source *dead;     /* removed, freed after the round */
};

int loop_new(struct loop **out)
{
	struct loop *l = calloc(1, sizeof(*l));
	int r;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	r = sd_event_new(&l->event);
	if (r < 0) {
		free(l);
		return r;
	}
	*out = l;
	return 0;
}

static void reap(struct loop *l)
{
	while (l->dead) {
		struct loop_source *s = l->dead;

		l->dead = s->next;
		free(s);
	}
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	while (l->live)
		loop_remove(l->live);
	reap(l);
	sd_event_unref(l->event);
	free(l);
}

static struct loop_source *source_new(struct loop *l, void *arg, struct loop_source **out)
{
	struct loop_source *src = calloc(1, sizeof(*src));

	if (out)
		*out = NULL;
	if (src)
		*src = (struct loop_source){ .loop = l, .arg = arg };
	return src;
}

/* Takes src onto the live list once sd-event accepted it (r >= 0), else
 * frees it. */
static int source_commit(struct loop *l, struct loop_source *src, int r, struct loop_source **out)
{
	if (r < 0) {
		free(src);
		return r;
	}
	src->next = l->live;
	if (l->live)
		l->live->prev = src;
	l->live = src;
	if (out)
		*out = src;
	return 0;
}

/* sd-event disables a source whose callback returns < 0: ours return 0. */
static int on_io(sd_event_source *es, int fd, uint32_t revents, void *userdata)
{
	struct loop_source *src = userdata;

	src->fn.io(src, fd, revents, src->arg);
	return 0;
}

int loop_add_io(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *arg,
		struct loop_source **out)
{
	struct loop_source *src = source_new(l, arg, out);

	if (!src)
		return -ENOMEM;
	src->fn.io = fn;
	return source_commit(l, src, sd_event_add_io(l->event, &src->es, fd, events, on_io, src),
			     out);
}

int loop_set_events(struct loop_source *src, uint32_t events)
{
	/* What epoll says of a descriptor that is no longer watched. */
	if (!src->es)
		return -ENOENT;
	return sd_event_source_set_io_events(src->es, events);
}

static int on_time(sd_event_source *es, uint64_t usec, void *userdata)
{
	struct loop_source *src = userdata;

	/* Rescheduled before fn runs, which may remove the source. Like a
	 * timerfd interval: a fixed rate, expiries missed while the loop was
	 * busy fold into this one. */
	if (src->interval_us) {
		uint64_t next = usec + src->interval_us, now;

		if (sd_event_now(sd_event_source_get_event(es), CLOCK_MONOTONIC, &now) >= 0 &&
		    next <= now)
			next += ((now - next) / src->interval_us + 1) * src->interval_us;
		sd_event_source_set_time(es, next);
	}
	src->fn.timer(src, src->arg);
	return 0;
}

int loop_add_timer(struct loop *l, uint64_t first_ms, uint64_t interval_ms, loop_timer_fn fn,
		   void *arg, struct loop_source **out)
{
	struct loop_source *src = source_new(l, arg, out);
	int r;

	if (!src)
		return -ENOMEM;
	src->fn.timer = fn;
	src->interval_us = interval_ms * 1000;
	/* Accuracy 1 us: no coalescing, callers rely on their deadlines. */
	r = sd_event_add_time_relative(l->event, &src->es, CLOCK_MONOTONIC, first_ms * 1000, 1,
				       on_time, src);
	/* A one-shot source stays added, disabled, until loop_remove. */
	if (r >= 0 && interval_ms)
		r = sd_event_source_set_enabled(src->es, SD_EVENT_ON);
	if (r < 0)
		src->es = sd_event_source_disable_unref(src->es);
	return source_commit(l, src, r, out);
}

static int on_signal(sd_event_source *es, const struct signalfd_siginfo *si, void *userdata)
{
	struct loop_source *src = userdata;

	src->fn.signal(src, (int)si->ssi_signo, src->arg);
	return 0;
}

int loop_add_signal(struct loop *l, int signo, loop_signal_fn fn, void *arg,
		    struct loop_source **out)
{
	struct loop_source *src = source_new(l, arg, out);

	if (!src)
		return -ENOMEM;
	src->fn.signal = fn;
	return source_commit(l, src, sd_event_add_signal(l->event, &src->es, signo, on_signal, src),
			     out);
}

static int on_child(sd_event_source *es, const siginfo_t *si, void *userdata)
{
	struct loop_source *src = userdata;

	src->fn.child(src, si, src->arg);
	return 0;
}

int loop_add_child(struct loop *l, int pidfd, loop_child_fn fn, void *arg,
		   struct loop_source **out)
{
	struct loop_source *src = source_new(l, arg, out);

	if (!src)
		return -ENOMEM;
	src->fn.child = fn;
	/* WEXITED alone: sd-event then watches the pidfd in epoll, needs no
	 * SIGCHLD handler, and peeks with WNOWAIT so fn still sees a zombie. */
	return source_commit(l, src,
			     sd_event_add_child_pidfd(l->event, &src->es, pidfd, WEXITED, on_child, src),
			     out);
}

int loop_enable_watchdog(struct loop *l)
{
	return sd_event_set_watchdog(l->event, 1);
}

void loop_remove(struct loop_source *src)
{
	struct loop *l;

	if (!src || !src->es)
		return;
	l = src->loop;
	/* Off at once (the fd leaves epoll, a pending event is dropped);
	 * sd-event itself defers freeing a source that is being dispatched. */
	src->es = sd_event_source_disable_unref(src->es);
	if (src->prev)
		src->prev->next = src->next;
	else
		l->live = src->next;
	if (src->next)
		src->next->prev = src->prev;
	src->prev = NULL;
	src->next = l->dead;
	l->dead = src;
}

int loop_run(struct loop *l)
{
	int r = 0;

	l->quit = false;
	/* sd_event_run dispatches one source per call: that is our round. */
	while (!l->quit) {
		r = sd_event_run(l->event, UINT64_MAX);
		reap(l);
		if (r < 0)
			break;
	}
	return r < 0 ? r : 0;
}

void loop_quit(struct loop *l)
{
	l->quit = true;
}
