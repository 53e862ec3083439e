/* javawalk's own parts shared by its files: javawalk.c (the walks from a
 * thread's frame anchor), javawalk_rec.c (the inline records of compiled
 * methods) and javawalk_resume.c (where a failed walk can start again). No
 * other module includes this. */
#ifndef JPROF_AGENT_JAVAWALK_INT_H
#define JPROF_AGENT_JAVAWALK_INT_H

#include "vmstructs.h"

#include <jvmti.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define W sizeof(uintptr_t)

/* HotSpot's JavaThreadState values (VMStructs' int constants on JDK 17 and
 * 25). A thread in Java code cannot be on CPU in a stop-the-world pause
 * (it would be at a safepoint): only these are walked. */
enum {
	JW_IN_NATIVE = 4, JW_IN_NATIVE_TRANS = 5, JW_IN_VM = 6, JW_IN_VM_TRANS = 7,
	JW_BLOCKED = 10, JW_BLOCKED_TRANS = 11,
};
#define JW_ACC_NATIVE 0x0100     /* JVM_ACC_NATIVE in Method::_access_flags */

/* x86_64 interpreter frame (frame_x86.hpp): the saved rbp at fp, the
 * return address above it, the sender's sp (before a c2i adapter extended
 * it) one word below, Method* three, bcp eight (the mirror, the method
 * data, the cache and the locals in between). */
#define JW_INTERP_SENDER_SP (-1)
#define JW_INTERP_METHOD (-3)
#define JW_INTERP_BCP (-8)
#define JW_FRAME_WORDS_MAX 65536 /* larger compiled frames: not believed */
#define JW_INLINE_MAX 32         /* scopes at one pc (MaxInlineLevel 15) */


/* The inline records of one nmethod: the call sites' pcs (offsets from its
 * code, ascending), for each the index of its first scope, then the scopes
 * (innermost first). One malloc'd block, read by the handler only through
 * agent_peek (it may be freed at any time) and under the slot's seq. */
struct jw_scope {
	uint64_t method;
	int32_t bci;
	int32_t reserved;
};
struct jw_rec {
	uint32_t npcs, nscopes;
	size_t bytes;
	/* uint32_t pc_off[npcs]; uint32_t first[npcs + 1]; struct jw_scope scopes[nscopes] */
};

#define JW_SLOTS (1u << 15)
#define JW_PROBES 32
#define JW_ENV_TRIES 64
#define JW_BYTES_MAX (64u << 20) /* all records together; more are not kept */

struct jw_slot {
	uint64_t key;            /* code address; 0 = free; once set, never changes */
	uint32_t seq;            /* odd while a writer changes the slot */
	uint32_t reserved;
	uintptr_t end;           /* code end; 0 = no live nmethod here */
	uintptr_t rec;           /* struct jw_rec *, or 0 */
};

struct jw_state {
	pthread_once_t once;
	bool on;                 /* offsets read and the env offset known; set once */
	bool vm_off;             /* JPROF_AGENT_VM_WALK=0: "not Java" answers stand */
	struct vmstructs_walk o;
	long env_off;            /* JNIEnv - JavaThread */
	unsigned env_tries;
	struct jw_slot *slots;
	pthread_mutex_t lock;
	size_t bytes;            /* of all records kept */
	unsigned long dropped;   /* nmethods whose records were not kept */
};
extern struct jw_state jw;

/* javawalk_rec.c. Writers hold jw.lock. */
struct jw_slot *jw_find(uint64_t key, bool create);
void jw_slot_set(struct jw_slot *s, uintptr_t end, struct jw_rec *rec);
struct jw_rec *jw_rec_build(uintptr_t code, uintptr_t end, const void *compile_info);

#if defined(__x86_64__)
/* The walked thread's stack, [lo, hi). */
struct jw_stack {
	uintptr_t lo, hi;
};

/* Async-signal-safe, all of them. */
bool jw_stack_word(const struct jw_stack *st, uintptr_t addr, uintptr_t *out);
uint64_t jw_method_id(uintptr_t m, uintptr_t *cm_out);
bool jw_is_native(uintptr_t m);
bool jw_blob_code(uintptr_t blob, uintptr_t *code);
int jw_scopes_at(uintptr_t code, uintptr_t pc, struct jw_scope *out, uint32_t *n);
#endif

#endif
