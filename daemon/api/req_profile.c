/* profile: a window of the continuous host view (hostview.c), filtered and
 * grouped as asked, rendered in any export format. A pid filter means the
 * process that has the pid now (pid and start time), never an earlier one
 * with the same pid. Unprivileged peers get only processes they may record,
 * and only since the process started. */
#include "requests.h"

#include <errno.h>
#include <json-c/json.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "authz.h"
#include "clock.h"
#include "hostview.h"
#include "jprof_proto.h"
#include "log.h"
#include "proc.h"
#include "profile_msg.h"
#include "render.h"
#include "server.h"
#include "sampler.h"

/* A continuous profile of pid needs the same right as recording it.
 * *pidfd: the authorized process, for unprivileged peers (else -1).
 * -errno after the error was sent. */
static int profile_authorize(const struct request *r, pid_t pid, int *pidfd)
{
	if (!pid) {
		if (r->peer->privileged)
			return 0;
		requests_deny(r, "for the whole host's profile", "the whole host's profile",
			      "; others may ask for \"pid\" of their own processes");
		return -EPERM;
	}
	if (r->peer->privileged)
		return 0;  /* also for processes that have exited since */
	return requests_authorize_pid(r, pid, "for the profile of", pidfd);
}

/* Which process pid names now: its start time, the identity the host view
 * keeps beside each pid, so that a profile of pid holds no samples of an
 * earlier process that had the same pid (another user's, maybe). With the
 * authorized pidfd, the start is read while that process holds the pid.
 * 0 (every process that had pid) only for privileged peers asking for a
 * pid that no process has now. -ESRCH when the authorized process is gone. */
static int profile_identity(pid_t pid, int pidfd, uint64_t *start)
{
	if (proc_read_start_boottime(pid, start) < 0) {
		*start = 0;
		return pidfd >= 0 ? -ESRCH : 0;
	}
	if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0)
		return -ESRCH;
	return 0;
}

/* Monotonic time of start_boot (CLOCK_BOOTTIME), so an unprivileged caller
 * sees only windows since its process started. */
static uint64_t process_start_mono(uint64_t start_boot, uint64_t now_mono)
{
	uint64_t now_boot = clock_ns(CLOCK_BOOTTIME);

	if (now_boot < start_boot || now_boot - start_boot > now_mono)
		return 0;
	return now_mono - (now_boot - start_boot);
}

/* The asked window [*from, *to] in monotonic ns; start: the process's
 * start (CLOCK_BOOTTIME) for unprivileged peers. */
static void profile_window(const struct request *r, uint64_t now, uint64_t start, uint64_t *from,
			   uint64_t *to)
{
	const struct jprof_profile_req *pr = &r->msg->profile;
	uint64_t back;

	if (pr->has_range) {
		back = (uint64_t)-pr->from_ms * 1000000ull;
		*from = now > back ? now - back : 0;
		back = (uint64_t)-pr->to_ms * 1000000ull;
		*to = now > back ? now - back : 0;
	} else {
		back = (uint64_t)pr->last_s * 1000000000ull;
		*from = now > back ? now - back : 0;
		*to = now;
	}
	if (!r->peer->privileged) {
		uint64_t born = process_start_mono(start, now);

		if (born > *from)
			*from = born;
	}
}

/* Where the data starts or ends, in ms relative to now (<= 0). */
static int64_t ms_before(uint64_t now, uint64_t t)
{
	return t ? -(int64_t)((now - t) / 1000000ull) : 0;
}

/* The worker rendered a connection's host profile: its line goes out, and
 * the connection's next requests are taken up. */
static void on_rendered(void *arg, int err, struct buf *out)
{
	struct server_client *c = arg;
	struct requests_conn *conn = server_client_data(c);

	conn->profile_job = NULL;
	if (err < 0) {
		log_err("rendering a host profile failed: %s", strerror(-err));
		server_client_send_error(c, conn->profile_id, true, JPROF_E_INTERNAL,
					 "rendering the profile failed");
	} else {
		server_client_send(c, out->data, out->len);
	}
	server_client_hold(c, false);
}

/* Renders st (taken on success) into the message o (taken) on the render
 * worker, holding the connection's further requests until it is sent, so
 * that its answers keep their order. 0, or -errno after the error reply
 * (st is still the caller's). */
static int profile_submit(const struct request *r, struct store *st, const struct export_meta *meta,
			  const struct export_options *opt, enum jprof_format fmt,
			  struct json_object *o)
{
	struct render_req req = {
		.st = st, .meta = meta, .opt = opt, .fmt = fmt, .msg = o, .uid = r->peer->uid,
		.max_per_uid = r->peer->uid ? REQUESTS_PROFILE_RENDERS_PER_UID : 0,
	};
	struct requests_conn *conn = r->conn;
	struct render_job *job = NULL;
	int ret;

	conn->profile_id = r->msg->id;
	server_client_hold(r->client, true);
	ret = render_submit(r->rq->cfg.render, &req, on_rendered, r->client, &job);
	if (ret < 0) {
		json_object_put(o);
		server_client_hold(r->client, false);
		if (ret == -EDQUOT)
			requests_error(r, JPROF_E_LIMIT,
				       "uid %u has %u host profiles being rendered already, its limit; "
				       "try again when one has arrived",
				       (unsigned)r->peer->uid, REQUESTS_PROFILE_RENDERS_PER_UID);
		else if (!requests_exhausted(r, ret))
			requests_error(r, JPROF_E_INTERNAL, "rendering the profile failed");
		return ret;
	}
	conn->profile_job = job;  /* NULL when it ran at once (no worker) */
	return 0;
}

void req_profile_abandon(struct requests_conn *conn)
{
	render_cancel(conn->profile_job);
	conn->profile_job = NULL;
}

void req_profile(const struct request *r)
{
	const struct jprof_profile_req *pr = &r->msg->profile;
	struct hostview *hv = r->rq->hostview;
	struct hostview_filter f = {
		.pid = pr->pid,
		.comm = pr->comm[0] ? pr->comm : NULL,
		.unit = pr->unit[0] ? pr->unit : NULL,
		.cgroup = pr->cgroup[0] ? pr->cgroup : NULL,
	};
	struct export_meta meta = { .status = "complete" };  /* the event: profile_msg_host_meta */
	struct export_options opt = { .thread_frames = false };
	struct json_object *o, *sum;
	uint64_t now = clock_ns(CLOCK_MONOTONIC), from, to, span_from = 0, span_to = 0;
	struct sampler_stats ss;
	struct buf out = BUF_INIT;
	struct store *st = NULL;
	int fmt, group, ret, pidfd = -1;

	fmt = requests_format(r, pr->format);
	if (fmt < 0)
		goto out;
	if (jprof_format_info(fmt)->time_ordered) {
		requests_error(r, JPROF_E_BAD_REQUEST,
			       "format %s needs each sample's time, and the host view keeps only "
			       "totals per window; record one (jprofctl record -o x%s)",
			       jprof_format_info(fmt)->name, jprof_format_info(fmt)->extensions[0]);
		goto out;
	}
	/* Whole-host profiles start with the process, as record --all does. */
	group = pr->group_by[0] ? hostview_group_parse(pr->group_by) :
				  (pr->pid ? HOSTVIEW_GROUP_NONE : HOSTVIEW_GROUP_COMM);
	if (group < 0) {
		requests_error(r, JPROF_E_BAD_REQUEST, "unknown group_by \"%s\"", pr->group_by);
		goto out;
	}
	if (profile_authorize(r, pr->pid, &pidfd) < 0)
		goto out;
	if (pr->pid && profile_identity(pr->pid, pidfd, &f.start_ns) < 0) {
		requests_error(r, JPROF_E_NO_SUCH_PROCESS, "no process with pid %d", (int)pr->pid);
		goto out;
	}
	if (!hv) {
		requests_error(r, JPROF_E_UNAVAILABLE,
			       "the continuous host profile is off (jprofd runs with rate = 0)");
		goto out;
	}
	profile_window(r, now, f.start_ns, &from, &to);
	/* pprof gets a location per sampled address, as recordings do. */
	ret = from <= to ? hostview_query_grouped(hv, from, to, &f, (enum hostview_group)group,
						  fmt == JPROF_FMT_PPROF, &st, &span_from, &span_to) :
			   -ENOENT;
	if (ret == -ENOENT) {
		/* Nothing retained there: a valid, empty profile. */
		st = store_new(NULL, NULL, 0);
		span_from = span_to = 0;
		ret = st ? 0 : -ENOMEM;
	}
	if (ret < 0) {
		log_err("profile query failed: %s", strerror(-ret));
		requests_error(r, JPROF_E_INTERNAL, "querying the host view failed: %s", strerror(-ret));
		goto out;
	}
	sampler_get_stats(r->rq->sampler, &ss);
	meta.pid = (uint32_t)pr->pid;
	meta.comm = pr->pid ? store_process_name(st, (uint32_t)pr->pid) : NULL;
	profile_msg_host_meta(&meta, ss.host_rate_hz);
	meta.duration_ns = span_to - span_from;
	meta.start_unix_ns = clock_ns(CLOCK_REALTIME) - (span_from ? now - span_from : 0);
	o = profile_msg_new(r->msg->id, "complete", (enum jprof_format)fmt, &out, st, &sum);
	if (!o) {
		requests_error(r, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	jprof_json_add_u64(sum, "duration_ms", (span_to - span_from) / 1000000ull);
	jprof_json_add_u64(sum, "span_ms", (span_to - span_from) / 1000000ull);
	json_object_object_add(sum, "from_ms", json_object_new_int64(ms_before(now, span_from)));
	json_object_object_add(sum, "to_ms", json_object_new_int64(ms_before(now, span_to)));
	json_object_object_add(sum, "group_by",
			       json_object_new_string(hostview_group_name((enum hostview_group)group)));
	if (profile_submit(r, st, &meta, &opt, (enum jprof_format)fmt, o) == 0)
		st = NULL;  /* the job's */
out:
	if (pidfd >= 0)
		close(pidfd);
	buf_release(&out);
	store_free(st);
}
