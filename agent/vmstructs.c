#include "vmstructs.h"

#include "agent.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Where each needed field lies; -1 = not found. */
static struct {
	bool done;
	int ret;
	long method_code;      /* Method::_code: the method's current nmethod */
	long blob_size;        /* CodeBlob::_size: bytes from the nmethod's start */
	long nm_method;        /* nmethod::_method (CompiledMethod::_method on JDK 17) */
	long nm_level;         /* nmethod::_comp_level */
	unsigned level_size;   /* its type's size: int on JDK 17, CompLevel (1) on 25 */
	/* The code cache's layout, to find the blob at a pc: */
	uintptr_t heaps_addr;  /* &CodeCache::_heaps (GrowableArray<CodeHeap*> *) */
	long ga_len, ga_data;  /* GrowableArrayBase::_len, GrowableArray<int>::_data */
	long heap_memory, heap_segmap, heap_log2;   /* CodeHeap::_memory, _segmap, _log2_segment_size */
	long vs_low, vs_high;  /* VirtualSpace::_low, _high */
	long hb_used;          /* HeapBlock::Header::_used */
	unsigned hb_size;      /* sizeof(HeapBlock): the blob follows it */
	long blob_name;        /* CodeBlob::_name */
	long blob_frame;       /* CodeBlob::_frame_size: words, with the return address */
	long method_intrinsic; /* Method::_intrinsic_id (u2) */
} vms = { .method_code = -1, .blob_size = -1, .nm_method = -1, .nm_level = -1, .ga_len = -1,
	  .ga_data = -1, .heap_memory = -1, .heap_segmap = -1, .heap_log2 = -1, .vs_low = -1,
	  .vs_high = -1, .hb_used = -1, .blob_name = -1, .blob_frame = -1,
	  .method_intrinsic = -1 };

#define VMSTRUCTS_HEAPS_MAX 8
/* A code heap as the handler sees it: read once on the agent's thread
 * (vmstructs_load_heaps), published by vms_nheaps (release). */
struct vms_heap {
	uintptr_t low, high;        /* its memory, committed when read */
	uintptr_t high_addr;        /* &_memory._high: the heap commits more as
				       code is added (a recording's later nmethods) */
	uintptr_t segmap;           /* one byte per segment */
	unsigned log2_seg;
};
static struct vms_heap vms_heaps[VMSTRUCTS_HEAPS_MAX];
static unsigned vms_nheaps;

static uint64_t vmstructs_u64(const char *name, bool *ok)
{
	const uint64_t *p = agent_jvm_sym(name);

	if (!p)
		*ok = false;
	return p ? *p : 0;
}

/* The entry named name in the exported table (gHotSpotVMTypes,
 * gHotSpotVMIntConstants) whose entries' name pointer lies at the offset
 * symbol name_sym says, entries stride_sym apart; NULL if none. */
static const char *vmstructs_entry(const char *table_sym, const char *name_sym,
				   const char *stride_sym, const char *name)
{
	const char *const *table = agent_jvm_sym(table_sym);
	bool ok = true;
	uint64_t name_off = vmstructs_u64(name_sym, &ok);
	uint64_t stride = vmstructs_u64(stride_sym, &ok);

	if (!table || !*table || !ok || !stride)
		return NULL;
	/* Bounded: HotSpot's tables have a few thousand entries. */
	for (const char *e = *table; e < *table + stride * 100000; e += stride) {
		const char *n = *(const char *const *)(e + name_off);

		if (!n)
			break;
		if (!strcmp(n, name))
			return e;
	}
	return NULL;
}

/* The size of a type named in gHotSpotVMTypes, or 0. */
static unsigned vmstructs_type_size(const char *type)
{
	const char *e = vmstructs_entry("gHotSpotVMTypes", "gHotSpotVMTypeEntryTypeNameOffset",
					"gHotSpotVMTypeEntryArrayStride", type);
	bool ok = true;
	uint64_t size_off = vmstructs_u64("gHotSpotVMTypeEntrySizeOffset", &ok);

	return e && ok ? (unsigned)*(const uint64_t *)(e + size_off) : 0;
}

int vmstructs_init(void)
{
	const char *const *table = agent_jvm_sym("gHotSpotVMStructs");
	uint64_t type_off, field_off, tstr_off, static_off, off_off, addr_off, stride;
	const char *level_type = NULL;
	bool ok = true;
	/* The instance fields read (JDK 17's CompiledMethod::_method is
	 * nmethod::_method on 25). */
	const struct {
		const char *type, *field;
		long *off;
	} fields[] = {
		{ "Method", "_code", &vms.method_code },
		{ "CodeBlob", "_size", &vms.blob_size },
		{ "CodeBlob", "_name", &vms.blob_name },
		{ "nmethod", "_method", &vms.nm_method },
		{ "CompiledMethod", "_method", &vms.nm_method },
		{ "GrowableArrayBase", "_len", &vms.ga_len },
		{ "GrowableArray<int>", "_data", &vms.ga_data },
		{ "CodeHeap", "_memory", &vms.heap_memory },
		{ "CodeHeap", "_segmap", &vms.heap_segmap },
		{ "CodeHeap", "_log2_segment_size", &vms.heap_log2 },
		{ "VirtualSpace", "_low", &vms.vs_low },
		{ "VirtualSpace", "_high", &vms.vs_high },
		{ "HeapBlock::Header", "_used", &vms.hb_used },
		{ "CodeBlob", "_frame_size", &vms.blob_frame },
		{ "Method", "_intrinsic_id", &vms.method_intrinsic },
	};

	if (vms.done)
		return vms.ret;
	vms.done = true;
	type_off = vmstructs_u64("gHotSpotVMStructEntryTypeNameOffset", &ok);
	field_off = vmstructs_u64("gHotSpotVMStructEntryFieldNameOffset", &ok);
	tstr_off = vmstructs_u64("gHotSpotVMStructEntryTypeStringOffset", &ok);
	static_off = vmstructs_u64("gHotSpotVMStructEntryIsStaticOffset", &ok);
	off_off = vmstructs_u64("gHotSpotVMStructEntryOffsetOffset", &ok);
	addr_off = vmstructs_u64("gHotSpotVMStructEntryAddressOffset", &ok);
	stride = vmstructs_u64("gHotSpotVMStructEntryArrayStride", &ok);
	if (!table || !*table || !ok || !stride) {
		vms.ret = -ENOENT;
		goto out;
	}
	for (const char *e = *table; e < *table + stride * 100000; e += stride) {
		const char *type = *(const char *const *)(e + type_off);
		const char *field = *(const char *const *)(e + field_off);
		long off = (long)*(const uint64_t *)(e + off_off);

		if (!type)
			break;
		if (!field)
			continue;
		if (*(const int32_t *)(e + static_off)) {
			if (!strcmp(type, "CodeCache") && !strcmp(field, "_heaps"))
				vms.heaps_addr = *(const uintptr_t *)(e + addr_off);
			continue;
		}
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			if (!strcmp(type, fields[i].type) && !strcmp(field, fields[i].field))
				*fields[i].off = off;
		if (!strcmp(type, "nmethod") && !strcmp(field, "_comp_level")) {
			vms.nm_level = off;
			level_type = *(const char *const *)(e + tstr_off);
		}
	}
	if (level_type)
		vms.level_size = vmstructs_type_size(level_type);
	vms.hb_size = vmstructs_type_size("HeapBlock");
	if (vms.method_code < 0 || vms.blob_size < 0 || vms.nm_method < 0 || vms.nm_level < 0 ||
	    (vms.level_size != 1 && vms.level_size != 4))
		vms.ret = -ENOENT;
out:
	/* Once per JVM: compiled frames are then typed compiled, not C1/C2. */
	if (vms.ret < 0)
		agent_warn("VMStructs lack nmethod tiers (Method::_code, CodeBlob::_size, "
			   "nmethod::_method, nmethod::_comp_level): C1 and C2 not told apart");
	return vms.ret;
}

/* The nmethod of method (a jmethodID) whose code starts at code_addr: the
 * method's current one (Method::_code), if it holds code_addr; else 0. */
static uintptr_t vmstructs_nmethod(uint64_t method, uintptr_t code_addr)
{
	uintptr_t m, nm, nm_method;
	int32_t size = 0;

	if (vms.ret < 0 || !vms.done)
		return 0;
	/* A jmethodID points at the Method*. */
	if (!agent_peek((uintptr_t)method, &m, sizeof(m)) ||
	    !agent_peek(m + (uintptr_t)vms.method_code, &nm, sizeof(nm)) || !nm)
		return 0;
	/* The method's current nmethod must be the one loaded at code_addr. */
	if (!agent_peek(nm + (uintptr_t)vms.blob_size, &size, sizeof(size)) || size <= 0 ||
	    code_addr < nm || code_addr - nm >= (uintptr_t)size ||
	    !agent_peek(nm + (uintptr_t)vms.nm_method, &nm_method, sizeof(nm_method)) ||
	    nm_method != m)
		return 0;
	return nm;
}

int vmstructs_comp_level(uint64_t method, uintptr_t code_addr)
{
	uintptr_t nm = vmstructs_nmethod(method, code_addr);
	int32_t level = 0;
	int8_t level8;

	if (!nm)
		return 0;
	if (vms.level_size == 1) {
		if (!agent_peek(nm + (uintptr_t)vms.nm_level, &level8, 1))
			return 0;
		level = level8;
	} else if (!agent_peek(nm + (uintptr_t)vms.nm_level, &level, sizeof(level))) {
		return 0;
	}
	return level >= 1 && level <= 4 ? level : 0;
}

void vmstructs_load_heaps(void)
{
	uintptr_t arr, data, heap;
	int32_t len, log2;
	unsigned n = 0;

	static bool warned;

	if (__atomic_load_n(&vms_nheaps, __ATOMIC_ACQUIRE) || !vms.done)
		return;
	if (!vms.heaps_addr || vms.ga_len < 0 || vms.ga_data < 0 || vms.heap_memory < 0 ||
	    vms.heap_segmap < 0 || vms.heap_log2 < 0 || vms.vs_low < 0 || vms.vs_high < 0 ||
	    vms.hb_used < 0 || !vms.hb_size || vms.blob_name < 0 ||
	    !agent_peek(vms.heaps_addr, &arr, sizeof(arr)) ||
	    !agent_peek(arr + (uintptr_t)vms.ga_len, &len, sizeof(len)) ||
	    !agent_peek(arr + (uintptr_t)vms.ga_data, &data, sizeof(data)))
		goto out;
	for (int32_t i = 0; i < len && n < VMSTRUCTS_HEAPS_MAX; i++) {
		struct vms_heap *h = &vms_heaps[n];
		uintptr_t mem, seg;

		if (!agent_peek(data + (uintptr_t)i * sizeof(uintptr_t), &heap, sizeof(heap)))
			goto out;
		mem = heap + (uintptr_t)vms.heap_memory;
		seg = heap + (uintptr_t)vms.heap_segmap;
		h->high_addr = mem + (uintptr_t)vms.vs_high;
		if (!agent_peek(mem + (uintptr_t)vms.vs_low, &h->low, sizeof(h->low)) ||
		    !agent_peek(mem + (uintptr_t)vms.vs_high, &h->high, sizeof(h->high)) ||
		    !agent_peek(seg + (uintptr_t)vms.vs_low, &h->segmap, sizeof(h->segmap)) ||
		    !agent_peek(heap + (uintptr_t)vms.heap_log2, &log2, sizeof(log2)) ||
		    log2 < 4 || log2 > 16 || h->high <= h->low || !h->segmap)
			goto out;
		h->log2_seg = (unsigned)log2;
		n++;
	}
out:
	/* Half-read heaps are never published. */
	if (n && n == (unsigned)len)
		__atomic_store_n(&vms_nheaps, n, __ATOMIC_RELEASE);
	else if (!warned) {
		warned = true;
		agent_warn("code cache layout not read from VMStructs: unannounced vtable and "
			   "itable stubs stay [unknown_java_leaf]");
	}
}

/* HotSpot's segment map: per segment of a heap, 0 at a block's first
 * segment, else how many segments to step back towards it (at most 0xfe;
 * 0xff: unused). A block of a few MiB takes a few dozen steps. */
#define VMSTRUCTS_SEG_STEPS 256

/* The code blob holding pc (its CodeBlob, after the heap block's header),
 * or 0: not in a code heap, a free block, or a segment map that does not
 * lead to a block's start within VMSTRUCTS_SEG_STEPS. Also javawalk.c's. */
uintptr_t vmstructs_blob_at(uintptr_t pc)
{
	unsigned n = __atomic_load_n(&vms_nheaps, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++) {
		const struct vms_heap *h = &vms_heaps[i];
		uintptr_t idx, blob, high = h->high;
		unsigned char b = 0;
		bool used = false;

		/* Past the end read at the start: the heap's end now. */
		if (pc >= high && !agent_peek(h->high_addr, &high, sizeof(high)))
			continue;
		if (pc < h->low || pc >= high)
			continue;
		idx = (pc - h->low) >> h->log2_seg;
		for (unsigned step = 0;; step++) {
			if (step == VMSTRUCTS_SEG_STEPS || !agent_peek(h->segmap + idx, &b, 1) ||
			    b == 0xff || b > idx)
				return 0;
			if (!b)
				break;
			idx -= b;
		}
		blob = h->low + (idx << h->log2_seg);
		if (!agent_peek(blob + (uintptr_t)vms.hb_used, &used, 1) || !used)
			return 0;
		return blob + vms.hb_size;
	}
	return 0;
}

/* True if blob's CodeBlob::_name is name (at most 31 characters). */
static bool vmstructs_blob_named(uintptr_t blob, const char *name)
{
	size_t len = strlen(name) + 1;
	uintptr_t name_ptr;
	char got[32];

	if (!blob || len > sizeof(got) ||
	    !agent_peek(blob + (uintptr_t)vms.blob_name, &name_ptr, sizeof(name_ptr)) ||
	    !agent_peek(name_ptr, got, len))
		return false;
	return !memcmp(got, name, len);
}

uintptr_t vmstructs_nmethod_method(uintptr_t blob)
{
	uintptr_t m = 0;

	/* HotSpot names every nmethod so (JDK 17 and 25); a runtime stub, an
	 * adapter or a buffer blob never. */
	if (vms.nm_method < 0 || vms.blob_name < 0 ||
	    (!vmstructs_blob_named(blob, "nmethod") &&
	     !vmstructs_blob_named(blob, "native nmethod")) ||
	    !agent_peek(blob + (uintptr_t)vms.nm_method, &m, sizeof(m)))
		return 0;
	return m;
}

bool vmstructs_in_blob(uintptr_t pc, const char *name)
{
	return vmstructs_blob_named(vmstructs_blob_at(pc), name);
}

/* Frame sizes (issue 13's compiled prologues): HotSpot's C1 and C2 frames
 * are at most a few KiB; anything larger is taken as a misread. */
#define VMSTRUCTS_FRAME_WORDS_MAX 8192

unsigned vmstructs_frame_words(uint64_t method, uintptr_t code_addr)
{
	uintptr_t nm = vmstructs_nmethod(method, code_addr);
	int32_t words = 0;

	static bool warned;

	/* Any JVMTI thread: the exchange makes the line once. */
	if (vms.done && vms.ret == 0 && vms.blob_frame < 0 &&
	    !__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		agent_warn("VMStructs lack CodeBlob::_frame_size: samples on a compiled method's "
			   "entry barrier (JDK 25) stay [unknown_java]");
	if (!nm || vms.blob_frame < 0 ||
	    !agent_peek(nm + (uintptr_t)vms.blob_frame, &words, sizeof(words)) ||
	    words < 2 || words > VMSTRUCTS_FRAME_WORDS_MAX)
		return 0;
	return (unsigned)words;
}

/* Method handle intrinsics (issue 13's frameless leaves): HotSpot compiles
 * MethodHandle.invokeBasic and linkTo* into small nmethods, one per
 * signature, that JVMTI never announces. Their Method's _intrinsic_id is one
 * of these vmIntrinsics ids, whose values differ between JDK builds: read
 * once from gHotSpotVMIntConstants. -1: not known. */
static const char *const vms_mh_names[VMSTRUCTS_BLOB_KINDS] = {
	[VMSTRUCTS_BLOB_INVOKE_BASIC] = "vmIntrinsics::_invokeBasic",
	[VMSTRUCTS_BLOB_LINK_TO_VIRTUAL] = "vmIntrinsics::_linkToVirtual",
	[VMSTRUCTS_BLOB_LINK_TO_STATIC] = "vmIntrinsics::_linkToStatic",
	[VMSTRUCTS_BLOB_LINK_TO_SPECIAL] = "vmIntrinsics::_linkToSpecial",
	[VMSTRUCTS_BLOB_LINK_TO_INTERFACE] = "vmIntrinsics::_linkToInterface",
	[VMSTRUCTS_BLOB_LINK_TO_NATIVE] = "vmIntrinsics::_linkToNative",
};
static int32_t vms_mh_ids[VMSTRUCTS_BLOB_KINDS];
static bool vms_mh_known;      /* published after vms_mh_ids (release) */

void vmstructs_load_intrinsics(void)
{
	bool ok = true, any = false;
	uint64_t value_off = vmstructs_u64("gHotSpotVMIntConstantEntryValueOffset", &ok);

	static bool warned;

	if (__atomic_load_n(&vms_mh_known, __ATOMIC_ACQUIRE) || !vms.done)
		return;
	if (vms.method_intrinsic < 0 || vms.nm_method < 0 || !ok)
		goto out;
	for (int k = 0; k < VMSTRUCTS_BLOB_KINDS; k++) {
		const char *e = vms_mh_names[k] ?
			vmstructs_entry("gHotSpotVMIntConstants",
					"gHotSpotVMIntConstantEntryNameOffset",
					"gHotSpotVMIntConstantEntryArrayStride", vms_mh_names[k]) : NULL;

		/* 0 is vmIntrinsics::_none: never a match. */
		vms_mh_ids[k] = e ? *(const int32_t *)(e + value_off) : -1;
		if (vms_mh_ids[k] <= 0)
			vms_mh_ids[k] = -1;
		else
			any = true;
	}
out:
	if (any)
		__atomic_store_n(&vms_mh_known, true, __ATOMIC_RELEASE);
	else if (!warned) {
		warned = true;
		agent_warn("VMStructs lack the MethodHandle intrinsics' ids: their frames stay "
			   "[unknown_java_leaf]");
	}
}

int vmstructs_blob_kind(uintptr_t pc)
{
	uintptr_t blob = vmstructs_blob_at(pc), m = 0;
	uint16_t id = 0;

	if (!blob)
		return VMSTRUCTS_BLOB_UNKNOWN;
	if (vmstructs_blob_named(blob, "vtable chunks"))
		return VMSTRUCTS_BLOB_VTABLE_CHUNKS;
	/* The intrinsics are compiled as native wrappers, the blobs HotSpot
	 * names "native nmethod" (JDK 17 and 25), whose _method is a Method*. */
	if (!__atomic_load_n(&vms_mh_known, __ATOMIC_ACQUIRE) ||
	    !vmstructs_blob_named(blob, "native nmethod") ||
	    !agent_peek(blob + (uintptr_t)vms.nm_method, &m, sizeof(m)) || !m ||
	    !agent_peek(m + (uintptr_t)vms.method_intrinsic, &id, sizeof(id)) || !id)
		return VMSTRUCTS_BLOB_UNKNOWN;
	for (int k = 0; k < VMSTRUCTS_BLOB_KINDS; k++)
		if (vms_mh_ids[k] == (int32_t)id)
			return k;
	return VMSTRUCTS_BLOB_UNKNOWN;
}

/* ---- the frame walker's fields (javawalk.c) ---- */

/* A non-static field's offset, or -1; with is_static, a static field's
 * address (0: none). Not signal-safe (strcmp over the table), once per
 * JVM. */
static long vmstructs_field(const char *type, const char *field, bool is_static)
{
	const char *const *table = agent_jvm_sym("gHotSpotVMStructs");
	bool ok = true;
	uint64_t type_off = vmstructs_u64("gHotSpotVMStructEntryTypeNameOffset", &ok);
	uint64_t field_off = vmstructs_u64("gHotSpotVMStructEntryFieldNameOffset", &ok);
	uint64_t static_off = vmstructs_u64("gHotSpotVMStructEntryIsStaticOffset", &ok);
	uint64_t off_off = vmstructs_u64("gHotSpotVMStructEntryOffsetOffset", &ok);
	uint64_t addr_off = vmstructs_u64("gHotSpotVMStructEntryAddressOffset", &ok);
	uint64_t stride = vmstructs_u64("gHotSpotVMStructEntryArrayStride", &ok);
	long none = is_static ? 0 : -1;

	if (!table || !*table || !ok || !stride)
		return none;
	for (const char *e = *table; e < *table + stride * 100000; e += stride) {
		const char *t = *(const char *const *)(e + type_off);
		const char *f = *(const char *const *)(e + field_off);

		if (!t)
			break;
		if (!f || !*(const int32_t *)(e + static_off) != !is_static || strcmp(t, type) ||
		    strcmp(f, field))
			continue;
		return is_static ? (long)*(const uintptr_t *)(e + addr_off) :
				   (long)*(const uint64_t *)(e + off_off);
	}
	return none;
}

int vmstructs_walk_init(struct vmstructs_walk *w, const char **missing)
{
	const struct {
		const char *type, *field;
		long *off;
		bool optional;
	} fields[] = {
		{ "JavaThread", "_thread_state", &w->thread_state, false },
		{ "JavaThread", "_anchor", &w->anchor, false },
		{ "JavaThread", "_stack_base", &w->stack_base, false },
		{ "JavaThread", "_stack_size", &w->stack_size, false },
		{ "JavaFrameAnchor", "_last_Java_sp", &w->anchor_sp, false },
		{ "JavaFrameAnchor", "_last_Java_pc", &w->anchor_pc, false },
		{ "JavaFrameAnchor", "_last_Java_fp", &w->anchor_fp, false },
		{ "Method", "_constMethod", &w->method_const, false },
		{ "Method", "_access_flags", &w->method_flags, false },
		{ "ConstMethod", "_constants", &w->const_constants, false },
		{ "ConstMethod", "_method_idnum", &w->const_idnum, false },
		{ "ConstMethod", "_code_size", &w->const_code_size, false },
		{ "ConstantPool", "_pool_holder", &w->cp_holder, false },
		{ "InstanceKlass", "_methods_jmethod_ids", &w->ik_jmethod_ids, false },
		{ "CodeBlob", "_frame_size", &w->blob_frame_size, false },
		{ "JavaCallWrapper", "_anchor", &w->wrapper_anchor, false },
		/* JDK 17: the code's address; 25: its offset from the blob. */
		{ "CodeBlob", "_code_begin", &w->blob_code_begin, true },
		{ "CodeBlob", "_code_offset", &w->blob_code_offset, true },
		/* Where a frame marked for deoptimization keeps its pc. */
		{ "nmethod", "_orig_pc_offset", &w->nm_orig_pc_offset, true },
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		*fields[i].off = vmstructs_field(fields[i].type, fields[i].field, false);
		if (*fields[i].off < 0 && !fields[i].optional) {
			*missing = fields[i].field;
			return -ENOENT;
		}
	}
	w->const_size = vmstructs_type_size("ConstMethod");
	w->call_stub_ra = (uintptr_t)vmstructs_field("StubRoutines", "_call_stub_return_address",
						     true);
	if (!w->call_stub_ra) {
		*missing = "StubRoutines::_call_stub_return_address";
		return -ENOENT;
	}
	if (w->blob_code_begin < 0 && w->blob_code_offset < 0) {
		*missing = "CodeBlob::_code_begin";
		return -ENOENT;
	}
	if (!w->const_size) {
		*missing = "ConstMethod's size";
		return -ENOENT;
	}
	return 0;
}

/* ---- end of the frame walker's fields ---- */
