#include "samplehist.h"

double samplehist_quantile(const struct samplehist *h, double q)
{
	double rank, cum = 0;

	if (!h->count || !(q > 0 && q <= 1))
		return -1;
	rank = q * (double)h->count;
	for (unsigned i = 0; i < SAMPLEHIST_BUCKETS; i++) {
		double n = (double)h->buckets[i];

		if (!h->buckets[i] || cum + n < rank) {
			cum += n;
			continue;
		}
		if (i == SAMPLEHIST_BUCKETS - 1)
			return i;
		return i + (rank - cum) / n;
	}
	return -1;  /* count exceeds the buckets' sum: not a summed histogram */
}

double samplehist_mean_us(const struct samplehist *h)
{
	return h->count ? (double)h->sum_ns / 1e3 / (double)h->count : -1;
}
