/* The pipeline: raw samples routed by source, built by the one stack
 * builder (real symbolization of this test's own code), JVM samples joined
 * with Java frames, host-view feeding counted once. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_main.h"
#include "jvmjoin.h"
#include "loop.h"
#include "pipeline.h"
#include "symbols.h"

#define MS 1000000ull

/* Functions whose addresses stand in for a sampled user stack. */
__attribute__((noinline)) void pl_leaf(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void pl_caller(void)
{
	pl_leaf();
	__asm__ volatile("");
}

struct got {
	unsigned n;
	char frames[8][40][128];
	size_t nframes[8];
	uint64_t values[8][2];
	uint32_t pid[8];
	uint64_t time_ns[8];
	char comm[8][64];
	char thread[8][64];
	bool has_java[8];
};

static void collect(const struct built_sample *bs, void *arg)
{
	struct got *g = arg;
	char buf[64];

	if (g->n >= 8)
		return;
	g->nframes[g->n] = bs->nframes;
	for (size_t i = 0; i < bs->nframes && i < 40; i++)
		snprintf(g->frames[g->n][i], 128, "%s", bs->frames[i].name);
	g->values[g->n][0] = bs->values[0];
	g->values[g->n][1] = bs->values[1];
	g->pid[g->n] = bs->pid;
	g->time_ns[g->n] = bs->time_ns;
	snprintf(g->comm[g->n], 64, "%s", bs->names->comm);
	snprintf(g->thread[g->n], 64, "%s", bs->thread_name(bs, buf, sizeof(buf)));
	g->has_java[g->n] = bs->has_java;
	g->n++;
}

struct fixture {
	struct loop *loop;
	struct symbols *sym;
	struct pipeline *p;
	struct got host, rec;
	struct pipeline_source *src;
};

static void setup(struct fixture *f, bool process_root)
{
	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(loop_new(&f->loop), 0);
	f->sym = symbols_new(NULL, NULL);
	ck_assert_ptr_nonnull(f->sym);
	ck_assert_int_eq(pipeline_new(f->loop, f->sym, NULL, &f->p), 0);
	pipeline_set_host(f->p, &(struct pipeline_consumer){ collect, &f->host });
	ck_assert_int_eq(pipeline_source_open(f->p, &(struct pipeline_source_config){
		.process_root = process_root, .consumer = { collect, &f->rec } }, &f->src), 0);
	ck_assert_uint_ne(pipeline_source_id(f->src), 0);
}

static void teardown(struct fixture *f)
{
	pipeline_free(f->p);
	symbols_free(f->sym);
	loop_free(f->loop);
}

/* A user stack leaf first, as the stack map gives it: pl_leaf interrupted,
 * called from pl_caller (a return address: one past a call). */
static const uint64_t *user_stack(void)
{
	static uint64_t ips[2];

	ips[0] = (uint64_t)(uintptr_t)pl_leaf;
	ips[1] = (uint64_t)(uintptr_t)pl_caller + 1;
	return ips;
}

static struct raw_sample raw(uint32_t source, uint64_t count)
{
	struct raw_sample rs = {
		.event = EVENT_CPU, .source = source, .pid = (uint32_t)getpid(),
		.tid = (uint32_t)getpid(), .uips = user_stack(), .nu = 2,
	};

	event_values_periodic(event_get(EVENT_CPU), count, 10 * MS, rs.values);
	return rs;
}

START_TEST(test_native_sample_built_root_first)
{
	struct fixture f;
	struct raw_sample rs;

	setup(&f, false);
	rs = raw(pipeline_source_id(f.src), 3);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 1);
	ck_assert_uint_eq(f.host.n, 0);  /* not host_feed: the host events saw it */
	ck_assert_uint_eq(f.rec.nframes[0], 2);
	ck_assert_str_eq(f.rec.frames[0][0], "pl_caller");
	ck_assert_str_eq(f.rec.frames[0][1], "pl_leaf");
	ck_assert_uint_eq(f.rec.values[0][0], 3);
	ck_assert_uint_eq(f.rec.values[0][1], 30 * MS);
	ck_assert_str_eq(f.rec.comm[0], "test_pipeline");
	ck_assert_str_eq(f.rec.thread[0], "test_pipeline");
	teardown(&f);
}
END_TEST

START_TEST(test_routing_and_host_feed)
{
	struct fixture f;
	struct raw_sample rs;

	setup(&f, false);
	/* Host source: only the host consumer. */
	rs = raw(0, 1);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.host.n, 1);
	ck_assert_uint_eq(f.rec.n, 0);
	/* A recorded thread standing in for the host view: both, once each. */
	rs = raw(pipeline_source_id(f.src), 1);
	rs.host_feed = true;
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.host.n, 2);
	ck_assert_uint_eq(f.rec.n, 1);
	/* A source that has ended: nobody. */
	rs = raw(pipeline_source_id(f.src) + 1000, 1);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.host.n, 2);
	ck_assert_uint_eq(f.rec.n, 1);
	/* A closed source's samples are dropped. */
	rs = raw(pipeline_source_id(f.src), 1);
	pipeline_source_close(f.src);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 1);
	teardown(&f);
}
END_TEST

START_TEST(test_markers_and_process_root)
{
	struct fixture f;
	struct raw_sample rs;

	setup(&f, true);
	rs = raw(pipeline_source_id(f.src), 1);
	rs.nu = 0;
	rs.uips = NULL;
	rs.ustack_lost = true;
	rs.kernel_mode = true;
	rs.kstack_lost = true;
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 1);
	ck_assert_uint_eq(f.rec.nframes[0], 3);
	ck_assert_str_eq(f.rec.frames[0][0], "test_pipeline");  /* whole-host root */
	ck_assert_str_eq(f.rec.frames[0][1], "[user_stack_lost]");
	ck_assert_str_eq(f.rec.frames[0][2], "[kernel_stack_lost]");
	teardown(&f);
}
END_TEST

/* Per-sample records (a recording in a time-ordered format) are built one
 * by one with their time; a source that did not ask for them drops them,
 * and an agent thread's record never bypasses the join. */
START_TEST(test_per_sample_records)
{
	struct fixture f;
	struct pipeline_source *timed;
	struct got got_timed = { 0 };
	struct raw_sample rs;

	setup(&f, false);
	ck_assert_int_eq(pipeline_source_open(f.p, &(struct pipeline_source_config){
		.per_sample = true, .consumer = { collect, &got_timed } }, &timed), 0);
	rs = raw(pipeline_source_id(timed), 1);
	rs.time_ns = 123 * MS;
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(got_timed.n, 1);
	ck_assert_uint_eq(got_timed.time_ns[0], 123 * MS);
	ck_assert_uint_eq(got_timed.values[0][0], 1);
	rs.agent = true;                     /* no join on this source: dropped */
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(got_timed.n, 1);
	rs = raw(pipeline_source_id(f.src), 1);
	rs.time_ns = 124 * MS;               /* not asked for by f.src: dropped */
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 0);
	pipeline_source_close(timed);
	teardown(&f);
}
END_TEST

START_TEST(test_jvm_join_through_the_builder)
{
	struct fixture f;
	struct jvm_join *j;
	struct raw_sample rs;
	struct jpring_frame jf[2] = { { .method_id = 7, .bci = 1 }, { .method_id = 8, .bci = 2 } };
	uint32_t tid = (uint32_t)getpid();
	uint64_t ids[4];

	setup(&f, false);
	j = jvm_join_new(&(struct jvm_join_opts){ .interval_ns = 10 * MS });
	ck_assert_ptr_nonnull(j);
	pipeline_source_set_join(f.src, j, (uint32_t)getpid(), 10 * MS);
	jvm_join_map_tid(j, tid, tid);
	rs = raw(pipeline_source_id(f.src), 1);
	rs.time_ns = 100 * MS;
	rs.host_feed = true;
	rs.agent = true;                     /* an agent's thread: its record joins */
	pipeline_on_sample(&rs, f.p);        /* goes into the join, not out */
	ck_assert_uint_eq(f.rec.n, 0);
	jvm_join_add_agent(j, tid, 100 * MS + 20000, 100 * MS, 2, jf);  /* leaf first */
	/* Joined, held until the agent names the methods it is asked about. */
	pipeline_source_join_run(f.src, 200 * MS, false);
	ck_assert_uint_eq(f.rec.n, 0);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 2);
	jvm_join_method(j, 7, "LApp;", 5, "leaf", 4, "()V", 3, NULL, 0, false);
	jvm_join_method(j, 8, "LApp;", 5, "main", 4, "()V", 3, NULL, 0, false);
	pipeline_source_join_run(f.src, UINT64_MAX, true);
	ck_assert_uint_eq(f.rec.n, 1);
	ck_assert_uint_eq(f.host.n, 1);
	ck_assert(f.rec.has_java[0]);
	ck_assert_uint_eq(f.rec.values[0][1], 10 * MS);
	/* Java root first, then native frames (no JIT code here: all kept). */
	ck_assert_uint_eq(f.rec.nframes[0], 4);
	ck_assert_str_eq(f.rec.frames[0][0], "App.main");
	ck_assert_str_eq(f.rec.frames[0][1], "App.leaf");
	ck_assert_str_eq(f.rec.frames[0][2], "pl_caller");
	ck_assert_str_eq(f.rec.frames[0][3], "pl_leaf");
	pipeline_source_set_join(f.src, NULL, 0, 0);
	jvm_join_free(j);
	teardown(&f);
}
END_TEST

/* A JVM thread sampled on the daemon's plain event (the agent has not armed
 * its own yet): a user stack through JIT code (an anonymous executable
 * mapping) lost its Java frames, and says so where it is cut; one without
 * JIT code is a whole native stack. Without an agent, [jit] stays. */
START_TEST(test_plain_event_of_unarmed_thread)
{
	struct fixture f;
	struct jvm_join *j;
	struct raw_sample rs;
	uint64_t ips[3];
	void *jit = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(jit, MAP_FAILED);
	setup(&f, false);
	/* No agent bound: the JIT frame is shown as it is. */
	ips[0] = (uint64_t)(uintptr_t)pl_leaf;
	ips[1] = (uint64_t)(uintptr_t)jit + 16;
	ips[2] = (uint64_t)(uintptr_t)pl_caller + 1;
	rs = raw(pipeline_source_id(f.src), 1);
	rs.uips = ips;
	rs.nu = 3;
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 1);
	ck_assert_uint_eq(f.rec.nframes[0], 3);
	ck_assert_str_eq(f.rec.frames[0][1], "[jit]");

	/* The agent is being attached (no join yet): marked already. */
	pipeline_source_expect_java(f.src, true);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 2);
	ck_assert_uint_eq(f.rec.nframes[1], 2);
	ck_assert_str_eq(f.rec.frames[1][0], "[java_stack_missing]");
	ck_assert_str_eq(f.rec.frames[1][1], "pl_leaf");
	ck_assert(!f.rec.has_java[1]);
	/* Bound: a join, Java still expected. */
	j = jvm_join_new(&(struct jvm_join_opts){ .interval_ns = 10 * MS });
	ck_assert_ptr_nonnull(j);
	pipeline_source_set_join(f.src, j, (uint32_t)getpid(), 10 * MS);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 3);
	ck_assert_uint_eq(f.rec.nframes[2], 2);
	ck_assert_str_eq(f.rec.frames[2][0], "[java_stack_missing]");
	/* No JIT code on the stack (a GC or compiler thread): all of it. */
	rs = raw(pipeline_source_id(f.src), 1);
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 4);
	ck_assert_uint_eq(f.rec.nframes[3], 2);
	ck_assert_str_eq(f.rec.frames[3][0], "pl_caller");
	ck_assert_str_eq(f.rec.frames[3][1], "pl_leaf");
	/* The agent failed after the join was made (java_fail): a native
	 * recording from then on, its JIT code shown as [jit], not cut. */
	pipeline_source_expect_java(f.src, false);
	rs.uips = ips;
	rs.nu = 3;
	pipeline_on_sample(&rs, f.p);
	ck_assert_uint_eq(f.rec.n, 5);
	ck_assert_uint_eq(f.rec.nframes[4], 3);
	ck_assert_str_eq(f.rec.frames[4][1], "[jit]");
	pipeline_source_set_join(f.src, NULL, 0, 0);
	jvm_join_free(j);
	teardown(&f);
	munmap(jit, 4096);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pipeline");
	TCase *tc = tcase_create("pipeline");

	tcase_add_test(tc, test_native_sample_built_root_first);
	tcase_add_test(tc, test_routing_and_host_feed);
	tcase_add_test(tc, test_markers_and_process_root);
	tcase_add_test(tc, test_jvm_join_through_the_builder);
	tcase_add_test(tc, test_per_sample_records);
	tcase_add_test(tc, test_plain_event_of_unarmed_thread);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
