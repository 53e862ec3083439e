#include "hostview.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "sampler.h"
#include "store.h"
#include "symbols.h"
#include <linux/types.h>
#include "bpf/sampler.h"

#define HV_MAX_FRAMES (2 * JP_MAX_STACK_DEPTH + 8)
#define HV_MIN_BYTES ((size_t)1 << 20)
#define HV_LABEL_TTL_NS (2ull * 1000000000ull)     /* cgroups change: re-read this often */
#define HV_LABEL_IDLE_NS (30ull * 1000000000ull)   /* drop cached labels unused this long */
#define HV_LABEL_MAX 32768                          /* cached processes */
#define HV_EXPIRE_NS (2ull * 1000000000ull)        /* how often caches are trimmed */
#define HV_DEAD_GRACE_NS (2ull * 1000000000ull)    /* labels of an exited process: until drained */
#define HV_CGROUP_MAX 1024

struct hv_bucket {
	struct hv_bucket *next;     /* newer */
	uint64_t start_ns;          /* aligned to bucket_ns */
	uint64_t last_ns;           /* latest sample or tick that touched it */
	struct store *st;
	size_t bytes;               /* as of the last rotation (closed buckets) */
};

struct hv_proc {
	pid_t pid;                  /* 0 = empty slot */
	uint64_t fetched_ns;
	uint64_t used_ns;
	char comm[32];
	char *cgroup;               /* one allocation: cgroup, unit, container, each */
	const char *unit;           /* NUL-terminated; "" when unknown */
	const char *container;
};

struct hostview_tap {
	struct hostview *hv;
	struct hostview_tap *next;
	struct store *st;
	struct hostview_filter f;
	char comm[64], unit[256], cgroup[512];
};

struct hostview {
	struct hostview_config cfg;
	struct hostview_tap *taps;
	uint64_t bucket_ns, retention_ns;
	struct symbols *symbols;
	struct hv_bucket *oldest, *newest;
	size_t closed_bytes;        /* sum of bytes of every bucket but the newest */
	uint64_t last_now;
	uint64_t last_expire_ns;
	struct hv_proc *procs;      /* open addressing, power-of-two capacity */
	size_t procs_cap, nprocs;
	struct hostview_stats st;
};

static uint64_t hv_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- label parsing ---- */

int hostview_parse_cgroup(const char *text, char *path, size_t len)
{
	const char *line = text, *best = NULL;
	size_t best_len = 0;
	int best_rank = 0;

	if (!len)
		return -EINVAL;
	path[0] = '\0';
	/* "0::/path" is cgroup v2; on hybrid hosts systemd's own hierarchy
	 * ("N:name=systemd:/path") carries the same path; else any line. */
	while (line && *line) {
		const char *nl = strchr(line, '\n');
		const char *end = nl ? nl : line + strlen(line);
		const char *c1 = memchr(line, ':', (size_t)(end - line));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;

		if (c2) {
			int rank = 1;

			if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1)
				rank = 3;
			else if ((size_t)(c2 - c1 - 1) == strlen("name=systemd") &&
				 !strncmp(c1 + 1, "name=systemd", strlen("name=systemd")))
				rank = 2;
			if (rank > best_rank) {
				best_rank = rank;
				best = c2 + 1;
				best_len = (size_t)(end - c2 - 1);
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	if (!best)
		return -ENOENT;
	if (best_len >= len)
		return -ENAMETOOLONG;
	memcpy(path, best, best_len);
	path[best_len] = '\0';
	return 0;
}

static bool hv_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n > k && !memcmp(s + n - k, suffix, k);
}

int hostview_parse_unit(const char *cgroup, char *unit, size_t len)
{
	const char *p = cgroup, *best = NULL;
	size_t best_len = 0;

	if (!len)
		return -EINVAL;
	unit[0] = '\0';
	/* The deepest .service or .scope component: "/system.slice/nginx.service",
	 * "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service". */
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (hv_ends_with(p, n, ".service") || hv_ends_with(p, n, ".scope")) {
			best = p;
			best_len = n;
		}
		p += n;
		if (*p == '/')
			p++;
	}
	if (!best)
		return -ENOENT;
	if (best_len >= len)
		return -ENAMETOOLONG;
	memcpy(unit, best, best_len);
	unit[best_len] = '\0';
	return 0;
}

int hostview_parse_container(const char *cgroup, char *id, size_t len)
{
	const char *p = cgroup, *found = NULL;

	if (!len)
		return -EINVAL;
	id[0] = '\0';
	/* Docker, containerd, CRI-O and podman name a container's cgroup after
	 * its 64-hex-digit id ("docker-<id>.scope", "/docker/<id>",
	 * "cri-containerd-<id>.scope", "libpod-<id>.scope"); the deepest wins. */
	while (*p) {
		size_t n = 0;

		while (isxdigit((unsigned char)p[n]) && !isupper((unsigned char)p[n]))
			n++;
		if (n == 64)
			found = p;
		p += n ? n : 1;
	}
	if (!found)
		return -ENOENT;
	if (len <= 64)
		return -ENAMETOOLONG;
	memcpy(id, found, 64);
	id[64] = '\0';
	return 0;
}

/* ---- per-process label cache ---- */

static size_t hv_proc_hash(pid_t pid)
{
	return (size_t)(uint32_t)pid * 2654435761u;
}

static struct hv_proc *hv_proc_slot(struct hostview *hv, pid_t pid)
{
	for (size_t i = 0, h = hv_proc_hash(pid); i < hv->procs_cap; i++) {
		struct hv_proc *p = &hv->procs[(h + i) & (hv->procs_cap - 1)];

		if (p->pid == pid || p->pid == 0)
			return p;
	}
	return NULL;
}

static const char hv_empty[3] = "";

static void hv_proc_clear(struct hv_proc *p)
{
	if (p->cgroup != hv_empty)
		free(p->cgroup);
	p->cgroup = (char *)hv_empty;
	p->unit = p->container = hv_empty;
}

/* Rebuilds the table at cap, keeping entries used since keep_after. */
static int hv_procs_rebuild_dead(struct hostview *hv, size_t cap, uint64_t keep_after,
				 uint64_t dead_before);

static int hv_procs_rebuild(struct hostview *hv, size_t cap, uint64_t keep_after)
{
	return hv_procs_rebuild_dead(hv, cap, keep_after, 0);
}

/* keep_after: drop entries unused since then; dead_before: also drop entries
 * unused since then whose process has exited (0: no liveness check). */
static int hv_procs_rebuild_dead(struct hostview *hv, size_t cap, uint64_t keep_after,
				 uint64_t dead_before)
{
	struct hv_proc *old = hv->procs, *n = calloc(cap, sizeof(*n));
	size_t old_cap = hv->procs_cap;

	if (!n)
		return -ENOMEM;
	hv->procs = n;
	hv->procs_cap = cap;
	hv->nprocs = 0;
	for (size_t i = 0; i < old_cap; i++) {
		struct hv_proc *p;

		if (!old[i].pid)
			continue;
		/* Hosts that spawn processes all the time would otherwise keep
		 * the labels of thousands of exited ones for the idle period. */
		if (old[i].used_ns < keep_after ||
		    (old[i].used_ns < dead_before && kill(old[i].pid, 0) < 0 && errno == ESRCH)) {
			hv_proc_clear(&old[i]);
			continue;
		}
		p = hv_proc_slot(hv, old[i].pid);
		*p = old[i];
		hv->nprocs++;
	}
	free(old);
	return 0;
}

static void hv_proc_fill(struct hv_proc *p, pid_t pid, uint64_t now)
{
	char path[64], text[4096], cg[HV_CGROUP_MAX], unit[256], cont[72];
	size_t lc, lu, lk;
	ssize_t n = -1;
	int fd;

	p->pid = pid;
	p->fetched_ns = now;
	if (proc_read_comm(pid, 0, p->comm, sizeof(p->comm)) < 0)
		snprintf(p->comm, sizeof(p->comm), "[exited]");
	hv_proc_clear(p);
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, text, sizeof(text) - 1);
		close(fd);
	}
	if (n <= 0)
		return;
	text[n] = '\0';
	if (hostview_parse_cgroup(text, cg, sizeof(cg)) < 0)
		return;
	if (hostview_parse_unit(cg, unit, sizeof(unit)) < 0)
		unit[0] = '\0';
	if (hostview_parse_container(cg, cont, sizeof(cont)) < 0)
		cont[0] = '\0';
	lc = strlen(cg) + 1;
	lu = strlen(unit) + 1;
	lk = strlen(cont) + 1;
	p->cgroup = malloc(lc + lu + lk);
	if (!p->cgroup) {
		p->cgroup = (char *)hv_empty;
		return;
	}
	memcpy(p->cgroup, cg, lc);
	memcpy(p->cgroup + lc, unit, lu);
	memcpy(p->cgroup + lc + lu, cont, lk);
	p->unit = p->cgroup + lc;
	p->container = p->cgroup + lc + lu;
}

static const struct hv_proc *hv_proc_get(struct hostview *hv, pid_t pid, uint64_t now)
{
	/* Table full: labels read but not kept. */
	static struct hv_proc scratch = { .cgroup = (char *)hv_empty };
	struct hv_proc *p;

	if ((hv->nprocs + 1) * 2 > hv->procs_cap) {
		/* Grow up to the limit; past it, forget processes not seen lately. */
		if (hv->procs_cap < 2 * HV_LABEL_MAX)
			hv_procs_rebuild(hv, hv->procs_cap ? hv->procs_cap * 2 : 256, 0);
		else
			hv_procs_rebuild(hv, hv->procs_cap,
					 now > HV_LABEL_IDLE_NS ? now - HV_LABEL_IDLE_NS : 0);
	}
	p = hv->procs_cap && (hv->nprocs + 1) * 2 <= hv->procs_cap ? hv_proc_slot(hv, pid) : NULL;
	if (p && p->pid == pid) {
		if (now < p->fetched_ns || now - p->fetched_ns > HV_LABEL_TTL_NS)
			hv_proc_fill(p, pid, now);
		p->used_ns = now;
		return p;
	}
	if (!p) {
		p = &scratch;
	} else {
		p->cgroup = (char *)hv_empty;
		hv->nprocs++;
	}
	hv_proc_fill(p, pid, now);
	p->used_ns = now;
	return p;
}

int hostview_labels(struct hostview *hv, pid_t pid, struct hostview_labels *out)
{
	const struct hv_proc *p;

	if (!hv || pid <= 0 || !out)
		return -EINVAL;
	p = hv_proc_get(hv, pid, hv_mono_ns());
	*out = (struct hostview_labels){
		.comm = p->comm, .cgroup = p->cgroup, .container = p->container, .unit = p->unit,
	};
	return 0;
}

/* ---- buckets ---- */

static size_t hv_store_bytes(const struct store *st)
{
	struct store_totals t;

	store_get_totals(st, &t);
	return t.bytes;
}

static void hv_bucket_free(struct hv_bucket *b)
{
	if (!b)
		return;
	store_free(b->st);
	free(b);
}

/* Drops the oldest bucket (never the newest). */
static void hv_evict_oldest(struct hostview *hv)
{
	struct hv_bucket *b = hv->oldest;

	if (!b || b == hv->newest)
		return;
	hv->oldest = b->next;
	hv->closed_bytes -= b->bytes;
	hv->st.buckets--;
	hv_bucket_free(b);
}

static void hv_enforce_cap(struct hostview *hv)
{
	size_t cur = hv->newest ? hv_store_bytes(hv->newest->st) : 0;

	while (hv->oldest && hv->oldest != hv->newest && hv->closed_bytes + cur > hv->cfg.max_bytes) {
		hv_evict_oldest(hv);
		hv->st.evicted_memory++;
	}
}

/* The bucket now_ns falls in, opened if needed; NULL on ENOMEM. */
static struct hv_bucket *hv_current(struct hostview *hv, uint64_t now_ns)
{
	struct store_limits lim = { 0 };
	uint64_t start = now_ns - now_ns % hv->bucket_ns;
	struct hv_bucket *b;

	if (now_ns > hv->last_now)
		hv->last_now = now_ns;
	b = hv->newest;
	if (b && start <= b->start_ns)
		return b;  /* also a late sample of an older window: it joins the newest */
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	/* One bucket alone may use all of the cap; the older ones go first. */
	lim.max_bytes = hv->cfg.max_bytes;
	b->st = store_new(&lim, NULL, 0);
	if (!b->st) {
		free(b);
		return NULL;
	}
	b->start_ns = start;
	b->last_ns = now_ns;
	if (hv->newest) {
		hv->newest->bytes = hv_store_bytes(hv->newest->st);
		hv->closed_bytes += hv->newest->bytes;
		hv->newest->next = b;
	} else {
		hv->oldest = b;
	}
	hv->newest = b;
	hv->st.buckets++;
	hv_enforce_cap(hv);
	return b;
}

static uint32_t hv_intern(struct store *st, enum frame_kind kind, const char *name, const char *module)
{
	int id = store_frame_intern(st, kind, name, module ? module : "");

	return id < 0 ? store_truncated_frame(st) : (uint32_t)id;
}

/* Process name, labels and thread name into the bucket, once per bucket. */
static void hv_name(struct hostview *hv, struct store *st, uint32_t pid, uint32_t tid, uint64_t now)
{
	char name[64];

	if (!store_process_name(st, pid)) {
		const struct hv_proc *p = hv_proc_get(hv, (pid_t)pid, now);
		struct store_labels l = { p->cgroup, p->unit, p->container };

		store_set_process_name(st, pid, p->comm);
		store_set_process_labels(st, pid, &l);
	}
	if (!store_thread_name(st, pid, tid)) {
		if (proc_read_comm((pid_t)pid, (pid_t)tid, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "[exited]");
		store_set_thread_name(st, pid, tid, name);
	}
}

static bool hv_match(const struct store *st, uint32_t pid, const struct hostview_filter *f);

/* One sample, as interned in a bucket's store, copied into a tap's store. */
static void hv_tap_add(struct hostview_tap *t, const struct store *src, uint32_t pid, uint32_t tid,
		       const uint32_t *ids, size_t n, uint64_t count, uint64_t weight_ns)
{
	uint32_t small[HV_MAX_FRAMES], *out = n <= HV_MAX_FRAMES ? small : malloc(n * sizeof(*out));
	struct store_labels l;
	const char *name;

	if (!out || !hv_match(src, pid, &t->f))
		goto done;
	for (size_t i = 0; i < n; i++) {
		const struct store_frame *fr = store_frame_get(src, ids[i]);

		out[i] = fr ? hv_intern(t->st, fr->kind, fr->name, fr->module)
			    : store_truncated_frame(t->st);
	}
	name = store_process_name(src, pid);
	if (name && !store_process_name(t->st, pid)) {
		store_set_process_name(t->st, pid, name);
		if (store_process_labels(src, pid, &l))
			store_set_process_labels(t->st, pid, &l);
	}
	name = store_thread_name(src, pid, tid);
	if (name && !store_thread_name(t->st, pid, tid))
		store_set_thread_name(t->st, pid, tid, name);
	store_add(t->st, &(struct store_sample){ .pid = pid, .tid = tid, .frames = out, .nframes = n,
						   .values = (const uint64_t[]){ count, weight_ns } });
done:
	if (out != small)
		free(out);
}

static void hv_add_ids(struct hostview *hv, struct hv_bucket *b, uint32_t pid, uint32_t tid,
		       const uint32_t *ids, size_t n, uint64_t count, uint64_t weight_ns)
{
	store_add(b->st, &(struct store_sample){ .pid = pid, .tid = tid, .frames = ids, .nframes = n,
						   .values = (const uint64_t[]){ count, weight_ns } });
	for (struct hostview_tap *t = hv->taps; t; t = t->next)
		hv_tap_add(t, b->st, pid, tid, ids, n, count, weight_ns);
	hv->st.samples += count;
	hv_enforce_cap(hv);
}

int hostview_tap_open(struct hostview *hv, const struct hostview_filter *filter,
		      struct hostview_tap **out)
{
	struct hostview_tap *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->st = store_new(NULL, NULL, 0);
	if (!t->st) {
		free(t);
		return -ENOMEM;
	}
	if (filter) {
		t->f.pid = filter->pid;
		if (filter->comm) {
			snprintf(t->comm, sizeof(t->comm), "%s", filter->comm);
			t->f.comm = t->comm;
		}
		if (filter->unit) {
			snprintf(t->unit, sizeof(t->unit), "%s", filter->unit);
			t->f.unit = t->unit;
		}
		if (filter->cgroup) {
			snprintf(t->cgroup, sizeof(t->cgroup), "%s", filter->cgroup);
			t->f.cgroup = t->cgroup;
		}
	}
	t->hv = hv;
	t->next = hv->taps;
	hv->taps = t;
	*out = t;
	return 0;
}

struct store *hostview_tap_close(struct hostview_tap *t)
{
	struct hostview_tap **pp;
	struct store *st;

	if (!t)
		return NULL;
	for (pp = &t->hv->taps; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	st = t->st;
	free(t);
	return st;
}

void hostview_add_sample(struct hostview *hv, const struct sampler_sample *smp, uint64_t weight_ns,
			 uint64_t now_ns)
{
	uint32_t ids[HV_MAX_FRAMES];
	struct hv_bucket *b;
	struct sym_result r;
	size_t n = 0;

	if (!hv || !smp || !smp->tgid || !smp->count)
		return;
	b = hv_current(hv, now_ns);
	if (!b)
		return;
	hv_name(hv, b->st, smp->tgid, smp->tid, now_ns);
	if (smp->ustack_lost)
		ids[n++] = hv_intern(b->st, FRAME_MARKER, "[user_stack_lost]", "");
	for (uint32_t i = smp->nu; i-- > 0 && n < HV_MAX_FRAMES - 1;) {
		/* Every frame but an interrupted user leaf is a return address. */
		bool ret = i > 0 || smp->kernel_mode;

		if (symbols_resolve_user(hv->symbols, (pid_t)smp->tgid, smp->uips[i], ret, &r) < 0)
			continue;
		ids[n++] = hv_intern(b->st, r.kind, r.name, r.module);
	}
	if (smp->kstack_lost && n < HV_MAX_FRAMES)
		ids[n++] = hv_intern(b->st, FRAME_MARKER, "[kernel_stack_lost]", "");
	for (uint32_t i = smp->nk; i-- > 0 && n < HV_MAX_FRAMES;) {
		uint64_t addr = i > 0 ? smp->kips[i] - 1 : smp->kips[i];

		if (symbols_resolve_kernel(hv->symbols, addr, &r) < 0)
			continue;
		ids[n++] = hv_intern(b->st, FRAME_KERNEL, r.name, r.module);
	}
	hv_add_ids(hv, b, smp->tgid, smp->tid, ids, n, smp->count, weight_ns);
}

void hostview_add_frames(struct hostview *hv, uint32_t pid, uint32_t tid, const enum frame_kind *kinds,
			 const char *const *names, const char *const *modules, size_t n,
			 uint64_t count, uint64_t weight_ns, uint64_t now_ns)
{
	uint32_t *ids, small[HV_MAX_FRAMES];
	struct hv_bucket *b;

	if (!hv || !pid || !count)
		return;
	b = hv_current(hv, now_ns);
	if (!b)
		return;
	ids = n <= HV_MAX_FRAMES ? small : malloc(n * sizeof(*ids));
	if (!ids)
		return;
	hv_name(hv, b->st, pid, tid, now_ns);
	for (size_t i = 0; i < n; i++)
		ids[i] = hv_intern(b->st, kinds[i], names[i], modules ? modules[i] : "");
	hv_add_ids(hv, b, pid, tid, ids, n, count, weight_ns);
	if (ids != small)
		free(ids);
}

void hostview_tick(struct hostview *hv, uint64_t now_ns)
{
	if (!hv)
		return;
	if (now_ns > hv->last_now)
		hv->last_now = now_ns;
	/* A bucket is gone once all of it is older than the retention. */
	while (hv->oldest && hv->oldest->start_ns + hv->bucket_ns + hv->retention_ns <= now_ns) {
		if (hv->oldest == hv->newest) {
			hv_bucket_free(hv->oldest);
			hv->oldest = hv->newest = NULL;
			hv->closed_bytes = 0;
			hv->st.buckets = 0;
		} else {
			hv_evict_oldest(hv);
		}
		hv->st.evicted_age++;
	}
	hv_enforce_cap(hv);
	if (now_ns - hv->last_expire_ns >= HV_EXPIRE_NS) {
		uint64_t keep = now_ns > HV_LABEL_IDLE_NS ? now_ns - HV_LABEL_IDLE_NS : 0;
		uint64_t dead = now_ns > HV_DEAD_GRACE_NS ? now_ns - HV_DEAD_GRACE_NS : 0;

		hv->last_expire_ns = now_ns;
		if (hv->procs_cap)
			hv_procs_rebuild_dead(hv, hv->procs_cap, keep, dead);
	}
}

/* ---- queries ---- */

/* cgroup filter: a path prefix ending at a component boundary, or a
 * container id (whole, or a prefix of at least 12 digits as docker prints). */
static bool hv_cgroup_match(const char *want, const struct store_labels *l)
{
	size_t n = strlen(want);

	if (want[0] == '/') {
		if (!strcmp(want, "/"))
			return l->cgroup[0] == '/';
		if (want[n - 1] == '/')
			n--;
		return !strncmp(l->cgroup, want, n) && (l->cgroup[n] == '\0' || l->cgroup[n] == '/');
	}
	return l->container[0] && n >= 12 && !strncmp(l->container, want, n);
}

static bool hv_match(const struct store *st, uint32_t pid, const struct hostview_filter *f)
{
	struct store_labels l;
	const char *comm;

	if (!f)
		return true;
	if (f->pid && (uint32_t)f->pid != pid)
		return false;
	if (f->comm && *f->comm) {
		comm = store_process_name(st, pid);
		if (!comm || strcmp(comm, f->comm))
			return false;
	}
	if ((f->unit && *f->unit) || (f->cgroup && *f->cgroup)) {
		store_process_labels(st, pid, &l);
		if (f->unit && *f->unit && strcmp(l.unit, f->unit))
			return false;
		if (f->cgroup && *f->cgroup && !hv_cgroup_match(f->cgroup, &l))
			return false;
	}
	return true;
}

const char *hostview_group_name(enum hostview_group g)
{
	static const char *const names[] = {
		[HOSTVIEW_GROUP_NONE] = "none", [HOSTVIEW_GROUP_COMM] = "comm",
		[HOSTVIEW_GROUP_PID] = "pid", [HOSTVIEW_GROUP_THREAD] = "thread",
		[HOSTVIEW_GROUP_UNIT] = "unit", [HOSTVIEW_GROUP_CGROUP] = "cgroup",
	};

	return (unsigned)g < sizeof(names) / sizeof(names[0]) ? names[g] : NULL;
}

int hostview_group_parse(const char *name)
{
	for (int g = 0; g < HOSTVIEW_GROUP_COUNT; g++)
		if (!strcmp(name, hostview_group_name((enum hostview_group)g)))
			return g;
	return -EINVAL;
}

/* The root frame a stack gets for group g in out; -1 for none. */
static int64_t hv_group_frame(struct store *out, const struct store *src, enum hostview_group g,
			      uint32_t pid, uint32_t tid)
{
	const char *comm = store_process_name(src, pid);
	struct store_labels l;
	char name[HV_CGROUP_MAX + 64];
	int id;

	if (!comm)
		comm = "[unknown]";
	switch (g) {
	case HOSTVIEW_GROUP_COMM:
		snprintf(name, sizeof(name), "%s", comm);
		break;
	case HOSTVIEW_GROUP_PID:
		snprintf(name, sizeof(name), "[%s pid=%u]", comm, (unsigned)pid);
		break;
	case HOSTVIEW_GROUP_THREAD: {
		const char *t = store_thread_name(src, pid, tid);

		snprintf(name, sizeof(name), "[%s tid=%u]", t ? t : "?", (unsigned)tid);
		break;
	}
	case HOSTVIEW_GROUP_UNIT:
		store_process_labels(src, pid, &l);
		snprintf(name, sizeof(name), "%s", l.unit[0] ? l.unit : "[no unit]");
		break;
	case HOSTVIEW_GROUP_CGROUP:
		store_process_labels(src, pid, &l);
		snprintf(name, sizeof(name), "%s", l.cgroup[0] ? l.cgroup : "[no cgroup]");
		break;
	default:
		return -1;
	}
	id = store_frame_intern(out, FRAME_MARKER, name, "");
	return id < 0 ? (int64_t)store_truncated_frame(out) : id;
}

struct hv_merge {
	const struct hostview_filter *f;
	enum hostview_group g;
};

/* store_merge's filter: the query's filter, and the group frame as prefix. */
static bool hv_merge_stack(const struct store *src, const struct store_stack *s, struct store *dst,
			   uint32_t *prefix, void *arg)
{
	const struct hv_merge *m = arg;
	int64_t gid;

	if (!hv_match(src, s->pid, m->f))
		return false;
	gid = hv_group_frame(dst, src, m->g, s->pid, s->tid);
	if (gid >= 0)
		*prefix = (uint32_t)gid;
	return true;
}

int hostview_query_grouped(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
			   const struct hostview_filter *filter, enum hostview_group group,
			   struct store **out, uint64_t *span_from, uint64_t *span_to)
{
	struct store *st = NULL;
	uint64_t sf = UINT64_MAX, stt = 0;
	bool any = false;
	int r = 0;

	*out = NULL;
	if (!hv || from_ns > to_ns)
		return -EINVAL;
	for (struct hv_bucket *b = hv->oldest; b; b = b->next) {
		uint64_t end = b->start_ns + hv->bucket_ns;

		if (b == hv->newest && hv->last_now < end)
			end = hv->last_now;
		if (b->start_ns > to_ns || end < from_ns)
			continue;
		if (!st) {
			st = store_new(NULL, NULL, 0);
			if (!st) {
				r = -ENOMEM;
				goto out;
			}
		}
		any = true;
		if (b->start_ns < sf)
			sf = b->start_ns;
		if (end > stt)
			stt = end;
		r = store_merge(st, b->st, hv_merge_stack, &(struct hv_merge){ filter, group });
		if (r < 0)
			goto out;
	}
	if (!any) {
		r = -ENOENT;
		goto out;
	}
	if (span_from)
		*span_from = sf > from_ns ? sf : from_ns;
	if (span_to)
		*span_to = stt < to_ns ? stt : to_ns;
	*out = st;
	st = NULL;
out:
	store_free(st);
	return r;
}

int hostview_query(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
		   const struct hostview_filter *filter, struct store **out,
		   uint64_t *span_from, uint64_t *span_to)
{
	return hostview_query_grouped(hv, from_ns, to_ns, filter, HOSTVIEW_GROUP_NONE, out, span_from,
				      span_to);
}

void hostview_get_stats(const struct hostview *hv, struct hostview_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!hv)
		return;
	*out = hv->st;
	out->bytes = hv->closed_bytes + (hv->newest ? hv_store_bytes(hv->newest->st) : 0);
	if (hv->oldest) {
		out->oldest_ns = hv->oldest->start_ns;
		out->newest_ns = hv->last_now;
	}
}

void hostview_get_config(const struct hostview *hv, struct hostview_config *out)
{
	*out = hv->cfg;
}

int hostview_new(const struct hostview_config *cfg, struct symbols *symbols, struct hostview **out)
{
	struct hostview *hv;

	*out = NULL;
	hv = calloc(1, sizeof(*hv));
	if (!hv)
		return -ENOMEM;
	if (cfg)
		hv->cfg = *cfg;
	if (!hv->cfg.bucket_s)
		hv->cfg.bucket_s = 10;
	if (!hv->cfg.retention_s)
		hv->cfg.retention_s = 600;
	if (!hv->cfg.max_bytes)
		hv->cfg.max_bytes = (size_t)64 << 20;
	if (hv->cfg.max_bytes < HV_MIN_BYTES)
		hv->cfg.max_bytes = HV_MIN_BYTES;
	if (hv->cfg.retention_s < hv->cfg.bucket_s)
		hv->cfg.retention_s = hv->cfg.bucket_s;
	hv->bucket_ns = hv->cfg.bucket_s * 1000000000ull;
	hv->retention_ns = hv->cfg.retention_s * 1000000000ull;
	hv->symbols = symbols;
	*out = hv;
	return 0;
}

void hostview_free(struct hostview *hv)
{
	if (!hv)
		return;
	/* Taps belong to their openers, who close them first; be safe anyway. */
	while (hv->taps)
		store_free(hostview_tap_close(hv->taps));
	while (hv->oldest) {
		struct hv_bucket *b = hv->oldest;

		hv->oldest = b->next;
		hv_bucket_free(b);
	}
	for (size_t i = 0; i < hv->procs_cap; i++)
		if (hv->procs[i].pid)
			hv_proc_clear(&hv->procs[i]);
	free(hv->procs);
	free(hv);
}
