/* Joining BPF samples with the agent's AsyncGetCallTrace records. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "jvmjoin.h"

#define MS 1000000ull

struct out {
	unsigned n;
	char names[16][8][128];   /* Java frame names, root first */
	unsigned njava[16];
	const char *marker[16];
	bool java_context[16];
	uint32_t tid[16];
	unsigned nu[16], nk[16];
	struct jvm_join *j;
};

static void emit(const struct jvm_sample *s, void *arg)
{
	struct out *o = arg;

	if (o->n >= 16)
		return;
	o->njava[o->n] = s->njava;
	o->marker[o->n] = s->marker;
	o->java_context[o->n] = s->java_context;
	o->tid[o->n] = s->tid;
	o->nu[o->n] = s->nu;
	o->nk[o->n] = s->nk;
	for (unsigned i = 0; i < s->njava && i < 8; i++)
		jvm_join_frame_name(o->j, &s->java[i], o->names[o->n][i], 128);
	o->n++;
}

static const uint64_t kips[2] = { 0xffffffff81000010ull, 0xffffffff81000020ull };
static const uint64_t uips[3] = { 0x401000, 0x402000, 0x7f0000001000ull };

static void bpf(struct jvm_join *j, uint32_t tid, uint64_t t)
{
	jvm_join_add_bpf(j, tid, t, kips, 2, uips, 3, true, false, false, true);
}

/* ASGCT writes the leaf first: frames[0] is the innermost method. */
static void agent(struct jvm_join *j, uint32_t tid, uint64_t t, int32_t n, uint64_t leaf_id)
{
	struct jpring_frame f[4];

	for (int i = 0; i < 4; i++) {
		f[i].method_id = leaf_id + (uint64_t)i;
		f[i].bci = 10 * i;
		f[i].reserved = 0;
	}
	jvm_join_add_agent(j, tid, t, n, f);
}

static void name(struct jvm_join *j, uint64_t id, const char *cls, const char *m)
{
	struct jpag_line lines[2] = { { 0, 100 }, { 5, 101 } };

	jvm_join_method(j, id, cls, strlen(cls), m, strlen(m), "()V", 3, lines, 2, false);
}

static struct jvm_join *make(bool lines, bool sigs)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .lines = lines, .signatures = sigs };

	return jvm_join_new(&o);
}

START_TEST(test_join_waits_for_names_then_emits_root_first)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	uint64_t ids[16];
	struct jvm_join_stats st;

	bpf(j, 7, 100 * MS);
	agent(j, 7, 100 * MS + 18000, 2, 0x500);
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	/* Joined, but the method ids have no names yet: held, and asked for. */
	ck_assert_uint_eq(o.n, 0);
	ck_assert_uint_eq(jvm_join_held(j), 1);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 16), 2);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 16), 0);  /* asked once */
	name(j, 0x500, "Lcom/example/Leaf;", "work");
	name(j, 0x501, "Lcom/example/Main;", "main");
	jvm_join_run(j, 300 * MS, 300 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_uint_eq(o.njava[0], 2);
	ck_assert_str_eq(o.names[0][0], "com.example.Main.main");
	ck_assert_str_eq(o.names[0][1], "com.example.Leaf.work");
	ck_assert_ptr_null(o.marker[0]);
	ck_assert(o.java_context[0]);
	ck_assert_uint_eq(o.nu[0], 3);
	ck_assert_uint_eq(o.nk[0], 2);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.joined, 1);
	ck_assert_uint_eq(st.bpf_unmatched, 0);
	jvm_join_free(j);
}
END_TEST

START_TEST(test_latest_bpf_record_within_one_interval)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jvm_join_stats st;

	/* Two BPF samples before one agent record: the older lost its agent
	 * record and counts without Java frames. */
	bpf(j, 7, 100 * MS);
	bpf(j, 7, 110 * MS);
	agent(j, 7, 110 * MS + 5000, JPRING_UNKNOWN_NOT_JAVA, 0);
	/* An agent record whose nearest BPF record is too old to be its own. */
	bpf(j, 7, 200 * MS);
	agent(j, 7, 230 * MS, 0, 0);
	jvm_join_run(j, 400 * MS, 400 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 3);
	ck_assert_str_eq(o.marker[0], "[java_stack_missing]");
	ck_assert_ptr_null(o.marker[1]);     /* not a Java thread: no marker */
	ck_assert(!o.java_context[1]);       /* and its native stack stays whole */
	ck_assert_str_eq(o.marker[2], "[java_stack_missing]");
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.joined, 1);
	ck_assert_uint_eq(st.bpf_unmatched, 2);
	ck_assert_uint_eq(st.agent_unmatched, 1);
	jvm_join_free(j);
}
END_TEST

START_TEST(test_late_records_wait_for_the_horizon)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };

	/* A BPF record near the horizon may still get its agent record. */
	bpf(j, 7, 990 * MS);
	jvm_join_run(j, 1000 * MS, 1000 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 0);
	agent(j, 7, 990 * MS + 20000, JPRING_GC_ACTIVE, 0);
	/* An agent record past the horizon waits for the next round. */
	jvm_join_run(j, 990 * MS, 1000 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 0);
	jvm_join_run(j, 2000 * MS, 2000 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_str_eq(o.marker[0], "[gc_active]");
	ck_assert(o.java_context[0]);
	jvm_join_free(j);
}
END_TEST

START_TEST(test_namespace_tids_are_mapped)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };

	jvm_join_map_tid(j, 5, 1005);
	bpf(j, 1005, 100 * MS);
	agent(j, 5, 100 * MS + 1000, 0, 0);
	jvm_join_run(j, UINT64_MAX, 200 * MS, true, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_uint_eq(o.tid[0], 1005);
	ck_assert_ptr_null(o.marker[0]);
	jvm_join_free(j);
}
END_TEST

START_TEST(test_names_lines_signatures_and_hostile_text)
{
	struct jvm_join *j = make(true, false), *js = make(false, true);
	struct jvm_frame f = { .method_id = 0x900, .bci = 7 };
	char buf[256];
	uint64_t ids[4];
	const char evil[] = "Lx/Y\x01\xff<&;";

	/* Names only for ids the join asked for. */
	name(j, 0x900, "Ljava/util/HashMap;", "get");
	jvm_join_frame_name(j, &f, buf, sizeof(buf));
	ck_assert_str_eq(buf, "[unknown_java_method]");

	bpf(j, 1, 10 * MS);
	agent(j, 1, 10 * MS + 1, 1, 0x900);
	jvm_join_run(j, UINT64_MAX, 20 * MS, true, emit, &(struct out){ .j = j });
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 1);
	name(j, 0x900, "Ljava/util/HashMap;", "get");
	jvm_join_frame_name(j, &f, buf, sizeof(buf));
	ck_assert_str_eq(buf, "java.util.HashMap.get:101");

	bpf(js, 1, 10 * MS);
	agent(js, 1, 10 * MS + 1, 1, 0x900);
	jvm_join_run(js, UINT64_MAX, 20 * MS, true, emit, &(struct out){ .j = js });
	jvm_join_wanted(js, ids, 4);
	jvm_join_method(js, 0x900, evil, strlen(evil), "m\n", 2, "(I)V", 4, NULL, 0, false);
	jvm_join_frame_name(js, &f, buf, sizeof(buf));
	/* Control bytes and invalid UTF-8 never reach the profile. */
	ck_assert_str_eq(buf, "x.Y?" "?<&.m?(I)V");
	jvm_join_free(j);
	jvm_join_free(js);
}
END_TEST

START_TEST(test_unknown_and_timed_out_names)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	uint64_t ids[4];
	struct jvm_join_stats st;

	bpf(j, 3, 100 * MS);
	agent(j, 3, 100 * MS + 1, 1, 0x700);
	bpf(j, 3, 200 * MS);
	agent(j, 3, 200 * MS + 1, 1, 0x800);
	jvm_join_run(j, UINT64_MAX, 300 * MS, true, emit, &o);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 2);
	jvm_join_method(j, 0x700, NULL, 0, NULL, 0, NULL, 0, NULL, 0, true);
	jvm_join_run(j, UINT64_MAX, 301 * MS, true, emit, &o);
	ck_assert_uint_eq(o.n, 1);  /* "unknown" is an answer */
	ck_assert_str_eq(o.names[0][0], "[unknown_java_method]");
	/* 0x800 never answered: flushed at the end under the unknown name. */
	jvm_join_flush(j, emit, &o);
	ck_assert_uint_eq(o.n, 2);
	ck_assert_str_eq(o.names[1][0], "[unknown_java_method]");
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.names_timed_out, 1);
	jvm_join_free(j);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jvmjoin");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_join_waits_for_names_then_emits_root_first);
	tcase_add_test(tc, test_latest_bpf_record_within_one_interval);
	tcase_add_test(tc, test_late_records_wait_for_the_horizon);
	tcase_add_test(tc, test_namespace_tids_are_mapped);
	tcase_add_test(tc, test_names_lines_signatures_and_hostile_text);
	tcase_add_test(tc, test_unknown_and_timed_out_names);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
