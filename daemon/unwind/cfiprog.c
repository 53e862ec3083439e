/* CFI programs read before libdw runs them; the CPU budget. See cfiprog.h. */
#include "cfiprog.h"

#include <dwarf.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "elfmeta.h"

/* No x86-64 DWARF register is numbered above 125 (k7). libdw sizes a
 * frame's register file by the largest number named (16 bytes each) and
 * copies it at every row and saved state: 10^8 was 1.6 GB per copy. */
#define CFI_MAX_REG 127
/* Saved states (DW_CFA_remember_state) one FDE may push in all, and hold
 * at once. Compilers push one per epilogue that is not the last; libdw
 * copies the register file for each at every row of the FDE. */
#define CFI_MAX_REMEMBER 4096
#define CFI_MAX_DEPTH 64
/* The CPU clock (a system call) is read after about this many bytes of
 * CFI program handed to libdw or read here: at every row of a long FDE,
 * every few thousand rows of ordinary ones. */
#define BUDGET_CHECK_BYTES 65536

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cfiprog_budget_start(struct cfiprog_budget *bg, uint64_t cpu_ns)
{
	bg->deadline = thread_cpu_ns() + cpu_ns;
	bg->work = 0;
	bg->cancel = NULL;
}

int cfiprog_spend(struct cfiprog_budget *bg, size_t bytes)
{
	if (bg->cancel && atomic_load_explicit(bg->cancel, memory_order_relaxed))
		return -ETIME;
	bg->work += bytes;
	if (bg->work < BUDGET_CHECK_BYTES)
		return 0;
	bg->work = 0;
	return thread_cpu_ns() > bg->deadline ? -ETIME : 0;
}

/* A ULEB128 or SLEB128 at *p skipped, its value (unsigned) in *v when v;
 * false when it runs past end or past the 10 bytes libdw reads. */
static bool leb(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned i = 0; *p < end && i < 10; i++) {
		uint8_t c = *(*p)++;

		r |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			if (v)
				*v = r;
			return true;
		}
	}
	return false;
}

/* Bytes of a value in DW_EH_PE encoding enc at p (absptr: asz); 0 when
 * it is not one libdw reads or runs past end. */
static size_t enc_size(uint8_t enc, const uint8_t *p, const uint8_t *end, size_t asz)
{
	const uint8_t *q = p;

	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
		return asz;
	case DW_EH_PE_udata2: case DW_EH_PE_sdata2:
		return 2;
	case DW_EH_PE_udata4: case DW_EH_PE_sdata4:
		return 4;
	case DW_EH_PE_udata8: case DW_EH_PE_sdata8:
		return 8;
	case DW_EH_PE_uleb128: case DW_EH_PE_sleb128:
		return p && leb(&q, end, NULL) ? (size_t)(q - p) : 0;
	default:
		return 0;
	}
}

/* Reads a CFI program as libdw would run it, before it does: register
 * numbers beyond any x86-64 register, or saved states past the bounds,
 * refuse it. enc, asz: DW_CFA_set_loc's operand. Counts its bytes
 * against the budget. */
static int check_program(struct cfiprog_budget *bg, const uint8_t *p, const uint8_t *end, uint8_t enc,
			 size_t asz)
{
	unsigned depth = 0, saved = 0;
	int r = cfiprog_spend(bg, (size_t)(end - p));

	while (r == 0 && p < end) {
		uint8_t op = *p++;
		uint64_t reg = 0, len = 0;
		size_t skip = 0;
		bool ok = true;

		switch (op & 0xc0) {
		case DW_CFA_advance_loc:
		case DW_CFA_restore:
			continue;  /* the register, if any, is 6 bits */
		case DW_CFA_offset:
			ok = leb(&p, end, NULL);
			goto next;
		}
		switch (op) {
		case DW_CFA_nop:
		case DW_CFA_GNU_window_save:  /* registers 8-31 */
			continue;
		case DW_CFA_set_loc:
			skip = enc_size(enc, p, end, asz);
			ok = skip > 0;
			break;
		case DW_CFA_advance_loc1:
			skip = 1;
			break;
		case DW_CFA_advance_loc2:
			skip = 2;
			break;
		case DW_CFA_advance_loc4:
			skip = 4;
			break;
		case DW_CFA_MIPS_advance_loc8:
			skip = 8;
			break;
		case DW_CFA_remember_state:
			if (++saved > CFI_MAX_REMEMBER)
				return -ETIME;
			if (++depth > CFI_MAX_DEPTH)
				return -EINVAL;
			continue;
		case DW_CFA_restore_state:
			depth -= depth > 0;
			continue;
		case DW_CFA_def_cfa_offset:
		case DW_CFA_def_cfa_offset_sf:
		case DW_CFA_GNU_args_size:
			ok = leb(&p, end, NULL);
			break;
		case DW_CFA_def_cfa_expression:
			ok = leb(&p, end, &len) && len <= (uint64_t)(end - p);
			skip = (size_t)len;
			break;
		case DW_CFA_undefined:
		case DW_CFA_same_value:
		case DW_CFA_restore_extended:
		case DW_CFA_def_cfa_register:
			ok = leb(&p, end, &reg);
			break;
		case DW_CFA_register:
			ok = leb(&p, end, &reg) && leb(&p, end, &len) && len <= CFI_MAX_REG;
			break;
		case DW_CFA_offset_extended:
		case DW_CFA_offset_extended_sf:
		case DW_CFA_def_cfa:
		case DW_CFA_def_cfa_sf:
		case DW_CFA_val_offset:
		case DW_CFA_val_offset_sf:
		case DW_CFA_GNU_negative_offset_extended:
			ok = leb(&p, end, &reg) && leb(&p, end, NULL);
			break;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			ok = leb(&p, end, &reg) && leb(&p, end, &len) && len <= (uint64_t)(end - p);
			skip = (size_t)len;
			break;
		default:
			ok = false;  /* libdw stops at an opcode it does not know: so do we */
		}
next:
		if (!ok || reg > CFI_MAX_REG || skip > (size_t)(end - p))
			return -EINVAL;
		p += skip;
	}
	return r;
}

/* What a CIE tells about its FDEs. */
struct cie_info {
	uint8_t fde_enc;  /* encoding of their addresses */
	bool sized;       /* 'z': their instructions follow an augmentation block */
};

/* The CIE at off of section d checked as libdw reads it (dwarf_next_cfi,
 * then its augmentation). 1: not a CIE libdw can use (nor any FDE of it). */
static int check_cie(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *d, bool eh,
		     Dwarf_Off off, struct cie_info *ci)
{
	size_t asz = ident[EI_CLASS] == ELFCLASS32 ? 4 : 8;
	const uint8_t *a, *aend;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	const char *ap;

	if (dwarf_next_cfi(ident, d, eh, off, &next, &e) != 0 || !dwarf_cfi_cie_p(&e))
		return 1;
	*ci = (struct cie_info){ .fde_enc = DW_EH_PE_absptr };
	ap = e.cie.augmentation;
	a = e.cie.augmentation_data;
	aend = a + e.cie.augmentation_data_size;
	if (e.cie.return_address_register > CFI_MAX_REG)
		return -EINVAL;
	/* Compilers write "", "zR", "zPLR" and the like: data only after 'z'. */
	if (*ap && *ap != 'z')
		return -EINVAL;
	for (; *ap; ap++) {
		uint8_t enc;
		size_t n;

		switch (*ap) {
		case 'z':
			ci->sized = true;
			break;
		case 'L':
		case 'R':
			if (a >= aend)
				return -EINVAL;
			enc = *a++;
			if (*ap == 'R')
				ci->fde_enc = enc;
			break;
		case 'P':
			if (a >= aend)
				return -EINVAL;
			enc = *a++;
			n = enc_size(enc, a, aend, asz);
			if (!n || n > (size_t)(aend - a))
				return -EINVAL;
			a += n;
			break;
		default:
			break;  /* 'S' and others: no data */
		}
	}
	return check_program(bg, e.cie.initial_instructions, e.cie.initial_instructions_end,
			     ci->fde_enc, asz);
}

/* The FDE e of section d and its CIE checked; *cost: its program's bytes,
 * what libdw runs (at most) per row. 1: an FDE libdw cannot use. */
static int check_fde(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *d, bool eh,
		     const Dwarf_CFI_Entry *e, size_t *cost)
{
	size_t asz = ident[EI_CLASS] == ELFCLASS32 ? 4 : 8, n;
	const uint8_t *p = e->fde.start, *end = e->fde.end;
	struct cie_info ci;
	uint64_t len;
	int r = check_cie(bg, ident, d, eh, e->fde.CIE_pointer, &ci);

	if (r != 0)
		return r;
	n = enc_size(ci.fde_enc, p, end, asz);
	if (!n || n > (size_t)(end - p))
		return 1;
	p += n;
	n = enc_size(ci.fde_enc & 0x0f, p, end, asz);
	if (!n || n > (size_t)(end - p))
		return 1;
	p += n;
	if (ci.sized) {
		if (!leb(&p, end, &len) || len > (uint64_t)(end - p))
			return 1;
		p += len;
	}
	*cost = (size_t)(end - p);
	return check_program(bg, p, end, ci.fde_enc, asz);
}

/* The entry at off of section d: an FDE checked (*cost set), or a CIE
 * checked; 1: nothing libdw would run. */
static int check_entry(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *d, bool eh,
		       Dwarf_Off off, Dwarf_Off *next, size_t *cost)
{
	struct cie_info ci;
	Dwarf_CFI_Entry e;
	int rc;

	*next = off;
	rc = dwarf_next_cfi(ident, d, eh, off, next, &e);
	if (rc != 0)
		return 1;
	return dwarf_cfi_cie_p(&e) ? check_cie(bg, ident, d, eh, off, &ci)
				   : check_fde(bg, ident, d, eh, &e, cost);
}

/* In order, as libdw reads a section it has no search table for (skipping
 * what it cannot read, as libdw does). */
int cfiprog_check_section(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *d, bool eh)
{
	Dwarf_Off off = 0, next;

	for (size_t guard = 0; guard < 2 * (size_t)ELFMETA_MAX_FDES; guard++, off = next) {
		size_t cost;
		int rc = check_entry(bg, ident, d, eh, off, &next, &cost);

		if (rc < 0)
			return rc;
		if (next == (Dwarf_Off)-1 || next <= off)
			return 0;
	}
	return -E2BIG;
}

int cfiprog_check_table(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *eh,
			uint64_t eh_vaddr, Elf_Data *hdr, uint64_t hdr_vaddr)
{
	const uint8_t *h = hdr ? hdr->d_buf : NULL;
	size_t psz, cost;
	uint32_t count;
	Dwarf_Off next;
	int r = 0;

	if (!hdr)
		return 0;
	/* The one form linkers write (as elfmeta_ehhdr takes). */
	if (!h || hdr->d_size < 4 || h[0] != 1 || h[2] != DW_EH_PE_udata4 ||
	    h[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
		return -EBADMSG;
	psz = enc_size(h[1], NULL, NULL, 8);
	if (!psz || hdr->d_size < 8 + psz)
		return -EBADMSG;
	memcpy(&count, h + 4 + psz, 4);
	if ((hdr->d_size - 8 - psz) / 8 < count)
		return -EBADMSG;
	for (size_t i = 0; i < count && r >= 0; i++) {
		int32_t rel;
		uint64_t off;

		memcpy(&rel, h + 8 + psz + 8 * i + 4, 4);
		off = hdr_vaddr + (uint64_t)(int64_t)rel - eh_vaddr;
		if (off < eh->d_size)
			r = check_entry(bg, ident, eh, true, off, &next, &cost);
	}
	return r < 0 ? r : 0;
}

size_t cfiprog_fde_cost(Elf_Data *eh, uint64_t eh_vaddr, const unsigned char *ident, uint64_t vaddr)
{
	Dwarf_CFI_Entry e;
	Dwarf_Off next;

	if (vaddr - eh_vaddr >= eh->d_size ||
	    dwarf_next_cfi(ident, eh, true, vaddr - eh_vaddr, &next, &e) != 0 || dwarf_cfi_cie_p(&e))
		return 0;
	return (size_t)(e.fde.end - e.fde.start);
}
