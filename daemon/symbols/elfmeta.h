/* Two things both the symbolizer and the unwind-table builder read from an
 * ELF file, read by one implementation: the GNU build-id note and the
 * .eh_frame_hdr search table (one entry per FDE, sorted by address). */
#ifndef JPROF_ELFMETA_H
#define JPROF_ELFMETA_H

#include <gelf.h>
#include <stddef.h>
#include <stdint.h>

#define ELFMETA_BUILD_ID_MAX 64
/* More FDEs than this in one file is treated as corrupt. */
#define ELFMETA_MAX_FDES (1u << 24)

/* NT_GNU_BUILD_ID from note sections, else from PT_NOTE segments (files
 * whose section headers are gone). Its length (1..cap), or 0 if none. */
size_t elfmeta_build_id(Elf *elf, uint8_t *buf, size_t cap);

/* The .eh_frame_hdr search table as every linker writes it (version 1,
 * udata4 count, datarel sdata4 pairs). Entry i's initial location is
 * base + (int32_t)rd(table + 8 * i), its FDE is 4 bytes further. The table
 * points into the Elf's data and lives as long as it. */
struct elfmeta_ehhdr {
	const uint8_t *table;
	size_t count;
	uint64_t base;         /* vaddr of .eh_frame_hdr (datarel base) */
};

/* 0; -ENOENT when the file has no .eh_frame_hdr; -EBADMSG when it has one
 * this reader does not accept (other encodings, truncated). Sortedness is
 * the caller's to check: entries are read once anyway. */
int elfmeta_ehhdr(Elf *elf, struct elfmeta_ehhdr *out);

/* The ELF64 header of an image in memory that holds only some sections of
 * src (no segments): libdw is handed such images so that it reads nothing
 * else of a user's file. shnum section headers at shoff, names in section
 * shstrndx; identity, type and machine from src. */
void elfmeta_image_header(void *image, const GElf_Ehdr *src, uint64_t shoff, unsigned shnum,
			  unsigned shstrndx);

static inline uint64_t elfmeta_ehhdr_loc(const struct elfmeta_ehhdr *h, size_t i)
{
	int32_t rel;

	__builtin_memcpy(&rel, h->table + 8 * i, sizeof(rel));
	return h->base + (uint64_t)(int64_t)rel;
}

#endif
