/* A process that maps a forged libjvm.so (argv[1], hs_fakejvm.c) and waits
 * to be read (unit/test_hotspot.c), or with argv[2] "spin" spins, to be
 * sampled (integration/test_java_bpf.py). Its name says when the forgery is
 * in place; its stdout the fake's Method* address. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	void *lib = argc < 2 ? NULL : dlopen(argv[1], RTLD_NOW);

	if (!lib) {
		fprintf(stderr, "hs_forged: %s\n", argc < 2 ? "usage: hs_forged LIBJVM" : dlerror());
		return 1;
	}
	/* Where its one Method lives, for the test to name. */
	printf("%p\n", dlsym(lib, "hs_fake_method"));
	fflush(stdout);
	prctl(PR_SET_NAME, "hs-forged-ready");
	if (argc > 2 && !strcmp(argv[2], "spin"))
		for (volatile unsigned long x = 0;; x++)
			;
	for (;;)
		pause();
}
