/* The BPF programs' own time per sample (bpf/sampler.h, struct
 * jp_sample_hist), summed over CPUs, and its quantiles. Pure: no BPF here,
 * so the arithmetic is unit-tested alone (tests/unit/test_samplehist.c). */
#ifndef JPROF_SAMPLEHIST_H
#define JPROF_SAMPLEHIST_H

#include <stdint.h>

/* Bucket i holds samples of [i, i + 1) microseconds; the last one every
 * sample from SAMPLEHIST_BUCKETS - 1 us up (open-ended). Equal to
 * JP_HIST_BUCKETS (checked in sampler.c). */
#define SAMPLEHIST_BUCKETS 64

struct samplehist {
	uint64_t buckets[SAMPLEHIST_BUCKETS];
	uint64_t count;    /* sum of buckets */
	uint64_t sum_ns;   /* exact total time */
};

/* The q-quantile (0 < q <= 1) in microseconds, interpolated linearly
 * inside its bucket as Prometheus' histogram_quantile() does with the
 * exported buckets, so both tell the same number. A quantile that falls in
 * the open last bucket is that bucket's lower bound (a floor: "at least").
 * Negative when the histogram is empty or q is out of range. */
double samplehist_quantile(const struct samplehist *h, double q);

/* Mean in microseconds, exact (from sum_ns); negative when empty. */
double samplehist_mean_us(const struct samplehist *h);

#endif
