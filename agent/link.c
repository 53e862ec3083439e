/* The agent thread. All socket I/O, fd arming and JVMTI method resolution
 * happen here; JVMTI callbacks only queue work and wake it through an
 * eventfd. When no recording runs it holds no perf fd and sleeps in poll. */
#include "link.h"
#include "link_int.h"

#include "agent.h"
#include "codemap.h"
#include "events.h"
#include "jprof_agent.h"
#include "htab.h"
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

/* Shared with other threads. */
pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;
static char link_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
struct link_tevent *link_queue;  /* ThreadStart/End while recording */
size_t link_queue_len, link_queue_cap;
bool link_queue_oom;
static bool link_dying;                  /* VMDeath seen */
static bool link_started;
static int link_evfd = -1;
static int link_recording;               /* atomic: queue thread events */
static int link_kicked;                  /* atomic: reconnect now */
static pthread_cond_t link_answer_cond;  /* an fd request was answered (CLOCK_MONOTONIC) */
static uint32_t link_answered[LINK_ANSWERED_MAX];
static unsigned link_answered_next;
int link_start_wait;              /* atomic: ThreadStart waits for its fd */

/* Owned by the agent thread. */
static JNIEnv *link_jni;
bool link_rec_on;
int link_rec_signal;
uint32_t link_features;           /* the daemon's JPAG_FEATURE_* */
uint64_t link_interval_ns;        /* the recording's */
bool link_phase;                  /* random first period per fd */
uint32_t link_self_tid;           /* this thread: never sampled */
/* This recording's perf fd requests sent and answers received (answers come
 * in request order), and how many answers arm the threads known at START:
 * then JPAG_THREADS_ARMED tells the daemon it may start the events. */
uint64_t link_fd_asked, link_fd_answered;
uint32_t link_sets;
uint64_t link_set_interval[JPAG_MAX_SETS];
uint64_t link_set_armed_at[JPAG_MAX_SETS];
uint32_t link_set_armed_due;
int link_set_signal[JPAG_MAX_SETS];
int link_wall_set = -1;
static bool link_refusal_logged;
struct htab_map link_tids;        /* link_key(set, tid) -> packed fd/state */
unsigned char link_rx[JPAG_MAX_PAYLOAD] __attribute__((aligned(16)));
unsigned char link_tx[JPAG_MAX_PAYLOAD] __attribute__((aligned(16)));


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
	link_tids = (struct htab_map){ 0 };
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

void link_queue_free(struct link_tevent *q, size_t n)
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
void link_answer(uint32_t tid)
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

void link_thread_event(uint32_t tid, bool started, const char *name, uint64_t java_id)
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
		.tid = tid, .started = started, .name = copy, .java_id = java_id,
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

/* ---- recording lifecycle ------------------------------------------------------ */

static void link_stop_recording(void)
{
	uint64_t tid, v;

	if (!link_rec_on)
		return;
	link_set_armed_due = 0;
	link_sets = 0;
	__atomic_store_n(&link_recording, 0, __ATOMIC_SEQ_CST);
	link_release_waiters();
	/* Disarm first (the wall timer's signals too), so no new signal
	 * comes, then retire the ring. */
	wall_stop();
	link_wall_set = -1;
	for (size_t pos = 0; htab_map_next(&link_tids, &pos, &tid, &v);)
		if (link_unpack_state(v) == TID_ARMED)
			link_disarm(link_unpack_fd(v));
	htab_map_release(&link_tids);
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
int link_start_wall(int sock, uint32_t set, uint64_t interval_ns, int sig)
{
	struct jpag_event_status es = { .event = JPAG_EV_WALL };

	/* One timer: the first set that asks has it. */
	es.status = link_wall_set >= 0 ? -EBUSY : wall_start(interval_ns, sig);
	if (es.status == -EBUSY)
		snprintf(es.message, sizeof(es.message),
			 "the wall timer serves another recording of this JVM");
	else if (es.status < 0)
		snprintf(es.message, sizeof(es.message), "cannot start the wall timer: %s",
			 strerror(-es.status));
	if (es.status == 0) {
		link_wall_set = (int)set;
		ring_set_wall_set(set);
	}
	agent_debug("wall timer: %s", es.status ? es.message : "on");
	return link_send_set(sock, JPAG_EVENT_STATUS, set, &es, sizeof(es));
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
	for (int i = 0; i < JPAG_MAX_SETS; i++)
		link_set_signal[i] = sig;
	link_interval_ns = st->interval_ns;
	/* Off only for measuring what the random phase gains (bench/). */
	phase_env = getenv("JPROF_AGENT_PHASE");
	link_phase = st->interval_ns > 0 && !(phase_env && !strcmp(phase_env, "0"));
	link_sets = 1;
	link_set_interval[0] = st->interval_ns;
	ring_set_interval(0, st->interval_ns);
	ring_set_wall_native(link_features & JPAG_FEATURE_WALL_NATIVE);
	__atomic_store_n(&link_start_wait, link_phase, __ATOMIC_SEQ_CST);
	link_tids = (struct htab_map){ 0 };
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
		ret = link_start_wall(sock, 0, st->interval_ns, sig);
	if (ret == 0)
		ret = link_rescan(sock);
	/* The threads that exist now (the wall timer follows them); later
	 * ones come with ThreadStart. */
	if (ret == 0)
		ret = threads_each(agent_jvmti, link_jni, link_send_name, &sock);
	if (ret == 0) {
		link_set_armed_at[0] = link_fd_asked;
		link_set_armed_due |= 1u;
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
	uint64_t tid, v;

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
	/* The sets that shared it (a set's own real-time signal stays). */
	for (size_t pos = 0; htab_map_next(&link_tids, &pos, &tid, &v);)
		if (link_unpack_state(v) == TID_ARMED && link_set_signal[tid >> 32] == old)
			fcntl(link_unpack_fd(v), F_SETSIG, sig);
	for (int i = 0; i < JPAG_MAX_SETS; i++)
		if (link_set_signal[i] == old)
			link_set_signal[i] = sig;
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
		link_on_perf_fd((const struct jpag_perf_fd *)link_rx, hdr->reserved, fd);
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
	case JPAG_SET_ADD:
		ret = hdr->len != sizeof(struct jpag_set_add) ? -EPROTO
			: link_on_set_add(sock, (const struct jpag_set_add *)link_rx, link_jni);
		break;
	case JPAG_SET_DEL:
		ret = hdr->len != sizeof(struct jpag_set_del) ? -EPROTO
			: link_on_set_del(sock, (const struct jpag_set_del *)link_rx);
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
	struct jpag_hello hello = { .agent_version = JPAG_VERSION | JPAG_HELLO_SETS,
				    .pid = (uint32_t)getpid() };
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
