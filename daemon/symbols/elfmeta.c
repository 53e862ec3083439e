/* Build-id and .eh_frame_hdr readers shared by symbols/ and unwind/. */
#include "elfmeta.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static size_t parse_notes(const Elf_Data *data, uint8_t *buf, size_t cap)
{
	size_t off = 0, next, name_off, desc_off;
	GElf_Nhdr nh;

	while (off < data->d_size &&
	       (next = gelf_getnote((Elf_Data *)data, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
		    memcmp((const char *)data->d_buf + name_off, "GNU", 4) == 0 &&
		    nh.n_descsz > 0 && nh.n_descsz <= cap) {
			memcpy(buf, (const uint8_t *)data->d_buf + desc_off, nh.n_descsz);
			return nh.n_descsz;
		}
		off = next;
	}
	return 0;
}

size_t elfmeta_build_id(Elf *elf, uint8_t *buf, size_t cap)
{
	Elf_Scn *scn = NULL;
	size_t nph = 0, len;

	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		data = elf_getdata(scn, NULL);
		if (data && data->d_buf && (len = parse_notes(data, buf, cap)))
			return len;
	}
	if (elf_getphdrnum(elf, &nph) != 0)
		return 0;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		Elf_Data *data;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_NOTE)
			continue;
		data = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_NHDR);
		if (data && data->d_buf && (len = parse_notes(data, buf, cap)))
			return len;
	}
	return 0;
}

#define EH_PE_UDATA4 0x03
#define EH_PE_SDATA4 0x0b
#define EH_PE_UDATA8 0x04
#define EH_PE_SDATA8 0x0c
#define EH_PE_DATAREL_SDATA4 0x3b

static size_t eh_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case EH_PE_UDATA4: case EH_PE_SDATA4: return 4;
	case EH_PE_UDATA8: case EH_PE_SDATA8: return 8;
	default: return 0;
	}
}

/* Found by PT_GNU_EH_FRAME, which files without section headers keep too. */
int elfmeta_ehhdr(Elf *elf, struct elfmeta_ehhdr *out)
{
	const uint8_t *d;
	Elf_Data *data;
	size_t nph, ptr_size, off;
	uint32_t count;
	GElf_Phdr ph;
	bool found = false;

	memset(out, 0, sizeof(*out));
	if (elf_getphdrnum(elf, &nph) != 0)
		return -ENOENT;
	for (size_t i = 0; i < nph && !found; i++)
		found = gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_GNU_EH_FRAME;
	if (!found)
		return -ENOENT;
	if (ph.p_filesz < 12 || ph.p_filesz > ((uint64_t)ELFMETA_MAX_FDES + 2) * 8)
		return -EBADMSG;
	data = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_BYTE);
	if (!data || !data->d_buf || data->d_size != ph.p_filesz)
		return -EBADMSG;
	d = data->d_buf;
	ptr_size = eh_size(d[1]);
	if (d[0] != 1 || !ptr_size || d[2] != EH_PE_UDATA4 || d[3] != EH_PE_DATAREL_SDATA4)
		return -EBADMSG;
	off = 4 + ptr_size;
	if (off + 4 > data->d_size)
		return -EBADMSG;
	memcpy(&count, d + off, 4);
	off += 4;
	if (count > ELFMETA_MAX_FDES || (data->d_size - off) / 8 < count)
		return -EBADMSG;
	*out = (struct elfmeta_ehhdr){ .table = d + off, .count = count, .base = ph.p_vaddr };
	return 0;
}

void elfmeta_image_header(void *image, const GElf_Ehdr *src, uint64_t shoff, unsigned shnum,
			  unsigned shstrndx)
{
	Elf64_Ehdr *eh = image;

	memcpy(eh->e_ident, src->e_ident, EI_NIDENT);
	eh->e_type = src->e_type;
	eh->e_machine = src->e_machine;
	eh->e_version = EV_CURRENT;
	eh->e_shoff = shoff;
	eh->e_ehsize = sizeof(*eh);
	eh->e_shentsize = sizeof(Elf64_Shdr);
	eh->e_shnum = (Elf64_Half)shnum;
	eh->e_shstrndx = (Elf64_Half)shstrndx;
}
