/* The CFI walk of bpf/unwind.bpf.c (unwind_step) in C, over a copy of the
 * top of a user stack rather than the live one: samples of processes that
 * had no tables in BPF when they were taken (bpf: young_copy) are walked
 * with the same rows once the tables exist, so they give the ips and tags
 * (JP_IP_SIGNAL, JP_IP_INTERRUPTED) a BPF walk would have given. */
#ifndef JPROF_UWALK_H
#define JPROF_UWALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "bpf/sampler.h"

/* Row idx of unwind_rows, or NULL when it cannot be read. */
typedef const struct jp_unwind_row *(*uwalk_row_fn)(void *arg, uint32_t idx);

struct uwalk_regs {
	uint64_t ip, sp, bp;
};

struct uwalk_result {
	uint32_t n;           /* frames in ips, leaf first */
	bool root;            /* ended at a frame CFI calls outermost */
	bool short_copy;      /* ended at a read past the end of the copy */
	uint32_t fp_frames;   /* frames found by frame pointers (no CFI there) */
};

/* Walks the stack whose bytes [regs->sp, regs->sp + len) are stack, with the
 * process entry p (its maps, their rows through row). ips holds max
 * frames (at most JP_MAX_STACK_DEPTH are taken). */
void uwalk_walk(const struct jp_unwind_proc *p, uwalk_row_fn row, void *arg,
		const struct uwalk_regs *regs, const uint8_t *stack, size_t len, uint64_t *ips,
		uint32_t max, struct uwalk_result *out);

#endif
