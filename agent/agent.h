/* Shared by the agent's modules: logging and the process-wide JVM handles. */
#ifndef JPROF_AGENT_AGENT_H
#define JPROF_AGENT_AGENT_H

#include <jni.h>
#include <jvmti.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>


extern JavaVM *agent_vm;
extern jvmtiEnv *agent_jvmti;
extern bool agent_verbose;

/* One line to stderr prefixed "jprofagent:". agent_warn is for real
 * problems (callers log them once); agent_debug only with verbose=1. */
void agent_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void agent_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A symbol of libjvm (which may not be loaded RTLD_GLOBAL), or NULL. */
void *agent_jvm_sym(const char *name);

/* Copies len bytes at addr of this process into out without ever faulting
 * (process_vm_readv on ourselves: an unmapped address is an error).
 * Async-signal-safe. */
bool agent_peek(uintptr_t addr, void *out, size_t len);

/* CLOCK_MONOTONIC in ns (the daemon's and BPF's clock); async-signal-safe. */
static inline uint64_t agent_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
