#include "codemap.h"

#include "agent.h"
#include "javawalk.h"
#include "jprof_agent.h"
#include "vmstructs.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define CODEMAP_SLOTS (1u << 15)     /* methods with compiled code at once */
#define CODEMAP_RANGES 3             /* live nmethods of one method: C1, C2, OSR */
#define CODEMAP_PROBES 32
#define CODEMAP_INTERP_MAX 8

/* The reverse index, pc -> what code is there: one bucket per 4 KiB page of
 * code (hashed by page number), holding the pieces of the nmethods and stubs
 * on that page. A page holds at most a few nmethods (each is several hundred
 * bytes with its header and metadata); one that does not fit is counted and
 * its pcs stay unknown. 2^15 pages of code: 128 MiB, more than javac or
 * scalac compile; the table itself is 4.7 MiB of reserved memory. */
#define CODEMAP_PAGE_SHIFT 12
#define CODEMAP_PAGE_SIZE (1u << CODEMAP_PAGE_SHIFT)
#define CODEMAP_PAGES (1u << 15)
#define CODEMAP_PAGE_ENTRIES 8
#define CODEMAP_PAGE_PROBES 16
/* Stubs larger than this are scratch buffers ("C1 temporary"), not code
 * that runs as a leaf. */
#define CODEMAP_STUB_MAX (256u << 10)

struct codemap_slot {
	uint64_t key;                /* jmethodID; 0 = free; once set, never changes */
	uint32_t seq;                /* odd while a writer changes the ranges */
	uint8_t level[CODEMAP_RANGES];   /* CompLevel of each range; 0 = unknown */
	uint8_t reserved;
	uint16_t frame[CODEMAP_RANGES];  /* frame size in words of each range; 0 = unknown */
	uint16_t reserved2;
	uintptr_t start[CODEMAP_RANGES];
	uintptr_t end[CODEMAP_RANGES];   /* 0 = unused */
};

/* tag: a jmethodID (a pointer, never below JPRING_STUB_KINDS) or a stub
 * kind; 0 = free. start and end are offsets in the page (end <= 4096). */
struct codemap_piece {
	uint64_t tag;
	uint16_t start, end;
	uint32_t reserved;
};

struct codemap_page {
	uint64_t key;                /* page number + 1; 0 = free; once set, never changes */
	uint32_t seq;                /* odd while a writer changes the pieces */
	uint32_t reserved;
	struct codemap_piece piece[CODEMAP_PAGE_ENTRIES];
};

static struct codemap_slot *codemap_slots;
static struct codemap_page *codemap_pages;
static pthread_mutex_t codemap_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t codemap_interp_start[CODEMAP_INTERP_MAX], codemap_interp_end[CODEMAP_INTERP_MAX];
static unsigned codemap_ninterp;     /* published after its range (release) */
static bool codemap_xint;
static unsigned long codemap_full;   /* methods or ranges that did not fit */

const jvmtiEvent codemap_events[3] = {
	JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
	JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
};

int codemap_init(void)
{
	void *p = mmap(NULL, CODEMAP_SLOTS * sizeof(struct codemap_slot), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	codemap_slots = p;
	p = mmap(NULL, CODEMAP_PAGES * sizeof(struct codemap_page), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	/* Without the index leaves stay unknown; the rest works. */
	if (p != MAP_FAILED)
		codemap_pages = p;
	return 0;
}

static uint32_t codemap_hash(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (uint32_t)key & (CODEMAP_SLOTS - 1);
}

/* The slot of key, claimed if create. Writers only (codemap_lock). */
static struct codemap_slot *codemap_slot(uint64_t key, bool create)
{
	uint32_t h = codemap_hash(key);

	for (unsigned i = 0; i < CODEMAP_PROBES; i++) {
		struct codemap_slot *s = &codemap_slots[(h + i) & (CODEMAP_SLOTS - 1)];
		uint64_t k = __atomic_load_n(&s->key, __ATOMIC_RELAXED);

		if (k == key)
			return s;
		if (!k) {
			if (!create)
				return NULL;
			__atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
			return s;
		}
	}
	return NULL;
}

static void codemap_write_begin(uint32_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void codemap_write_end(uint32_t *seq)
{
	__atomic_store_n(seq, *seq + 1, __ATOMIC_RELEASE);
}

/* The bucket of a page, claimed if create. */
static struct codemap_page *codemap_page(uint64_t page, bool create)
{
	uint32_t h = codemap_hash(page);

	for (unsigned i = 0; i < CODEMAP_PAGE_PROBES; i++) {
		struct codemap_page *b = &codemap_pages[(h + i) & (CODEMAP_PAGES - 1)];
		uint64_t k = __atomic_load_n(&b->key, __ATOMIC_ACQUIRE);

		if (k == page + 1)
			return b;
		if (!k) {
			if (!create)
				return NULL;
			__atomic_store_n(&b->key, page + 1, __ATOMIC_RELEASE);
			return b;
		}
	}
	return NULL;
}

/* Enters [start, start + len) as tag into every page it covers. Code at an
 * address replaces whatever was there: an nmethod's unload event may come
 * after the load of the code that reuses its memory. Writers only. */
static void codemap_index_add(uintptr_t start, uintptr_t len, uint64_t tag)
{
	uintptr_t end = start + len;

	if (!codemap_pages)
		return;
	for (uintptr_t pg = start >> CODEMAP_PAGE_SHIFT; pg <= (end - 1) >> CODEMAP_PAGE_SHIFT; pg++) {
		uintptr_t base = pg << CODEMAP_PAGE_SHIFT;
		uint16_t a = start > base ? (uint16_t)(start - base) : 0;
		uint16_t z = end - base < CODEMAP_PAGE_SIZE ? (uint16_t)(end - base) : CODEMAP_PAGE_SIZE;
		struct codemap_page *b = codemap_page(pg, true);
		int free_ix = -1;

		if (!b) {
			codemap_full++;
			continue;
		}
		codemap_write_begin(&b->seq);
		for (int i = 0; i < CODEMAP_PAGE_ENTRIES; i++) {
			struct codemap_piece *p = &b->piece[i];

			if (p->tag && p->start < z && a < p->end)
				__atomic_store_n(&p->tag, 0, __ATOMIC_RELAXED);
			if (!p->tag && free_ix < 0)
				free_ix = i;
		}
		if (free_ix >= 0) {
			struct codemap_piece *p = &b->piece[free_ix];

			__atomic_store_n(&p->start, a, __ATOMIC_RELAXED);
			__atomic_store_n(&p->end, z, __ATOMIC_RELAXED);
			__atomic_store_n(&p->tag, tag, __ATOMIC_RELAXED);
		} else {
			codemap_full++;
		}
		codemap_write_end(&b->seq);
	}
}

/* Drops tag's pieces in [start, start + len). Writers only. */
static void codemap_index_remove(uintptr_t start, uintptr_t len, uint64_t tag)
{
	uintptr_t end = start + len;

	if (!codemap_pages || !len)
		return;
	for (uintptr_t pg = start >> CODEMAP_PAGE_SHIFT; pg <= (end - 1) >> CODEMAP_PAGE_SHIFT; pg++) {
		struct codemap_page *b = codemap_page(pg, false);

		if (!b)
			continue;
		codemap_write_begin(&b->seq);
		for (int i = 0; i < CODEMAP_PAGE_ENTRIES; i++)
			if (b->piece[i].tag == tag)
				__atomic_store_n(&b->piece[i].tag, 0, __ATOMIC_RELAXED);
		codemap_write_end(&b->seq);
	}
}

static void codemap_add(uint64_t method, uintptr_t start, uintptr_t len, int level,
			unsigned frame)
{
	struct codemap_slot *s;
	int free_ix = -1;

	if (!codemap_slots || !method || !len)
		return;
	pthread_mutex_lock(&codemap_lock);
	s = codemap_slot(method, true);
	if (!s) {
		codemap_full++;
		goto out;
	}
	for (int i = 0; i < CODEMAP_RANGES; i++) {
		if (s->end[i] && s->start[i] == start)
			free_ix = i;         /* replayed: the same nmethod again */
		else if (!s->end[i] && free_ix < 0)
			free_ix = i;
	}
	if (free_ix < 0) {
		/* More live nmethods than kept: the oldest is dropped (its
		 * frames then show as unknown, never as another type). */
		free_ix = 0;
		codemap_full++;
		codemap_index_remove(s->start[0], s->end[0] - s->start[0], method);
	}
	codemap_write_begin(&s->seq);
	__atomic_store_n(&s->start[free_ix], start, __ATOMIC_RELAXED);
	__atomic_store_n(&s->end[free_ix], start + len, __ATOMIC_RELAXED);
	__atomic_store_n(&s->level[free_ix], (uint8_t)level, __ATOMIC_RELAXED);
	__atomic_store_n(&s->frame[free_ix], (uint16_t)(frame <= UINT16_MAX ? frame : 0),
			 __ATOMIC_RELAXED);
	codemap_write_end(&s->seq);
	codemap_index_add(start, len, method);
out:
	pthread_mutex_unlock(&codemap_lock);
}

static void codemap_remove(uint64_t method, uintptr_t start)
{
	struct codemap_slot *s;

	if (!codemap_slots)
		return;
	pthread_mutex_lock(&codemap_lock);
	s = codemap_slot(method, false);
	for (int i = 0; s && i < CODEMAP_RANGES; i++) {
		if (s->end[i] && s->start[i] == start) {
			codemap_index_remove(start, s->end[i] - start, method);
			codemap_write_begin(&s->seq);
			__atomic_store_n(&s->end[i], 0, __ATOMIC_RELAXED);
			__atomic_store_n(&s->start[i], 0, __ATOMIC_RELAXED);
			codemap_write_end(&s->seq);
		}
	}
	pthread_mutex_unlock(&codemap_lock);
}

static void JNICALL codemap_on_load(jvmtiEnv *jvmti, jmethodID method, jint code_size,
				    const void *code_addr, jint map_length,
				    const jvmtiAddrLocationMap *map, const void *compile_info)
{
	uint64_t id = (uint64_t)(uintptr_t)method;

	/* The tier and frame size are read here, on a JVMTI thread: the
	 * handler only looks them up. */
	if (code_size > 0)
		codemap_add(id, (uintptr_t)code_addr, (uintptr_t)code_size,
			    vmstructs_comp_level(id, (uintptr_t)code_addr),
			    vmstructs_frame_words(id, (uintptr_t)code_addr));
	javawalk_method_load(jvmti, code_addr, code_size, compile_info);
}

static void JNICALL codemap_on_unload(jvmtiEnv *jvmti, jmethodID method, const void *code_addr)
{
	codemap_remove((uint64_t)(uintptr_t)method, (uintptr_t)code_addr);
	javawalk_method_unload(code_addr);
}

/* What kind of leaf a stub HotSpot announced is, by its name (as JDK 17
 * and 25 post them: "call_stub", "I2C/C2I adapters(0xbbeb)", "_invokeBasic",
 * "_linkToVirtual", "jint_disjoint_arraycopy", "resolve_virtual_call",
 * "ic_miss_stub"; "vtable stub" and "itable stub" when a thread with JVMTI
 * state creates one, which compiler threads do not have). */
static uint64_t codemap_stub_kind(const char *name)
{
	static const struct {
		const char *prefix;
		uint64_t kind;
	} kinds[] = {
		{ "vtable stub", JPRING_STUB_VTABLE },
		{ "itable stub", JPRING_STUB_ITABLE },
		{ "call_stub", JPRING_STUB_CALL },
		{ "I2C/C2I adapters", JPRING_STUB_ADAPTER },
		{ "_invokeBasic", JPRING_STUB_METHOD_HANDLE },
		{ "_linkTo", JPRING_STUB_METHOD_HANDLE },
		{ "_invokeGeneric", JPRING_STUB_METHOD_HANDLE },
		{ "MethodHandlesAdapterBlob", JPRING_STUB_METHOD_HANDLE },
		{ "resolve_", JPRING_STUB_RESOLVE },
		{ "ic_miss_stub", JPRING_STUB_RESOLVE },
		{ "wrong_method", JPRING_STUB_RESOLVE },
		{ "Interpreter", JPRING_STUB_INTERPRETER },
	};

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (!strncmp(name, kinds[i].prefix, strlen(kinds[i].prefix)))
			return kinds[i].kind;
	if (strstr(name, "arraycopy"))
		return JPRING_STUB_ARRAYCOPY;
	return JPRING_STUB_OTHER;
}

static void JNICALL codemap_on_dynamic(jvmtiEnv *jvmti, const char *name, const void *address,
				       jint length)
{
	bool interp;
	unsigned n;

	javawalk_code_generated(jvmti);
	if (!name || length <= 0)
		return;
	/* HotSpot's template interpreter is one blob by this name. */
	interp = !strcmp(name, "Interpreter");
	pthread_mutex_lock(&codemap_lock);
	if (interp || (uint32_t)length <= CODEMAP_STUB_MAX)
		codemap_index_add((uintptr_t)address, (uintptr_t)length, codemap_stub_kind(name));
	if (!interp)
		goto out;
	n = codemap_ninterp;
	for (unsigned i = 0; i < n; i++)
		if (codemap_interp_start[i] == (uintptr_t)address)
			goto out;
	if (n < CODEMAP_INTERP_MAX) {
		codemap_interp_start[n] = (uintptr_t)address;
		codemap_interp_end[n] = (uintptr_t)address + (uintptr_t)length;
		__atomic_store_n(&codemap_ninterp, n + 1, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&codemap_lock);
}

bool codemap_setup(jvmtiEnv *jvmti, jvmtiEventCallbacks *cb)
{
	jvmtiCapabilities caps = { .can_generate_compiled_method_load_events = 1 };
	char *info = NULL;

	if (!codemap_slots || (*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE)
		return false;
	/* Without it compiled frames are typed compiled, not C1 or C2. */
	vmstructs_init();
	if ((*jvmti)->GetSystemProperty(jvmti, "java.vm.info", &info) == JVMTI_ERROR_NONE && info) {
		/* -Xint: "interpreted mode, sharing" */
		codemap_xint = strstr(info, "interpreted mode") != NULL;
		(*jvmti)->Deallocate(jvmti, (unsigned char *)info);
	}
	cb->CompiledMethodLoad = codemap_on_load;
	cb->CompiledMethodUnload = codemap_on_unload;
	cb->DynamicCodeGenerated = codemap_on_dynamic;
	return true;
}

void codemap_replay(jvmtiEnv *jvmti)
{
	if (!codemap_slots)
		return;
	vmstructs_load_heaps();
	vmstructs_load_intrinsics();
	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_COMPILED_METHOD_LOAD);
	if (codemap_full)
		agent_debug("code map full: %lu compiled methods or pages untyped", codemap_full);
}

bool codemap_all_interpreted(void)
{
	return codemap_xint;
}

bool codemap_in_interpreter(uintptr_t pc)
{
	unsigned n = __atomic_load_n(&codemap_ninterp, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++)
		if (pc >= codemap_interp_start[i] && pc < codemap_interp_end[i])
			return true;
	return false;
}

/* The range of method's live compiled code holding pc: true and its level
 * and frame size, or false (also when a concurrent change made it unsure). */
static bool codemap_range(uint64_t method, uintptr_t pc, uint8_t *level, uint16_t *frame)
{
	const struct codemap_slot *s;
	uint32_t h, seq;
	bool found = false;

	if (!codemap_slots || !method)
		return false;
	h = codemap_hash(method);
	for (unsigned i = 0; i < CODEMAP_PROBES; i++) {
		uint64_t k;

		s = &codemap_slots[(h + i) & (CODEMAP_SLOTS - 1)];
		k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
		if (!k)
			return false;
		if (k == method)
			break;
		if (i + 1 == CODEMAP_PROBES)
			return false;
	}
	seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return false;
	for (int r = 0; r < CODEMAP_RANGES; r++) {
		uintptr_t a = __atomic_load_n(&s->start[r], __ATOMIC_RELAXED);
		uintptr_t b = __atomic_load_n(&s->end[r], __ATOMIC_RELAXED);

		if (b && pc >= a && pc < b) {
			*level = __atomic_load_n(&s->level[r], __ATOMIC_RELAXED);
			*frame = __atomic_load_n(&s->frame[r], __ATOMIC_RELAXED);
			found = true;
		}
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return found && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq;
}

int codemap_in_method(uint64_t method, uintptr_t pc)
{
	uint8_t level;
	uint16_t frame;

	if (!codemap_range(method, pc, &level, &frame))
		return 0;
	/* Tiers 1-3 are C1's; 4 is C2's. */
	return level >= 1 && level <= 3 ? JPRING_TYPE_C1 : JPRING_TYPE_COMPILED;
}

unsigned codemap_frame_words(uint64_t method, uintptr_t pc)
{
	uint8_t level;
	uint16_t frame;

	return codemap_range(method, pc, &level, &frame) ? frame : 0;
}

uint64_t codemap_leaf(uintptr_t pc)
{
	const struct codemap_page *b = NULL;
	uint64_t page = pc >> CODEMAP_PAGE_SHIFT, tag = 0;
	uint16_t off = (uint16_t)(pc & (CODEMAP_PAGE_SIZE - 1));
	uint32_t h, seq;

	if (!codemap_pages)
		return 0;
	h = codemap_hash(page);
	for (unsigned i = 0; i < CODEMAP_PAGE_PROBES && !b; i++) {
		const struct codemap_page *c = &codemap_pages[(h + i) & (CODEMAP_PAGES - 1)];
		uint64_t k = __atomic_load_n(&c->key, __ATOMIC_ACQUIRE);

		if (!k)
			break;
		if (k == page + 1)
			b = c;
	}
	if (b) {
		seq = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
		if (seq & 1)
			return 0;
		for (int i = 0; i < CODEMAP_PAGE_ENTRIES; i++) {
			uint64_t t = __atomic_load_n(&b->piece[i].tag, __ATOMIC_RELAXED);

			if (t && off >= __atomic_load_n(&b->piece[i].start, __ATOMIC_RELAXED) &&
			    off < __atomic_load_n(&b->piece[i].end, __ATOMIC_RELAXED))
				tag = t;
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) != seq)
			return 0;
	}
	/* HotSpot announces vtable and itable stubs only when the creating
	 * thread has JVMTI state, which compiler threads, which make most of
	 * them, do not, and never the MethodHandle intrinsics' nmethods (C2
	 * inlines or calls them frameless): find their blob in the code cache
	 * instead. */
	if (!tag) {
		static const uint64_t of_blob[VMSTRUCTS_BLOB_KINDS] = {
			[VMSTRUCTS_BLOB_VTABLE_CHUNKS] = JPRING_STUB_DISPATCH,
			[VMSTRUCTS_BLOB_INVOKE_BASIC] = JPRING_STUB_INVOKE_BASIC,
			[VMSTRUCTS_BLOB_LINK_TO_VIRTUAL] = JPRING_STUB_LINK_TO_VIRTUAL,
			[VMSTRUCTS_BLOB_LINK_TO_STATIC] = JPRING_STUB_LINK_TO_STATIC,
			[VMSTRUCTS_BLOB_LINK_TO_SPECIAL] = JPRING_STUB_LINK_TO_SPECIAL,
			[VMSTRUCTS_BLOB_LINK_TO_INTERFACE] = JPRING_STUB_LINK_TO_INTERFACE,
			[VMSTRUCTS_BLOB_LINK_TO_NATIVE] = JPRING_STUB_LINK_TO_NATIVE,
		};
		int kind = vmstructs_blob_kind(pc);

		if (kind > 0 && kind < VMSTRUCTS_BLOB_KINDS)
			tag = of_blob[kind];
	}
	return tag;
}
