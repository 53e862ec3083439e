/* ring.c's own parts shared by its files: ring.c (the handler and the
 * ring), ring_retry.c (walks started again where AsyncGetCallTrace gave up)
 * and ring_type.c (how each Java frame runs). No other module includes
 * this. Everything here is async-signal-safe unless it says otherwise. */
#ifndef JPROF_AGENT_RING_INT_H
#define JPROF_AGENT_RING_INT_H

#include "jprof_agent.h"

#include <jni.h>
#include <stdbool.h>
#include <stdint.h>

/* AsyncGetCallTrace's interface (HotSpot, not in any JDK header). */
struct asgct_frame {
	jint lineno;           /* bci, or -3 for a native method */
	jmethodID method_id;
};

struct asgct_trace {
	JNIEnv *env;
	jint num_frames;       /* out: frames, or < 0 error */
	struct asgct_frame *frames;
};

typedef void (*asgct_fn)(struct asgct_trace *trace, jint depth, void *ucontext);

extern asgct_fn ring_asgct;

/* How a failed walk's retry ended (JPROF_AGENT_RETRY_STATS). */
enum ring_how {
	RING_HOW_FAILED, RING_HOW_SPILL, RING_HOW_BARRIER, RING_HOW_SP, RING_HOW_SP1,
	RING_HOW_PUSHED, RING_HOW_NOT_ROOT, RING_HOW_OFF, RING_HOW_NATIVE,
	RING_HOW_RESUME,        /* + enum javawalk_how */
	RING_HOW_N = RING_HOW_RESUME + 3,
};

/* Why an unwind of native frames gave up. */
enum {
	RING_NATIVE_NO_SIGNAL_FRAME, RING_NATIVE_NO_JAVA, RING_NATIVE_BAD_CFA, RING_NATIVE_ASGCT,
	RING_NATIVE_STUB_STEPPED,  /* not a failure: walked over a runtime stub */
	RING_NATIVE_N,
};
extern unsigned long ring_native_failed[RING_NATIVE_N];

/* Where a retried walk started: the caller's frame (pc 0: not retried). */
struct ring_from {
	uintptr_t pc, sp, fp;
};

/* ring_retry.c. A word of this thread's stack above the handler's frame. */
bool ring_read_stack(uintptr_t addr, uintptr_t *out);
/* Not in a handler: warms libgcc's unwinder up (its first call takes a lock). */
void ring_unwind_warm(void);
/* AsyncGetCallTrace answered failed (-5, -6) at uc: walks again from a
 * caller's frame (trace's frames from [1] on, or from [0] for a walk from
 * below native frames); the count, or failed. */
int32_t ring_retry(JNIEnv *env, struct asgct_trace *trace, const void *uc, int32_t failed,
		   struct ring_from *from, uint64_t *leaf_tag, unsigned *how);
/* The native frames of the interrupted context uc (libgcc's unwinder past
 * the signal frame), as JPRING_BCI_NATIVE frames into f, leaf first: their
 * count, or failed if none. */
int32_t ring_native_frames(const void *uc, struct jpring_frame *f, int32_t max, int32_t failed);
/* The pseudo-frame or method of the leaf a retried walk stepped over. */
void ring_leaf(struct asgct_frame *leaf, uint64_t tag);

/* ring_type.c: types a walk's frames (jpring_frame.type) from where it
 * started: uc, or from for a retried one (how: enum ring_how); completes a
 * walk that ended early (at most max frames). Returns the frames' count. */
int32_t ring_type_walk(JNIEnv *env, struct jpring_frame *f, int32_t n, int32_t max,
		       const void *uc, const struct ring_from *from, unsigned how);

#endif
