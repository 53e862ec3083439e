/* Test fixture: renders a synthetic profile in one format to a file, for
 * consumers the unit tests cannot run (headless Chromium, go tool pprof).
 *   make_profile FORMAT OUT big [NSTACKS]   many distinct stacks
 *   make_profile FORMAT OUT hostile [NAMES.json]   names that need escaping;
 *                        NAMES.json gets the names as every format shows them
 *   make_profile FORMAT OUT empty
 * Prints the render time on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export.h"
#include "synth_store.h"

int main(int argc, char **argv)
{
	struct export_meta meta = { .pid = 1, .comm = "bigapp", .event = "cpu-clock",
				    .start_unix_ns = 1700000000000000000ULL,
				    .duration_ns = 30000000000ULL,
				    .period_type = { "cpu", "nanoseconds" }, .period = 10000000,
				    .status = "complete" };
	struct store *st = NULL;
	struct buf out = BUF_INIT;
	struct timespec t0, t1;
	FILE *f;
	int fmt, r = 1;

	if (argc < 4 || (fmt = jprof_format_parse(argv[1])) < 0) {
		fprintf(stderr, "usage: make_profile FORMAT OUT big [N] | hostile [NAMES.json] | empty\n");
		return 2;
	}
	if (!strcmp(argv[3], "big")) {
		st = synth_big_store(argc > 4 ? strtoul(argv[4], NULL, 10) : 100000);
	} else if (!strcmp(argv[3], "hostile")) {
		st = synth_hostile_store();
		meta.pid = 7;
		meta.comm = "pr</script>&\n";
		if (argc > 4) {
			struct buf names = BUF_INIT;

			buf_putc(&names, '[');
			for (size_t i = 0; i < SYNTH_HOSTILE_N; i++) {
				export_json_string(&names, synth_hostile[i].shown);
				buf_putc(&names, ',');
			}
			buf_puts(&names, "\"main\"]\n");
			f = fopen(argv[4], "we");
			if (!f || fwrite(names.data, 1, names.len, f) != names.len || fclose(f))
				return 1;
			buf_release(&names);
		}
	} else if (!strcmp(argv[3], "empty")) {
		st = store_new(NULL, NULL, 0);
		meta.comm = "idle";
	}
	if (!st)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (export_render(st, &meta, NULL, (enum jprof_format)fmt, &out) < 0)
		goto out;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "make_profile: %s %s: %zu bytes in %.3f s\n", argv[1], argv[3], out.len,
		(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	f = fopen(argv[2], "we");
	if (!f)
		goto out;
	/* an empty rendering (collapsed of no samples) has no buffer at all */
	if (out.len && fwrite(out.data, 1, out.len, f) != out.len)
		r = 1;
	else
		r = 0;
	if (fclose(f))
		r = 1;
out:
	buf_release(&out);
	store_free(st);
	return r;
}
