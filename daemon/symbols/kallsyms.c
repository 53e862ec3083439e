#include "kallsyms.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"

struct kallsyms_sym {
	uint64_t addr;
	uint32_t name_off;  /* into names */
	uint32_t mod_off;   /* into names; 0 = "" (vmlinux) */
	uint32_t order;     /* line number: stable choice among aliases */
	uint8_t global;     /* 'T'/'W': preferred among aliases */
};

struct kallsyms {
	struct kallsyms_sym *syms;
	size_t nsyms;
	struct buf names;   /* starts with "" so offset 0 is the empty name */
	uint64_t etext;     /* end of vmlinux core text, 0 if unknown */
	bool available;
};

static int kallsyms_add_string(struct kallsyms *k, const char *s, size_t len, uint32_t *off)
{
	if (k->names.len + len + 1 > UINT32_MAX)
		return -ENOMEM;
	*off = (uint32_t)k->names.len;
	if (buf_append(&k->names, s, len) < 0 || buf_putc(&k->names, '\0') < 0)
		return -ENOMEM;
	return 0;
}

/* Parses one line; returns 1 if it is a text symbol (stored), 0 if skipped,
 * -ENOMEM. *last_mod caches the previous line's module: modules come in
 * contiguous runs, so this dedups module names without a hash table. */
static int kallsyms_parse_line(struct kallsyms *k, const char *p, const char *end,
			       size_t *cap, uint32_t order, uint32_t *last_mod)
{
	struct kallsyms_sym sym = { 0 };
	const char *name, *mod = NULL;
	size_t name_len, mod_len = 0, ndigits = 0;
	char type;
	int ret = 0;

	while (p < end && ndigits <= 16) {
		char c = *p;
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			break;
		sym.addr = (sym.addr << 4) | d;
		ndigits++;
		p++;
	}
	if (ndigits == 0 || ndigits > 16 || end - p < 4 || p[0] != ' ' || p[2] != ' ')
		goto out;
	type = p[1];
	p += 3;
	name = p;
	while (p < end && *p != ' ' && *p != '\t')
		p++;
	name_len = (size_t)(p - name);
	if (name_len == 0)
		goto out;
	/* _etext marks the end of core text; it names no function. */
	if (name_len == 6 && memcmp(name, "_etext", 6) == 0) {
		k->etext = sym.addr;
		goto out;
	}
	if (type != 't' && type != 'T' && type != 'w' && type != 'W')
		goto out;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p < end && *p == '[') {
		const char *close = memchr(p, ']', (size_t)(end - p));

		if (!close)
			goto out;
		mod = p + 1;
		mod_len = (size_t)(close - mod);
	}
	if (sym.addr)
		k->available = true;
	if (kallsyms_add_string(k, name, name_len, &sym.name_off) < 0) {
		ret = -ENOMEM;
		goto out;
	}
	if (mod_len) {
		const char *prev = k->names.data + *last_mod;

		if (*last_mod && strlen(prev) == mod_len && memcmp(prev, mod, mod_len) == 0) {
			sym.mod_off = *last_mod;
		} else {
			if (kallsyms_add_string(k, mod, mod_len, &sym.mod_off) < 0) {
				ret = -ENOMEM;
				goto out;
			}
			*last_mod = sym.mod_off;
		}
	}
	sym.order = order;
	sym.global = type == 'T' || type == 'W';
	if (k->nsyms == *cap) {
		size_t ncap = *cap ? *cap * 2 : 4096;
		struct kallsyms_sym *n = realloc(k->syms, ncap * sizeof(*n));

		if (!n) {
			ret = -ENOMEM;
			goto out;
		}
		k->syms = n;
		*cap = ncap;
	}
	k->syms[k->nsyms++] = sym;
	ret = 1;
out:
	return ret;
}

static int kallsyms_cmp(const void *a, const void *b)
{
	const struct kallsyms_sym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->global != y->global)
		return x->global ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

int kallsyms_parse(const char *text, size_t len, struct kallsyms **out)
{
	struct kallsyms *k;
	const char *p = text, *end = text + len;
	size_t cap = 0, w = 0;
	uint32_t order = 0, last_mod = 0;
	int ret = -ENOMEM;

	*out = NULL;
	k = calloc(1, sizeof(*k));
	if (!k)
		goto out;
	if (buf_putc(&k->names, '\0') < 0)
		goto out;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;

		if (kallsyms_parse_line(k, p, eol, &cap, order++, &last_mod) < 0)
			goto out;
		p = eol + 1;
	}
	if (k->nsyms) {
		qsort(k->syms, k->nsyms, sizeof(*k->syms), kallsyms_cmp);
		/* One entry per address: the preferred alias. */
		for (size_t r = 1; r < k->nsyms; r++)
			if (k->syms[r].addr != k->syms[w].addr)
				k->syms[++w] = k->syms[r];
		k->nsyms = w + 1;
	}
	*out = k;
	k = NULL;
	ret = 0;
out:
	kallsyms_free(k);
	return ret;
}

int kallsyms_load(const char *path, struct kallsyms **out)
{
	struct buf b = BUF_INIT;
	int ret;

	*out = NULL;
	ret = buf_read_file(&b, path ? path : "/proc/kallsyms", 65536);
	if (ret == 0)
		ret = kallsyms_parse(b.data ? b.data : "", b.len, out);
	buf_release(&b);
	return ret;
}

void kallsyms_free(struct kallsyms *k)
{
	if (!k)
		return;
	free(k->syms);
	buf_release(&k->names);
	free(k);
}

bool kallsyms_available(const struct kallsyms *k)
{
	return k && k->available;
}

size_t kallsyms_count(const struct kallsyms *k)
{
	return k ? k->nsyms : 0;
}

int kallsyms_lookup(const struct kallsyms *k, uint64_t addr, const char **name,
		    const char **module, uint64_t *sym_addr)
{
	const struct kallsyms_sym *s;
	size_t lo = 0, hi;
	uint64_t end;

	if (!kallsyms_available(k))
		return -ENODATA;
	hi = k->nsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (k->syms[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -ENOENT;
	s = &k->syms[lo - 1];
	/* Core kernel text ends at _etext; past that (init text, modules,
	 * BPF) a symbol extends to the next one of the same module, and the
	 * last of a module only by a bounded tail. */
	if (s->mod_off == 0 && k->etext && s->addr < k->etext) {
		end = k->etext;
	} else if (lo < k->nsyms && k->syms[lo].mod_off == s->mod_off) {
		end = k->syms[lo].addr;
	} else {
		end = s->addr + KALLSYMS_TAIL_SPAN;
		if (end < s->addr)
			end = UINT64_MAX;
	}
	if (addr >= end)
		return -ENOENT;
	*name = k->names.data + s->name_off;
	*module = k->names.data + s->mod_off;
	if (sym_addr)
		*sym_addr = s->addr;
	return 0;
}

int kallsyms_find(const struct kallsyms *k, const char *name, uint64_t *addr)
{
	for (size_t i = 0; k && i < k->nsyms; i++) {
		if (strcmp(k->names.data + k->syms[i].name_off, name) == 0) {
			*addr = k->syms[i].addr;
			return 0;
		}
	}
	return -ENOENT;
}
