/* Joining BPF samples with the agent's AsyncGetCallTrace records. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jvmjoin.h"
#include "jvmjoin_int.h"  /* jvm_join_class_name */

#define MS 1000000ull

struct out {
	unsigned n;
	char names[16][8][128];   /* Java frame names, root first */
	unsigned njava[16];
	uint8_t type[16][8];      /* frame types, root first */
	const char *marker[16];
	char leaf[16][64];
	const char *state[16];
	uint64_t values[16][JVM_EVENT_VALUES];
	int event[16];
	bool java_context[16];
	uint32_t tid[16];
	unsigned nu[16], nk[16];
	uint64_t uips[16][2];     /* the first user pcs */
	struct jvm_join *j;
};

static void emit(const struct jvm_sample *s, void *arg)
{
	struct out *o = arg;

	if (o->n >= 16)
		return;
	o->njava[o->n] = s->njava;
	o->marker[o->n] = s->marker;
	o->state[o->n] = s->state;
	o->java_context[o->n] = s->java_context;
	o->tid[o->n] = s->tid;
	o->event[o->n] = s->event;
	snprintf(o->leaf[o->n], sizeof(o->leaf[o->n]), "%s", s->leaf ? s->leaf : "");
	if (s->values)
		memcpy(o->values[o->n], s->values, sizeof(o->values[o->n]));
	o->nu[o->n] = s->nu;
	o->nk[o->n] = s->nk;
	for (unsigned i = 0; i < s->nu && i < 2; i++)
		o->uips[o->n][i] = s->uips[i];
	for (unsigned i = 0; i < s->njava && i < 8; i++) {
		jvm_join_frame_name(o->j, &s->java[i], o->names[o->n][i], 128);
		o->type[o->n][i] = s->java[i].type;
	}
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
		f[i].type = 0;
	}
	jvm_join_add_agent(j, tid, t, t, n, f);
}

static void name(struct jvm_join *j, uint64_t id, const char *cls, const char *m)
{
	struct jpag_line lines[2] = { { 0, 100 }, { 5, 101 } };

	jvm_join_method(j, id, cls, strlen(cls), m, strlen(m), "()V", 3, lines, 2, false);
}

/* The join's counts of matched and unmatched records. */
static void ck_join_counts(struct jvm_join *j, uint64_t joined, uint64_t bpf_unmatched,
			   uint64_t agent_unmatched)
{
	struct jvm_join_stats st;

	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.joined, joined);
	ck_assert_uint_eq(st.bpf_unmatched, bpf_unmatched);
	ck_assert_uint_eq(st.agent_unmatched, agent_unmatched);
}

static struct jvm_join *make(bool lines, bool sigs)
{
	/* The cases below are timed against a 50 ms wait; the default is
	 * longer (test_default_wait_covers_a_loaded_machine). */
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .late_ns = 50 * MS, .lines = lines,
				   .signatures = sigs };

	return jvm_join_new(&o);
}

/* The agent's frame types reach the sample; a type the ring should not
 * hold (shared memory) is unknown. */
START_TEST(test_frame_types_pass_through_checked)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jpring_frame f[3] = {
		{ .bci = 1, .type = JPRING_TYPE_INLINED, .method_id = 0x700 },
		{ .bci = 2, .type = JPRING_TYPE_COMPILED, .method_id = 0x701 },
		{ .bci = 3, .type = 77, .method_id = 0x702 },
	};

	bpf(j, 7, 100 * MS);
	jvm_join_add_agent(j, 7, 100 * MS + 18000, 100 * MS + 18000, 3, f);
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);   /* asks for the names */
	for (unsigned i = 0; i < 3; i++)
		name(j, f[i].method_id, "LA;", (const char *[]){ "inl", "jit", "bad" }[i]);
	jvm_join_run(j, 300 * MS, 300 * MS, false, emit, &o);
	/* One sample of three frames, root first. */
	ck_assert_uint_eq(o.n, 1);
	ck_assert_uint_eq(o.njava[0], 3);
	ck_assert_str_eq(o.names[0][0], "A.bad");
	ck_assert_uint_eq(o.type[0][0], JPRING_TYPE_UNKNOWN);
	ck_assert_uint_eq(o.type[0][1], JPRING_TYPE_COMPILED);
	ck_assert_uint_eq(o.type[0][2], JPRING_TYPE_INLINED);
	jvm_join_free(j);
}
END_TEST

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

/* Allocation and lock samples: no BPF record, held only for names, the
 * class (JVM signature) as leaf, values passed through. */
START_TEST(test_agent_events)
{
	static const struct { const char *sig, *name; } cls[] = {
		{ "[B", "byte[]" }, { "[[I", "int[][]" }, { "Ljava/lang/String;", "java.lang.String" },
		{ "[Ljava/lang/Object;", "java.lang.Object[]" }, { "LFoo$Bar;", "Foo$Bar" },
		{ "[", "[" }, { "Lbad\x01name;", "bad?name" },
	};
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jpring_frame f[2] = { { .bci = 3, .method_id = 0x700 }, { .bci = 9, .method_id = 0x701 } };
	uint64_t v[3] = { 1, 512, 524288 }, ids[16];
	struct jvm_join_stats st;

	for (size_t i = 0; i < sizeof(cls) / sizeof(cls[0]); i++) {
		char *n = jvm_join_class_name(cls[i].sig, strlen(cls[i].sig));

		ck_assert_ptr_nonnull(n);
		ck_assert_str_eq(n, cls[i].name);
		free(n);
	}
	jvm_join_add_event(j, 7, 100 * MS, 100 * MS, 2, v, 3, "[B", 2, f, 2);
	/* Implausible times are refused as for agent records. */
	jvm_join_add_event(j, 7, 5000 * MS, 100 * MS, 2, v, 3, "[B", 2, f, 2);
	jvm_join_run(j, 100 * MS, 100 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 0);
	ck_assert_uint_eq(jvm_join_held(j), 1);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 16), 2);
	name(j, 0x700, "LA;", "alloc");
	name(j, 0x701, "LA;", "main");
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_int_eq(o.event[0], 2);
	ck_assert_str_eq(o.names[0][0], "A.main");
	ck_assert_str_eq(o.names[0][1], "A.alloc");
	ck_assert_str_eq(o.leaf[0], "byte[]");
	ck_assert_uint_eq(o.values[0][2], 524288);
	ck_assert_uint_eq(o.nu[0] + o.nk[0], 0);
	/* Named frames: the next one goes out at the next run, without a new name. */
	jvm_join_add_event(j, 7, 300 * MS, 300 * MS, 3, v, 3, "LA;", 3, f, 2);
	jvm_join_run(j, 300 * MS, 300 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 2);
	ck_assert_str_eq(o.leaf[1], "A");
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.agent_future, 1);
	jvm_join_free(j);
}
END_TEST

/* A wall record of a thread without Java frames holds its native pcs: they
 * become the sample's user stack (leaf first, the stack flag bits cleared);
 * a record mixing them with Java frames is dropped. */
START_TEST(test_wall_native_frames)
{
	struct jvm_join_opts jo = { .interval_ns = 10 * MS };
	struct jvm_join *j = jvm_join_new(&jo);
	struct out o = { .j = j };
	struct jpring_frame f[3] = {
		{ .bci = JPRING_BCI_NATIVE, .method_id = 0x7f0000001234ull },
		{ .bci = JPRING_BCI_NATIVE, .method_id = 0x7f0000005678ull | (1ull << 63) },
		{ .bci = 3, .method_id = 0x800 },
	};
	uint64_t v[2] = { 1, 10 * MS };
	uint64_t got[2];

	jvm_join_add_wall(j, 9, 100 * MS, 100 * MS, 5, v, 2, JPRING_STATE_SLEEPING, 2, f);
	jvm_join_add_wall(j, 9, 101 * MS, 101 * MS, 5, v, 2, JPRING_STATE_SLEEPING, 3, f);
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_uint_eq(o.njava[0], 0);
	ck_assert_uint_eq(o.nu[0], 2);
	ck_assert_uint_eq(o.nk[0], 0);
	ck_assert_str_eq(o.state[0], "[sleeping]");
	ck_assert_ptr_null(o.marker[0]);
	memcpy(got, o.uips[0], sizeof(got));
	ck_assert_uint_eq(got[0], 0x7f0000001234ull);
	ck_assert_uint_eq(got[1], 0x7f0000005678ull);
	jvm_join_free(j);
}
END_TEST

/* Wall records: no BPF record to join, the thread's state as the last frame,
 * ASGCT errors and stub leaves as markers; with running_leaf, CPU samples
 * end in "[running]". */
START_TEST(test_wall_records)
{
	struct jvm_join_opts jo = { .interval_ns = 10 * MS, .running_leaf = true };
	struct jvm_join *j = jvm_join_new(&jo);
	struct out o = { .j = j };
	struct jpring_frame f[3] = {
		{ .bci = JPRING_BCI_STUB, .method_id = 0 },
		{ .bci = 4, .method_id = 0x800, .type = 99 },   /* a type no agent writes */
		{ .bci = 1, .method_id = 0x801, .type = JPRING_TYPE_INTERPRETED },
	};
	uint64_t v[2] = { 1, 30 * MS };

	ck_assert_ptr_nonnull(j);
	jvm_join_add_wall(j, 7, 100 * MS, 100 * MS, 5, v, 2, JPRING_STATE_SLEEPING, 2, f + 1);
	jvm_join_add_wall(j, 7, 101 * MS, 101 * MS, 5, v, 2, JPRING_STATE_UNINTERRUPTIBLE, 3, f);
	jvm_join_add_wall(j, 7, 102 * MS, 102 * MS, 5, v, 2, JPRING_STATE_SLEEPING,
			  JPRING_GC_ACTIVE, f);
	/* An unknown state is refused. */
	jvm_join_add_wall(j, 7, 103 * MS, 103 * MS, 5, v, 2, 9, 2, f + 1);
	name(j, 0x800, "LW;", "sleep");
	name(j, 0x801, "LW;", "run");
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 3);
	ck_assert_int_eq(o.event[0], 5);
	ck_assert_str_eq(o.state[0], "[sleeping]");
	ck_assert_uint_eq(o.njava[0], 2);
	ck_assert_str_eq(o.names[0][0], "W.run");
	ck_assert_str_eq(o.names[0][1], "W.sleep");
	ck_assert_uint_eq(o.type[0][0], JPRING_TYPE_INTERPRETED);
	ck_assert_uint_eq(o.type[0][1], JPRING_TYPE_UNKNOWN);
	ck_assert_uint_eq(o.values[0][1], 30 * MS);
	ck_assert_uint_eq(o.nu[0] + o.nk[0], 0);
	ck_assert_str_eq(o.state[1], "[uninterruptible]");
	ck_assert_uint_eq(o.njava[1], 2);
	ck_assert_str_eq(o.marker[1], "[unknown_java_leaf]");
	ck_assert_str_eq(o.state[2], "[sleeping]");
	ck_assert_uint_eq(o.njava[2], 0);
	ck_assert_str_eq(o.marker[2], "[gc_active]");
	/* A CPU sample of the same recording: joined as ever, "[running]". */
	bpf(j, 7, 300 * MS);
	agent(j, 7, 300 * MS + 5000, 2, 0x800);
	jvm_join_run(j, 400 * MS, 400 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 4);
	ck_assert_int_eq(o.event[3], 0);
	ck_assert_str_eq(o.state[3], "[running]");
	jvm_join_free(j);
}
END_TEST

START_TEST(test_latest_bpf_record_within_the_window)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };

	/* Two BPF samples before one agent record: the older lost its agent
	 * record and counts without Java frames. */
	bpf(j, 7, 100 * MS);
	bpf(j, 7, 110 * MS);
	agent(j, 7, 110 * MS + 5000, JPRING_UNKNOWN_NOT_JAVA, 0);
	/* An agent record whose nearest BPF record is too old to be its own
	 * (more than late_ns, 50 ms here). */
	bpf(j, 7, 200 * MS);
	agent(j, 7, 260 * MS, 0, 0);
	/* A thread preempted before it took the signal: its agent record
	 * comes 2.4 intervals after the BPF record, and is its own. */
	bpf(j, 7, 300 * MS);
	agent(j, 7, 324 * MS, 2, 1);
	jvm_join_run(j, 400 * MS, 400 * MS, false, emit, &o);
	jvm_join_flush(j, emit, &o);
	ck_assert_uint_eq(o.n, 4);
	ck_assert_str_eq(o.marker[0], "[java_stack_missing]");
	ck_assert_ptr_null(o.marker[1]);     /* not a Java thread: no marker */
	ck_assert(!o.java_context[1]);       /* and its native stack stays whole */
	ck_assert_str_eq(o.marker[2], "[java_stack_missing]");
	ck_assert_ptr_null(o.marker[3]);
	ck_assert_uint_eq(o.njava[3], 2);    /* the late one has its Java frames */
	ck_join_counts(j, 2, 2, 1);
	jvm_join_free(j);
}
END_TEST

/* On a loaded machine a thread preempted between its counter's overflow
 * and its return to user space takes the signal 50-200 ms later (seen at
 * load 11 on 2 CPUs): the default wait keeps both its BPF record and the
 * agent record until they meet, and still refuses a pair 300 ms apart. */
START_TEST(test_default_wait_covers_a_loaded_machine)
{
	struct jvm_join_opts jo = { .interval_ns = 10 * MS };
	struct jvm_join *j = jvm_join_new(&jo);
	struct out o = { .j = j };

	bpf(j, 7, 100 * MS);
	/* Drains go on while the thread waits for a CPU. */
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	jvm_join_run(j, 300 * MS, 300 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 0);
	agent(j, 7, 290 * MS, 2, 1);
	bpf(j, 7, 700 * MS);
	agent(j, 7, 1000 * MS, 2, 1);
	jvm_join_run(j, 1400 * MS, 1400 * MS, false, emit, &o);
	jvm_join_flush(j, emit, &o);
	/* The unmatched one goes out at once, the joined one after its names. */
	ck_assert_uint_eq(o.n, 2);
	ck_assert_str_eq(o.marker[0], "[java_stack_missing]");
	ck_assert_ptr_null(o.marker[1]);
	ck_assert_uint_eq(o.njava[1], 2);
	ck_join_counts(j, 1, 1, 1);
	jvm_join_free(j);
}
END_TEST

START_TEST(test_late_records_wait_for_the_horizon)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jvm_join_stats st;

	/* An agent record whose BPF record is not in this drain yet waits
	 * for the next one (late_ns), then joins it. */
	agent(j, 8, 500 * MS, 2, 1);
	jvm_join_run(j, 510 * MS, 510 * MS, false, emit, &o);
	ck_assert_uint_eq(o.n, 0);
	bpf(j, 8, 500 * MS - 20000);
	jvm_join_run(j, 520 * MS, 520 * MS, false, emit, &o);
	jvm_join_flush(j, emit, &o);
	ck_assert_uint_eq(o.n, 1);
	ck_assert_ptr_null(o.marker[0]);
	ck_assert_uint_eq(o.njava[0], 2);
	/* With none in late_ns, it is counted and dropped as before. */
	agent(j, 8, 600 * MS, 2, 1);
	jvm_join_run(j, 640 * MS, 640 * MS, false, emit, &o);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.agent_unmatched, 0);
	jvm_join_run(j, 660 * MS, 660 * MS, false, emit, &o);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.agent_unmatched, 1);
	ck_assert_uint_eq(o.n, 1);
	o.n = 0;

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

/* JFR's positions: line (whenever the method has a table) and bytecode
 * index in the name, after the signature if any; none where not known. */
START_TEST(test_names_positions)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .late_ns = 50 * MS, .positions = true };
	struct jvm_join *j = jvm_join_new(&o);
	struct jvm_frame f = { .method_id = 0x900, .bci = 7 }, nat = { .method_id = 0x900, .bci = -3 };
	char buf[256];
	uint64_t ids[4];

	bpf(j, 1, 10 * MS);
	agent(j, 1, 10 * MS + 1, 1, 0x900);
	jvm_join_run(j, UINT64_MAX, 20 * MS, true, emit, &(struct out){ .j = j });
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 1);
	name(j, 0x900, "Ljava/util/HashMap;", "get");
	jvm_join_frame_name(j, &f, buf, sizeof(buf));
	ck_assert_str_eq(buf, "java.util.HashMap.get:101@7");
	jvm_join_frame_name(j, &nat, buf, sizeof(buf));
	ck_assert_str_eq(buf, "java.util.HashMap.get");
	/* No line table: the bci alone. */
	bpf(j, 1, 30 * MS);
	agent(j, 1, 30 * MS + 1, 1, 0x901);
	jvm_join_run(j, UINT64_MAX, 40 * MS, true, emit, &(struct out){ .j = j });
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 1);
	jvm_join_method(j, 0x901, "LA;", 3, "m", 1, "()V", 3, NULL, 0, false);
	f.method_id = 0x901;
	jvm_join_frame_name(j, &f, buf, sizeof(buf));
	ck_assert_str_eq(buf, "A.m@7");
	jvm_join_free(j);
}
END_TEST

/* A named thread's Java id, kept with its name; none for an unnamed tid. */
START_TEST(test_thread_java_ids)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS };
	struct jvm_join *j = jvm_join_new(&o);

	ck_assert_int_eq(jvm_join_thread_java_id(j, 100, 1), -ENOENT);
	ck_assert_int_eq(jvm_join_thread_name(j, 100, "main", 4), 0);
	ck_assert_uint_eq(jvm_join_thread_java_id_of(j, 100), 0);
	ck_assert_int_eq(jvm_join_thread_java_id(j, 100, 0), -EINVAL);
	ck_assert_int_eq(jvm_join_thread_java_id(j, 100, 3), 0);
	ck_assert_uint_eq(jvm_join_thread_java_id_of(j, 100), 3);
	ck_assert_uint_eq(jvm_join_thread_java_id_of(j, 101), 0);
	/* A rename keeps the id. */
	ck_assert_int_eq(jvm_join_thread_name(j, 100, "main2", 5), 0);
	ck_assert_uint_eq(jvm_join_thread_java_id_of(j, 100), 3);
	jvm_join_free(j);
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


/* ---- a hostile agent (the ring is written by the profiled process) ---- */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A full slot's worth of frames, ids first_id.. (leaf first). */
static void agent_deep(struct jvm_join *j, uint32_t tid, uint64_t t, uint64_t now, uint64_t first_id)
{
	static struct jpring_frame f[JPRING_MAX_FRAMES];

	for (int i = 0; i < JPRING_MAX_FRAMES; i++)
		f[i] = (struct jpring_frame){ .method_id = first_id + (uint64_t)i, .bci = i };
	jvm_join_add_agent(j, tid, t, now, JPRING_MAX_FRAMES, f);
}

struct counter {
	uint64_t n, last_time, out_of_order, with_java, limit_frames;
	struct jvm_join *j;
};

static void count(const struct jvm_sample *s, void *arg)
{
	struct counter *c = arg;
	char buf[64];

	if (s->time_ns < c->last_time)
		c->out_of_order++;
	c->last_time = s->time_ns;
	c->n++;
	c->with_java += s->njava > 0;
	for (unsigned i = 0; i < s->njava; i++) {
		jvm_join_frame_name(c->j, &s->java[i], buf, sizeof(buf));
		c->limit_frames += strcmp(buf, "[java_method_limit]") == 0;
	}
}

START_TEST(test_implausible_times_are_refused)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .start_ns = 1000 * MS };
	struct jvm_join *j = jvm_join_new(&o);
	struct jvm_join_stats st;
	size_t before;

	jvm_join_get_stats(j, &st);
	before = st.bytes;
	/* An hour ahead would wait for a horizon that never comes; before the
	 * recording started there is nothing to join with. */
	for (int i = 0; i < 1000; i++) {
		agent_deep(j, 7, 1500 * MS + 3600000 * MS + (uint64_t)i, 1500 * MS, 1);
		agent_deep(j, 7, 999 * MS - (uint64_t)i, 1500 * MS, 1);
	}
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.agent_future, 1000);
	ck_assert_uint_eq(st.agent_before_start, 1000);
	ck_assert_uint_eq(st.bytes, before);
	ck_assert(jvm_join_limit_news(j));
	ck_assert(!jvm_join_limit_news(j));  /* once */
	/* Within the window (up to now + 1 s): taken. */
	agent_deep(j, 7, 1500 * MS + 900 * MS, 1500 * MS, 1);
	agent_deep(j, 7, 1000 * MS, 1500 * MS, 1);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.agent_records - st.agent_future - st.agent_before_start, 2);
	ck_assert_uint_gt(st.bytes, before);
	jvm_join_free(j);
}
END_TEST

/* Descending times on one thread: each record costs O(log n), not the
 * queue's length. With a sorted insert these 200000 records moved 480 GB
 * (minutes); with heaps they take well under a second (a few under ASan on
 * a busy machine: hence the generous bound). */
START_TEST(test_descending_times_stay_cheap)
{
	struct jvm_join *j = make(false, false);
	struct counter c = { .j = j };
	struct jvm_join_stats st;
	const unsigned n = 200000;
	double t0 = now_ms(), ms;

	for (unsigned i = 0; i < n; i++)
		bpf(j, 7, 1000 * MS + (uint64_t)i * 20000);
	for (unsigned i = n; i-- > 0;)
		agent(j, 7, 1000 * MS + (uint64_t)i * 20000 + 1000, JPRING_GC_ACTIVE, 0);
	ms = now_ms() - t0;
	jvm_join_run(j, UINT64_MAX, 5000 * MS, true, count, &c);
	printf("%u descending records queued in %.0f ms, joined in %.0f ms\n", n, ms, now_ms() - t0 - ms);
	ck_assert_msg(now_ms() - t0 < 10000, "took %.0f ms", now_ms() - t0);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.joined, n);
	ck_assert_uint_eq(c.n, n);
	ck_assert_uint_eq(c.out_of_order, 0);
	jvm_join_free(j);
}
END_TEST

/* Records for the slice tests: on 4 threads, 50 joinable pairs and 5 BPF
 * records with no agent record each. */
static struct jvm_join *sliced_input(void)
{
	struct jvm_join *j = make(false, false);

	for (uint32_t tid = 1; tid <= 4; tid++) {
		for (unsigned i = 0; i < 50; i++) {
			bpf(j, tid, 1000 * MS + i * 20 * MS);
			agent(j, tid, 1000 * MS + i * 20 * MS + 1000, JPRING_GC_ACTIVE, 0);
		}
		for (unsigned i = 0; i < 5; i++)
			bpf(j, tid, 3000 * MS + i * 20 * MS);
	}
	return j;
}

/* The join in slices (as the daemon runs it, so a flood never holds its
 * loop) gives what one run gives, a bounded amount per slice. */
START_TEST(test_join_in_slices_matches_one_run)
{
	struct jvm_join *whole = sliced_input(), *j = sliced_input();
	struct counter cw = { .j = whole }, c = { .j = j };
	struct jvm_join_stats sw, st;
	unsigned slices = 0;
	uint64_t before;

	jvm_join_run(whole, 2500 * MS, 2500 * MS, false, count, &cw);
	for (;;) {
		before = c.n;
		slices++;
		ck_assert_uint_lt(slices, 1000);
		if (!jvm_join_run_some(j, 2500 * MS, 2500 * MS, false, 7, count, &c))
			break;
		ck_assert_uint_le(c.n - before, 7);
	}
	ck_assert_uint_eq(c.n, cw.n);
	ck_assert_uint_eq(c.n, 200);
	ck_assert_uint_ge(slices, 200 / 7);
	jvm_join_get_stats(whole, &sw);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.joined, sw.joined);
	ck_assert_uint_eq(st.bpf_unmatched, sw.bpf_unmatched);
	/* The final join in slices takes the rest: the lone BPF records. */
	jvm_join_run(whole, UINT64_MAX, 5000 * MS, true, count, &cw);
	while (jvm_join_run_some(j, UINT64_MAX, 5000 * MS, true, 3, count, &c))
		;
	ck_assert_uint_eq(c.n, cw.n);
	ck_assert_uint_eq(c.n, 220);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.bpf_unmatched, 20);
	jvm_join_free(whole);
	jvm_join_free(j);
}
END_TEST

/* Heap bytes are bounded per join and, through a shared budget, over all
 * the joins of one uid. */
START_TEST(test_bytes_bounded_per_join_and_per_uid)
{
	struct jvm_budget *b = jvm_budget_new(3u << 20);
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .max_bytes = 2u << 20, .budget = b };
	struct jvm_join *j1 = jvm_join_new(&o), *j2 = jvm_join_new(&o);
	struct jvm_join_stats s1, s2;
	size_t used, peak, limit;

	for (unsigned i = 0; i < 2000; i++) {
		agent_deep(j1, 1, 100 * MS + i, 100 * MS, 1);
		agent_deep(j2, 2, 100 * MS + i, 100 * MS, 1);
	}
	jvm_join_get_stats(j1, &s1);
	jvm_join_get_stats(j2, &s2);
	jvm_budget_get(b, &used, &peak, &limit);
	printf("join bytes %zu + %zu, uid %zu of %zu\n", s1.bytes, s2.bytes, used, limit);
	ck_assert_uint_le(s1.bytes, 2u << 20);
	ck_assert_uint_le(s2.bytes, 2u << 20);
	ck_assert_uint_le(used, 3u << 20);
	ck_assert_uint_le(peak, 3u << 20);
	ck_assert_uint_eq(used, s1.bytes + s2.bytes);
	ck_assert_uint_gt(s1.over_bytes + s1.over_budget, 0);
	ck_assert_uint_gt(s2.over_budget, 0);
	ck_assert_uint_gt(s1.bytes + s2.bytes, (3u << 20) - 16384);  /* filled, not starved */
	jvm_join_free(j1);
	jvm_budget_get(b, &used, &peak, &limit);
	ck_assert_uint_eq(used, s2.bytes);
	/* The room j1 left is j2's now. */
	agent_deep(j2, 2, 200 * MS, 200 * MS, 1);
	jvm_join_get_stats(j2, &s1);
	ck_assert_uint_gt(s1.bytes, s2.bytes);
	jvm_join_free(j2);
	jvm_budget_get(b, &used, &peak, &limit);
	ck_assert_uint_eq(used, 0);
	jvm_budget_unref(b);
}
END_TEST

/* A record whose leaf the agent stepped over (JPRING_BCI_STUB) keeps its
 * Java frames and ends in "[unknown_java_leaf]"; the pseudo-frame is never asked
 * about. */
START_TEST(test_stub_leaf_becomes_a_marker)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jpring_frame f[3] = {
		{ .bci = JPRING_BCI_STUB, .method_id = 0 },
		{ .bci = 4, .method_id = 500 },
		{ .bci = 7, .method_id = 501 },
	};
	uint64_t ids[8];

	bpf(j, 7, 100 * MS);
	jvm_join_add_agent(j, 7, 100 * MS + 1000, 100 * MS, 3, f);
	bpf(j, 7, 110 * MS);
	jvm_join_add_agent(j, 7, 110 * MS + 1000, 110 * MS, 1, f);
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 8), 2);
	ck_assert(ids[0] != 0 && ids[1] != 0);
	name(j, 500, "LLeaf;", "callee");
	name(j, 501, "LRoot;", "caller");
	jvm_join_run(j, 200 * MS, 200 * MS, true, emit, &o);
	ck_assert_uint_eq(o.n, 2);
	/* The stub alone (no Java frame behind it) is emitted at once. */
	ck_assert_uint_eq(o.njava[0], 0);
	ck_assert_str_eq(o.marker[0], "[unknown_java_leaf]");
	ck_assert_uint_eq(o.njava[1], 2);
	ck_assert_str_eq(o.names[1][0], "Root.caller");
	ck_assert_str_eq(o.names[1][1], "Leaf.callee");
	ck_assert_str_eq(o.marker[1], "[unknown_java_leaf]");
	ck_assert(o.java_context[1]);
	jvm_join_free(j);
}
END_TEST

/* The stub kind the agent writes in the pseudo-frame names the marker; a
 * kind the daemon does not know (the ring is untrusted) is an unknown leaf,
 * and the pseudo-frame is still never asked about. */
START_TEST(test_stub_kinds_are_named)
{
	struct jvm_join *j = make(false, false);
	struct out o = { .j = j };
	struct jpring_frame f[3][2] = {
		{ { .bci = JPRING_BCI_STUB, .method_id = JPRING_STUB_VTABLE }, { .bci = 4, .method_id = 500 } },
		{ { .bci = JPRING_BCI_STUB, .method_id = JPRING_STUB_KINDS }, { .bci = 4, .method_id = 500 } },
		{ { .bci = JPRING_BCI_STUB, .method_id = ~0ull }, { .bci = 4, .method_id = 500 } },
	};
	uint64_t ids[8];

	for (unsigned i = 0; i < 3; i++) {
		bpf(j, 7, (100 + 10 * i) * MS);
		jvm_join_add_agent(j, 7, (100 + 10 * i) * MS + 1000, (100 + 10 * i) * MS, 2, f[i]);
	}
	jvm_join_run(j, 200 * MS, 200 * MS, false, emit, &o);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 8), 1);
	ck_assert_uint_eq(ids[0], 500);
	name(j, 500, "LCaller;", "call");
	jvm_join_run(j, 200 * MS, 200 * MS, true, emit, &o);
	ck_assert_uint_eq(o.n, 3);
	ck_assert_str_eq(o.marker[0], "[vtable stub]");
	ck_assert_str_eq(o.marker[1], "[unknown_java_leaf]");
	ck_assert_str_eq(o.marker[2], "[unknown_java_leaf]");
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_uint_eq(o.njava[i], 1);
		ck_assert_str_eq(o.names[i][0], "Caller.call");
	}
	ck_assert_str_eq(jvm_join_stub_marker(JPRING_STUB_CALL), "[call_stub]");
	ck_assert_str_eq(jvm_join_stub_marker(JPRING_STUB_DISPATCH), "[vtable/itable stub]");
	ck_assert_str_eq(jvm_join_stub_marker(JPRING_STUB_INVOKE_BASIC), "[MethodHandle.invokeBasic]");
	ck_assert_str_eq(jvm_join_stub_marker(JPRING_STUB_LINK_TO_NATIVE), "[MethodHandle.linkToNative]");
	jvm_join_free(j);
}
END_TEST

struct tnames {
	unsigned n;
	uint32_t tid[8];
	char name[8][300];
};

static void collect_tname(uint32_t tid, const char *name, void *arg)
{
	struct tnames *t = arg;

	if (t->n < 8) {
		t->tid[t->n] = tid;
		snprintf(t->name[t->n], sizeof(t->name[0]), "%s", name);
		t->n++;
	}
}

/* Java thread names: kept whole (past /proc's 15 bytes), made printable
 * UTF-8, replaced by a later name of the same tid, bounded in count and
 * length. */
START_TEST(test_thread_names)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .max_tids = 2 };
	struct jvm_join *j = jvm_join_new(&o);
	const char *lng = "worker-with-a-very-long-name-1";
	char big[JPAG_THREAD_NAME_MAX + 1];
	struct tnames t = { 0 };

	memset(big, 'x', sizeof(big));
	ck_assert_int_eq(jvm_join_thread_name(j, 100, lng, strlen(lng)), 0);
	ck_assert_int_eq(jvm_join_thread_name(j, 101, "bad\nname\xff", 9), 0);
	ck_assert_int_eq(jvm_join_thread_name(j, 100, "main", 4), 0);
	ck_assert_int_eq(jvm_join_thread_name(j, 102, "third", 5), -E2BIG);
	ck_assert_int_eq(jvm_join_thread_name(j, 101, big, sizeof(big)), -EINVAL);
	ck_assert_int_eq(jvm_join_thread_name(j, 0, "zero", 4), -EINVAL);
	ck_assert_int_eq(jvm_join_thread_name(j, 101, "", 0), -EINVAL);
	jvm_join_each_thread_name(j, collect_tname, &t);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_uint_eq(t.tid[0], 100);
	ck_assert_str_eq(t.name[0], "main");
	ck_assert_uint_eq(t.tid[1], 101);
	ck_assert_str_eq(t.name[1], "bad?name?");
	/* A long one, then the table still answers for known tids. */
	ck_assert_int_eq(jvm_join_thread_name(j, 101, lng, strlen(lng)), 0);
	t.n = 0;
	jvm_join_each_thread_name(j, collect_tname, &t);
	ck_assert_str_eq(t.name[1], lng);
	jvm_join_free(j);
}
END_TEST

/* Method ids are tracked up to max_methods; the rest are counted and named
 * "[java_method_limit]", never asked about. A name past the byte bound is
 * taken as unknown. */
START_TEST(test_method_ids_capped)
{
	struct jvm_join_opts o = { .interval_ns = 10 * MS, .max_methods = 300 };
	struct jvm_join *j = jvm_join_new(&o);
	struct counter c = { .j = j };
	struct jvm_join_stats st;
	uint64_t ids[256], got = 0;
	unsigned n;
	static char huge[60000];
	static bool seen[10 * JPRING_MAX_FRAMES + 1];

	for (unsigned i = 0; i < 10; i++) {
		bpf(j, 7, (100 + 20 * i) * MS);
		agent_deep(j, 7, (100 + 20 * i) * MS + 1000, 300 * MS, 1 + i * JPRING_MAX_FRAMES);
	}
	jvm_join_run(j, UINT64_MAX, 400 * MS, true, count, &c);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.methods, 300);
	ck_assert_uint_eq(st.frames_over_methods, 10 * JPRING_MAX_FRAMES - 300);
	ck_assert_uint_eq(jvm_join_unanswered(j), 300);
	while ((n = jvm_join_wanted(j, ids, 128)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			ck_assert(ids[i] >= 1 && ids[i] <= 10 * JPRING_MAX_FRAMES && !seen[ids[i]]);
			seen[ids[i]] = true;  /* each asked for once */
			got++;
			if (ids[i] == 1) {
				memset(huge, 'a', sizeof(huge));
				jvm_join_method(j, ids[i], huge, sizeof(huge), huge, sizeof(huge), huge,
						sizeof(huge), NULL, 0, false);
			} else {
				name(j, ids[i], "LC;", "m");
			}
		}
	}
	ck_assert_uint_eq(got, 300);
	ck_assert_uint_eq(jvm_join_unanswered(j), 0);
	jvm_join_run(j, UINT64_MAX, 500 * MS, true, count, &c);
	ck_assert_uint_eq(c.n, 10);
	ck_assert_uint_eq(c.limit_frames, 10 * JPRING_MAX_FRAMES - 300);
	jvm_join_free(j);

	/* The same with a byte bound too small for the 180 KB name. */
	o = (struct jvm_join_opts){ .interval_ns = 10 * MS, .max_bytes = 128 << 10 };
	j = jvm_join_new(&o);
	bpf(j, 7, 100 * MS);
	agent(j, 7, 100 * MS + 1000, 1, 0x42);
	jvm_join_run(j, UINT64_MAX, 400 * MS, true, count, &c);
	ck_assert_uint_eq(jvm_join_wanted(j, ids, 4), 1);
	jvm_join_method(j, 0x42, huge, sizeof(huge), huge, sizeof(huge), huge, sizeof(huge), NULL, 0,
			false);
	jvm_join_get_stats(j, &st);
	ck_assert_uint_eq(st.methods_unknown, 1);
	ck_assert_uint_eq(st.over_bytes, 1);
	ck_assert_uint_lt(st.bytes_peak, 128 << 10);
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
	tcase_add_test(tc, test_agent_events);
	tcase_add_test(tc, test_frame_types_pass_through_checked);
	tcase_add_test(tc, test_wall_records);
	tcase_add_test(tc, test_wall_native_frames);
	tcase_add_test(tc, test_latest_bpf_record_within_the_window);
	tcase_add_test(tc, test_late_records_wait_for_the_horizon);
	tcase_add_test(tc, test_default_wait_covers_a_loaded_machine);
	tcase_add_test(tc, test_namespace_tids_are_mapped);
	tcase_add_test(tc, test_names_lines_signatures_and_hostile_text);
	tcase_add_test(tc, test_names_positions);
	tcase_add_test(tc, test_thread_java_ids);
	tcase_add_test(tc, test_unknown_and_timed_out_names);
	tcase_add_test(tc, test_implausible_times_are_refused);
	tcase_add_test(tc, test_descending_times_stay_cheap);
	tcase_add_test(tc, test_bytes_bounded_per_join_and_per_uid);
	tcase_add_test(tc, test_method_ids_capped);
	tcase_add_test(tc, test_thread_names);
	tcase_add_test(tc, test_stub_leaf_becomes_a_marker);
	tcase_add_test(tc, test_stub_kinds_are_named);
	tcase_add_test(tc, test_join_in_slices_matches_one_run);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
