/* Parser for /proc/PID/maps. Lines the parser does not understand are
 * skipped, so a kernel format change or a corrupt buffer degrades to
 * "fewer mappings", never to a crash. */
#ifndef JPROF_PROCMAPS_H
#define JPROF_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PROCMAPS_READ 0x1u
#define PROCMAPS_WRITE 0x2u
#define PROCMAPS_EXEC 0x4u
#define PROCMAPS_SHARED 0x8u

struct procmaps_entry {
	uint64_t start;
	uint64_t end;        /* exclusive */
	uint64_t offset;     /* file offset of start */
	uint64_t inode;
	unsigned dev_major;
	unsigned dev_minor;
	unsigned perms;      /* PROCMAPS_* */
	bool deleted;        /* path had the " (deleted)" suffix (stripped from path) */
	char *path;          /* "" for anonymous mappings; "[vdso]", "[heap]"... as-is */
};

struct procmaps {
	struct procmaps_entry *entries;  /* sorted by start */
	size_t count;
	size_t skipped;                  /* lines that did not parse */
};

/* Parses one line (without or with its trailing newline; len bytes, need not
 * be NUL-terminated). Returns 0 with *out filled (out->path allocated),
 * -EINVAL for a malformed line, -ENOMEM. */
int procmaps_parse_line(const char *line, size_t len, struct procmaps_entry *out);

/* Parses a whole maps buffer into a new table. Returns 0 or -ENOMEM. */
int procmaps_parse(const char *text, size_t len, struct procmaps **out);

/* Reads and parses a maps file (e.g. "/proc/123/maps"). -errno on failure. */
int procmaps_read(const char *path, struct procmaps **out);

/* The mapping containing addr, or NULL. */
const struct procmaps_entry *procmaps_find(const struct procmaps *m, uint64_t addr);

void procmaps_free(struct procmaps *m);

/* The devices (major << 20 | minor) of the FUSE mounts in a mountinfo file
 * ("/proc/PID/mountinfo"), read without touching those file systems: a
 * FUSE file system is served by a process, which need never answer, so a
 * root daemon must not open or read files on one. Returns how many (at most
 * max); 0 when none or unreadable. */
size_t procmaps_fuse_devices(const char *mountinfo_path, unsigned *devs, size_t max);
/* The same list for process pid (under proc_root, e.g. "/proc"), with the
 * daemon's own mount namespace remembered: most processes share it, and
 * the kernel reports every change of a namespace's mount table by poll
 * (POLLPRI) on its mountinfo, so the daemon's list is read again only after
 * a change rather than once per process. A process in another namespace
 * (or whose namespace cannot be told) has its own mountinfo read. One cache
 * per thread; init/release NULL-safe. fuse_free (may be NULL): set to true
 * when pid shares the daemon's namespace and it has no FUSE mount at all. */
struct procmaps_fuse_cache {
	FILE *self;          /* the daemon's mountinfo, kept open to poll; NULL: not read */
	uint64_t ns_dev, ns_ino;
	unsigned devs[64];
	size_t n;
};
void procmaps_fuse_cache_init(struct procmaps_fuse_cache *c);
void procmaps_fuse_cache_release(struct procmaps_fuse_cache *c);
size_t procmaps_fuse_devices_of(struct procmaps_fuse_cache *c, const char *proc_root, int pid,
				unsigned *devs, size_t max, bool *fuse_free);
/* True when mapping e's file is on one of those devices. */
bool procmaps_on_devices(const struct procmaps_entry *e, const unsigned *devs, size_t n);

/* True for mappings with no backing file: no path, or a pseudo path such as
 * "[heap]", "[stack]", "[anon:name]" (but not "[vdso]"). */
bool procmaps_is_anon(const struct procmaps_entry *e);

#endif
