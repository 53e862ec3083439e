/* Layer unwind (daemon/unwind/): the CFI programs of a binary read before
 * libdw runs them, and the CPU time budget of a table build (cfi.c).
 *
 * The files are any user's, and libdw's cost is theirs to choose: it
 * replays an FDE's program from the start for every row (quadratic in the
 * FDE's length), and copies its whole register file, sized by the largest
 * register number the program names, at each DW_CFA_remember_state. Every
 * program libdw could run is decoded here first: a register number above
 * 127 (x86-64 has none), or more saved states than an FDE needs, refuses
 * the table; the bytes read and run are metered against the budget. */
#ifndef JPROF_CFIPROG_H
#define JPROF_CFIPROG_H

#include <elfutils/libdw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

struct cfiprog_budget {
	uint64_t deadline;  /* CLOCK_THREAD_CPUTIME_ID */
	size_t work;        /* bytes of CFI program since the clock was read */
	const atomic_bool *cancel;  /* set: spent at once (cfi_limits.cancel) */
};

/* The calling thread may spend cpu_ns from now. */
void cfiprog_budget_start(struct cfiprog_budget *bg, uint64_t cpu_ns);
/* Counts bytes of CFI program about to be run or read: 0, or -ETIME once
 * the budget is spent (the clock is read every 64 KiB). */
int cfiprog_spend(struct cfiprog_budget *bg, size_t bytes);

/* Every CIE and FDE of section d (eh: in .eh_frame's format), in order, as
 * libdw reads a section without a search table; ident: the ELF file's.
 * 0; -EINVAL: a program libdw must not run (corrupt); -ETIME: over the
 * budget, or an FDE saving more states than allowed; -E2BIG. */
int cfiprog_check_section(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *d,
			  bool eh);
/* The FDEs of .eh_frame (eh, at eh_vaddr) that its search table (hdr, the
 * .eh_frame_hdr section at hdr_vaddr; NULL: none) leads libdw to, and
 * their CIEs. As cfiprog_check_section, and -EBADMSG: a table not in the
 * form linkers write. */
int cfiprog_check_table(struct cfiprog_budget *bg, const unsigned char *ident, Elf_Data *eh,
			uint64_t eh_vaddr, Elf_Data *hdr, uint64_t hdr_vaddr);

/* The bytes of program of the FDE at vaddr in .eh_frame (eh at eh_vaddr):
 * what libdw runs, at most, for each row of it. 0: none there. */
size_t cfiprog_fde_cost(Elf_Data *eh, uint64_t eh_vaddr, const unsigned char *ident,
			uint64_t vaddr);

#endif
