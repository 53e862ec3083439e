/* libFuzzer harness: the agent's shared ring read by the daemon (jring.c)
 * and fed into the Java join (jvmjoin.c), as a recording of a JVM does
 * (daemon/record/session_jvm.c). The profiled process can write anything into
 * the ring at any time, and names its own methods.
 *
 * The input is a small program: a config byte, then operations, each an
 * opcode byte and its arguments (missing bytes read as zero):
 *   RAW    write raw bytes anywhere in the mapping (header or slots)
 *   SLOT   write one record as the agent does (or leave it uncommitted)
 *   READ   jring_read() into jvm_join_add_agent()
 *   BPF    a BPF record, as the pipeline adds them
 *   MAP    map an agent-namespace tid to a host tid
 *   RUN    jvm_join_run() at the virtual clock
 *   NAMES  answer the ids the join asks for, with names from the input
 *   METHOD a name for any id (8 bytes), asked for or not
 *   TICK   advance the virtual clock
 * Every sample the join emits is checked and its Java frames are named as
 * the stack builder names them; at the end everything is flushed and every
 * counted BPF record must have been emitted exactly once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "jring.h"
#include "jvmjoin.h"

#define RING_SLOTS 4
#define MAX_KIPS 7
#define MAX_UIPS 31

enum { OP_RAW, OP_SLOT, OP_READ, OP_BPF, OP_MAP, OP_RUN, OP_NAMES, OP_METHOD, OP_TICK, OP_COUNT };

struct fuzz_ring {
	struct jring *ring;
	struct jvm_join *join;
	uint8_t *map;
	size_t bytes;
	uint64_t clock;         /* virtual CLOCK_MONOTONIC, ns */
	uint64_t emitted;
	volatile unsigned sink;
};

/* A few tids and method ids, so that records meet in the same queues. */
static uint32_t tid_of(uint8_t sel)
{
	return sel == 0xff ? 0 : 100 + sel % 6;
}

static uint64_t method_of(uint8_t sel)
{
	return sel % 9 == 8 ? 0 : 0x7f0000001000ull + (uint64_t)(sel % 9) * 0x40;
}

static void on_sample(const struct jvm_sample *s, void *arg)
{
	struct fuzz_ring *fr = arg;
	struct jvm_join *j = fr->join;
	char name[256];
	unsigned sum = 0;

	fuzz_check(s->njava <= JPRING_MAX_FRAMES, "%u Java frames", s->njava);
	fuzz_check(s->nk <= MAX_KIPS && s->nu <= MAX_UIPS, "stacks grew: %u %u", s->nk, s->nu);
	fuzz_check(!s->marker || s->marker[0] == '[', "marker %s", s->marker);
	for (unsigned i = 0; i < s->nk; i++)
		sum += (unsigned)s->kips[i];
	for (unsigned i = 0; i < s->nu; i++)
		sum += (unsigned)s->uips[i];
	/* What builder_build_jvm() does with each Java frame. */
	for (unsigned i = 0; i < s->njava; i++) {
		size_t n = jvm_join_frame_name(j, &s->java[i], name, sizeof(name));

		fuzz_check(n < sizeof(name) && n == strlen(name), "frame name length %zu", n);
		sum += (unsigned char)name[0];
	}
	fr->sink += sum;
	fr->emitted++;
}

static void on_record(const struct jring_record *rec, void *arg)
{
	struct fuzz_ring *fr = arg;

	fuzz_check(rec->tid != 0, "record of tid 0 delivered");
	fuzz_check(rec->num_frames >= JPRING_MIN_ERROR && rec->num_frames <= JPRING_MAX_FRAMES,
		   "record with %d frames delivered", rec->num_frames);
	jvm_join_add_agent(fr->join, rec->tid, rec->time_ns, fr->clock, rec->num_frames, rec->frames);
}

/* The agent's writer (agent/ring.c): reserve, fill, publish seq. */
static void op_slot(struct fuzz_ring *fr, struct fuzz_in *in)
{
	struct jpring_header *h = (struct jpring_header *)fr->map;
	uint32_t tid = tid_of(fuzz_u8(in));
	int16_t dt_us = (int16_t)fuzz_u16(in);
	int8_t num = (int8_t)fuzz_u8(in);
	uint8_t seed = fuzz_u8(in), flags = fuzz_u8(in);
	uint64_t idx = h->write_idx++;
	struct jpring_slot *s = (struct jpring_slot *)(fr->map + JPRING_HEADER_BYTES +
						       (idx % RING_SLOTS) * JPRING_SLOT_BYTES);

	s->tid = tid;
	s->time_ns = fr->clock + (uint64_t)((int64_t)dt_us * 1000);
	s->num_frames = num;
	for (int i = 0; i < num; i++) {
		s->frames[i].method_id = method_of((uint8_t)(seed + i * 7));
		s->frames[i].bci = i * 3 - 1;
	}
	if (!(flags & 1))  /* bit 0: a handler interrupted before it published */
		__atomic_store_n(&s->seq, (flags & 2) ? idx : idx + 1, __ATOMIC_RELEASE);
}

static void op_bpf(struct fuzz_ring *fr, struct fuzz_in *in)
{
	uint64_t kips[MAX_KIPS], uips[MAX_UIPS];
	uint32_t tid = tid_of(fuzz_u8(in));
	int16_t dt_us = (int16_t)fuzz_u16(in);
	uint8_t sizes = fuzz_u8(in), flags = fuzz_u8(in);
	unsigned nk = sizes & 7, nu = sizes >> 3;

	for (unsigned i = 0; i < nk; i++)
		kips[i] = 0xffffffff81000000ull + i * 0x10;
	for (unsigned i = 0; i < nu; i++)
		uips[i] = 0x7f0000001000ull + i * 0x40;  /* some inside "JIT code" */
	jvm_join_add_bpf(fr->join, tid, fr->clock + (uint64_t)((int64_t)dt_us * 1000), kips, nk,
			 uips, nu, flags & 1, flags & 2, flags & 4, flags & 8);
}

/* A method record as agentlink hands it on: text not NUL-terminated, in
 * the input itself so that ASan sees any read past it; class and name are
 * never empty. */
static void method_from_input(struct fuzz_ring *fr, struct fuzz_in *in, uint64_t id)
{
	struct jpag_line lines[8];
	uint8_t flags = fuzz_u8(in);
	size_t cl = fuzz_u8(in) % 64, nl = fuzz_u8(in) % 32, sl = fuzz_u8(in) % 64;
	unsigned nlines = fuzz_u8(in) % 8;
	const char *cls, *name, *sig;

	cls = (const char *)fuzz_bytes(in, cl, &cl);
	name = (const char *)fuzz_bytes(in, nl, &nl);
	sig = (const char *)fuzz_bytes(in, sl, &sl);
	nlines = (unsigned)(fuzz_take(in, lines, nlines * sizeof(lines[0])) / sizeof(lines[0]));
	if (!(flags & 1) && (cl == 0 || nl == 0))
		return;  /* agentlink drops such a record */
	jvm_join_method(fr->join, id, cls, cl, name, nl, sig, sl, lines, nlines, flags & 1);
}

static void op_names(struct fuzz_ring *fr, struct fuzz_in *in)
{
	uint64_t ids[32];
	unsigned n = jvm_join_wanted(fr->join, ids, fuzz_u8(in) % 32 + 1);

	for (unsigned i = 0; i < n; i++)
		method_from_input(fr, in, ids[i]);
}

static void op_raw(struct fuzz_ring *fr, struct fuzz_in *in)
{
	size_t off = fuzz_u16(in) % fr->bytes;
	size_t n = fuzz_u8(in);

	if (n > fr->bytes - off)
		n = fr->bytes - off;
	fuzz_take(in, fr->map + off, n);
}

static void op_run(struct fuzz_ring *fr, struct fuzz_in *in)
{
	uint64_t back = (uint64_t)fuzz_u16(in) * 1000;
	bool final = fuzz_u8(in) & 1;

	jvm_join_run(fr->join, fr->clock > back ? fr->clock - back : 0, fr->clock, final, on_sample,
		     fr);
}

static void op_read(struct fuzz_ring *fr, struct fuzz_in *in)
{
	unsigned max = fuzz_u8(in), stuck = fuzz_u8(in) % 4;

	jring_read(fr->ring, max ? max : RING_SLOTS, stuck, on_record, fr);
}

static void op_map(struct fuzz_ring *fr, struct fuzz_in *in)
{
	uint32_t ns = tid_of(fuzz_u8(in));

	jvm_join_map_tid(fr->join, ns, tid_of(fuzz_u8(in)));
}

static void op_method(struct fuzz_ring *fr, struct fuzz_in *in)
{
	method_from_input(fr, in, fuzz_uint(in, 8));
}

static void op_tick(struct fuzz_ring *fr, struct fuzz_in *in)
{
	fr->clock += (uint64_t)fuzz_u16(in) * 10000;
}

static void (*const ops[OP_COUNT])(struct fuzz_ring *fr, struct fuzz_in *in) = {
	[OP_RAW] = op_raw, [OP_SLOT] = op_slot, [OP_READ] = op_read, [OP_BPF] = op_bpf,
	[OP_MAP] = op_map, [OP_RUN] = op_run, [OP_NAMES] = op_names, [OP_METHOD] = op_method,
	[OP_TICK] = op_tick,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pending[4] = { 0, 4, 64, 4096 };
	struct fuzz_in in = { data, size };
	struct fuzz_ring fr = { .clock = 1000000000000ull };
	struct jvm_join_opts o = { 0 };
	struct jvm_join_stats st;
	uint8_t cfg = fuzz_u8(&in);
	int memfd;

	o.lines = cfg & 1;
	o.signatures = cfg & 2;
	o.max_pending = pending[(cfg >> 2) & 3];
	o.interval_ns = 1000000ull << ((cfg >> 4) & 7);
	if (jring_new(RING_SLOTS, &fr.ring, &memfd) < 0)
		abort();
	close(memfd);  /* an agent would have it; the mapping stays */
	fr.map = jring_mapping(fr.ring);
	fr.bytes = jring_bytes(fr.ring);
	fr.join = jvm_join_new(&o);
	if (!fr.join)
		abort();
	while (fuzz_more(&in))
		ops[fuzz_u8(&in) % OP_COUNT](&fr, &in);
	/* A recording's end: take everything, then what waits for names. */
	jring_read(fr.ring, RING_SLOTS, 0, on_record, &fr);
	jvm_join_run(fr.join, UINT64_MAX, fr.clock, true, on_sample, &fr);
	jvm_join_flush(fr.join, on_sample, &fr);
	jvm_join_get_stats(fr.join, &st);
	fuzz_check(jvm_join_held(fr.join) == 0, "samples still held after the flush");
	fuzz_check(fr.emitted == st.joined + st.bpf_unmatched,
		   "%llu samples emitted for %llu joined + %llu unmatched BPF records",
		   (unsigned long long)fr.emitted, (unsigned long long)st.joined,
		   (unsigned long long)st.bpf_unmatched);
	jvm_join_free(fr.join);
	jring_free(fr.ring);
	return 0;
}
