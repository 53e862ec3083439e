/* What test_unwtab.c and test_unwtab_room.c share: real BPF maps of the
 * shapes sampler.bpf.c declares, and children spawned and watched. */
#ifndef JPROF_TEST_UNWTAB_FIXTURE_H
#define JPROF_TEST_UNWTAB_FIXTURE_H

#include <bpf/bpf.h>
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <link.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cfi.h"
#include "check_main.h"
#include "clock.h"
#include "proc.h"
#include "unwtab.h"

#define WAIT_NS (30ull * 1000000000ull)
/* The sweep the tests set (unwtab_set_sweep): the daemon's 5 s would make
 * each wait for an exit's release that long. */
#define FAST_SWEEP_NS (500ull * 1000000ull)

static int rows_fd = -1, procs_fd = -1;
/* The daemon's array is mappable (the worker writes rows with memcpy);
 * the "syscalls" case runs the same tests through bpf() batch calls. */
static bool rows_mappable;

static inline void use_mapping(void)
{
	rows_mappable = true;
}

static inline void make_maps(uint32_t rows)
{
	LIBBPF_OPTS(bpf_map_create_opts, nopre, .map_flags = BPF_F_NO_PREALLOC);
	LIBBPF_OPTS(bpf_map_create_opts, ropts, .map_flags = rows_mappable ? BPF_F_MMAPABLE : 0);

	rows_fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_rows", sizeof(uint32_t),
				 sizeof(struct jp_unwind_row), rows, &ropts);
	procs_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "t_procs", sizeof(uint32_t),
				  sizeof(struct jp_unwind_proc), 64, &nopre);
	ck_assert_int_ge(rows_fd, 0);
	ck_assert_int_ge(procs_fd, 0);
}

static inline void close_maps(void)
{
	close(rows_fd);
	close(procs_fd);
}

static inline const struct jp_unwind_map *map_of(const struct jp_unwind_proc *e, uint64_t addr)
{
	for (uint32_t i = 0; i < e->n && i < JP_UNWIND_MAX_MAPS; i++)
		if (addr >= e->maps[i].start && addr < e->maps[i].end)
			return &e->maps[i];
	return NULL;
}

/* True when /proc/PID/maps names a file containing what. */
static inline bool maps_have(int pid, const char *what)
{
	char path[64], line[4096];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Children by posix_spawn: glibc's runs only the exec in the child (vfork
 * semantics), where a fork() of this multi-threaded test (the unwind
 * worker) under ASan left children that never got to exec (60 s, twice). */
static inline pid_t spawn_argv(char *const argv[])
{
	pid_t p;

	ck_assert_int_eq(posix_spawn(&p, argv[0], NULL, NULL, argv, environ), 0);
	return p;
}

static inline pid_t spawn_sleeper(void)
{
	char *argv[] = { "/bin/sleep", "60", NULL };

	return spawn_argv(argv);
}

static inline pid_t spawn_prog(const char *path, const char *a1, const char *a2)
{
	char *argv[] = { (char *)path, (char *)a1, (char *)a2, NULL };

	return spawn_argv(argv);
}

/* Waits until pid's loader has mapped libc and its own binary (name). */
static inline void wait_mapped(pid_t pid, const char *name)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	/* A deadline, not a count of tries: a loaded machine (ASan beside
	 * other tests) took over 10 s to start a child once. */
	for (int i = 0; i < 3000 && !(maps_have((int)pid, "libc.so") && maps_have((int)pid, name));
	     i++)
		nanosleep(&ts, NULL);
	ck_assert(maps_have((int)pid, "libc.so") && maps_have((int)pid, name));
}

/* Loads pid once its loader has mapped libc and its own binary (name). */
static inline void load_when_mapped(struct unwtab *u, pid_t pid, const char *name)
{
	wait_mapped(pid, name);
	unwtab_request(u, (uint32_t)pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
}

/* Ends pid and waits for the sweep to release its tables. */
static inline void end_and_sweep(struct unwtab *u, pid_t pid)
{
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	uint32_t k = (uint32_t)pid;
	int i;

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	for (i = 0; i < 400 && bpf_map_lookup_elem(procs_fd, &k, e) == 0; i++)
		nanosleep(&ts, NULL);
	ck_assert_int_lt(bpf_map_lookup_elem(procs_fd, &k, e), 0);
	free(e);
	(void)u;
}

/* pid's mapping of its executable: the first executable one naming name. */
static inline uint64_t exe_addr(pid_t pid, const char *name)
{
	char path[64], line[4096];
	unsigned long long start = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, " r-xp ") && strstr(line, name) &&
		    sscanf(line, "%llx-", &start) == 1)
			break;
	fclose(f);
	ck_assert_uint_ne(start, 0);
	return start;
}

/* The rows of pid's mapping of its executable, copied out of BPF. */
static inline struct jp_unwind_row *exe_rows(pid_t pid, const char *name, uint32_t *n)
{
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	uint32_t k = (uint32_t)pid;
	const struct jp_unwind_map *m;
	struct jp_unwind_row *rows;

	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k, e), 0);
	m = map_of(e, exe_addr(pid, name));
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_gt(m->row_count, 0);
	*n = m->row_count;
	rows = calloc(*n, sizeof(*rows));
	for (uint32_t i = 0; i < *n; i++) {
		k = m->row_first + i;
		ck_assert_int_eq(bpf_map_lookup_elem(rows_fd, &k, &rows[i]), 0);
	}
	free(e);
	return rows;
}

#endif
