/* What keeping user frames per sampled address costs a store: replays the
 * samples of a recorded profile (bench/store_addrs.py writes them, one
 * frame per line) into stores keyed per function (max_addrs 0) and per
 * address with several caps, and prints each store's bytes, frames and
 * stacks and the CPU time (of this process) per inserted sample (frames interned with
 * store_frame_ref_at, then store_add, as sample_store_add does).
 *
 * Input, tab-separated:   S <count> <pid>
 *                         F <kind n|k|m> <addr> <start> <limit> <offset> <build-id|-> <path|-> <name>
 * frames root first, hexadecimal numbers.
 * Usage: store_addrs FILE [CAP...]   (default caps: 0 16 64 1000000) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store.h"

struct rframe {
	enum frame_kind kind;
	char *name, *module;
	struct frame_loc loc;
	int has_loc;
};

struct rsample {
	unsigned long count;
	uint32_t pid;
	size_t first, n;   /* frames[first .. first+n) */
};

static struct rframe *frames;
static size_t nframes, frames_cap;
static struct rsample *samples;
static size_t nsamples, samples_cap;

static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return p;
	*cap = *cap ? *cap * 2 : 1024;
	p = realloc(p, *cap * elem);
	if (!p) {
		perror("realloc");
		exit(1);
	}
	return p;
}

static char *field(char **s)
{
	char *f = strsep(s, "\t\n");

	return f ? f : (char *)"";
}

static int load(const char *path)
{
	FILE *f = fopen(path, "re");
	char *line = NULL, *s, *k;
	size_t len = 0;

	if (!f)
		return -errno;
	while (getline(&line, &len, f) > 0) {
		s = line;
		k = field(&s);
		if (!strcmp(k, "S")) {
			samples = grow(samples, &samples_cap, nsamples, sizeof(*samples));
			samples[nsamples].count = strtoul(field(&s), NULL, 10);
			samples[nsamples].pid = (uint32_t)strtoul(field(&s), NULL, 10);
			samples[nsamples].first = nframes;
			samples[nsamples++].n = 0;
		} else if (!strcmp(k, "F") && nsamples) {
			struct rframe *r;
			char *kind, *bid, *p;

			frames = grow(frames, &frames_cap, nframes, sizeof(*frames));
			r = &frames[nframes++];
			memset(r, 0, sizeof(*r));
			kind = field(&s);
			r->kind = *kind == 'k' ? FRAME_KERNEL : *kind == 'n' ? FRAME_NATIVE : FRAME_MARKER;
			r->has_loc = *kind == 'n';
			r->loc.addr = strtoull(field(&s), NULL, 16);
			r->loc.map_start = strtoull(field(&s), NULL, 16);
			r->loc.map_limit = strtoull(field(&s), NULL, 16);
			r->loc.map_offset = strtoull(field(&s), NULL, 16);
			bid = field(&s);
			r->loc.build_id = strdup(strcmp(bid, "-") ? bid : "");
			p = field(&s);
			r->loc.path = strdup(strcmp(p, "-") ? p : "");
			r->module = strdup(strrchr(r->loc.path, '/') ? strrchr(r->loc.path, '/') + 1 : r->loc.path);
			r->name = strdup(field(&s));
			r->loc.pid = samples[nsamples - 1].pid;
			r->loc.symbolized = 1;
			samples[nsamples - 1].n++;
		}
	}
	free(line);
	fclose(f);
	return 0;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);  /* CPU time: the machine is shared */
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One replay into a new store; its time per sample and totals. */
static double replay(size_t cap, struct store_totals *tot)
{
	struct store *st = store_new(&(struct store_limits){ .max_addrs = cap }, NULL, 0);
	uint64_t values[2] = { 1, 10000000 };
	uint32_t ids[1024];
	unsigned long n = 0;
	double t0 = now_ns(), t;

	for (size_t i = 0; i < nsamples; i++) {
		const struct rsample *s = &samples[i];
		size_t nf = s->n < 1024 ? s->n : 1024;

		for (unsigned long c = 0; c < s->count; c++, n++) {
			for (size_t j = 0; j < nf; j++) {
				const struct rframe *r = &frames[s->first + j];

				ids[j] = store_frame_ref_at(st, r->kind, r->name, r->module,
							    r->has_loc ? &r->loc : NULL);
			}
			store_add(st, &(struct store_sample){ .pid = s->pid, .tid = s->pid, .frames = ids,
				  .nframes = nf, .values = values });
		}
	}
	t = now_ns() - t0;
	store_get_totals(st, tot);
	store_free(st);
	return n ? t / (double)n : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const char *const defcaps[] = { "0", "16", "64", "1000000" };
	const char *const *caps = argc > 2 ? (const char *const *)argv + 2 : defcaps;
	size_t ncaps = argc > 2 ? (size_t)argc - 2 : 4;
	unsigned long total = 0;
	struct store_totals *tot;
	double (*ns)[15];
	int r;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [CAP...]\n", argv[0]);
		return 2;
	}
	r = load(argv[1]);
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", argv[1], strerror(-r));
		return 1;
	}
	for (size_t i = 0; i < nsamples; i++)
		total += samples[i].count;
	printf("%lu samples, %zu distinct stacks in the input\n", total, nsamples);
	printf("%10s %10s %10s %12s %14s\n", "max_addrs", "frames", "stacks", "bytes", "ns/sample");
	/* The caps take turns, 15 rounds, median per cap: the machine is
	 * shared, and turns spread its load over every cap alike. */
	ns = calloc(ncaps, sizeof(*ns));
	tot = calloc(ncaps, sizeof(*tot));
	if (!ns || !tot)
		return 1;
	for (int k = 0; k < 15; k++)
		for (size_t i = 0; i < ncaps; i++)
			ns[i][k] = replay(strtoul(caps[i], NULL, 10), &tot[i]);
	for (size_t i = 0; i < ncaps; i++) {
		qsort(ns[i], 15, sizeof(double), cmp_double);
		printf("%10s %10zu %10zu %12zu %14.0f\n", caps[i], tot[i].frames, tot[i].stacks,
		       tot[i].bytes, ns[i][7]);
	}
	free(ns);
	free(tot);
	return 0;
}
