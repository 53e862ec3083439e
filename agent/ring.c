/* The signal handler and the ring it writes.
 *
 * Everything reachable from ring_on_signal is async-signal-safe: atomics on
 * static or shared memory, clock_gettime, syscall(SYS_gettid), the JavaVM's
 * GetEnv lookup and AsyncGetCallTrace (made for this), and for a native pc
 * libgcc's _Unwind_Backtrace (ring_retry_native: it finds unwind tables with
 * glibc's lock-free _dl_find_object, and takes a lock only in a process that
 * registered tables with __register_frame, which HotSpot does not). No
 * malloc, no locks, no stdio, no thread-local storage of this library (a
 * dlopen'd library's TLS may be allocated lazily, which is not signal-safe).
 */
#include "ring.h"

#include "agent.h"
#include "codemap.h"
#include "javawalk.h"
#include "ring_int.h"
#include "jprof_agent.h"
#include "vmstructs.h"
#include "wall.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>


/* ASGCT writes straight into the slot's frames. */
_Static_assert(sizeof(struct asgct_frame) == sizeof(struct jpring_frame), "frame size");
_Static_assert(offsetof(struct asgct_frame, lineno) == offsetof(struct jpring_frame, bci),
	       "frame bci");
_Static_assert(offsetof(struct asgct_frame, method_id) ==
	       offsetof(struct jpring_frame, method_id), "frame method_id");
_Static_assert(sizeof(jmethodID) == sizeof(uint64_t), "jmethodID is 64-bit");

struct ring_state {
	unsigned char *base;   /* the mapping: header page, then slots */
	size_t bytes;
	uint32_t nslots;       /* our validated copy, never reread from the ring */
};

asgct_fn ring_asgct;
static bool ring_recover;        /* retry failed walks; set once before any handler */

/* Each thread's root: the outermost method of its last whole ASGCT walk
 * (not retried, not cut at JPRING_MAX_FRAMES), which a retried walk must
 * reach (ring_root_ok). One slot per tid modulo RING_ROOTS, overwritten by
 * whichever thread of that residue walked last: a slot holds a root only
 * for the tid it names. No TLS (see above): a static table, lock-free. */
#define RING_ROOTS 16384u
struct ring_root {
	uint32_t tid;
	uint32_t seq;            /* odd while written */
	uint64_t method;
};
static struct ring_root ring_roots[RING_ROOTS];
static struct ring_state ring_slot_state;       /* owned by the activating thread */
static struct ring_state *ring_active;          /* what handlers see; NULL = off */
static unsigned long ring_inflight;             /* handlers inside the ring */
static unsigned char ring_armed[RING_MAX_FD];   /* atomic bytes: enum ring_fd_state */
static unsigned char ring_fd_set[RING_MAX_FD];  /* atomic bytes: the fd's event set */
/* Each event set's period, for ring_end_phase (set 0's for javawalk). */
static uint64_t ring_interval_ns[JPAG_MAX_SETS];
static uint16_t ring_wall_tag;                  /* the wall timer's set, as kind bits */
static bool ring_wall_native;                   /* JPAG_FEATURE_WALL_NATIVE: ring_write */
static struct sigaction ring_prev[_NSIG];
static pthread_mutex_t ring_install_lock = PTHREAD_MUTEX_INITIALIZER;
static sigset_t ring_ours;                      /* installed by us (ring_install_lock) */

/* Measurement only (JPROF_AGENT_RETRY_STATS=FILE, appended at the JVM's
 * exit): per failed ASGCT answer (-5, -6) and where the pc was, how the
 * retry ended (enum ring_how), and the first RING_KEEP walks that stayed
 * failed: pc, the code bytes at it, the words at sp, the blob holding pc.
 * Counters and a fixed array claimed by an atomic index: signal-safe. */
/* Where: a stub kind (below JPRING_STUB_KINDS), compiled code, a blob of
 * the code cache the code map does not know, outside the code cache (libjvm,
 * libc: named at exit with dladdr). */
enum {
	RING_AT_COMPILED = JPRING_STUB_KINDS, RING_AT_BLOB, RING_AT_NATIVE, RING_AT_N,
};
#define RING_KEEP 512
struct ring_failed {
	int32_t code;
	uint32_t at;
	uint32_t frame_words;
	uintptr_t pc, blob;
	unsigned char bytes[16];
	uintptr_t sp_words[4];
	uintptr_t frame_ra;
	uint64_t frame_ra_tag;
};
static char ring_stats_path[256];
static unsigned long ring_stats[2][RING_AT_N][RING_HOW_N];
static unsigned long ring_short[2][RING_AT_N][RING_HOW_N];   /* recovered, 2 frames or fewer */
static unsigned long ring_root_changed;   /* whole ASGCT walks not ending at the thread's root */
static struct ring_failed ring_kept[RING_KEEP];
static unsigned ring_nkept;
unsigned long ring_native_failed[RING_NATIVE_N];


static const char *ring_at_name(unsigned at)
{
	static const char *const names[] = {
		"unknown", "stub", "vtable", "itable", "mh_adapter", "call_stub", "i2c_c2i",
		"interpreter", "arraycopy", "resolve", "vtable_itable", "invokeBasic",
		"linkToVirtual", "linkToStatic", "linkToSpecial", "linkToInterface",
		"linkToNative", "compiled", "blob_unannounced", "native",
	};
	_Static_assert(sizeof(names) / sizeof(names[0]) == RING_AT_N, "names");
	return at < RING_AT_N ? names[at] : "?";
}

__attribute__((destructor)) static void ring_write_stats(void)
{
	static const char *const how[RING_HOW_N] = {
		"failed", "spill", "barrier", "sp", "sp+1", "pushed", "not_root", "recover_off",
		"native", "interp_frame", "interp_entry", "stub_call",
	};
	unsigned n = __atomic_load_n(&ring_nkept, __ATOMIC_ACQUIRE);
	/* Appended: every JVM of a bench run writes to the same file. */
	FILE *out = ring_stats_path[0] ? fopen(ring_stats_path, "ae") : NULL;

	if (!out)
		return;
	for (int c = 0; c < 2; c++)
		for (unsigned at = 0; at < RING_AT_N; at++)
			for (int h = 0; h < RING_HOW_N; h++)
				if (ring_stats[c][at][h])
					fprintf(out, "pid %d code %d at %s how %s n %lu short %lu\n",
						(int)getpid(),
						c ? JPRING_NOT_WALKABLE_JAVA : JPRING_UNKNOWN_JAVA,
						ring_at_name(at), how[h], ring_stats[c][at][h],
						ring_short[c][at][h]);
	fprintf(out, "pid %d whole walks with another root %lu\n", (int)getpid(), ring_root_changed);
#if defined(__x86_64__)
	fprintf(out, "pid %d native unwinds failed: no signal frame %lu, no Java frame %lu, "
		"bad CFA %lu, ASGCT %lu; walked over a runtime stub %lu\n", (int)getpid(),
		ring_native_failed[0], ring_native_failed[1], ring_native_failed[2],
		ring_native_failed[3], ring_native_failed[4]);
#endif
	for (unsigned i = 0; i < n && i < RING_KEEP; i++) {
		const struct ring_failed *f = &ring_kept[i];
		Dl_info di = { 0 };
		char name[64] = "";

		/* CodeBlob::_name: the first word of the blob's header that
		 * points at a printable string (diagnostic: a guess is fine). */
		for (unsigned w = 1; f->blob && w < 12 && !name[0]; w++) {
			uintptr_t p = 0;
			char got[sizeof(name)];

			if (!agent_peek(f->blob + w * sizeof(uintptr_t), &p, sizeof(p)) ||
			    !agent_peek(p, got, sizeof(got)))
				continue;
			got[sizeof(got) - 1] = 0;
			size_t len = strlen(got);
			bool ok = len >= 3;

			for (size_t k = 0; k < len; k++)
				ok = ok && got[k] >= 0x20 && got[k] < 0x7f;
			if (ok)
				memcpy(name, got, len + 1);
		}
		if (f->at == RING_AT_NATIVE)
			dladdr((void *)f->pc, &di);
		fprintf(out, "pid %d failed code %d at %s pc %#lx frame %u blob %#lx '%s' sym %s+%#lx bytes",
			(int)getpid(), f->code, ring_at_name(f->at),
			(unsigned long)f->pc, f->frame_words, (unsigned long)f->blob, name,
			di.dli_sname ? di.dli_sname : "-",
			di.dli_saddr ? (unsigned long)(f->pc - (uintptr_t)di.dli_saddr) : 0ul);
		for (unsigned k = 0; k < sizeof(f->bytes); k++)
			fprintf(out, " %02x", f->bytes[k]);
		fprintf(out, " sp");
		for (unsigned k = 0; k < 4; k++)
			fprintf(out, " %#lx", (unsigned long)f->sp_words[k]);
		fprintf(out, " frame_ra %#lx at %s", (unsigned long)f->frame_ra,
			f->frame_ra_tag >= JPRING_STUB_KINDS ? "compiled" : ring_at_name(
				(unsigned)f->frame_ra_tag));
		fprintf(out, "\n");
	}
	fclose(out);
}

int ring_init(void)
{
	const char *rec = getenv("JPROF_AGENT_RECOVER");
	const char *stats = getenv("JPROF_AGENT_RETRY_STATS");

	/* Off only for measuring what the retry gains (bench/java_stacks.sh). */
	ring_recover = !(rec && !strcmp(rec, "0"));
	ring_asgct = (asgct_fn)agent_jvm_sym("AsyncGetCallTrace");
	if (stats)
		snprintf(ring_stats_path, sizeof(ring_stats_path), "%s", stats);
#if defined(__x86_64__)
	if (ring_recover)
		ring_unwind_warm();
#endif
	return ring_asgct ? 0 : -ENOENT;
}

bool ring_signal_usable(int sig)
{
	/* HotSpot owns SEGV, BUS, ILL, FPE, QUIT, USR2, PIPE, XFSZ, TRAP; the
	 * rest of the classic signals mean something to the application. */
	if (sig == SIGPROF || sig == SIGVTALRM || sig == SIGIO)
		return true;
	return sig >= SIGRTMIN && sig <= SIGRTMAX;
}

static void ring_chain(int sig, siginfo_t *si, void *uc)
{
	const struct sigaction *prev = &ring_prev[sig];

	if (prev->sa_flags & SA_SIGINFO) {
		if (prev->sa_sigaction)
			prev->sa_sigaction(sig, si, uc);
	} else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN && prev->sa_handler) {
		prev->sa_handler(sig);
	}
	/* SIG_DFL is not re-raised: a stray pending signal after a recording
	 * must not kill the JVM (the default for SIGPROF and SIGIO is to
	 * terminate). */
}

static bool ring_is_ours(const siginfo_t *si)
{
	if (si->si_code < POLL_IN || si->si_code > POLL_HUP)
		return false;
	if (si->si_fd < 0 || si->si_fd >= RING_MAX_FD)
		return false;
	return __atomic_load_n(&ring_armed[si->si_fd], __ATOMIC_RELAXED);
}


/* What a record is: a perf-event sample (kind JPRING_KIND_CPU, state and
 * weight 0) or the wall timer's (wall.c). */
struct ring_kind {
	uint16_t kind, state;
	uint32_t weight;
};

/* Reserves a slot and stamps it (time, tid, kind); NULL when the ring is
 * full (counted in the header's dropped). *idx: the slot's index, which
 * ring_commit publishes. */
static struct jpring_slot *ring_reserve(const struct ring_state *r, uint32_t tid,
					const struct ring_kind *k, uint64_t *idx)
{
	struct jpring_header *h = (struct jpring_header *)r->base;
	struct jpring_slot *slot;
	struct timespec ts;
	uint64_t w, rd;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	w = __atomic_load_n(&h->write_idx, __ATOMIC_RELAXED);
	for (;;) {
		rd = __atomic_load_n(&h->read_idx, __ATOMIC_ACQUIRE);
		/* Also drops when the reader's index is ahead of ours (garbage). */
		if (w - rd >= r->nslots) {
			__atomic_add_fetch(&h->dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
		if (__atomic_compare_exchange_n(&h->write_idx, &w, w + 1, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
	}
	slot = (struct jpring_slot *)(r->base + JPRING_HEADER_BYTES +
				      (size_t)(w % r->nslots) * JPRING_SLOT_BYTES);
	slot->time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	slot->tid = tid;
	slot->kind = k->kind;
	slot->state = k->state;
	slot->weight = k->weight;
	*idx = w;
	return slot;
}

static void ring_commit(struct jpring_slot *slot, uint64_t idx, int32_t n)
{
	slot->num_frames = n;
	__atomic_store_n(&slot->seq, idx + 1, __ATOMIC_RELEASE);
}

static void ring_root_set(uint32_t tid, uint64_t method)
{
	struct ring_root *r = &ring_roots[tid % RING_ROOTS];
	uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);

	/* Unchanged (the common case): no write. Another writer of this slot
	 * right now (two threads of one residue, or a handler nested in a
	 * handler of the same thread): leave it to that one. */
	if (seq & 1 || (__atomic_load_n(&r->tid, __ATOMIC_RELAXED) == tid &&
			__atomic_load_n(&r->method, __ATOMIC_RELAXED) == method))
		return;
	if (!__atomic_compare_exchange_n(&r->seq, &seq, seq + 1, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&r->tid, tid, __ATOMIC_RELAXED);
	__atomic_store_n(&r->method, method, __ATOMIC_RELAXED);
	__atomic_store_n(&r->seq, seq + 2, __ATOMIC_RELEASE);
}

/* True unless tid's root is known and the walk's outermost frame (f[n-1],
 * n > 0) is another method: then the walk started from a stale return
 * address and ASGCT stopped where the garbage ran out (deep recursion
 * leaves return addresses into the same method all over the stack; on
 * JDK 25 such walks ended at `fib;fib` without reaching main). A walk as
 * deep as the ring keeps cannot show its root and is taken. */
static bool ring_root_ok(uint32_t tid, const struct jpring_frame *f, int32_t n)
{
	const struct ring_root *r = &ring_roots[tid % RING_ROOTS];
	uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
	uint64_t method;
	uint32_t owner;

	if (n >= JPRING_MAX_FRAMES || seq & 1)
		return true;
	owner = __atomic_load_n(&r->tid, __ATOMIC_RELAXED);
	method = __atomic_load_n(&r->method, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != seq || owner != tid || !method)
		return true;
	return f[n - 1].method_id == method;
}

/* JPROF_AGENT_RETRY_STATS: counts a failed walk by where its pc was and how
 * the retry ended; keeps the first RING_KEEP that stayed failed. */
static void ring_note(const void *ucv, int32_t code, uint64_t tag, unsigned how, int32_t n)
{
#if defined(__x86_64__)
	const ucontext_t *uc = ucv;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
	uintptr_t blob = 0;
	unsigned at;

	/* A resumed walk's leaf may be an interpreted method. */
	if (!ring_recover || how >= RING_HOW_RESUME)
		tag = codemap_leaf(pc);
	if (tag >= JPRING_STUB_KINDS)
		at = RING_AT_COMPILED;
	else if (tag)
		at = (unsigned)tag;
	else if ((blob = vmstructs_blob_at(pc)))
		at = RING_AT_BLOB;
	else
		at = RING_AT_NATIVE;
	__atomic_add_fetch(&ring_stats[code == JPRING_NOT_WALKABLE_JAVA][at][how], 1,
			   __ATOMIC_RELAXED);
	if (n > 0 && n <= 2)
		__atomic_add_fetch(&ring_short[code == JPRING_NOT_WALKABLE_JAVA][at][how], 1,
				   __ATOMIC_RELAXED);
	if (n > 0)
		return;
	unsigned i = __atomic_fetch_add(&ring_nkept, 1, __ATOMIC_ACQ_REL);

	if (i >= RING_KEEP)
		return;
	struct ring_failed *f = &ring_kept[i];

	f->code = code;
	f->at = at;
	f->pc = pc;
	f->blob = blob ? blob : vmstructs_blob_at(pc);
	f->frame_words = tag >= JPRING_STUB_KINDS ? codemap_frame_words(tag, pc) : 0;
	if (f->frame_words &&
	    ring_read_stack(sp + f->frame_words * sizeof(uintptr_t) - sizeof(uintptr_t), &f->frame_ra))
		f->frame_ra_tag = codemap_leaf(f->frame_ra);
	agent_peek(pc, f->bytes, sizeof(f->bytes));
	for (unsigned k = 0; k < 4; k++)
		ring_read_stack(sp + k * sizeof(uintptr_t), &f->sp_words[k]);
#else
	(void)ucv; (void)code; (void)tag; (void)how; (void)n;
#endif
}

/* ASGCT said "not Java": the Java frames walked from the anchor
 * (javawalk_not_java); for a wall record of a blocked thread without any
 * (one waiting in the VM: Signal Dispatcher, Attach Listener), its native
 * frames, as a wall record has no BPF stack to join. */
static int32_t ring_not_java(JNIEnv *env, struct jpring_slot *slot, int32_t n, void *uc,
			     const struct ring_kind *k)
{
	n = javawalk_not_java(env, slot->frames, JPRING_MAX_FRAMES, n,
			      __atomic_load_n(&ring_interval_ns[0], __ATOMIC_RELAXED));
	if ((n == JPRING_UNKNOWN_NOT_JAVA || n == JPRING_NOT_WALKABLE_NOT_JAVA) && uc &&
	    (k->kind & JPRING_KIND_MASK) == JPRING_KIND_WALL &&
	    __atomic_load_n(&ring_wall_native, __ATOMIC_RELAXED))
		n = ring_native_frames(uc, slot->frames, JPRING_MAX_FRAMES, n);
	return n;
}

static const struct jpring_slot *ring_write(const struct ring_state *r, void *uc,
					    const struct ring_kind *k)
{
	struct jpring_slot *slot;
	uint64_t w;
	JNIEnv *env;
	int32_t n, m;

	/* Not the armed fd's owner tid: a signal still pending from a closed
	 * fd whose number was re-armed for another thread would lie. */
	slot = ring_reserve(r, (uint32_t)syscall(SYS_gettid), k, &w);
	if (!slot)
		return NULL;
	if (!ring_asgct) {
		n = JPRING_UNKNOWN_STATE;
	} else if ((*agent_vm)->GetEnv(agent_vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK) {
		/* GC, compiler-support and foreign threads: no JavaThread. */
		n = JPRING_UNKNOWN_NOT_JAVA;
	} else {
		struct asgct_trace trace = {
			.env = env,
			.frames = (struct asgct_frame *)(void *)slot->frames,
		};
		struct ring_from from = { 0 };
		uint64_t leaf_tag = 0;
		unsigned how = RING_HOW_OFF;

		ring_asgct(&trace, JPRING_MAX_FRAMES, uc);
		n = trace.num_frames;
		if ((n == JPRING_UNKNOWN_JAVA || n == JPRING_NOT_WALKABLE_JAVA) && uc) {
			int32_t failed = n;

			if (ring_recover) {
				how = RING_HOW_FAILED;
				n = ring_retry(env, &trace, uc, n, &from, &leaf_tag, &how);
				if (n > 0 && !ring_root_ok(slot->tid, slot->frames, n)) {
					how = RING_HOW_NOT_ROOT;
					n = failed;
					from.pc = 0;
				}
			}
			if (ring_stats_path[0])
				ring_note(uc, failed, leaf_tag, how, n);
		} else if (n > 0 && n < JPRING_MAX_FRAMES) {
			if (ring_stats_path[0] && !ring_root_ok(slot->tid, slot->frames, n))
				__atomic_add_fetch(&ring_root_changed, 1, __ATOMIC_RELAXED);
			ring_root_set(slot->tid, slot->frames[n - 1].method_id);
		}
		if (n > JPRING_MAX_FRAMES)
			n = JPRING_MAX_FRAMES;
		/* ASGCT leaves the padding alone. */
		for (int32_t i = 0; i < n; i++)
			slot->frames[i].type = JPRING_TYPE_UNKNOWN;
#if defined(__x86_64__)
		/* A walk from below native frames has no leaf stepped over:
		 * the native frames are the BPF sample's. */
		if (from.pc && how != RING_HOW_NATIVE)
			ring_leaf(trace.frames, leaf_tag);
#endif
		/* In a GC pause: walk from the thread's frame anchor (javawalk.c);
		 * its frames come typed. */
		if (n == JPRING_GC_ACTIVE)
			n = javawalk_gc_active(env, slot->frames, JPRING_MAX_FRAMES, n);
		else if (n == JPRING_UNKNOWN_NOT_JAVA || n == JPRING_NOT_WALKABLE_NOT_JAVA)
			n = ring_not_java(env, slot, n, uc, k);
		else if ((n == JPRING_UNKNOWN_JAVA || n == JPRING_NOT_WALKABLE_JAVA) && uc &&
			 ring_recover)
			n = javawalk_in_java(env, uc, slot->frames, JPRING_MAX_FRAMES, n,
					     __atomic_load_n(&ring_interval_ns[0], __ATOMIC_RELAXED));
		else if (n > 0 && uc && (m = ring_type_walk(env, slot->frames, n, JPRING_MAX_FRAMES,
							 uc, &from, how)) > n) {
			/* Completed below where ASGCT stopped: the thread's
			 * root is the completed walk's. */
			n = m;
			if (how == RING_HOW_OFF)
				ring_root_set(slot->tid, slot->frames[n - 1].method_id);
		}
	}
	ring_commit(slot, w, n);
	return slot;
}

int ring_write_copy(uint32_t tid, uint16_t state, uint32_t weight, int32_t n,
		    const struct jpring_frame *frames)
{
	struct ring_kind k = { .kind = JPRING_KIND_WALL, .state = state, .weight = weight };
	struct jpring_slot *slot = NULL;
	struct ring_state *r;
	uint64_t w;

	k.kind |= __atomic_load_n(&ring_wall_tag, __ATOMIC_RELAXED);
	if (n < 0 || n > JPRING_MAX_FRAMES)
		return -EINVAL;
	/* As a handler: ring_quiesce waits for us. */
	__atomic_add_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	r = __atomic_load_n(&ring_active, __ATOMIC_SEQ_CST);
	if (r)
		slot = ring_reserve(r, tid, &k, &w);
	if (slot) {
		memcpy(slot->frames, frames, (size_t)n * sizeof(*frames));
		ring_commit(slot, w, n);
	}
	__atomic_sub_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	return slot ? 0 : -ENOBUFS;
}

/* The first signal of an fd armed with a random first period (ring_phase_fd)
 * sets the recording's interval from now on: the kernel restarts a cpu-clock
 * event's period at PERF_EVENT_IOC_PERIOD, so the random phase is kept. One
 * syscall, async-signal-safe; the byte's compare-and-swap makes it once. */
static void ring_end_phase(int fd)
{
	unsigned char v = __atomic_load_n(&ring_armed[fd], __ATOMIC_ACQUIRE);
	unsigned set = __atomic_load_n(&ring_fd_set[fd], __ATOMIC_RELAXED) % JPAG_MAX_SETS;

	if (v == RING_FD_PHASE &&
	    __atomic_compare_exchange_n(&ring_armed[fd], &v, RING_FD_RESETTING, false,
					__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
		/* RESETTING keeps the fd open until the ioctl is done
		 * (ring_mark_fd waits): never an ioctl on a reused number. */
		ioctl(fd, PERF_EVENT_IOC_PERIOD, &ring_interval_ns[set]);
		__atomic_store_n(&ring_armed[fd], RING_FD_ON, __ATOMIC_RELEASE);
	} else if (v == RING_FD_PHASING)
		/* Before the random period was set: ring_phase_fd sees the
		 * change and restarts the interval itself. */
		__atomic_compare_exchange_n(&ring_armed[fd], &v, RING_FD_ON, false,
					    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static void ring_on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct ring_kind k = { .kind = JPRING_KIND_CPU };
	const struct jpring_slot *slot;
	struct ring_state *r;
	uint32_t cookie = 0;
	bool ours;

	if (!si) {
		ring_chain(sig, si, uc);
		goto out;
	}
	/* seq_cst pairs with ring_quiesce: either it sees us in flight, or we
	 * see its NULL (and wall_stop's wall_on 0, before the wall table is
	 * reused). */
	__atomic_add_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	ours = ring_is_ours(si);
	if (ours) {
		ring_end_phase(si->si_fd);
		/* Whose event it was: the daemon gives the record to that
		 * recording only. */
		k.kind |= (uint16_t)(__atomic_load_n(&ring_fd_set[si->si_fd], __ATOMIC_RELAXED)
				     << JPRING_KIND_SET_SHIFT);
	}
	if (!ours && wall_take(si->si_code, si->si_pid, (uint32_t)syscall(SYS_gettid), &k.state,
			       &k.weight, &cookie)) {
		k.kind = JPRING_KIND_WALL | __atomic_load_n(&ring_wall_tag, __ATOMIC_RELAXED);
		ours = true;
	}
	r = ours ? __atomic_load_n(&ring_active, __ATOMIC_SEQ_CST) : NULL;
	slot = r ? ring_write(r, uc, &k) : NULL;
	if (slot && cookie)
		wall_keep(cookie, slot->num_frames, slot->frames);
	__atomic_sub_fetch(&ring_inflight, 1, __ATOMIC_SEQ_CST);
	if (!ours)
		ring_chain(sig, si, uc);
out:
	errno = saved_errno;
}

/* The handler installed for sig right now: ours, none (default or
 * ignored: nobody relies on receiving it), or someone else's. */
static enum ring_disposition ring_disposition_of(const struct sigaction *sa)
{
	if (sa->sa_flags & SA_SIGINFO)
		return sa->sa_sigaction == ring_on_signal ? RING_SIG_OURS :
		       sa->sa_sigaction ? RING_SIG_FOREIGN : RING_SIG_FREE;
	if (sa->sa_handler == SIG_DFL || sa->sa_handler == SIG_IGN)
		return RING_SIG_FREE;
	return RING_SIG_FOREIGN;
}

enum ring_disposition ring_signal_disposition(int sig)
{
	struct sigaction sa;

	if (sig <= 0 || sig >= _NSIG || sigaction(sig, NULL, &sa) < 0)
		return RING_SIG_FOREIGN;
	return ring_disposition_of(&sa);
}

int ring_choose_signal(int proposed)
{
	struct sigaction sa;

	if (ring_signal_usable(proposed) && ring_signal_disposition(proposed) != RING_SIG_FOREIGN)
		return proposed;
	/* Another profiler's signal (async-profiler, JFR's CPU-time sampler on
	 * JDK 25, a test agent): take a real-time signal nobody handles, from
	 * the top, where libraries that pick one from SIGRTMIN up are least
	 * likely to look. Default disposition only: an ignored real-time
	 * signal was ignored on purpose. A real-time signal also never merges
	 * with a pending one of another source, as two SIGPROFs do. */
	for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
		if (sig == proposed || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (!(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL)
			return sig;
		if (ring_disposition_of(&sa) == RING_SIG_OURS)
			return sig;
	}
	return -EBUSY;
}

int ring_install_signal(int sig)
{
	struct sigaction sa, cur;
	int ret = 0;

	if (sig <= 0 || sig >= _NSIG || !ring_signal_usable(sig))
		return -EINVAL;
	pthread_mutex_lock(&ring_install_lock);
	if (sigaction(sig, NULL, &cur) < 0) {
		ret = -errno;
		goto out;
	}
	switch (ring_disposition_of(&cur)) {
	case RING_SIG_OURS:
		goto out;
	case RING_SIG_FOREIGN:
		/* Never over another profiler's handler: its signals would be
		 * ours to chain, and a SIGPROF of ours pending at the moment
		 * one of its own comes makes the kernel drop its one
		 * (async-profiler re-enables its event only in its handler, so
		 * that thread's samples stop for good). */
		ret = -EBUSY;
		goto out;
	case RING_SIG_FREE:
		break;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = ring_on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	/* Each handler blocks all of ours: another event set's signal inside
	 * a walk would walk the handler (not walkable); blocked, it comes
	 * right after, on the same interrupted context. */
	sigaddset(&ring_ours, sig);
	sa.sa_mask = ring_ours;
	/* The previous action (default or ignored) is set before the swap, so
	 * the handler never chains to an unset one. */
	ring_prev[sig] = cur;
	if (sigaction(sig, &sa, NULL) < 0) {
		ret = -errno;
		sigdelset(&ring_ours, sig);
		goto out;
	}
	for (int o = 1; o < _NSIG; o++)
		if (o != sig && sigismember(&ring_ours, o) == 1 && sigaction(o, NULL, &cur) == 0 &&
		    ring_disposition_of(&cur) == RING_SIG_OURS) {
			cur.sa_mask = ring_ours;
			sigaction(o, &cur, NULL);
		}
out:
	pthread_mutex_unlock(&ring_install_lock);
	return ret;
}

int ring_activate(int memfd, uint64_t ring_bytes, uint32_t nslots)
{
	const struct jpring_header *h;
	struct stat st;
	void *map;

	if (ring_slot_state.base)
		return -EBUSY;
	if (nslots == 0 ||
	    ring_bytes != JPRING_HEADER_BYTES + (uint64_t)nslots * JPRING_SLOT_BYTES)
		return -EINVAL;
	if (fstat(memfd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < ring_bytes)
		return -EINVAL;
	/* Populated now: no page fault in the handler on a slot's first use. */
	map = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
	if (map == MAP_FAILED)
		return -errno;
	h = map;
	if (h->magic != JPRING_MAGIC || h->version != JPRING_VERSION ||
	    h->slot_bytes != JPRING_SLOT_BYTES || h->nslots != nslots) {
		munmap(map, ring_bytes);
		return -EPROTO;
	}
	ring_slot_state = (struct ring_state){ .base = map, .bytes = ring_bytes, .nslots = nslots };
	__atomic_store_n(&ring_active, &ring_slot_state, __ATOMIC_SEQ_CST);
	return 0;
}

void ring_quiesce(void)
{
	const struct timespec tick = { .tv_nsec = 200000 };

	__atomic_store_n(&ring_active, NULL, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&ring_inflight, __ATOMIC_SEQ_CST))
		nanosleep(&tick, NULL);
}

void ring_retire(void)
{
	ring_quiesce();
	if (ring_slot_state.base)
		munmap(ring_slot_state.base, ring_slot_state.bytes);
	ring_slot_state = (struct ring_state){ 0 };
}

void ring_mark_fd(int fd, enum ring_fd_state st)
{
	const struct timespec tick = { .tv_nsec = 100000 };
	unsigned char v;

	if (fd < 0 || fd >= RING_MAX_FD)
		return;
	/* A handler between its compare-and-swap and its ioctl on this fd
	 * (one syscall) is waited for, 100 ms at most (a stopped thread). */
	for (int i = 0; i < 1000; i++) {
		v = __atomic_load_n(&ring_armed[fd], __ATOMIC_SEQ_CST);
		if (v != RING_FD_RESETTING &&
		    __atomic_compare_exchange_n(&ring_armed[fd], &v, (unsigned char)st, false,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return;
		if (v == RING_FD_RESETTING)
			nanosleep(&tick, NULL);
	}
	__atomic_store_n(&ring_armed[fd], (unsigned char)st, __ATOMIC_SEQ_CST);
}

void ring_set_interval(uint32_t set, uint64_t interval_ns)
{
	__atomic_store_n(&ring_interval_ns[set % JPAG_MAX_SETS], interval_ns, __ATOMIC_SEQ_CST);
}

void ring_set_fd_set(int fd, uint32_t set)
{
	if (fd >= 0 && fd < RING_MAX_FD)
		__atomic_store_n(&ring_fd_set[fd], (unsigned char)set, __ATOMIC_SEQ_CST);
}

void ring_set_wall_set(uint32_t set)
{
	__atomic_store_n(&ring_wall_tag, (uint16_t)(set << JPRING_KIND_SET_SHIFT), __ATOMIC_SEQ_CST);
}

void ring_set_wall_native(bool on)
{
	__atomic_store_n(&ring_wall_native, on, __ATOMIC_SEQ_CST);
}

int ring_phase_fd(int fd, uint64_t first_ns)
{
	unsigned char want = RING_FD_PHASING;
	unsigned set = __atomic_load_n(&ring_fd_set[fd < 0 || fd >= RING_MAX_FD ? 0 : fd],
				       __ATOMIC_SEQ_CST) % JPAG_MAX_SETS;
	uint64_t interval = __atomic_load_n(&ring_interval_ns[set], __ATOMIC_SEQ_CST);
	int ret = 0;

	if (fd < 0 || fd >= RING_MAX_FD)
		return -EBADF;
	if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &first_ns) < 0) {
		/* The event keeps the interval from its opening: the fixed
		 * phase of before, nothing overcounted. */
		ret = -errno;
		ring_mark_fd(fd, RING_FD_ON);
		goto out;
	}
	if (__atomic_compare_exchange_n(&ring_armed[fd], &want, RING_FD_PHASE, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		goto out;
	/* A signal came while the first period was being set (an overflow of
	 * the interval the event was opened with, or the first period already
	 * ended): the handler did not restore the interval, so do it here. */
	if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &interval) < 0)
		ret = -errno;
out:
	return ret;
}
