#include "agentlink.h"
#include "agentlink_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "jring.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "quota.h"

/* Marks the agent dead from any context. The socket is shut down so that its
 * I/O handler runs next round: that is the one place which tells the bound
 * session (ops->gone) and frees the agent, never under a caller's feet. */
static void agent_kill(struct agent *a)
{
	if (a->dead)
		return;
	a->dead = true;
	shutdown(a->fd, SHUT_RDWR);
}

/* A connection belongs to the process that made it, for as long as that
 * process runs: once it exits (its socket may live on in another process
 * it passed it to), or its pid names another process, the connection is
 * closed. Any context. */
int agent_verify(struct agent *a)
{
	int r;

	if (a->dead)
		return -ESRCH;
	r = proc_ident_check(&a->ident);
	/* The same process, still running the program it connected from, with
	 * the same credentials: after an exec (a setuid program's above all)
	 * the connection, perhaps handed to another process, speaks for
	 * nothing that runs there now. */
	if (r == 0)
		r = proc_exec_id_check(a->pid, &a->exec);
	if (r == 0)
		return 0;
	a->link->st.identity_lost++;
	if (r == -EPERM)
		log_audit("agent of pid %d uid %u: the process exec'd or changed credentials since it "
			  "connected; connection closed", (int)a->pid, (unsigned)a->uid);
	else
		log_audit("agent of pid %d uid %u: the process that connected has exited; connection "
			  "closed", (int)a->pid, (unsigned)a->uid);
	agent_kill(a);
	return -ESRCH;
}

/* Closes the fd a message holds (sent, or never to be), giving back its
 * charge: a perf fd queued for an agent that does not read holds a file of
 * the daemon's, so it counts as one of the uid's perf events meanwhile. */
static void out_close_fd(struct agent *a, struct outmsg *m)
{
	if (m->fd < 0)
		return;
	close(m->fd);
	m->fd = -1;
	if (m->charged)
		quota_give(a->link->quota, a->uid, QUOTA_PERF_EVENTS, 1);
	m->charged = false;
}

static void out_free(struct agent *a, struct outmsg *m)
{
	out_close_fd(a, m);
	free(m->data);
	free(m);
}

static void agent_flush(struct agent *a)
{
	while (a->out_head && !a->dead) {
		struct outmsg *m = a->out_head;
		struct iovec iov = { m->data + m->off, m->len - m->off };
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (m->fd >= 0 && m->off == 0) {
			struct cmsghdr *c;

			/* Queued while the process ran; it must still. */
			if (agent_verify(a) < 0)
				break;

			memset(cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf;
			mh.msg_controllen = sizeof(cbuf);
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &m->fd, sizeof(int));
		}
		n = sendmsg(a->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				agent_kill(a);
			break;
		}
		/* Sent with the first byte; the agent has its own now. */
		out_close_fd(a, m);
		m->off += (size_t)n;
		a->out_bytes -= (size_t)n;
		if (m->off == m->len) {
			a->out_head = m->next;
			if (!a->out_head)
				a->out_tail = NULL;
			out_free(a, m);
		}
	}
	if (a->dead)
		return;
	if (!!a->out_head != a->want_out) {
		a->want_out = a->out_head != NULL;
		loop_set_events(a->src, EPOLLIN | EPOLLRDHUP | (a->want_out ? EPOLLOUT : 0));
	}
}

/* Queues one frame; fd (taken; -1: none) rides on its first byte. charged:
 * fd counts in the uid's perf events (given back once sent or dropped). */
int agent_send_fd(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd,
		  bool charged)
{
	return agent_send_set(a, type, 0, payload, len, fd, charged);
}

int agent_send_set(struct agent *a, uint16_t type, uint32_t set, const void *payload,
		   uint32_t len, int fd, bool charged)
{
	struct jpag_hdr h = { .magic = JPAG_MAGIC, .version = JPAG_VERSION, .type = type, .len = len,
			      .reserved = set };
	struct outmsg *m;

	if (a->dead || a->out_bytes + sizeof(h) + len > AGENT_MAX_QUEUED) {
		/* An agent that does not read its replies is cut off. */
		if (fd >= 0)
			close(fd);
		if (charged)
			quota_give(a->link->quota, a->uid, QUOTA_PERF_EVENTS, 1);
		agent_kill(a);
		return -ENOBUFS;
	}
	m = calloc(1, sizeof(*m));
	if (m)
		m->data = malloc(sizeof(h) + len);
	if (!m || !m->data) {
		free(m);
		if (fd >= 0)
			close(fd);
		if (charged)
			quota_give(a->link->quota, a->uid, QUOTA_PERF_EVENTS, 1);
		return -ENOMEM;
	}
	m->charged = charged;
	memcpy(m->data, &h, sizeof(h));
	if (len)
		memcpy(m->data + sizeof(h), payload, len);
	m->len = sizeof(h) + len;
	m->fd = fd;
	if (a->out_tail)
		a->out_tail->next = m;
	else
		a->out_head = m;
	a->out_tail = m;
	a->out_bytes += m->len;
	agent_flush(a);
	return 0;
}

int agent_send(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd)
{
	return agent_send_fd(a, type, payload, len, fd, false);
}

void agent_send_error(struct agent *a, int code, const char *msg)
{
	struct jpag_error e = { .code = code };

	snprintf(e.message, sizeof(e.message), "%s", msg);
	agent_send(a, JPAG_ERROR, &e, sizeof(e), -1);
}

void agent_free(struct agent *a)
{
	while (a->out_head) {
		struct outmsg *m = a->out_head;

		a->out_head = m->next;
		out_free(a, m);
	}
	loop_remove(a->src);
	loop_remove(a->exit_src);
	if (a->fd >= 0)
		close(a->fd);
	jring_free(a->ring);
	buf_release(&a->in);
	proc_ident_release(&a->ident);
	free(a);
}

void agent_unlink(struct agent *a)
{
	struct agent **pp = &a->link->agents;

	while (*pp && *pp != a)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = a->next;
		a->link->st.connected--;
		quota_give(a->link->quota, a->uid, QUOTA_AGENTS, 1);
	}
}

/* Marks dead and tells the bound session; freed by the I/O handler or now. */
/* Handler context only: tells the bound session, once. */
void agent_drop(struct agent *a, const char *why)
{
	if (why)
		log_warn("agent of pid %d dropped: %s", (int)a->pid, why);
	agent_kill(a);
	a->ev_set = -1;
	for (unsigned i = 0; i < JPAG_MAX_SETS; i++) {
		struct agent_bind b = a->bind[i];

		a->bind[i] = (struct agent_bind){ 0 };
		if (b.ops)
			b.ops->gone(b.ctx, why ? why : "the agent disconnected");
	}
}

bool agent_bound(const struct agent *a)
{
	for (unsigned i = 0; i < JPAG_MAX_SETS; i++)
		if (a->bind[i].ops)
			return true;
	return false;
}

static void on_agent_io(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct agent *a = arg;

	if (events & EPOLLOUT)
		agent_flush(a);
	if (!a->dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
		for (int i = 0; i < 16 && !a->dead; i++) {
			ssize_t n;

			if (buf_reserve(&a->in, 65536) < 0) {
				agent_drop(a, "out of memory");
				break;
			}
			n = recv(fd, a->in.data + a->in.len, 65536, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno != EAGAIN && errno != EWOULDBLOCK)
					agent_drop(a, NULL);
				break;
			}
			if (n == 0) {
				if (a->hello)
					log_info("agent of pid %d disconnected", (int)a->pid);
				agent_drop(a, NULL);
				break;
			}
			a->in.len += (size_t)n;
			a->in.data[a->in.len] = '\0';
			agentlink_process_input(a);
		}
	}
	if (a->dead) {
		agent_drop(a, NULL);  /* tells a still-bound session */
		agent_unlink(a);
		agent_free(a);
	}
}

/* The process that connected has exited: its socket may live on in a
 * process it was passed to, which is nobody's agent. */
static void on_agent_exit(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct agent *a = arg;

	loop_remove(a->exit_src);
	a->exit_src = NULL;
	agent_verify(a);  /* closes it; its I/O handler tells the session and frees it */
}

int agentlink_new(struct loop *loop, agentlink_connect_fn on_connect, void *arg,
		  struct agentlink **out)
{
	struct agentlink *l = calloc(1, sizeof(*l));

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->loop = loop;
	l->on_connect = on_connect;
	l->arg = arg;
	*out = l;
	return 0;
}

void agentlink_free(struct agentlink *l)
{
	if (!l)
		return;
	while (l->agents) {
		struct agent *a = l->agents;

		agent_drop(a, NULL);
		agent_unlink(a);
		agent_free(a);
	}
	free(l);
}

void agentlink_set_quota(struct agentlink *l, struct quota *q)
{
	l->quota = q;
}

/* Past a limit: an ERROR frame says why (the agent retries later), then
 * the connection is closed. */
static int refuse(struct agentlink *l, int fd, uid_t uid, int err)
{
	struct jpag_hdr h = { .magic = JPAG_MAGIC, .version = JPAG_VERSION, .type = JPAG_ERROR,
			      .len = sizeof(struct jpag_error) };
	struct {
		struct jpag_hdr h;
		struct jpag_error e;
	} msg = { .h = h, .e = { .code = err } };

	quota_explain(l->quota, uid, QUOTA_AGENTS, err, msg.e.message, sizeof(msg.e.message));
	log_warn("refused an agent connection of uid %u: %s", (unsigned)uid, msg.e.message);
	send(fd, &msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
	l->st.rejected++;
	close(fd);
	return err;
}

int agentlink_adopt(struct agentlink *l, int fd, pid_t pid, uid_t uid, const void *buffered,
		    size_t len)
{
	struct agent *a;
	int r;

	if (l->st.connected >= AGENTLINK_MAX_AGENTS) {
		l->st.rejected++;
		close(fd);
		return -EMFILE;
	}
	r = quota_take(l->quota, uid, QUOTA_AGENTS, 1);
	if (r < 0)
		return refuse(l, fd, uid, r);
	a = calloc(1, sizeof(*a));
	if (!a) {
		quota_give(l->quota, uid, QUOTA_AGENTS, 1);
		close(fd);
		return -ENOMEM;
	}
	a->link = l;
	a->fd = fd;
	a->ev_set = -1;
	a->pid = pid;
	a->uid = uid;
	r = proc_ident_from_socket(fd, pid, &a->ident);
	/* After the identity is pinned: what it runs now, which must still be
	 * as the uid that connected (SO_PEERCRED, taken at connect(): a setuid
	 * exec in between makes /proc/PID root's). */
	if (r == 0)
		r = proc_exec_id_read(pid, &a->exec);
	if (r == 0 && a->exec.uid != uid)
		r = -EPERM;
	if (r < 0) {
		proc_ident_release(&a->ident);
		quota_give(l->quota, uid, QUOTA_AGENTS, 1);
		l->st.rejected++;
		if (r == -EPERM)
			log_audit("agent connection of pid %d uid %u refused: the process runs as "
				  "uid %u now (a setuid exec since it connected?)", (int)pid,
				  (unsigned)uid, (unsigned)a->exec.uid);
		if (r == -ESRCH) {
			l->st.identity_lost++;
			log_audit("agent connection of pid %d uid %u refused: the process that "
				  "connected has exited", (int)pid, (unsigned)uid);
		}
		close(fd);
		free(a);
		return r;
	}
	r = loop_add_io(l->loop, fd, EPOLLIN | EPOLLRDHUP, on_agent_io, a, &a->src);
	if (r == 0 && a->ident.pidfd >= 0)
		r = loop_add_io(l->loop, a->ident.pidfd, EPOLLIN, on_agent_exit, a, &a->exit_src);
	if (r < 0 || (len && buf_append(&a->in, buffered, len) < 0)) {
		quota_give(l->quota, uid, QUOTA_AGENTS, 1);
		agent_free(a);
		return r < 0 ? r : -ENOMEM;
	}
	a->next = l->agents;
	l->agents = a;
	l->st.connected++;
	l->st.accepted++;
	agentlink_process_input(a);
	if (a->dead) {
		agent_drop(a, NULL);
		agent_unlink(a);
		agent_free(a);
	}
	return 0;
}

struct agent *agentlink_find(struct agentlink *l, pid_t pid, int pidfd)
{
	for (struct agent *a = l->agents; a; a = a->next)
		if (a->pid == pid && a->hello && agent_is_process(a, pid, pidfd) == 0)
			return a;
	return NULL;
}

int agent_is_process(struct agent *a, pid_t pid, int pidfd)
{
	if (agent_verify(a) < 0)
		return -ESRCH;
	return proc_ident_matches(&a->ident, pid, pidfd);
}

pid_t agent_pid(const struct agent *a)
{
	return a->pid;
}

const char *agent_jvm(const struct agent *a)
{
	return a->jvm;
}

/* The set ctx is bound to, or -1. */
static int set_of(const struct agent *a, const void *ctx)
{
	for (int i = 0; i < JPAG_MAX_SETS; i++)
		if (a->bind[i].ops && a->bind[i].ctx == ctx)
			return i;
	return -1;
}

int agent_start(struct agent *a, uint64_t interval_ns, uint32_t signal, uint32_t nslots,
		uint32_t flags, const struct agentlink_ops *ops, void *ctx)
{
	struct jpag_start st = {
		.interval_ns = interval_ns,
		.signal = signal,
		.flags = flags,
		.slot_bytes = JPRING_SLOT_BYTES,
		.nslots = nslots,
		.max_frames = JPRING_MAX_FRAMES,
	};
	struct jpag_set_add sa = { .flags = flags, .interval_ns = interval_ns };
	int memfd, r;

	if (a->dead || set_of(a, ctx) >= 0)
		return -EBUSY;
	if (a->ring) {
		/* A recording runs: this one joins it with an event set of
		 * its own (an agent that cannot is another recording's). */
		if (!a->sets_ok)
			return -EBUSY;
		for (sa.set = 1; sa.set < JPAG_MAX_SETS && a->bind[sa.set].ops; sa.set++)
			;
		if (sa.set == JPAG_MAX_SETS)
			return -EMLINK;
		a->bind[sa.set] = (struct agent_bind){ ops, ctx };
		r = agent_send(a, JPAG_SET_ADD, &sa, sizeof(sa), -1);
		if (r < 0)
			a->bind[sa.set] = (struct agent_bind){ 0 };
		return r < 0 ? r : (int)sa.set;
	}
	r = jring_new(nslots, &a->ring, &memfd);
	if (r < 0)
		return r;
	st.ring_bytes = jring_bytes(a->ring);
	a->bind[0] = (struct agent_bind){ ops, ctx };
	r = agent_send(a, JPAG_START, &st, sizeof(st), memfd);
	if (r < 0) {
		a->bind[0] = (struct agent_bind){ 0 };
		jring_free(a->ring);
		a->ring = NULL;
	}
	return r;
}

void agent_stop(struct agent *a, void *ctx)
{
	struct jpag_set_del sd = { 0 };
	int set;

	if (!a)
		return;
	set = set_of(a, ctx);
	if (set < 0)
		return;
	a->bind[set] = (struct agent_bind){ 0 };
	if (a->ev_set == set) {
		/* Its events must not go on for nobody. */
		if (!a->dead && agent_bound(a))
			agent_send(a, JPAG_EVENT_OFF, NULL, 0, -1);
		a->ev_set = -1;
	}
	if (agent_bound(a)) {
		/* The others go on: only this set's fds are closed. */
		sd.set = (uint32_t)set;
		if (!a->dead)
			agent_send(a, JPAG_SET_DEL, &sd, sizeof(sd), -1);
		return;
	}
	if (!a->dead)
		agent_send(a, JPAG_STOP, NULL, 0, -1);
	jring_free(a->ring);
	a->ring = NULL;
}

struct jring *agent_ring(struct agent *a)
{
	return a->ring;
}

void *agent_set_ctx(const struct agent *a, uint32_t set)
{
	return set < JPAG_MAX_SETS && a->bind[set].ops ? a->bind[set].ctx : NULL;
}

int agent_event_on(struct agent *a, void *ctx, uint32_t event, uint64_t param)
{
	struct jpag_event_on on = { .event = event, .param = param };
	int set = set_of(a, ctx);

	if (a->dead || set < 0)
		return -ENOTCONN;
	/* One JVMTI environment for alloc and lock: one recording's. */
	if (a->ev_set >= 0 && a->ev_set != set)
		return -EBUSY;
	a->ev_set = set;
	return agent_send(a, JPAG_EVENT_ON, &on, sizeof(on), -1);
}

int agent_event_off(struct agent *a, void *ctx)
{
	int set = set_of(a, ctx);

	if (a->dead || set < 0 || a->ev_set != set)
		return -ENOTCONN;
	return agent_send(a, JPAG_EVENT_OFF, NULL, 0, -1);
}

int agent_resolve(struct agent *a, const uint64_t *ids, unsigned n)
{
	char buf[sizeof(struct jpag_resolve) + JPAG_RESOLVE_MAX * sizeof(uint64_t)];
	struct jpag_resolve *r = (struct jpag_resolve *)buf;

	if (n == 0)
		return 0;
	if (n > JPAG_RESOLVE_MAX)
		n = JPAG_RESOLVE_MAX;
	r->count = n;
	r->reserved = 0;
	memcpy(r->ids, ids, n * sizeof(uint64_t));
	return agent_send(a, JPAG_RESOLVE, buf, (uint32_t)(sizeof(*r) + n * sizeof(uint64_t)), -1);
}

void agentlink_get_stats(const struct agentlink *l, struct agentlink_stats *out)
{
	*out = l->st;
}

