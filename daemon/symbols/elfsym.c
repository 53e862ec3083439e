#include "elfsym.h"

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

#define ELFSYM_MAX_SEGS 256
/* Nested or size-0 symbols can hide a covering symbol a few entries back;
 * looking further than this only costs time on corrupt tables. */
#define ELFSYM_BACKSCAN 8
/* Demangling is recursive; absurdly long names are left mangled. */
#define ELFSYM_DEMANGLE_MAX 4096
/* Aliases at one address are ordered by this much of their names. */
#define ELFSYM_ALIAS_CMP_MAX 256

struct elfsym_sym {
	uint64_t value;
	uint32_t size;      /* saturated: no function is 4 GiB long */
	uint32_t name : 30; /* into names (while loading: into the file's string table) */
	uint32_t rank : 2;  /* lower wins among aliases at one address */
};
_Static_assert(sizeof(struct elfsym_sym) == 16, "a small fixed entry per symbol");

struct elfsym_seg {
	uint64_t offset;
	uint64_t filesz;
	uint64_t vaddr;
};

struct elfsym {
	struct elfsym_sym *syms;
	size_t nsyms;
	char *names;              /* the kept symbols' names, each NUL-terminated */
	size_t names_len;
	struct htab_map pretty;   /* name offset -> formatted name (char *), on first lookup */
	size_t pretty_bytes;
	enum elfsym_names names_state;
	size_t table_bytes;       /* what an unread table would have needed */
	struct elfsym_seg segs[ELFSYM_MAX_SEGS];
	size_t nsegs;
	uint8_t build_id[ELFSYM_BUILD_ID_MAX];
	size_t build_id_len;
	enum elfsym_source source;
	/* Function starts from .eh_frame_hdr's search table (one per FDE, which
	 * compilers emit per function even in stripped files): vaddr =
	 * fde_base + fde_start[i], sorted. Names unsymbolized code by function. */
	int32_t *fde_start;
	size_t nfde;
	uint64_t fde_base;
};

static void elfsym_libelf_init(void)
{
	static bool done;

	if (!done) {
		elf_version(EV_CURRENT);
		done = true;
	}
}

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
static void elfsym_dedup(struct elfsym *e, const char *strs, size_t slen)
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
static int elfsym_copy_names(struct elfsym *e, const char *strs, size_t slen)
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
static size_t elfsym_table_need(size_t nent, size_t slen)
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
static int elfsym_load_section_type(struct elfsym *e, Elf *elf, int fd, Elf64_Word type,
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

static void elfsym_read_build_id(struct elfsym *e, Elf *elf)
{
	e->build_id_len = elfmeta_build_id(elf, e->build_id, sizeof(e->build_id));
}

static int elfsym_read_segments(struct elfsym *e, Elf *elf)
{
	size_t nph;

	if (elf_getphdrnum(elf, &nph) != 0)
		return -ENOEXEC;
	for (size_t i = 0; i < nph && e->nsegs < ELFSYM_MAX_SEGS; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph))
			return -ENOEXEC;
		if (ph.p_type != PT_LOAD)
			continue;
		e->segs[e->nsegs].offset = ph.p_offset;
		e->segs[e->nsegs].filesz = ph.p_filesz;
		e->segs[e->nsegs].vaddr = ph.p_vaddr;
		e->nsegs++;
	}
	return 0;
}

/* Function starts from .eh_frame_hdr; a table that is unsorted or not in
 * the layout linkers write is ignored: unsymbolized code then falls back to
 * pages. */
static int elfsym_read_fdes(struct elfsym *e, Elf *elf)
{
	struct elfmeta_ehhdr h;

	if (elfmeta_ehhdr(elf, &h) < 0 || !h.count)
		return 0;
	e->fde_start = malloc(h.count * sizeof(*e->fde_start));
	if (!e->fde_start)
		return -ENOMEM;
	for (size_t i = 0; i < h.count; i++) {
		memcpy(&e->fde_start[i], h.table + 8 * i, 4);
		if (i && e->fde_start[i] < e->fde_start[i - 1]) {
			free(e->fde_start);
			e->fde_start = NULL;
			return 0;
		}
	}
	e->nfde = h.count;
	e->fde_base = h.base;
	return 0;
}

int elfsym_function_start(const struct elfsym *e, uint64_t vaddr, uint64_t *start)
{
	size_t lo = 0, hi;

	if (!e || !e->nfde)
		return -ENOENT;
	/* The last start at or below vaddr. */
	hi = e->nfde;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e->fde_base + (uint64_t)(int64_t)e->fde_start[mid] <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return -ENOENT;
	*start = e->fde_base + (uint64_t)(int64_t)e->fde_start[lo - 1];
	return 0;
}

int elfsym_open_regular(const char *path)
{
	struct stat st;
	int fd;

	/* O_NONBLOCK: a FIFO planted at a debug path must not hang us. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOEXEC;
	}
	return fd;
}

/* Moves from's table into e (whose own is dropped, with the names
 * formatted from it). */
static void elfsym_take_table(struct elfsym *e, struct elfsym *from)
{
	uint64_t key, val;
	size_t pos = 0;

	while (htab_map_next(&e->pretty, &pos, &key, &val))
		free((char *)(uintptr_t)val);
	htab_map_release(&e->pretty);
	e->pretty_bytes = 0;
	free(e->syms);
	free(e->names);
	e->syms = from->syms;
	e->nsyms = from->nsyms;
	e->names = from->names;
	e->names_len = from->names_len;
	e->names_state = ELFSYM_NAMES_READ;
	e->table_bytes = 0;
	from->syms = NULL;
	from->nsyms = 0;
	from->names = NULL;
	from->names_len = 0;
}

/* Loads .symtab from a separate debug file, accepted only if its build-id
 * matches ours (when we have one): a stale debug file would name the wrong
 * functions. Returns 1 if symbols were loaded, 0 if not (a table past the
 * limits sets e->names_state), -ENOMEM. */
static int elfsym_try_debug_file(struct elfsym *e, const char *path,
				 const struct elfsym_limits *lim)
{
	struct elfsym *dbg = NULL;
	Elf *elf = NULL;
	bool found;
	int fd, ret = 0;

	fd = elfsym_open_regular(path);
	if (fd < 0)
		goto out;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF)
		goto out;
	dbg = calloc(1, sizeof(*dbg));
	if (!dbg) {
		ret = -ENOMEM;
		goto out;
	}
	elfsym_read_build_id(dbg, elf);
	if (e->build_id_len && (dbg->build_id_len != e->build_id_len ||
				memcmp(dbg->build_id, e->build_id, e->build_id_len) != 0)) {
		log_debug("elfsym: %s: build-id mismatch, ignored", path);
		goto out;
	}
	ret = elfsym_load_section_type(dbg, elf, fd, SHT_SYMTAB, lim, &found);
	if (ret == -ENOMEM || ret == -ECANCELED)
		goto out;
	ret = 0;
	if (dbg->names_state != ELFSYM_NAMES_READ) {
		e->names_state = dbg->names_state;
		e->table_bytes = dbg->table_bytes;
		goto out;
	}
	if (!found || dbg->nsyms == 0)
		goto out;
	/* Take the table; keep our own segments and build-id. */
	elfsym_take_table(e, dbg);
	ret = 1;
out:
	if (elf)
		elf_end(elf);
	if (fd >= 0)
		close(fd);
	elfsym_free(dbg);
	return ret;
}

static const char *elfsym_debuglink_name(Elf *elf)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr shdr;
		const char *sname;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &shdr))
			return NULL;
		sname = elf_strptr(elf, shstrndx, shdr.sh_name);
		if (!sname || strcmp(sname, ".gnu_debuglink") != 0)
			continue;
		data = elf_getdata(scn, NULL);
		/* Name, NUL, padding, CRC: the name must be terminated in bounds. */
		if (!data || !data->d_buf || data->d_size < 2 ||
		    !memchr(data->d_buf, '\0', data->d_size))
			return NULL;
		return data->d_buf;
	}
	return NULL;
}

static int elfsym_load_debug(struct elfsym *e, Elf *elf, const char *path, const char *root,
			     const struct elfsym_limits *lim)
{
	char p[4096];
	const char *link, *slash;
	int n, r;

	if (e->build_id_len >= 2) {
		n = snprintf(p, sizeof(p), "%s/.build-id/%02x/", root, e->build_id[0]);
		for (size_t i = 1; i < e->build_id_len && n > 0 && (size_t)n < sizeof(p); i++)
			n += snprintf(p + n, sizeof(p) - (size_t)n, "%02x", e->build_id[i]);
		if (n > 0 && (size_t)n < sizeof(p) &&
		    snprintf(p + n, sizeof(p) - (size_t)n, ".debug") == 6) {
			r = elfsym_try_debug_file(e, p, lim);
			if (r != 0 || e->names_state == ELFSYM_NAMES_DEFERRED) {
				if (r > 0)
					e->source = ELFSYM_SRC_DEBUG_BUILD_ID;
				return r;
			}
		}
	}
	link = elfsym_debuglink_name(elf);
	if (!link || strchr(link, '/') || !path || path[0] != '/')
		return 0;
	slash = strrchr(path, '/');
	n = snprintf(p, sizeof(p), "%s%.*s/%s", root, (int)(slash - path), path, link);
	if (n < 0 || (size_t)n >= sizeof(p))
		return 0;
	r = elfsym_try_debug_file(e, p, lim);
	if (r > 0)
		e->source = ELFSYM_SRC_DEBUGLINK;
	return r;
}

/* A Go binary without .symtab: its functions from .gopclntab, the table
 * the Go runtime names its own frames with. Under the same limits as a
 * symbol table (the section's size stands for what the names need; a
 * function takes some 50 bytes of it). 0 also when there is none. */
static int elfsym_load_gopclntab(struct elfsym *e, Elf *elf, const struct elfsym_limits *lim)
{
	struct gopclntab t = { 0 };
	Elf_Scn *scn = NULL, *pcln = NULL;
	GElf_Shdr shdr, pshdr;
	uint64_t text = 0;
	size_t shstrndx, need;
	Elf_Data *d;
	int ret = 0;

	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		goto out;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		const char *name;

		if (!gelf_getshdr(scn, &shdr))
			goto out;
		name = elf_strptr(elf, shstrndx, shdr.sh_name);
		if (!name)
			continue;
		if (strcmp(name, ".gopclntab") == 0) {
			pcln = scn;
			pshdr = shdr;
		} else if (strcmp(name, ".text") == 0) {
			text = shdr.sh_addr;
		}
	}
	if (!pcln || pshdr.sh_type == SHT_NOBITS || pshdr.sh_size == 0 ||
	    pshdr.sh_size >= ELFSYM_STRTAB_MAX)
		goto out;
	need = elfsym_table_need(pshdr.sh_size / 50, pshdr.sh_size);
	if (lim && ((lim->max_entries && pshdr.sh_size / 50 > lim->max_entries) ||
		    (lim->max_bytes && need > lim->max_bytes))) {
		e->names_state = lim->max_entries && pshdr.sh_size / 50 > lim->max_entries ?
			ELFSYM_NAMES_DEFERRED : ELFSYM_NAMES_OVER_BUDGET;
		e->table_bytes = need;
		goto out;
	}
	d = elf_getdata(pcln, NULL);
	if (!d || !d->d_buf)
		goto out;
	ret = gopclntab_parse(d->d_buf, d->d_size, text, &t);
	if (ret < 0) {
		log_debug("elfsym: .gopclntab unreadable: %s", strerror(-ret));
		ret = ret == -ENOMEM ? ret : 0;
		goto out;
	}
	e->syms = malloc(t.nfuncs * sizeof(*e->syms));
	if (!e->syms) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t.nfuncs; i++) {
		struct elfsym_sym *k = &e->syms[e->nsyms++];
		uint64_t size = t.funcs[i + 1].entry - t.funcs[i].entry;

		k->value = t.funcs[i].entry;
		k->size = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
		k->name = t.funcs[i].name;
		k->rank = 0;
	}
	/* Sorted by the parser; equal entries (never in a real table) keep one. */
	elfsym_dedup(e, t.names, t.names_len);
	ret = elfsym_copy_names(e, t.names, t.names_len);
	if (ret < 0)
		goto out;
	e->source = ELFSYM_SRC_GOPCLNTAB;
out:
	gopclntab_release(&t);
	return ret;
}

/* fd: the file elf reads (-1: memory). */
static int elfsym_load(Elf *elf, int fd, const char *path, const char *debug_root,
		       const struct elfsym_limits *lim, struct elfsym **out)
{
	struct elfsym *e = NULL;
	GElf_Ehdr ehdr;
	size_t shnum;
	bool found;
	int ret = -ENOEXEC;

	*out = NULL;
	if (!elf) {
		log_debug("elfsym: %s: %s", path ? path : "(memory)", elf_errmsg(-1));
		goto out;
	}
	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &ehdr) ||
	    elf_getshdrnum(elf, &shnum) != 0) {
		log_debug("elfsym: %s: not a readable ELF: %s", path ? path : "(memory)",
			  elf_errmsg(-1));
		goto out;
	}
	/* libelf reports no sections when the header table lies beyond the
	 * end of the file: that is a truncated file, not a stripped one. */
	if (ehdr.e_shoff != 0 && shnum == 0) {
		log_debug("elfsym: %s: section headers missing (truncated?)",
			  path ? path : "(memory)");
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		ret = -ENOMEM;
		goto out;
	}
	ret = elfsym_read_segments(e, elf);
	if (ret < 0)
		goto out;
	elfsym_read_build_id(e, elf);
	ret = elfsym_read_fdes(e, elf);
	if (ret < 0)
		goto out;
	ret = elfsym_load_section_type(e, elf, fd, SHT_SYMTAB, lim, &found);
	if (ret < 0)
		goto out;
	if (e->nsyms == 0 && !found && e->names_state == ELFSYM_NAMES_READ) {
		ret = elfsym_load_gopclntab(e, elf, lim);
		if (ret < 0)
			goto out;
	}
	if (e->source == ELFSYM_SRC_GOPCLNTAB) {
		/* named already */
	} else if (e->nsyms > 0) {
		e->source = ELFSYM_SRC_SYMTAB;
	} else if (e->names_state != ELFSYM_NAMES_DEFERRED) {
		/* A table too big for the budget: .dynsym may still fit. */
		if (debug_root && !(lim && lim->no_debug_files)) {
			ret = elfsym_load_debug(e, elf, path, debug_root, lim);
			if (ret < 0)
				goto out;
		}
		if (e->nsyms == 0 && e->names_state != ELFSYM_NAMES_DEFERRED) {
			enum elfsym_names st = e->names_state;
			size_t need = e->table_bytes;

			ret = elfsym_load_section_type(e, elf, fd, SHT_DYNSYM, lim, &found);
			if (ret < 0)
				goto out;
			if (e->nsyms > 0)
				e->source = ELFSYM_SRC_DYNSYM;
			/* The refusal of the better table is what counts. */
			if (st != ELFSYM_NAMES_READ) {
				e->names_state = st;
				e->table_bytes = need;
			}
		}
	}
	*out = e;
	e = NULL;
	ret = 0;
out:
	elfsym_free(e);
	return ret;
}

int elfsym_open_fd_limited(int fd, const char *path, const char *debug_root,
			   const struct elfsym_limits *limits, struct elfsym **out)
{
	Elf *elf;
	int ret;

	*out = NULL;
	if (fd < 0)
		return -EBADF;
	elfsym_libelf_init();
	/* ELF_C_READ reads on demand with pread: a file truncated under us
	 * gives a libelf error, where a mapping would give SIGBUS. */
	elf = elf_begin(fd, ELF_C_READ, NULL);
	ret = elfsym_load(elf, fd, path, debug_root ? debug_root : ELFSYM_DEBUG_ROOT, limits, out);
	if (elf)
		elf_end(elf);
	return ret;
}

int elfsym_open_fd(int fd, const char *path, const char *debug_root, struct elfsym **out)
{
	return elfsym_open_fd_limited(fd, path, debug_root, NULL, out);
}

int elfsym_open(const char *path, const char *debug_root, struct elfsym **out)
{
	int fd, ret;

	*out = NULL;
	fd = elfsym_open_regular(path);
	if (fd < 0)
		return fd;
	ret = elfsym_open_fd(fd, path, debug_root, out);
	close(fd);
	return ret;
}

int elfsym_open_memory(const void *image, size_t size, struct elfsym **out)
{
	char *copy;
	Elf *elf;
	int ret;

	*out = NULL;
	if (!image || size == 0)
		return -EINVAL;
	elfsym_libelf_init();
	/* libelf may convert data in place; never let it touch the source. */
	copy = malloc(size);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, image, size);
	elf = elf_memory(copy, size);
	ret = elfsym_load(elf, -1, NULL, NULL, NULL, out);
	if (elf)
		elf_end(elf);
	free(copy);
	return ret;
}

void elfsym_free(struct elfsym *e)
{
	uint64_t key, val;
	size_t pos = 0;

	if (!e)
		return;
	while (htab_map_next(&e->pretty, &pos, &key, &val))
		free((char *)(uintptr_t)val);
	htab_map_release(&e->pretty);
	free(e->syms);
	free(e->fde_start);
	free(e->names);
	free(e);
}

int elfsym_adopt_debug_file_limited(struct elfsym *e, const char *path,
				    const struct elfsym_limits *limits)
{
	int r = elfsym_try_debug_file(e, path, limits);

	if (r > 0)
		e->source = ELFSYM_SRC_DEBUGINFOD;
	return r;
}

int elfsym_adopt_debug_file(struct elfsym *e, const char *path)
{
	return elfsym_adopt_debug_file_limited(e, path, NULL);
}

int elfsym_adopt(struct elfsym *e, struct elfsym *from, enum elfsym_source source)
{
	if (!e || !from || from->nsyms == 0)
		return 0;
	if (e->build_id_len && (from->build_id_len != e->build_id_len ||
				memcmp(from->build_id, e->build_id, e->build_id_len) != 0))
		return 0;
	elfsym_take_table(e, from);
	e->source = source;
	return 1;
}

const uint8_t *elfsym_build_id(const struct elfsym *e, size_t *len)
{
	*len = e ? e->build_id_len : 0;
	return *len ? e->build_id : NULL;
}

enum elfsym_source elfsym_source(const struct elfsym *e)
{
	return e ? e->source : ELFSYM_SRC_NONE;
}

size_t elfsym_count(const struct elfsym *e)
{
	return e ? e->nsyms : 0;
}

enum elfsym_names elfsym_names(const struct elfsym *e)
{
	return e ? e->names_state : ELFSYM_NAMES_READ;
}

size_t elfsym_table_bytes(const struct elfsym *e)
{
	return e && e->names_state != ELFSYM_NAMES_READ ? e->table_bytes : 0;
}

size_t elfsym_mem_bytes(const struct elfsym *e)
{
	if (!e)
		return 0;
	return sizeof(*e) + e->nsyms * sizeof(*e->syms) + e->names_len +
	       e->nfde * sizeof(*e->fde_start) + e->pretty_bytes +
	       e->pretty.cap * sizeof(*e->pretty.slots);
}

int elfsym_offset_to_vaddr(const struct elfsym *e, uint64_t offset, uint64_t *vaddr)
{
	/* Exact containment first; then the page-rounded start, since a
	 * mapping begins at the page below an unaligned p_offset. */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < e->nsegs; i++) {
			const struct elfsym_seg *s = &e->segs[i];
			uint64_t lo = pass ? s->offset & ~(uint64_t)0xfff : s->offset;

			if (offset >= lo && offset - lo < s->filesz + (s->offset - lo)) {
				*vaddr = offset - s->offset + s->vaddr;
				return 0;
			}
		}
	}
	return -ENOENT;
}

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
