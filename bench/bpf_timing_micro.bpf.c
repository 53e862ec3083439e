/* What sample_timed() (bpf/sample.bpf.c) adds to one sample, without the
 * noise of two daemons' stack walks: two socket-filter programs run with
 * BPF_PROG_TEST_RUN (bench/bpf_timing_micro.sh). `bare` does only what
 * both do; `timed` also takes the clock at entry and adds the elapsed time
 * to a per-CPU histogram exactly as the sampler does. The difference of
 * their average durations is the cost per sample. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sampler.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_sample_hist);
} hist SEC(".maps");

/* Keeps the compiler from folding the work away. */
volatile __u64 sink;

SEC("socket")
int bare(struct __sk_buff *skb)
{
	sink += skb->len;
	return 0;
}

SEC("socket")
int timed(struct __sk_buff *skb)
{
	__u64 t0 = bpf_ktime_get_ns(), ns, b;
	__u32 zero = 0;
	struct jp_sample_hist *h;

	sink += skb->len;
	ns = bpf_ktime_get_ns() - t0;
	h = bpf_map_lookup_elem(&hist, &zero);
	if (!h)
		return 0;
	b = ns / JP_HIST_BUCKET_NS;
	if (b > JP_HIST_BUCKETS - 1)
		b = JP_HIST_BUCKETS - 1;
	h->buckets[b]++;
	h->sum_ns += ns;
	return 0;
}
