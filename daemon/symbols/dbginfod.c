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

#define DBGINFOD_MAX_IDS 4096     /* build-ids remembered (oldest finished forgotten first) */
#define DBGINFOD_MAX_UIDS 256     /* uids whose budget is not full */
#define DBGINFOD_MAX_RESULTS 256
#define NS_PER_S 1000000000ull

enum dbg_state { DBG_QUEUED, DBG_RUNNING, DBG_FOUND, DBG_FAILED };

struct dbg_id {
	uint8_t b[64];
	size_t len;
	uint32_t uid;                /* whose process asked: the queue it waits in */
	enum dbg_state state;
	uint64_t seq;                /* order asked, within the uid's turn */
	uint64_t done_ns;            /* finished then (found or failed) */
};

/* A uid's budget as a theoretical time: each lookup moves it on by the
 * refill interval; a lookup is allowed while it is less than a burst ahead
 * of now. At or before now the budget is full, and the entry can go. */
struct dbg_uid {
	uint32_t uid;
	uint64_t tat_ns;
};

struct dbginfod {
	pthread_t thread;
	bool started, stop;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct dbg_id *ids;          /* remembered build-ids, [0, nids) */
	size_t nids;
	size_t nqueued;              /* of them DBG_QUEUED */
	uint64_t seq;
	uint32_t last_uid;           /* the worker served this uid last */
	struct dbg_uid uids[DBGINFOD_MAX_UIDS];
	size_t nuids;
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

/* The next uid after last_uid (cyclically) that has a lookup waiting, and
 * its oldest one: uids take turns, however many one of them asked for. */
static struct dbg_id *dbginfod_next(struct dbginfod *d)
{
	struct dbg_id *best = NULL;
	uint64_t best_key = 0;

	for (size_t i = 0; i < d->nids; i++) {
		struct dbg_id *id = &d->ids[i];
		uint64_t turn;

		if (id->state != DBG_QUEUED)
			continue;
		/* Distance after last_uid, 1 .. 2^32 (last_uid itself last). */
		turn = (uint64_t)(uint32_t)(id->uid - d->last_uid - 1) + 1;
		if (!best || turn < best_key || (turn == best_key && id->seq < best->seq)) {
			best = id;
			best_key = turn;
		}
	}
	return best;
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
		struct dbg_id *slot, id;
		char *path = NULL;
		int fd = -1;

		while (!d->stop && d->nqueued == 0)
			pthread_cond_wait(&d->wake, &d->mu);
		if (d->stop)
			break;
		slot = dbginfod_next(d);
		slot->state = DBG_RUNNING;
		d->nqueued--;
		d->last_uid = slot->uid;
		id = *slot;
		pthread_mutex_unlock(&d->mu);

		d->deadline_ns = clock_mono_ns() + DBGINFOD_TIMEOUT_S * NS_PER_S;
		if (c)
			fd = debuginfod_find_debuginfo(c, id.b, (int)id.len, &path);
		if (fd >= 0)
			close(fd);

		pthread_mutex_lock(&d->mu);
		/* Running entries are never forgotten: slot is still this one. */
		slot->done_ns = clock_mono_ns();
		if (fd >= 0 && path && strlen(path) < sizeof(d->done[0].path) &&
		    d->ndone < DBGINFOD_MAX_RESULTS) {
			struct dbginfod_result *r = &d->done[d->ndone++];

			memcpy(r->build_id, id.b, id.len);
			r->build_id_len = id.len;
			strcpy(r->path, path);
			slot->state = DBG_FOUND;
			d->st.found++;
			atomic_store(&d->pending, true);
		} else {
			slot->state = DBG_FAILED;
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
	d->ids = calloc(DBGINFOD_MAX_IDS, sizeof(*d->ids));
	d->done = calloc(DBGINFOD_MAX_RESULTS, sizeof(*d->done));
	if (!d->ids || !d->done) {
		dbginfod_free(d);
		return -ENOMEM;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->wake, NULL);
	r = -pthread_create(&d->thread, NULL, dbginfod_main, d);
	if (r < 0) {
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->wake);
		free(d->ids);
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
	free(d->ids);
	free(d->done);
	free(d);
}

/* Charges one lookup to uid; false when its budget is spent for now. */
static bool dbginfod_charge(struct dbginfod *d, uint32_t uid, uint64_t now)
{
	uint64_t step = DBGINFOD_UID_REFILL_S * NS_PER_S;
	uint64_t burst = uid == 0 ? DBGINFOD_ROOT_BURST : DBGINFOD_UID_BURST;
	struct dbg_uid *u = NULL;

	for (size_t i = 0; i < d->nuids && !u; i++)
		if (d->uids[i].uid == uid)
			u = &d->uids[i];
	for (size_t i = 0; i < d->nuids && !u; i++)
		if (d->uids[i].tat_ns <= now)
			u = &d->uids[i];  /* a full budget: its uid is as if new */
	if (!u) {
		if (d->nuids == DBGINFOD_MAX_UIDS)
			return false;
		u = &d->uids[d->nuids++];
		u->tat_ns = 0;
	}
	if (u->uid != uid) {
		u->uid = uid;
		u->tat_ns = 0;
	}
	if (u->tat_ns < now)
		u->tat_ns = now;
	if (u->tat_ns - now > (burst - 1) * step)
		return false;
	u->tat_ns += step;
	return true;
}

/* A slot for a new build-id: a free one, else the one finished longest ago. */
static struct dbg_id *dbginfod_slot(struct dbginfod *d)
{
	struct dbg_id *old = NULL;

	if (d->nids < DBGINFOD_MAX_IDS)
		return &d->ids[d->nids++];
	for (size_t i = 0; i < d->nids; i++) {
		struct dbg_id *id = &d->ids[i];

		if ((id->state == DBG_FOUND || id->state == DBG_FAILED) &&
		    (!old || id->done_ns < old->done_ns))
			old = id;
	}
	return old;
}

int dbginfod_want(struct dbginfod *d, const uint8_t *bid, size_t len, uint32_t uid)
{
	uint64_t now = clock_mono_ns();
	struct dbg_id *id = NULL;
	int ret = 1;

	if (!len || len > sizeof(d->ids[0].b))
		return 1;  /* never to be asked: as good as asked */
	pthread_mutex_lock(&d->mu);
	for (size_t i = 0; i < d->nids && !id; i++)
		if (d->ids[i].len == len && memcmp(d->ids[i].b, bid, len) == 0)
			id = &d->ids[i];
	if (id && !(id->state == DBG_FAILED && now - id->done_ns >= DBGINFOD_RETRY_S * NS_PER_S))
		goto out;
	if (!id)
		id = dbginfod_slot(d);  /* room first: a refused want is not charged */
	if (!id || !dbginfod_charge(d, uid, now)) {
		if (id && id->len == 0)
			d->nids--;  /* a fresh slot (the last one) goes back */
		d->st.refused++;
		ret = 0;
		goto out;
	}
	memcpy(id->b, bid, len);
	id->len = len;
	id->uid = uid;
	id->state = DBG_QUEUED;
	id->seq = d->seq++;
	id->done_ns = 0;
	d->nqueued++;
	d->st.requested++;
	pthread_cond_signal(&d->wake);
out:
	pthread_mutex_unlock(&d->mu);
	return ret;
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
