#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agentlink.h"
#include "authz.h"
#include "buf.h"
#include "export.h"
#include "hostview.h"
#include "jprof_proto.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "sampler.h"
#include "session.h"

#define CLIENT_MAX_SESSIONS 16
#define READ_CHUNK 65536
#define READ_BUDGET (1024 * 1024)   /* bytes per wakeup, so one client cannot starve others */

struct client_session {
	int64_t req_id;
	struct session *s;
};

struct client {
	struct control *ctl;
	struct client *next;
	int fd;
	struct loop_source *src;
	struct authz_peer peer;
	struct buf in, out;
	bool discarding;            /* inside an oversized request line */
	bool decided;               /* JSON client, not an agent */
	bool want_out;
	bool dead;
	struct client_session sessions[CLIENT_MAX_SESSIONS];
	unsigned nsessions;
};

struct listener {
	int fd;
	struct loop_source *src;
};

struct control {
	struct loop *loop;
	struct agentlink *agents;
	struct session_mgr *sessions;
	struct sampler *sampler;
	struct hostview *hostview;
	struct control_config cfg;
	struct listener listeners[8];
	unsigned nlisteners;
	struct client *clients;
	unsigned nclients;
	uint64_t start_mono_ns;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- output ---- */

static void client_drop(struct client *c);

static void client_flush(struct client *c)
{
	while (c->out.len) {
		ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			c->dead = true;  /* EPIPE etc.: the read side will clean up */
			buf_reset(&c->out);
			break;
		}
		buf_consume(&c->out, (size_t)n);
	}
	if (c->dead)
		return;
	if (!!c->out.len != c->want_out) {
		c->want_out = c->out.len != 0;
		loop_set_events(c->src, EPOLLIN | EPOLLRDHUP | (c->want_out ? EPOLLOUT : 0));
	}
}

static void client_send(struct client *c, const char *line, size_t len)
{
	if (c->dead)
		return;
	if (c->out.len + len > c->ctl->cfg.max_output || buf_append(&c->out, line, len) < 0) {
		log_warn("client pid %d uid %u: not reading its replies (%zu bytes queued); disconnecting",
			 (int)c->peer.pid, (unsigned)c->peer.uid, c->out.len);
		c->dead = true;
		buf_reset(&c->out);
		return;
	}
	client_flush(c);
}

static void send_error(struct client *c, const struct jprof_request *req, const char *code,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void send_error(struct client *c, const struct jprof_request *req, const char *code,
		       const char *fmt, ...)
{
	char msg[512], *line;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line = jprof_error_line(req ? req->id : 0, req && req->has_id, code, msg);
	if (line)
		client_send(c, line, strlen(line));
	free(line);
}

static void send_obj(struct client *c, struct json_object *o)
{
	size_t len;
	char *line = o ? jprof_json_line(o, &len) : NULL;

	if (line)
		client_send(c, line, len);
	free(line);
	json_object_put(o);
}

/* ---- session sink ---- */

static void sink_send(void *ctx, const char *line, size_t len)
{
	client_send(ctx, line, len);
}

static void sink_done(void *ctx, struct session *s)
{
	struct client *c = ctx;

	for (unsigned i = 0; i < c->nsessions; i++) {
		if (c->sessions[i].s == s) {
			c->sessions[i] = c->sessions[--c->nsessions];
			return;
		}
	}
}

/* ---- requests ---- */

static void handle_hello(struct client *c, const struct jprof_request *req)
{
	struct json_object *o, *cmds;

	if (req->hello.min_version > JPROF_PROTO_VERSION || req->hello.max_version < JPROF_PROTO_VERSION) {
		send_error(c, req, JPROF_E_UNSUPPORTED_VERSION,
			   "this jprofd speaks protocol version %d only; the client asked for %d..%d",
			   JPROF_PROTO_VERSION, req->hello.min_version, req->hello.max_version);
		return;
	}
	o = jprof_response_new(req->id, "hello");
	cmds = json_object_new_array();
	if (!o || !cmds) {
		json_object_put(o);
		json_object_put(cmds);
		return;
	}
	json_object_object_add(o, "version", json_object_new_int(JPROF_PROTO_VERSION));
	json_object_object_add(o, "server", json_object_new_string("jprofd " JPROF_VERSION));
	json_object_array_add(cmds, json_object_new_string("hello"));
	json_object_array_add(cmds, json_object_new_string("status"));
	json_object_array_add(cmds, json_object_new_string("record"));
	json_object_array_add(cmds, json_object_new_string("cancel"));
	json_object_array_add(cmds, json_object_new_string("profile"));
	json_object_object_add(o, "commands", cmds);
	send_obj(c, o);
}

struct status_ctx {
	const struct client *c;
	struct json_object *list;
};

static int status_session(struct session *s, void *arg)
{
	struct status_ctx *sc = arg;
	struct session_info si;
	struct json_object *e;

	session_get_info(s, &si);
	/* Others' recordings are counted but not described to unprivileged peers. */
	if (!sc->c->peer.privileged && si.uid != sc->c->peer.uid)
		return 0;
	e = json_object_new_object();
	if (!e)
		return 0;
	json_object_object_add(e, "id", json_object_new_int64(si.id));
	json_object_object_add(e, "pid", json_object_new_int64(si.pid));
	json_object_object_add(e, "all", json_object_new_boolean(si.all));
	json_object_object_add(e, "uid", json_object_new_int64(si.uid));
	json_object_object_add(e, "elapsed_ms", json_object_new_int64((int64_t)si.elapsed_ms));
	json_object_object_add(e, "duration_ms", json_object_new_int64((int64_t)si.duration_ms));
	json_object_object_add(e, "samples", json_object_new_int64((int64_t)si.samples));
	json_object_object_add(e, "threads", json_object_new_int64(si.threads));
	json_object_array_add(sc->list, e);
	return 0;
}

#define ADD_U64(obj, key, v) json_object_object_add(obj, key, json_object_new_int64((int64_t)(v)))

static void add_hostview_status(struct control *ctl, struct json_object *st)
{
	struct json_object *h = json_object_new_object();
	struct hostview_config hc;
	struct hostview_stats hs;

	if (!h)
		return;
	json_object_object_add(h, "enabled", json_object_new_boolean(ctl->hostview != NULL));
	if (ctl->hostview) {
		hostview_get_config(ctl->hostview, &hc);
		hostview_get_stats(ctl->hostview, &hs);
		ADD_U64(h, "bucket_s", hc.bucket_s);
		ADD_U64(h, "retention_s", hc.retention_s);
		ADD_U64(h, "max_bytes", hc.max_bytes);
		ADD_U64(h, "bytes", hs.bytes);
		ADD_U64(h, "buckets", hs.buckets);
		ADD_U64(h, "samples", hs.samples);
		ADD_U64(h, "evicted_age", hs.evicted_age);
		ADD_U64(h, "evicted_memory", hs.evicted_memory);
		ADD_U64(h, "span_ms", hs.newest_ns > hs.oldest_ns ?
			(hs.newest_ns - hs.oldest_ns) / 1000000ull : 0);
	}
	json_object_object_add(st, "hostview", h);
}

static void handle_status(struct client *c, const struct jprof_request *req)
{
	struct control *ctl = c->ctl;
	struct json_object *o = jprof_response_new(req->id, "status");
	struct json_object *st = json_object_new_object(), *smp = json_object_new_object();
	struct json_object *lost = json_object_new_object(), *sess = json_object_new_object();
	struct json_object *peer = json_object_new_object();
	struct status_ctx sc = { .c = c, .list = json_object_new_array() };
	struct sampler_stats ss;

	if (!o || !st || !smp || !lost || !sess || !peer || !sc.list) {
		json_object_put(o);
		json_object_put(st);
		json_object_put(smp);
		json_object_put(lost);
		json_object_put(sess);
		json_object_put(peer);
		json_object_put(sc.list);
		send_error(c, req, JPROF_E_INTERNAL, "out of memory");
		return;
	}
	sampler_get_stats(ctl->sampler, &ss);
	json_object_object_add(st, "version", json_object_new_string(JPROF_VERSION));
	json_object_object_add(st, "protocol", json_object_new_int(JPROF_PROTO_VERSION));
	ADD_U64(st, "pid", getpid());
	ADD_U64(st, "uptime_ms", (mono_ns() - ctl->start_mono_ns) / 1000000ull);
	json_object_object_add(smp, "state", json_object_new_string("running"));
	ADD_U64(smp, "rate_hz", ss.host_rate_hz);
	ADD_U64(smp, "cpus", ss.cpus);
	ADD_U64(smp, "samples", ss.samples);
	ADD_U64(smp, "idle", ss.idle);
	ADD_U64(smp, "drains", ss.drains);
	ADD_U64(smp, "thread_events", ss.thread_events);
	ADD_U64(lost, "kernel_stack", ss.kstack_err);
	ADD_U64(lost, "user_stack", ss.ustack_err);
	ADD_U64(lost, "stack_collision", ss.collision);
	ADD_U64(lost, "map_full", ss.map_full);
	ADD_U64(lost, "ringbuf", ss.ringbuf_full);
	ADD_U64(lost, "throttled", ss.throttled);
	ADD_U64(lost, "foreign_namespace", ss.foreign_ns);
	ADD_U64(lost, "stack_missing", ss.stack_missing);
	json_object_object_add(smp, "lost", lost);
	json_object_object_add(st, "sampler", smp);
	session_foreach(ctl->sessions, status_session, &sc);
	ADD_U64(sess, "active", session_count(ctl->sessions));
	json_object_object_add(sess, "list", sc.list);
	json_object_object_add(st, "sessions", sess);
	add_hostview_status(ctl, st);
	ADD_U64(st, "clients", ctl->nclients);
	ADD_U64(peer, "uid", c->peer.uid);
	json_object_object_add(peer, "authorized_all", json_object_new_boolean(c->peer.privileged));
	json_object_object_add(st, "peer", peer);
	json_object_object_add(o, "status", st);
	send_obj(c, o);
}

struct uid_count {
	uid_t uid;
	unsigned n;
};

static int count_uid_sessions(struct session *s, void *arg)
{
	struct uid_count *uc = arg;
	struct session_info si;

	session_get_info(s, &si);
	if (si.uid == uc->uid)
		uc->n++;
	return 0;
}

static int pidfd_open_checked(pid_t pid)
{
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -errno : (int)fd;
}

static void handle_record(struct client *c, const struct jprof_request *req)
{
	const struct jprof_record_req *rr = &req->record;
	struct session_params p = {
		.req_id = req->id,
		.pid = rr->pid,
		.pidfd = -1,
		.all = rr->all,
		.uid = c->peer.uid,
		.duration_ms = rr->duration_ms,
		.interval_us = rr->interval_us,
		.progress = rr->progress,
		.thread_frames = rr->thread_frames,
		.java = rr->java,
		.java_lines = rr->java_lines,
		.java_signatures = rr->java_signatures,
	};
	struct session_sink sink = { .send = sink_send, .done = sink_done, .ctx = c };
	const char *code = NULL;
	char why[512];
	struct session *s;
	int fmt, r;

	fmt = jprof_format_parse(rr->format);
	if (fmt < 0) {
		send_error(c, req, JPROF_E_BAD_REQUEST, "unknown format \"%s\" (supported: %s)",
			   rr->format, jprof_format_names());
		return;
	}
	p.format = (enum jprof_format)fmt;
	for (unsigned i = 0; i < c->nsessions; i++) {
		if (c->sessions[i].req_id == req->id) {
			send_error(c, req, JPROF_E_BAD_REQUEST,
				   "request id %lld is already used by a running recording on this connection",
				   (long long)req->id);
			return;
		}
	}
	if (c->nsessions >= c->ctl->cfg.max_sessions_per_client) {
		send_error(c, req, JPROF_E_LIMIT, "at most %u recordings per connection",
			   c->ctl->cfg.max_sessions_per_client);
		return;
	}
	if (!c->peer.privileged) {
		struct uid_count uc = { .uid = c->peer.uid };

		session_foreach(c->ctl->sessions, count_uid_sessions, &uc);
		if (uc.n >= c->ctl->cfg.max_sessions_per_user) {
			send_error(c, req, JPROF_E_LIMIT, "uid %u already runs %u recordings (the limit)",
				   (unsigned)c->peer.uid, uc.n);
			return;
		}
	}
	if (rr->all) {
		if (!c->peer.privileged) {
			log_audit("denied: uid %u (pid %d) asked to record the whole host",
				  (unsigned)c->peer.uid, (int)c->peer.pid);
			send_error(c, req, JPROF_E_PERMISSION_DENIED,
				   "recording the whole host needs root or membership in group %s",
				   c->ctl->cfg.group_name ? c->ctl->cfg.group_name : "jprof");
			return;
		}
	} else {
		/* Pin the process first so a recycled pid cannot slip in after the check. */
		p.pidfd = pidfd_open_checked(rr->pid);
		if (p.pidfd < 0) {
			send_error(c, req, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)rr->pid);
			return;
		}
		r = authz_check_pid(&c->peer, rr->pid, why, sizeof(why));
		if (r == 0 && syscall(SYS_pidfd_send_signal, p.pidfd, 0, NULL, 0) < 0)
			r = -ESRCH;
		if (r < 0) {
			close(p.pidfd);
			if (r == -ESRCH) {
				send_error(c, req, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)rr->pid);
			} else {
				log_audit("denied: uid %u (pid %d) asked to record pid %d: %s",
					  (unsigned)c->peer.uid, (int)c->peer.pid, (int)rr->pid, why);
				send_error(c, req, JPROF_E_PERMISSION_DENIED, "%s", why);
			}
			return;
		}
	}
	r = session_start(c->ctl->sessions, &p, &sink, &s, &code, why, sizeof(why));
	if (r < 0) {
		send_error(c, req, code ? code : JPROF_E_INTERNAL, "%s", why);
		return;
	}
	c->sessions[c->nsessions++] = (struct client_session){ .req_id = req->id, .s = s };
}

/* A continuous profile of pid needs the same right as recording it; the
 * pidfd pins the process during the check. -errno after the error was sent. */
static int profile_authorize(struct client *c, const struct jprof_request *req, pid_t pid)
{
	char why[512];
	int fd, r;

	if (!pid) {
		if (c->peer.privileged)
			return 0;
		log_audit("denied: uid %u (pid %d) asked for the whole host's profile",
			  (unsigned)c->peer.uid, (int)c->peer.pid);
		send_error(c, req, JPROF_E_PERMISSION_DENIED,
			   "the whole host's profile needs root or membership in group %s; "
			   "others may ask for \"pid\" of their own processes",
			   c->ctl->cfg.group_name ? c->ctl->cfg.group_name : "jprof");
		return -EPERM;
	}
	if (c->peer.privileged)
		return 0;  /* also for processes that have exited since */
	fd = pidfd_open_checked(pid);
	if (fd < 0) {
		send_error(c, req, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)pid);
		return -ESRCH;
	}
	r = authz_check_pid(&c->peer, pid, why, sizeof(why));
	if (r == 0 && syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0) < 0)
		r = -ESRCH;
	close(fd);
	if (r == -ESRCH) {
		send_error(c, req, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)pid);
	} else if (r < 0) {
		log_audit("denied: uid %u (pid %d) asked for the profile of pid %d: %s",
			  (unsigned)c->peer.uid, (int)c->peer.pid, (int)pid, why);
		send_error(c, req, JPROF_E_PERMISSION_DENIED, "%s", why);
	}
	return r;
}

/* Monotonic time pid started, so an unprivileged caller never sees samples
 * of an earlier process that had the same pid; UINT64_MAX if unknown. */
static uint64_t process_start_mono(pid_t pid, uint64_t now_mono)
{
	struct timespec ts;
	uint64_t start_boot, now_boot;

	if (proc_read_start_boottime(pid, &start_boot) < 0 ||
	    clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
		return UINT64_MAX;  /* cannot tell: show nothing */
	now_boot = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (now_boot < start_boot || now_boot - start_boot > now_mono)
		return 0;
	return now_mono - (now_boot - start_boot);
}

static void handle_profile(struct client *c, const struct jprof_request *req)
{
	const struct jprof_profile_req *pr = &req->profile;
	struct control *ctl = c->ctl;
	struct hostview_filter f = {
		.pid = pr->pid,
		.comm = pr->comm[0] ? pr->comm : NULL,
		.unit = pr->unit[0] ? pr->unit : NULL,
		.cgroup = pr->cgroup[0] ? pr->cgroup : NULL,
	};
	struct export_meta meta = { .event = "cpu-clock", .status = "complete" };
	struct export_options opt = { 0 };
	struct json_object *o = NULL, *sum = NULL;
	uint64_t now = mono_ns(), from, to, span_from = 0, span_to = 0, back;
	struct timespec rt;
	struct sampler_stats ss;
	struct store_totals tot;
	struct buf out = BUF_INIT;
	struct store *st = NULL;
	int fmt, group, r;

	fmt = jprof_format_parse(pr->format);
	if (fmt < 0) {
		send_error(c, req, JPROF_E_BAD_REQUEST, "unknown format \"%s\" (supported: %s)",
			   pr->format, jprof_format_names());
		goto out;
	}
	/* Whole-host profiles start with the process, as record --all does. */
	group = pr->group_by[0] ? hostview_group_parse(pr->group_by) :
				  (pr->pid ? HOSTVIEW_GROUP_NONE : HOSTVIEW_GROUP_COMM);
	if (group < 0) {
		send_error(c, req, JPROF_E_BAD_REQUEST, "unknown group_by \"%s\"", pr->group_by);
		goto out;
	}
	if (profile_authorize(c, req, pr->pid) < 0)
		goto out;
	if (!ctl->hostview) {
		send_error(c, req, JPROF_E_UNAVAILABLE,
			   "the continuous host profile is off (jprofd runs with rate = 0)");
		goto out;
	}
	if (pr->has_range) {
		back = (uint64_t)-pr->from_ms * 1000000ull;
		from = now > back ? now - back : 0;
		back = (uint64_t)-pr->to_ms * 1000000ull;
		to = now > back ? now - back : 0;
	} else {
		back = (uint64_t)pr->last_s * 1000000000ull;
		from = now > back ? now - back : 0;
		to = now;
	}
	if (!c->peer.privileged) {
		uint64_t born = process_start_mono(pr->pid, now);

		if (born > from)
			from = born;
	}
	r = from <= to ? hostview_query_grouped(ctl->hostview, from, to, &f,
						(enum hostview_group)group, &st, &span_from, &span_to) :
			 -ENOENT;
	if (r == -ENOENT) {
		/* Nothing retained there: a valid, empty profile. */
		st = store_new(NULL, NULL, 0);
		span_from = span_to = 0;
		r = st ? 0 : -ENOMEM;
	}
	if (r < 0) {
		log_err("profile query failed: %s", strerror(-r));
		send_error(c, req, JPROF_E_INTERNAL, "querying the host view failed: %s", strerror(-r));
		goto out;
	}
	sampler_get_stats(ctl->sampler, &ss);
	clock_gettime(CLOCK_REALTIME, &rt);
	meta.pid = (uint32_t)pr->pid;
	meta.comm = pr->pid ? store_process_name(st, (uint32_t)pr->pid) : NULL;
	meta.period_type = sample_types_cpu[1];
	meta.period = ss.host_rate_hz ? 1000000000ull / ss.host_rate_hz : 0;
	meta.duration_ns = span_to - span_from;
	meta.start_unix_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec -
			     (span_from ? now - span_from : 0);
	opt.thread_frames = false;
	r = export_render(st, &meta, &opt, (enum jprof_format)fmt, &out);
	if (r < 0) {
		log_err("rendering a %s host profile failed: %s", jprof_format_info(fmt)->name,
			strerror(-r));
		send_error(c, req, JPROF_E_INTERNAL, "rendering the profile failed");
		goto out;
	}
	store_get_totals(st, &tot);
	o = jprof_response_new(req->id, "profile");
	sum = json_object_new_object();
	if (!o || !sum) {
		send_error(c, req, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	json_object_object_add(o, "status", json_object_new_string("complete"));
	if (jprof_profile_add_data(o, jprof_format_info(fmt)->name, jprof_format_info(fmt)->binary,
				   out.data, out.len) < 0) {
		send_error(c, req, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	ADD_U64(sum, "samples", tot.values[0]);
	ADD_U64(sum, "weight_ns", tot.values[1]);
	ADD_U64(sum, "stacks", tot.stacks);
	json_object_object_add(sum, "truncated", json_object_new_boolean(tot.truncated));
	ADD_U64(sum, "duration_ms", (span_to - span_from) / 1000000ull);
	ADD_U64(sum, "span_ms", (span_to - span_from) / 1000000ull);
	/* Where the data starts and ends, in ms relative to now (<= 0). */
	json_object_object_add(sum, "from_ms", json_object_new_int64(
		span_from ? -(int64_t)((now - span_from) / 1000000ull) : 0));
	json_object_object_add(sum, "to_ms", json_object_new_int64(
		span_to ? -(int64_t)((now - span_to) / 1000000ull) : 0));
	json_object_object_add(sum, "group_by",
			       json_object_new_string(hostview_group_name((enum hostview_group)group)));
	json_object_object_add(o, "summary", sum);
	sum = NULL;
	send_obj(c, o);
	o = NULL;
out:
	json_object_put(o);
	json_object_put(sum);
	buf_release(&out);
	store_free(st);
}

static void handle_cancel(struct client *c, const struct jprof_request *req)
{
	struct json_object *o;

	for (unsigned i = 0; i < c->nsessions; i++) {
		struct session *s = c->sessions[i].s;

		if (c->sessions[i].req_id != req->cancel.target)
			continue;
		o = jprof_response_new(req->id, "cancelled");
		if (o) {
			json_object_object_add(o, "target", json_object_new_int64(req->cancel.target));
			send_obj(c, o);
		}
		session_stop(s, "cancelled");
		return;
	}
	send_error(c, req, JPROF_E_NO_SUCH_SESSION,
		   "no running recording with request id %lld on this connection",
		   (long long)req->cancel.target);
}

static void handle_line(struct client *c, const char *line, size_t len)
{
	struct jprof_request req;
	struct jprof_error err;

	/* Blank lines (keep-alives, stray CRs) are not requests. */
	size_t i = 0;

	while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
		i++;
	if (i == len)
		return;
	memset(&req, 0, sizeof(req));
	if (jprof_request_parse(line, len, &req, &err) < 0) {
		send_error(c, &req, err.code, "%s", err.message);
		return;
	}
	switch (req.cmd) {
	case JPROF_CMD_HELLO:
		handle_hello(c, &req);
		break;
	case JPROF_CMD_STATUS:
		handle_status(c, &req);
		break;
	case JPROF_CMD_RECORD:
		handle_record(c, &req);
		break;
	case JPROF_CMD_CANCEL:
		handle_cancel(c, &req);
		break;
	case JPROF_CMD_PROFILE:
		handle_profile(c, &req);
		break;
	default:
		send_error(c, &req, JPROF_E_UNKNOWN_COMMAND, "unknown command");
		break;
	}
}

static void process_input(struct client *c)
{
	char *nl;

	while (!c->dead && (nl = memchr(c->in.data, '\n', c->in.len))) {
		size_t len = (size_t)(nl - c->in.data);

		if (c->discarding) {
			c->discarding = false;  /* end of an oversized line, already answered */
		} else if (len + 1 > JPROF_PROTO_MAX_REQUEST) {
			send_error(c, NULL, JPROF_E_LINE_TOO_LONG, "request line longer than %d bytes",
				   JPROF_PROTO_MAX_REQUEST);
		} else {
			handle_line(c, c->in.data, len);
		}
		buf_consume(&c->in, len + 1);
	}
	if (c->in.len >= JPROF_PROTO_MAX_REQUEST) {
		if (!c->discarding)
			send_error(c, NULL, JPROF_E_LINE_TOO_LONG, "request line longer than %d bytes",
				   JPROF_PROTO_MAX_REQUEST);
		c->discarding = true;
		buf_reset(&c->in);
	}
}

/* ---- connections ---- */

static void client_drop(struct client *c)
{
	struct control *ctl = c->ctl;
	struct client **pp = &ctl->clients;

	/* Recordings of a vanished client are dropped, not finished. */
	while (c->nsessions) {
		struct session *s = c->sessions[--c->nsessions].s;

		session_abandon(s);
	}
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	ctl->nclients--;
	loop_remove(c->src);
	close(c->fd);
	buf_release(&c->in);
	buf_release(&c->out);
	free(c);
}

/* The first bytes tell a JVM agent (binary frames, "JPAG") from a JSON
 * client. Returns true when the connection was handed to the agent link. */
static bool maybe_hand_over(struct client *c)
{
	static const char magic[4] = { 'J', 'P', 'A', 'G' };
	struct control *ctl = c->ctl;
	struct client **pp = &ctl->clients;
	size_t n = c->in.len < 4 ? c->in.len : 4;
	int r;

	if (c->decided)
		return false;
	if (memcmp(c->in.data, magic, n) != 0 || !ctl->agents) {
		c->decided = true;
		return false;
	}
	if (n < 4)
		return false;  /* wait for the rest of the magic */
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	ctl->nclients--;
	loop_remove(c->src);  /* deregisters the fd before the agent link adds it */
	r = agentlink_adopt(ctl->agents, c->fd, c->peer.pid, c->peer.uid, c->in.data, c->in.len);
	if (r < 0)
		log_warn("cannot serve the agent of pid %d: %s", (int)c->peer.pid, strerror(-r));
	buf_release(&c->in);
	buf_release(&c->out);
	free(c);
	return true;
}

static void on_client(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct client *c = arg;
	size_t budget = READ_BUDGET;

	if (events & EPOLLOUT)
		client_flush(c);
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
		while (budget && !c->dead) {
			ssize_t n;

			if (buf_reserve(&c->in, READ_CHUNK) < 0) {
				c->dead = true;
				break;
			}
			n = recv(fd, c->in.data + c->in.len, READ_CHUNK, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno != EAGAIN && errno != EWOULDBLOCK)
					c->dead = true;
				break;
			}
			if (n == 0) {
				c->dead = true;
				break;
			}
			c->in.len += (size_t)n;
			c->in.data[c->in.len] = '\0';
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			if (maybe_hand_over(c))
				return;
			process_input(c);
		}
	}
	if (c->dead)
		client_drop(c);
}

static void on_listener(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct control *ctl = arg;

	for (int i = 0; i < 64; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct client *c;
		int r;

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn("accept failed: %s", strerror(errno));
			return;
		}
		if (ctl->nclients >= ctl->cfg.max_clients) {
			char *line = jprof_error_line(0, false, JPROF_E_LIMIT, "too many clients connected");

			if (line)
				send(cfd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
			free(line);
			close(cfd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(cfd);
			continue;
		}
		c->ctl = ctl;
		c->fd = cfd;
		r = authz_peer_from_fd(cfd, ctl->cfg.group, &c->peer);
		if (r == 0)
			r = loop_add_io(ctl->loop, cfd, EPOLLIN | EPOLLRDHUP, on_client, c, &c->src);
		if (r < 0) {
			log_warn("cannot serve a new client: %s", strerror(-r));
			close(cfd);
			free(c);
			continue;
		}
		c->next = ctl->clients;
		ctl->clients = c;
		ctl->nclients++;
		log_debug("client connected: pid %d uid %u%s", (int)c->peer.pid, (unsigned)c->peer.uid,
			  c->peer.privileged ? " (privileged)" : "");
	}
}

int control_new(struct loop *loop, struct session_mgr *sessions, struct sampler *sampler,
		struct agentlink *agents, const struct control_config *cfg, struct control **out)
{
	struct control *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->agents = agents;
	c->sessions = sessions;
	c->sampler = sampler;
	c->cfg = *cfg;
	if (!c->cfg.max_clients)
		c->cfg.max_clients = 1024;
	if (!c->cfg.max_sessions_per_client)
		c->cfg.max_sessions_per_client = 4;
	if (!c->cfg.max_sessions_per_user)
		c->cfg.max_sessions_per_user = 8;
	if (c->cfg.max_sessions_per_client > CLIENT_MAX_SESSIONS)
		c->cfg.max_sessions_per_client = CLIENT_MAX_SESSIONS;
	if (!c->cfg.max_output)
		c->cfg.max_output = 512u << 20;
	c->start_mono_ns = mono_ns();
	*out = c;
	return 0;
}

int control_add_listener(struct control *c, int fd)
{
	struct listener *l;
	int r;

	if (c->nlisteners >= sizeof(c->listeners) / sizeof(c->listeners[0])) {
		close(fd);
		return -EMFILE;
	}
	l = &c->listeners[c->nlisteners];
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	r = loop_add_io(c->loop, fd, EPOLLIN, on_listener, c, &l->src);
	if (r < 0) {
		close(fd);
		return r;
	}
	l->fd = fd;
	c->nlisteners++;
	return 0;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	while (c->clients) {
		client_flush(c->clients);
		client_drop(c->clients);
	}
	for (unsigned i = 0; i < c->nlisteners; i++) {
		loop_remove(c->listeners[i].src);
		close(c->listeners[i].fd);
	}
	free(c);
}

void control_set_hostview(struct control *c, struct hostview *hv)
{
	c->hostview = hv;
}

unsigned control_client_count(const struct control *c)
{
	return c->nclients;
}

int control_listen_unix(const char *path, int *out_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	struct stat st;
	int fd = -1, r;

	*out_fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	if (mkdir(dirname(dir), 0755) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		unlink(path);  /* stale socket of a previous run */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto fail;
	}
	/* Anyone may connect; each request is authorized by its peer credentials. */
	if (chmod(path, 0666) < 0 || listen(fd, 512) < 0) {
		r = -errno;
		goto fail;
	}
	*out_fd = fd;
	return 0;
fail:
	close(fd);
	return r;
}
