/* fp_garbage SECONDS: spins in a function whose frame pointer points at
 * itself, as code built without frame pointers may leave %rbp (it is an
 * ordinary register there). A frame-pointer walk that takes every chain
 * repeats this frame to its depth limit. The function has no CFI (top-level
 * assembly), so a CFI unwinder also falls back to the frame pointer here. */
#include <stdlib.h>
#include <time.h>

#include "progs.h"

void fp_selfloop(long iterations);

__asm__(".text\n"
	".globl fp_selfloop\n"
	".type fp_selfloop, @function\n"
	"fp_selfloop:\n"
	"	push %rbp\n"
	"	sub $16, %rsp\n"
	"	mov %rsp, %rbp\n"           /* rbp -> a pair on the stack: */
	"	mov %rbp, (%rsp)\n"         /* the "caller's" rbp: this pair again */
	"	lea fp_selfloop(%rip), %rax\n"
	"	mov %rax, 8(%rsp)\n"        /* a "return address" in this function */
	"1:	dec %rdi\n"
	"	jnz 1b\n"
	"	add $16, %rsp\n"
	"	pop %rbp\n"
	"	ret\n"
	".size fp_selfloop, .-fp_selfloop\n");

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		fp_selfloop(10000000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
