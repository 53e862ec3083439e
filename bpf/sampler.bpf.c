#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "sampler.h"
SEC("perf_event")
int sample_cpu(void *ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
