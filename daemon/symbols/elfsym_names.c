/* Looking up and printing symbol names (elfsym_int.h): the symbol covering
 * an address, demangled names, and names made safe for any output. */
#include "elfsym_int.h"

#include <demangle.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfmeta.h"
#include "gopclntab.h"
#include "htab.h"
#include "log.h"

static bool elfsym_covers(const struct elfsym_sym *s, uint64_t vaddr)
{
	if (vaddr < s->value)
		return false;
	if (s->size == 0)
		return vaddr == s->value;
	return vaddr - s->value < s->size;
}

/* The formatted name of the name at off, cached per name (symbols sharing
 * a name share the entry) while the cache is under ELFSYM_PRETTY_MAX. */
static void elfsym_pretty(struct elfsym *e, uint32_t off, char *name, size_t name_size)
{
	const char *raw = e->names + off;
	uint64_t *slot = htab_map_get(&e->pretty, off);
	char tmp[ELFSYM_NAME_MAX];
	size_t len;
	char *dup;

	if (slot) {
		snprintf(name, name_size, "%s", (const char *)(uintptr_t)*slot);
		return;
	}
	len = elfsym_format_name(raw, tmp, sizeof(tmp));
	snprintf(name, name_size, "%s", tmp);
	if (e->pretty_bytes + len + 1 > ELFSYM_PRETTY_MAX)
		return;
	dup = strdup(tmp);
	if (!dup)
		return;
	if (htab_map_put(&e->pretty, off, (uint64_t)(uintptr_t)dup) < 0) {
		free(dup);  /* out of memory: no cache */
		return;
	}
	e->pretty_bytes += len + 1;
}

int elfsym_lookup(struct elfsym *e, uint64_t vaddr, char *name, size_t name_size,
		  uint64_t *sym_start)
{
	size_t lo = 0, hi, idx;

	if (!e || e->nsyms == 0 || name_size == 0)
		return -ENOENT;
	hi = e->nsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e->syms[mid].value <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (idx = lo; idx > 0 && lo - idx < ELFSYM_BACKSCAN; idx--)
		if (elfsym_covers(&e->syms[idx - 1], vaddr))
			break;
	if (idx == 0 || lo - idx >= ELFSYM_BACKSCAN)
		return -ENOENT;
	idx--;
	if (sym_start)
		*sym_start = e->syms[idx].value;
	elfsym_pretty(e, e->syms[idx].name, name, name_size);
	return 0;
}

int elfsym_find(const struct elfsym *e, const char *raw_name, uint64_t *value, uint64_t *size)
{
	for (size_t i = 0; e && i < e->nsyms; i++) {
		if (strcmp(e->names + e->syms[i].name, raw_name) == 0) {
			*value = e->syms[i].value;
			*size = e->syms[i].size;
			return 0;
		}
	}
	return -ENOENT;
}

size_t elfsym_format_name(const char *raw, char *out, size_t out_size)
{
	/* Names past ELFSYM_DEMANGLE_MAX are not demangled, and no more of
	 * them is shown than ELFSYM_NAME_MAX: their length is never needed. */
	size_t len = strnlen(raw, ELFSYM_DEMANGLE_MAX), n;
	char *dm = NULL;

	if (len < ELFSYM_DEMANGLE_MAX && raw[0] == '_' && (raw[1] == 'Z' || raw[1] == 'R'))
		dm = cplus_demangle(raw, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
	if (dm)
		n = elfsym_sanitize(dm, strlen(dm), out, out_size);
	else
		n = elfsym_sanitize(raw, len, out, out_size);
	free(dm);
	return n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t elfsym_utf8_len(const unsigned char *s, size_t avail, uint32_t *cp)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		*cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		*cp = c & 0x0f;
		if (c == 0xe0)
			lo = 0xa0;  /* overlong */
		else if (c == 0xed)
			hi = 0x9f;  /* UTF-16 surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		*cp = c & 0x07;
		if (c == 0xf0)
			lo = 0x90;  /* overlong */
		else if (c == 0xf4)
			hi = 0x8f;  /* above U+10FFFF */
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		unsigned char b = s[i];

		if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
			return 0;
		*cp = (*cp << 6) | (b & 0x3f);
	}
	return n;
}

size_t elfsym_sanitize(const char *in, size_t len, char *out, size_t out_size)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t i = 0, w = 0;

	if (out_size == 0)
		return 0;
	while (i < len) {
		uint32_t cp;
		size_t n = elfsym_utf8_len(s + i, len - i, &cp);

		if (n == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
			/* Escape each byte of the offending sequence (one byte
			 * when invalid). */
			size_t k = n ? n : 1;

			if (w + 4 * k + 1 > out_size)
				break;
			for (size_t j = 0; j < k; j++) {
				snprintf(out + w, out_size - w, "\\x%02x", s[i + j]);
				w += 4;
			}
			i += k;
			continue;
		}
		if (w + n + 1 > out_size)
			break;
		memcpy(out + w, s + i, n);
		w += n;
		i += n;
	}
	out[w] = '\0';
	return w;
}

