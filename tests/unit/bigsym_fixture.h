/* Writes ELF files with big symbol tables for test_elfsym and test_symbols:
 * one PT_LOAD (file offset = vaddr) over a .text of zeros, then .symtab
 * entries naming functions in it. The tables are what a hostile user
 * could map: many symbols sharing one name, or names overlapping in one
 * long string. Written byte by byte, not with the code under test. */
#ifndef JPROF_TEST_BIGSYM_FIXTURE_H
#define JPROF_TEST_BIGSYM_FIXTURE_H

#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIGSYM_TEXT 0x1000u          /* .text offset and vaddr */

struct bigsym_spec {
	size_t nsyms;
	size_t text_size;                /* functions are 16 bytes apart in it */
	const char *strtab;              /* string table (starts with NUL) */
	size_t strtab_len;
	/* st_name of symbol i (an offset into strtab) */
	uint32_t (*name_of)(size_t i, const struct bigsym_spec *sp);
	unsigned bind;                   /* STB_GLOBAL, ... */
};

static inline int bigsym_write(const char *path, const struct bigsym_spec *sp)
{
	static const char shstr[] = "\0.text\0.shstrtab\0.strtab\0.symtab";
	size_t text_end = BIGSYM_TEXT + sp->text_size;
	size_t off_shstr = text_end, off_str = off_shstr + sizeof(shstr);
	size_t off_sym = (off_str + sp->strtab_len + 7) & ~(size_t)7;
	size_t sym_size = (sp->nsyms + 1) * sizeof(Elf64_Sym);
	size_t off_sh = off_sym + sym_size, total = off_sh + 5 * sizeof(Elf64_Shdr);
	unsigned char *f = calloc(1, total);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)f;
	Elf64_Phdr *ph = (Elf64_Phdr *)(f + sizeof(*eh));
	Elf64_Sym *sym = (Elf64_Sym *)(f + off_sym);
	Elf64_Shdr *sh = (Elf64_Shdr *)(f + off_sh);
	size_t nfunc = sp->text_size / 16 ? sp->text_size / 16 : 1;
	FILE *out;
	int ret = -1;

	if (!f)
		return -1;
	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_ident[EI_VERSION] = EV_CURRENT;
	eh->e_type = ET_DYN;
	eh->e_machine = EM_X86_64;
	eh->e_version = EV_CURRENT;
	eh->e_phoff = sizeof(*eh);
	eh->e_shoff = off_sh;
	eh->e_ehsize = sizeof(*eh);
	eh->e_phentsize = sizeof(*ph);
	eh->e_phnum = 1;
	eh->e_shentsize = sizeof(*sh);
	eh->e_shnum = 5;
	eh->e_shstrndx = 2;
	ph->p_type = PT_LOAD;
	ph->p_flags = PF_R | PF_X;
	ph->p_filesz = ph->p_memsz = text_end;
	ph->p_align = 0x1000;
	memcpy(f + off_shstr, shstr, sizeof(shstr));
	memcpy(f + off_str, sp->strtab, sp->strtab_len);
	for (size_t i = 0; i < sp->nsyms; i++) {
		Elf64_Sym *s = &sym[i + 1];

		s->st_name = sp->name_of(i, sp);
		s->st_info = ELF64_ST_INFO(sp->bind, STT_FUNC);
		s->st_shndx = 1;
		s->st_value = BIGSYM_TEXT + (i % nfunc) * 16;
		s->st_size = 16;
	}
	sh[1] = (Elf64_Shdr){ .sh_name = 1, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
			      .sh_addr = BIGSYM_TEXT, .sh_offset = BIGSYM_TEXT, .sh_size = sp->text_size,
			      .sh_addralign = 16 };
	sh[2] = (Elf64_Shdr){ .sh_name = 7, .sh_type = SHT_STRTAB, .sh_offset = off_shstr,
			      .sh_size = sizeof(shstr), .sh_addralign = 1 };
	sh[3] = (Elf64_Shdr){ .sh_name = 17, .sh_type = SHT_STRTAB, .sh_offset = off_str,
			      .sh_size = sp->strtab_len, .sh_addralign = 1 };
	sh[4] = (Elf64_Shdr){ .sh_name = 25, .sh_type = SHT_SYMTAB, .sh_offset = off_sym,
			      .sh_size = sym_size, .sh_link = 3, .sh_info = 1, .sh_addralign = 8,
			      .sh_entsize = sizeof(Elf64_Sym) };
	out = fopen(path, "we");
	if (out && fwrite(f, 1, total, out) == total)
		ret = 0;
	if (out && fclose(out) != 0)
		ret = -1;
	free(f);
	return ret;
}

/* Every symbol named by the string at offset 1. */
static inline uint32_t bigsym_name_one(size_t i, const struct bigsym_spec *sp)
{
	(void)i;
	(void)sp;
	return 1;
}

/* Symbol i named by the suffix at 1 + i of one long name. */
static inline uint32_t bigsym_name_suffix(size_t i, const struct bigsym_spec *sp)
{
	return (uint32_t)(1 + i % (sp->strtab_len - 2));
}

/* "\0" + n times c + "\0" (free it). */
static inline char *bigsym_one_name(size_t n, char c, size_t *len)
{
	char *s = malloc(n + 2);

	if (!s)
		abort();
	s[0] = '\0';
	memset(s + 1, c, n);
	s[n + 1] = '\0';
	*len = n + 2;
	return s;
}

#endif
