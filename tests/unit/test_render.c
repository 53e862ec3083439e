/* The render worker (daemon/record/render.c): a job's line is the message
 * json-c prints with the rendered data in it, byte for byte, for text and
 * binary formats, with and without the worker thread; a cancelled job
 * never calls back; render_free with jobs queued and running frees them
 * (ASan/LSan run this too); the per-uid bound. */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "export.h"
#include "jprof_proto.h"
#include "loop.h"
#include "profile_msg.h"
#include "render.h"
#include "synth_store.h"

struct done {
	struct loop *loop;
	int calls;
	int err;
	struct buf line;
	int quit_after;
};

static void on_done(void *arg, int err, struct buf *out)
{
	struct done *d = arg;

	d->calls++;
	d->err = err;
	buf_reset(&d->line);
	if (err == 0)
		ck_assert_int_eq(buf_append(&d->line, out->data, out->len), 0);
	if (d->loop && d->calls == d->quit_after)
		loop_quit(d->loop);
}

/* The line the loop used to print: the message with the data set by json-c. */
static char *expected_line(struct store *st, enum jprof_format fmt, size_t *len)
{
	const struct jprof_format_info *fi = jprof_format_info(fmt);
	struct export_meta meta = { .comm = "app \"quoted\"", .event = "cpu-clock", .status = "complete" };
	struct buf out = BUF_INIT;
	struct json_object *o, *sum;
	char *line;

	ck_assert_int_eq(export_render(st, &meta, NULL, fmt, &out), 0);
	o = profile_msg_new(7, "complete", fmt, &out, st, &sum);
	ck_assert_ptr_nonnull(o);
	json_object_object_add(sum, "extra", json_object_new_string("x\ty"));
	ck_assert_int_eq(jprof_profile_add_data(o, fi->name, fi->binary, out.data, out.len), 0);
	line = jprof_json_line(o, len);
	json_object_put(o);
	buf_release(&out);
	return line;
}

static struct json_object *skeleton(struct store *st, enum jprof_format fmt)
{
	struct buf none = BUF_INIT;
	struct json_object *o, *sum;

	o = profile_msg_new(7, "complete", fmt, &none, st, &sum);
	ck_assert_ptr_nonnull(o);
	json_object_object_add(sum, "extra", json_object_new_string("x\ty"));
	return o;
}

static void check_same_line(struct render *rw, struct loop *loop, enum jprof_format fmt)
{
	struct store *st = synth_hostile_store(), *copy = synth_hostile_store();
	struct export_meta meta = { .comm = "app \"quoted\"", .event = "cpu-clock", .status = "complete" };
	struct done d = { .loop = loop, .quit_after = 1 };
	struct render_req req = { .st = st, .meta = &meta, .fmt = fmt };
	size_t len;
	char *want = expected_line(copy, fmt, &len);

	req.msg = skeleton(st, fmt);
	ck_assert_int_eq(render_submit(rw, &req, on_done, &d, NULL), 0);
	if (rw)
		ck_assert_int_eq(loop_run(loop), 0);
	ck_assert_int_eq(d.calls, 1);
	ck_assert_int_eq(d.err, 0);
	ck_assert_uint_eq(d.line.len, len);
	ck_assert_int_eq(memcmp(d.line.data, want, len), 0);
	free(want);
	buf_release(&d.line);
	store_free(copy);
}

START_TEST(test_line_as_json_c_prints_it)
{
	static const enum jprof_format fmts[] = { JPROF_FMT_COLLAPSED, JPROF_FMT_JSON, JPROF_FMT_HTML,
						  JPROF_FMT_PPROF, JPROF_FMT_TEXT };
	struct loop *loop;
	struct render *rw;

	ck_assert_int_eq(loop_new(&loop), 0);
	ck_assert_int_eq(render_new(loop, &rw), 0);
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		check_same_line(rw, loop, fmts[i]);    /* on the worker */
		check_same_line(NULL, NULL, fmts[i]);  /* inline */
	}
	render_free(rw);
	loop_free(loop);
}
END_TEST

START_TEST(test_cancel_and_free)
{
	struct export_meta meta = { .event = "cpu-clock", .status = "complete" };
	struct done d[6] = { 0 };
	struct render_job *job[6];
	struct loop *loop;
	struct render *rw;

	ck_assert_int_eq(loop_new(&loop), 0);
	ck_assert_int_eq(render_new(loop, &rw), 0);
	for (int i = 0; i < 6; i++) {
		struct store *st = synth_big_store(20000);
		struct render_req req = { .st = st, .meta = &meta, .fmt = JPROF_FMT_HTML };

		req.msg = skeleton(st, JPROF_FMT_HTML);
		ck_assert_int_eq(render_submit(rw, &req, on_done, &d[i], &job[i]), 0);
		ck_assert_ptr_nonnull(job[i]);
	}
	/* The first is running or queued, the rest queued: none calls back,
	 * the running one stops, render_free frees whatever is left. */
	for (int i = 0; i < 4; i++)
		render_cancel(job[i]);
	render_free(rw);
	loop_free(loop);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(d[i].calls, 0);
}
END_TEST

START_TEST(test_per_uid_bound)
{
	struct export_meta meta = { .event = "cpu-clock", .status = "complete" };
	struct done d = { 0 };
	struct render_job *job[3];
	struct render_stats rs;
	struct loop *loop;
	struct render *rw;

	ck_assert_int_eq(loop_new(&loop), 0);
	ck_assert_int_eq(render_new(loop, &rw), 0);
	for (int i = 0; i < 3; i++) {
		struct store *st = synth_big_store(2000);
		struct render_req req = { .st = st, .meta = &meta, .fmt = JPROF_FMT_COLLAPSED,
					  .uid = 1000, .max_per_uid = 2 };
		int r = render_submit(rw, &req, on_done, &d, &job[i]);

		ck_assert_int_eq(r, i < 2 ? 0 : -EDQUOT);
		if (r < 0)
			store_free(st);  /* nothing was taken */
	}
	ck_assert_uint_eq(render_uid_jobs(rw, 1000), 2);
	ck_assert_uint_eq(render_uid_jobs(rw, 1001), 0);
	d.loop = loop;
	d.quit_after = 2;
	ck_assert_int_eq(loop_run(loop), 0);
	ck_assert_int_eq(d.calls, 2);
	ck_assert_uint_eq(render_uid_jobs(rw, 1000), 0);
	render_get_stats(rw, &rs);
	ck_assert_uint_eq(rs.jobs, 2);
	ck_assert_uint_eq(rs.refused, 1);
	ck_assert_uint_eq(rs.queued, 0);
	buf_release(&d.line);
	render_free(rw);
	loop_free(loop);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("render");
	TCase *tc = tcase_create("render");

	tcase_add_test(tc, test_line_as_json_c_prints_it);
	tcase_add_test(tc, test_cancel_and_free);
	tcase_add_test(tc, test_per_uid_bound);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
