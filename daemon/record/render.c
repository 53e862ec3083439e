#include "render.h"

#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "jprof_proto.h"
#include "log.h"
#include "loop.h"

struct render_job {
	struct render *rw;
	struct render_job *next;        /* in the queue or the finished list */
	struct store *st;
	struct export_meta meta;        /* strings point into strs */
	struct export_options opt;
	char *strs;                     /* the copies, and opt.event_values */
	enum jprof_format fmt;
	/* The message printed on the loop with empty data: the worker writes
	 * the line around the data, so it never frees what the loop allocated
	 * (a preempted worker holding the loop's malloc arena would stall it). */
	char *skel;
	size_t skel_len;
	uid_t uid;
	/* Set by the loop to stop a running rendering (export_options.cancel). */
	atomic_bool cancel;
	/* The loop's: NULL once cancelled. The worker never reads them. */
	render_done_fn done;
	void *arg;
	/* The worker's until the job is finished. */
	int err;
	struct buf out;
};

struct render {
	struct loop *loop;
	int efd;                        /* eventfd: a job was finished */
	struct loop_source *src;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	/* Under mu: */
	struct render_job *queue, **queue_tail;
	struct render_job *running;
	struct render_job *finished, **finished_tail;
	bool stop;
	struct render_stats st;
};

/* ---- jobs ---- */

static void job_free(struct render_job *j)
{
	if (!j)
		return;
	store_free(j->st);
	free(j->skel);
	buf_release(&j->out);
	free(j->strs);
	free(j);
}

/* Bytes a copy of s takes in the string block. */
static size_t str_cost(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

static const char *str_copy(char **p, const char *s)
{
	char *d = *p;
	size_t n;

	if (!s)
		return NULL;
	n = strlen(s) + 1;
	memcpy(d, s, n);
	*p += n;
	return d;
}

/* The meta and options with every string copied into one block: the
 * session or request they came from may be gone before the job runs. */
static int job_copy_args(struct render_job *j, const struct export_meta *meta,
			 const struct export_options *opt)
{
	size_t nv = opt && opt->event_values ? opt->nevent_values : 0;
	size_t need = nv * sizeof(char *);
	const char **values;
	char *p;

	if (meta)
		j->meta = *meta;
	if (opt)
		j->opt = *opt;
	need += str_cost(j->meta.comm) + str_cost(j->meta.event) + str_cost(j->meta.status) +
		str_cost(j->meta.period_type.type) + str_cost(j->meta.period_type.unit) +
		str_cost(j->opt.value);
	for (size_t i = 0; i < nv; i++)
		need += str_cost(opt->event_values[i]);
	j->strs = malloc(need ? need : 1);
	if (!j->strs)
		return -ENOMEM;
	values = (const char **)(void *)j->strs;
	p = j->strs + nv * sizeof(char *);
	for (size_t i = 0; i < nv; i++)
		values[i] = str_copy(&p, opt->event_values[i]);
	j->opt.event_values = nv ? values : NULL;
	j->opt.nevent_values = nv;
	j->meta.comm = str_copy(&p, j->meta.comm);
	j->meta.event = str_copy(&p, j->meta.event);
	j->meta.status = str_copy(&p, j->meta.status);
	j->meta.period_type.type = str_copy(&p, j->meta.period_type.type);
	j->meta.period_type.unit = str_copy(&p, j->meta.period_type.unit);
	j->opt.value = str_copy(&p, j->opt.value);
	j->opt.cancel = &j->cancel;
	return 0;
}

/* data as the inside of a JSON string, escaped as json-c does (quote,
 * backslash and control bytes; the rest as it is), appended to out. */
static int json_escape(struct buf *out, const char *data, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;
	char esc[7];
	int r;

	r = buf_reserve(out, len + len / 16 + 16);
	for (size_t i = 0; r == 0 && i < len; i++) {
		unsigned char c = (unsigned char)data[i];
		const char *e = NULL;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		switch (c) {
		case '"': e = "\\\""; break;
		case '\\': e = "\\\\"; break;
		case '\b': e = "\\b"; break;
		case '\f': e = "\\f"; break;
		case '\n': e = "\\n"; break;
		case '\r': e = "\\r"; break;
		case '\t': e = "\\t"; break;
		default:
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			esc[6] = '\0';
			e = esc;
		}
		r = buf_append(out, data + run, i - run);
		if (r == 0)
			r = buf_puts(out, e);
		run = i + 1;
	}
	if (r == 0)
		r = buf_append(out, data + run, len - run);
	return r;
}

/* The job's work, on the worker (or inline): the rendering, then, for a
 * message, the line: the skeleton up to its empty data, the data (base64
 * for binary formats, else an escaped JSON string), the rest. */
static void job_run(struct render_job *j)
{
	static const char key[] = "\"data\":\"";
	const struct jprof_format_info *fi = jprof_format_info(j->fmt);
	struct buf data = BUF_INIT;
	const char *at;
	char *b64 = NULL;
	size_t head;
	int r;

	r = export_render(j->st, &j->meta, &j->opt, j->fmt, &data);
	if (r < 0)
		goto out;
	if (!j->skel) {
		j->out = data;
		data = (struct buf)BUF_INIT;
		goto out;
	}
	/* The first "data":"" is the message's own: the members before it
	 * (v, id, ok, type, status, format, encoding) hold fixed words. */
	at = strstr(j->skel, "\"data\":\"\"");
	if (!at || !fi) {
		r = -EINVAL;
		goto out;
	}
	head = (size_t)(at - j->skel) + sizeof(key) - 1;
	if (fi->binary) {
		b64 = jprof_base64_encode(data.data ? data.data : "", data.len);
		r = b64 ? 0 : -ENOMEM;
	}
	if (b64)
		buf_release(&data);  /* what is left of it is b64 */
	if (r == 0)
		r = buf_append(&j->out, j->skel, head);
	if (r == 0)
		r = b64 ? buf_puts(&j->out, b64) : json_escape(&j->out, data.data, data.len);
	if (r == 0)
		r = buf_append(&j->out, j->skel + head, j->skel_len - head);
out:
	free(b64);
	buf_release(&data);
	j->err = r < 0 ? r : 0;
}

/* ---- the worker ---- */

static void *render_main(void *arg)
{
	struct render *rw = arg;
	struct sched_param sp = { 0 };
	const uint64_t one = 1;
	struct render_job *j;
	uint64_t t0, ms;

	pthread_mutex_lock(&rw->mu);
	for (;;) {
		while (!rw->stop && !rw->queue)
			pthread_cond_wait(&rw->wake, &rw->mu);
		if (rw->stop)
			break;
		j = rw->queue;
		rw->queue = j->next;
		if (!rw->queue)
			rw->queue_tail = &rw->queue;
		j->next = NULL;
		rw->running = j;
		pthread_mutex_unlock(&rw->mu);

		/* Rendering is bulk work: it never takes a real-time CPU from
		 * the loop, whatever policy the daemon was started with (or set
		 * to after this thread was made). */
		if (sched_getscheduler(0) != SCHED_OTHER)
			sched_setscheduler(0, SCHED_OTHER, &sp);
		t0 = clock_ns(CLOCK_MONOTONIC);
		job_run(j);
		ms = (clock_ns(CLOCK_MONOTONIC) - t0) / 1000000ull;

		pthread_mutex_lock(&rw->mu);
		if (ms > rw->st.ms_max)
			rw->st.ms_max = ms;
		rw->running = NULL;
		*rw->finished_tail = j;
		rw->finished_tail = &j->next;
		if (write(rw->efd, &one, sizeof(one)) < 0)
			log_err("render: cannot wake the loop: %s", strerror(errno));
	}
	pthread_mutex_unlock(&rw->mu);
	return NULL;
}

/* One finished job per loop round: each may send tens of MiB to its
 * client, and the other clients are served in between. */
static void on_finished(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct render *rw = arg;
	const uint64_t one = 1;
	struct render_job *j;
	uint64_t n;
	bool more;

	if (read(rw->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("render: reading its eventfd: %s", strerror(errno));
	pthread_mutex_lock(&rw->mu);
	j = rw->finished;
	if (j) {
		rw->finished = j->next;
		if (!rw->finished)
			rw->finished_tail = &rw->finished;
		rw->st.queued--;
	}
	more = rw->finished != NULL;
	pthread_mutex_unlock(&rw->mu);
	if (more && write(rw->efd, &one, sizeof(one)) < 0)
		log_err("render: cannot wake the loop: %s", strerror(errno));
	if (!j)
		return;
	if (j->done)
		j->done(j->arg, j->err, &j->out);
	job_free(j);
}

int render_new(struct loop *loop, struct render **out)
{
	struct render *rw = calloc(1, sizeof(*rw));
	sigset_t all, old;
	int r;

	*out = NULL;
	if (!rw)
		return -ENOMEM;
	rw->loop = loop;
	rw->queue_tail = &rw->queue;
	rw->finished_tail = &rw->finished;
	pthread_mutex_init(&rw->mu, NULL);
	pthread_cond_init(&rw->wake, NULL);
	rw->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (rw->efd < 0) {
		r = -errno;
		goto out;
	}
	r = loop_add_io(loop, rw->efd, EPOLLIN, on_finished, rw, &rw->src);
	if (r < 0)
		goto out;
	/* Every signal stays with the loop's signalfd: the thread starts with
	 * all of them blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&rw->thread, NULL, render_main, rw);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		goto out;
	rw->started = true;
	pthread_setname_np(rw->thread, "jprofd-render");
	*out = rw;
out:
	if (r < 0)
		render_free(rw);
	return r;
}

void render_free(struct render *rw)
{
	struct render_job *j;

	if (!rw)
		return;
	pthread_mutex_lock(&rw->mu);
	rw->stop = true;
	if (rw->running)  /* nobody waits for it: it stops at its next stack */
		atomic_store(&rw->running->cancel, true);
	pthread_cond_signal(&rw->wake);
	pthread_mutex_unlock(&rw->mu);
	if (rw->started)
		pthread_join(rw->thread, NULL);
	while ((j = rw->queue)) {
		rw->queue = j->next;
		job_free(j);
	}
	while ((j = rw->finished)) {
		rw->finished = j->next;
		job_free(j);
	}
	loop_remove(rw->src);
	if (rw->efd >= 0)
		close(rw->efd);
	pthread_cond_destroy(&rw->wake);
	pthread_mutex_destroy(&rw->mu);
	free(rw);
}

/* Jobs of uid anywhere: queued, running or finished but not yet answered.
 * Under mu. */
static unsigned uid_jobs_locked(const struct render *rw, uid_t uid)
{
	unsigned n = rw->running && rw->running->uid == uid;

	for (const struct render_job *j = rw->queue; j; j = j->next)
		n += j->uid == uid;
	for (const struct render_job *j = rw->finished; j; j = j->next)
		n += j->uid == uid;
	return n;
}

unsigned render_uid_jobs(const struct render *rw, uid_t uid)
{
	unsigned n;

	if (!rw)
		return 0;
	pthread_mutex_lock((pthread_mutex_t *)&rw->mu);
	n = uid_jobs_locked(rw, uid);
	pthread_mutex_unlock((pthread_mutex_t *)&rw->mu);
	return n;
}

int render_submit(struct render *rw, const struct render_req *req, render_done_fn done, void *arg,
		  struct render_job **out)
{
	struct render_job *j;
	int r;

	if (out)
		*out = NULL;
	if (rw && req->max_per_uid && render_uid_jobs(rw, req->uid) >= req->max_per_uid) {
		pthread_mutex_lock(&rw->mu);
		rw->st.refused++;
		pthread_mutex_unlock(&rw->mu);
		return -EDQUOT;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	r = job_copy_args(j, req->meta, req->opt);
	if (r == 0 && req->msg) {
		j->skel = jprof_json_line(req->msg, &j->skel_len);
		r = j->skel ? 0 : -ENOMEM;
	}
	if (r < 0) {  /* nothing taken */
		job_free(j);
		return r;
	}
	json_object_put(req->msg);
	j->rw = rw;
	j->st = req->st;
	j->fmt = req->fmt;
	j->uid = req->uid;
	j->done = done;
	j->arg = arg;
	if (!rw) {
		job_run(j);
		done(arg, j->err, &j->out);
		job_free(j);
		return 0;
	}
	pthread_mutex_lock(&rw->mu);
	*rw->queue_tail = j;
	rw->queue_tail = &j->next;
	rw->st.jobs++;
	rw->st.queued++;
	pthread_cond_signal(&rw->wake);
	pthread_mutex_unlock(&rw->mu);
	if (out)
		*out = j;
	return 0;
}

void render_cancel(struct render_job *job)
{
	struct render *rw;
	bool queued = false;

	if (!job)
		return;
	rw = job->rw;
	job->done = NULL;
	if (!rw)
		return;
	pthread_mutex_lock(&rw->mu);
	rw->st.cancelled++;
	/* Still queued: out of the queue and freed now. Running: told to stop
	 * at its next stack. Running or finished: freed when the loop takes
	 * it, without a callback. */
	atomic_store(&job->cancel, true);
	for (struct render_job **pj = &rw->queue; *pj; pj = &(*pj)->next) {
		if (*pj == job) {
			*pj = job->next;
			if (!*pj)
				rw->queue_tail = pj;
			rw->st.queued--;
			queued = true;
			break;
		}
	}
	pthread_mutex_unlock(&rw->mu);
	if (queued)
		job_free(job);
}

void render_get_stats(const struct render *rw, struct render_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!rw)
		return;
	pthread_mutex_lock((pthread_mutex_t *)&rw->mu);
	*out = rw->st;
	pthread_mutex_unlock((pthread_mutex_t *)&rw->mu);
}
