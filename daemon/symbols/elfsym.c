#include "elfsym.h"
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


static void elfsym_libelf_init(void)
{
	static bool done;

	if (!done) {
		elf_version(EV_CURRENT);
		done = true;
	}
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

