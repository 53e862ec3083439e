/* The wall-clock timer thread and the table its signals are checked in.
 *
 * A blocked thread takes no perf-event signal, so its Java frames come from
 * here: every interval the timer reads each followed thread's state letter
 * (/proc/self/task/TID/stat, one fd kept open per thread, pread at 0: no
 * allocation per tick) and sends the recording's signal with tgkill to those
 * in S or D. The kernel stamps a tgkill with SI_TKILL and the sender's pid,
 * which no other process can forge, so the handler tells the timer's
 * signals from the perf events' (POLL_*) and from anyone else's.
 *
 * What the handler needs (the state, the weight) is in `cells`, an
 * open-addressing table keyed by tid, changed only under wall_lock (the
 * timer thread inserts, the agent thread leaves a tombstone for a thread
 * that ended, which a later insert reuses) and only read by the handler,
 * which takes the weight with one atomic exchange. A weight still there at
 * the next tick means the signal has not run yet (a thread in D runs its
 * handler only when it wakes): the timer adds to it rather than signalling
 * again (two pending SIGPROFs merge), so the one record, when it comes,
 * stands for all the intervals.
 *
 * A thread that has not run since its last signal is still blocked where it
 * was, so its stack has not changed: the timer writes a copy of the record
 * its handler wrote last (kept per cell) instead of waking it. "Has not
 * run" is read from /proc/self/task/TID/schedstat's count of times the
 * thread was scheduled in: exactly one more than when it was signalled (the
 * handler's own run). A natural wake-up that coincided with the signal
 * looks the same (the thread may have moved on and blocked elsewhere in
 * that one run), so a real signal is sent again at least every
 * WALL_REPLAY_MAX ticks and at once after any other run. This costs one
 * pread per blocked thread per tick instead of waking it.
 */
#include "wall.h"

#include "agent.h"
#include "jprof_agent.h"
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WALL_CELLS (2 * WALL_MAX_THREADS)   /* power of two, at most half full */
#define WALL_PROBES 64
/* A weight not taken for this many ticks: the signal was lost (merged with
 * another one pending), send it again. */
#define WALL_RESEND_TICKS 16
#define WALL_STAT_BYTES 512   /* "tid (comm) S ...": the state is within the first 40 */
#define WALL_REPLAY_MAX 8      /* copies of a record before a real signal again */

struct wall_thread {
	uint32_t tid;
	int fd;                /* /proc/self/task/TID/stat */
	int sfd;               /* /proc/self/task/TID/schedstat, or -1 */
	uint64_t last_tick;    /* the tick it was last looked at */
};

#define WALL_TOMB UINT32_MAX   /* a cell whose thread ended (no tid is this large) */

struct wall_cell {
	uint32_t tid;          /* 0: never used; WALL_TOMB: free again (release) */
	uint16_t state;        /* enum jpring_state of the last look */
	uint32_t weight;       /* intervals due, taken (exchanged to 0) by the handler */
	uint32_t kept;         /* 1: the handler kept its record for this signal (release) */
	/* Timer thread only: */
	uint64_t sent_tick;
	uint64_t sent_runs;    /* schedstat's run count when signalled (0: unknown) */
	uint32_t replays;      /* copies written since */
};

/* The last record a cell's thread wrote (its frames), for the copies. */
struct wall_last {
	int32_t num_frames;
	uint32_t pad;
	struct jpring_frame frames[JPRING_MAX_FRAMES];
};

static pthread_mutex_t wall_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wall_cond;
static struct wall_thread wall_threads[WALL_MAX_THREADS];  /* [0, wall_n), under wall_lock */
static size_t wall_n, wall_cursor;
static uint64_t wall_tick;
static uint64_t wall_interval_ns;
static bool wall_stopping, wall_running;
static pthread_t wall_th;
static uint32_t wall_th_tid;                          /* atomic: the timer thread's tid */
static int wall_sig;                                  /* atomic */
static struct wall_cell wall_cells[WALL_CELLS];
/* One per cell, mapped at the first start and never unmapped (a handler may
 * still write one after the recording stopped); pages only for cells used. */
static struct wall_last *wall_last;
static int wall_on;                                   /* atomic: the handler takes our signals */
static int32_t wall_pid;                              /* getpid() while on */

static size_t wall_hash(uint32_t tid)
{
	return (size_t)(tid * 2654435761u) & (WALL_CELLS - 1);
}

/* The cell of tid; with create (under wall_lock), a free one is claimed:
 * the first tombstone on tid's probe path, else the never-used cell that
 * ends it. A handler probing meanwhile sees a tombstone, another tid or its
 * own: never a wrong cell. */
static struct wall_cell *wall_cell(uint32_t tid, bool create)
{
	struct wall_cell *tomb = NULL, *c = NULL;
	size_t h = wall_hash(tid);

	for (unsigned i = 0; i < WALL_PROBES; i++) {
		struct wall_cell *at = &wall_cells[(h + i) & (WALL_CELLS - 1)];
		uint32_t t = __atomic_load_n(&at->tid, __ATOMIC_ACQUIRE);

		if (t == tid)
			return at;
		if (t == WALL_TOMB && !tomb)
			tomb = at;
		if (t == 0) {
			c = at;
			break;
		}
	}
	if (!create)
		return NULL;
	if (tomb)
		c = tomb;
	if (!c)
		return NULL;
	__atomic_store_n(&c->weight, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->kept, 0, __ATOMIC_RELAXED);
	c->sent_tick = c->sent_runs = 0;
	c->replays = 0;
	__atomic_store_n(&c->tid, tid, __ATOMIC_RELEASE);
	return c;
}

bool wall_take(int code, int32_t sender, uint32_t tid, uint16_t *state, uint32_t *weight,
	       uint32_t *cookie)
{
	struct wall_cell *c;
	uint32_t w;

	if (code != SI_TKILL || !__atomic_load_n(&wall_on, __ATOMIC_SEQ_CST) ||
	    sender != __atomic_load_n(&wall_pid, __ATOMIC_RELAXED))
		return false;
	if (tid == 0 || tid == WALL_TOMB)
		return false;
	c = wall_cell(tid, false);
	if (!c)
		return false;
	w = __atomic_exchange_n(&c->weight, 0, __ATOMIC_ACQ_REL);
	if (w == 0)
		return false;   /* a resend that found the first one taken */
	*state = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
	*weight = w > JPRING_WALL_MAX_WEIGHT ? JPRING_WALL_MAX_WEIGHT : w;
	*cookie = (uint32_t)(c - wall_cells) + 1;
	return true;
}

void wall_keep(uint32_t cookie, int32_t num_frames, const struct jpring_frame *frames)
{
	struct wall_cell *c;
	struct wall_last *l;

	/* Only a real stack: an error (GC active, ...) passes. */
	if (!cookie || cookie > WALL_CELLS || num_frames <= 0 || num_frames > JPRING_MAX_FRAMES ||
	    !wall_last)
		return;
	c = &wall_cells[cookie - 1];
	l = &wall_last[cookie - 1];
	memcpy(l->frames, frames, (size_t)num_frames * sizeof(*frames));
	l->num_frames = num_frames;
	__atomic_store_n(&c->kept, 1, __ATOMIC_RELEASE);
}

/* The state letter of /proc's stat: after the last ')' (comm may hold one). */
static char wall_state_of(int fd)
{
	char buf[WALL_STAT_BYTES];
	ssize_t n = pread(fd, buf, sizeof(buf), 0);
	char *p;

	if (n <= 0)
		return '?';
	p = memrchr(buf, ')', (size_t)n);
	if (!p || p + 2 >= buf + n)
		return '?';
	return p[2];
}

/* Times the thread was scheduled in (schedstat's third field), or 0. */
static uint64_t wall_runs_of(int sfd)
{
	char buf[96];
	ssize_t n = sfd >= 0 ? pread(sfd, buf, sizeof(buf) - 1, 0) : -1;
	const char *p = buf;
	uint64_t v = 0;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (int field = 0; field < 2; field++) {
		p = strchr(p, ' ');
		if (!p)
			return 0;
		p++;
	}
	while (*p >= '0' && *p <= '9')
		v = v * 10 + (uint64_t)(*p++ - '0');
	return v;
}

/* The thread has not run since its handler kept a record: write a copy
 * instead of a signal. True if done. */
static bool wall_replay(struct wall_cell *c, uint32_t tid, uint64_t runs, uint32_t due)
{
	const struct wall_last *l;

	if (!c || !runs || !c->sent_runs || runs != c->sent_runs + 1 ||
	    c->replays >= WALL_REPLAY_MAX || __atomic_load_n(&c->weight, __ATOMIC_ACQUIRE) ||
	    !__atomic_load_n(&c->kept, __ATOMIC_ACQUIRE))
		return false;
	l = &wall_last[c - wall_cells];
	if (ring_write_copy(tid, __atomic_load_n(&c->state, __ATOMIC_RELAXED), due, l->num_frames,
			    l->frames) < 0)
		return false;
	c->replays++;
	return true;
}

/* One tick, under wall_lock: at most WALL_SIGNAL_MAX threads signalled,
 * round-robin from where the last tick stopped. */
static void wall_tick_locked(void)
{
	int32_t pid = __atomic_load_n(&wall_pid, __ATOMIC_RELAXED);
	int sig = __atomic_load_n(&wall_sig, __ATOMIC_RELAXED);
	unsigned signalled = 0;
	size_t k;

	wall_tick++;
	for (k = 0; k < wall_n && signalled < WALL_SIGNAL_MAX; k++) {
		struct wall_thread *t = &wall_threads[(wall_cursor + k) % wall_n];
		uint64_t due = wall_tick - t->last_tick;
		uint64_t runs = wall_runs_of(t->sfd);
		struct wall_cell *c;
		uint16_t state;
		uint32_t prev;

		t->last_tick = wall_tick;
		if (due > JPRING_WALL_MAX_WEIGHT)
			due = JPRING_WALL_MAX_WEIGHT;
		if (wall_replay(wall_cell(t->tid, false), t->tid, runs, (uint32_t)due))
			continue;
		switch (wall_state_of(t->fd)) {
		case 'S':
			state = JPRING_STATE_SLEEPING;
			break;
		case 'D':
			state = JPRING_STATE_UNINTERRUPTIBLE;
			break;
		default:
			continue;   /* running or runnable: the perf event and off-CPU collector */
		}
		c = wall_cell(t->tid, true);
		if (!c)
			continue;
		/* State before weight: the handler reads the state after it
		 * took a non-zero weight. */
		__atomic_store_n(&c->state, state, __ATOMIC_RELAXED);
		prev = __atomic_fetch_add(&c->weight, (uint32_t)due, __ATOMIC_ACQ_REL);
		if (prev && wall_tick - c->sent_tick < WALL_RESEND_TICKS)
			continue;   /* still pending: the record will stand for both */
		c->sent_tick = wall_tick;
		c->sent_runs = runs;
		c->replays = 0;
		__atomic_store_n(&c->kept, 0, __ATOMIC_RELEASE);
		syscall(SYS_tgkill, (long)pid, (long)t->tid, (long)sig);
		signalled++;
	}
	if (wall_n)
		wall_cursor = (wall_cursor + k) % wall_n;
}

static void *wall_main(void *arg)
{
	struct timespec next;

	/* Its CPU time is jprofd's, not the JVM's: recordings leave it out
	 * by this name, and it is not a Java thread (never signalled). */
	pthread_setname_np(pthread_self(), JPAG_AGENT_THREAD_NAME);
	__atomic_store_n(&wall_th_tid, (uint32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	clock_gettime(CLOCK_MONOTONIC, &next);
	pthread_mutex_lock(&wall_lock);
	while (!wall_stopping) {
		uint64_t ns = (uint64_t)next.tv_nsec + wall_interval_ns;

		next.tv_sec += (time_t)(ns / 1000000000ull);
		next.tv_nsec = (long)(ns % 1000000000ull);
		while (!wall_stopping &&
		       pthread_cond_timedwait(&wall_cond, &wall_lock, &next) != ETIMEDOUT)
			;
		if (wall_stopping)
			break;
		wall_tick_locked();
		/* Fell behind (a stopped process, a long tick): no burst of
		 * ticks to catch up; the weights of the next looks cover it. */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec + 1)
			next = now;
	}
	pthread_mutex_unlock(&wall_lock);
	return NULL;
}

int wall_start(uint64_t interval_ns, int sig)
{
	pthread_condattr_t ca;
	int ret;

	wall_stop();
	if (interval_ns < 100000 || interval_ns > 10000000000ull)
		return -EINVAL;
	if (!wall_last) {
		void *m = mmap(NULL, WALL_CELLS * sizeof(*wall_last), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (m == MAP_FAILED)
			return -errno;
		wall_last = m;
	}
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	ret = -pthread_cond_init(&wall_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (ret < 0)
		return ret;
	/* No handler can be in the table: wall_on is 0 and the last
	 * recording's ring was quiesced. */
	memset(wall_cells, 0, sizeof(wall_cells));
	wall_interval_ns = interval_ns;
	wall_n = wall_cursor = 0;
	wall_tick = 0;
	__atomic_store_n(&wall_th_tid, 0, __ATOMIC_RELAXED);
	wall_stopping = false;
	__atomic_store_n(&wall_sig, sig, __ATOMIC_RELAXED);
	__atomic_store_n(&wall_pid, (int32_t)getpid(), __ATOMIC_RELAXED);
	__atomic_store_n(&wall_on, 1, __ATOMIC_SEQ_CST);
	ret = -pthread_create(&wall_th, NULL, wall_main, NULL);
	if (ret < 0) {
		__atomic_store_n(&wall_on, 0, __ATOMIC_SEQ_CST);
		pthread_cond_destroy(&wall_cond);
		return ret;
	}
	wall_running = true;
	/* Its tid before the agent asks for perf events of every thread: the
	 * timer's own work gets none (wall_thread_tid). */
	for (int i = 0; i < 10000 && !__atomic_load_n(&wall_th_tid, __ATOMIC_ACQUIRE); i++)
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	return 0;
}

uint32_t wall_thread_tid(void)
{
	return wall_running ? __atomic_load_n(&wall_th_tid, __ATOMIC_ACQUIRE) : 0;
}

void wall_stop(void)
{
	if (!wall_running)
		return;
	__atomic_store_n(&wall_on, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&wall_lock);
	wall_stopping = true;
	pthread_cond_signal(&wall_cond);
	pthread_mutex_unlock(&wall_lock);
	pthread_join(wall_th, NULL);
	pthread_cond_destroy(&wall_cond);
	for (size_t i = 0; i < wall_n; i++) {
		close(wall_threads[i].fd);
		if (wall_threads[i].sfd >= 0)
			close(wall_threads[i].sfd);
	}
	wall_n = 0;
	wall_running = false;
}

void wall_set_signal(int sig)
{
	__atomic_store_n(&wall_sig, sig, __ATOMIC_RELAXED);
}

void wall_add_thread(uint32_t tid)
{
	char path[48];
	int fd, sfd;

	if (!wall_running || !tid)
		return;
	pthread_mutex_lock(&wall_lock);
	for (size_t i = 0; i < wall_n; i++)
		if (wall_threads[i].tid == tid)
			goto out;   /* named again (a rename or a reused tid): same thread file */
	if (wall_n >= WALL_MAX_THREADS)
		goto out;
	snprintf(path, sizeof(path), "/proc/self/task/%u/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto out;   /* ended meanwhile */
	/* Without it (no CONFIG_SCHED_INFO) every look is a signal. */
	snprintf(path, sizeof(path), "/proc/self/task/%u/schedstat", tid);
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	wall_threads[wall_n++] = (struct wall_thread){ .tid = tid, .fd = fd, .sfd = sfd,
						       .last_tick = wall_tick };
out:
	pthread_mutex_unlock(&wall_lock);
}

void wall_remove_thread(uint32_t tid)
{
	if (!wall_running)
		return;
	pthread_mutex_lock(&wall_lock);
	for (size_t i = 0; i < wall_n; i++) {
		if (wall_threads[i].tid != tid)
			continue;
		struct wall_cell *c = wall_cell(tid, false);

		close(wall_threads[i].fd);
		if (wall_threads[i].sfd >= 0)
			close(wall_threads[i].sfd);
		wall_threads[i] = wall_threads[--wall_n];
		/* Its cell is free again: a long recording whose thread pool
		 * turns over does not run out of them. */
		if (c) {
			__atomic_store_n(&c->weight, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&c->tid, WALL_TOMB, __ATOMIC_RELEASE);
		}
		break;
	}
	pthread_mutex_unlock(&wall_lock);
}
