/* Placeholder: replaced by the sampler work. */
#ifndef JPROF_BPF_SAMPLER_H
#define JPROF_BPF_SAMPLER_H
struct jp_placeholder { __u32 x; };
#endif
