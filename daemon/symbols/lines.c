#include "lines.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "elfmeta.h"
#include "elfsym.h"
#include "htab.h"
#include "log.h"


static uint64_t lines_now_ns(void);

/* ---- the cache and the worker -------------------------------------------- */

enum lines_state { LINES_QUEUED, LINES_DONE };

struct lines_addr {
	uint32_t hash;                 /* lines_hash: its key in the index */
	struct lines_addr *qnext;      /* queue */
	enum lines_state state;
	uint8_t bid[ELFMETA_BUILD_ID_MAX];
	size_t bid_len;
	uint64_t file_dev, file_ino;   /* 0, 0: a shared build-id (frame_loc says) */
	uint64_t vaddr;
	/* Where to open the binary (while queued). */
	uint32_t pid;
	uint64_t map_start, map_limit;
	char *path;
	/* The answer, packed (lines_pack): a struct frame_line is 1 KiB,
	 * the strings it holds are tens of bytes. */
	char *packed;
	size_t nframes;
};

struct lines_open {
	struct lines_open *next;
	uint8_t bid[ELFMETA_BUILD_ID_MAX];
	size_t bid_len;
	uint64_t file_dev, file_ino;   /* as in lines_addr: 0, 0 for a shared build-id */
	struct lines_file *file;       /* NULL: tried and failed */
	uint64_t last_used;
};

struct lines_dbgfile {
	struct lines_dbgfile *next;
	uint8_t bid[ELFMETA_BUILD_ID_MAX];
	size_t bid_len;
	char *path;
	bool fresh;                    /* not tried yet by the worker */
};

/* Files that failed are remembered (not retried) up to this many. */
#define LINES_MAX_FAILED 256

struct lines {
	char *proc_root;
	char *debug_root;
	uint64_t mem_cap;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t work;           /* queue not empty, or stop */
	pthread_cond_t done;           /* an address was answered */
	bool stop;
	unsigned waiters;              /* callers waiting: no entry may be freed */
	/* The address cache: entries in addrs[], found by the hash of their
	 * key (build-id, file, vaddr) through index. */
	struct lines_addr **addrs;
	size_t naddrs, addrs_cap;
	struct htab_index index;
	struct lines_addr *qhead, *qtail;
	struct lines_dbgfile *dbgfiles;
	struct lines_stats stats;
	/* Worker only. */
	struct lines_open *open;
	uint64_t tick;
};

static int lines_hex_to_bid(const char *hex, uint8_t *bid, size_t cap)
{
	size_t n = 0;

	for (; hex[0] && hex[1] && n < cap; hex += 2) {
		int hi = hex[0] <= '9' ? hex[0] - '0' : hex[0] - 'a' + 10;
		int lo = hex[1] <= '9' ? hex[1] - '0' : hex[1] - 'a' + 10;

		if (hi < 0 || hi > 15 || lo < 0 || lo > 15)
			return 0;
		bid[n++] = (uint8_t)(hi << 4 | lo);
	}
	return hex[0] ? 0 : (int)n;
}

static uint32_t lines_hash(const uint8_t *bid, size_t len, uint64_t vaddr)
{
	return (uint32_t)htab_mix64(htab_fnv1a(HTAB_FNV_SEED, bid, len) ^ vaddr);
}

static void lines_addr_free(struct lines_addr *a)
{
	if (!a)
		return;
	free(a->path);
	free(a->packed);
	free(a);
}

/* Starts the address cache over (answered entries only: queued ones are
 * the worker's and their waiters'). Under mu. */
static void lines_cache_reset(struct lines *l)
{
	size_t n = 0;

	for (size_t i = 0; i < l->naddrs; i++) {
		struct lines_addr *a = l->addrs[i];

		if (a->state == LINES_DONE)
			lines_addr_free(a);
		else
			l->addrs[n++] = a;
	}
	l->naddrs = n;
	/* Fewer entries than the slots held: no insert here can fail. */
	htab_index_clear(&l->index);
	for (size_t i = 0; i < n; i++)
		htab_index_insert(&l->index, l->addrs[i]->hash, (uint32_t)i);
}

/* Opens the binary behind a mapping through /proc/PID/map_files only: it
 * reaches deleted files and other mount namespaces, and it is the file the
 * process maps. Unlike the symbolizer, no fallback to the path under the
 * process's root: the mapping's device is not known here, so a path that
 * became a FUSE file since could block this thread for good (symbols.c
 * checks the device first). Regular files only. */
static int lines_open_binary(const struct lines *l, const struct lines_addr *a)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%u/map_files/%" PRIx64 "-%" PRIx64, l->proc_root, a->pid,
		 a->map_start, a->map_limit);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	/* A file keyed by itself (a user's, lines_addr): that very file. */
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
			(a->file_ino && (st.st_dev != a->file_dev || st.st_ino != a->file_ino)))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int lines_open_regular(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void lines_open_free(struct lines_open *o)
{
	if (!o)
		return;
	lines_file_free(o->file);
	free(o);
}

/* Drops least recently used files until need more bytes fit under the cap
 * (and failed entries beyond LINES_MAX_FAILED). */
static void lines_evict(struct lines *l, uint64_t need)
{
	for (;;) {
		struct lines_open **pp, **victim = NULL;
		uint64_t mem = 0;
		size_t failed = 0;

		for (pp = &l->open; *pp; pp = &(*pp)->next) {
			mem += lines_file_cost((*pp)->file);
			failed += !(*pp)->file;
			if (!victim || (*pp)->last_used < (*victim)->last_used)
				victim = pp;
		}
		pthread_mutex_lock(&l->mu);
		l->stats.mem_bytes = mem;
		pthread_mutex_unlock(&l->mu);
		if (!victim || (mem + need <= l->mem_cap && failed < LINES_MAX_FAILED))
			return;
		struct lines_open *o = *victim;

		*victim = o->next;
		if (o->file) {
			pthread_mutex_lock(&l->mu);
			l->stats.files_evicted++;
			pthread_mutex_unlock(&l->mu);
		}
		lines_open_free(o);
	}
}

/* Tries one candidate file for a build-id: 0 with o->file set, else -errno. */
static int lines_try(struct lines *l, struct lines_open *o, int fd)
{
	int r;

	if (fd < 0)
		return -ENOENT;
	r = lines_file_open(fd, o->bid, o->bid_len, l->mem_cap, &o->file);
	close(fd);
	return r;
}

static bool lines_dbg_fresh(struct lines *l, const uint8_t *bid, size_t len)
{
	bool fresh = false;

	pthread_mutex_lock(&l->mu);
	for (struct lines_dbgfile *d = l->dbgfiles; d; d = d->next)
		if (d->fresh && d->bid_len == len && !memcmp(d->bid, bid, len)) {
			d->fresh = false;
			fresh = true;
		}
	pthread_mutex_unlock(&l->mu);
	return fresh;
}

/* The open debug info of a's build-id, opening it on first need. */
static struct lines_open *lines_get_file(struct lines *l, const struct lines_addr *a)
{
	struct lines_open *o;
	char path[4096];
	char *dbg = NULL;
	uint64_t t0;
	int r;

	for (struct lines_open **pp = &l->open; (o = *pp); pp = &o->next)
		if (o->bid_len == a->bid_len && !memcmp(o->bid, a->bid, a->bid_len) &&
		    o->file_dev == a->file_dev && o->file_ino == a->file_ino) {
			if (!o->file && lines_dbg_fresh(l, a->bid, a->bid_len)) {
				/* A debuginfod file came since it failed. */
				*pp = o->next;
				lines_open_free(o);
				break;
			}
			o->last_used = ++l->tick;
			return o;
		}
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	memcpy(o->bid, a->bid, a->bid_len);
	o->bid_len = a->bid_len;
	o->file_dev = a->file_dev;
	o->file_ino = a->file_ino;
	o->last_used = ++l->tick;
	t0 = lines_now_ns();
	pthread_mutex_lock(&l->mu);
	for (struct lines_dbgfile *d = l->dbgfiles; d; d = d->next)
		if (d->bid_len == a->bid_len && !memcmp(d->bid, a->bid, a->bid_len))
			dbg = strdup(d->path);
	pthread_mutex_unlock(&l->mu);
	/* The separate debug file (Debian's -dbgsym, or debuginfod's), which
	 * stripped binaries need; then the binary itself (built with -g). */
	r = dbg ? lines_try(l, o, lines_open_regular(dbg)) : -ENOENT;
	if (r < 0 && r != -EFBIG) {
		size_t n = (size_t)snprintf(path, sizeof(path), "%s/.build-id/%02x/", l->debug_root,
					    a->bid[0]);

		for (size_t i = 1; i < a->bid_len && n + 3 < sizeof(path); i++)
			n += (size_t)snprintf(path + n, sizeof(path) - n, "%02x", a->bid[i]);
		if (n + 7 < sizeof(path)) {
			memcpy(path + n, ".debug", 7);
			r = lines_try(l, o, lines_open_regular(path));
		}
	}
	if (r < 0 && r != -EFBIG)
		r = lines_try(l, o, lines_open_binary(l, a));
	pthread_mutex_lock(&l->mu);
	if (r == 0)
		l->stats.files_opened++;
	else if (r == -EFBIG)
		l->stats.files_too_big++;
	else
		l->stats.files_failed++;
	pthread_mutex_unlock(&l->mu);
	if (r == 0)
		log_info("lines: read the debug info of %s (%" PRIu64 " MiB) in %" PRIu64 " ms",
			 a->path ? a->path : "?", lines_file_cost(o->file) >> 20,
			 (lines_now_ns() - t0) / 1000000);
	if (r == -EFBIG)
		log_info("lines: debug info of %s too big for the %" PRIu64 " MiB cap; no lines",
			 a->path ? a->path : "?", l->mem_cap >> 20);
	free(dbg);
	lines_evict(l, lines_file_cost(o->file));
	o->next = l->open;
	l->open = o;
	pthread_mutex_lock(&l->mu);
	l->stats.mem_bytes += lines_file_cost(o->file);
	pthread_mutex_unlock(&l->mu);
	return o;
}

/* n frames as "<line u32><file>\0<function>\0" each; NULL on ENOMEM. */
static char *lines_pack(const struct frame_line *f, size_t n)
{
	size_t size = 0, o = 0;
	char *p;

	for (size_t i = 0; i < n; i++)
		size += sizeof(uint32_t) + strlen(f[i].file) + strlen(f[i].function) + 2;
	p = malloc(size);
	for (size_t i = 0; p && i < n; i++) {
		size_t fl = strlen(f[i].file) + 1, nl = strlen(f[i].function) + 1;

		memcpy(p + o, &f[i].line, sizeof(uint32_t));
		o += sizeof(uint32_t);
		memcpy(p + o, f[i].file, fl);
		o += fl;
		memcpy(p + o, f[i].function, nl);
		o += nl;
	}
	return p;
}

static void lines_unpack(const char *p, size_t n, struct frame_line *out)
{
	for (size_t i = 0; i < n; i++) {
		memcpy(&out[i].line, p, sizeof(uint32_t));
		p += sizeof(uint32_t);
		/* Packed from frame_line fields: each fits. */
		strcpy(out[i].file, p);
		p += strlen(p) + 1;
		strcpy(out[i].function, p);
		p += strlen(p) + 1;
	}
}

static void *lines_main(void *arg)
{
	struct lines *l = arg;
	struct frame_line frames[LINES_MAX_FRAMES];

	pthread_mutex_lock(&l->mu);
	for (;;) {
		struct lines_addr *a;
		struct lines_open *o;
		size_t n = 0;

		while (!l->stop && !l->qhead)
			pthread_cond_wait(&l->work, &l->mu);
		if (l->stop)
			break;
		a = l->qhead;
		l->qhead = a->qnext;
		if (!l->qhead)
			l->qtail = NULL;
		pthread_mutex_unlock(&l->mu);
		/* a stays put while queued: only answered entries are freed. */
		o = lines_get_file(l, a);
		if (o && o->file)
			n = lines_file_lookup(o->file, a->vaddr, frames, LINES_MAX_FRAMES);
		pthread_mutex_lock(&l->mu);
		if (n && !(a->packed = lines_pack(frames, n)))
			n = 0;
		a->nframes = n;
		free(a->path);
		a->path = NULL;
		a->state = LINES_DONE;
		if (n)
			l->stats.resolved++;
		else
			l->stats.unresolved++;
		pthread_cond_broadcast(&l->done);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

int lines_new(const char *proc_root, const char *debug_root, uint64_t mem_cap, struct lines **out)
{
	struct lines *l = calloc(1, sizeof(*l));
	pthread_condattr_t ca;
	int r = -ENOMEM;

	*out = NULL;
	if (!l)
		goto out;
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->work, NULL);
	pthread_cond_init(&l->done, &ca);
	pthread_condattr_destroy(&ca);
	l->proc_root = strdup(proc_root ? proc_root : "/proc");
	l->debug_root = strdup(debug_root ? debug_root : ELFSYM_DEBUG_ROOT);
	l->mem_cap = mem_cap ? mem_cap : LINES_MEM_DEFAULT;
	if (!l->proc_root || !l->debug_root)
		goto out;
	r = -pthread_create(&l->thread, NULL, lines_main, l);
	if (r < 0)
		goto out;
	l->started = true;
	*out = l;
	l = NULL;
out:
	lines_free(l);
	return r;
}

void lines_free(struct lines *l)
{
	if (!l)
		return;
	if (l->started) {
		pthread_mutex_lock(&l->mu);
		l->stop = true;
		pthread_cond_signal(&l->work);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thread, NULL);
	}
	for (size_t i = 0; i < l->naddrs; i++)
		lines_addr_free(l->addrs[i]);
	free(l->addrs);
	htab_index_release(&l->index);
	while (l->open) {
		struct lines_open *o = l->open;

		l->open = o->next;
		lines_open_free(o);
	}
	while (l->dbgfiles) {
		struct lines_dbgfile *d = l->dbgfiles;

		l->dbgfiles = d->next;
		free(d->path);
		free(d);
	}
	free(l->proc_root);
	free(l->debug_root);
	pthread_cond_destroy(&l->work);
	pthread_cond_destroy(&l->done);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int lines_add_debug_file(struct lines *l, const uint8_t *bid, size_t bid_len, const char *path)
{
	struct lines_dbgfile *d;

	if (!l || !bid || !bid_len || bid_len > ELFMETA_BUILD_ID_MAX || !path)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d || !(d->path = strdup(path))) {
		free(d);
		return -ENOMEM;
	}
	memcpy(d->bid, bid, bid_len);
	d->bid_len = bid_len;
	d->fresh = true;
	pthread_mutex_lock(&l->mu);
	d->next = l->dbgfiles;
	l->dbgfiles = d;
	/* Addresses a stripped binary left without lines are asked again. */
	if (!l->waiters)
		lines_cache_reset(l);
	pthread_mutex_unlock(&l->mu);
	return 0;
}

static uint64_t lines_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Room for one more entry in addrs[] (up to LINES_MAX_ADDRS). Under mu. */
static int lines_addrs_grow(struct lines *l)
{
	size_t cap = l->addrs_cap ? l->addrs_cap * 2 : 1024;
	struct lines_addr **n;

	if (cap > LINES_MAX_ADDRS)
		cap = LINES_MAX_ADDRS;
	n = realloc(l->addrs, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	l->addrs = n;
	l->addrs_cap = cap;
	return 0;
}

size_t lines_lookup(struct lines *l, const struct frame_loc *loc, uint64_t deadline_ns,
		    struct frame_line *out, size_t max)
{
	uint8_t bid[ELFMETA_BUILD_ID_MAX];
	struct lines_addr *a = NULL;
	struct htab_probe probe;
	uint64_t dev, ino;
	uint32_t h, i;
	size_t n = 0;
	int len;

	if (!l || !loc || !loc->build_id || !loc->pid)
		return 0;
	len = lines_hex_to_bid(loc->build_id, bid, sizeof(bid));
	if (len <= 0)
		return 0;
	h = lines_hash(bid, (size_t)len, loc->vaddr);
	/* A build-id a user's file claims is that file's alone: its answers
	 * are keyed by the file too, and never serve another file's. */
	dev = loc->build_id_shared ? 0 : loc->file_dev;
	ino = loc->build_id_shared ? 0 : loc->file_ino;
	if (!loc->build_id_shared && !dev && !ino)
		return 0;
	pthread_mutex_lock(&l->mu);
	for (i = htab_index_first(&l->index, h, &probe); i != HTAB_NONE;
	     i = htab_index_next(&l->index, &probe)) {
		a = l->addrs[i];
		if (a->vaddr == loc->vaddr && a->bid_len == (size_t)len &&
		    !memcmp(a->bid, bid, a->bid_len) && a->file_dev == dev && a->file_ino == ino)
			break;
		a = NULL;
	}
	if (!a) {
		if (l->naddrs >= LINES_MAX_ADDRS && !l->waiters)
			lines_cache_reset(l);
		if (l->naddrs >= LINES_MAX_ADDRS)
			goto out;   /* all queued: the worker is far behind */
		if (l->naddrs == l->addrs_cap && lines_addrs_grow(l) < 0)
			goto out;
		a = calloc(1, sizeof(*a));
		if (!a || !(a->path = strdup(loc->path ? loc->path : "")) ||
		    htab_index_insert(&l->index, h, (uint32_t)l->naddrs) < 0) {
			lines_addr_free(a);
			goto out;
		}
		a->hash = h;
		memcpy(a->bid, bid, (size_t)len);
		a->bid_len = (size_t)len;
		a->file_dev = dev;
		a->file_ino = ino;
		a->vaddr = loc->vaddr;
		a->pid = loc->pid;
		a->map_start = loc->map_start;
		a->map_limit = loc->map_limit;
		a->state = LINES_QUEUED;
		l->addrs[l->naddrs++] = a;
		if (l->qtail)
			l->qtail->qnext = a;
		else
			l->qhead = a;
		l->qtail = a;
		l->stats.queued++;
		pthread_cond_signal(&l->work);
	}
	l->waiters++;
	while (a->state == LINES_QUEUED && deadline_ns) {
		struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000ull),
				       .tv_nsec = (long)(deadline_ns % 1000000000ull) };

		if (lines_now_ns() >= deadline_ns ||
		    pthread_cond_timedwait(&l->done, &l->mu, &ts) == ETIMEDOUT) {
			if (a->state == LINES_QUEUED)
				l->stats.timeouts++;
			break;
		}
	}
	l->waiters--;
	if (a->state == LINES_DONE) {
		n = a->nframes < max ? a->nframes : max;
		if (n)
			lines_unpack(a->packed, n, out);
	}
out:
	pthread_mutex_unlock(&l->mu);
	return n;
}

size_t lines_lookup_cb(void *arg, const struct frame_loc *loc, uint64_t deadline_ns,
		       struct frame_line *out, size_t max)
{
	return lines_lookup(arg, loc, deadline_ns, out, max);
}

void lines_get_stats(struct lines *l, struct lines_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	*out = l->stats;
	pthread_mutex_unlock(&l->mu);
}

