/* Reading a HotSpot JVM from outside (issue 30, step 1): its VMStructs
 * tables, Method* names and code heap, read with process_vm_readv from the
 * root daemon. Every byte read is the JVM's (any user's, possibly forged):
 * every read is bounded and checked, a table that does not look like
 * HotSpot's is an error, never a loop or an unbounded allocation. Nothing
 * is ever written to the process and it is never stopped.
 *
 * One struct hs per process; not thread-safe (one owner). */
#ifndef JPROF_HS_H
#define JPROF_HS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Field offsets and addresses read from VMStructs. An offset is -1 (an
 * address 0) when the JVM does not export it; hs_offsets_missing() names
 * the ones that are. Where a JDK renamed or moved a field, the one found is
 * stored under the name used here (docs/jvm.md lists which JDK has which). */
struct hs_offsets {
	/* Method* -> name */
	int32_t method_const;        /* Method::_constMethod */
	int32_t method_code;         /* Method::_code (nmethod*) */
	int32_t cmethod_constants;   /* ConstMethod::_constants */
	int32_t cmethod_name_index;  /* ConstMethod::_name_index (u2) */
	int32_t cmethod_sig_index;   /* ConstMethod::_signature_index (u2) */
	int32_t cmethod_size;        /* sizeof(ConstMethod): the bytecodes follow */
	int32_t cpool_holder;        /* ConstantPool::_pool_holder */
	int32_t cpool_length;        /* ConstantPool::_length (int) */
	int32_t cpool_size;          /* sizeof(ConstantPool): the slots follow */
	int32_t klass_name;          /* Klass::_name (Symbol*) */
	int32_t symbol_length;       /* Symbol::_length (u2) */
	int32_t symbol_body;         /* Symbol::_body */
	/* The code heap */
	uint64_t codecache_heaps;    /* &CodeCache::_heaps (GrowableArray<CodeHeap*>*) */
	int32_t garray_len;          /* GrowableArrayBase::_len */
	int32_t garray_data;         /* GrowableArray<int>::_data */
	int32_t heap_memory;         /* CodeHeap::_memory (VirtualSpace) */
	int32_t heap_segmap;         /* CodeHeap::_segmap (VirtualSpace) */
	int32_t heap_log2_seg;       /* CodeHeap::_log2_segment_size (int) */
	int32_t vspace_low;          /* VirtualSpace::_low */
	int32_t vspace_high;         /* VirtualSpace::_high */
	int32_t hblock_length;       /* HeapBlock::Header::_length (segments) */
	int32_t hblock_length_size;  /* its width: 8 (size_t, JDK 17), 4 (uint32_t, 25) */
	int32_t hblock_used;         /* HeapBlock::Header::_used (bool) */
	int32_t hblock_size;         /* sizeof(HeapBlock): the blob follows */
	int32_t blob_name;           /* CodeBlob::_name (const char*) */
	int32_t blob_size;           /* CodeBlob::_size (int, bytes) */
	int32_t blob_frame_size;     /* CodeBlob::_frame_size (int, words) */
	int32_t blob_kind;           /* CodeBlob::_kind (u1; JDK 21+), else -1 */
	int32_t blob_code_begin;     /* CodeBlob::_code_begin (pointer; JDK 17) */
	int32_t blob_code_offset;    /* CodeBlob::_code_offset (int; JDK 21+) */
	int32_t nmethod_method;      /* nmethod::_method (CompiledMethod::_method on 17) */
	int32_t nmethod_comp_level;  /* nmethod::_comp_level */
	/* Threads and frames, for the BPF walk */
	int32_t thread_anchor;       /* JavaThread::_anchor (JavaFrameAnchor) */
	int32_t anchor_sp;           /* JavaFrameAnchor::_last_Java_sp */
	int32_t anchor_pc;           /* JavaFrameAnchor::_last_Java_pc */
	int32_t anchor_fp;           /* JavaFrameAnchor::_last_Java_fp */
	int32_t thread_osthread;     /* JavaThread::_osthread */
	int32_t osthread_tid;        /* OSThread::_thread_id */
	/* Interpreter frame layout, in words from fp (gHotSpotVMIntConstants;
	 * INT32_MIN when not exported: JDK 17 and 25 export sender_sp only,
	 * the others are fixed per architecture in HotSpot's frame_<arch>.hpp) */
	int32_t iframe_method;       /* frame::interpreter_frame_method_offset */
	int32_t iframe_bcp;          /* frame::interpreter_frame_bcp_offset */
	int32_t iframe_sender_sp;    /* frame::interpreter_frame_sender_sp_offset */
	int32_t iframe_locals;       /* frame::interpreter_frame_locals_offset */
	/* CodeBlobKind::Nmethod and friends (JDK 21+: _kind values), -1 if not */
	int32_t kind_nmethod;
	int32_t kind_adapter;
	int32_t kind_runtime_stub;
};

/* What one load cost and met: for the operator and the tests. */
struct hs_stats {
	uint64_t bytes_read;         /* from the process, all reads */
	uint64_t reads;              /* process_vm_readv calls */
	uint32_t struct_entries;     /* gHotSpotVMStructs entries read */
	uint32_t type_entries;
	uint32_t int_entries;
	uint32_t long_entries;
	uint64_t name_hits;          /* hs_method_name answered from the cache */
	uint64_t name_misses;
	uint64_t name_stale;         /* cached names found stale (method reused) */
};

/* Bounds of what one JVM may cost. */
#define HS_STR_MAX 256                  /* a VMStructs string, NUL included */
#define HS_TABLE_ENTRIES_MAX 20000      /* entries of one VMStructs table */
#define HS_STRIDE_MAX 256               /* bytes between two entries */
#define HS_LOAD_BYTES_MAX (8u << 20)    /* bytes read to load the tables */
#define HS_SYMBOL_MAX 512               /* bytes of a Symbol read for a name */
#define HS_NAME_CACHE 4096              /* cached Method* names (slots) */
#define HS_NAME_CACHE_BYTES (1u << 20)  /* what the cached names may hold */
#define HS_HEAPS_MAX 8                  /* code heaps */
#define HS_SEGMAP_MAX (16u << 20)       /* segment map bytes read per walk */
#define HS_BLOB_SEGS_MAX (1u << 22)     /* segments hs_blob_at walks back at most */

struct hs;

/* Loads process pid's VMStructs (its libjvm.so found in proc_root/PID/maps,
 * opened through map_files; proc_root NULL: "/proc"). 0; -ENOENT: no
 * libjvm.so mapped, or it exports no VMStructs; -EBADMSG: tables that do
 * not look like HotSpot's (bad stride, no terminator, strings too long,
 * over the byte budget); -EFAULT: a pointer outside the process's memory;
 * -ESRCH: the process is gone; -EPERM; -ENOMEM. */
int hs_open(pid_t pid, const char *proc_root, struct hs **out);
void hs_free(struct hs *h);

const struct hs_offsets *hs_offsets(const struct hs *h);
const struct hs_stats *hs_stats(const struct hs *h);
/* Writes the names of the fields the name lookup and the code heap walk
 * need but the JVM did not export, space-separated ("" if none). Returns
 * how many. */
size_t hs_offsets_missing(const struct hs *h, char *buf, size_t size);
/* The version string (Abstract_VM_Version::_s_vm_release), "" unknown. */
const char *hs_vm_release(const struct hs *h);

/* Method* -> "package.Class.method" (dots, as the agent's names). 0;
 * -EFAULT/-EBADMSG when the memory does not hold a method; -ENOSPC when
 * buf is too small; -ENOENT when offsets are missing. */
int hs_method_name(struct hs *h, uint64_t method, char *buf, size_t size);

enum hs_blob_kind {
	HS_BLOB_UNKNOWN = 0,
	HS_BLOB_NMETHOD,       /* compiled Java method (C1/C2) */
	HS_BLOB_NATIVE,        /* native method wrapper (an nmethod too) */
	HS_BLOB_INTERPRETER,   /* the template interpreter */
	HS_BLOB_ADAPTER,       /* i2c/c2i adapters, method handle adapters */
	HS_BLOB_STUB,          /* runtime, deopt, safepoint, uncommon trap, vtable... */
};
const char *hs_blob_kind_name(enum hs_blob_kind k);

struct hs_blob {
	uint64_t start;        /* the CodeBlob */
	uint32_t size;         /* bytes from start */
	int32_t frame_size;    /* words, the return address included */
	enum hs_blob_kind kind;
	uint64_t method;       /* nmethods: the Method*; else 0 */
	int comp_level;        /* nmethods: 1-4; else 0 */
	char name[64];         /* CodeBlob::_name (sanitized, cut) */
};

/* The blob holding pc: 0, -ENOENT (not in a code heap, or in free space),
 * -EBADMSG (a segment map or header that does not hold up), -EFAULT. */
int hs_blob_at(struct hs *h, uint64_t pc, struct hs_blob *out);
/* The code heaps' committed ranges [low, high) now, up to max of them
 * (what the BPF side will keep per process): how many heaps, or -errno. */
int hs_code_bounds(struct hs *h, uint64_t *low, uint64_t *high, unsigned max);
/* The same with what a walk of each heap's segment map needs (the BPF
 * walk: daemon/hotspot/hs_proc.c): how many heaps, or -errno. */
struct hs_heap_info {
	uint64_t low, high;    /* committed code */
	uint64_t segmap;       /* the segment map's first byte */
	unsigned log2;         /* log2 of the segment size */
};
int hs_code_heaps(struct hs *h, struct hs_heap_info *out, unsigned max);
/* Calls fn for every used blob of every code heap (segment map walk);
 * stops when fn returns non-zero and returns that. -errno on a read error. */
int hs_blobs_foreach(struct hs *h, int (*fn)(const struct hs_blob *b, void *arg), void *arg);

#endif
