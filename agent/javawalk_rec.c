/* The inline records of compiled methods (JVMTI CompiledMethodLoad's
 * PCStackInfo), kept per nmethod in a lock-free open-addressed table: the
 * JVMTI callbacks write it under jw.lock, the signal handler reads it
 * through agent_peek and each slot's seq (jw_scopes_at). */
#include "javawalk_int.h"

#include "agent.h"

#include <errno.h>
#include <jvmticmlr.h>
#include <stdlib.h>

static uint32_t jw_hash(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (uint32_t)key & (JW_SLOTS - 1);
}

/* The slot of key, or NULL; with create, a free one is claimed for it
 * (writers, under jw.lock). The handler looks up too: a slot's key, once
 * set, never changes. */
struct jw_slot *jw_find(uint64_t key, bool create)
{
	uint32_t h = jw_hash(key);
	struct jw_slot *s = NULL;
	uint64_t k = 0;

	for (unsigned i = 0; i < JW_PROBES; i++) {
		s = &jw.slots[(h + i) & (JW_SLOTS - 1)];
		k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
		if (k == key || !k)
			break;
	}
	if (k == key)
		return s;
	if (k || !create)
		return NULL;
	__atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
	return s;
}

/* Replaces the slot's record (NULL: none) and end; frees the old record
 * after the seq says it changed. Writers only. */
void jw_slot_set(struct jw_slot *s, uintptr_t end, struct jw_rec *rec)
{
	struct jw_rec *old = (struct jw_rec *)s->rec;

	__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&s->end, end, __ATOMIC_RELAXED);
	__atomic_store_n(&s->rec, (uintptr_t)rec, __ATOMIC_RELAXED);
	__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELEASE);
	if (old) {
		jw.bytes -= old->bytes;
		free(old);
	}
}

/* The inline records of compile_info as one block, or NULL (none, or over
 * the bound). */
struct jw_rec *jw_rec_build(uintptr_t code, uintptr_t end, const void *compile_info)
{
	const jvmtiCompiledMethodLoadRecordHeader *h = compile_info;
	const jvmtiCompiledMethodLoadInlineRecord *ir = NULL;
	uint32_t npcs = 0, nscopes = 0, *pc_off, *first;
	struct jw_scope *scopes;
	struct jw_rec *rec;
	uintptr_t last = 0;
	size_t bytes;

	for (unsigned i = 0; h && i < 16; h = h->next, i++)
		if (h->kind == JVMTI_CMLR_INLINE_INFO)
			ir = (const jvmtiCompiledMethodLoadInlineRecord *)h;
	if (!ir || ir->numpcs <= 0 || !ir->pcinfo)
		return NULL;
	for (jint i = 0; i < ir->numpcs; i++) {
		const PCStackInfo *pi = &ir->pcinfo[i];

		/* Ascending pcs inside the code, a sane scope count: else the
		 * whole method's records are not trusted. */
		if ((uintptr_t)pi->pc < code || (uintptr_t)pi->pc >= end ||
		    (npcs && (uintptr_t)pi->pc < last) || pi->numstackframes <= 0 ||
		    pi->numstackframes > JW_INLINE_MAX)
			return NULL;
		/* Several descriptors at one pc: the last one stands. */
		if (!npcs || (uintptr_t)pi->pc != last)
			npcs++;
		last = (uintptr_t)pi->pc;
		nscopes += (uint32_t)pi->numstackframes;
	}
	bytes = sizeof(*rec) + 2 * sizeof(uint32_t) * npcs + sizeof(uint32_t) +
		sizeof(struct jw_scope) * nscopes;
	bytes = (bytes + 7) & ~(size_t)7;
	if (jw.bytes + bytes > JW_BYTES_MAX)
		return NULL;
	rec = calloc(1, bytes);
	if (!rec)
		return NULL;
	pc_off = (uint32_t *)(rec + 1);
	first = pc_off + npcs;
	scopes = (struct jw_scope *)(((uintptr_t)(first + npcs + 1) + 7) & ~(uintptr_t)7);
	npcs = 0;
	nscopes = 0;
	for (jint i = 0; i < ir->numpcs; i++) {
		const PCStackInfo *pi = &ir->pcinfo[i];
		uint32_t off = (uint32_t)((uintptr_t)pi->pc - code);

		if (npcs && pc_off[npcs - 1] == off)
			nscopes = first[--npcs];
		pc_off[npcs] = off;
		first[npcs++] = nscopes;
		for (jint j = 0; j < pi->numstackframes; j++) {
			scopes[nscopes].method = (uint64_t)(uintptr_t)pi->methods[j];
			scopes[nscopes++].bci = pi->bcis[j];
		}
	}
	first[npcs] = nscopes;
	rec->npcs = npcs;
	rec->nscopes = nscopes;
	rec->bytes = bytes;
	jw.bytes += bytes;
	return rec;
}

#if defined(__x86_64__)

/* The scopes at a return address pc of the compiled code at code: 0 and
 * *n set, or -ENOENT (no record at pc), -EAGAIN (changed meanwhile). */
int jw_scopes_at(uintptr_t code, uintptr_t pc, struct jw_scope *out, uint32_t *n)
{
	const struct jw_slot *s = jw_find(code, false);
	uint32_t seq, lo, hi, off, first[2], npcs, nscopes;
	struct jw_rec rec;
	uintptr_t r, end, pcs, scopes;

	if (!s)
		return -ENOENT;
	seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return -EAGAIN;
	end = __atomic_load_n(&s->end, __ATOMIC_RELAXED);
	r = __atomic_load_n(&s->rec, __ATOMIC_RELAXED);
	if (!r || pc < code || pc >= end || !agent_peek(r, &rec, sizeof(rec)))
		return -ENOENT;
	npcs = rec.npcs;
	nscopes = rec.nscopes;
	pcs = r + sizeof(rec);
	scopes = ((pcs + 2 * sizeof(uint32_t) * npcs + sizeof(uint32_t)) + 7) & ~(uintptr_t)7;
	off = (uint32_t)(pc - code);
	/* Binary search: at most 32 steps of one read each. */
	lo = 0;
	hi = npcs;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2, v;

		if (!agent_peek(pcs + mid * sizeof(uint32_t), &v, sizeof(v)))
			return -EAGAIN;
		if (v < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo >= npcs || !agent_peek(pcs + lo * sizeof(uint32_t), &off, sizeof(off)) ||
	    off != (uint32_t)(pc - code) ||
	    !agent_peek(pcs + (npcs + lo) * sizeof(uint32_t), first, sizeof(first)))
		return -ENOENT;
	if (first[1] <= first[0] || first[1] > nscopes || first[1] - first[0] > JW_INLINE_MAX ||
	    !agent_peek(scopes + first[0] * sizeof(struct jw_scope), out,
			(first[1] - first[0]) * sizeof(struct jw_scope)))
		return -EAGAIN;
	*n = first[1] - first[0];
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq ? 0 : -EAGAIN;
}
#endif
