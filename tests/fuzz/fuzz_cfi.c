/* libFuzzer harness: the unwind table builder (daemon/unwind/cfi.c). The
 * daemon builds a table for every binary a sampled process maps, and any
 * user can map a file it wrote, so .eh_frame, .eh_frame_hdr and the ELF
 * headers around them are attacker-controlled. Input: an ELF file (the
 * seeds are real ones; the fuzzer corrupts them).
 *
 * The bytes go through both entry points (a memfd, as the daemon reads
 * /proc/PID/map_files, and memory); a table that comes out must be what the
 * BPF unwinder can trust: rows strictly ascending, kinds known, no two
 * neighbours alike, within the row bound, and found again by cfi_lookup.
 *
 * Each build has FUZZ_CPU_NS of CPU (the daemon's CFI_BUILD_CPU_NS, made
 * short so that slow inputs stay cheap to run); cfi.options gives every
 * input a time limit, so an input whose cost escapes the budget (libdw's
 * work between two reads of the clock) is a finding. Seeds regress-*:
 * register numbers of a million (11.7 s of CPU per build before the
 * check), saved states that pass the checks and end at the budget. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cfi.h"
#include "fuzz.h"

#define FUZZ_MAX_ROWS 100000
#define FUZZ_CPU_NS 200000000ull

static const struct cfi_limits limits = { .max_rows = FUZZ_MAX_ROWS, .cpu_ns = FUZZ_CPU_NS };

static void check_table(const struct cfi_table *t)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct jp_unwind_row *r = &t->rows[i];

		if (r->kind > JP_UW_SIGNAL)
			fuzz_fail("row %zu: kind %u", i, r->kind);
		if (i && r->pc <= t->rows[i - 1].pc)
			fuzz_fail("row %zu: pc 0x%x not above 0x%x", i, r->pc, t->rows[i - 1].pc);
		if (i && r->kind == t->rows[i - 1].kind && r->cfa_off == t->rows[i - 1].cfa_off &&
		    r->rbp_off == t->rows[i - 1].rbp_off)
			fuzz_fail("rows %zu and %zu alike", i - 1, i);
		if (cfi_lookup(t, r->pc) != r)
			fuzz_fail("row %zu not found at its own pc", i);
	}
	if (t->n > FUZZ_MAX_ROWS)
		fuzz_fail("%zu rows, bound %d", t->n, FUZZ_MAX_ROWS);
	if (t->build_id_len > sizeof(t->build_id))
		fuzz_fail("build-id length %zu", t->build_id_len);
}

static void one(int r, struct cfi_table *t, enum cfi_error why)
{
	if (r == 0) {
		if (!t || why != CFI_OK)
			fuzz_fail("success without a table");
		check_table(t);
	} else if (t || why == CFI_OK || why >= CFI_NERRORS) {
		fuzz_fail("failure %d with a table or without a cause", r);
	}
	cfi_table_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfi_table *t = NULL;
	enum cfi_error why = CFI_OK;
	int fd, r;
	uint8_t bid[64];

	r = cfi_build_memory(data, size, &limits, &t, &why);
	one(r, t, why);
	fd = memfd_create("fuzz_cfi", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		t = NULL;
		why = CFI_OK;
		r = cfi_build_fd(fd, -1, &limits, &t, &why);
		one(r, t, why);
		r = cfi_read_build_id(fd, bid, sizeof(bid));
		if (r > (int)sizeof(bid))
			fuzz_fail("build-id length %d", r);
	}
	close(fd);
	return 0;
}
