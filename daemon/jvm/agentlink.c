#include "agentlink.h"

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

#define AGENT_MAX_QUEUED (1u << 20)   /* bytes waiting for a slow agent */

struct outmsg {
	struct outmsg *next;
	char *data;
	size_t len, off;
	int fd;                       /* owned dup, sent with the first byte; -1 none */
	bool charged;                 /* fd counts in the agent uid's QUOTA_PERF_EVENTS */
};

struct agent {
	struct agentlink *link;
	struct agent *next;
	int fd;
	struct loop_source *src;
	pid_t pid;
	uid_t uid;
	struct proc_ident ident;      /* the process that connected, not just its pid */
	struct proc_exec_id exec;     /* what it ran then, as whom: an exec ends the binding */
	struct loop_source *exit_src; /* its pidfd: closes the connection at its exit */
	struct buf in;
	bool hello;
	bool dead;
	char jvm[64];
	struct outmsg *out_head, *out_tail;
	size_t out_bytes;
	bool want_out;
	struct jring *ring;
	const struct agentlink_ops *ops;
	void *ctx;
};

struct agentlink {
	struct loop *loop;
	agentlink_connect_fn on_connect;
	void *arg;
	struct agent *agents;
	struct agentlink_stats st;
	struct quota *quota;          /* agent connections per uid; NULL: none */
};

static void agent_drop(struct agent *a, const char *why);
static void agent_unlink(struct agent *a);
static void agent_free(struct agent *a);

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
static int agent_verify(struct agent *a)
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
static int agent_send_fd(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd,
			 bool charged)
{
	struct jpag_hdr h = { .magic = JPAG_MAGIC, .version = JPAG_VERSION, .type = type, .len = len };
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

static int agent_send(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd)
{
	return agent_send_fd(a, type, payload, len, fd, false);
}

static void send_error(struct agent *a, int code, const char *msg)
{
	struct jpag_error e = { .code = code };

	snprintf(e.message, sizeof(e.message), "%s", msg);
	agent_send(a, JPAG_ERROR, &e, sizeof(e), -1);
}

/* ---- incoming frames ---- */

static void on_hello(struct agent *a, const void *p, uint32_t len)
{
	struct agentlink *l = a->link;
	struct jpag_hello hello;
	struct jpag_welcome w = { .version = JPAG_VERSION, .features = JPAG_FEATURE_SIGNAL | JPAG_FEATURE_WALL |
								    JPAG_FEATURE_ARMED | JPAG_FEATURE_JAVA_ID |
								    JPAG_FEATURE_WALL_NATIVE };

	if (a->hello || len != sizeof(hello)) {
		agent_drop(a, "bad hello");
		return;
	}
	memcpy(&hello, p, sizeof(hello));
	hello.jvm[sizeof(hello.jvm) - 1] = '\0';
	for (char *c = hello.jvm; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
			*c = '?';
	snprintf(a->jvm, sizeof(a->jvm), "%s", hello.jvm);
	a->hello = true;
	/* One agent per process. An older connection whose process is gone
	 * goes; an idle one of this same process is replaced (the agent
	 * reconnects after a re-attach); one bound to a recording stays, and
	 * this newer one is refused. */
	for (struct agent *o = l->agents, *next; o; o = next) {
		next = o->next;
		if (o == a || o->pid != a->pid || o->dead)
			continue;
		if (agent_verify(o) == 0 && o->ops) {
			log_audit("agent of pid %d: a second connection refused; the one bound to a "
				  "recording stays", (int)a->pid);
			send_error(a, -EBUSY, "this process already has an agent bound to a recording");
			agent_drop(a, NULL);
			return;
		}
		agent_drop(o, o->dead ? NULL : "replaced by a newer connection of the same process");
		agent_unlink(o);
		agent_free(o);
	}
	agent_send(a, JPAG_WELCOME, &w, sizeof(w), -1);
	log_info("agent connected: pid %d uid %u (%s)", (int)a->pid, (unsigned)a->uid, a->jvm);
	if (l->on_connect && !a->dead)
		l->on_connect(a, a->pid, l->arg);
}

static void on_perf_fd_req(struct agent *a, const void *p, uint32_t len)
{
	struct jpag_perf_fd_req req;
	struct jpag_perf_fd rep;
	int fd = -1, r;

	if (len != sizeof(req)) {
		agent_drop(a, "bad perf fd request");
		return;
	}
	memcpy(&req, p, sizeof(req));
	rep.tid = req.tid;
	if (!a->ops) {
		r = -ENOTCONN;  /* no recording of this process is running */
	} else {
		r = a->ops->perf_fd(a->ctx, req.tid, &fd);
		/* Queue a private dup: the session may close its fd before the
		 * message leaves. Until then it is a file of the daemon's held for
		 * this uid: an agent asking again and again without reading would
		 * run the daemon out of fds (30,000 requests once took 19,996 of
		 * 20,000), so each counts as one of the uid's perf events. */
		if (r >= 0)
			r = quota_take(a->link->quota, a->uid, QUOTA_PERF_EVENTS, 1);
		if (r >= 0) {
			int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);

			r = dup < 0 ? -errno : 0;
			fd = dup;
			if (r < 0)
				quota_give(a->link->quota, a->uid, QUOTA_PERF_EVENTS, 1);
		}
	}
	rep.status = r < 0 ? r : 0;
	if (r < 0) {
		a->link->st.fds_denied++;
		agent_send(a, JPAG_PERF_FD, &rep, sizeof(rep), -1);
		return;
	}
	a->link->st.fds_passed++;
	agent_send_fd(a, JPAG_PERF_FD, &rep, sizeof(rep), fd, true);
}

static void on_method(struct agent *a, const char *p, uint32_t len, bool unknown)
{
	struct agentlink_method m = { .unknown = unknown };
	struct jpag_method hm;
	static struct jpag_line lines[JPAG_MAX_PAYLOAD / sizeof(struct jpag_line)];

	if (unknown) {
		struct jpag_method_unknown u;

		if (len != sizeof(u)) {
			agent_drop(a, "bad method-unknown record");
			return;
		}
		memcpy(&u, p, sizeof(u));
		m.id = u.id;
	} else {
		size_t need;

		if (len < sizeof(hm)) {
			agent_drop(a, "short method record");
			return;
		}
		memcpy(&hm, p, sizeof(hm));
		need = sizeof(hm) + (size_t)hm.class_len + hm.name_len + hm.sig_len +
		       (size_t)hm.nlines * sizeof(struct jpag_line);
		if (need != len || hm.name_len == 0 || hm.class_len == 0) {
			agent_drop(a, "method record lengths do not add up");
			return;
		}
		m.id = hm.id;
		m.cls = p + sizeof(hm);
		m.cls_len = hm.class_len;
		m.name = m.cls + hm.class_len;
		m.name_len = hm.name_len;
		m.sig = m.name + hm.name_len;
		m.sig_len = hm.sig_len;
		if (hm.nlines)
			memcpy(lines, m.sig + hm.sig_len, (size_t)hm.nlines * sizeof(struct jpag_line));
		m.lines = lines;
		m.nlines = hm.nlines;
	}
	if (a->ops)
		a->ops->method(a->ctx, &m);
}

static void on_thread_name(struct agent *a, const char *p, uint32_t len)
{
	struct jpag_thread_name tn;
	uint64_t java_id = 0;
	size_t extra;

	if (len < sizeof(tn)) {
		agent_drop(a, "short thread name record");
		return;
	}
	memcpy(&tn, p, sizeof(tn));
	extra = tn.flags & JPAG_THREAD_JAVA_ID ? sizeof(java_id) : 0;
	if (tn.name_len == 0 || tn.name_len > JPAG_THREAD_NAME_MAX ||
	    sizeof(tn) + tn.name_len + extra != len) {
		agent_drop(a, "thread name record lengths do not add up");
		return;
	}
	if (a->ops && a->ops->thread_name)
		a->ops->thread_name(a->ctx, tn.tid, p + sizeof(tn), tn.name_len);
	if (extra)
		memcpy(&java_id, p + sizeof(tn) + tn.name_len, sizeof(java_id));
	if (java_id && a->ops && a->ops->thread_java_id)
		a->ops->thread_java_id(a->ctx, tn.tid, java_id);
}

static void on_event_status(struct agent *a, const char *p, uint32_t len)
{
	struct jpag_event_status st;

	if (len != sizeof(st)) {
		agent_drop(a, "bad event status record");
		return;
	}
	memcpy(&st, p, sizeof(st));
	st.message[sizeof(st.message) - 1] = '\0';
	if (a->ops && a->ops->event_status)
		a->ops->event_status(a->ctx, st.event, st.status > 0 ? -EPROTO : st.status,
				     st.message);
}

/* A batch of event records: every length is checked against the frame
 * before anything is handed on (the frame is the agent's, unchecked). */
static void on_events(struct agent *a, const char *p, uint32_t len)
{
	static struct jpring_frame frames[JPAG_EVENT_MAX_FRAMES];
	struct jpag_events hdr;
	size_t off = sizeof(hdr);

	if (len < sizeof(hdr)) {
		agent_drop(a, "short events record");
		return;
	}
	memcpy(&hdr, p, sizeof(hdr));
	for (uint32_t i = 0; i < hdr.count; i++) {
		struct jpag_event_rec rec;
		size_t cpad, need;

		if (len - off < sizeof(rec))
			goto bad;
		memcpy(&rec, p + off, sizeof(rec));
		if (rec.nframes > JPAG_EVENT_MAX_FRAMES || rec.class_len > JPAG_EVENT_CLASS_MAX)
			goto bad;
		cpad = ((size_t)rec.class_len + 7) & ~(size_t)7;
		need = sizeof(rec) + cpad + (size_t)rec.nframes * sizeof(struct jpring_frame);
		if (len - off < need)
			goto bad;
		memcpy(frames, p + off + sizeof(rec) + cpad,
		       (size_t)rec.nframes * sizeof(struct jpring_frame));
		if (a->ops && a->ops->event)
			a->ops->event(a->ctx, &rec, p + off + sizeof(rec), frames);
		off += need;
	}
	if (off == len)
		return;
bad:
	a->link->st.protocol_errors++;
	agent_drop(a, "event record lengths do not add up");
}

/* The daemon cannot know the JVM's SIGRTMIN (glibc's is 34, musl's 35):
 * any kernel real-time signal is accepted, besides the classic ones the
 * agent may use. */
static bool signal_plausible(uint32_t sig)
{
	return sig == SIGPROF || sig == SIGVTALRM || sig == SIGIO || (sig >= 32 && sig <= 64);
}

static void on_signal(struct agent *a, const char *p, uint32_t len)
{
	struct jpag_signal sg;

	if (len != sizeof(sg)) {
		agent_drop(a, "bad signal record");
		return;
	}
	memcpy(&sg, p, sizeof(sg));
	if (!signal_plausible(sg.signal) || !signal_plausible(sg.proposed) ||
	    sg.signal == sg.proposed || sg.reserved ||
	    (sg.reason != JPAG_SIGNAL_AT_START && sg.reason != JPAG_SIGNAL_TAKEN_OVER)) {
		agent_drop(a, "implausible signal record");
		return;
	}
	/* Only meaningful during a recording; a late one is ignored. */
	if (a->ops && a->ops->signal)
		a->ops->signal(a->ctx, sg.signal, sg.proposed, sg.reason == JPAG_SIGNAL_TAKEN_OVER);
}

static void handle_frame(struct agent *a, const struct jpag_hdr *h, const char *p)
{
	if (!a->hello && h->type != JPAG_HELLO) {
		agent_drop(a, "first frame is not a hello");
		return;
	}
	switch (h->type) {
	case JPAG_HELLO:
		on_hello(a, p, h->len);
		break;
	case JPAG_PERF_FD_REQ:
		on_perf_fd_req(a, p, h->len);
		break;
	case JPAG_METHOD:
		on_method(a, p, h->len, false);
		break;
	case JPAG_METHOD_UNKNOWN:
		on_method(a, p, h->len, true);
		break;
	case JPAG_THREAD_NAME:
		on_thread_name(a, p, h->len);
		break;
	case JPAG_SIGNAL:
		on_signal(a, p, h->len);
		break;
	case JPAG_STOPPED:
		break;
	case JPAG_EVENT_STATUS:
		on_event_status(a, p, h->len);
		break;
	case JPAG_EVENTS:
		on_events(a, p, h->len);
		break;
	case JPAG_EVENTS_DONE:
		if (a->ops && a->ops->events_done)
			a->ops->events_done(a->ctx);
		break;
	case JPAG_THREADS_ARMED:
		if (h->len) {
			agent_drop(a, "bad threads-armed record");
			break;
		}
		if (a->ops && a->ops->threads_armed)
			a->ops->threads_armed(a->ctx);
		break;
	default:
		send_error(a, -EPROTO, "unknown frame type");
		agent_drop(a, "unknown frame type");
		break;
	}
}

static void process_input(struct agent *a)
{
	while (!a->dead && a->in.len >= sizeof(struct jpag_hdr)) {
		struct jpag_hdr h;

		memcpy(&h, a->in.data, sizeof(h));
		if (h.magic != JPAG_MAGIC || h.version != JPAG_VERSION || h.reserved != 0 ||
		    h.len > JPAG_MAX_PAYLOAD) {
			a->link->st.protocol_errors++;
			agent_drop(a, "bad frame header");
			return;
		}
		if (a->in.len < sizeof(h) + h.len)
			return;
		if (agent_verify(a) < 0)
			return;  /* nothing from a process that is not there */
		handle_frame(a, &h, a->in.data + sizeof(h));
		if (a->dead)
			return;
		buf_consume(&a->in, sizeof(h) + h.len);
	}
}

static void agent_free(struct agent *a)
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

static void agent_unlink(struct agent *a)
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
static void agent_drop(struct agent *a, const char *why)
{
	const struct agentlink_ops *ops = a->ops;

	if (why)
		log_warn("agent of pid %d dropped: %s", (int)a->pid, why);
	agent_kill(a);
	a->ops = NULL;
	if (ops)
		ops->gone(a->ctx, why ? why : "the agent disconnected");
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
			process_input(a);
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
	process_input(a);
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
	int memfd, r;

	if (a->dead || a->ops)
		return -EBUSY;
	r = jring_new(nslots, &a->ring, &memfd);
	if (r < 0)
		return r;
	st.ring_bytes = jring_bytes(a->ring);
	a->ops = ops;
	a->ctx = ctx;
	r = agent_send(a, JPAG_START, &st, sizeof(st), memfd);
	if (r < 0) {
		a->ops = NULL;
		jring_free(a->ring);
		a->ring = NULL;
	}
	return r;
}

void agent_stop(struct agent *a)
{
	if (!a)
		return;
	if (a->ops && !a->dead)
		agent_send(a, JPAG_STOP, NULL, 0, -1);
	a->ops = NULL;
	a->ctx = NULL;
	jring_free(a->ring);
	a->ring = NULL;
}

struct jring *agent_ring(struct agent *a)
{
	return a->ring;
}

int agent_event_on(struct agent *a, uint32_t event, uint64_t param)
{
	struct jpag_event_on on = { .event = event, .param = param };

	if (a->dead || !a->ops)
		return -ENOTCONN;
	return agent_send(a, JPAG_EVENT_ON, &on, sizeof(on), -1);
}

int agent_event_off(struct agent *a)
{
	if (a->dead || !a->ops)
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
