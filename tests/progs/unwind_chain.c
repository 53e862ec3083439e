/* DWARF-unwinding workload, built -O2 -fomit-frame-pointer like a distro
 * binary (progs.cmake, as a PIE and as a non-PIE executable): no function
 * keeps a frame pointer, so only CFI (.eh_frame) finds the callers.
 *
 * Usage: unwind_chain chain SECONDS
 *            main -> uw_a -> uw_b -> uw_c -> read(2) of /dev/zero, looping
 *        unwind_chain dlopen SECONDS GO_FILE
 *            sleeps until GO_FILE exists, then dlopen()s libunwind_dso.so
 *            (beside the executable) and runs its dso_a -> dso_b -> dso_c ->
 *            read(2) loop: code mapped after the recording started
 *        unwind_chain clobber SECONDS
 *            main -> uw_clobber -> machine code in an anonymous executable
 *            mapping (no CFI, like JIT code) that sets rbp to garbage and
 *            spins: a frame-pointer walk from there must end cleanly */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "progs.h"

#define NOTAIL() __asm__ volatile("" ::: "memory")

static char buf[64 * 1024];
static volatile unsigned long total;
static double end_time;

JPROF_FRAME void uw_c(int fd)
{
	while (progs_now() < end_time) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0)
			exit(1);
		total += (unsigned long)n;
	}
}

JPROF_FRAME void uw_b(int fd)
{
	uw_c(fd);
	NOTAIL();
}

JPROF_FRAME void uw_a(int fd)
{
	uw_b(fd);
	NOTAIL();
}

static void run_dso(double end, const char *go_file)
{
	char path[PATH_MAX], *slash;
	void (*dso_a)(double);
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	void *h;

	while (access(go_file, F_OK) != 0) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		if (progs_now() >= end)
			exit(3);  /* never told to go */
		nanosleep(&ts, NULL);
	}
	if (n <= 0)
		exit(1);
	path[n] = '\0';
	slash = strrchr(path, '/');
	strcpy(slash + 1, "libunwind_dso.so");
	h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "unwind_chain: %s\n", dlerror());
		exit(1);
	}
	dso_a = (void (*)(double))dlsym(h, "dso_a");
	if (!dso_a)
		exit(1);
	dso_a(end);
}

/* movabs $0x4141414141414141, %rbp; 1: jmp 1b */
static const unsigned char spin_code[] = {
	0x48, 0xbd, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0xeb, 0xfe,
};

JPROF_FRAME void uw_clobber(double seconds)
{
	void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (code == MAP_FAILED)
		exit(1);
	memcpy(code, spin_code, sizeof(spin_code));
	alarm((unsigned)seconds + 1);  /* the code never returns: SIGALRM ends it */
	((void (*)(void))code)();
	NOTAIL();
}

int main(int argc, char **argv)
{
	int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);

	if (argc < 3 || fd < 0)
		return 2;
	end_time = progs_now() + progs_arg_seconds(argc, argv, 2, 30);
	if (strcmp(argv[1], "chain") == 0)
		uw_a(fd);
	else if (strcmp(argv[1], "dlopen") == 0 && argc > 3)
		run_dso(end_time, argv[3]);
	else if (strcmp(argv[1], "clobber") == 0)
		uw_clobber(progs_arg_seconds(argc, argv, 2, 30));
	else
		return 2;
	NOTAIL();
	return 0;
}
