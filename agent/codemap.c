#include "codemap.h"

#include "agent.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define CODEMAP_SLOTS (1u << 15)     /* methods with compiled code at once */
#define CODEMAP_RANGES 3             /* live nmethods of one method: C1, C2, OSR */
#define CODEMAP_PROBES 32
#define CODEMAP_INTERP_MAX 8

struct codemap_slot {
	uint64_t key;                /* jmethodID; 0 = free; once set, never changes */
	uint32_t seq;                /* odd while a writer changes the ranges */
	uint32_t reserved;
	uintptr_t start[CODEMAP_RANGES];
	uintptr_t end[CODEMAP_RANGES];   /* 0 = unused */
};

static struct codemap_slot *codemap_slots;
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

static void codemap_write_begin(struct codemap_slot *s)
{
	__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void codemap_write_end(struct codemap_slot *s)
{
	__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELEASE);
}

static void codemap_add(uint64_t method, uintptr_t start, uintptr_t len)
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
	}
	codemap_write_begin(s);
	__atomic_store_n(&s->start[free_ix], start, __ATOMIC_RELAXED);
	__atomic_store_n(&s->end[free_ix], start + len, __ATOMIC_RELAXED);
	codemap_write_end(s);
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
			codemap_write_begin(s);
			__atomic_store_n(&s->end[i], 0, __ATOMIC_RELAXED);
			__atomic_store_n(&s->start[i], 0, __ATOMIC_RELAXED);
			codemap_write_end(s);
		}
	}
	pthread_mutex_unlock(&codemap_lock);
}

static void JNICALL codemap_on_load(jvmtiEnv *jvmti, jmethodID method, jint code_size,
				    const void *code_addr, jint map_length,
				    const jvmtiAddrLocationMap *map, const void *compile_info)
{
	if (code_size > 0)
		codemap_add((uint64_t)(uintptr_t)method, (uintptr_t)code_addr, (uintptr_t)code_size);
}

static void JNICALL codemap_on_unload(jvmtiEnv *jvmti, jmethodID method, const void *code_addr)
{
	codemap_remove((uint64_t)(uintptr_t)method, (uintptr_t)code_addr);
}

static void JNICALL codemap_on_dynamic(jvmtiEnv *jvmti, const char *name, const void *address,
				       jint length)
{
	unsigned n;

	/* HotSpot's template interpreter is one blob by this name. */
	if (!name || strcmp(name, "Interpreter") != 0 || length <= 0)
		return;
	pthread_mutex_lock(&codemap_lock);
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
	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_COMPILED_METHOD_LOAD);
	if (codemap_full)
		agent_debug("code map full: %lu compiled methods untyped", codemap_full);
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

bool codemap_in_method(uint64_t method, uintptr_t pc)
{
	const struct codemap_slot *s;
	uint32_t h, seq;
	bool in = false;

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

		if (b && pc >= a && pc < b)
			in = true;
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return in && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq;
}
