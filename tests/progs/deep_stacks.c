/* CPU-bound workload whose stacks are nearly all distinct and deep: each
 * call chain from work() goes through 64 to 120 of 32 small functions picked
 * by a pseudo-random sequence, then spins about 20 us at the leaf. A
 * recording of it sampled every 100 us holds a distinct stack of ~90 frames
 * per sample: the biggest profile for its length (test_big_outputs.py).
 * Usage: deep_stacks [SECONDS [THREADS]]   (default 30 s, 1 thread) */
#include <pthread.h>
#include <stdint.h>

#include "progs.h"

#define NFUNCS 32

static volatile unsigned long sink;
static double end_time;

typedef void (*step_fn)(unsigned depth, uint64_t rng);
static step_fn steps[NFUNCS];

static uint64_t next_rng(uint64_t x)
{
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

JPROF_FRAME static void leaf(void)
{
	for (unsigned long i = 0; i < 20000; i++)
		sink += i;
}

/* One frame, then the next function the sequence picks. */
#define STEP(n)                                                   \
	JPROF_FRAME static void step##n(unsigned depth, uint64_t rng) \
	{                                                             \
		if (depth)                                                \
			steps[rng % NFUNCS](depth - 1, next_rng(rng));    \
		else                                                      \
			leaf();                                           \
		sink++;                                                   \
	}
STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15)
STEP(16) STEP(17) STEP(18) STEP(19) STEP(20) STEP(21) STEP(22) STEP(23)
STEP(24) STEP(25) STEP(26) STEP(27) STEP(28) STEP(29) STEP(30) STEP(31)

JPROF_FRAME static void *work(void *arg)
{
	uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;

	while (progs_now() < end_time) {
		rng = next_rng(rng);
		steps[rng % NFUNCS](64 + (unsigned)(rng >> 32) % 57, next_rng(rng));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static step_fn all[NFUNCS] = {
		step0, step1, step2, step3, step4, step5, step6, step7, step8, step9, step10,
		step11, step12, step13, step14, step15, step16, step17, step18, step19, step20,
		step21, step22, step23, step24, step25, step26, step27, step28, step29, step30,
		step31,
	};
	double secs = progs_arg_seconds(argc, argv, 1, 30);
	long nthreads = argc > 2 ? strtol(argv[2], NULL, 10) : 1;
	pthread_t t[16];

	if (nthreads < 1 || nthreads > 16)
		return 2;
	for (int i = 0; i < NFUNCS; i++)
		steps[i] = all[i];
	end_time = progs_now() + secs;
	for (long i = 1; i < nthreads; i++)
		if (pthread_create(&t[i], NULL, work, (void *)(uintptr_t)i) != 0)
			return 1;
	work(NULL);
	for (long i = 1; i < nthreads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
