/* Layer unwind (daemon/unwind/): compiles a binary's call frame information
 * (.eh_frame, found through .eh_frame_hdr) into the compact rows the BPF
 * unwinder reads (struct jp_unwind_row, bpf/sampler.h). Uses core only;
 * reads ELF with libelf and CFI with elfutils libdw.
 *
 * Every FDE of .eh_frame_hdr's search table is expanded row by row
 * (dwarf_cfi_addrframe), and each row is reduced to "CFA = rsp|rbp + off,
 * return address at CFA - 8, rbp saved at CFA + off or unchanged". What that
 * form cannot say (DWARF expressions, other registers, signal frames) and
 * the gaps between FDEs become JP_UW_FP rows: the unwinder uses frame
 * pointers for that frame only. PLT stubs, whose CFA is an expression,
 * become rsp + 8 (exact but for the one instruction after plt0's push).
 * Anything inconsistent rejects the whole table, with the cause.
 *
 * The files are any user's, and libdw's cost is theirs to choose: every
 * program libdw could run is read first, and a build stops at a CPU time
 * budget (cfiprog.h). */
#ifndef JPROF_CFI_H
#define JPROF_CFI_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <linux/types.h>

#include "bpf/sampler.h"

enum cfi_error {
	CFI_OK = 0,
	CFI_ERR_NOT_ELF,     /* not a readable x86-64 ELF64 file */
	CFI_ERR_NO_CFI,      /* neither .eh_frame_hdr nor .debug_frame (frame pointers then) */
	CFI_ERR_BAD_HDR,     /* .eh_frame_hdr malformed or in an encoding not supported */
	CFI_ERR_CORRUPT,     /* CFI that contradicts itself or points outside the code */
	CFI_ERR_TOO_BIG,     /* more rows than allowed, or addresses beyond 4 GiB */
	CFI_ERR_NOMEM,
	CFI_ERR_BUDGET,      /* past the CPU time budget, or an FDE that saves too many states */
	CFI_NERRORS
};

/* An executable PT_LOAD: maps a file offset to an ELF address. */
struct cfi_segment {
	uint64_t offset;
	uint64_t vaddr;
	uint64_t filesz;
};

struct cfi_table {
	struct jp_unwind_row *rows;  /* sorted by pc, no two alike in a row */
	size_t n;
	uint8_t build_id[64];
	size_t build_id_len;         /* 0: the file has none */
	struct cfi_segment segs[8];  /* its executable segments */
	size_t nsegs;
	size_t fdes;                 /* FDEs expanded */
};

/* The CPU time (of the building thread) one build may take. Legitimate
 * builds measured on the development machine: cc1 0.30 s, libLLVM-14
 * 0.25 s, libjvm 0.10-0.12 s, libc 0.01 s. A hostile file (one FDE of
 * 65,000 rows: 6.7 s; a register number of 10^8 in a 15 KB file: 172 s
 * and 2.3 GB) stops here. One second, not more: another user's new
 * process may wait for one such build (docs/security.md). */
#define CFI_BUILD_CPU_NS 1000000000ull

struct cfi_limits {
	size_t max_rows;   /* rows of the result */
	uint64_t cpu_ns;   /* CPU time of the build; 0: CFI_BUILD_CPU_NS */
	/* Set by another thread (the daemon stopping): the build ends soon, as
	 * if over its budget. NULL: never. */
	const atomic_bool *cancel;
};

/* Builds the table of the ELF file open on fd (read only; the caller keeps
 * fd) from its .eh_frame and its .debug_frame, or, when it has no
 * .debug_frame, that of its separate debug file open on debug_fd (-1:
 * none), within lim. Returns 0, or -errno with *why set: -ENOENT
 * (CFI_ERR_NO_CFI), -EINVAL (not ELF, malformed), -E2BIG, -ENOMEM,
 * -ETIME (CFI_ERR_BUDGET). */
int cfi_build_fd(int fd, int debug_fd, const struct cfi_limits *lim, struct cfi_table **out,
		 enum cfi_error *why);
/* The same from an image in memory (tests, fuzzing). */
int cfi_build_memory(const void *image, size_t size, const struct cfi_limits *lim,
		     struct cfi_table **out, enum cfi_error *why);
void cfi_table_free(struct cfi_table *t);

/* The ELF address of file offset off, when an executable segment holds it. */
int cfi_offset_to_vaddr(const struct cfi_table *t, uint64_t off, uint64_t *vaddr);

/* The row in effect at ELF address pc, or NULL (as the BPF side looks it up). */
const struct jp_unwind_row *cfi_lookup(const struct cfi_table *t, uint64_t pc);

/* The GNU build-id of the ELF file open on fd: its length (0: none), or
 * -EINVAL when fd is not ELF. Cheap: reads the notes only. */
int cfi_read_build_id(int fd, uint8_t *buf, size_t cap);

/* "no_cfi", "bad_hdr"...: a label for status and metrics. */
const char *cfi_error_name(enum cfi_error e);

#endif
