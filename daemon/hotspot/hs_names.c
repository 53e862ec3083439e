/* Method* -> "package.Class.method", read from the JVM's metadata:
 * Method -> ConstMethod -> (name index, ConstantPool) -> the pool's slot
 * (the name Symbol) and its holder Klass -> the class name Symbol.
 *
 * The cache is keyed by Method*, and a Method's memory may be freed (class
 * unloading, redefinition) and reused for another method. So an entry is
 * never trusted alone: a hit re-reads, in one process_vm_readv, every link
 * the name was derived from (the ConstMethod, the pool, the name index, the
 * pool's slot, the holder, the class Symbol) and both Symbols' bytes, and
 * is used only if all are what they were; otherwise the name is read again
 * from scratch. A hit costs one system call instead of nine dependent ones,
 * and a reused Method can only be named by what its memory now says. */
#include "hs_int.h"

#include "elfsym.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* What the name is derived from, read fresh. */
struct hs_chain {
	uint64_t cmethod, cpool, klass, class_sym, name_sym;
	uint16_t name_index, class_len, name_len;
	char class_raw[HS_SYMBOL_MAX], name_raw[HS_SYMBOL_MAX];
};

static bool hs_names_ready(const struct hs_offsets *o)
{
	return o->method_const >= 0 && o->cmethod_constants >= 0 && o->cmethod_name_index >= 0 &&
	       o->cpool_holder >= 0 && o->cpool_length >= 0 && o->cpool_size > 0 &&
	       o->klass_name >= 0 && o->symbol_length >= 0 && o->symbol_body >= 0;
}

static int hs_symbol(struct hs *h, uint64_t sym, char *raw, uint16_t *len)
{
	int ret = hs_read(h, sym + (uint64_t)h->off.symbol_length, len, sizeof(*len));

	if (ret < 0)
		return ret;
	if (*len == 0 || *len > HS_SYMBOL_MAX)
		return -EBADMSG;
	return hs_read(h, sym + (uint64_t)h->off.symbol_body, raw, *len);
}

static int hs_chain_read(struct hs *h, uint64_t method, struct hs_chain *c)
{
	const struct hs_offsets *o = &h->off;
	int32_t cp_len;
	int ret;

	ret = hs_read(h, method + (uint64_t)o->method_const, &c->cmethod, 8);
	if (ret < 0)
		return ret;
	ret = hs_read(h, c->cmethod + (uint64_t)o->cmethod_constants, &c->cpool, 8);
	if (ret < 0)
		return ret;
	ret = hs_read(h, c->cmethod + (uint64_t)o->cmethod_name_index, &c->name_index, 2);
	if (ret < 0)
		return ret;
	ret = hs_read(h, c->cpool + (uint64_t)o->cpool_length, &cp_len, 4);
	if (ret < 0)
		return ret;
	/* Slot 0 of a constant pool is unused. */
	if (c->name_index == 0 || (int32_t)c->name_index >= cp_len)
		return -EBADMSG;
	ret = hs_read(h, c->cpool + (uint64_t)o->cpool_size + 8u * c->name_index, &c->name_sym, 8);
	if (ret < 0)
		return ret;
	ret = hs_read(h, c->cpool + (uint64_t)o->cpool_holder, &c->klass, 8);
	if (ret < 0)
		return ret;
	ret = hs_read(h, c->klass + (uint64_t)o->klass_name, &c->class_sym, 8);
	if (ret < 0)
		return ret;
	ret = hs_symbol(h, c->class_sym, c->class_raw, &c->class_len);
	if (ret < 0)
		return ret;
	return hs_symbol(h, c->name_sym, c->name_raw, &c->name_len);
}

/* "java/lang/String" + "valueOf" -> "java.lang.String.valueOf", as valid
 * UTF-8 without control characters (the bytes are the process's). */
static int hs_format(const struct hs_chain *c, char *buf, size_t size)
{
	char cls[HS_SYMBOL_MAX * 4 + 1], name[HS_SYMBOL_MAX * 4 + 1];
	size_t n;
	int w;

	elfsym_sanitize(c->class_raw, c->class_len, cls, sizeof(cls));
	elfsym_sanitize(c->name_raw, c->name_len, name, sizeof(name));
	for (n = 0; cls[n]; n++)
		if (cls[n] == '/')
			cls[n] = '.';
	w = snprintf(buf, size, "%s.%s", cls, name);
	return w < 0 || (size_t)w >= size ? -ENOSPC : 0;
}

/* The first of the two slots method may live in (two-way: a method
 * whose slot is taken by another hot one does not evict it every time). */
static size_t hs_set_of(uint64_t method)
{
	/* Method*s are 8-aligned metaspace addresses: mix before reducing. */
	method ^= method >> 29;
	method *= 0xbf58476d1ce4e5b9ull;
	return (size_t)(method >> 40) % (HS_NAME_CACHE / 2) * 2;
}

/* The hit check: every link and both Symbols' bytes, in one call. */
static bool hs_slot_valid(struct hs *h, uint64_t method, const struct hs_name_slot *s)
{
	const struct hs_offsets *o = &h->off;
	uint64_t cm, cp, k, cs, ns;
	uint16_t idx, clen, nlen;
	char craw[HS_SYMBOL_MAX], nraw[HS_SYMBOL_MAX];
	struct iovec l[10], r[10];
	const struct {
		void *buf;
		uint64_t addr;
		size_t len;
	} v[10] = {
		{ &cm, method + (uint64_t)o->method_const, 8 },
		{ &cp, s->cmethod + (uint64_t)o->cmethod_constants, 8 },
		{ &idx, s->cmethod + (uint64_t)o->cmethod_name_index, 2 },
		{ &k, s->cpool + (uint64_t)o->cpool_holder, 8 },
		{ &ns, s->cpool + (uint64_t)o->cpool_size + 8u * s->name_index, 8 },
		{ &cs, s->klass + (uint64_t)o->klass_name, 8 },
		{ &clen, s->class_sym + (uint64_t)o->symbol_length, 2 },
		{ craw, s->class_sym + (uint64_t)o->symbol_body, s->class_len },
		{ &nlen, s->name_sym + (uint64_t)o->symbol_length, 2 },
		{ nraw, s->name_sym + (uint64_t)o->symbol_body, s->name_len },
	};
	size_t total = 0;
	ssize_t n;

	for (size_t i = 0; i < 10; i++) {
		l[i].iov_base = v[i].buf;
		l[i].iov_len = v[i].len;
		r[i].iov_base = (void *)(uintptr_t)v[i].addr;
		r[i].iov_len = v[i].len;
		total += v[i].len;
	}
	h->st.reads++;
	n = process_vm_readv(h->pid, l, 10, r, 10, 0);
	if (n < 0 || (size_t)n != total)
		return false;
	h->st.bytes_read += total;
	return cm == s->cmethod && cp == s->cpool && idx == s->name_index && k == s->klass &&
	       ns == s->name_sym && cs == s->class_sym && clen == s->class_len &&
	       nlen == s->name_len && !memcmp(craw, s->raw, clen) &&
	       !memcmp(nraw, s->raw + clen, nlen);
}

static size_t hs_slot_bytes(const struct hs_name_slot *s)
{
	return s->text ? strlen(s->text) + 1 + s->class_len + s->name_len : 0;
}

static void hs_slot_fill(struct hs *h, struct hs_name_slot *s, uint64_t method,
			 const struct hs_chain *c, const char *text)
{
	size_t need = strlen(text) + 1 + c->class_len + c->name_len;
	char *t = NULL, *raw = NULL;

	h->names_bytes -= hs_slot_bytes(s);
	free(s->text);
	free(s->raw);
	memset(s, 0, sizeof(*s));
	/* Past the budget (a JVM of very long names): answered, not kept. */
	if (h->names_bytes + need > HS_NAME_CACHE_BYTES)
		return;
	t = strdup(text);
	raw = malloc((size_t)c->class_len + c->name_len);
	if (!t || !raw) {
		/* Not cached: the answer stands, the next lookup reads again. */
		free(t);
		free(raw);
		return;
	}
	memcpy(raw, c->class_raw, c->class_len);
	memcpy(raw + c->class_len, c->name_raw, c->name_len);
	*s = (struct hs_name_slot){ .method = method, .cmethod = c->cmethod, .cpool = c->cpool,
				    .klass = c->klass, .class_sym = c->class_sym,
				    .name_sym = c->name_sym, .name_index = c->name_index,
				    .class_len = c->class_len, .name_len = c->name_len,
				    .text = t, .raw = raw };
	h->names_bytes += need;
}

int hs_method_name(struct hs *h, uint64_t method, char *buf, size_t size)
{
	struct hs_name_slot *set, *s;
	struct hs_chain *c = NULL;
	int ret;

	if (!hs_names_ready(&h->off))
		return -ENOENT;
	if (!h->names) {
		h->names = calloc(HS_NAME_CACHE, sizeof(*h->names));
		if (!h->names)
			return -ENOMEM;
	}
	set = &h->names[hs_set_of(method)];
	s = set[1].method == method ? &set[1] : &set[0];
	if (s->method == method) {
		if (hs_slot_valid(h, method, s)) {
			h->st.name_hits++;
			s->used = ++h->names_tick;
			ret = snprintf(buf, size, "%s", s->text);
			return ret < 0 || (size_t)ret >= size ? -ENOSPC : 0;
		}
		h->st.name_stale++;
		s->method = 0;
	}
	h->st.name_misses++;
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	ret = hs_chain_read(h, method, c);
	if (ret < 0)
		goto out;
	ret = hs_format(c, buf, size);
	if (ret < 0)
		goto out;
	/* An empty slot of the set, else the one used least recently. */
	if (s->method != 0 && s->method != method)
		s = !set[0].method ? &set[0] : !set[1].method ? &set[1]
		    : set[0].used <= set[1].used ? &set[0] : &set[1];
	hs_slot_fill(h, s, method, c, buf);
	s->used = ++h->names_tick;
out:
	free(c);
	return ret;
}
