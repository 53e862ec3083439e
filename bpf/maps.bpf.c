/* The sampler's maps and variables that more than one of its BPF files use
 * (bpf/jprof.bpf.h declares them for the others), and its license. */
#define JP_DEFINE_SHARED
#include "jprof.bpf.h"

char LICENSE[] SEC("license") = "GPL";
