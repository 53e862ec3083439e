/* The constant pools of a jprofd JFR recording (see jfr.h): threads, stack
 * traces, methods, classes, packages and symbols, filled as the renderer
 * meets samples, then written as one checkpoint event. */
#ifndef JPROF_JFR_POOLS_H
#define JPROF_JFR_POOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "jfr_enc.h"
#include "store.h"

/* A store frame as a JFR stack frame. */
struct jfr_frame_ref {
	uint32_t method;   /* method pool id (>= 1) */
	int32_t line;      /* -1: unknown */
	int32_t bci;       /* bytecode index, -1: unknown */
	uint8_t type;      /* frame type pool id (enum jfr_frame_type) */
	bool done;
};

/* Frame types, by pool id; the first four are the JVM's own. */
enum jfr_frame_type {
	JFR_FRAME_INTERPRETED = 1,
	JFR_FRAME_JIT = 2,
	JFR_FRAME_INLINED = 3,
	JFR_FRAME_NATIVE = 4,
	JFR_FRAME_KERNEL = 5,
	JFR_FRAME_JAVA = 6,      /* Java, execution mode unknown */
	JFR_FRAME_MARKER = 7,    /* jprofd's "[...]" frames */
	JFR_FRAME_TYPES = 7,
};

/* The one thread state a CPU sample has. */
#define JFR_STATE_RUNNABLE 1

struct jfr_pools {
	const struct store *st;
	struct jfr_intern syms;     /* text */
	struct jfr_intern pkgs;     /* u32 name symbol id */
	struct jfr_intern classes;  /* u32 name symbol id, u32 package id (0 = none) */
	struct jfr_intern methods;  /* u32 class id, u32 name id, u32 descriptor id */
	struct jfr_intern threads;  /* u32 pid, u32 tid */
	struct jfr_frame_ref *frames;   /* by store frame id */
	struct jfr_frame_ref no_stack;  /* the frame of a stack without frames */
	uint8_t *stacks;                /* by store stack index: 1 = written */
	size_t npools;                  /* pools written (not empty) */
	struct buf tmp;
};

int jfr_pools_init(struct jfr_pools *p, const struct store *st);
void jfr_pools_release(struct jfr_pools *p);

/* Thread pool id of (pid, tid); -errno. */
int64_t jfr_pools_thread(struct jfr_pools *p, uint32_t pid, uint32_t tid);
/* Stack trace pool id of store stack idx (its frames resolved now);
 * *java tells whether the stack has a Java frame. -errno. */
int64_t jfr_pools_stack(struct jfr_pools *p, uint32_t idx, bool *java);

/* Appends the checkpoint event holding every pool. */
int jfr_pools_write(struct jfr_pools *p, struct buf *out, uint64_t start_ticks);

/* Splits a Java frame name as the JVM join makes it ("pkg.Cls.method",
 * "pkg.Cls.method:42", "pkg.Cls.method(I)V", and for JFR
 * "pkg.Cls.method[(I)V][:42][@17]"): the class in the JVM's internal form
 * ("pkg/Cls") into cls, the method into method, the descriptor into desc
 * ("" when the name has none), the line and the bytecode index (-1 when
 * none). Exposed for the unit tests. */
int jfr_split_java_name(const char *name, struct buf *cls, struct buf *method, struct buf *desc,
			int32_t *line, int32_t *bci);

#endif
