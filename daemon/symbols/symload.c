/* Symbol table loads on a worker thread. See symload.h. */
#include "symload.h"

#include <errno.h>
#include <fcntl.h>
#include <libelf.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct symload_job {
	uint64_t token;
	int fd;
	char path[SYMLOAD_PATH_MAX];
	char debug_root[SYMLOAD_PATH_MAX];
	bool has_debug_root;
	struct elfsym_limits limits;
};

struct symload {
	pthread_t thread;
	bool started, stop;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct symload_job *queue[SYMLOAD_MAX_QUEUED];
	size_t nqueue;
	struct symload_result *done[SYMLOAD_MAX_QUEUED];
	size_t ndone;
	atomic_bool pending;
	atomic_bool cancel;          /* symload_free: the load in flight stops */
};

static void symload_job_free(struct symload_job *j)
{
	if (!j)
		return;
	if (j->fd >= 0)
		close(j->fd);
	free(j);
}

/* A debug file named by path: regular files only (a FIFO must not hang
 * the worker). */
static struct symload_result *symload_run(struct symload *l, struct symload_job *j)
{
	struct symload_result *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->token = j->token;
	snprintf(r->path, sizeof(r->path), "%s", j->path);
	j->limits.cancel = &l->cancel;
	if (j->fd < 0)
		j->fd = elfsym_open_regular(j->path);
	if (j->fd >= 0 &&
	    elfsym_open_fd_limited(j->fd, j->path[0] ? j->path : NULL,
				   j->has_debug_root ? j->debug_root : NULL, &j->limits, &r->es) < 0)
		r->es = NULL;
	return r;
}

static void *symload_main(void *arg)
{
	struct symload *l = arg;

	/* Loads are CPU-bound (a million entries: 0.2 s): on a busy host the
	 * event loop should get the CPU first, as for the unwind table
	 * builder. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5);
	pthread_mutex_lock(&l->mu);
	for (;;) {
		struct symload_job *j;
		struct symload_result *r;

		while (!l->stop && (l->nqueue == 0 || l->ndone == SYMLOAD_MAX_QUEUED))
			pthread_cond_wait(&l->wake, &l->mu);
		if (l->stop)
			break;
		j = l->queue[0];
		memmove(l->queue, l->queue + 1, (l->nqueue - 1) * sizeof(l->queue[0]));
		l->nqueue--;
		pthread_mutex_unlock(&l->mu);
		r = symload_run(l, j);
		symload_job_free(j);
		pthread_mutex_lock(&l->mu);
		if (!r)
			continue;  /* out of memory: the taker never hears of it */
		l->done[l->ndone++] = r;
		atomic_store(&l->pending, true);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

int symload_new(struct symload **out)
{
	struct symload *l;
	int r;

	*out = NULL;
	/* libelf's version handshake, before the worker uses libelf. */
	elf_version(EV_CURRENT);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->wake, NULL);
	r = -pthread_create(&l->thread, NULL, symload_main, l);
	if (r < 0) {
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->wake);
		free(l);
		return r;
	}
	l->started = true;
	*out = l;
	return 0;
}

void symload_free(struct symload *l)
{
	if (!l)
		return;
	if (l->started) {
		pthread_mutex_lock(&l->mu);
		l->stop = true;
		atomic_store(&l->cancel, true);  /* no waiting for a big load at shutdown */
		pthread_cond_signal(&l->wake);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thread, NULL);
	}
	for (size_t i = 0; i < l->nqueue; i++)
		symload_job_free(l->queue[i]);
	for (size_t i = 0; i < l->ndone; i++) {
		elfsym_free(l->done[i]->es);
		free(l->done[i]);
	}
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->wake);
	free(l);
}

int symload_queue(struct symload *l, uint64_t token, int fd, const char *path,
		  const char *debug_root, const struct elfsym_limits *limits)
{
	struct symload_job *j = NULL;
	int ret = -EINVAL;

	if (!l || (fd < 0 && !path))
		goto out;
	ret = -ENAMETOOLONG;
	if ((path && strlen(path) >= sizeof(j->path)) ||
	    (debug_root && strlen(debug_root) >= sizeof(j->debug_root)))
		goto out;
	ret = -ENOMEM;
	j = calloc(1, sizeof(*j));
	if (!j)
		goto out;
	j->token = token;
	j->fd = fd;
	fd = -1;
	snprintf(j->path, sizeof(j->path), "%s", path ? path : "");
	if (debug_root) {
		snprintf(j->debug_root, sizeof(j->debug_root), "%s", debug_root);
		j->has_debug_root = true;
	}
	if (limits)
		j->limits = *limits;
	ret = -EBUSY;
	pthread_mutex_lock(&l->mu);
	if (l->nqueue < SYMLOAD_MAX_QUEUED) {
		l->queue[l->nqueue++] = j;
		j = NULL;
		pthread_cond_signal(&l->wake);
		ret = 0;
	}
	pthread_mutex_unlock(&l->mu);
out:
	symload_job_free(j);
	if (fd >= 0)
		close(fd);
	return ret;
}

bool symload_pending(struct symload *l)
{
	return l && atomic_load(&l->pending);
}

size_t symload_take(struct symload *l, struct symload_result *out, size_t max)
{
	size_t n = 0;

	if (!l)
		return 0;
	pthread_mutex_lock(&l->mu);
	while (n < max && n < l->ndone) {
		out[n] = *l->done[n];
		free(l->done[n]);
		n++;
	}
	memmove(l->done, l->done + n, (l->ndone - n) * sizeof(l->done[0]));
	l->ndone -= n;
	atomic_store(&l->pending, l->ndone > 0);
	if (n)
		pthread_cond_signal(&l->wake);  /* room for results again */
	pthread_mutex_unlock(&l->mu);
	return n;
}
