/* A forged libjvm.so (unit/test_hotspot.c): it exports HotSpot's
 * gHotSpotVM* variables, and its constructor fills them with the hostile
 * layout HS_FORGE names. The daemon's reader must refuse every one within
 * bounded work. "valid" is a small well-formed table (the control). */
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#define EXPORT __attribute__((visibility("default")))
#define HS_FAKE_HEAPS 4

EXPORT void *gHotSpotVMStructs;
EXPORT uint64_t gHotSpotVMStructEntryTypeNameOffset, gHotSpotVMStructEntryFieldNameOffset,
	gHotSpotVMStructEntryTypeStringOffset, gHotSpotVMStructEntryIsStaticOffset,
	gHotSpotVMStructEntryOffsetOffset, gHotSpotVMStructEntryAddressOffset,
	gHotSpotVMStructEntryArrayStride;
EXPORT void *gHotSpotVMTypes;
EXPORT uint64_t gHotSpotVMTypeEntryTypeNameOffset, gHotSpotVMTypeEntrySizeOffset,
	gHotSpotVMTypeEntryArrayStride;
EXPORT void *gHotSpotVMIntConstants;
EXPORT uint64_t gHotSpotVMIntConstantEntryNameOffset, gHotSpotVMIntConstantEntryValueOffset,
	gHotSpotVMIntConstantEntryArrayStride;
EXPORT void *gHotSpotVMLongConstants;
EXPORT uint64_t gHotSpotVMLongConstantEntryNameOffset, gHotSpotVMLongConstantEntryValueOffset,
	gHotSpotVMLongConstantEntryArrayStride;

/* HotSpot's VMStructEntry layout. */
struct entry {
	const char *type, *field, *type_string;
	int32_t is_static;
	uint64_t offset;
	void *address;
};
/* VMTypeEntry / constants: a name and a value are all that is read. */
struct named {
	const char *name;
	uint64_t value;
};

/* Metadata laid out as HotSpot's, for one method "pkg.Foo.bar" (the
 * Method* is exported as hs_fake_method). SIGUSR1 plays a Method whose
 * memory was freed and reused: first the class Symbol's bytes change at
 * the same address, then the pool slot names another Symbol. */
struct symbol {
	uint32_t hash;
	uint16_t length;
	char body[16];
};
struct cmethod {
	uint64_t fingerprint;
	void *constants;
	uint16_t name_index;
};
struct cpool {
	uint64_t tags;
	void *holder;
	int32_t length;
	int32_t pad;
};
struct cpool_slots {
	struct cpool head;
	void *slots[4];
};
struct klass {
	uint64_t pad[2];
	void *name;
};
struct method {
	uint64_t pad;
	void *const_method;
};

static struct symbol sym_class = { 0, 7, "pkg/Foo" }, sym_bar = { 0, 3, "bar" },
		     sym_baz = { 0, 3, "baz" };
static struct klass klass = { { 0, 0 }, &sym_class };
static struct cpool_slots pool = { { 0, &klass, 4, 0 }, { NULL, &sym_bar, &sym_baz, NULL } };
static struct cmethod cmethod = { 0, &pool, 1 };
EXPORT struct method hs_fake_method = { 0, &cmethod };

/* A code heap of 64 segments of 64 bytes: one used block of 4 segments
 * at its start (a stub named "FakeStub"), the rest free. */
struct vspace {
	void *low_boundary, *high_boundary, *low, *high;
};
struct codeheap {
	struct vspace memory, segmap;
	int32_t log2;
};
struct garray {
	int32_t len, cap;
	void **data;
};
struct hblock {
	uint64_t length;
	uint8_t used;
	uint8_t pad[7];
};
struct blob {
	int32_t pad, size, frame_size, pad2;
	const char *name;
};

static unsigned char code[64 * 64] __attribute__((aligned(64)));
static unsigned char segmap[64];
static struct codeheap heap = { { code, code + sizeof(code), code, code + sizeof(code) },
				{ segmap, segmap + 64, segmap, segmap + 64 }, 6 };
static void *heap_list[HS_FAKE_HEAPS] = { &heap };
static struct garray heaps = { 1, HS_FAKE_HEAPS, heap_list };
static struct garray *codecache_heaps = &heaps;

static struct entry one_struct[] = {
	{ "Method", "_constMethod", "ConstMethod*", 0, offsetof(struct method, const_method), 0 },
	{ "ConstMethod", "_constants", "x", 0, offsetof(struct cmethod, constants), 0 },
	{ "ConstMethod", "_name_index", "x", 0, offsetof(struct cmethod, name_index), 0 },
	{ "ConstantPool", "_pool_holder", "x", 0, offsetof(struct cpool, holder), 0 },
	{ "ConstantPool", "_length", "x", 0, offsetof(struct cpool, length), 0 },
	{ "Klass", "_name", "x", 0, offsetof(struct klass, name), 0 },
	{ "Symbol", "_length", "x", 0, offsetof(struct symbol, length), 0 },
	{ "Symbol", "_body", "x", 0, offsetof(struct symbol, body), 0 },
	{ "CodeCache", "_heaps", "x", 1, 0, &codecache_heaps },
	{ "GrowableArrayBase", "_len", "x", 0, offsetof(struct garray, len), 0 },
	{ "GrowableArray<int>", "_data", "x", 0, offsetof(struct garray, data), 0 },
	{ "CodeHeap", "_memory", "x", 0, offsetof(struct codeheap, memory), 0 },
	{ "CodeHeap", "_segmap", "x", 0, offsetof(struct codeheap, segmap), 0 },
	{ "CodeHeap", "_log2_segment_size", "x", 0, offsetof(struct codeheap, log2), 0 },
	{ "VirtualSpace", "_low", "x", 0, offsetof(struct vspace, low), 0 },
	{ "VirtualSpace", "_high", "x", 0, offsetof(struct vspace, high), 0 },
	{ "HeapBlock::Header", "_length", "x", 0, offsetof(struct hblock, length), 0 },
	{ "HeapBlock::Header", "_used", "x", 0, offsetof(struct hblock, used), 0 },
	{ "CodeBlob", "_name", "x", 0, offsetof(struct blob, name), 0 },
	{ "CodeBlob", "_size", "x", 0, offsetof(struct blob, size), 0 },
	{ "CodeBlob", "_frame_size", "x", 0, offsetof(struct blob, frame_size), 0 },
	{ NULL, NULL, NULL, 0, 0, 0 },
};
static struct named one_named[] = { { "ConstantPool", sizeof(struct cpool) },
				    { "HeapBlock", sizeof(struct hblock) }, { NULL, 0 } };

static void heap_valid(void)
{
	struct hblock *b = (struct hblock *)code;
	struct blob *blob = (struct blob *)(b + 1);

	memset(segmap, 0xFF, sizeof(segmap));
	for (int i = 0; i < 4; i++)
		segmap[i] = (unsigned char)i;
	*b = (struct hblock){ 4, 1, { 0 } };
	*blob = (struct blob){ 0, 4 * 64 - (int32_t)sizeof(*b), 2, 0, "FakeStub" };
}

static void reuse(int sig)
{
	static int gen;

	(void)sig;
	if (++gen == 1) {
		memcpy(sym_class.body, "pkg/Qux", 7);
		prctl(PR_SET_NAME, "hs-forged-gen1");
	} else {
		cmethod.name_index = 2;
		prctl(PR_SET_NAME, "hs-forged-gen2");
	}
}

/* Memory nothing is mapped at (mapped, then unmapped). */
static void *hole(void)
{
	void *p = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	munmap(p, 1 << 20);
	return (char *)p + 4096;
}

static void layout_valid(void)
{
	gHotSpotVMStructs = one_struct;
	gHotSpotVMStructEntryTypeNameOffset = offsetof(struct entry, type);
	gHotSpotVMStructEntryFieldNameOffset = offsetof(struct entry, field);
	gHotSpotVMStructEntryTypeStringOffset = offsetof(struct entry, type_string);
	gHotSpotVMStructEntryIsStaticOffset = offsetof(struct entry, is_static);
	gHotSpotVMStructEntryOffsetOffset = offsetof(struct entry, offset);
	gHotSpotVMStructEntryAddressOffset = offsetof(struct entry, address);
	gHotSpotVMStructEntryArrayStride = sizeof(struct entry);
	gHotSpotVMTypes = gHotSpotVMIntConstants = gHotSpotVMLongConstants = one_named;
	gHotSpotVMTypeEntryTypeNameOffset = gHotSpotVMIntConstantEntryNameOffset =
		gHotSpotVMLongConstantEntryNameOffset = offsetof(struct named, name);
	gHotSpotVMTypeEntrySizeOffset = gHotSpotVMIntConstantEntryValueOffset =
		gHotSpotVMLongConstantEntryValueOffset = offsetof(struct named, value);
	gHotSpotVMTypeEntryArrayStride = gHotSpotVMIntConstantEntryArrayStride =
		gHotSpotVMLongConstantEntryArrayStride = sizeof(struct named);
}

/* n struct entries with no terminator, filling their mapping. */
static struct entry *endless(size_t n)
{
	struct entry *t = mmap(NULL, n * sizeof(*t), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	for (size_t i = 0; i < n; i++)
		t[i] = (struct entry){ "Method", "_x", "int", 0, 8, 0 };
	return t;
}

__attribute__((constructor)) static void forge(void)
{
	const char *mode = getenv("HS_FORGE");

	layout_valid();
	heap_valid();
	if (!mode || !strcmp(mode, "valid")) {
		signal(SIGUSR1, reuse);
		return;
	}
	if (!strcmp(mode, "stride0")) {
		gHotSpotVMStructEntryArrayStride = 0;
	} else if (!strcmp(mode, "stride_huge")) {
		gHotSpotVMStructEntryArrayStride = 1ull << 40;
	} else if (!strcmp(mode, "offset_huge")) {
		gHotSpotVMStructEntryFieldNameOffset = 1ull << 40;
	} else if (!strcmp(mode, "no_terminator")) {
		/* 2 million entries (112 MB): more than any HotSpot has. */
		gHotSpotVMStructs = endless(2u << 20);
	} else if (!strcmp(mode, "table_unmapped")) {
		gHotSpotVMStructs = hole();
	} else if (!strcmp(mode, "name_unmapped")) {
		one_struct[0].type = hole();
	} else if (!strcmp(mode, "name_self")) {
		/* Every entry's names point at the entry itself, and none ends. */
		struct entry *t = endless(1u << 20);

		for (size_t i = 0; i < (1u << 20); i++)
			t[i].type = t[i].field = (const char *)&t[i];
		gHotSpotVMStructs = t;
	} else if (!strcmp(mode, "heap_hops")) {
		/* A 1 GiB heap (not mapped) whose 16 Mi-segment map hops back one
		 * segment at a time from its end to its start. */
		size_t n = 16u << 20;
		unsigned char *map = mmap(NULL, n, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		memset(map, 1, n);
		map[0] = 0;
		heap.segmap = (struct vspace){ map, map + n, map, map + n };
		heap.memory.low = hole();
		heap.memory.high = (char *)heap.memory.low + ((size_t)n << 6);
	} else if (!strcmp(mode, "heap_many")) {
		heaps.len = 1 << 30;
	} else if (!strcmp(mode, "heap_block_huge")) {
		/* A block claiming more segments than the heap has. */
		((struct hblock *)code)->length = 1ull << 40;
	} else if (!strcmp(mode, "string_100m")) {
		/* A 100 MB "type name" without a NUL. */
		size_t len = 100u << 20;
		char *s = mmap(NULL, len + 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		memset(s, 'A', len);
		s[len] = '\0';
		one_struct[0].type = s;
	}
}
