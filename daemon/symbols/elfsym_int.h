/* Internals shared by the ELF symbol reader's files: elfsym.c (opening
 * files, debug files, segments, function starts), elfsym_table.c (reading
 * symbol tables) and elfsym_names.c (lookups, name formatting). Not for
 * other modules. */
#ifndef JPROF_ELFSYM_INT_H
#define JPROF_ELFSYM_INT_H

#include <gelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "elfsym.h"
#include "htab.h"

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

/* elfsym_table.c */
/* Keeps one symbol per address (syms sorted): the best-ranked alias, among
 * those the first name in byte order, so that every load of one file keeps
 * the same; with the largest size among the aliases, so that coverage does
 * not depend on which alias carried the size. */
void elfsym_dedup(struct elfsym *e, const char *strs, size_t slen);
/* Copies the kept symbols' names out of the string table, once each: one
 * name per symbol while they fit in fewer bytes than the table itself
 * (the usual case: a table also names objects, sections and aliases), else
 * the whole table, so that names shared by many symbols (or overlapping)
 * are never copied more than once. Either way at most slen + 1 bytes. */
int elfsym_copy_names(struct elfsym *e, const char *strs, size_t slen);
/* Most a table of nent entries with a string table of slen bytes can keep. */
size_t elfsym_table_need(size_t nent, size_t slen);
/* Loads the first section of the given type. 0 also when there is none. */
int elfsym_load_section_type(struct elfsym *e, Elf *elf, int fd, Elf64_Word type,
			     const struct elfsym_limits *lim, bool *found);

#endif
