/* The event loop on sd-event: see loop.h for why this layer exists. */
#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

/* fd events handled per wakeup of the fd set. */
#define LOOP_BATCH 64

struct loop_source {
	struct loop *loop;
	sd_event_source *es;          /* timers, signals, children */
	int fd;                       /* fd watches; -1 for the others */
	bool removed;
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
	/* Every fd watch is in this one epoll set, itself one sd-event source
	 * (see loop.h): one epoll_wait per LOOP_BATCH ready fds. */
	int epfd;
	sd_event_source *fds_src;
	int error;                    /* of epoll_wait, for loop_run */
	bool quit;
	struct loop_source *live;     /* doubly linked */
	struct loop_source *dead;     /* removed, freed after the round */
};

static int on_fds(sd_event_source *es, int fd, uint32_t revents, void *userdata);

int loop_new(struct loop **out)
{
	struct loop *l = calloc(1, sizeof(*l));
	int r;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		r = -errno;
		goto out;
	}
	r = sd_event_new(&l->event);
	if (r < 0)
		goto out;
	r = sd_event_add_io(l->event, &l->fds_src, l->epfd, EPOLLIN, on_fds, l);
out:
	if (r < 0) {
		loop_free(l);
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
	sd_event_source_disable_unref(l->fds_src);
	sd_event_unref(l->event);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
}

static struct loop_source *source_new(struct loop *l, void *arg, struct loop_source **out)
{
	struct loop_source *src = calloc(1, sizeof(*src));

	if (out)
		*out = NULL;
	if (src)
		*src = (struct loop_source){ .loop = l, .fd = -1, .arg = arg };
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

static int on_fds(sd_event_source *es, int fd, uint32_t revents, void *userdata)
{
	struct epoll_event evs[LOOP_BATCH];
	struct loop *l = userdata;
	int n = epoll_wait(l->epfd, evs, LOOP_BATCH, 0);

	if (n < 0 && errno != EINTR) {
		l->error = -errno;
		l->quit = true;
	}
	for (int i = 0; i < n && !l->quit; i++) {
		struct loop_source *src = evs[i].data.ptr;

		/* Removed by an earlier callback of this batch: not freed yet. */
		if (!src->removed)
			src->fn.io(src, src->fd, evs[i].events, src->arg);
	}
	return 0;
}

int loop_add_io(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *arg,
		struct loop_source **out)
{
	struct loop_source *src = source_new(l, arg, out);
	struct epoll_event ev = { .events = events, .data.ptr = src };
	int r = 0;

	if (!src)
		return -ENOMEM;
	src->fn.io = fn;
	src->fd = fd;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		r = -errno;
	return source_commit(l, src, r, out);
}

int loop_set_events(struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (src->removed)
		return -ENOENT;  /* what epoll says of an fd it does not watch */
	if (epoll_ctl(src->loop->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0)
		return -errno;
	return 0;
}

/* sd-event disables a source whose callback returns < 0: ours return 0. */
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

	if (!src || src->removed)
		return;
	l = src->loop;
	src->removed = true;
	/* Off at once (the fd leaves epoll, a pending event is dropped);
	 * sd-event itself defers freeing a source that is being dispatched. */
	if (src->fd >= 0)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, src->fd, NULL);
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
	l->error = 0;
	/* One sd_event_run dispatches one sd-event source (a timer, a signal, a
	 * child, or a batch of fd events): that is our round. */
	while (!l->quit) {
		r = sd_event_run(l->event, UINT64_MAX);
		reap(l);
		if (r < 0)
			return r;
	}
	return l->error;
}

void loop_quit(struct loop *l)
{
	l->quit = true;
}
