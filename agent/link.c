/* The agent thread. All socket I/O, fd arming and JVMTI method resolution
 * happen here; JVMTI callbacks only queue work and wake it through an
 * eventfd. When no recording runs it holds no perf fd and sleeps in poll. */
#include "link.h"

#include "agent.h"
#include "codemap.h"
#include "events.h"
#include "jprof_agent.h"
#include "map.h"
#include "methods.h"
#include "ring.h"
#include "threads.h"
#include "wall.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LINK_IO_TIMEOUT_S 5          /* a stalled daemon: give up the connection */
#define LINK_WELCOME_TIMEOUT_MS 5000
#define LINK_RESCAN_MS 1000          /* /proc/self/task while recording (threads
				      * without a JVMTI ThreadStart) */
#define LINK_SIGNAL_CHECK_MS 100     /* is our handler still installed (recording) */
/* The same wakeup sends queued alloc/lock records. */
_Static_assert(LINK_SIGNAL_CHECK_MS <= EVENTS_FLUSH_MS, "event records wait longer than promised");
/* A starting Java thread waits this long at most for its armed fd, so the
 * CPU time of a short thread counts from its first Java code on. */
#define LINK_START_WAIT_MS 30
#define LINK_ANSWERED_MAX 256        /* recently answered tids the waiters look in */
#define LINK_BACKOFF_MIN_MS 1000
#define LINK_BACKOFF_MAX_MS 30000

/* tid table values: fd in the low 32 bits, state above. */
enum link_tid_state { TID_REQUESTED = 1, TID_ARMED = 2, TID_FAILED = 3 };

struct link_tevent {
	uint32_t tid;
	bool started;
	char *name;              /* started: its Java name (malloc'd), or NULL */
};

/* Shared with other threads. */
static pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;
static char link_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static struct link_tevent *link_queue;  /* ThreadStart/End while recording */
static size_t link_queue_len, link_queue_cap;
static bool link_queue_oom;
static bool link_dying;                  /* VMDeath seen */
static bool link_started;
static int link_evfd = -1;
static int link_recording;               /* atomic: queue thread events */
static int link_kicked;                  /* atomic: reconnect now */
static pthread_cond_t link_answer_cond;  /* an fd request was answered (CLOCK_MONOTONIC) */
static uint32_t link_answered[LINK_ANSWERED_MAX];
static unsigned link_answered_next;
static int link_start_wait;              /* atomic: ThreadStart waits for its fd */

/* Owned by the agent thread. */
static JNIEnv *link_jni;
static bool link_rec_on;
static int link_rec_signal;
static uint32_t link_features;           /* the daemon's JPAG_FEATURE_* */
static uint64_t link_interval_ns;        /* the recording's */
static bool link_phase;                  /* random first period per fd */
static uint32_t link_self_tid;           /* this thread: never sampled */
/* This recording's perf fd requests sent and answers received (answers come
 * in request order), and how many answers arm the threads known at START:
 * then JPAG_THREADS_ARMED tells the daemon it may start the events. */
static uint64_t link_fd_asked, link_fd_answered;
static uint64_t link_armed_at;
static bool link_armed_due;
static bool link_refusal_logged;
static struct map link_tids;             /* tid -> packed fd/state */
static unsigned char link_rx[JPAG_MAX_PAYLOAD] __attribute__((aligned(16)));
static unsigned char link_tx[JPAG_MAX_PAYLOAD] __attribute__((aligned(16)));

static uint64_t link_pack(int fd, enum link_tid_state st)
{
	return (uint64_t)(uint32_t)fd | ((uint64_t)st << 32);
}

static int link_unpack_fd(uint64_t v)
{
	return (int)(uint32_t)v;
}

static enum link_tid_state link_unpack_state(uint64_t v)
{
	return (enum link_tid_state)(v >> 32);
}

static void link_wake(void)
{
	uint64_t one = 1;
	ssize_t n = write(link_evfd, &one, sizeof(one));

	(void)n;   /* EAGAIN: the counter is already non-zero */
}

void link_notify(void)
{
	link_wake();
}

int link_init(const char *socket_path)
{
	pthread_condattr_t ca;

	if (strlen(socket_path) >= sizeof(link_path))
		return -ENAMETOOLONG;
	strcpy(link_path, socket_path);
	map_init(&link_tids, true);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&link_answer_cond, &ca);
	pthread_condattr_destroy(&ca);
	link_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return link_evfd < 0 ? -errno : 0;
}

void link_kick(const char *socket_path)
{
	pthread_mutex_lock(&link_lock);
	if (socket_path && strlen(socket_path) < sizeof(link_path))
		strcpy(link_path, socket_path);
	pthread_mutex_unlock(&link_lock);
	__atomic_store_n(&link_kicked, 1, __ATOMIC_SEQ_CST);
	link_wake();
}

bool link_is_recording(void)
{
	return __atomic_load_n(&link_recording, __ATOMIC_SEQ_CST);
}

static void link_queue_free(struct link_tevent *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(q[i].name);
	free(q);
}

static bool link_was_answered(uint32_t tid)
{
	for (unsigned i = 0; i < LINK_ANSWERED_MAX; i++)
		if (link_answered[i] == tid)
			return true;
	return false;
}

/* The starting thread itself, in its ThreadStart: its event is opened and
 * armed by the agent thread after a round trip to the daemon, and the CPU
 * time it runs meanwhile is never sampled (most of a 2 ms thread's on a busy
 * machine). Waiting here, before its first Java code, costs it no CPU time;
 * it is bounded, and the JVM lets safepoints proceed while an agent callback
 * waits (the thread is in native state). */
static void link_wait_answer(uint32_t tid)
{
	struct timespec deadline;

	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_nsec += LINK_START_WAIT_MS * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&link_lock);
	while (!link_dying && __atomic_load_n(&link_start_wait, __ATOMIC_SEQ_CST) &&
	       !link_was_answered(tid))
		if (pthread_cond_timedwait(&link_answer_cond, &link_lock, &deadline) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&link_lock);
}

/* Agent thread: tid's request has its answer (armed or not). */
static void link_answer(uint32_t tid)
{
	pthread_mutex_lock(&link_lock);
	link_answered[link_answered_next++ % LINK_ANSWERED_MAX] = tid;
	pthread_cond_broadcast(&link_answer_cond);
	pthread_mutex_unlock(&link_lock);
}

/* Lets every waiting thread go (the recording ends). */
static void link_release_waiters(void)
{
	__atomic_store_n(&link_start_wait, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&link_lock);
	memset(link_answered, 0, sizeof(link_answered));
	pthread_cond_broadcast(&link_answer_cond);
	pthread_mutex_unlock(&link_lock);
}

void link_thread_event(uint32_t tid, bool started, const char *name)
{
	char *copy = NULL;
	struct link_tevent *q;

	if (!__atomic_load_n(&link_recording, __ATOMIC_SEQ_CST))
		return;
	/* Without memory the thread keeps its /proc name. */
	if (started && name)
		copy = strdup(name);
	pthread_mutex_lock(&link_lock);
	if (link_queue_len == link_queue_cap) {
		size_t cap = link_queue_cap ? link_queue_cap * 2 : 64;

		q = realloc(link_queue, cap * sizeof(*q));
		if (!q) {
			/* The periodic /proc/self/task rescan catches up. */
			link_queue_oom = true;
			free(copy);
			goto out;
		}
		link_queue = q;
		link_queue_cap = cap;
	}
	link_queue[link_queue_len++] = (struct link_tevent){
		.tid = tid, .started = started, .name = copy,
	};
out:
	pthread_mutex_unlock(&link_lock);
	link_wake();
	if (started && tid != __atomic_load_n(&link_self_tid, __ATOMIC_SEQ_CST) &&
	    __atomic_load_n(&link_start_wait, __ATOMIC_SEQ_CST))
		link_wait_answer(tid);
}

void link_vm_death(void)
{
	pthread_mutex_lock(&link_lock);
	link_dying = true;
	pthread_cond_broadcast(&link_answer_cond);
	/* No handler calls AsyncGetCallTrace from here on; the mapping stays
	 * until the agent thread retires it. */
	ring_quiesce();
	pthread_mutex_unlock(&link_lock);
	link_wake();
}

static bool link_is_dying(void)
{
	bool dying;

	pthread_mutex_lock(&link_lock);
	dying = link_dying;
	pthread_mutex_unlock(&link_lock);
	return dying;
}

/* ---- framing ------------------------------------------------------------ */

static int link_send(int sock, uint16_t type, const void *payload, size_t len)
{
	struct jpag_hdr hdr = {
		.magic = JPAG_MAGIC,
		.version = JPAG_VERSION,
		.type = type,
		.len = (uint32_t)len,
	};
	struct iovec iov[2] = {
		{ .iov_base = &hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	while (msg.msg_iovlen) {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		while (n > 0 && msg.msg_iovlen) {
			size_t k = (size_t)n < msg.msg_iov->iov_len ? (size_t)n : msg.msg_iov->iov_len;

			msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + k;
			msg.msg_iov->iov_len -= k;
			n -= (ssize_t)k;
			if (!msg.msg_iov->iov_len) {
				msg.msg_iov++;
				msg.msg_iovlen--;
			}
		}
	}
	return 0;
}

/* Reads exactly len bytes. The first SCM_RIGHTS fd goes to *fd (if fd is
 * not NULL and *fd is -1); any other received fd is closed. */
static int link_recv_full(int sock, void *buf, size_t len, int *fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	size_t got = 0;

	while (got < len) {
		struct iovec iov = { .iov_base = (char *)buf + got, .iov_len = len - got };
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.buf,
			.msg_controllen = sizeof(ctl.buf),
		};
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t nfd;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
				if (fd && *fd < 0)
					*fd = f;
				else
					close(f);
			}
		}
		got += (size_t)n;
	}
	return 0;
}

/* Reads one frame into link_rx. *fd: the fd sent with it, or -1. */
static int link_recv_frame(int sock, struct jpag_hdr *hdr, int *fd)
{
	int ret;

	*fd = -1;
	ret = link_recv_full(sock, hdr, sizeof(*hdr), fd);
	if (ret < 0)
		goto out;
	if (hdr->magic != JPAG_MAGIC || hdr->version != JPAG_VERSION ||
	    hdr->len > JPAG_MAX_PAYLOAD) {
		ret = -EPROTO;
		goto out;
	}
	ret = link_recv_full(sock, link_rx, hdr->len, fd);
out:
	if (ret < 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return ret;
}

/* ---- per-thread perf fds -------------------------------------------------- */

static void link_disarm(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_ASYNC);
	ring_mark_fd(fd, RING_FD_OFF);
	close(fd);
}

/* Forgets tid, disarming its fd if it has one. */
static void link_drop_tid(uint32_t tid)
{
	uint64_t v;

	if (!map_get(&link_tids, tid, &v))
		return;
	if (link_unpack_state(v) == TID_ARMED)
		link_disarm(link_unpack_fd(v));
	map_del(&link_tids, tid);
}

static int link_send_name(uint32_t tid, const char *name, size_t len, void *arg)
{
	struct jpag_thread_name tn = { .tid = tid };
	int sock = *(const int *)arg;

	/* A named thread is a Java thread: the wall timer follows it (not
	 * this one: the agent's own work is not the JVM's). */
	if (tid != link_self_tid)
		wall_add_thread(tid);

	if (len > JPAG_THREAD_NAME_MAX)
		len = JPAG_THREAD_NAME_MAX;
	tn.name_len = (uint16_t)len;
	memcpy(link_tx, &tn, sizeof(tn));
	memcpy(link_tx + sizeof(tn), name, len);
	return link_send(sock, JPAG_THREAD_NAME, link_tx, sizeof(tn) + len);
}

static int link_request_tid(int sock, uint32_t tid)
{
	struct jpag_perf_fd_req req = { .tid = tid };
	int ret;

	/* The agent's own work (socket I/O, naming methods) is not the JVM's:
	 * no event, so no Java samples of it (the daemon drops its native
	 * ones by name). */
	if (tid == link_self_tid || tid == wall_thread_tid())
		return 0;
	ret = map_put(&link_tids, tid, link_pack(-1, TID_REQUESTED));
	if (ret < 0)
		return 0;   /* no memory: this thread goes unsampled */
	ret = link_send(sock, JPAG_PERF_FD_REQ, &req, sizeof(req));
	if (ret == 0)
		link_fd_asked++;
	return ret;
}

/* Once the answers to START's requests are in (armed or refused): the
 * daemon keeps the events stopped until then, so no sample of a Java
 * thread goes without its Java frames. */
static int link_send_armed(int sock)
{
	if (!link_armed_due || link_fd_answered < link_armed_at)
		return 0;
	link_armed_due = false;
	if (!(link_features & JPAG_FEATURE_ARMED))
		return 0;
	agent_debug("threads armed: %llu fd answers", (unsigned long long)link_fd_answered);
	return link_send(sock, JPAG_THREADS_ARMED, NULL, 0);
}

/* Uniform in [1, interval]: the phase of a thread's samples within its CPU
 * time. Not for security (the JVM may set its periods anyway), only spread. */
static uint64_t link_first_period(void)
{
	uint64_t x;

	if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ts.tv_sec;
		x ^= x >> 29;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 32;
	}
	return 1 + x % link_interval_ns;
}

static int link_arm(int fd, uint32_t tid)
{
	struct f_owner_ex owner = { .type = F_OWNER_TID, .pid = (pid_t)tid };
	int fl;

	if (fd >= RING_MAX_FD)
		return -EMFILE;
	if (fcntl(fd, F_SETSIG, link_rec_signal) < 0 || fcntl(fd, F_SETOWN_EX, &owner) < 0)
		return -errno;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	/* Marked before O_ASYNC: the first signal must find its fd known. */
	ring_mark_fd(fd, link_phase ? RING_FD_PHASING : RING_FD_ON);
	if (fcntl(fd, F_SETFL, fl | O_ASYNC) < 0) {
		int ret = -errno;

		ring_mark_fd(fd, RING_FD_OFF);
		return ret;
	}
	/* The random first period only after O_ASYNC: its overflow must
	 * signal, or the handler never sets the interval again. */
	if (link_phase) {
		int ret = ring_phase_fd(fd, link_first_period());

		if (ret < 0)
			agent_debug("perf fd of tid %u keeps a fixed phase: %s", tid, strerror(-ret));
	}
	return 0;
}

static void link_arm_answer(const struct jpag_perf_fd *pf, int fd)
{
	uint64_t v;
	int ret;

	if (!link_rec_on || !map_get(&link_tids, pf->tid, &v) ||
	    link_unpack_state(v) != TID_REQUESTED) {
		/* Late answer for a thread that ended or a recording that
		 * stopped. */
		if (fd >= 0)
			close(fd);
		return;
	}
	if (pf->status != 0 || fd < 0) {
		agent_debug("no perf fd for tid %u: %s", pf->tid,
			    pf->status ? strerror(-pf->status) : "no fd sent");
		if (fd >= 0)
			close(fd);
		map_put(&link_tids, pf->tid, link_pack(-1, TID_FAILED));
		return;
	}
	ret = link_arm(fd, pf->tid);
	if (ret < 0) {
		agent_debug("cannot arm perf fd for tid %u: %s", pf->tid, strerror(-ret));
		close(fd);
		if (ret == -ESRCH)
			map_del(&link_tids, pf->tid);
		else
			map_put(&link_tids, pf->tid, link_pack(-1, TID_FAILED));
		return;
	}
	map_put(&link_tids, pf->tid, link_pack(fd, TID_ARMED));
}

static void link_on_perf_fd(const struct jpag_perf_fd *pf, int fd)
{
	/* An allocation or lock recording has no perf event for any thread:
	 * starting threads need not wait for the answer. */
	if (pf->status == -EOPNOTSUPP)
		__atomic_store_n(&link_start_wait, 0, __ATOMIC_SEQ_CST);
	/* An answer of the recording before a restarted one may count here:
	 * THREADS_ARMED then leaves one answer early, no worse. */
	if (link_rec_on)
		link_fd_answered++;
	link_arm_answer(pf, fd);
	link_answer(pf->tid);
}

/* Requests an fd for every thread of the process we have none for, and
 * forgets threads that are gone (native threads have no ThreadEnd). */
static int link_rescan(int sock)
{
	uint32_t *gone = NULL;
	size_t ngone = 0;
	struct map now;
	struct dirent *de;
	DIR *dir;
	int ret = 0;

	map_init(&now, false);
	dir = opendir("/proc/self/task");
	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		char *end;
		unsigned long tid = strtoul(de->d_name, &end, 10);

		if (*end || !tid || tid > UINT32_MAX)
			continue;
		map_put(&now, tid, 0);
	}
	closedir(dir);
	if (!now.len)
		goto out;
	gone = calloc(link_tids.len + 1, sizeof(*gone));
	for (size_t i = 0; gone && i < link_tids.cap; i++)
		if (link_tids.keys[i] && !map_get(&now, link_tids.keys[i], NULL))
			gone[ngone++] = (uint32_t)link_tids.keys[i];
	for (size_t i = 0; i < ngone; i++) {
		wall_remove_thread(gone[i]);
		link_drop_tid(gone[i]);
	}
	free(gone);
	for (size_t i = 0; i < now.cap && ret == 0; i++)
		if (now.keys[i] && !map_get(&link_tids, now.keys[i], NULL))
			ret = link_request_tid(sock, (uint32_t)now.keys[i]);
out:
	map_fini(&now);
	return ret;
}

static int link_drain_thread_events(int sock)
{
	struct link_tevent *q;
	size_t n;
	bool oom;
	int ret = 0;

	pthread_mutex_lock(&link_lock);
	q = link_queue;
	n = link_queue_len;
	oom = link_queue_oom;
	link_queue = NULL;
	link_queue_len = link_queue_cap = 0;
	link_queue_oom = false;
	pthread_mutex_unlock(&link_lock);

	for (size_t i = 0; i < n && ret == 0 && link_rec_on; i++) {
		uint64_t v;

		if (!q[i].started) {
			wall_remove_thread(q[i].tid);
			link_drop_tid(q[i].tid);
			continue;
		}
		if (q[i].name) {
			ret = link_send_name(q[i].tid, q[i].name, strlen(q[i].name), &sock);
			if (ret < 0)
				break;
		}
		if (map_get(&link_tids, q[i].tid, &v) && link_unpack_state(v) == TID_REQUESTED)
			continue;
		/* A known tid starting again is a reused tid: its old event
		 * followed the old thread. */
		link_drop_tid(q[i].tid);
		ret = link_request_tid(sock, q[i].tid);
	}
	link_queue_free(q, n);
	if (oom && ret == 0 && link_rec_on)
		ret = link_rescan(sock);
	return ret;
}

/* ---- recording lifecycle ------------------------------------------------------ */

static void link_stop_recording(void)
{
	if (!link_rec_on)
		return;
	link_armed_due = false;
	__atomic_store_n(&link_recording, 0, __ATOMIC_SEQ_CST);
	link_release_waiters();
	/* Disarm first (the wall timer's signals too), so no new signal
	 * comes, then retire the ring. */
	wall_stop();
	for (size_t i = 0; i < link_tids.cap; i++) {
		uint64_t v = link_tids.vals ? link_tids.vals[i] : 0;

		if (link_tids.keys[i] && link_unpack_state(v) == TID_ARMED)
			link_disarm(link_unpack_fd(v));
	}
	map_fini(&link_tids);
	events_off();
	events_reset();
	ring_retire();
	link_rec_on = false;
	pthread_mutex_lock(&link_lock);
	link_queue_free(link_queue, link_queue_len);
	link_queue = NULL;
	link_queue_len = link_queue_cap = 0;
	pthread_mutex_unlock(&link_lock);
	agent_debug("recording stopped");
}

/* Tells a daemon that knows JPAG_SIGNAL which signal the agent uses now. */
static int link_send_signal(int sock, int sig, int given_up, uint32_t reason)
{
	struct jpag_signal sg = { .signal = (uint32_t)sig, .proposed = (uint32_t)given_up,
				  .reason = reason };

	if (!(link_features & JPAG_FEATURE_SIGNAL))
		return 0;
	return link_send(sock, JPAG_SIGNAL, &sg, sizeof(sg));
}

/* A wall-clock recording: the timer for blocked threads, and the answer
 * the daemon waits for before it leaves their off-CPU intervals out. */
static int link_start_wall(int sock, uint64_t interval_ns, int sig)
{
	struct jpag_event_status es = { .event = JPAG_EV_WALL };

	es.status = wall_start(interval_ns, sig);
	if (es.status < 0)
		snprintf(es.message, sizeof(es.message), "cannot start the wall timer: %s",
			 strerror(-es.status));
	agent_debug("wall timer: %s", es.status ? es.message : "on");
	return link_send(sock, JPAG_EVENT_STATUS, &es, sizeof(es));
}

static int link_on_start(int sock, const struct jpag_start *st, int memfd)
{
	const char *phase_env;
	int sig, ret;

	/* A START without STOP (a restarted recording): end the old one. */
	link_stop_recording();
	if (memfd < 0) {
		ret = -EBADF;
		goto refuse;
	}
	if (st->slot_bytes != JPRING_SLOT_BYTES || st->max_frames != JPRING_MAX_FRAMES ||
	    st->signal >= _NSIG || !ring_signal_usable((int)st->signal)) {
		ret = -EINVAL;
		goto refuse;
	}
	sig = ring_choose_signal((int)st->signal);
	ret = sig < 0 ? sig : ring_install_signal(sig);
	if (ret < 0)
		goto refuse;
	pthread_mutex_lock(&link_lock);
	ret = link_dying ? -ESHUTDOWN : ring_activate(memfd, st->ring_bytes, st->nslots);
	pthread_mutex_unlock(&link_lock);
	if (ret < 0)
		goto refuse;
	/* The mapping keeps the memory; the fd is not needed any more. */
	close(memfd);
	link_rec_on = true;
	link_rec_signal = sig;
	link_interval_ns = st->interval_ns;
	/* Off only for measuring what the random phase gains (bench/). */
	phase_env = getenv("JPROF_AGENT_PHASE");
	link_phase = st->interval_ns > 0 && !(phase_env && !strcmp(phase_env, "0"));
	ring_set_interval(st->interval_ns);
	__atomic_store_n(&link_start_wait, link_phase, __ATOMIC_SEQ_CST);
	map_init(&link_tids, true);
	link_fd_asked = link_fd_answered = 0;
	/* Before the scan: a thread starting now is either listed or queued. */
	__atomic_store_n(&link_recording, 1, __ATOMIC_SEQ_CST);
	agent_debug("recording: signal %d, interval %llu ns, %u slots", sig,
		    (unsigned long long)st->interval_ns, st->nslots);
	ret = 0;
	if (sig != (int)st->signal) {
		/* Normal with another profiler in the JVM: the daemon logs it. */
		agent_debug("signal %u has another handler (another profiler?): recording with "
			    "signal %d instead", st->signal, sig);
		ret = link_send_signal(sock, sig, (int)st->signal, JPAG_SIGNAL_AT_START);
	}
	if (ret == 0 && (st->flags & JPAG_START_WALL) && (link_features & JPAG_FEATURE_WALL))
		ret = link_start_wall(sock, st->interval_ns, sig);
	if (ret == 0)
		ret = link_rescan(sock);
	/* The threads that exist now (the wall timer follows them); later
	 * ones come with ThreadStart. */
	if (ret == 0)
		ret = threads_each(agent_jvmti, link_jni, link_send_name, &sock);
	if (ret == 0) {
		link_armed_at = link_fd_asked;
		link_armed_due = true;
		ret = link_send_armed(sock);
	}
	return ret;

refuse:
	if (!link_refusal_logged)
		agent_warn("refusing recording (signal %u, ring %u bytes, %u slots): %s",
			   st->signal, st->ring_bytes, st->nslots, strerror(-ret));
	link_refusal_logged = true;
	if (memfd >= 0)
		close(memfd);
	/* No fds were handed out for it: tell the daemon it is over. */
	return link_send(sock, JPAG_STOPPED, NULL, 0);
}

/* Another handler installed over ours during the recording (a profiler
 * started after us that does not look before it takes a signal): from then
 * on our samples go to it. Move every armed fd to a free signal and say so;
 * what was delivered in between is lost to us. */
static int link_check_signal(int sock)
{
	int old = link_rec_signal, sig, ret;

	switch (ring_signal_disposition(old)) {
	case RING_SIG_OURS:
		return 0;
	case RING_SIG_FREE:
		/* Reset to the default: ours again, same signal. */
		sig = old;
		break;
	default:
		sig = ring_choose_signal(old);
		break;
	}
	ret = sig < 0 ? sig : ring_install_signal(sig);
	if (ret < 0) {
		if (!link_refusal_logged)
			agent_warn("signal %d was taken over and no free signal is left: %s", old,
				   strerror(-ret));
		link_refusal_logged = true;
		return 0;
	}
	link_rec_signal = sig;
	wall_set_signal(sig);
	for (size_t i = 0; i < link_tids.cap; i++) {
		uint64_t v = link_tids.vals ? link_tids.vals[i] : 0;

		if (link_tids.keys[i] && link_unpack_state(v) == TID_ARMED)
			fcntl(link_unpack_fd(v), F_SETSIG, sig);
	}
	if (sig == old)
		return 0;
	agent_warn("signal %d was taken over by another handler: recording with signal %d now",
		   old, sig);
	return link_send_signal(sock, sig, old, JPAG_SIGNAL_TAKEN_OVER);
}

static int link_on_resolve(int sock, const struct jpag_resolve *rs, size_t len)
{
	int ret = 0;

	if (len < sizeof(*rs) || rs->count > JPAG_RESOLVE_MAX ||
	    len != sizeof(*rs) + (size_t)rs->count * sizeof(uint64_t))
		return -EPROTO;
	for (uint32_t i = 0; i < rs->count && ret == 0; i++) {
		uint64_t id;
		int n;

		memcpy(&id, (const unsigned char *)rs + sizeof(*rs) + i * sizeof(id), sizeof(id));
		n = methods_describe(agent_jvmti, link_jni, id, link_tx, sizeof(link_tx));
		if (n >= 0) {
			ret = link_send(sock, JPAG_METHOD, link_tx, (size_t)n);
		} else {
			struct jpag_method_unknown u = { .id = id };

			ret = link_send(sock, JPAG_METHOD_UNKNOWN, &u, sizeof(u));
		}
	}
	return ret;
}

static int link_dispatch(int sock, const struct jpag_hdr *hdr, int fd)
{
	int ret = 0;

	switch (hdr->type) {
	case JPAG_START:
		if (hdr->len != sizeof(struct jpag_start)) {
			ret = -EPROTO;
			break;
		}
		ret = link_on_start(sock, (const struct jpag_start *)link_rx, fd);
		fd = -1;
		break;
	case JPAG_PERF_FD:
		if (hdr->len != sizeof(struct jpag_perf_fd)) {
			ret = -EPROTO;
			break;
		}
		link_on_perf_fd((const struct jpag_perf_fd *)link_rx, fd);
		fd = -1;
		ret = link_send_armed(sock);
		break;
	case JPAG_RESOLVE:
		ret = link_on_resolve(sock, (const struct jpag_resolve *)link_rx, hdr->len);
		break;
	case JPAG_EVENT_ON: {
		const struct jpag_event_on *on = (const struct jpag_event_on *)link_rx;
		struct jpag_event_status st = { 0 };

		if (hdr->len != sizeof(*on)) {
			ret = -EPROTO;
			break;
		}
		st.event = on->event;
		st.status = link_rec_on ? events_on(on->event, on->param, st.message,
						    sizeof(st.message))
					: -ENOTCONN;
		ret = link_send(sock, JPAG_EVENT_STATUS, &st, sizeof(st));
		break;
	}
	case JPAG_EVENT_OFF:
		events_off();
		ret = events_flush(link_send, sock);
		if (ret == 0)
			ret = link_send(sock, JPAG_EVENTS_DONE, NULL, 0);
		break;
	case JPAG_STOP:
		link_stop_recording();
		ret = link_send(sock, JPAG_STOPPED, NULL, 0);
		break;
	case JPAG_ERROR:
		if (hdr->len == sizeof(struct jpag_error)) {
			const struct jpag_error *e = (const struct jpag_error *)link_rx;

			agent_debug("daemon error %d: %.*s", e->code, (int)sizeof(e->message),
				    e->message);
		}
		break;
	default:
		/* Unknown or misplaced (WELCOME again): ignored. */
		break;
	}
	if (fd >= 0)
		close(fd);
	return ret;
}

/* ---- connection ------------------------------------------------------------ */

static int link_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = LINK_IO_TIMEOUT_S };
	int sock, ret;

	pthread_mutex_lock(&link_lock);
	memcpy(sa.sun_path, link_path, sizeof(sa.sun_path));
	pthread_mutex_unlock(&link_lock);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -errno;
	if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		close(sock);
		return ret;
	}
	return sock;
}

static void link_jvm_name(char *buf, size_t cap)
{
	char *name = NULL, *version = NULL;

	(*agent_jvmti)->GetSystemProperty(agent_jvmti, "java.vm.name", &name);
	(*agent_jvmti)->GetSystemProperty(agent_jvmti, "java.vm.version", &version);
	snprintf(buf, cap, "%s %s", name ? name : "?", version ? version : "?");
	if (name)
		(*agent_jvmti)->Deallocate(agent_jvmti, (unsigned char *)name);
	if (version)
		(*agent_jvmti)->Deallocate(agent_jvmti, (unsigned char *)version);
}

/* Polls sock and the eventfd; *sock_ready / returns -ESHUTDOWN on VMDeath. */
static int link_wait(int sock, int timeout_ms, bool *sock_ready)
{
	struct pollfd p[2] = {
		{ .fd = link_evfd, .events = POLLIN },
		{ .fd = sock, .events = POLLIN },
	};
	uint64_t cnt;
	int n;

	*sock_ready = false;
	n = poll(p, sock >= 0 ? 2 : 1, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if (p[0].revents & POLLIN) {
		if (read(link_evfd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
			return -errno;
	}
	if (link_is_dying())
		return -ESHUTDOWN;
	*sock_ready = sock >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR));
	return 0;
}

/* One connection: handshake, then serve until EOF, error or VMDeath.
 * Returns 0 if the daemon welcomed us (the backoff restarts). */
static int link_session(int sock, bool *welcomed)
{
	struct jpag_hello hello = { .agent_version = JPAG_VERSION, .pid = (uint32_t)getpid() };
	struct timespec t0, t1;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct jpag_hdr hdr;
	bool ready;
	int fd = -1, ret;

	link_jvm_name(hello.jvm, sizeof(hello.jvm));
	ret = link_send(sock, JPAG_HELLO, &hello, sizeof(hello));
	if (ret < 0)
		goto out;
	do {
		ret = poll(&p, 1, LINK_WELCOME_TIMEOUT_MS);
	} while (ret < 0 && errno == EINTR);
	if (ret <= 0) {
		ret = ret ? -errno : -ETIMEDOUT;
		goto out;
	}
	ret = link_recv_frame(sock, &hdr, &fd);
	if (ret < 0)
		goto out;
	if (fd >= 0)
		close(fd);
	if (hdr.type != JPAG_WELCOME || hdr.len != sizeof(struct jpag_welcome) ||
	    ((const struct jpag_welcome *)link_rx)->version != JPAG_VERSION) {
		ret = -EPROTO;
		goto out;
	}
	link_features = ((const struct jpag_welcome *)link_rx)->features;
	*welcomed = true;
	agent_debug("connected, %zu methods known", methods_count());

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int timeout = link_rec_on ? LINK_SIGNAL_CHECK_MS : -1;

		ret = link_wait(sock, timeout, &ready);
		if (ret < 0)
			goto out;
		if (ready) {
			ret = link_recv_frame(sock, &hdr, &fd);
			if (ret < 0)
				goto out;
			ret = link_dispatch(sock, &hdr, fd);
			if (ret < 0)
				goto out;
		}
		if (!link_rec_on)
			continue;
		ret = events_flush(link_send, sock);
		if (ret == 0)
			ret = link_drain_thread_events(sock);
		if (ret == 0)
			ret = link_check_signal(sock);
		if (ret < 0)
			goto out;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >=
		    LINK_RESCAN_MS) {
			t0 = t1;
			ret = link_rescan(sock);
			if (ret < 0)
				goto out;
		}
	}
out:
	return ret;
}

static void *link_main(void *arg)
{
	JavaVMAttachArgs args = { .version = JNI_VERSION_1_6, .name = JPAG_AGENT_THREAD_NAME };
	int backoff = LINK_BACKOFF_MIN_MS;
	bool logged_connect = false, ready;
	int sock, ret;

	/* First thing: recordings leave this thread out by this name (its
	 * start-up work below included). */
	pthread_setname_np(pthread_self(), JPAG_AGENT_THREAD_NAME);
	__atomic_store_n(&link_self_tid, (uint32_t)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	if ((*agent_vm)->AttachCurrentThreadAsDaemon(agent_vm, (void **)&link_jni, &args) != JNI_OK) {
		agent_warn("cannot attach the agent thread to the JVM");
		return NULL;
	}
	/* ClassPrepare is already enabled, so no class falls in between. */
	methods_add_loaded(agent_jvmti, link_jni);
	/* Likewise the compiled-method events: the code compiled before them. */
	codemap_replay(agent_jvmti);

	while (!link_is_dying()) {
		bool welcomed = false;

		__atomic_store_n(&link_kicked, 0, __ATOMIC_SEQ_CST);
		sock = link_connect();
		if (sock >= 0) {
			ret = link_session(sock, &welcomed);
			link_stop_recording();
			close(sock);
			if (ret != -ESHUTDOWN)
				agent_debug("disconnected from jprofd: %s",
					    ret == -ECONNRESET ? "closed" : strerror(-ret));
		} else if (!logged_connect) {
			agent_debug("cannot connect to jprofd: %s (retrying)", strerror(-sock));
			logged_connect = true;
		}
		if (welcomed)
			backoff = LINK_BACKOFF_MIN_MS;
		/* Wait out the backoff unless kicked (a new attach) or dying. */
		struct timespec start, now;
		clock_gettime(CLOCK_MONOTONIC, &start);
		for (;;) {
			long waited;

			if (link_wait(-1, backoff, &ready) == -ESHUTDOWN)
				break;
			if (__atomic_load_n(&link_kicked, __ATOMIC_SEQ_CST)) {
				backoff = LINK_BACKOFF_MIN_MS;
				break;
			}
			clock_gettime(CLOCK_MONOTONIC, &now);
			waited = (now.tv_sec - start.tv_sec) * 1000 +
				 (now.tv_nsec - start.tv_nsec) / 1000000;
			if (waited >= backoff) {
				backoff = backoff * 2 > LINK_BACKOFF_MAX_MS ? LINK_BACKOFF_MAX_MS
									     : backoff * 2;
				break;
			}
		}
	}
	/* VMDeath: the process is exiting; stay parked, holding nothing. */
	link_stop_recording();
	for (;;)
		pause();
	return NULL;
}

int link_start(void)
{
	pthread_attr_t attr;
	pthread_t th;
	int ret;

	pthread_mutex_lock(&link_lock);
	if (link_started) {
		pthread_mutex_unlock(&link_lock);
		return 0;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = -pthread_create(&th, &attr, link_main, NULL);
	pthread_attr_destroy(&attr);
	if (ret == 0)
		link_started = true;
	pthread_mutex_unlock(&link_lock);
	return ret;
}
