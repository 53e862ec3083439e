/* Reporters (daemon/report/): real host-view windows (hostview taps) closed
 * one after the other, rendered by the real pprof renderer, written by the
 * directory sink and read back with zlib and protobuf-c. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check_main.h"
#include "event.h"
#include "hostview.h"
#include "profile.pb-c.h"
#include "report.h"
#include "report_dir.h"
#include "sample.h"

#define S (1000000000ull)
#define T0 (1000 * S)

static struct hostview *hv_make(void)
{
	struct hostview_config cfg = { 10, 600, 64u << 20, 0, 10 };
	struct hostview *hv = NULL;

	ck_assert_int_eq(hostview_new(&cfg, &hv), 0);
	return hv;
}

/* n cpu samples of main;<leaf> of pid, as the pipeline delivers them. */
static void add(struct hostview *hv, uint32_t pid, const char *leaf, unsigned n, uint64_t now)
{
	const struct sample_frame frames[2] = {
		{ FRAME_NATIVE, "main", "prog", NULL }, { FRAME_NATIVE, leaf, "prog", NULL },
	};
	const uint64_t values[2] = { 1, 10000000 };
	const struct sample_names names = { "proc", "", "", "" };
	struct built_sample bs = {
		.event = event_get(EVENT_CPU), .pid = pid, .tid = pid, .start_ns = 1,
		.values = values, .frames = frames, .nframes = 2, .names = &names,
	};

	for (unsigned i = 0; i < n; i++)
		hostview_add(hv, &bs, now);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data;
	long n;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	ck_assert_int_gt(n, 18);
	rewind(f);
	data = malloc((size_t)n);
	ck_assert_uint_eq(fread(data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return data;
}

/* Samples in a gzipped pprof file: the sum of the first value. */
static uint64_t pprof_file_samples(const char *path, const char *leaf)
{
	size_t len, cap = 1 << 16, olen = 0;
	char *gz = slurp(path, &len);
	unsigned char *out = malloc(cap);
	Perftools__Profiles__Profile *p;
	z_stream z = { 0 };
	uint64_t sum = 0;
	bool seen = false;
	int zr;

	ck_assert_int_eq(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = (Bytef *)gz;
	z.avail_in = (uInt)len;
	do {
		if (olen == cap)
			out = realloc(out, cap *= 2);
		z.next_out = out + olen;
		z.avail_out = (uInt)(cap - olen);
		zr = inflate(&z, Z_NO_FLUSH);
		olen = cap - z.avail_out;
		ck_assert_msg(zr == Z_OK || zr == Z_STREAM_END, "inflate: %d", zr);
	} while (zr != Z_STREAM_END);
	inflateEnd(&z);
	p = perftools__profiles__profile__unpack(NULL, olen, out);
	ck_assert_ptr_nonnull(p);
	for (size_t i = 0; i < p->n_sample; i++)
		sum += (uint64_t)p->sample[i]->value[0];
	for (size_t i = 0; i < p->n_string_table; i++)
		seen |= strcmp(p->string_table[i], leaf) == 0;
	ck_assert_msg(seen, "%s: no frame %s", path, leaf);
	ck_assert_int_gt(p->duration_nanos, 0);
	perftools__profiles__profile__free_unpacked(p, NULL);
	free(out);
	free(gz);
	return sum;
}

/* The directory's files, sorted; returns how many (at most max). */
static size_t list_dir(const char *dir, char names[][256], size_t max)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		ck_assert_uint_lt(n, max);
		snprintf(names[n++], 256, "%s", e->d_name);
	}
	closedir(d);
	qsort(names, n, 256, (int (*)(const void *, const void *))strcmp);
	return n;
}

/* Each closed window is one file holding exactly its own samples; the
 * newest `keep` stay, nothing half-written is left behind. */
START_TEST(test_dir_windows_exact_and_kept)
{
	char dir[] = "/tmp/jprof-report-XXXXXX", names[8][256], path[PATH_MAX + 300], err[256];
	struct hostview *hv = hv_make();
	struct report_sink sink;
	struct reporter *r = NULL;
	struct reporter_stats st;
	const unsigned per_window[3] = { 3, 5, 1 };
	const char *leaves[3] = { "first", "second", "third" };
	size_t n;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(report_dir_open(dir, 2, &sink, err, sizeof(err)), 0);
	ck_assert_int_eq(reporter_new(&(struct reporter_config){ .hostview = hv, .period_s = 10,
								  .host_rate_hz = 19 }, &sink, &r), 0);
	add(hv, 7, "before", 4, T0);  /* before the first window closes: in it */
	for (int w = 0; w < 3; w++) {
		add(hv, 7, leaves[w], per_window[w], T0 + (uint64_t)(w + 1) * S);
		ck_assert_int_eq(reporter_close_window(r), 0);
	}
	reporter_get_stats(r, &st);
	ck_assert_uint_eq(st.windows, 3);
	ck_assert_uint_eq(st.delivered, 3);
	ck_assert_uint_eq(st.failed, 0);
	ck_assert_uint_gt(st.bytes, 0);
	n = list_dir(dir, names, 8);
	ck_assert_uint_eq(n, 2);  /* keep = 2: the first window's file went */
	for (size_t i = 0; i < n; i++) {
		struct stat sb;

		ck_assert_msg(strstr(names[i], ".pb.gz") && names[i][0] != '.', "%s", names[i]);
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		ck_assert_int_eq(stat(path, &sb), 0);
		ck_assert_uint_eq(sb.st_mode & 0777, 0600);
		ck_assert_uint_eq(pprof_file_samples(path, leaves[i + 1]), per_window[i + 1]);
		unlink(path);
	}
	reporter_free(r);
	hostview_free(hv);
	rmdir(dir);
}
END_TEST

/* The daemon writes as root: a directory others could change is refused,
 * and so is a symlink to one. */
START_TEST(test_dir_refuses_unsafe)
{
	char dir[] = "/tmp/jprof-report-XXXXXX", link[PATH_MAX], err[256];
	struct report_sink sink;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_int_eq(report_dir_open(dir, 0, &sink, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "not writable by group or others"), "%s", err);
	ck_assert_int_eq(chmod(dir, 0700), 0);
	snprintf(link, sizeof(link), "%s.lnk", dir);
	ck_assert_int_eq(symlink(dir, link), 0);
	ck_assert_int_lt(report_dir_open(link, 0, &sink, err, sizeof(err)), 0);
	ck_assert_int_eq(report_dir_open(dir, 0, &sink, err, sizeof(err)), 0);
	sink.free(sink.ctx);
	unlink(link);
	rmdir(dir);
}
END_TEST

/* The one registration: nothing configured, nothing started; report_dir
 * starts the directory reporter, which needs the host view. */
START_TEST(test_reports_from_settings)
{
	char dir[] = "/tmp/jprof-report-XXXXXX", err[256];
	struct hostview *hv = hv_make();
	struct reports *rs = NULL;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(reports_new(NULL, hv, NULL, &(struct report_settings){ 0 }, &rs, err,
				     sizeof(err)), 0);
	ck_assert_uint_eq(reports_count(rs), 0);
	reports_free(rs);
	ck_assert_int_eq(reports_new(NULL, hv, NULL, &(struct report_settings){ .dir = dir }, &rs,
				     err, sizeof(err)), 0);
	ck_assert_uint_eq(reports_count(rs), 1);
	reports_free(rs);
	ck_assert_int_lt(reports_new(NULL, NULL, NULL, &(struct report_settings){ .dir = dir }, &rs,
				     err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "host view"), "%s", err);
	hostview_free(hv);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("report");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_dir_windows_exact_and_kept);
	tcase_add_test(tc, test_dir_refuses_unsafe);
	tcase_add_test(tc, test_reports_from_settings);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
