/* Where the JVM's compiled Java code and its interpreter lie, so that the
 * signal handler can say how the leaf frames of a sample run (interpreted,
 * compiled, inlined): JVMTI CompiledMethodLoad / CompiledMethodUnload give
 * each nmethod's method and code range (VMStructs its tier and frame size),
 * DynamicCodeGenerated the interpreter's and the stubs'. Written by JVMTI callbacks (any thread, under a mutex), read
 * by the handler without locks (a seqlock per entry; a read that races a
 * write gives up: the frame stays of unknown type). */
#ifndef JPROF_AGENT_CODEMAP_H
#define JPROF_AGENT_CODEMAP_H

#include <jvmti.h>
#include <stdbool.h>
#include <stdint.h>

/* Reserves the table (anonymous memory, untouched until used). 0 or -errno. */
int codemap_init(void);
/* Adds the capability and fills the callbacks; the caller enables the
 * events codemap_events lists. False if the JVM cannot generate them. */
bool codemap_setup(jvmtiEnv *jvmti, jvmtiEventCallbacks *cb);
extern const jvmtiEvent codemap_events[3];
/* Replays the code that existed before the events were enabled (attach). */
void codemap_replay(jvmtiEnv *jvmti);

/* Async-signal-safe. */
bool codemap_in_interpreter(uintptr_t pc);
/* If pc lies in a live compiled method of method (a jmethodID), how it was
 * compiled: JPRING_TYPE_C1, or JPRING_TYPE_COMPILED (C2, or a tier not
 * known); 0 if not, also when a concurrent change made the answer unsure. */
int codemap_in_method(uint64_t method, uintptr_t pc);
/* The frame size in words (return address included: HotSpot's
 * CodeBlob::_frame_size) of method's compiled code that holds pc; 0 if not
 * known or unsure. */
unsigned codemap_frame_words(uint64_t method, uintptr_t pc);
/* What code pc lies in: a jmethodID (its compiled method's code), a stub
 * kind (enum jpring_stub_kind, below JPRING_STUB_KINDS) for a stub HotSpot
 * announced, or 0: unknown, also when a concurrent change made it unsure. */
uint64_t codemap_leaf(uintptr_t pc);
/* The whole JVM interprets (-Xint): every Java frame is interpreted. */
bool codemap_all_interpreted(void);

#endif
