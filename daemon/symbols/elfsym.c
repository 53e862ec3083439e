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

#include "buf.h"
#include "elfmeta.h"
#include "log.h"

/* Bounds what one hostile or broken file can make us allocate. */
#define ELFSYM_MAX_SYMS (8u << 20)
#define ELFSYM_MAX_SEGS 256
/* Nested or size-0 symbols can hide a covering symbol a few entries back;
 * looking further than this only costs time on corrupt tables. */
#define ELFSYM_BACKSCAN 8
/* Demangling is recursive; absurdly long names are left mangled. */
#define ELFSYM_DEMANGLE_MAX 4096

struct elfsym_sym {
	uint64_t value;
	uint64_t size;
	uint32_t name_off;  /* into names */
	uint8_t rank;       /* lower wins among aliases at one address */
};

struct elfsym_seg {
	uint64_t offset;
	uint64_t filesz;
	uint64_t vaddr;
};

struct elfsym {
	struct elfsym_sym *syms;
	size_t nsyms;
	struct buf names;
	char **pretty;      /* formatted names, filled on first lookup */
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

/* Appends the function symbols of one symbol table section. */
static int elfsym_load_table(struct elfsym *e, Elf *elf, Elf_Scn *scn, const GElf_Shdr *shdr,
			     size_t *cap)
{
	Elf_Data *data;
	size_t n;
	int ret = -ENOEXEC;

	if (shdr->sh_entsize == 0)
		goto out;
	data = elf_getdata(scn, NULL);
	if (!data) {
		log_debug("elfsym: symbol table unreadable: %s", elf_errmsg(-1));
		goto out;
	}
	n = shdr->sh_size / shdr->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		GElf_Sym sym;
		const char *name;
		size_t len;
		unsigned type;

		if (!gelf_getsym(data, (int)i, &sym))
			break;  /* table shorter than its header claims */
		type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		name = elf_strptr(elf, shdr->sh_link, sym.st_name);
		if (!name || !name[0])
			continue;
		if (e->nsyms >= ELFSYM_MAX_SYMS)
			break;
		/* .symtab may carry the version ("fnmatch@@GLIBC_2.2.5"); the
		 * function's name is what precedes it. */
		len = strcspn(name, "@");
		if (len == 0)
			continue;
		if (e->names.len + len + 1 > UINT32_MAX)
			break;
		if (e->nsyms == *cap) {
			size_t ncap = *cap ? *cap * 2 : 256;
			struct elfsym_sym *ns = realloc(e->syms, ncap * sizeof(*ns));

			if (!ns) {
				ret = -ENOMEM;
				goto out;
			}
			e->syms = ns;
			*cap = ncap;
		}
		e->syms[e->nsyms].value = sym.st_value;
		e->syms[e->nsyms].size = sym.st_size;
		e->syms[e->nsyms].name_off = (uint32_t)e->names.len;
		e->syms[e->nsyms].rank = elfsym_bind_rank(GELF_ST_BIND(sym.st_info));
		if (buf_append(&e->names, name, len) < 0 || buf_putc(&e->names, '\0') < 0) {
			ret = -ENOMEM;
			goto out;
		}
		e->nsyms++;
	}
	ret = 0;
out:
	return ret;
}

/* Loads the first section of the given type. 0 also when there is none. */
static int elfsym_load_section_type(struct elfsym *e, Elf *elf, Elf64_Word type, bool *found)
{
	Elf_Scn *scn = NULL;
	size_t cap = e->nsyms;
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
		ret = elfsym_load_table(e, elf, scn, &shdr, &cap);
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

static int elfsym_open_regular(const char *path)
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

/* Loads .symtab from a separate debug file, accepted only if its build-id
 * matches ours (when we have one): a stale debug file would name the wrong
 * functions. Returns 1 if symbols were loaded, 0 if not, -ENOMEM. */
static int elfsym_try_debug_file(struct elfsym *e, const char *path)
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
	ret = elfsym_load_section_type(dbg, elf, SHT_SYMTAB, &found);
	if (ret == -ENOMEM)
		goto out;
	ret = 0;
	if (!found || dbg->nsyms == 0)
		goto out;
	/* Take the table; keep our own segments and build-id. */
	free(e->syms);
	buf_release(&e->names);
	e->syms = dbg->syms;
	e->nsyms = dbg->nsyms;
	e->names = dbg->names;
	dbg->syms = NULL;
	dbg->nsyms = 0;
	dbg->names = (struct buf)BUF_INIT;
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

static int elfsym_load_debug(struct elfsym *e, Elf *elf, const char *path, const char *root)
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
			r = elfsym_try_debug_file(e, p);
			if (r != 0) {
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
	r = elfsym_try_debug_file(e, p);
	if (r > 0)
		e->source = ELFSYM_SRC_DEBUGLINK;
	return r;
}

static int elfsym_sym_cmp(const void *a, const void *b, void *arg)
{
	const struct elfsym_sym *x = a, *y = b;
	const char *names = arg;

	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	/* Same address and binding: the name decides, so every load of one
	 * file picks the same alias. */
	return strcmp(names + x->name_off, names + y->name_off);
}

/* Sorts and keeps one symbol per address: the best-ranked name, with the
 * largest size among its aliases so coverage does not depend on which
 * alias carried the size. */
static void elfsym_finish(struct elfsym *e)
{
	size_t w = 0;

	if (e->nsyms == 0)
		return;
	qsort_r(e->syms, e->nsyms, sizeof(*e->syms), elfsym_sym_cmp, e->names.data);
	for (size_t r = 1; r < e->nsyms; r++) {
		if (e->syms[r].value == e->syms[w].value) {
			if (e->syms[r].size > e->syms[w].size)
				e->syms[w].size = e->syms[r].size;
			continue;
		}
		e->syms[++w] = e->syms[r];
	}
	e->nsyms = w + 1;
}

static int elfsym_load(Elf *elf, const char *path, const char *debug_root, struct elfsym **out)
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
	ret = elfsym_load_section_type(e, elf, SHT_SYMTAB, &found);
	if (ret < 0)
		goto out;
	if (e->nsyms > 0) {
		e->source = ELFSYM_SRC_SYMTAB;
	} else {
		if (debug_root) {
			ret = elfsym_load_debug(e, elf, path, debug_root);
			if (ret < 0)
				goto out;
		}
		if (e->nsyms == 0) {
			ret = elfsym_load_section_type(e, elf, SHT_DYNSYM, &found);
			if (ret < 0)
				goto out;
			if (e->nsyms > 0)
				e->source = ELFSYM_SRC_DYNSYM;
		}
	}
	elfsym_finish(e);
	*out = e;
	e = NULL;
	ret = 0;
out:
	elfsym_free(e);
	return ret;
}

int elfsym_open_fd(int fd, const char *path, const char *debug_root, struct elfsym **out)
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
	ret = elfsym_load(elf, path, debug_root ? debug_root : ELFSYM_DEBUG_ROOT, out);
	if (elf)
		elf_end(elf);
	return ret;
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
	ret = elfsym_load(elf, NULL, NULL, out);
	if (elf)
		elf_end(elf);
	free(copy);
	return ret;
}

void elfsym_free(struct elfsym *e)
{
	if (!e)
		return;
	if (e->pretty) {
		for (size_t i = 0; i < e->nsyms; i++)
			free(e->pretty[i]);
		free(e->pretty);
	}
	free(e->syms);
	free(e->fde_start);
	buf_release(&e->names);
	free(e);
}

int elfsym_adopt_debug_file(struct elfsym *e, const char *path)
{
	size_t n = e->nsyms;
	char **pretty = e->pretty;
	int r;

	/* The names formatted so far belong to the table being replaced. */
	e->pretty = NULL;
	r = elfsym_try_debug_file(e, path);
	if (r > 0) {
		elfsym_finish(e);  /* sorted, one symbol per address */
		e->source = ELFSYM_SRC_DEBUGINFOD;
		for (size_t i = 0; pretty && i < n; i++)
			free(pretty[i]);
		free(pretty);
	} else {
		e->pretty = pretty;
	}
	return r;
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

int elfsym_lookup(struct elfsym *e, uint64_t vaddr, char *name, size_t name_size,
		  uint64_t *sym_start)
{
	size_t lo = 0, hi, idx;
	const char *raw;

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
	raw = e->names.data + e->syms[idx].name_off;
	if (!e->pretty)
		e->pretty = calloc(e->nsyms, sizeof(*e->pretty));
	if (e->pretty && !e->pretty[idx]) {
		char tmp[ELFSYM_NAME_MAX];

		elfsym_format_name(raw, tmp, sizeof(tmp));
		e->pretty[idx] = strdup(tmp);
	}
	if (e->pretty && e->pretty[idx])
		snprintf(name, name_size, "%s", e->pretty[idx]);
	else
		elfsym_format_name(raw, name, name_size);  /* out of memory: no cache */
	return 0;
}

int elfsym_find(const struct elfsym *e, const char *raw_name, uint64_t *value, uint64_t *size)
{
	for (size_t i = 0; e && i < e->nsyms; i++) {
		if (strcmp(e->names.data + e->syms[i].name_off, raw_name) == 0) {
			*value = e->syms[i].value;
			*size = e->syms[i].size;
			return 0;
		}
	}
	return -ENOENT;
}

size_t elfsym_format_name(const char *raw, char *out, size_t out_size)
{
	size_t len = strlen(raw), n;
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
