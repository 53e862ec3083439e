/* .eh_frame -> jp_unwind_row tables. See cfi.h. */
#include "cfi.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cfiprog.h"
#include "elfmeta.h"

#define DWARF_REG_RBP 6
#define DWARF_REG_RSP 7
#define DWARF_REG_RA 16
/* An FDE with more rows than this is not a function's: corrupt. */
#define FDE_MAX_ROWS 65536

struct range {
	uint64_t lo, hi;
};

struct builder {
	Elf *elf;
	struct cfi_table *t;
	size_t cap, max_rows;
	struct range plt[4];
	size_t nplt;
	enum cfi_error err;
	struct cfiprog_budget budget;
};

const char *cfi_error_name(enum cfi_error e)
{
	static const char *const names[CFI_NERRORS] = {
		[CFI_OK] = "ok", [CFI_ERR_NOT_ELF] = "not_elf", [CFI_ERR_NO_CFI] = "no_cfi",
		[CFI_ERR_BAD_HDR] = "bad_hdr", [CFI_ERR_CORRUPT] = "corrupt",
		[CFI_ERR_TOO_BIG] = "too_big", [CFI_ERR_NOMEM] = "nomem",
		[CFI_ERR_BUDGET] = "over_budget",
	};

	return (unsigned)e < CFI_NERRORS ? names[e] : "unknown";
}

static int fail(struct builder *b, enum cfi_error e)
{
	static const int codes[CFI_NERRORS] = {
		[CFI_ERR_NOT_ELF] = -EINVAL, [CFI_ERR_NO_CFI] = -ENOENT, [CFI_ERR_BAD_HDR] = -EINVAL,
		[CFI_ERR_CORRUPT] = -EINVAL, [CFI_ERR_TOO_BIG] = -E2BIG, [CFI_ERR_NOMEM] = -ENOMEM,
		[CFI_ERR_BUDGET] = -ETIME,
	};

	b->err = e;
	return codes[e];
}

/* fail() for the -errno of cfiprog.h. */
static int fail_errno(struct builder *b, int r)
{
	switch (r) {
	case -EINVAL:
		return fail(b, CFI_ERR_CORRUPT);
	case -ETIME:
		return fail(b, CFI_ERR_BUDGET);
	case -EBADMSG:
		return fail(b, CFI_ERR_BAD_HDR);
	case -E2BIG:
		return fail(b, CFI_ERR_TOO_BIG);
	default:
		return fail(b, CFI_ERR_NOMEM);
	}
}

static bool in_exec_segment(const struct cfi_table *t, uint64_t addr)
{
	for (size_t i = 0; i < t->nsegs; i++)
		if (addr >= t->segs[i].vaddr && addr - t->segs[i].vaddr < t->segs[i].filesz)
			return true;
	return false;
}

static uint64_t segment_end(const struct cfi_table *t, uint64_t addr)
{
	for (size_t i = 0; i < t->nsegs; i++)
		if (addr >= t->segs[i].vaddr && addr - t->segs[i].vaddr < t->segs[i].filesz)
			return t->segs[i].vaddr + t->segs[i].filesz;
	return addr;
}

static int read_segments(struct builder *b)
{
	size_t n;

	if (elf_getphdrnum(b->elf, &n) < 0)
		return fail(b, CFI_ERR_NOT_ELF);
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(b->elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		if (b->t->nsegs == sizeof(b->t->segs) / sizeof(b->t->segs[0]))
			return fail(b, CFI_ERR_CORRUPT);
		b->t->segs[b->t->nsegs++] = (struct cfi_segment){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
	}
	return b->t->nsegs ? 0 : fail(b, CFI_ERR_NO_CFI);
}

int cfi_read_build_id(int fd, uint8_t *buf, size_t cap)
{
	Elf *elf;
	int r = -EINVAL;

	/* pread, never mmap: the file is any process's mapping, and one its
	 * owner truncates under a mapping would be SIGBUS in the daemon. */
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf && elf_kind(elf) == ELF_K_ELF)
		r = (int)elfmeta_build_id(elf, buf, cap);
	elf_end(elf);
	return r;
}

/* The section name table's data, or NULL. Names are looked up in it
 * directly rather than with elf_strptr(), which in libelf 0.188 leaks its
 * copy of the table for some corrupt files opened with ELF_C_READ
 * (fuzz_cfi found it). */
static Elf_Data *names_data(Elf *elf)
{
	size_t shstrndx;
	GElf_Shdr sh;
	Elf_Scn *scn;

	if (elf_getshdrstrndx(elf, &shstrndx) < 0 || !(scn = elf_getscn(elf, shstrndx)) ||
	    !gelf_getshdr(scn, &sh) || sh.sh_type != SHT_STRTAB || (sh.sh_flags & SHF_COMPRESSED))
		return NULL;
	return elf_getdata(scn, NULL);
}

/* The NUL-terminated name at off in the table, or NULL. */
static const char *name_at(const Elf_Data *names, size_t off)
{
	const char *p;

	if (!names || !names->d_buf || off >= names->d_size)
		return NULL;
	p = (const char *)names->d_buf + off;
	return memchr(p, '\0', names->d_size - off) ? p : NULL;
}

/* The PLT sections' ranges (their CFI is an expression: rows of their own). */
static void find_plt(struct builder *b)
{
	Elf_Data *names = names_data(b->elf);
	Elf_Scn *scn = NULL;

	if (!names)
		return;
	while ((scn = elf_nextscn(b->elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || !(name = name_at(names, sh.sh_name)))
			continue;
		if (strncmp(name, ".plt", 4) == 0 && b->nplt < 4 && sh.sh_size)
			b->plt[b->nplt++] = (struct range){ sh.sh_addr, sh.sh_addr + sh.sh_size };
	}
}

static bool in_plt(const struct builder *b, uint64_t pc)
{
	for (size_t i = 0; i < b->nplt; i++)
		if (pc >= b->plt[i].lo && pc < b->plt[i].hi)
			return true;
	return false;
}

/* "saved at CFA + off" as libdw spells it: DW_OP_call_frame_cfa,
 * DW_OP_plus_uconst off (off wrapped to unsigned when negative). */
static bool cfa_offset_rule(const Dwarf_Op *ops, size_t n, int64_t *off)
{
	if (n != 2 || ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_plus_uconst)
		return false;
	*off = (int64_t)ops[1].number;
	return true;
}

/* The address of a saved register as "rsp + off" (a DW_CFA_expression of
 * DW_OP_breg7 off, which libdw gives after DW_OP_call_frame_cfa). */
static bool saved_at_rsp(Dwarf_Frame *f, int reg, int64_t *off)
{
	Dwarf_Op mem[3], *ops;
	size_t n;

	if (dwarf_frame_register(f, reg, mem, &ops, &n) < 0 || n != 2 ||
	    ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_breg7)
		return false;
	*off = (int64_t)ops[1].number;
	return true;
}

/* A signal frame (CIE augmentation "S": the return trampoline): the
 * interrupted context's registers as the kernel saved them. A JP_UW_SIGNAL
 * row when they are where Linux on x86-64 puts them relative to rsp (the
 * CFA read from rsp + N, the return address at rsp + N + 8, rbp saved at
 * rsp + M), else frame pointers. */
static void signal_row(Dwarf_Frame *f, struct jp_unwind_row *r)
{
	Dwarf_Op *ops;
	size_t n;
	int64_t ra, bp;

	if (dwarf_frame_cfa(f, &ops, &n) < 0 || n != 2 || ops[0].atom != DW_OP_breg7 ||
	    ops[1].atom != DW_OP_deref || (int64_t)ops[0].number < 0 ||
	    (int64_t)ops[0].number > 4096)
		return;
	if (!saved_at_rsp(f, DWARF_REG_RA, &ra) || ra != (int64_t)ops[0].number + 8 ||
	    !saved_at_rsp(f, DWARF_REG_RBP, &bp) || bp <= 0 || bp > 4096)
		return;
	r->kind = JP_UW_SIGNAL;
	r->cfa_off = (int32_t)ops[0].number;
	r->rbp_off = (int16_t)bp;
}

/* Reduces libdw's frame state at pc to a row. */
static void row_of(const struct builder *b, Dwarf_Frame *f, uint64_t pc, struct jp_unwind_row *r)
{
	Dwarf_Op mem[3], *ops;
	size_t n;
	int64_t off;
	bool signal = false;

	memset(r, 0, sizeof(*r));
	r->pc = (uint32_t)pc;
	r->kind = JP_UW_FP;
	if (dwarf_frame_info(f, NULL, NULL, &signal) < 0)
		return;
	if (signal) {
		signal_row(f, r);
		return;
	}
	if (dwarf_frame_cfa(f, &ops, &n) < 0 || n == 0)
		return;
	if (n == 1 && ops[0].atom == DW_OP_bregx &&
	    (ops[0].number == DWARF_REG_RSP || ops[0].number == DWARF_REG_RBP) &&
	    (int64_t)ops[0].number2 >= INT32_MIN && (int64_t)ops[0].number2 <= INT32_MAX) {
		r->cfa_off = (int32_t)(int64_t)ops[0].number2;
		r->kind = ops[0].number == DWARF_REG_RSP ? JP_UW_CFA_RSP : JP_UW_CFA_RBP;
	} else if (in_plt(b, pc)) {
		r->cfa_off = 8;
		r->kind = JP_UW_CFA_RSP;
	} else {
		return;
	}
	if (dwarf_frame_register(f, DWARF_REG_RA, mem, &ops, &n) < 0)
		goto fp;
	if (n == 0 && ops == mem) {
		r->kind = JP_UW_END;  /* return address undefined: outermost frame */
		r->cfa_off = 0;
		return;
	}
	if (!cfa_offset_rule(ops, n, &off) || off != -8)
		goto fp;
	if (dwarf_frame_register(f, DWARF_REG_RBP, mem, &ops, &n) < 0)
		goto fp;
	if (n == 0)
		return;  /* same value or undefined: rbp stays as it is */
	if (!cfa_offset_rule(ops, n, &off) || off == 0 || off < INT16_MIN || off > INT16_MAX)
		goto fp;
	r->rbp_off = (int16_t)off;
	return;
fp:
	r->kind = JP_UW_FP;
	r->cfa_off = 0;
	r->rbp_off = 0;
}

static bool same_rule(const struct jp_unwind_row *a, const struct jp_unwind_row *b)
{
	return a->kind == b->kind && a->cfa_off == b->cfa_off && a->rbp_off == b->rbp_off;
}

static int push(struct builder *b, const struct jp_unwind_row *r)
{
	struct cfi_table *t = b->t;

	if (t->n) {
		struct jp_unwind_row *last = &t->rows[t->n - 1];

		if (r->pc < last->pc)
			return fail(b, CFI_ERR_CORRUPT);  /* FDEs overlap */
		if (r->pc == last->pc) {
			*last = *r;
			if (t->n > 1 && same_rule(&t->rows[t->n - 2], last))
				t->n--;
			return 0;
		}
		if (same_rule(last, r))
			return 0;
	}
	if (t->n == b->max_rows)
		return fail(b, CFI_ERR_TOO_BIG);
	if (t->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 4096;
		struct jp_unwind_row *p;

		if (cap > b->max_rows)
			cap = b->max_rows;
		p = realloc(t->rows, cap * sizeof(*p));
		if (!p)
			return fail(b, CFI_ERR_NOMEM);
		t->rows = p;
		b->cap = cap;
	}
	t->rows[t->n++] = *r;
	return 0;
}

static int push_fp(struct builder *b, uint64_t pc)
{
	struct jp_unwind_row r = { .pc = (uint32_t)pc, .kind = JP_UW_FP };

	return push(b, &r);
}

/* .eh_frame as dwarf_getcfi_elf() finds it: the first section of that
 * name, with the last .eh_frame_hdr section before it as its search
 * table. Every FDE libdw could reach, through the table or reading the
 * section through, is checked (cfiprog.h); *eh_out, *vaddr_out: the
 * section, for the FDEs' costs. Without such a section libdw would look
 * for one through the program headers: not taken. */
static int check_eh_frame(struct builder *b, const unsigned char *ident, Elf_Data **eh_out,
			  uint64_t *vaddr_out)
{
	Elf_Data *names = names_data(b->elf), *hdr = NULL, *eh = NULL;
	uint64_t hdr_vaddr = 0, eh_vaddr = 0;
	Elf_Scn *scn = NULL;
	int r;

	while (names && !eh && (scn = elf_nextscn(b->elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || !(name = name_at(names, sh.sh_name)))
			continue;
		if (strcmp(name, ".eh_frame_hdr") == 0) {
			hdr = elf_getdata(scn, NULL);
			hdr_vaddr = sh.sh_addr;
		} else if (strcmp(name, ".eh_frame") == 0) {
			if (sh.sh_type == SHT_NOBITS || !(eh = elf_getdata(scn, NULL)) || !eh->d_buf)
				return fail(b, CFI_ERR_BAD_HDR);
			eh_vaddr = sh.sh_addr;
		}
	}
	if (!eh)
		return fail(b, CFI_ERR_BAD_HDR);
	*eh_out = eh;
	*vaddr_out = eh_vaddr;
	r = cfiprog_check_section(&b->budget, ident, eh, true);
	if (r == 0)
		r = cfiprog_check_table(&b->budget, ident, eh, eh_vaddr, hdr, hdr_vaddr);
	return r < 0 ? fail_errno(b, r) : 0;
}

/* The rows of one FDE, from its first address up to limit (the next FDE or
 * the end of the segment). */
static int expand_fde(struct builder *b, Dwarf_CFI *cfi, uint64_t addr, uint64_t limit,
		      size_t cost)
{
	for (int k = 0; k < FDE_MAX_ROWS && addr < limit; k++) {
		Dwarf_Frame *f = NULL;
		Dwarf_Addr start, end;
		struct jp_unwind_row r;
		int rc = cfiprog_spend(&b->budget, cost + 64);

		if (rc < 0)
			return fail_errno(b, rc);
		if (dwarf_cfi_addrframe(cfi, addr, &f) < 0)
			return push_fp(b, addr);  /* past the FDE: a gap without CFI */
		if (dwarf_frame_info(f, &start, &end, NULL) < 0 || start > addr || end <= addr) {
			free(f);
			return fail(b, CFI_ERR_CORRUPT);
		}
		row_of(b, f, addr, &r);
		free(f);
		rc = push(b, &r);
		if (rc < 0)
			return rc;
		addr = end;
	}
	return addr < limit ? fail(b, CFI_ERR_CORRUPT) : 0;
}

/* One FDE to expand: from lo up to hi (0: up to the next FDE's start, as
 * .eh_frame_hdr gives no length), with the CFI it belongs to. */
struct fde_ref {
	uint64_t lo, hi;
	size_t cost;  /* bytes of its program: libdw runs up to them per row */
	Dwarf_CFI *cfi;
	int pref;  /* at one address, .eh_frame (0) wins over .debug_frame (1) */
};

struct fde_list {
	struct fde_ref *v;
	size_t n, cap;
};

static int fde_add(struct builder *b, struct fde_list *l, const struct fde_ref *f)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct fde_ref *p;

		if (cap > ELFMETA_MAX_FDES)
			return fail(b, CFI_ERR_TOO_BIG);
		p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return fail(b, CFI_ERR_NOMEM);
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *f;
	return 0;
}

static int fde_cmp(const void *a, const void *b)
{
	const struct fde_ref *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->pref - y->pref;
}

/* The search table's FDEs (sorted, or the file is corrupt); eh, eh_vaddr:
 * .eh_frame, for their costs. */
static int add_hdr(struct builder *b, struct fde_list *l, Dwarf_CFI *cfi,
		   const struct elfmeta_ehhdr *h, Elf_Data *eh, uint64_t eh_vaddr)
{
	const unsigned char *ident = (const unsigned char *)elf_getident(b->elf, NULL);

	uint64_t prev = 0;
	int rc = 0;

	for (size_t i = 0; i < h->count && rc == 0; i++) {
		uint64_t loc = elfmeta_ehhdr_loc(h, i);
		int32_t rel;

		if (i && loc < prev)
			return fail(b, CFI_ERR_CORRUPT);  /* the search table must be sorted */
		prev = loc;
		if (!in_exec_segment(b->t, loc))
			continue;  /* an FDE of no code: ignore it */
		memcpy(&rel, h->table + 8 * i + 4, sizeof(rel));
		rc = fde_add(b, l, &(struct fde_ref){ .lo = loc, .cfi = cfi,
			.cost = cfiprog_fde_cost(eh, eh_vaddr, ident, h->base + (uint64_t)(int64_t)rel) });
	}
	return rc;
}

static Elf_Data *section_data(Elf *elf, const char *want)
{
	Elf_Data *names = names_data(elf);
	Elf_Scn *scn = NULL;

	if (!names)
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || !(name = name_at(names, sh.sh_name)) ||
		    strcmp(name, want) != 0 || sh.sh_type != SHT_PROGBITS)
			continue;
		if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
			return NULL;
		return elf_getdata(scn, NULL);
	}
	return NULL;
}

/* libdw interprets .debug_frame only through a Dwarf handle, and
 * dwarf_begin_elf() reads every debug section of the file it is given: all
 * of .debug_info of an unstripped binary or a debug file (hundreds of MiB
 * for some). So it is given a small ELF image in memory holding
 * .debug_frame alone (at most DEBUG_FRAME_MAX). */
#define DEBUG_FRAME_MAX (64u << 20)

struct frame_image {
	char *buf;
	Elf *elf;
	Dwarf *dw;
};

static void frame_image_end(struct frame_image *fi)
{
	if (fi->dw)
		dwarf_end(fi->dw);  /* ends its CFI too */
	if (fi->elf)
		elf_end(fi->elf);
	free(fi->buf);
	*fi = (struct frame_image){ 0 };
}

static Dwarf_CFI *frame_image_cfi(struct frame_image *fi, Elf *src, const Elf_Data *d)
{
	static const char names[] = "\0.debug_frame\0.shstrtab";
	GElf_Ehdr src_eh;
	Elf64_Shdr *sh;
	size_t data_off = sizeof(Elf64_Ehdr), names_off = data_off + d->d_size;
	size_t sh_off = (names_off + sizeof(names) + 7) & ~(size_t)7;
	size_t size = sh_off + 3 * sizeof(*sh);

	if (d->d_size > DEBUG_FRAME_MAX || !gelf_getehdr(src, &src_eh))
		return NULL;
	fi->buf = calloc(1, size);
	if (!fi->buf)
		return NULL;
	elfmeta_image_header(fi->buf, &src_eh, sh_off, 3, 2);
	memcpy(fi->buf + data_off, d->d_buf, d->d_size);
	memcpy(fi->buf + names_off, names, sizeof(names));
	sh = (Elf64_Shdr *)(fi->buf + sh_off);
	sh[1] = (Elf64_Shdr){ .sh_name = 1, .sh_type = SHT_PROGBITS, .sh_offset = data_off,
			      .sh_size = d->d_size, .sh_addralign = 1 };
	sh[2] = (Elf64_Shdr){ .sh_name = 14, .sh_type = SHT_STRTAB, .sh_offset = names_off,
			      .sh_size = sizeof(names), .sh_addralign = 1 };
	fi->elf = elf_memory(fi->buf, size);
	fi->dw = fi->elf ? dwarf_begin_elf(fi->elf, DWARF_C_READ, NULL) : NULL;
	return fi->dw ? dwarf_getcfi(fi->dw) : NULL;
}

/* .debug_frame's FDEs: what objects built without unwind tables
 * (-fno-asynchronous-unwind-tables) keep, in the file or in its separate
 * debug file. No search table: each FDE is read for its range. Only the
 * 64-bit absolute addresses GCC and clang write are taken. */
static int add_debug_frame(struct builder *b, struct fde_list *l, Elf *elf, Elf_Data *d,
			   Dwarf_CFI *cfi)
{
	const unsigned char *ident = (const unsigned char *)elf_getident(elf, NULL);
	Dwarf_Off off = 0, next;
	size_t guard = 0;

	if (!ident)
		return 0;
	for (; guard < ELFMETA_MAX_FDES; guard++, off = next) {
		Dwarf_CFI_Entry e;
		uint64_t lo, len;
		int rc = dwarf_next_cfi(ident, d, false, off, &next, &e);

		if (rc > 0)
			return 0;
		if (rc < 0 || next <= off)
			return fail(b, CFI_ERR_CORRUPT);
		if (dwarf_cfi_cie_p(&e))
			continue;
		if (e.fde.end - e.fde.start < 16)
			return fail(b, CFI_ERR_CORRUPT);
		memcpy(&lo, e.fde.start, 8);
		memcpy(&len, e.fde.start + 8, 8);
		if (!len || !in_exec_segment(b->t, lo))
			continue;  /* discarded by the linker (address 0), or no code */
		if (len > segment_end(b->t, lo) - lo)
			return fail(b, CFI_ERR_CORRUPT);
		rc = fde_add(b, l, &(struct fde_ref){ .lo = lo, .hi = lo + len, .cfi = cfi, .pref = 1,
						     .cost = (size_t)(e.fde.end - e.fde.start) });
		if (rc < 0)
			return rc;
	}
	return fail(b, CFI_ERR_TOO_BIG);
}

/* Every FDE in address order, each up to its end or the next one's start
 * (or its segment's end); a gap after an FDE of known length runs on
 * frame pointers. Where both sections describe a function, .eh_frame's
 * FDE is used. */
static int expand_all(struct builder *b, struct fde_list *l)
{
	int rc = 0;

	qsort(l->v, l->n, sizeof(*l->v), fde_cmp);
	for (size_t i = 0; i < l->n && rc == 0; i++) {
		const struct fde_ref *f = &l->v[i];
		uint64_t limit = segment_end(b->t, f->lo), next = limit;

		if (i && l->v[i - 1].lo == f->lo)
			continue;  /* the other section's FDE for this function */
		for (size_t j = i + 1; j < l->n; j++)
			if (l->v[j].lo > f->lo) {
				next = l->v[j].lo < limit ? l->v[j].lo : limit;
				break;
			}
		if (f->lo > UINT32_MAX || next > (uint64_t)UINT32_MAX + 1)
			return fail(b, CFI_ERR_TOO_BIG);
		rc = expand_fde(b, f->cfi, f->lo, f->hi && f->hi < next ? f->hi : next, f->cost);
		if (rc == 0 && f->hi && f->hi < next)
			rc = push_fp(b, f->hi);
		b->t->fdes++;
	}
	return rc;
}

static int build(Elf *elf, Elf *debug_elf, const struct cfi_limits *lim, struct cfi_table **out,
		 enum cfi_error *why)
{
	struct fde_list fdes = { 0 };
	struct frame_image img[2] = { { 0 }, { 0 } };
	Dwarf_CFI *dcfi;
	size_t ndebug = 0, before;
	struct builder b = { .elf = elf, .max_rows = lim->max_rows ? lim->max_rows : 1 };
	Dwarf_CFI *cfi = NULL;
	struct elfmeta_ehhdr hdr;
	Elf_Data *ehd = NULL;
	uint64_t eh_vaddr = 0;
	GElf_Ehdr eh;
	int r;

	*out = NULL;
	cfiprog_budget_start(&b.budget, lim->cpu_ns ? lim->cpu_ns : CFI_BUILD_CPU_NS);
	b.budget.cancel = lim->cancel;
	b.t = calloc(1, sizeof(*b.t));
	if (!b.t) {
		r = fail(&b, CFI_ERR_NOMEM);
		goto out;
	}
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
		r = fail(&b, CFI_ERR_NOT_ELF);
		goto out;
	}
	r = read_segments(&b);
	if (r < 0)
		goto out;
	b.t->build_id_len = elfmeta_build_id(elf, b.t->build_id, sizeof(b.t->build_id));
	r = elfmeta_ehhdr(elf, &hdr);
	if (r == -EBADMSG) {
		r = fail(&b, CFI_ERR_BAD_HDR);
		goto out;
	}
	find_plt(&b);
	if (r == 0 && hdr.count) {
		/* Everything libdw could run of it, before it runs any. */
		r = check_eh_frame(&b, (const unsigned char *)eh.e_ident, &ehd, &eh_vaddr);
		if (r < 0)
			goto out;
		cfi = dwarf_getcfi_elf(elf);
		r = cfi ? add_hdr(&b, &fdes, cfi, &hdr, ehd, eh_vaddr) : 0;
		if (r < 0)
			goto out;
	}
	/* .debug_frame of the file itself, else of its debug file. */
	for (int k = 0; k < 2; k++) {
		Elf *src = k ? debug_elf : elf;

		Elf_Data *d;

		if (!src || (k && ndebug))
			continue;
		d = section_data(src, ".debug_frame");
		if (!d || !d->d_buf || !d->d_size)
			continue;
		r = cfiprog_check_section(&b.budget, (const unsigned char *)elf_getident(src, NULL), d,
					  false);
		if (r < 0) {
			r = fail_errno(&b, r);
			goto out;
		}
		dcfi = frame_image_cfi(&img[k], src, d);
		if (!dcfi)
			continue;
		before = fdes.n;
		r = add_debug_frame(&b, &fdes, src, d, dcfi);
		if (r < 0)
			goto out;
		ndebug += fdes.n - before;
	}
	if (!fdes.n) {
		r = fail(&b, CFI_ERR_NO_CFI);
		goto out;
	}
	r = expand_all(&b, &fdes);
out:
	free(fdes.v);
	if (cfi)
		dwarf_cfi_end(cfi);
	for (int k = 0; k < 2; k++)
		frame_image_end(&img[k]);
	*why = r < 0 ? b.err : CFI_OK;
	if (r < 0) {
		cfi_table_free(b.t);
		return r;
	}
	*out = b.t;
	return 0;
}

int cfi_build_fd(int fd, int debug_fd, const struct cfi_limits *lim, struct cfi_table **out,
		 enum cfi_error *why)
{
	Elf *elf, *dbg = NULL;
	int r;

	/* pread (ELF_C_READ), never mmap: see cfi_read_build_id. */
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (debug_fd >= 0) {
		dbg = elf_begin(debug_fd, ELF_C_READ, NULL);
		if (dbg && elf_kind(dbg) != ELF_K_ELF) {
			elf_end(dbg);
			dbg = NULL;
		}
	}
	r = build(elf, dbg, lim, out, why);
	elf_end(dbg);
	elf_end(elf);
	return r;
}

int cfi_build_memory(const void *image, size_t size, const struct cfi_limits *lim,
		     struct cfi_table **out, enum cfi_error *why)
{
	Elf *elf;
	int r;

	elf_version(EV_CURRENT);
	elf = elf_memory((char *)image, size);
	r = build(elf, NULL, lim, out, why);
	elf_end(elf);
	return r;
}

void cfi_table_free(struct cfi_table *t)
{
	if (!t)
		return;
	free(t->rows);
	free(t);
}

int cfi_offset_to_vaddr(const struct cfi_table *t, uint64_t off, uint64_t *vaddr)
{
	for (size_t i = 0; i < t->nsegs; i++) {
		const struct cfi_segment *s = &t->segs[i];

		if (off >= s->offset && off - s->offset < s->filesz) {
			*vaddr = off - s->offset + s->vaddr;
			return 0;
		}
	}
	return -ENOENT;
}

const struct jp_unwind_row *cfi_lookup(const struct cfi_table *t, uint64_t pc)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->rows[mid].pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &t->rows[lo - 1] : NULL;
}
