#include "procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"

#define PROCMAPS_DELETED_SUFFIX " (deleted)"

struct procmaps_cursor {
	const char *p;
	const char *end;
};

static bool procmaps_hexval(char c, unsigned *v)
{
	if (c >= '0' && c <= '9')
		*v = (unsigned)(c - '0');
	else if (c >= 'a' && c <= 'f')
		*v = (unsigned)(c - 'a' + 10);
	else if (c >= 'A' && c <= 'F')
		*v = (unsigned)(c - 'A' + 10);
	else
		return false;
	return true;
}

/* Hex number of at least one digit; fails on overflow rather than wrapping. */
static int procmaps_hex(struct procmaps_cursor *c, uint64_t *out)
{
	uint64_t v = 0;
	unsigned d;
	size_t n = 0;

	while (c->p < c->end && procmaps_hexval(*c->p, &d)) {
		if (v >> 60)
			return -EINVAL;
		v = (v << 4) | d;
		c->p++;
		n++;
	}
	if (n == 0)
		return -EINVAL;
	*out = v;
	return 0;
}

static int procmaps_dec(struct procmaps_cursor *c, uint64_t *out)
{
	uint64_t v = 0;
	size_t n = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		unsigned d = (unsigned)(*c->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
		c->p++;
		n++;
	}
	if (n == 0)
		return -EINVAL;
	*out = v;
	return 0;
}

static int procmaps_expect(struct procmaps_cursor *c, char ch)
{
	if (c->p >= c->end || *c->p != ch)
		return -EINVAL;
	c->p++;
	return 0;
}

/* At least one separator; the kernel pads the inode column with spaces. */
static int procmaps_spaces(struct procmaps_cursor *c)
{
	size_t n = 0;

	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) {
		c->p++;
		n++;
	}
	return n ? 0 : -EINVAL;
}

static int procmaps_perms(struct procmaps_cursor *c, unsigned *perms)
{
	static const char want[4][2] = { { 'r', '-' }, { 'w', '-' }, { 'x', '-' }, { 's', 'p' } };
	static const unsigned bits[4] = { PROCMAPS_READ, PROCMAPS_WRITE, PROCMAPS_EXEC,
					  PROCMAPS_SHARED };

	*perms = 0;
	if (c->end - c->p < 4)
		return -EINVAL;
	for (int i = 0; i < 4; i++) {
		if (c->p[i] == want[i][0])
			*perms |= bits[i];
		else if (c->p[i] != want[i][1])
			return -EINVAL;
	}
	c->p += 4;
	return 0;
}

int procmaps_parse_line(const char *line, size_t len, struct procmaps_entry *out)
{
	struct procmaps_cursor c = { line, line + len };
	uint64_t dev_major, dev_minor;
	const char *path;
	size_t path_len;
	int ret = -EINVAL;

	memset(out, 0, sizeof(*out));
	while (c.end > c.p && (c.end[-1] == '\n' || c.end[-1] == '\r'))
		c.end--;
	if (procmaps_hex(&c, &out->start) < 0 || procmaps_expect(&c, '-') < 0 ||
	    procmaps_hex(&c, &out->end) < 0 || out->end <= out->start ||
	    procmaps_spaces(&c) < 0 || procmaps_perms(&c, &out->perms) < 0 ||
	    procmaps_spaces(&c) < 0 || procmaps_hex(&c, &out->offset) < 0 ||
	    procmaps_spaces(&c) < 0 || procmaps_hex(&c, &dev_major) < 0 ||
	    procmaps_expect(&c, ':') < 0 || procmaps_hex(&c, &dev_minor) < 0 ||
	    procmaps_spaces(&c) < 0 || procmaps_dec(&c, &out->inode) < 0)
		goto out;
	if (dev_major > UINT32_MAX || dev_minor > UINT32_MAX)
		goto out;
	out->dev_major = (unsigned)dev_major;
	out->dev_minor = (unsigned)dev_minor;
	/* Anything after the inode column is the path, spaces included. */
	if (c.p < c.end && procmaps_spaces(&c) < 0)
		goto out;
	path = c.p;
	path_len = (size_t)(c.end - c.p);
	if (memchr(path, '\0', path_len))
		goto out;
	if (path_len > strlen(PROCMAPS_DELETED_SUFFIX) &&
	    memcmp(path + path_len - strlen(PROCMAPS_DELETED_SUFFIX), PROCMAPS_DELETED_SUFFIX,
		   strlen(PROCMAPS_DELETED_SUFFIX)) == 0) {
		out->deleted = true;
		path_len -= strlen(PROCMAPS_DELETED_SUFFIX);
	}
	out->path = strndup(path, path_len);
	if (!out->path) {
		ret = -ENOMEM;
		goto out;
	}
	ret = 0;
out:
	return ret;
}

static int procmaps_cmp(const void *a, const void *b)
{
	const struct procmaps_entry *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return 0;
}

int procmaps_parse(const char *text, size_t len, struct procmaps **out)
{
	struct procmaps *m;
	const char *p = text, *end = text + len;
	size_t cap = 0;
	int ret = -ENOMEM;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		goto out;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		struct procmaps_entry e;
		int r;

		if (eol > p) {
			r = procmaps_parse_line(p, (size_t)(eol - p), &e);
			if (r == -ENOMEM)
				goto out;
			if (r < 0) {
				m->skipped++;
			} else {
				if (m->count == cap) {
					size_t ncap = cap ? cap * 2 : 64;
					struct procmaps_entry *n =
						realloc(m->entries, ncap * sizeof(*n));

					if (!n) {
						free(e.path);
						goto out;
					}
					m->entries = n;
					cap = ncap;
				}
				m->entries[m->count++] = e;
			}
		}
		p = eol + 1;
	}
	/* The kernel emits sorted lines; sort anyway so lookups never depend
	 * on the input being well-formed. */
	if (m->count > 1)
		qsort(m->entries, m->count, sizeof(*m->entries), procmaps_cmp);
	*out = m;
	m = NULL;
	ret = 0;
out:
	procmaps_free(m);
	return ret;
}

int procmaps_read(const char *path, struct procmaps **out)
{
	struct buf b = BUF_INIT;
	int ret;

	*out = NULL;
	ret = buf_read_file(&b, path, 16384);
	if (ret == 0)
		ret = procmaps_parse(b.data ? b.data : "", b.len, out);
	buf_release(&b);
	return ret;
}

const struct procmaps_entry *procmaps_find(const struct procmaps *m, uint64_t addr)
{
	size_t lo = 0, hi;

	if (!m)
		return NULL;
	hi = m->count;
	/* Last entry with start <= addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->entries[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	if (addr < m->entries[lo - 1].end)
		return &m->entries[lo - 1];
	return NULL;
}

void procmaps_free(struct procmaps *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->count; i++)
		free(m->entries[i].path);
	free(m->entries);
	free(m);
}

bool procmaps_is_anon(const struct procmaps_entry *e)
{
	if (e->path[0] == '\0')
		return true;
	return e->path[0] == '[' && strcmp(e->path, "[vdso]") != 0;
}

static size_t procmaps_fuse_parse(FILE *f, unsigned *devs, size_t max)
{
	char line[4096];
	size_t n = 0;

	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		const char *sep = strstr(line, " - ");

		/* "fuse", "fuseblk", "fuse.sshfs"...: the type after " - " */
		if (sep && strncmp(sep + 3, "fuse", 4) == 0 &&
		    sscanf(line, "%*u %*u %u:%u", &maj, &min) == 2)
			devs[n++] = maj << 20 | min;
	}
	return n;
}

size_t procmaps_fuse_devices(const char *mountinfo_path, unsigned *devs, size_t max)
{
	size_t n;
	FILE *f = fopen(mountinfo_path, "re");

	if (!f)
		return 0;
	n = procmaps_fuse_parse(f, devs, max);
	fclose(f);
	return n;
}

void procmaps_fuse_cache_init(struct procmaps_fuse_cache *c)
{
	memset(c, 0, sizeof(*c));
}

void procmaps_fuse_cache_release(struct procmaps_fuse_cache *c)
{
	if (c && c->self)
		fclose(c->self);
	if (c)
		procmaps_fuse_cache_init(c);
}

/* The daemon's own list, read again when its mount table changed since. */
static bool procmaps_fuse_self(struct procmaps_fuse_cache *c)
{
	struct pollfd pfd;
	struct stat sb;

	if (c->self) {
		pfd = (struct pollfd){ .fd = fileno(c->self), .events = POLLPRI };
		if (poll(&pfd, 1, 0) == 0)
			return true;
		/* Changed (or poll failed): read it afresh. */
		fclose(c->self);
		c->self = NULL;
	}
	if (stat("/proc/self/ns/mnt", &sb) < 0)
		return false;
	c->self = fopen("/proc/self/mountinfo", "re");
	if (!c->self)
		return false;
	c->ns_dev = sb.st_dev;
	c->ns_ino = sb.st_ino;
	/* The open fixes the point poll reports changes from: what is read
	 * now is at least as new. */
	c->n = procmaps_fuse_parse(c->self, c->devs, sizeof(c->devs) / sizeof(c->devs[0]));
	return true;
}

size_t procmaps_fuse_devices_of(struct procmaps_fuse_cache *c, const char *proc_root, int pid,
				unsigned *devs, size_t max, bool *fuse_free)
{
	char path[4096];
	struct stat sb;
	size_t n;

	if (fuse_free)
		*fuse_free = false;
	snprintf(path, sizeof(path), "%s/%d/ns/mnt", proc_root, pid);
	if (stat(path, &sb) == 0 && procmaps_fuse_self(c) && sb.st_dev == c->ns_dev &&
	    sb.st_ino == c->ns_ino) {
		n = c->n < max ? c->n : max;
		memcpy(devs, c->devs, n * sizeof(*devs));
		if (fuse_free)
			*fuse_free = c->n == 0;
		return n;
	}
	snprintf(path, sizeof(path), "%s/%d/mountinfo", proc_root, pid);
	return procmaps_fuse_devices(path, devs, max);
}

bool procmaps_on_devices(const struct procmaps_entry *e, const unsigned *devs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (devs[i] == (e->dev_major << 20 | e->dev_minor))
			return true;
	return false;
}
