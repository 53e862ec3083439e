/* What HotSpot's exported VMStructs tables (gHotSpotVMStructs,
 * gHotSpotVMTypes, gHotSpotVMIntConstants) say about the layout of its
 * nmethods, read once, so that the agent can learn facts JVMTI does not
 * give: an nmethod's compilation tier and frame size, and which code blob a
 * pc the agent was never told about is in. A JVM without the tables or a
 * field falls back (tier unknown, no retry from the frame size, leaf not
 * named). */
#ifndef JPROF_AGENT_VMSTRUCTS_H
#define JPROF_AGENT_VMSTRUCTS_H

#include <stdbool.h>
#include <stdint.h>

/* Reads the field offsets; idempotent. 0, or -ENOENT (logged once) when a
 * table or field is missing. Not signal-safe. */
int vmstructs_init(void);

/* The tier (CompLevel) of the nmethod of method (a jmethodID) whose code
 * starts at code_addr: 1-3 C1, 4 C2; 0 when unknown (no VMStructs, an OSR
 * nmethod, the method's code already replaced or freed). Reads only through
 * agent_peek, so a stale pointer gives 0, never a fault. */
int vmstructs_comp_level(uint64_t method, uintptr_t code_addr);

/* Reads where the code cache's heaps lie (CodeCache::_heaps), once, after
 * the JVM made them (the agent's thread at a recording's start). */
void vmstructs_load_heaps(void);

/* True if pc lies in a code blob of that name ("vtable chunks"), found
 * through the heap's segment map (at most 256 steps, every byte read with
 * agent_peek). False when unsure. Async-signal-safe. */
bool vmstructs_in_blob(uintptr_t pc, const char *name);

/* The frame size of the nmethod of method (a jmethodID) whose code starts at
 * code_addr, in words, return address and saved rbp included
 * (CodeBlob::_frame_size); 0 when unknown (as vmstructs_comp_level). */
unsigned vmstructs_frame_words(uint64_t method, uintptr_t code_addr);

/* What the code blob holding pc is, for a pc the code map does not know
 * (vmstructs_blob_kind). The MethodHandle intrinsics are found by their
 * Method's intrinsic id. */
enum vmstructs_blob_kind {
	VMSTRUCTS_BLOB_UNKNOWN = 0,
	VMSTRUCTS_BLOB_VTABLE_CHUNKS,      /* "vtable chunks": vtable and itable stubs */
	VMSTRUCTS_BLOB_INVOKE_BASIC,       /* MethodHandle.invokeBasic's nmethods */
	VMSTRUCTS_BLOB_LINK_TO_VIRTUAL,
	VMSTRUCTS_BLOB_LINK_TO_STATIC,
	VMSTRUCTS_BLOB_LINK_TO_SPECIAL,
	VMSTRUCTS_BLOB_LINK_TO_INTERFACE,
	VMSTRUCTS_BLOB_LINK_TO_NATIVE,
	VMSTRUCTS_BLOB_KINDS,
};

/* Reads the ids of the MethodHandle intrinsics, once (the agent's thread,
 * with vmstructs_load_heaps). */
void vmstructs_load_intrinsics(void);

/* The kind of the blob holding pc, through the segment map as
 * vmstructs_in_blob, plus two words of the nmethod's Method for the
 * intrinsics; VMSTRUCTS_BLOB_UNKNOWN when unsure. Async-signal-safe. */
int vmstructs_blob_kind(uintptr_t pc);

/* ---- the frame walker's fields (javawalk.c) ---- */

/* Offsets (bytes) of the fields javawalk reads; -1 for an optional one not
 * there (blob_code_begin on JDK 17, blob_code_offset on 25). */
struct vmstructs_walk {
	long thread_state, anchor, stack_base, stack_size;
	long anchor_sp, anchor_pc, anchor_fp;
	long method_const, method_flags;
	long const_constants, const_idnum, const_code_size;
	long cp_holder, ik_jmethod_ids;
	long blob_frame_size, blob_code_begin, blob_code_offset;
	long wrapper_anchor;       /* JavaCallWrapper::_anchor */
	long nm_orig_pc_offset;    /* nmethod::_orig_pc_offset (optional) */
	unsigned const_size;       /* sizeof(ConstMethod): its bytecodes follow it */
	uintptr_t call_stub_ra;    /* &StubRoutines::_call_stub_return_address */
};
/* Fills w from the JVM's tables. 0, or -ENOENT with *missing naming the
 * first field not found. Not signal-safe. */
int vmstructs_walk_init(struct vmstructs_walk *w, const char **missing);
/* The start of the code blob (its CodeBlob) that holds pc, from the code
 * heaps' segment maps, or 0 (not in a heap, a free block, heaps not read
 * yet). Async-signal-safe: every byte through agent_peek. (vmstructs.c's
 * own lookup, shared.) */
uintptr_t vmstructs_blob_at(uintptr_t pc);
/* The Method* of the nmethod whose CodeBlob is at blob (vmstructs_blob_at),
 * also one JVMTI has not announced yet; 0 when blob is no nmethod (by its
 * CodeBlob::_name: "nmethod", "native nmethod") or the fields are not known.
 * Async-signal-safe. */
uintptr_t vmstructs_nmethod_method(uintptr_t blob);

#endif
