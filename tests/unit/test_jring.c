/* The agent ring is written by the profiled process: everything in it is
 * hostile input. These tests write into the mapping as an agent (or an
 * attacker) would and check what the daemon's reader makes of it. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jring.h"

struct got {
	unsigned n;
	uint32_t tids[64];
	int32_t nframes[64];
	uint64_t first_ids[64];
	uint16_t kinds[64], states[64], sets[64];
	uint32_t weights[64];
};

static void collect(const struct jring_record *rec, void *arg)
{
	struct got *g = arg;

	if (g->n < 64) {
		g->tids[g->n] = rec->tid;
		g->nframes[g->n] = rec->num_frames;
		g->first_ids[g->n] = rec->num_frames > 0 ? rec->frames[0].method_id : 0;
		g->kinds[g->n] = rec->kind;
		g->states[g->n] = rec->state;
		g->weights[g->n] = rec->weight;
		g->sets[g->n] = rec->set;
	}
	g->n++;
}

static struct jpring_slot *slot(struct jring *r, uint64_t idx)
{
	return (struct jpring_slot *)((char *)jring_mapping(r) + JPRING_HEADER_BYTES +
				      (idx % jring_nslots(r)) * JPRING_SLOT_BYTES);
}

/* What a well-behaved agent does for one sample. */
static void agent_write(struct jring *r, uint32_t tid, int32_t n)
{
	struct jpring_header *h = jring_mapping(r);
	uint64_t idx = h->write_idx++;
	struct jpring_slot *s = slot(r, idx);

	s->tid = tid;
	s->time_ns = 1000 + idx;
	s->num_frames = n;
	s->kind = JPRING_KIND_CPU;
	s->state = 0;
	s->weight = 0;
	for (int32_t i = 0; i < n && i < JPRING_MAX_FRAMES; i++) {
		s->frames[i].method_id = 0x1000 + (uint64_t)i;
		s->frames[i].bci = i;
	}
	__atomic_store_n(&s->seq, idx + 1, __ATOMIC_RELEASE);
}

START_TEST(test_valid_records_in_order)
{
	struct jring *r;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(16, &r, &fd), 0);
	agent_write(r, 11, 3);
	agent_write(r, 12, 0);
	agent_write(r, 13, JPRING_GC_ACTIVE);
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 3);
	ck_assert_uint_eq(g.tids[0], 11);
	ck_assert_int_eq(g.nframes[0], 3);
	ck_assert_uint_eq(g.first_ids[0], 0x1000);
	ck_assert_int_eq(g.nframes[2], JPRING_GC_ACTIVE);
	/* The agent learns how far we read. */
	ck_assert_uint_eq(((struct jpring_header *)jring_mapping(r))->read_idx, 3);
	jring_get_stats(r, &st);
	ck_assert_uint_eq(st.records, 3);
	ck_assert_uint_eq(st.corrupt, 0);
	ck_assert(!st.header_corrupt);
	/* Wrapping around the ring many times keeps working. */
	for (int round = 0; round < 10; round++) {
		g.n = 0;
		for (int i = 0; i < 16; i++)
			agent_write(r, 100 + (uint32_t)i, 1);
		ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 16);
		ck_assert_uint_eq(g.tids[15], 115);
	}
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_memfd_is_sealed)
{
	struct jring *r;
	int fd;

	ck_assert_int_eq(jring_new(4, &r, &fd), 0);
	/* An agent that shrinks the ring would make the daemon's reads fault. */
	ck_assert_int_eq(ftruncate(fd, 4096), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(ftruncate(fd, (off_t)jring_bytes(r) * 2), -1);
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_uncommitted_slot_waits_then_is_skipped)
{
	struct jring *r;
	struct jpring_header *h;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(8, &r, &fd), 0);
	h = jring_mapping(r);
	h->write_idx = 1;             /* reserved, never committed */
	agent_write(r, 21, 1);        /* slot 1, committed */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 0);
	/* After stuck_after calls the dead slot is skipped and the next read. */
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 1);
	ck_assert_uint_eq(g.tids[0], 21);
	jring_get_stats(r, &st);
	ck_assert_uint_eq(st.stuck, 1);
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_bad_counts_and_tids_are_rejected)
{
	struct jring *r;
	struct jpring_header *h;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(8, &r, &fd), 0);
	h = jring_mapping(r);
	agent_write(r, 31, 1);
	agent_write(r, 32, 1);
	slot(r, 1)->num_frames = 100000;       /* huge count */
	agent_write(r, 33, 1);
	slot(r, 2)->num_frames = -1000;        /* unknown error code */
	agent_write(r, 0, 1);                  /* tid 0 */
	agent_write(r, 35, 2);
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 2);
	ck_assert_uint_eq(g.tids[0], 31);
	ck_assert_uint_eq(g.tids[1], 35);
	jring_get_stats(r, &st);
	ck_assert_uint_eq(st.corrupt, 3);
	ck_assert_uint_eq(h->read_idx, 5);
	close(fd);
	jring_free(r);
}
END_TEST

/* Wall records (the agent's timer): kind, state and weight are checked
 * together; a CPU record with a state or weight is as bad as a wall record
 * without one. */
START_TEST(test_wall_records_are_checked)
{
	struct jring *r;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(16, &r, &fd), 0);
	agent_write(r, 41, 1);                       /* 0: CPU */
	agent_write(r, 42, 1);                       /* 1: wall, sleeping, weight 3 */
	slot(r, 1)->kind = JPRING_KIND_WALL;
	slot(r, 1)->state = JPRING_STATE_SLEEPING;
	slot(r, 1)->weight = 3;
	agent_write(r, 43, 1);                       /* 2: unknown kind */
	slot(r, 2)->kind = 7;
	agent_write(r, 44, 1);                       /* 3: wall, weight 0 */
	slot(r, 3)->kind = JPRING_KIND_WALL;
	slot(r, 3)->state = JPRING_STATE_SLEEPING;
	agent_write(r, 45, 1);                       /* 4: wall, weight past the bound */
	slot(r, 4)->kind = JPRING_KIND_WALL;
	slot(r, 4)->state = JPRING_STATE_UNINTERRUPTIBLE;
	slot(r, 4)->weight = JPRING_WALL_MAX_WEIGHT + 1;
	agent_write(r, 46, 1);                       /* 5: wall, unknown state */
	slot(r, 5)->kind = JPRING_KIND_WALL;
	slot(r, 5)->state = 9;
	slot(r, 5)->weight = 1;
	agent_write(r, 47, 1);                       /* 6: CPU with a weight */
	slot(r, 6)->weight = 1;
	agent_write(r, 48, 0);                       /* 7: wall, D, at the bound */
	slot(r, 7)->kind = JPRING_KIND_WALL;
	slot(r, 7)->state = JPRING_STATE_UNINTERRUPTIBLE;
	slot(r, 7)->weight = JPRING_WALL_MAX_WEIGHT;
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 3);
	ck_assert_uint_eq(g.tids[0], 41);
	ck_assert_uint_eq(g.kinds[0], JPRING_KIND_CPU);
	ck_assert_uint_eq(g.tids[1], 42);
	ck_assert_uint_eq(g.kinds[1], JPRING_KIND_WALL);
	ck_assert_uint_eq(g.states[1], JPRING_STATE_SLEEPING);
	ck_assert_uint_eq(g.weights[1], 3);
	ck_assert_uint_eq(g.tids[2], 48);
	ck_assert_uint_eq(g.states[2], JPRING_STATE_UNINTERRUPTIBLE);
	ck_assert_uint_eq(g.weights[2], JPRING_WALL_MAX_WEIGHT);
	jring_get_stats(r, &st);
	ck_assert_uint_eq(st.corrupt, 5);
	close(fd);
	jring_free(r);
}
END_TEST

/* Event sets (several recordings of one JVM): the high byte of kind names
 * the set; the kind comes without it, and a set past JPAG_MAX_SETS is
 * corrupt (it would name no recording). */
START_TEST(test_event_sets_in_kind)
{
	struct jring *r;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(16, &r, &fd), 0);
	agent_write(r, 41, 1);                       /* 0: CPU, set 0 */
	agent_write(r, 42, 1);                       /* 1: CPU, set 3 */
	slot(r, 1)->kind = JPRING_KIND_CPU | (JPAG_MAX_SETS - 1) << JPRING_KIND_SET_SHIFT;
	agent_write(r, 43, 1);                       /* 2: wall, set 1 */
	slot(r, 2)->kind = JPRING_KIND_WALL | 1 << JPRING_KIND_SET_SHIFT;
	slot(r, 2)->state = JPRING_STATE_SLEEPING;
	slot(r, 2)->weight = 1;
	agent_write(r, 44, 1);                       /* 3: CPU, set past the bound */
	slot(r, 3)->kind = JPRING_KIND_CPU | JPAG_MAX_SETS << JPRING_KIND_SET_SHIFT;
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 3);
	ck_assert_uint_eq(g.sets[0], 0);
	ck_assert_uint_eq(g.kinds[1], JPRING_KIND_CPU);
	ck_assert_uint_eq(g.sets[1], JPAG_MAX_SETS - 1);
	ck_assert_uint_eq(g.kinds[2], JPRING_KIND_WALL);
	ck_assert_uint_eq(g.sets[2], 1);
	jring_get_stats(r, &st);
	ck_assert_uint_eq(st.corrupt, 1);
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_indices_out_of_range)
{
	struct jring *r;
	struct jpring_header *h;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(8, &r, &fd), 0);
	h = jring_mapping(r);
	/* A write index far ahead: the reader skips what cannot be in the ring
	 * and never reads more than max per call. */
	h->write_idx = 1000000;
	ck_assert_int_le(jring_read(r, 5, 0, collect, &g), 5);
	jring_get_stats(r, &st);
	ck_assert_uint_ge(st.overrun, 1000000 - 8);
	/* Backwards: tampering, reported. */
	h->write_idx = 3;
	jring_read(r, 100, 0, collect, &g);
	jring_get_stats(r, &st);
	ck_assert(st.header_corrupt);
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_header_tampering_is_reported)
{
	struct jring *r;
	struct jpring_header *h;
	struct got g = { 0 };
	struct jring_stats st;
	int fd;

	ck_assert_int_eq(jring_new(8, &r, &fd), 0);
	h = jring_mapping(r);
	h->nslots = 1u << 30;  /* the reader keeps its own geometry */
	agent_write(r, 41, 1);
	ck_assert_int_eq(jring_read(r, 100, 3, collect, &g), 1);
	jring_get_stats(r, &st);
	ck_assert(st.header_corrupt);
	close(fd);
	jring_free(r);
}
END_TEST

START_TEST(test_random_garbage_never_crashes)
{
	struct jring *r;
	struct got g;
	unsigned char *p;
	uint64_t delivered = 0;
	int fd;

	ck_assert_int_eq(jring_new(32, &r, &fd), 0);
	p = jring_mapping(r);
	srand(12345);
	for (int round = 0; round < 200; round++) {
		struct jring_stats st;

		for (uint32_t i = 0; i < jring_bytes(r); i++)
			p[i] = (unsigned char)rand();
		g.n = 0;
		jring_read(r, 64, 1, collect, &g);
		/* Whatever came through passed validation. */
		for (unsigned i = 0; i < g.n && i < 64; i++) {
			ck_assert_uint_ne(g.tids[i], 0);
			ck_assert_int_ge(g.nframes[i], JPRING_MIN_ERROR);
			ck_assert_int_le(g.nframes[i], JPRING_MAX_FRAMES);
		}
		delivered += g.n;
		jring_get_stats(r, &st);
		ck_assert_uint_le(st.records, (uint64_t)(round + 1) * 64);
	}
	(void)delivered;
	close(fd);
	jring_free(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jring");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_valid_records_in_order);
	tcase_add_test(tc, test_memfd_is_sealed);
	tcase_add_test(tc, test_uncommitted_slot_waits_then_is_skipped);
	tcase_add_test(tc, test_bad_counts_and_tids_are_rejected);
	tcase_add_test(tc, test_wall_records_are_checked);
	tcase_add_test(tc, test_event_sets_in_kind);
	tcase_add_test(tc, test_indices_out_of_range);
	tcase_add_test(tc, test_header_tampering_is_reported);
	tcase_add_test(tc, test_random_garbage_never_crashes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
