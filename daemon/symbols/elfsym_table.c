/* Reading an ELF symbol table into an elfsym (elfsym_int.h): the symbols a
 * profile can name, sorted, one per address, their names copied, within
 * the caller's limits. */
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

static uint8_t elfsym_bind_rank(unsigned bind)
{
	switch (bind) {
	case STB_GLOBAL: return 0;
	case STB_WEAK: return 1;
	case STB_LOCAL: return 2;
	default: return 3;
	}
}

/* Length of the name at off in a string table of slen bytes: up to the
 * NUL, or the '@' of a version suffix (.symtab may carry
 * "fnmatch@@GLIBC_2.2.5"; the function's name is what precedes it), and at
 * most ELFSYM_DEMANGLE_MAX bytes: a longer name is neither demangled nor
 * shown past ELFSYM_NAME_MAX, so the rest is never read. */
static size_t elfsym_name_len(const char *strs, size_t slen, size_t off)
{
	size_t max = slen - off < ELFSYM_DEMANGLE_MAX ? slen - off : ELFSYM_DEMANGLE_MAX;
	size_t n = 0;

	while (n < max && strs[off + n] != '\0' && strs[off + n] != '@')
		n++;
	return n;
}

/* Orders aliases' names (as elfsym_name_len cuts them). Only the first
 * ELFSYM_ALIAS_CMP_MAX bytes count: the cost of choosing among n aliases
 * stays n times that, whatever the names. */
static int elfsym_alias_cmp(const char *strs, size_t slen, size_t a, size_t b)
{
	size_t la = elfsym_name_len(strs, slen, a), lb = elfsym_name_len(strs, slen, b);
	size_t n = la < lb ? la : lb;
	int c;

	if (n > ELFSYM_ALIAS_CMP_MAX)
		n = ELFSYM_ALIAS_CMP_MAX;
	c = memcmp(strs + a, strs + b, n);
	if (c || n == ELFSYM_ALIAS_CMP_MAX)
		return c;
	return la < lb ? -1 : la > lb;
}

/* Reads a symbol table in order. A 64-bit table in host byte order is read
 * from the file a chunk at a time: libelf would read the whole section into
 * memory first (24 MB for a million symbols, on top of what is kept).
 * Others go through libelf (elf_getdata, gelf_getsym). */
#define ELFSYM_CHUNK 1024
struct elfsym_symiter {
	Elf_Data *data;             /* NULL: read from fd */
	int fd;
	uint64_t off;               /* the table's offset in the file */
	size_t n;                   /* entries */
	size_t first, count;        /* entries in chunk */
	Elf64_Sym chunk[ELFSYM_CHUNK];
};

static int elfsym_iter_init(struct elfsym_symiter *it, Elf *elf, int fd, Elf_Scn *scn,
			    const GElf_Shdr *shdr)
{
	static const uint16_t one = 1;
	GElf_Ehdr eh;

	it->first = it->count = 0;
	it->n = shdr->sh_size / shdr->sh_entsize;
	it->fd = -1;
	it->data = NULL;
	if (fd >= 0 && gelf_getclass(elf) == ELFCLASS64 && gelf_getehdr(elf, &eh) &&
	    eh.e_ident[EI_DATA] == (*(const uint8_t *)&one ? ELFDATA2LSB : ELFDATA2MSB) &&
	    shdr->sh_type != SHT_NOBITS && shdr->sh_entsize == sizeof(Elf64_Sym)) {
		it->fd = fd;
		it->off = shdr->sh_offset;
		return 0;
	}
	it->data = elf_getdata(scn, NULL);
	return it->data ? 0 : -ENOEXEC;
}

/* Entry i (i only grows, but may restart at 1). false past the end. */
static bool elfsym_iter_get(struct elfsym_symiter *it, size_t i, GElf_Sym *sym)
{
	ssize_t got;

	if (i >= it->n)
		return false;
	if (it->data)
		return gelf_getsym(it->data, (int)i, sym) != NULL;
	if (i < it->first || i >= it->first + it->count) {
		size_t want = it->n - i < ELFSYM_CHUNK ? it->n - i : ELFSYM_CHUNK;

		got = pread(it->fd, it->chunk, want * sizeof(Elf64_Sym),
			    (off_t)(it->off + i * sizeof(Elf64_Sym)));
		if (got < (ssize_t)sizeof(Elf64_Sym))
			return false;  /* the file is shorter than the table claims */
		it->first = i;
		it->count = (size_t)got / sizeof(Elf64_Sym);
	}
	memcpy(sym, &it->chunk[i - it->first], sizeof(*sym));
	return true;
}

static bool elfsym_wanted(const GElf_Sym *sym, const char *strs, size_t slen)
{
	unsigned type = GELF_ST_TYPE(sym->st_info);

	if (type != STT_FUNC && type != STT_GNU_IFUNC)
		return false;
	if (sym->st_shndx == SHN_UNDEF || sym->st_value == 0)
		return false;
	return sym->st_name < slen && strs[sym->st_name] != '\0' && strs[sym->st_name] != '@';
}

/* Address, then rank, then name offset: integers only, so sorting costs
 * the same whatever the names are. */
static int elfsym_sym_cmp(const void *a, const void *b)
{
	const struct elfsym_sym *x = a, *y = b;

	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->name < y->name ? -1 : x->name > y->name;
}

/* Keeps one symbol per address (syms sorted): the best-ranked alias, among
 * those the first name in byte order, so that every load of one file keeps
 * the same; with the largest size among the aliases, so that coverage does
 * not depend on which alias carried the size. */
void elfsym_dedup(struct elfsym *e, const char *strs, size_t slen)
{
	size_t w = 0;

	for (size_t r = 1; r < e->nsyms; r++) {
		struct elfsym_sym *k = &e->syms[w], *x = &e->syms[r];

		if (x->value != k->value) {
			e->syms[++w] = *x;
			continue;
		}
		if (x->size > k->size)
			k->size = x->size;
		if (x->rank == k->rank && x->name != k->name &&
		    elfsym_alias_cmp(strs, slen, x->name, k->name) < 0)
			k->name = x->name;
	}
	e->nsyms = w + 1;
}

/* Copies the kept symbols' names out of the string table, once each: one
 * name per symbol while they fit in fewer bytes than the table itself
 * (the usual case: a table also names objects, sections and aliases), else
 * the whole table, so that names shared by many symbols (or overlapping)
 * are never copied more than once. Either way at most slen + 1 bytes. */
int elfsym_copy_names(struct elfsym *e, const char *strs, size_t slen)
{
	size_t total = 0, w = 0;
	bool whole = false;

	for (size_t i = 0; i < e->nsyms && !whole; i++) {
		total += elfsym_name_len(strs, slen, e->syms[i].name) + 1;
		whole = total > slen;
	}
	if (whole) {
		e->names = malloc(slen + 1);
		if (!e->names)
			return -ENOMEM;
		memcpy(e->names, strs, slen);
		e->names[slen] = '\0';
		/* Cuts every version suffix: a name starting at any offset then
		 * reads as elfsym_name_len cuts it. */
		for (char *at = memchr(e->names, '@', slen); at;
		     at = memchr(at + 1, '@', slen - (size_t)(at + 1 - e->names)))
			*at = '\0';
		e->names_len = slen + 1;
		return 0;
	}
	e->names = malloc(total ? total : 1);
	if (!e->names)
		return -ENOMEM;
	for (size_t i = 0; i < e->nsyms; i++) {
		size_t len = elfsym_name_len(strs, slen, e->syms[i].name);

		memcpy(e->names + w, strs + e->syms[i].name, len);
		e->names[w + len] = '\0';
		e->syms[i].name = (uint32_t)w;
		w += len + 1;
	}
	e->names_len = w;
	return 0;
}

/* Whether the load was cancelled; looked at once per chunk of entries. */
static bool elfsym_cancelled(const struct elfsym_limits *lim, size_t i)
{
	return lim && lim->cancel && i % ELFSYM_CHUNK == 0 && atomic_load(lim->cancel);
}

/* Most a table of nent entries with a string table of slen bytes can keep. */
size_t elfsym_table_need(size_t nent, size_t slen)
{
	return nent * sizeof(struct elfsym_sym) + slen + 1;
}

/* Loads the function symbols of one symbol table section, unless it is
 * past the limits (then nothing is read and e->names_state says why). */
static int elfsym_load_table(struct elfsym *e, Elf *elf, int fd, Elf_Scn *scn,
			     const GElf_Shdr *shdr, const struct elfsym_limits *lim)
{
	struct elfsym_symiter *it = NULL;
	Elf_Data *sdata;
	Elf_Scn *sscn;
	GElf_Shdr sshdr;
	const char *strs;
	size_t n, slen, count = 0, need;
	int ret = -ENOEXEC;

	if (shdr->sh_entsize == 0)
		goto out;
	n = shdr->sh_size / shdr->sh_entsize;
	sscn = elf_getscn(elf, shdr->sh_link);
	if (!sscn || !gelf_getshdr(sscn, &sshdr) || sshdr.sh_type != SHT_STRTAB ||
	    sshdr.sh_size >= ELFSYM_STRTAB_MAX) {
		log_debug("elfsym: symbol table without a usable string table");
		goto out;
	}
	/* Decided from the section headers, before anything is read. */
	need = elfsym_table_need(n, sshdr.sh_size);
	if (lim && ((lim->max_entries && n > lim->max_entries) ||
		    (lim->max_bytes && need > lim->max_bytes))) {
		e->names_state = lim->max_entries && n > lim->max_entries ?
			ELFSYM_NAMES_DEFERRED : ELFSYM_NAMES_OVER_BUDGET;
		e->table_bytes = need;
		ret = 0;
		goto out;
	}
	it = malloc(sizeof(*it));
	if (!it) {
		ret = -ENOMEM;
		goto out;
	}
	sdata = elf_getdata(sscn, NULL);
	if (elfsym_iter_init(it, elf, fd, scn, shdr) < 0 || !sdata || !sdata->d_buf ||
	    sdata->d_size == 0) {
		log_debug("elfsym: symbol table unreadable: %s", elf_errmsg(-1));
		goto out;
	}
	strs = sdata->d_buf;
	slen = sdata->d_size < ELFSYM_STRTAB_MAX ? sdata->d_size : ELFSYM_STRTAB_MAX - 1;
	/* Counted first, then allocated once: no growth by doubling. */
	for (size_t i = 1; i < n; i++) {
		GElf_Sym sym;

		if (elfsym_cancelled(lim, i)) {
			ret = -ECANCELED;
			goto out;
		}
		if (!elfsym_iter_get(it, i, &sym))
			break;  /* table shorter than its header claims */
		count += elfsym_wanted(&sym, strs, slen);
	}
	ret = 0;
	if (count == 0)
		goto out;
	e->syms = malloc(count * sizeof(*e->syms));
	if (!e->syms) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 1; i < n && e->nsyms < count; i++) {
		GElf_Sym sym;
		struct elfsym_sym *k;

		if (elfsym_cancelled(lim, i)) {
			ret = -ECANCELED;
			goto out;
		}
		if (!elfsym_iter_get(it, i, &sym))
			break;
		if (!elfsym_wanted(&sym, strs, slen))
			continue;
		k = &e->syms[e->nsyms++];
		k->value = sym.st_value;
		k->size = sym.st_size > UINT32_MAX ? UINT32_MAX : (uint32_t)sym.st_size;
		k->name = (uint32_t)sym.st_name;
		k->rank = elfsym_bind_rank(GELF_ST_BIND(sym.st_info));
	}
	qsort(e->syms, e->nsyms, sizeof(*e->syms), elfsym_sym_cmp);
	elfsym_dedup(e, strs, slen);
	ret = elfsym_copy_names(e, strs, slen);
	if (ret < 0)
		goto out;
	if (e->nsyms < count) {
		struct elfsym_sym *shrunk = realloc(e->syms, e->nsyms * sizeof(*e->syms));

		if (shrunk)
			e->syms = shrunk;
	}
out:
	free(it);
	return ret;
}

/* Loads the first section of the given type. 0 also when there is none. */
int elfsym_load_section_type(struct elfsym *e, Elf *elf, int fd, Elf64_Word type,
			     const struct elfsym_limits *lim, bool *found)
{
	Elf_Scn *scn = NULL;
	int ret = 0;

	*found = false;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr shdr;

		if (!gelf_getshdr(scn, &shdr)) {
			ret = -ENOEXEC;
			goto out;
		}
		if (shdr.sh_type != type)
			continue;
		*found = true;
		ret = elfsym_load_table(e, elf, fd, scn, &shdr, lim);
		goto out;
	}
out:
	return ret;
}

