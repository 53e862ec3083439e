/* The stack builder: the one place a raw sample's addresses become frames.
 * User frames (every frame but an interrupted user leaf is a return
 * address, looked up at addr-1), kernel frames, Java frames from the JVM
 * join, and the marker frames for missing parts ("[user_stack_lost]",
 * "[kernel_stack_lost]", ASGCT error markers), root first. An unwinder
 * (DWARF, an interpreter) plugs in here, once, for every consumer. */
#ifndef JPROF_BUILDER_H
#define JPROF_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "rawsample.h"
#include "sample.h"

struct builder;
struct jvm_join;
struct jvm_sample;
struct procinfo;
struct symbols;

struct builder_opts {
	bool process_root;         /* whole-host recordings: the process name as root frame */
	bool thread_state;         /* the thread's state as the leaf frame ("[sleeping]"...) */
	bool java_unarmed;         /* a JVM recording's plain event: JIT code marks Java lost */
};

int builder_new(struct symbols *sym, struct procinfo *pi, struct builder **out);
void builder_free(struct builder *b);

/* Builds rs into *out; the frames and names live in b until the next build. */
int builder_build(struct builder *b, const struct raw_sample *rs, const struct builder_opts *o,
		  struct built_sample *out);

/* Builds a joined JVM sample of process pid (started at start_ns, as
 * raw_sample.start_ns): Java frames (named by j), then the native frames up
 * to the first JIT code address (when the thread was in Java), then kernel
 * frames. values: ev's types. */
int builder_build_jvm(struct builder *b, uint32_t pid, uint64_t start_ns, const struct jvm_join *j,
		      const struct jvm_sample *js, const struct event_info *ev,
		      const uint64_t *values, struct built_sample *out);

#endif
