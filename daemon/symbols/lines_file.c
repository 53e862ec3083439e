/* One file's debug info for file:line lookups (lines.h: lines_file_*),
 * used by the line worker only. */
#include "lines.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfmeta.h"
#include "elfsym.h"

/* ---- one file's debug info (worker only) --------------------------------- */

/* libdw is not given the user's file: it is given an ELF image in memory
 * holding only the file's .debug_* sections, decompressed, each followed by
 * LINES_PAD zero bytes. libdw 0.188 runs strlen() on strings in .debug_line
 * (and the string sections) without bounds, so a crafted section that ends
 * inside a string made it read past its buffer (fuzz_lines found it); with
 * the padding such a read ends inside the image. The file's fd, its other
 * sections and libelf's copies are released once the image is built. */
#define LINES_PAD 16
#define LINES_MAX_SECTIONS 64

struct lines_file {
	char *image;
	Elf *elf;
	Dwarf *dw;
	uint64_t cost;           /* bytes of the image */
};

void lines_file_free(struct lines_file *f)
{
	if (!f)
		return;
	if (f->dw)
		dwarf_end(f->dw);
	if (f->elf)
		elf_end(f->elf);
	free(f->image);
	free(f);
}

uint64_t lines_file_cost(const struct lines_file *f)
{
	return f ? f->cost : 0;
}

struct lines_sec {
	const char *name;        /* ".debug_..." (a ".zdebug_" name without its z) */
	Elf_Data *data;
};

/* Sections a file:line lookup never reads (location lists, macros, CFI,
 * name indexes): not decompressed, not held. Location lists alone are
 * 14% of libc's debug info (1.4 of 10 MB), which the first scrape that
 * shows a binary paid to inflate. */
static bool lines_unneeded(const char *name)
{
	static const char *const skip[] = {
		".debug_loc", ".debug_loclists", ".debug_macro", ".debug_macinfo",
		".debug_frame", ".debug_pubnames", ".debug_pubtypes",
		".debug_gnu_pubnames", ".debug_gnu_pubtypes",
	};

	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (!strcmp(name, skip[i]))
			return true;
	return false;
}

/* The .debug_* sections of src a lookup needs, decompressed, at most cap
 * bytes in all: their count, -EFBIG, -ENOENT (no .debug_info or
 * .debug_line). */
static int lines_sections(Elf *src, uint64_t cap, struct lines_sec *secs, uint64_t *total)
{
	bool has_info = false, has_line = false;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int n = 0;

	*total = 0;
	if (elf_getshdrstrndx(src, &shstrndx) < 0)
		return -EINVAL;
	while ((scn = elf_nextscn(src, scn)) && n < LINES_MAX_SECTIONS) {
		GElf_Shdr sh;
		GElf_Chdr ch;
		const char *name;
		uint64_t size;
		bool gnu;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(src, shstrndx, sh.sh_name);
		if (!name || (strncmp(name, ".debug_", 7) && strncmp(name, ".zdebug_", 8)))
			continue;
		gnu = name[1] == 'z';
		if (lines_unneeded(gnu ? name + 1 : name))
			continue;
		/* The size it will have, before anything is inflated. */
		size = sh.sh_size;
		if (sh.sh_flags & SHF_COMPRESSED)
			size = gelf_getchdr(scn, &ch) ? ch.ch_size : UINT64_MAX;
		else if (gnu)
			size = sh.sh_size * 8;   /* no header to ask before inflating */
		if (size > cap || *total + size > cap)
			return -EFBIG;
		if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
			continue;
		if (gnu && elf_compress_gnu(scn, 0, 0) < 0)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf || d->d_size > cap || *total + d->d_size > cap)
			return d && d->d_size > cap ? -EFBIG : -EINVAL;
		secs[n].name = gnu ? name + 1 : name;
		secs[n].data = d;
		*total += d->d_size;
		has_info |= !strcmp(secs[n].name, ".debug_info") && d->d_size;
		has_line |= !strcmp(secs[n].name, ".debug_line") && d->d_size;
		n++;
	}
	return has_info && has_line ? n : -ENOENT;
}

/* The image of src's debug sections (see above) in f. */
static int lines_file_build(struct lines_file *f, Elf *src, const uint8_t *bid, size_t bid_len,
			    uint64_t cap)
{
	struct lines_sec secs[LINES_MAX_SECTIONS];
	uint8_t have[ELFMETA_BUILD_ID_MAX];
	size_t off, names_off, names_len = 1 + sizeof(".shstrtab"), sh_off, size;
	GElf_Ehdr src_eh;
	Elf64_Shdr *sh;
	uint64_t total;
	int n;

	elf_version(EV_CURRENT);
	if (!src || elf_kind(src) != ELF_K_ELF || !gelf_getehdr(src, &src_eh) ||
	    src_eh.e_ident[EI_CLASS] != ELFCLASS64 || src_eh.e_ident[EI_DATA] != ELFDATA2LSB)
		return -EINVAL;
	if (bid_len) {
		size_t len = elfmeta_build_id(src, have, sizeof(have));

		if (len != bid_len || memcmp(have, bid, len))
			return -EINVAL;
	}
	n = lines_sections(src, cap, secs, &total);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		names_len += strlen(secs[i].name) + 1;
	off = sizeof(Elf64_Ehdr);
	for (int i = 0; i < n; i++)
		off = ((off + 7) & ~(size_t)7) + secs[i].data->d_size + LINES_PAD;
	names_off = off;
	sh_off = (names_off + names_len + LINES_PAD + 7) & ~(size_t)7;
	size = sh_off + (size_t)(n + 2) * sizeof(*sh);
	if (size > cap + 4096 + (size_t)n * 64)
		return -EFBIG;
	f->image = calloc(1, size);
	if (!f->image)
		return -ENOMEM;
	f->cost = size;
	elfmeta_image_header(f->image, &src_eh, sh_off, (unsigned)n + 2, (unsigned)n + 1);
	sh = (Elf64_Shdr *)(f->image + sh_off);
	off = sizeof(Elf64_Ehdr);
	names_len = 1;
	for (int i = 0; i < n; i++) {
		size_t len = strlen(secs[i].name) + 1;

		off = (off + 7) & ~(size_t)7;
		memcpy(f->image + off, secs[i].data->d_buf, secs[i].data->d_size);
		memcpy(f->image + names_off + names_len, secs[i].name, len);
		sh[i + 1] = (Elf64_Shdr){ .sh_name = (Elf64_Word)names_len, .sh_type = SHT_PROGBITS,
					  .sh_offset = off, .sh_size = secs[i].data->d_size,
					  .sh_addralign = 1 };
		names_len += len;
		off += secs[i].data->d_size + LINES_PAD;
	}
	memcpy(f->image + names_off + names_len, ".shstrtab", sizeof(".shstrtab"));
	sh[n + 1] = (Elf64_Shdr){ .sh_name = (Elf64_Word)names_len, .sh_type = SHT_STRTAB,
				  .sh_offset = names_off, .sh_size = names_len + sizeof(".shstrtab"),
				  .sh_addralign = 1 };
	f->elf = elf_memory(f->image, size);
	f->dw = f->elf ? dwarf_begin_elf(f->elf, DWARF_C_READ, NULL) : NULL;
	return f->dw ? 0 : -ENOENT;
}

static int lines_file_from(Elf *src, const uint8_t *bid, size_t bid_len, uint64_t cap,
			   struct lines_file **out)
{
	struct lines_file *f = calloc(1, sizeof(*f));
	int r = f ? lines_file_build(f, src, bid, bid_len, cap) : -ENOMEM;

	*out = NULL;
	if (r < 0)
		lines_file_free(f);
	else
		*out = f;
	return r;
}

int lines_file_open(int fd, const uint8_t *bid, size_t bid_len, uint64_t cap,
		    struct lines_file **out)
{
	Elf *src;
	int r;

	elf_version(EV_CURRENT);
	/* pread, never mmap: see the header. */
	src = elf_begin(fd, ELF_C_READ, NULL);
	r = lines_file_from(src, bid, bid_len, cap, out);
	elf_end(src);
	return r;
}

int lines_file_open_memory(const void *image, size_t size, uint64_t cap, struct lines_file **out)
{
	char *copy = malloc(size ? size : 1);
	Elf *src;
	int r;

	*out = NULL;
	if (!copy)
		return -ENOMEM;
	memcpy(copy, image, size);
	elf_version(EV_CURRENT);
	src = elf_memory(copy, size);
	r = lines_file_from(src, NULL, 0, cap, out);
	elf_end(src);
	free(copy);
	return r;
}

static void lines_copy(char *dst, size_t cap, const char *src)
{
	elfsym_sanitize(src ? src : "", src ? strlen(src) : 0, dst, cap);
}

/* The name of a function or inlined-subroutine DIE (following its abstract
 * origin), demangled as symbol names are. */
static void lines_die_name(Dwarf_Die *die, char *out, size_t cap)
{
	Dwarf_Attribute a;
	const char *name = NULL;

	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
		name = dwarf_formstring(&a);
	if (!name)
		name = dwarf_diename(die);
	if (name)
		elfsym_format_name(name, out, cap);
	else
		*out = '\0';
}

/* Scopes nested deeper than this, or DIEs beyond LINES_MAX_VISITS in one
 * lookup, end the search (corrupt sibling chains must not loop). */
#define LINES_MAX_SCOPES 64
#define LINES_MAX_VISITS 1000000u

/* Appends to chain (outermost first, from n) the scopes under parent that
 * hold vaddr: subprograms, inlined subroutines and lexical blocks whose
 * ranges hold it, looking inside namespaces too. Only those are descended
 * into: dwarf_getscopes() visits every DIE of the CU instead, which took
 * 5 ms a lookup in a CU of 2,500 functions (0.02 ms this way). Returns the
 * new length. */
static int lines_find_scopes(Dwarf_Die *parent, uint64_t vaddr, Dwarf_Die *chain, int n,
			     unsigned *visits)
{
	Dwarf_Die child;

	if (n >= LINES_MAX_SCOPES || dwarf_child(parent, &child) != 0)
		return n;
	do {
		int tag = dwarf_tag(&child);

		if (++*visits > LINES_MAX_VISITS)
			return n;
		if (tag == DW_TAG_namespace || tag == DW_TAG_module) {
			int m = lines_find_scopes(&child, vaddr, chain, n, visits);

			if (m > n)
				return m;
		} else if ((tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
			    tag == DW_TAG_lexical_block) && dwarf_haspc(&child, vaddr) == 1) {
			chain[n] = child;
			return lines_find_scopes(&chain[n], vaddr, chain, n + 1, visits);
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return n;
}

size_t lines_file_lookup(struct lines_file *f, uint64_t vaddr, struct frame_line *out, size_t max)
{
	Dwarf_Die cu, scopes[LINES_MAX_SCOPES];
	unsigned visits = 0;
	Dwarf_Files *files = NULL;
	Dwarf_Line *line;
	const char *src;
	int lineno = 0, nscopes;
	size_t n = 0;

	if (!f || !f->dw || !max || !dwarf_addrdie(f->dw, vaddr, &cu))
		goto out;
	line = dwarf_getsrc_die(&cu, vaddr);
	if (!line || dwarf_lineno(line, &lineno) != 0 || lineno <= 0 ||
	    !(src = dwarf_linesrc(line, NULL, NULL)))
		goto out;
	memset(&out[0], 0, sizeof(out[0]));
	lines_copy(out[0].file, sizeof(out[0].file), src);
	out[0].line = (uint32_t)lineno;
	n = 1;
	/* Scopes innermost first: each inlined subroutine is a frame whose
	 * caller's position is its call_file:call_line; the subprogram ends
	 * the chain. */
	nscopes = lines_find_scopes(&cu, vaddr, scopes, 0, &visits);
	if (nscopes <= 0)
		goto out;
	if (dwarf_getsrcfiles(&cu, &files, NULL) != 0)
		files = NULL;
	for (int i = nscopes - 1; i >= 0; i--) {
		int tag = dwarf_tag(&scopes[i]);
		Dwarf_Attribute a;
		Dwarf_Word file_idx, call_line;

		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
			continue;
		lines_die_name(&scopes[i], out[n - 1].function, sizeof(out[n - 1].function));
		if (tag == DW_TAG_subprogram || n == max)
			break;
		/* The caller's frame: where the inlined body was called. */
		if (!dwarf_attr(&scopes[i], DW_AT_call_line, &a) || dwarf_formudata(&a, &call_line) ||
		    !dwarf_attr(&scopes[i], DW_AT_call_file, &a) || dwarf_formudata(&a, &file_idx) ||
		    !files || !(src = dwarf_filesrc(files, file_idx, NULL, NULL)) || !call_line ||
		    call_line > UINT32_MAX)
			break;
		memset(&out[n], 0, sizeof(out[n]));
		lines_copy(out[n].file, sizeof(out[n].file), src);
		out[n].line = (uint32_t)call_line;
		n++;
	}
out:
	return n;
}
