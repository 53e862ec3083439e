/* debuginfod lookups on a worker thread. See dbginfod.h. */
#include "dbginfod.h"

#include <elfutils/debuginfod.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define DBGINFOD_MAX_IDS 4096     /* build-ids ever asked for (the rest are not) */
#define DBGINFOD_MAX_RESULTS 256

struct dbg_id {
	uint8_t b[64];
	size_t len;
};

struct dbginfod {
	pthread_t thread;
	bool started, stop;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct dbg_id *asked;        /* every build-id asked for: asked once */
	size_t nasked;
	size_t next;                 /* asked[next..nasked) wait for the worker */
	struct dbginfod_result *done;
	size_t ndone;
	atomic_bool pending;
	struct dbginfod_stats st;
	_Atomic uint64_t deadline_ns;  /* the lookup in flight ends then (0: now) */
};

/* libdebuginfod calls this while it downloads: non-zero cancels. */
static int dbginfod_progress(debuginfod_client *c, long a, long b)
{
	struct dbginfod *d = debuginfod_get_user_data(c);

	(void)a;
	(void)b;
	return d && clock_mono_ns() > d->deadline_ns;
}

static void *dbginfod_main(void *arg)
{
	struct dbginfod *d = arg;
	debuginfod_client *c = debuginfod_begin();

	if (c) {
		debuginfod_set_user_data(c, d);
		debuginfod_set_progressfn(c, dbginfod_progress);
	}
	pthread_mutex_lock(&d->mu);
	for (;;) {
		struct dbg_id id;
		char *path = NULL;
		int fd = -1;

		while (!d->stop && d->next == d->nasked)
			pthread_cond_wait(&d->wake, &d->mu);
		if (d->stop)
			break;
		id = d->asked[d->next++];
		pthread_mutex_unlock(&d->mu);

		d->deadline_ns = clock_mono_ns() + DBGINFOD_TIMEOUT_S * 1000000000ull;
		if (c)
			fd = debuginfod_find_debuginfo(c, id.b, (int)id.len, &path);
		if (fd >= 0)
			close(fd);

		pthread_mutex_lock(&d->mu);
		if (fd >= 0 && path && strlen(path) < sizeof(d->done[0].path) &&
		    d->ndone < DBGINFOD_MAX_RESULTS) {
			struct dbginfod_result *r = &d->done[d->ndone++];

			memcpy(r->build_id, id.b, id.len);
			r->build_id_len = id.len;
			strcpy(r->path, path);
			d->st.found++;
			atomic_store(&d->pending, true);
		} else {
			d->st.failed++;
		}
		free(path);
	}
	pthread_mutex_unlock(&d->mu);
	if (c)
		debuginfod_end(c);
	return NULL;
}

int dbginfod_new(struct dbginfod **out)
{
	const char *urls = getenv("DEBUGINFOD_URLS");
	struct dbginfod *d;
	int r;

	*out = NULL;
	if (!urls || !*urls)
		return -ENOENT;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->asked = calloc(DBGINFOD_MAX_IDS, sizeof(*d->asked));
	d->done = calloc(DBGINFOD_MAX_RESULTS, sizeof(*d->done));
	if (!d->asked || !d->done) {
		dbginfod_free(d);
		return -ENOMEM;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->wake, NULL);
	r = -pthread_create(&d->thread, NULL, dbginfod_main, d);
	if (r < 0) {
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->wake);
		free(d->asked);
		free(d->done);
		free(d);
		return r;
	}
	d->started = true;
	*out = d;
	return 0;
}

void dbginfod_free(struct dbginfod *d)
{
	if (!d)
		return;
	if (d->started) {
		pthread_mutex_lock(&d->mu);
		d->stop = true;
		d->deadline_ns = 0;  /* cancels a download in flight */
		pthread_cond_signal(&d->wake);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->wake);
	}
	free(d->asked);
	free(d->done);
	free(d);
}

void dbginfod_want(struct dbginfod *d, const uint8_t *bid, size_t len)
{
	if (!len || len > sizeof(d->asked[0].b))
		return;
	pthread_mutex_lock(&d->mu);
	for (size_t i = 0; i < d->nasked; i++)
		if (d->asked[i].len == len && memcmp(d->asked[i].b, bid, len) == 0)
			goto out;
	if (d->nasked < DBGINFOD_MAX_IDS) {
		memcpy(d->asked[d->nasked].b, bid, len);
		d->asked[d->nasked++].len = len;
		d->st.requested++;
		pthread_cond_signal(&d->wake);
	}
out:
	pthread_mutex_unlock(&d->mu);
}

bool dbginfod_pending(struct dbginfod *d)
{
	return atomic_load(&d->pending);
}

size_t dbginfod_take(struct dbginfod *d, struct dbginfod_result *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&d->mu);
	n = d->ndone < max ? d->ndone : max;
	memcpy(out, d->done, n * sizeof(*out));
	memmove(d->done, d->done + n, (d->ndone - n) * sizeof(*out));
	d->ndone -= n;
	atomic_store(&d->pending, d->ndone > 0);
	pthread_mutex_unlock(&d->mu);
	return n;
}

void dbginfod_get_stats(struct dbginfod *d, struct dbginfod_stats *out)
{
	pthread_mutex_lock(&d->mu);
	*out = d->st;
	pthread_mutex_unlock(&d->mu);
}
