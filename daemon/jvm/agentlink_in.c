/* The agent link's incoming frames (agentlink_int.h): each type checked
 * for its length and contents before the bound recording hears of it. */
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

/* ---- incoming frames ---- */

/* The recording of event set `set`, or NULL. */
static const struct agent_bind *bound(const struct agent *a, uint32_t set)
{
	return set < JPAG_MAX_SETS && a->bind[set].ops ? &a->bind[set] : NULL;
}

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
	a->sets_ok = hello.agent_version & JPAG_HELLO_SETS;
	a->hello = true;
	/* One agent per process. An older connection whose process is gone
	 * goes; an idle one of this same process is replaced (the agent
	 * reconnects after a re-attach); one bound to a recording stays, and
	 * this newer one is refused. */
	for (struct agent *o = l->agents, *next; o; o = next) {
		next = o->next;
		if (o == a || o->pid != a->pid || o->dead)
			continue;
		if (agent_verify(o) == 0 && agent_bound(o)) {
			log_audit("agent of pid %d: a second connection refused; the one bound to a "
				  "recording stays", (int)a->pid);
			agent_send_error(a, -EBUSY, "this process already has an agent bound to a recording");
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

static void on_perf_fd_req(struct agent *a, uint32_t set, const void *p, uint32_t len)
{
	const struct agent_bind *b = bound(a, set);
	struct jpag_perf_fd_req req;
	struct jpag_perf_fd rep;
	int fd = -1, r;

	if (len != sizeof(req)) {
		agent_drop(a, "bad perf fd request");
		return;
	}
	memcpy(&req, p, sizeof(req));
	rep.tid = req.tid;
	if (!b) {
		r = -ENOTCONN;  /* no recording of this process is running */
	} else {
		r = b->ops->perf_fd(b->ctx, req.tid, &fd);
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
		agent_send_set(a, JPAG_PERF_FD, set, &rep, sizeof(rep), -1, false);
		return;
	}
	a->link->st.fds_passed++;
	agent_send_set(a, JPAG_PERF_FD, set, &rep, sizeof(rep), fd, true);
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
	/* Method ids are the process's: every recording may have seen it. */
	for (unsigned i = 0; i < JPAG_MAX_SETS && !a->dead; i++)
		if (a->bind[i].ops)
			a->bind[i].ops->method(a->bind[i].ctx, &m);
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
	if (extra)
		memcpy(&java_id, p + sizeof(tn) + tn.name_len, sizeof(java_id));
	for (unsigned i = 0; i < JPAG_MAX_SETS; i++) {
		const struct agent_bind *b = bound(a, i);

		if (b && b->ops->thread_name)
			b->ops->thread_name(b->ctx, tn.tid, p + sizeof(tn), tn.name_len);
		if (b && java_id && b->ops->thread_java_id)
			b->ops->thread_java_id(b->ctx, tn.tid, java_id);
	}
}

static void on_event_status(struct agent *a, uint32_t set, const char *p, uint32_t len)
{
	const struct agent_bind *b;
	struct jpag_event_status st;

	if (len != sizeof(st)) {
		agent_drop(a, "bad event status record");
		return;
	}
	memcpy(&st, p, sizeof(st));
	st.message[sizeof(st.message) - 1] = '\0';
	/* The wall timer answers the set that asked; alloc/lock, the set
	 * whose events they are. */
	b = bound(a, st.event == JPAG_EV_WALL ? set : (uint32_t)a->ev_set);
	if (b && b->ops->event_status)
		b->ops->event_status(b->ctx, st.event, st.status > 0 ? -EPROTO : st.status,
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
		const struct agent_bind *b = bound(a, (uint32_t)a->ev_set);

		if (b && b->ops->event)
			b->ops->event(b->ctx, &rec, p + off + sizeof(rec), frames);
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
	/* Only meaningful during a recording; a late one is ignored. All
	 * sets use the one signal. */
	for (unsigned i = 0; i < JPAG_MAX_SETS; i++) {
		const struct agent_bind *b = bound(a, i);

		if (b && b->ops->signal)
			b->ops->signal(b->ctx, sg.signal, sg.proposed,
				       sg.reason == JPAG_SIGNAL_TAKEN_OVER);
	}
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
		on_perf_fd_req(a, h->reserved, p, h->len);
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
		/* For a set: the agent refused SET_ADD (it does not answer
		 * SET_DEL), so that recording has no agent. */
		if (h->reserved && bound(a, h->reserved)) {
			struct agent_bind b = a->bind[h->reserved];

			a->bind[h->reserved] = (struct agent_bind){ 0 };
			b.ops->gone(b.ctx, "the agent refused another recording");
		}
		break;
	case JPAG_EVENT_STATUS:
		on_event_status(a, h->reserved, p, h->len);
		break;
	case JPAG_EVENTS:
		on_events(a, p, h->len);
		break;
	case JPAG_EVENTS_DONE: {
		const struct agent_bind *b = bound(a, (uint32_t)a->ev_set);

		if (b && b->ops->events_done)
			b->ops->events_done(b->ctx);
		break;
	}
	case JPAG_THREADS_ARMED:
		if (h->len) {
			agent_drop(a, "bad threads-armed record");
			break;
		}
		if (bound(a, h->reserved) && a->bind[h->reserved].ops->threads_armed)
			a->bind[h->reserved].ops->threads_armed(a->bind[h->reserved].ctx);
		break;
	default:
		agent_send_error(a, -EPROTO, "unknown frame type");
		agent_drop(a, "unknown frame type");
		break;
	}
}

void agentlink_process_input(struct agent *a)
{
	while (!a->dead && a->in.len >= sizeof(struct jpag_hdr)) {
		struct jpag_hdr h;

		memcpy(&h, a->in.data, sizeof(h));
		/* reserved: the event set of a set's frame (0 from agents
		 * without sets). */
		if (h.magic != JPAG_MAGIC || h.version != JPAG_VERSION ||
		    h.reserved >= (a->sets_ok ? JPAG_MAX_SETS : 1) ||
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

