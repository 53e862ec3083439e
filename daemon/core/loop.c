#include "loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "log.h"

struct loop_source {
	struct loop *loop;
	int fd;
	bool is_timer;    /* fd is our timerfd, closed on free */
	bool dead;
	loop_io_fn io_fn;
	loop_timer_fn timer_fn;
	void *arg;
	struct loop_source *next_dead;
};

struct loop {
	int epfd;
	bool quit;
	struct loop_source *dead;
	/* live sources, so loop_free can release them */
	struct loop_source **all;
	size_t nall, capall;
};

int loop_new(struct loop **out)
{
	struct loop *l = calloc(1, sizeof(*l));

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		int r = -errno;

		free(l);
		return r;
	}
	*out = l;
	return 0;
}

static void source_free(struct loop_source *src)
{
	if (src->is_timer && src->fd >= 0)
		close(src->fd);
	free(src);
}

static void reap(struct loop *l)
{
	while (l->dead) {
		struct loop_source *s = l->dead;

		l->dead = s->next_dead;
		source_free(s);
	}
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	reap(l);
	for (size_t i = 0; i < l->nall; i++)
		source_free(l->all[i]);
	free(l->all);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
}

static int track(struct loop *l, struct loop_source *src)
{
	if (l->nall == l->capall) {
		size_t cap = l->capall ? l->capall * 2 : 64;
		struct loop_source **p = realloc(l->all, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->all = p;
		l->capall = cap;
	}
	l->all[l->nall++] = src;
	return 0;
}

static void untrack(struct loop *l, struct loop_source *src)
{
	for (size_t i = 0; i < l->nall; i++) {
		if (l->all[i] == src) {
			l->all[i] = l->all[--l->nall];
			return;
		}
	}
}

static int add_source(struct loop *l, struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };
	int r = track(l, src);

	if (r < 0)
		return r;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0) {
		r = -errno;
		untrack(l, src);
		return r;
	}
	return 0;
}

int loop_add_io(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *arg,
		struct loop_source **out)
{
	struct loop_source *src = calloc(1, sizeof(*src));
	int r;

	if (out)
		*out = NULL;
	if (!src)
		return -ENOMEM;
	*src = (struct loop_source){ .loop = l, .fd = fd, .io_fn = fn, .arg = arg };
	r = add_source(l, src, events);
	if (r < 0) {
		free(src);
		return r;
	}
	if (out)
		*out = src;
	return 0;
}

int loop_set_events(struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (epoll_ctl(src->loop->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0)
		return -errno;
	return 0;
}

int loop_add_timer(struct loop *l, uint64_t first_ms, uint64_t interval_ms, loop_timer_fn fn,
		   void *arg, struct loop_source **out)
{
	struct itimerspec its = {
		.it_value = { .tv_sec = (time_t)(first_ms / 1000), .tv_nsec = (long)(first_ms % 1000) * 1000000 },
		.it_interval = { .tv_sec = (time_t)(interval_ms / 1000),
				 .tv_nsec = (long)(interval_ms % 1000) * 1000000 },
	};
	struct loop_source *src = NULL;
	int fd, r;

	if (out)
		*out = NULL;
	if (first_ms == 0)
		its.it_value.tv_nsec = 1;  /* zero would disarm the timer */
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (timerfd_settime(fd, 0, &its, NULL) < 0) {
		r = -errno;
		goto fail;
	}
	src = calloc(1, sizeof(*src));
	if (!src) {
		r = -ENOMEM;
		goto fail;
	}
	*src = (struct loop_source){ .loop = l, .fd = fd, .is_timer = true, .timer_fn = fn, .arg = arg };
	r = add_source(l, src, EPOLLIN);
	if (r < 0)
		goto fail;
	if (out)
		*out = src;
	return 0;
fail:
	free(src);
	close(fd);
	return r;
}

void loop_remove(struct loop_source *src)
{
	struct loop *l;

	if (!src || src->dead)
		return;
	l = src->loop;
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, src->fd, NULL);
	src->dead = true;
	untrack(l, src);
	src->next_dead = l->dead;
	l->dead = src;
}

int loop_run(struct loop *l)
{
	struct epoll_event evs[64];

	l->quit = false;
	while (!l->quit) {
		int n = epoll_wait(l->epfd, evs, 64, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (int i = 0; i < n && !l->quit; i++) {
			struct loop_source *src = evs[i].data.ptr;

			if (src->dead)
				continue;
			if (src->is_timer) {
				uint64_t expirations;

				if (read(src->fd, &expirations, sizeof(expirations)) < 0)
					continue;
				src->timer_fn(src, src->arg);
			} else {
				src->io_fn(src, src->fd, evs[i].events, src->arg);
			}
		}
		reap(l);
	}
	reap(l);
	return 0;
}

void loop_quit(struct loop *l)
{
	l->quit = true;
}
