/* The JVMs the BPF walk knows: see hs_proc.h. */
#include "hs_proc.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hs.h"
#include "log.h"
#include <linux/types.h>
#include "bpf/sampler.h"

_Static_assert(sizeof(struct jp_hs_heap) == 32, "jp_hs_heap layout");
_Static_assert(sizeof(struct jp_hs_proc) == 8 + 4 * 32 + 16 + 24, "jp_hs_proc layout");
_Static_assert(SYMBOLS_JAVA_METHOD == JP_IP_JAVA_METHOD, "one tag for interpreted frames");

/* x86-64's interpreter frame (HotSpot's frame_x86.hpp), for the JVMs that
 * do not export these (JDK 17 and 25 export sender_sp only). */
#define HS_X86_IFRAME_METHOD (-3)
#define HS_X86_IFRAME_SENDER_SP (-1)

/* BPF compares start times in the 10 ms ticks /proc gives. */
#define HS_TICK_NS 10000000ull

struct hs_jvm {
	pid_t pid;                 /* 0: free slot */
	uint64_t start_ns;
	struct hs *h;
	struct jp_hs_proc val;     /* as written into the map */
	uint64_t refresh_ms;
};

struct hs_cand {
	pid_t pid;                 /* 0: free slot */
	uint64_t start_ns;
	uint64_t next_ms;          /* not tried before this */
	unsigned tries;
	bool pending;
	bool retry;                /* given up, but a later miss may look again */
};

/* A name read in this drain interval, by process and address. */
struct hs_memo {
	pid_t pid;                 /* 0: empty */
	uint32_t gen;              /* hs_procs.gen when written; another: empty */
	uint64_t key;              /* the address, bit 63 set for a Method* */
	int ret;                   /* 0: named; -ENOENT */
	enum frame_kind kind;
	char name[HS_MEMO_NAME];
};

struct hs_procs {
	int map_fd;
	struct hs_memo *memo;      /* HS_MEMO_SLOTS */
	uint32_t gen;              /* bumped at every tick: the memo empties */
	char *proc_root;
	struct hs_jvm jvms[JP_HS_MAX_PROCS];
	struct hs_cand cands[HS_PROCS_CANDIDATES];
	size_t cursor, next_cursor;  /* where the next tick's tries begin */
	struct hs_procs_stats st;
};

static uint64_t hs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The loop thread's CPU time: what trying processes costs it. */
static uint64_t hs_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool hs_same_start(uint64_t a, uint64_t b)
{
	return a / HS_TICK_NS == b / HS_TICK_NS;
}

int hs_procs_new(int map_fd, const char *proc_root, struct hs_procs **out)
{
	struct hs_procs *hp = calloc(1, sizeof(*hp));
	int ret = -ENOMEM;

	*out = NULL;
	if (!hp)
		goto out;
	hp->map_fd = map_fd;
	hp->gen = 1;
	hp->memo = calloc(HS_MEMO_SLOTS, sizeof(*hp->memo));
	if (!hp->memo)
		goto out;
	if (proc_root && !(hp->proc_root = strdup(proc_root)))
		goto out;
	*out = hp;
	hp = NULL;
	ret = 0;
out:
	if (hp)
		free(hp->memo);
	free(hp);
	return ret;
}

static void hs_jvm_drop(struct hs_procs *hp, struct hs_jvm *j, const char *why)
{
	uint32_t key = (uint32_t)j->pid;

	log_info("hotspot: pid %d: JVM no longer walked: %s", (int)j->pid, why);

	bpf_map_delete_elem(hp->map_fd, &key);
	hs_free(j->h);
	memset(j, 0, sizeof(*j));
	hp->st.jvms--;
	hp->st.dropped++;
}

void hs_procs_free(struct hs_procs *hp)
{
	if (!hp)
		return;
	for (size_t i = 0; i < JP_HS_MAX_PROCS; i++)
		if (hp->jvms[i].pid)
			hs_jvm_drop(hp, &hp->jvms[i], "shutting down");
	free(hp->proc_root);
	free(hp->memo);
	free(hp);
}

static struct hs_jvm *hs_jvm_find(struct hs_procs *hp, pid_t pid)
{
	for (size_t i = 0; i < JP_HS_MAX_PROCS; i++)
		if (hp->jvms[i].pid == pid)
			return &hp->jvms[i];
	return NULL;
}

static struct hs_cand *hs_cand_find(struct hs_procs *hp, pid_t pid)
{
	for (size_t i = 0; i < HS_PROCS_CANDIDATES; i++)
		if (hp->cands[i].pid == pid)
			return &hp->cands[i];
	return NULL;
}

void hs_procs_consider(struct hs_procs *hp, pid_t pid, uint64_t start_ns)
{
	struct hs_jvm *j;
	struct hs_cand *c;

	if (!hp || pid <= 0)
		return;
	j = hs_jvm_find(hp, pid);
	if (j && hs_same_start(j->start_ns, start_ns))
		return;
	if (j)
		hs_jvm_drop(hp, j, "its pid is another process's");
	c = hs_cand_find(hp, pid);
	if (c && hs_same_start(c->start_ns, start_ns)) {
		/* Given up on: a process whose samples still miss their
		 * mappings (a JVM's code heap does) is looked at again, now
		 * and then. */
		if (!c->pending && c->retry && hs_now_ms() >= c->next_ms) {
			c->tries = 0;
			c->pending = true;
		}
		return;
	}
	/* A slot no try waits on (the one given up on longest ago); with all
	 * of them waiting the process is left out, and asks again if its
	 * samples keep missing (a JVM's do). */
	if (!c) {
		for (size_t i = 0; i < HS_PROCS_CANDIDATES; i++) {
			struct hs_cand *o = &hp->cands[i];

			if (!o->pid) {
				c = o;
				break;
			}
			if (!o->pending && (!c || o->next_ms < c->next_ms))
				c = o;
		}
	}
	if (!c) {
		hp->st.busy++;
		return;
	}
	*c = (struct hs_cand){ .pid = pid, .start_ns = start_ns, .pending = true };
}

void hs_procs_exec(struct hs_procs *hp, pid_t pid)
{
	struct hs_jvm *j;
	struct hs_cand *c;

	if (!hp || pid <= 0)
		return;
	j = hs_jvm_find(hp, pid);
	/* Its start time stays; its code does not: a new image may be a JVM
	 * (a launcher script exec'ing java), or no longer one. */
	if (j) {
		uint64_t start = j->start_ns;

		hs_jvm_drop(hp, j, "exec");
		hs_procs_consider(hp, pid, start);
	}
	c = hs_cand_find(hp, pid);
	if (c) {
		c->tries = 0;
		c->next_ms = 0;
		c->pending = true;
	}
}

static int hs_find_interp(const struct hs_blob *b, void *arg)
{
	struct jp_hs_proc *v = arg;

	if (b->kind != HS_BLOB_INTERPRETER)
		return 0;
	v->interp_lo = b->start;
	v->interp_hi = b->start + b->size;
	return 1;
}

/* The code heaps as the walk wants them: how many, or -errno. */
static int hs_fill_heaps(struct hs *h, struct jp_hs_proc *v)
{
	struct hs_heap_info hi[JP_HS_MAX_HEAPS];
	int n = hs_code_heaps(h, hi, JP_HS_MAX_HEAPS);

	if (n < 0)
		return n;
	if (n == 0 || n > JP_HS_MAX_HEAPS)
		return -EBADMSG;  /* not started yet, or not a heap layout we walk */
	for (int i = 0; i < n; i++)
		v->heaps[i] = (struct jp_hs_heap){ .low = hi[i].low, .high = hi[i].high,
						   .segmap = hi[i].segmap, .log2 = hi[i].log2 };
	v->nheaps = (uint32_t)n;
	return n;
}

/* Reads what the walk needs from a JVM just opened. */
static int hs_jvm_fill(struct hs *h, uint64_t start_ns, struct jp_hs_proc *v)
{
	const struct hs_offsets *o = hs_offsets(h);
	int ret;

	memset(v, 0, sizeof(*v));
	v->start_ns = start_ns - start_ns % HS_TICK_NS;
	if (o->hblock_size <= 0 || o->blob_frame_size < 0 || o->blob_frame_size > 4096) {
		ret = -ENOENT;
		goto out;
	}
	v->hblock_size = o->hblock_size;
	v->blob_frame_size = o->blob_frame_size;
	v->iframe_method = o->iframe_method != INT32_MIN ? o->iframe_method : HS_X86_IFRAME_METHOD;
	v->iframe_sender_sp = o->iframe_sender_sp != INT32_MIN ? o->iframe_sender_sp
							       : HS_X86_IFRAME_SENDER_SP;
	if (v->iframe_method < -16 || v->iframe_method > -1 || v->iframe_sender_sp < -16 ||
	    v->iframe_sender_sp > -1) {
		ret = -EBADMSG;
		goto out;
	}
	ret = hs_fill_heaps(h, v);
	if (ret < 0)
		goto out;
	/* The interpreter: its frames are the ones that keep rbp. It is one
	 * of the first blobs, so the walk stops early. */
	ret = hs_blobs_foreach(h, hs_find_interp, v);
	if (ret < 0)
		goto out;
	ret = v->interp_hi ? 0 : -EAGAIN;
out:
	return ret;
}

/* An opened JVM into a free slot and the BPF map: 0 (h is the slot's
 * now), -ENOSPC (no free slot), or why it does not hold up. */
static int hs_jvm_add(struct hs_procs *hp, const struct hs_cand *c, struct hs *h, uint64_t now)
{
	struct hs_jvm *j = hs_jvm_find(hp, 0);
	uint32_t key = (uint32_t)c->pid;
	int ret = -ENOSPC;

	if (!j)
		goto out;
	ret = hs_jvm_fill(h, c->start_ns, &j->val);
	if (ret < 0)
		goto out;
	if (bpf_map_update_elem(hp->map_fd, &key, &j->val, BPF_ANY) < 0) {
		ret = -errno;
		log_warn("hotspot: pid %d: cannot add its JVM to the walk: %s", (int)c->pid,
			 strerror(-ret));
		goto out;
	}
	j->pid = c->pid;
	j->start_ns = c->start_ns;
	j->h = h;
	j->refresh_ms = now;
	hp->st.jvms++;
	hp->st.opened++;
out:
	if (ret < 0 && j)
		memset(&j->val, 0, sizeof(j->val));
	return ret;
}

/* One try of a candidate: true when it was an expensive one (a libjvm.so
 * was there to be read), false when a look at its maps ruled it out. */
static bool hs_try_open(struct hs_procs *hp, struct hs_cand *c, uint64_t now)
{
	struct hs *h = NULL;
	char missing[256];
	int ret;

	c->tries++;
	c->next_ms = now + 1000;
	if (c->tries >= HS_PROCS_TRIES)
		c->pending = false;
	c->retry = false;
	ret = hs_open(c->pid, hp->proc_root, &h);
	if (ret == -ENOENT || ret == -ESRCH) {
		/* No libjvm.so (most processes): one more look a little later
		 * (a launcher maps it soon after its exec), then none unless
		 * its samples keep asking, HS_PROCS_RETRY_MS on. */
		hp->st.not_jvm++;
		c->next_ms = now + (c->tries == 1 ? 500 : HS_PROCS_RETRY_MS);
		c->pending = ret != -ESRCH && c->tries < 2;
		c->retry = ret != -ESRCH;
		hs_free(h);
		return false;
	}
	if (ret == 0)
		ret = hs_jvm_add(hp, c, h, now);
	if (ret == 0) {
		c->pending = false;
		hs_offsets_missing(h, missing, sizeof(missing));
		log_info("hotspot: pid %d: JVM %s: Java frames walked in BPF%s%s", (int)c->pid,
			 hs_vm_release(h), missing[0] ? "; missing: " : "", missing);
		return true;
	}
	if (ret == -ENOSPC) {
		hp->st.full++;
		c->pending = false;
	} else {
		hp->st.open_failed++;
		/* A JVM still starting fails a try or two; the last one is said. */
		if (!c->pending)
			log_info("hotspot: pid %d: a libjvm.so whose JVM is not walked (%u tries): %s",
				 (int)c->pid, c->tries, strerror(-ret));
	}
	hs_free(h);
	return true;
}

/* The heaps commit more as code is compiled: their bounds read again. A
 * process gone (or no longer readable as a JVM) is dropped. */
static void hs_jvm_refresh(struct hs_procs *hp, struct hs_jvm *j, uint64_t now)
{
	struct jp_hs_proc v = j->val;
	uint32_t key = (uint32_t)j->pid;

	j->refresh_ms = now;
	if (hs_fill_heaps(j->h, &v) < 0) {
		hs_jvm_drop(hp, j, "exited, or its code heaps no longer read");
		return;
	}
	if (!memcmp(&v, &j->val, sizeof(v)))
		return;
	if (bpf_map_update_elem(hp->map_fd, &key, &v, BPF_ANY) == 0)
		j->val = v;
}

void hs_procs_tick(struct hs_procs *hp)
{
	uint64_t now, t0;
	unsigned opens = 0, looks = 0;

	if (!hp)
		return;
	now = hs_now_ms();
	/* Names are read again in the next interval: what holds an address
	 * may change at any time after this drain's samples were named. */
	hp->gen++;
	/* Round robin from where the last tick stopped: a busy host has more
	 * candidates (every young process) than one tick tries, and the same
	 * slots must not win every time. */
	for (size_t k = 0; k < HS_PROCS_CANDIDATES && opens < HS_PROCS_OPENS &&
			   looks < HS_PROCS_LOOKS; k++) {
		struct hs_cand *c = &hp->cands[(hp->cursor + k) % HS_PROCS_CANDIDATES];

		if (!c->pid || !c->pending || now < c->next_ms)
			continue;
		looks++;
		t0 = hs_cpu_ns();
		if (hs_try_open(hp, c, now))
			opens++;
		hp->st.try_cpu_ns += hs_cpu_ns() - t0;
		hp->next_cursor = (hp->cursor + k + 1) % HS_PROCS_CANDIDATES;
	}
	hp->cursor = hp->next_cursor;
	for (size_t i = 0; i < JP_HS_MAX_PROCS; i++)
		if (hp->jvms[i].pid && now - hp->jvms[i].refresh_ms >= HS_PROCS_REFRESH_MS)
			hs_jvm_refresh(hp, &hp->jvms[i], now);
}

static void hs_set(struct sym_result *out, enum frame_kind kind, const char *name)
{
	out->kind = kind;
	out->has_loc = false;
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->module[0] = '\0';
}

static int hs_name_frame(struct hs_procs *hp, struct hs_jvm *j, uint64_t addr, bool method,
			 struct sym_result *out)
{
	enum frame_kind kind = FRAME_JAVA_INTERP;
	uint64_t m = addr;
	struct hs_blob b;
	char name[SYM_NAME_MAX];
	int ret = 0;

	if (!method) {
		/* The blob at pc now, not one remembered: code freed and
		 * reused since the sample is named by what holds the pc at
		 * the drain, and only if that is a whole blob whose method
		 * names. */
		ret = hs_blob_at(j->h, addr, &b);
		if (ret < 0)
			goto out;
		if (b.kind != HS_BLOB_NMETHOD && b.kind != HS_BLOB_NATIVE) {
			/* Stubs, adapters, the interpreter's own code: what
			 * HotSpot calls them. */
			snprintf(name, sizeof(name), "[%s]", b.name);
			hs_set(out, FRAME_JIT_UNKNOWN, name);
			goto out;
		}
		m = b.method;
		kind = b.kind == HS_BLOB_NMETHOD && b.comp_level >= 1 && b.comp_level <= 3 ?
			       FRAME_JAVA_C1 : FRAME_JAVA_JIT;
	}
	ret = hs_method_name(j->h, m, name, sizeof(name));
	if (ret == 0)
		hs_set(out, kind, name);
out:
	if (ret < 0) {
		hp->st.unnamed++;
		return -ENOENT;
	}
	hp->st.named++;
	return 0;
}

int hs_procs_symbolize(void *arg, pid_t pid, uint64_t start_ns, uint64_t addr, bool method,
		       struct sym_result *out)
{
	struct hs_procs *hp = arg;
	struct hs_jvm *j = hp ? hs_jvm_find(hp, pid) : NULL;
	struct hs_memo *m;
	uint64_t t0, key, mh;
	int ret;

	if (!j || pid <= 0 || !hs_same_start(j->start_ns, start_ns))
		return -ENOENT;
	key = addr | (method ? 1ull << 63 : 0);
	mh = (key ^ (key >> 17) ^ ((uint64_t)(uint32_t)pid * 0x9e3779b97f4a7c15ull)) *
	     0xff51afd7ed558ccdull;
	m = &hp->memo[(mh >> 32) % HS_MEMO_SLOTS];
	if (m->pid == pid && m->gen == hp->gen && m->key == key) {
		hp->st.memo_hits++;
		if (m->ret == 0)
			hs_set(out, m->kind, m->name);
		return m->ret;
	}
	t0 = hs_cpu_ns();
	ret = hs_name_frame(hp, j, addr, method, out);
	hp->st.name_cpu_ns += hs_cpu_ns() - t0;
	if (ret == 0 && strlen(out->name) >= sizeof(m->name))
		return ret;  /* too long to keep: read again next time */
	*m = (struct hs_memo){ .pid = pid, .gen = hp->gen, .key = key, .ret = ret,
			       .kind = ret == 0 ? out->kind : FRAME_JIT_UNKNOWN };
	if (ret == 0)
		memcpy(m->name, out->name, strlen(out->name) + 1);
	return ret;
}

void hs_procs_get_stats(const struct hs_procs *hp, struct hs_procs_stats *out)
{
	if (hp)
		*out = hp->st;
	else
		memset(out, 0, sizeof(*out));
}
