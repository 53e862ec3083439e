/* The agent thread's per-thread perf fds (asked for, armed, disarmed) and
 * the thread names it sends. */
#include "link_int.h"

#include "agent.h"
#include "ring.h"
#include "threads.h"
#include "wall.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void link_disarm(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_ASYNC);
	ring_mark_fd(fd, RING_FD_OFF);
	close(fd);
}

/* The packed fd/state of tid in set, if known. */
static bool tid_state(uint32_t set, uint32_t tid, uint64_t *v)
{
	const uint64_t *p = htab_map_get(&link_tids, link_key(set, tid));

	if (p)
		*v = *p;
	return p != NULL;
}

/* Forgets tid in every set, disarming its fds. */
static void link_drop_tid(uint32_t tid)
{
	uint64_t v;

	for (uint32_t set = 0; set < JPAG_MAX_SETS; set++)
		if (htab_map_del(&link_tids, link_key(set, tid), &v) &&
		    link_unpack_state(v) == TID_ARMED)
			link_disarm(link_unpack_fd(v));
}

static bool link_keep_other_set(uint64_t key, uint64_t *v, void *arg)
{
	if (key >> 32 != *(const uint32_t *)arg)
		return true;
	if (link_unpack_state(*v) == TID_ARMED)
		link_disarm(link_unpack_fd(*v));
	return false;
}

void link_drop_set(uint32_t set)
{
	htab_map_retain(&link_tids, link_keep_other_set, &set);
}

/* A request for tid is out in some set (they are asked for together). */
static bool tid_requested(uint32_t tid)
{
	uint64_t v;

	for (uint32_t set = 0; set < JPAG_MAX_SETS; set++)
		if (tid_state(set, tid, &v) && link_unpack_state(v) == TID_REQUESTED)
			return true;
	return false;
}

int link_send_name(uint32_t tid, const char *name, size_t len, uint64_t java_id, void *arg)
{
	struct jpag_thread_name tn = { .tid = tid };
	int sock = *(const int *)arg;
	size_t extra = 0;

	/* A named thread is a Java thread: the wall timer follows it (not
	 * this one: the agent's own work is not the JVM's). */
	if (tid != link_self_tid)
		wall_add_thread(tid);

	if (len > JPAG_THREAD_NAME_MAX)
		len = JPAG_THREAD_NAME_MAX;
	tn.name_len = (uint16_t)len;
	/* The Java id (JFR's javaThreadId) to a daemon that reads it. */
	if (java_id && (link_features & JPAG_FEATURE_JAVA_ID)) {
		tn.flags = JPAG_THREAD_JAVA_ID;
		extra = sizeof(java_id);
		memcpy(link_tx + sizeof(tn) + len, &java_id, sizeof(java_id));
	}
	memcpy(link_tx, &tn, sizeof(tn));
	memcpy(link_tx + sizeof(tn), name, len);
	return link_send(sock, JPAG_THREAD_NAME, link_tx, sizeof(tn) + len + extra);
}

static int link_request_tid_set(int sock, uint32_t set, uint32_t tid)
{
	struct jpag_perf_fd_req req = { .tid = tid };
	int ret;

	/* The agent's own work (socket I/O, naming methods) is not the JVM's:
	 * no event, so no Java samples of it (the daemon drops its native
	 * ones by name). */
	if (tid == link_self_tid || tid == wall_thread_tid())
		return 0;
	ret = htab_map_put(&link_tids, link_key(set, tid), link_pack(-1, TID_REQUESTED));
	if (ret < 0)
		return 0;   /* no memory: this thread goes unsampled */
	ret = link_send_set(sock, JPAG_PERF_FD_REQ, set, &req, sizeof(req));
	if (ret == 0)
		link_fd_asked++;
	return ret;
}

/* One request per open set that has no entry for tid. */
static int link_request_tid(int sock, uint32_t tid)
{
	int ret = 0;

	for (uint32_t set = 0; set < JPAG_MAX_SETS && ret == 0; set++)
		if ((link_sets & 1u << set) && !htab_map_get(&link_tids, link_key(set, tid)))
			ret = link_request_tid_set(sock, set, tid);
	return ret;
}

/* Once the answers to START's requests are in (armed or refused): the
 * daemon keeps the events stopped until then, so no sample of a Java
 * thread goes without its Java frames. */
int link_send_armed(int sock)
{
	int ret = 0;

	for (uint32_t set = 0; set < JPAG_MAX_SETS && ret == 0; set++) {
		if (!(link_set_armed_due & 1u << set) || link_fd_answered < link_set_armed_at[set])
			continue;
		link_set_armed_due &= ~(1u << set);
		if (!(link_features & JPAG_FEATURE_ARMED))
			continue;
		agent_debug("threads of set %u armed: %llu fd answers", set,
			    (unsigned long long)link_fd_answered);
		ret = link_send_set(sock, JPAG_THREADS_ARMED, set, NULL, 0);
	}
	return ret;
}

/* Uniform in [1, interval]: the phase of a thread's samples within its CPU
 * time. Not for security (the JVM may set its periods anyway), only spread. */
static uint64_t link_first_period(uint64_t interval_ns)
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
	return 1 + x % interval_ns;
}

static int link_arm(int fd, uint32_t set, uint32_t tid)
{
	struct f_owner_ex owner = { .type = F_OWNER_TID, .pid = (pid_t)tid };
	int fl;

	if (fd >= RING_MAX_FD)
		return -EMFILE;
	if (fcntl(fd, F_SETSIG, link_set_signal[set]) < 0 || fcntl(fd, F_SETOWN_EX, &owner) < 0)
		return -errno;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	/* Marked before O_ASYNC: the first signal must find its fd known. */
	ring_set_fd_set(fd, set);
	ring_mark_fd(fd, link_phase ? RING_FD_PHASING : RING_FD_ON);
	if (fcntl(fd, F_SETFL, fl | O_ASYNC) < 0) {
		int ret = -errno;

		ring_mark_fd(fd, RING_FD_OFF);
		return ret;
	}
	/* The random first period only after O_ASYNC: its overflow must
	 * signal, or the handler never sets the interval again. */
	if (link_phase) {
		int ret = ring_phase_fd(fd, link_first_period(link_set_interval[set]));

		if (ret < 0)
			agent_debug("perf fd of tid %u keeps a fixed phase: %s", tid, strerror(-ret));
	}
	return 0;
}

static void link_arm_answer(const struct jpag_perf_fd *pf, uint32_t set, int fd)
{
	uint64_t v;
	int ret;

	if (!link_rec_on || set >= JPAG_MAX_SETS || !(link_sets & 1u << set) ||
	    !tid_state(set, pf->tid, &v) ||
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
		htab_map_put(&link_tids, link_key(set, pf->tid), link_pack(-1, TID_FAILED));
		return;
	}
	ret = link_arm(fd, set, pf->tid);
	if (ret < 0) {
		agent_debug("cannot arm perf fd for tid %u: %s", pf->tid, strerror(-ret));
		close(fd);
		if (ret == -ESRCH)
			htab_map_del(&link_tids, link_key(set, pf->tid), NULL);
		else
			htab_map_put(&link_tids, link_key(set, pf->tid), link_pack(-1, TID_FAILED));
		return;
	}
	htab_map_put(&link_tids, link_key(set, pf->tid), link_pack(fd, TID_ARMED));
}

void link_on_perf_fd(const struct jpag_perf_fd *pf, uint32_t set, int fd)
{
	/* An allocation or lock recording has no perf event for any thread:
	 * starting threads need not wait for the answer. */
	if (pf->status == -EOPNOTSUPP)
		__atomic_store_n(&link_start_wait, 0, __ATOMIC_SEQ_CST);
	/* An answer of the recording before a restarted one may count here:
	 * THREADS_ARMED then leaves one answer early, no worse. */
	if (link_rec_on)
		link_fd_answered++;
	link_arm_answer(pf, set, fd);
	link_answer(pf->tid);
}

/* Requests an fd for every thread of the process we have none for, and
 * forgets threads that are gone (native threads have no ThreadEnd). */
int link_rescan(int sock)
{
	uint32_t *gone = NULL;
	size_t ngone = 0;
	struct htab_map now = { 0 };
	struct dirent *de;
	uint64_t tid, v;
	DIR *dir;
	int ret = 0;

	dir = opendir("/proc/self/task");
	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		char *end;
		unsigned long t = strtoul(de->d_name, &end, 10);

		if (*end || !t || t > UINT32_MAX)
			continue;
		htab_map_put(&now, t, 0);
	}
	closedir(dir);
	if (!htab_map_count(&now))
		goto out;
	gone = calloc(htab_map_count(&link_tids) + 1, sizeof(*gone));
	for (size_t pos = 0; gone && htab_map_next(&link_tids, &pos, &tid, &v);)
		if (!htab_map_get(&now, (uint32_t)tid))
			gone[ngone++] = (uint32_t)tid;
	for (size_t i = 0; i < ngone; i++) {
		wall_remove_thread(gone[i]);
		link_drop_tid(gone[i]);
	}
	free(gone);
	for (size_t pos = 0; ret == 0 && htab_map_next(&now, &pos, &tid, &v);)
		ret = link_request_tid(sock, (uint32_t)tid);
out:
	htab_map_release(&now);
	return ret;
}

int link_drain_thread_events(int sock)
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
		if (!q[i].started) {
			wall_remove_thread(q[i].tid);
			link_drop_tid(q[i].tid);
			continue;
		}
		if (q[i].name) {
			ret = link_send_name(q[i].tid, q[i].name, strlen(q[i].name), q[i].java_id,
					     &sock);
			if (ret < 0)
				break;
		}
		if (tid_requested(q[i].tid))
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

