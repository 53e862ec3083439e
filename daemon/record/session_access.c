/* A recording's right to its samples, checked again after it started
 * (session_int.h): an unprivileged requester's samples wait until a check
 * made after their drain passes. */
#include "session_int.h"

#include <errno.h>
#include <string.h>

#include "authz.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "sampler.h"
#include "store.h"

/* ---- the requester's right, checked again ----
 * The kernel checks ptrace access once, at attach; an exec of a setuid or
 * setgid program (or of one with file capabilities) takes the process out
 * of its owner's reach. An unprivileged recording therefore keeps its
 * samples in s->pending until a check of the requester's right made after
 * their drain passes (after every drain, at once after an exec the sampler
 * reports, and at the end); a failed check drops them and ends the
 * recording with status "access_lost". */

enum access { ACCESS_OK, ACCESS_LOST, ACCESS_GONE };

static enum access access_check(struct session *s)
{
	char why[256];
	int r = authz_check_pid(&s->p.peer, s->p.pid, s->proc_start_ns, why, sizeof(why));

	if (r == -ESRCH)
		return ACCESS_GONE;  /* reaped: nothing left to read */
	if (r < 0) {
		log_audit("session %u: uid %u may no longer record pid %d: %s; recording ends",
			  s->id, (unsigned)s->p.peer.uid, (int)s->p.pid, why);
		return ACCESS_LOST;
	}
	return ACCESS_OK;
}

/* A store for the recording's samples; one that keeps each sample's time
 * when the format asked for is time-ordered (up to SESSION_MAX_TIMES). */
struct store *session_store_new(struct session *s)
{
	/* pprof says which addresses (and lines) of a function are hot. */
	struct store_limits lim = { .max_addrs = s->p.format == JPROF_FMT_PPROF ? STORE_PPROF_ADDRS : 0 };
	struct store *st = store_new(&lim, s->types, s->ntypes);

	if (st && s->timed && store_keep_times(st, SESSION_MAX_TIMES) < 0) {
		store_free(st);
		return NULL;
	}
	return st;
}

static int pending_reset(struct session *s, bool keep)
{
	int r = keep ? store_merge(s->store, s->pending, NULL, NULL) : 0;

	if (keep) {
		s->samples += s->pending_samples;
		s->stacks_lost += s->pending_lost;
	}
	s->pending_samples = s->pending_lost = 0;
	store_free(s->pending);
	s->pending = session_store_new(s);
	if (r < 0 || !s->pending) {
		log_err("session %u: cannot keep checked samples: %s", s->id,
			strerror(r < 0 ? -r : ENOMEM));
		return r < 0 ? r : -ENOMEM;
	}
	return 0;
}

static void access_passed(struct session *s)
{
	struct sampler_stats st;

	s->exec_seen = false;
	sampler_get_stats(s->mgr->sampler, &st);
	s->ringbuf_full_mark = st.ringbuf_full;
	if (pending_reset(s, true) < 0)
		s->access_lost = true;  /* cannot hold samples back any more */
}

/* The final check, as the recording ends: the status to report. */
const char *session_access_final(struct session *s, const char *status)
{
	struct sampler_stats st;

	if (!s->pending || s->access_lost)
		return s->access_lost ? "access_lost" : status;
	switch (access_check(s)) {
	case ACCESS_OK:
		access_passed(s);
		return status;
	case ACCESS_LOST:
		s->access_lost = true;
		pending_reset(s, false);
		return "access_lost";
	case ACCESS_GONE:
		break;
	}
	/* Reaped before it could be checked. Its credentials can only have
	 * changed by an exec (its uids and gids were all the requester's, so
	 * setuid() has nothing to switch to): keep the samples unless one was
	 * seen, or the sampler dropped messages and could have lost one. */
	sampler_get_stats(s->mgr->sampler, &st);
	if (s->exec_seen || st.ringbuf_full != s->ringbuf_full_mark) {
		log_info("session %u: pid %d exec'd and exited before its credentials could be read; "
			 "%llu samples since the last check dropped", s->id, (int)s->p.pid,
			 (unsigned long long)s->pending_samples);
		pending_reset(s, false);
	} else {
		pending_reset(s, true);
	}
	return status;
}

/* After a drain or an exec: keeps the held samples, or ends the recording
 * (true: s is freed). */
bool session_access_recheck(struct session *s)
{
	if (!s->pending || s->finishing)
		return false;
	switch (access_check(s)) {
	case ACCESS_OK:
		access_passed(s);
		break;
	case ACCESS_LOST:
		s->access_lost = true;
		pending_reset(s, false);
		session_finish(s, "access_lost");  /* no name wait: frees s */
		return true;
	case ACCESS_GONE:
		break;  /* its pidfd ends the recording; access_final decides */
	}
	return false;
}

static void on_access_timer(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->access_timer);
	s->access_timer = NULL;
	session_access_recheck(s);
}

void session_mgr_on_exec(uint32_t tgid, void *arg)
{
	struct session_mgr *m = arg;

	/* Called inside a drain: only note it and check from the loop. */
	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->p.all || (uint32_t)s->p.pid != tgid || !s->pending || s->finishing)
			continue;
		s->exec_seen = true;
		if (!s->access_timer)
			loop_add_timer(m->loop, 0, 0, on_access_timer, s, &s->access_timer);
	}
}

/* An unprivileged recording: when the process started (so a check never
 * reads a successor's credentials), and a store to hold samples in. */
int session_access_init(struct session *s)
{
	struct sampler_stats st;
	int r;

	if (s->p.peer.privileged || s->p.all)
		return 0;
	r = proc_read_start_boottime(s->p.pid, &s->proc_start_ns);
	if (r == 0 && proc_pidfd_running(s->p.pidfd) != 1)
		r = -ESRCH;  /* the start time may be a successor's */
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	s->pending = session_store_new(s);
	if (!s->pending)
		return -ENOMEM;
	sampler_get_stats(s->mgr->sampler, &st);
	s->ringbuf_full_mark = st.ringbuf_full;
	return 0;
}
