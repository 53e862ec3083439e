/* Built unwind tables on disk. See unwcache.h. */
#include "unwcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rowcode.h"

#define UNWCACHE_MAGIC "JPUWTAB\n"
#define UNWCACHE_VERSION 1u
#define UNWCACHE_ROOT_ONLY 1u
/* A section name table larger than this is not a real binary's: such a
 * file is built, not cached. */
#define NAMES_MAX (16u << 20)
#define READ_CHUNK (64u << 10)
/* Bytes hashed for one key at most: the CFI of the largest binaries is tens
 * of MiB. A file that names more (many sections called .eh_frame over one
 * sparse gigabyte) is built, not cached: the builder reads only the first. */
#define HASH_MAX (128ull << 20)
/* Entries removed at once when over max_bytes: to this share of it, so
 * that the next writes do not each scan and remove again. */
#define EVICT_TO_PCT 90

/* An entry: this header, payload_len bytes of rows (rowcode.h), then the
 * SHA-256 of both. Native byte order: an entry is only ever read by the
 * daemon that wrote it (its build-id is in the key). */
struct entry_hdr {
	char magic[8];
	uint32_t version;
	uint32_t flags;          /* UNWCACHE_ROOT_ONLY */
	uint32_t uid;            /* the owner of the file it was built from */
	uint32_t nsegs;
	uint64_t nrows;
	uint64_t payload_len;
	uint8_t key[32];
	struct cfi_segment segs[8];
};
_Static_assert(sizeof(struct entry_hdr) == 264, "entry_hdr: no padding");
_Static_assert(sizeof(((struct cfi_table *)0)->segs) == sizeof(((struct entry_hdr *)0)->segs),
	       "entry_hdr: segments as cfi_table's");

struct unwcache {
	int dirfd;
	char *path;
	uint64_t max_bytes;
	uint8_t ident[32];       /* the daemon's build-id, hashed: part of every key */
	unsigned tmp_seq;
	struct unwcache_stats st;
};

/* ---- the directory ---- */

/* A directory on the way to the cache (or the cache itself): no one but
 * root and the daemon may replace what is in it. */
static bool dir_safe(const struct stat *sb, bool last)
{
	bool ours = sb->st_uid == 0 || sb->st_uid == geteuid();

	if (!S_ISDIR(sb->st_mode) || !ours)
		return false;
	if (last)
		return sb->st_uid == geteuid();
	/* /tmp, /var/tmp: others may write there, but not rename or remove
	 * what is root's. */
	return !(sb->st_mode & (S_IWGRP | S_IWOTH)) || (sb->st_mode & S_ISVTX && sb->st_uid == 0);
}

/* Opens dir component by component without following links, checking each
 * and making those missing (0700); the last is made 0700 if it was not.
 * The directory's fd, or -errno with *why. */
static int dir_open(const char *dir, const char **why)
{
	char *copy = strdup(dir), *save = NULL, *name, *next;
	int fd = -1, r;
	struct stat sb;

	*why = "out of memory";
	if (!copy)
		return -ENOMEM;
	*why = "not an absolute path";
	r = -EINVAL;
	if (dir[0] != '/')
		goto out;
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		*why = "cannot open /";
		goto out;
	}
	name = strtok_r(copy, "/", &save);
	while (name) {
		int sub;

		next = strtok_r(NULL, "/", &save);
		*why = "a component is \".\" or \"..\"";
		r = -EINVAL;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			goto out;
		if (fstat(fd, &sb) < 0 || !dir_safe(&sb, false)) {
			*why = "a parent directory is not root's, or others may write to it";
			r = -EPERM;
			goto out;
		}
		if (mkdirat(fd, name, 0700) < 0 && errno != EEXIST) {
			r = -errno;
			*why = "cannot make it";
			goto out;
		}
		sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			r = -errno;
			*why = "cannot open it (a link, or not a directory)";
			goto out;
		}
		close(fd);
		fd = sub;
		name = next;
	}
	r = -EPERM;
	*why = "it is not the daemon's user's";
	if (fstat(fd, &sb) < 0 || !dir_safe(&sb, true))
		goto out;
	if ((sb.st_mode & 07777) != 0700 && fchmod(fd, 0700) < 0) {
		r = -errno;
		*why = "cannot make it 0700";
		goto out;
	}
	r = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	free(copy);
	return r;
}

/* Temporary files of a writer that died before its rename. */
static void remove_stale(struct unwcache *c)
{
	int dfd = dup(c->dirfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *e;

	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	rewinddir(d);  /* the dup shares the offset where the last reading ended */
	while ((e = readdir(d)))
		if (strncmp(e->d_name, ".tmp-", 5) == 0)
			unlinkat(c->dirfd, e->d_name, 0);
	closedir(d);
}

/* The daemon's own build-id (the builder's version): an entry built by
 * another build of jprofd is never found. */
static int self_ident(uint8_t out[32])
{
	uint8_t bid[64];
	unsigned len = 32;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC), n;

	if (fd < 0)
		return -errno;
	n = cfi_read_build_id(fd, bid, sizeof(bid));
	close(fd);
	if (n <= 0)
		return -ENOENT;
	return EVP_Digest(bid, (size_t)n, out, &len, EVP_sha256(), NULL) ? 0 : -ENOMEM;
}

int unwcache_open(const char *dir, uint64_t max_bytes, struct unwcache **out)
{
	struct unwcache *c = NULL;
	const char *why = NULL;
	int r = 0;

	*out = NULL;
	if (!dir || !dir[0] || strcmp(dir, "off") == 0)
		goto out;
	c = calloc(1, sizeof(*c));
	if (!c || !(c->path = strdup(dir))) {
		r = -ENOMEM;
		goto out;
	}
	c->max_bytes = max_bytes ? max_bytes : UNWCACHE_DEFAULT_BYTES;
	c->dirfd = -1;
	r = self_ident(c->ident);
	if (r < 0) {
		log_warn("unwind cache %s: off: the daemon's executable has no build-id", dir);
		r = 0;
		goto out;
	}
	c->dirfd = dir_open(dir, &why);
	if (c->dirfd < 0) {
		log_warn("unwind cache %s: off: %s (%s)", dir, why, strerror(-c->dirfd));
		goto out;
	}
	remove_stale(c);
	*out = c;
	c = NULL;
out:
	unwcache_free(c);
	return r;
}

void unwcache_free(struct unwcache *c)
{
	if (!c)
		return;
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c->path);
	free(c);
}

/* ---- keys ---- */

/* Hashes [off, off + len) of fd, tagged with its place; -EINVAL if the
 * file is shorter (libelf would refuse the section too). */
static int hash_range(EVP_MD_CTX *h, int fd, uint64_t off, uint64_t len, uint8_t *buf,
		      uint64_t *budget)
{
	uint64_t tag[2] = { off, len };

	if (len > *budget)
		return -E2BIG;
	*budget -= len;
	if (!EVP_DigestUpdate(h, tag, sizeof(tag)))
		return -ENOMEM;
	while (len) {
		size_t want = len < READ_CHUNK ? (size_t)len : READ_CHUNK;
		ssize_t got;

		if (off > INT64_MAX - want)
			return -EINVAL;
		got = pread(fd, buf, want, (off_t)off);
		if (got <= 0)
			return -EINVAL;
		if (!EVP_DigestUpdate(h, buf, (size_t)got))
			return -ENOMEM;
		off += (uint64_t)got;
		len -= (uint64_t)got;
	}
	return 0;
}

/* Sections whose content the builder (or libdw through it) reads: matched
 * by prefix on the raw name bytes, so that no reading of the name table,
 * however it treats odd bytes, can find one this does not hash. */
static bool read_by_builder(const char *names, size_t nsize, uint64_t at)
{
	static const char *const pre[] = { ".eh_frame", ".debug_frame" };

	for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++) {
		size_t l = strlen(pre[i]);

		if (at <= nsize && nsize - at >= l && memcmp(names + at, pre[i], l) == 0)
			return true;
	}
	return false;
}

/* Everything of one ELF file cfi_build_fd can read (unwcache.h). */
static int hash_elf(EVP_MD_CTX *h, int fd, uint8_t *buf, uint64_t *budget)
{
	Elf *elf;
	GElf_Ehdr eh;
	size_t nph, nsh, shstr;
	char *names = NULL;
	size_t nsize = 0;
	int r = -EINVAL;

	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || gelf_getclass(elf) != ELFCLASS64 ||
	    !gelf_getehdr(elf, &eh) || elf_getphdrnum(elf, &nph) < 0 ||
	    elf_getshdrnum(elf, &nsh) < 0 || elf_getshdrstrndx(elf, &shstr) < 0)
		goto out;
	r = -ENOMEM;
	if (!EVP_DigestUpdate(h, &eh, sizeof(eh)) || !EVP_DigestUpdate(h, &nph, sizeof(nph)) ||
	    !EVP_DigestUpdate(h, &nsh, sizeof(nsh)) || !EVP_DigestUpdate(h, &shstr, sizeof(shstr)))
		goto out;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		r = -EINVAL;
		if (!gelf_getphdr(elf, (int)i, &ph))
			goto out;
		r = EVP_DigestUpdate(h, &ph, sizeof(ph)) ? 0 : -ENOMEM;
		/* .eh_frame_hdr is read through its segment (elfmeta_ehhdr). */
		if (r == 0 && ph.p_type == PT_GNU_EH_FRAME)
			r = hash_range(h, fd, ph.p_offset, ph.p_filesz, buf, budget);
		if (r < 0)
			goto out;
	}
	for (size_t i = 0; i < nsh; i++) {
		Elf_Scn *scn = elf_getscn(elf, i);
		GElf_Shdr sh;

		r = -EINVAL;
		if (!scn || !gelf_getshdr(scn, &sh))
			goto out;
		r = -ENOMEM;
		if (!EVP_DigestUpdate(h, &sh, sizeof(sh)))
			goto out;
		if (i != shstr || sh.sh_type == SHT_NOBITS)
			continue;
		r = -EINVAL;
		if (sh.sh_size > NAMES_MAX || !(names = malloc(sh.sh_size + 1)))
			goto out;
		nsize = sh.sh_size;
		if (pread(fd, names, nsize, (off_t)sh.sh_offset) != (ssize_t)nsize)
			goto out;
		names[nsize] = '\0';
		r = hash_range(h, fd, sh.sh_offset, sh.sh_size, buf, budget);
		if (r < 0)
			goto out;
	}
	for (size_t i = 0; names && i < nsh; i++) {
		GElf_Shdr sh;

		if (!gelf_getshdr(elf_getscn(elf, i), &sh) || sh.sh_type == SHT_NOBITS ||
		    !read_by_builder(names, nsize, sh.sh_name))
			continue;
		r = hash_range(h, fd, sh.sh_offset, sh.sh_size, buf, budget);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	free(names);
	elf_end(elf);
	return r;
}

int unwcache_key(const struct unwcache *c, int fd, int debug_fd, struct unwcache_key *out)
{
	static const char tag[] = "jprofd unwind table 1";
	EVP_MD_CTX *h = EVP_MD_CTX_new();
	uint8_t *buf = malloc(READ_CHUNK);
	unsigned len = sizeof(out->sha);
	uint8_t dbg = debug_fd >= 0;
	uint64_t budget = HASH_MAX;
	int r = -ENOMEM;

	if (!h || !buf || !EVP_DigestInit_ex(h, EVP_sha256(), NULL) ||
	    !EVP_DigestUpdate(h, tag, sizeof(tag)) || !EVP_DigestUpdate(h, c->ident, sizeof(c->ident)) ||
	    !EVP_DigestUpdate(h, &dbg, 1))
		goto out;
	elf_version(EV_CURRENT);
	r = hash_elf(h, fd, buf, &budget);
	/* The debug file's .debug_frame is read when the file has none: its
	 * parts are hashed whether or not they will be. */
	if (r == 0 && debug_fd >= 0)
		r = hash_elf(h, debug_fd, buf, &budget);
	if (r == 0 && !EVP_DigestFinal_ex(h, out->sha, &len))
		r = -ENOMEM;
out:
	EVP_MD_CTX_free(h);
	free(buf);
	return r;
}

/* ---- entries ---- */

/* "<key>.uwt" for tables of root's files, "<key>-<uid>.uwt" for a user's:
 * an owner's entries are never another's to overwrite. */
static void entry_name(const struct unwcache_key *k, const struct unwcache_src *src, char *buf,
		       size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < sizeof(k->sha); i++)
		o += (size_t)snprintf(buf + o, len - o, "%02x", k->sha[i]);
	if (src->root_only)
		snprintf(buf + o, len - o, ".uwt");
	else
		snprintf(buf + o, len - o, "-%u.uwt", src->uid);
}

static bool sha256(const void *p, size_t n, uint8_t out[32])
{
	unsigned len = 32;

	return EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) == 1;
}

/* Reads and checks one entry file (name: a root file's entry, or a
 * user's); -ENOENT, -EBADMSG. */
static int entry_read(struct unwcache *c, const char *name, bool named_root,
		      const struct unwcache_key *key, const struct unwcache_src *src, size_t max_rows,
		      struct cfi_table **out)
{
	struct entry_hdr hd;
	struct cfi_table *t = NULL;
	uint8_t *buf = NULL, sum[32];
	struct stat sb;
	size_t size;
	int fd, r;

	fd = openat(c->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -EBADMSG;
	r = -EBADMSG;
	/* Written by the daemon, readable by no one else, linked once (not
	 * a hard link to some other file). */
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
	    (sb.st_mode & 077) || sb.st_nlink != 1 || sb.st_size < (off_t)(sizeof(hd) + 32) ||
	    (uint64_t)sb.st_size > c->max_bytes ||
	    (uint64_t)sb.st_size > sizeof(hd) + 32 + (uint64_t)max_rows * ROWCODE_MAX_ROW)
		goto out;
	size = (size_t)sb.st_size;
	buf = malloc(size);
	if (!buf || pread(fd, buf, size, 0) != (ssize_t)size)
		goto out;
	memcpy(&hd, buf, sizeof(hd));
	if (memcmp(hd.magic, UNWCACHE_MAGIC, 8) != 0 || hd.version != UNWCACHE_VERSION ||
	    memcmp(hd.key, key->sha, 32) != 0 || hd.nsegs > 8 || !hd.nrows ||
	    hd.nrows > max_rows || hd.payload_len != size - sizeof(hd) - 32 ||
	    !sha256(buf, size - 32, sum) || memcmp(sum, buf + size - 32, 32) != 0)
		goto out;
	/* Whose file it was built from: a user's entry serves only that
	 * user's files (the name says so too; this is what counts). */
	if (!!(hd.flags & UNWCACHE_ROOT_ONLY) != named_root ||
	    (!named_root && (src->root_only || hd.uid != src->uid)))
		goto out;
	t = calloc(1, sizeof(*t));
	if (!t || !(t->rows = malloc(hd.nrows * sizeof(*t->rows))))
		goto out;
	if (rowcode_decode(buf + sizeof(hd), hd.payload_len, t->rows, hd.nrows) < 0)
		goto out;
	t->n = hd.nrows;
	t->nsegs = hd.nsegs;
	memcpy(t->segs, hd.segs, sizeof(t->segs));
	/* Used now: the last to be removed for room. */
	futimens(fd, NULL);
	*out = t;
	t = NULL;
	r = 0;
out:
	cfi_table_free(t);
	free(buf);
	close(fd);
	return r;
}

int unwcache_get(struct unwcache *c, const struct unwcache_key *key, const struct unwcache_src *src,
		 size_t max_rows, struct cfi_table **out)
{
	struct unwcache_src root = { .uid = 0, .root_only = true };
	char name[96];
	int r;

	*out = NULL;
	/* A root file's entry serves every file of the same key; a user's
	 * file's own entry, only its owner's. */
	entry_name(key, &root, name, sizeof(name));
	r = entry_read(c, name, true, key, src, max_rows, out);
	if (r == -ENOENT && !src->root_only) {
		entry_name(key, src, name, sizeof(name));
		r = entry_read(c, name, false, key, src, max_rows, out);
	}
	if (r == -EBADMSG) {
		c->st.rejected++;
		log_info("unwind cache: entry %s refused (corrupt, truncated or not the daemon's): "
			 "removed, built again", name);
		unlinkat(c->dirfd, name, 0);
	}
	if (r == 0)
		c->st.hits++;
	else
		c->st.misses++;
	return r;
}

struct dent {
	char name[96];
	uint64_t size;
	struct timespec mtime;
};

static int dent_cmp(const void *a, const void *b)
{
	const struct dent *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

/* Sums the entries; past max_bytes, removes the least recently used down
 * to EVICT_TO_PCT of it. */
static void evict(struct unwcache *c)
{
	int dfd = dup(c->dirfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dent *v = NULL, *nv;
	size_t n = 0, cap = 0, removed = 0;
	uint64_t total = 0;
	struct dirent *e;
	struct stat sb;

	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	rewinddir(d);  /* the dup shares the offset where the last reading ended */
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l < 5 || l >= sizeof(v->name) || strcmp(e->d_name + l - 4, ".uwt") != 0 ||
		    fstatat(c->dirfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				break;
			v = nv;
		}
		memcpy(v[n].name, e->d_name, l + 1);
		v[n].size = (uint64_t)sb.st_size;
		v[n].mtime = sb.st_mtim;
		total += v[n++].size;
	}
	closedir(d);
	if (total > c->max_bytes) {
		qsort(v, n, sizeof(*v), dent_cmp);
		for (size_t i = 0; i < n && total > c->max_bytes / 100 * EVICT_TO_PCT; i++) {
			if (unlinkat(c->dirfd, v[i].name, 0) < 0)
				continue;
			total -= v[i].size;
			c->st.evicted++;
			removed++;
		}
	}
	c->st.bytes = total;
	c->st.files = n - removed;
	free(v);
}

int unwcache_put(struct unwcache *c, const struct unwcache_key *key, const struct unwcache_src *src,
		 const struct cfi_table *t)
{
	struct entry_hdr hd = { .magic = UNWCACHE_MAGIC, .version = UNWCACHE_VERSION };
	char name[96], tmp[64];
	uint8_t *payload = NULL, sum[32];
	size_t plen = 0;
	EVP_MD_CTX *h = NULL;
	unsigned slen = sizeof(sum);
	int fd = -1, r = -ENOMEM;

	tmp[0] = '\0';
	if (!t->n || t->nsegs > 8)
		return -EINVAL;
	hd.flags = src->root_only ? UNWCACHE_ROOT_ONLY : 0;
	hd.uid = src->root_only ? 0 : src->uid;
	hd.nsegs = (uint32_t)t->nsegs;
	hd.nrows = t->n;
	memcpy(hd.key, key->sha, sizeof(hd.key));
	memcpy(hd.segs, t->segs, sizeof(hd.segs));
	payload = rowcode_encode(t->rows, t->n, &plen);
	h = EVP_MD_CTX_new();
	if (!payload || !h)
		goto out;
	hd.payload_len = plen;
	if (sizeof(hd) + plen + 32 > c->max_bytes) {
		r = -EFBIG;
		goto out;
	}
	if (!EVP_DigestInit_ex(h, EVP_sha256(), NULL) || !EVP_DigestUpdate(h, &hd, sizeof(hd)) ||
	    !EVP_DigestUpdate(h, payload, plen) || !EVP_DigestFinal_ex(h, sum, &slen))
		goto out;
	snprintf(tmp, sizeof(tmp), ".tmp-%d-%u", (int)getpid(), c->tmp_seq++);
	fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		tmp[0] = '\0';
		goto out;
	}
	/* A partial write (a full disk) leaves an entry its checksum
	 * refuses; it is removed here rather than renamed. */
	if (write(fd, &hd, sizeof(hd)) != (ssize_t)sizeof(hd) ||
	    write(fd, payload, plen) != (ssize_t)plen || write(fd, sum, 32) != 32) {
		r = -EIO;
		goto out;
	}
	entry_name(key, src, name, sizeof(name));
	if (renameat(c->dirfd, tmp, c->dirfd, name) < 0) {
		r = -errno;
		goto out;
	}
	tmp[0] = '\0';
	c->st.writes++;
	evict(c);
	r = 0;
out:
	if (r < 0)
		log_debug("unwind cache %s: cannot write an entry: %s", c->path, strerror(-r));
	if (fd >= 0)
		close(fd);
	if (tmp[0])
		unlinkat(c->dirfd, tmp, 0);
	EVP_MD_CTX_free(h);
	free(payload);
	return r;
}

void unwcache_get_stats(const struct unwcache *c, struct unwcache_stats *out)
{
	*out = c ? c->st : (struct unwcache_stats){ 0 };
}
