/* libFuzzer harness: /proc/PID/maps parsing (daemon/symbols/procmaps.c).
 * The daemon reads the maps of every process it profiles, and a process
 * chooses its own mapping names (file names with spaces and newlines,
 * "(deleted)" suffixes, prctl(PR_SET_VMA_ANON_NAME) names). Input: a maps
 * file. Checks: the table is sorted, every entry is well formed, and
 * procmaps_find() finds each entry by its bounds as symbol lookup does. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "procmaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct procmaps *m;
	struct procmaps_entry e;
	uint64_t max_end = 0;

	if (procmaps_parse((const char *)data, size, &m) < 0)
		return 0;  /* -ENOMEM only */
	for (size_t i = 0; i < m->count; i++) {
		const struct procmaps_entry *x = &m->entries[i];
		bool alone;

		fuzz_check(x->start < x->end, "empty mapping %zu", i);
		fuzz_check(i == 0 || m->entries[i - 1].start <= x->start, "table not sorted");
		fuzz_check(x->path && !strchr(x->path, '\n'), "path of entry %zu", i);
		(void)procmaps_is_anon(x);
		/* Overlaps exist only in corrupt input, where an address may be
		 * attributed to a neighbour; any other entry is found by its bounds. */
		alone = max_end <= x->start && (i + 1 == m->count || m->entries[i + 1].start >= x->end);
		if (x->end > max_end)
			max_end = x->end;
		if (!alone)
			continue;
		fuzz_check(procmaps_find(m, x->start) == x, "start of entry %zu not found", i);
		fuzz_check(procmaps_find(m, x->end - 1) == x, "end of entry %zu not found", i);
		fuzz_check(x->end == UINT64_MAX || procmaps_find(m, x->end) != x, "entry %zu too long", i);
	}
	fuzz_check(procmaps_find(m, 0) == NULL || m->entries[0].start == 0, "address 0 found");
	procmaps_free(m);
	/* The one-line entry point on the whole input as well. */
	if (procmaps_parse_line((const char *)data, size, &e) == 0)
		free(e.path);
	return 0;
}
