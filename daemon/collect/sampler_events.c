/* The sampler's perf events: per CPU for the host view, per thread for
 * recordings, and the BPF program attached to them. See sampler.h. */
#include "sampler.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "htab.h"
#include "log.h"
#include "sampler.h"
#include "sampler_int.h"


static int perf_open(pid_t pid, int cpu, uint64_t period_ns)
{
	struct perf_event_attr attr;
	long fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = period_ns;
	/* No sample_type, no callchain, no mmap buffer: everything the BPF
	 * program needs it reads itself, and a consumer of this fd (an agent)
	 * learns nothing about kernel addresses from it. */
	fd = syscall(__NR_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	return (int)fd;
}

static int source_period_ref(struct sampler *s, uint32_t source, uint64_t period_ns)
{
	struct source_period *n;

	for (size_t i = 0; i < s->nperiods; i++) {
		if (s->periods[i].source == source) {
			s->periods[i].refs++;
			s->periods[i].period_ns = period_ns;
			return 0;
		}
	}
	n = realloc(s->periods, (s->nperiods + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	s->periods = n;
	s->periods[s->nperiods++] = (struct source_period){ source, 1, period_ns, 0 };
	return 0;
}

static void source_period_unref(struct sampler *s, uint32_t source)
{
	for (size_t i = 0; i < s->nperiods; i++) {
		if (s->periods[i].source == source) {
			if (--s->periods[i].refs == 0)
				s->periods[i].retire_after = s->drains + 1;
			return;
		}
	}
}

static struct sampler_events *events_new(struct sampler *s, unsigned n)
{
	struct sampler_events *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	ev->owner = s;
	ev->fds = malloc(n * sizeof(int));
	ev->links = calloc(n, sizeof(*ev->links));
	if (!ev->fds || !ev->links) {
		free(ev->fds);
		free(ev->links);
		free(ev);
		return NULL;
	}
	for (unsigned i = 0; i < n; i++)
		ev->fds[i] = -1;
	return ev;
}

/* Opens one event and attaches prog with cookie; on success the link owns fd. */
static int events_attach(struct sampler_events *ev, struct bpf_program *prog, pid_t pid, int cpu,
			 uint64_t period_ns, uint64_t cookie)
{
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
	struct bpf_link *link;
	int fd = perf_open(pid, cpu, period_ns);

	if (fd < 0)
		return fd;
	link = bpf_program__attach_perf_event_opts(prog, fd, &opts);
	if (!link) {
		int r = -errno;

		close(fd);
		return r;
	}
	ev->fds[ev->n] = fd;
	ev->links[ev->n] = link;
	ev->n++;
	return 0;
}

int sampler_cpu_events_open(struct sampler *s, uint32_t source, uint64_t period_ns,
			    uint64_t flags, struct sampler_events **out)
{
	uint64_t cookie = source | (flags & JP_COOKIE_RECORD);

	struct sampler_events *ev = events_new(s, s->ncpus);
	int r = 0;

	*out = NULL;
	if (!ev)
		return -ENOMEM;
	ev->source = source;
	s->cpu_event_sets++;
	r = source_period_ref(s, source, period_ns);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	ev->has_period = true;
	for (unsigned i = 0; i < s->ncpus; i++) {
		r = events_attach(ev, s->skel->progs.sample_cpu, -1, s->cpus[i], period_ns, cookie);
		if (r < 0) {
			log_err("sampler: cpu-clock event on CPU %d: %s", s->cpus[i], strerror(-r));
			sampler_events_close(ev);
			return r;
		}
	}
	*out = ev;
	return 0;
}

int sampler_thread_event_open(struct sampler *s, uint32_t source, pid_t tid, uint64_t period_ns,
			      uint64_t flags, struct sampler_events **out)
{
	struct sampler_events *ev = events_new(s, 1);
	uint64_t cookie = source | JP_COOKIE_THREAD |
			  (flags & (JP_COOKIE_RECORD | JP_COOKIE_SIGNAL));
	int r;

	*out = NULL;
	if (!ev)
		return -ENOMEM;
	ev->is_thread = true;
	ev->source = source;
	s->thread_events++;
	r = source_period_ref(s, source, period_ns);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	ev->has_period = true;
	r = events_attach(ev, s->skel->progs.sample_thread, tid, -1, period_ns, cookie);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	*out = ev;
	return 0;
}

int sampler_events_fd(const struct sampler_events *ev)
{
	return ev && ev->n == 1 ? ev->fds[0] : -1;
}

int sampler_events_count_ns(const struct sampler_events *ev, uint64_t *ns)
{
	uint64_t sum = 0, v;

	for (unsigned i = 0; ev && i < ev->n; i++) {
		/* read_format 0: the count alone, one u64. */
		ssize_t n = read(ev->fds[i], &v, sizeof(v));

		if (n < 0)
			return -errno;
		if (n != (ssize_t)sizeof(v))
			return -EIO;
		sum += v;
	}
	*ns = sum;
	return 0;
}

void sampler_events_close(struct sampler_events *ev)
{
	if (!ev)
		return;
	/* Disable first: an agent holding the same event (passed over
	 * SCM_RIGHTS, same open file) stops getting signals at once.
	 * bpf_link__destroy then also closes the perf event fd. */
	for (unsigned i = 0; i < ev->n; i++) {
		ioctl(ev->fds[i], PERF_EVENT_IOC_DISABLE, 0);
		bpf_link__destroy(ev->links[i]);
	}
	if (ev->has_period)
		source_period_unref(ev->owner, ev->source);
	if (ev->is_thread)
		ev->owner->thread_events--;
	else
		ev->owner->cpu_event_sets--;
	free(ev->fds);
	free(ev->links);
	free(ev);
}

int sampler_events_enable(struct sampler_events *ev, bool on)
{
	int r = 0;

	for (unsigned i = 0; ev && i < ev->n; i++)
		if (ioctl(ev->fds[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) < 0 &&
		    r == 0)
			r = -errno;
	return r;
}

int sampler_watch_tgid(struct sampler *s, uint32_t tgid)
{
	uint32_t one = 1;
	struct watch *w;
	int r;

	for (size_t i = 0; i < s->nwatches; i++) {
		if (s->watches[i].tgid == tgid) {
			s->watches[i].refs++;
			return 0;
		}
	}
	w = realloc(s->watches, (s->nwatches + 1) * sizeof(*w));
	if (!w)
		return -ENOMEM;
	s->watches = w;
	r = bpf_map_update_elem(bpf_map__fd(s->skel->maps.watched), &tgid, &one, BPF_ANY);
	if (r < 0)
		return r;
	s->watches[s->nwatches++] = (struct watch){ .tgid = tgid, .refs = 1 };
	return 0;
}

void sampler_unwatch_tgid(struct sampler *s, uint32_t tgid)
{
	for (size_t i = 0; i < s->nwatches; i++) {
		if (s->watches[i].tgid != tgid)
			continue;
		if (--s->watches[i].refs == 0) {
			bpf_map_delete_elem(bpf_map__fd(s->skel->maps.watched), &tgid);
			s->watches[i] = s->watches[--s->nwatches];
		}
		return;
	}
}

int sampler_cover_tid(struct sampler *s, uint32_t tid, uint32_t source)
{
	int r = bpf_map_update_elem(bpf_map__fd(s->skel->maps.covered), &tid, &source, BPF_NOEXIST);

	/* Already covered by another source: that one keeps feeding the host view. */
	return r == -EEXIST ? 0 : r;
}

void sampler_uncover_tid(struct sampler *s, uint32_t tid, uint32_t source)
{
	int fd = bpf_map__fd(s->skel->maps.covered);
	uint32_t owner;

	if (bpf_map_lookup_elem(fd, &tid, &owner) == 0 && owner == source)
		bpf_map_delete_elem(fd, &tid);
}

int sampler_set_min_gap(struct sampler *s, uint32_t source, uint64_t gap_ns)
{
	int fd = bpf_map__fd(s->skel->maps.source_min_gap);

	if (!gap_ns)
		return bpf_map_delete_elem(fd, &source) < 0 && errno != ENOENT ? -errno : 0;
	return bpf_map_update_elem(fd, &source, &gap_ns, BPF_ANY) < 0 ? -errno : 0;
}

