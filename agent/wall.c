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
 * which takes the weight with one atomic exchange. A weight still there at the next tick means the signal has not
 * run yet (a thread in D runs its handler only when it wakes): the timer
 * adds to it rather than signalling again (two pending SIGPROFs merge), so
 * the one record, when it comes, stands for all the intervals.
 */
#include "wall.h"

#include "agent.h"
#include "jprof_agent.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WALL_CELLS (2 * WALL_MAX_THREADS)   /* power of two, at most half full */
#define WALL_PROBES 64
/* A weight not taken for this many ticks: the signal was lost (merged with
 * another one pending), send it again. */
#define WALL_RESEND_TICKS 16
#define WALL_STAT_BYTES 512   /* "tid (comm) S ...": the state is within the first 40 */

struct wall_thread {
	uint32_t tid;
	int fd;                /* /proc/self/task/TID/stat */
	uint64_t last_tick;    /* the tick it was last looked at */
};

#define WALL_TOMB UINT32_MAX   /* a cell whose thread ended (no tid is this large) */

struct wall_cell {
	uint32_t tid;          /* 0: never used; WALL_TOMB: free again (release) */
	uint16_t state;        /* enum jpring_state of the last look */
	uint32_t weight;       /* intervals due, taken (exchanged to 0) by the handler */
	uint64_t sent_tick;    /* timer thread only */
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
	c->sent_tick = 0;
	__atomic_store_n(&c->tid, tid, __ATOMIC_RELEASE);
	return c;
}

bool wall_take(int code, int32_t sender, uint32_t tid, uint16_t *state, uint32_t *weight)
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
	return true;
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
		struct wall_cell *c;
		uint16_t state;
		uint32_t prev;

		t->last_tick = wall_tick;
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
		if (due > JPRING_WALL_MAX_WEIGHT)
			due = JPRING_WALL_MAX_WEIGHT;
		/* State before weight: the handler reads the state after it
		 * took a non-zero weight. */
		__atomic_store_n(&c->state, state, __ATOMIC_RELAXED);
		prev = __atomic_fetch_add(&c->weight, (uint32_t)due, __ATOMIC_ACQ_REL);
		if (prev && wall_tick - c->sent_tick < WALL_RESEND_TICKS)
			continue;   /* still pending: the record will stand for both */
		c->sent_tick = wall_tick;
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
	for (size_t i = 0; i < wall_n; i++)
		close(wall_threads[i].fd);
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
	int fd;

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
	wall_threads[wall_n++] = (struct wall_thread){ .tid = tid, .fd = fd, .last_tick = wall_tick };
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
