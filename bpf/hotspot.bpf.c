/* The HotSpot unwinder (issue 30): where the user-stack walk (unwind.bpf.c)
 * meets a pc in a JVM's code heap, Java frames are stepped here, with what
 * the daemon read out of that JVM (daemon/hotspot/hs_proc.c writes
 * hs_procs): the heaps, their segment maps, a few offsets. Everything read
 * here is the JVM's memory (any user's, possibly forged): every loop has a
 * fixed bound, every step must move the stack pointer up, and a read that
 * fails ends the walk. See docs/jvm.md, "Java frames without an agent". */
#include "jprof.bpf.h"

#define HS_SEG_FREE 0xff
/* Hops back through a segment map: a hop is at most 254 segments (of 64 or
 * 128 bytes: JDK 17 and 25), and hops shrink towards a block's start, so a
 * blob of 100 KiB takes a few; the interpreter, the one large blob, is found
 * by its range instead. A blob further back is not found (hs_lost). */
#define HS_MAX_HOPS 24
#define HS_MAX_FRAME (1ULL << 20)
#define HS_USER_TOP 0x00007ffffffff000ULL

/* The start of the block holding pc in heap h, or 0. */
static __always_inline __u64 hs_block_at(const struct jp_hs_heap *h, __u64 pc)
{
	__u64 idx = (pc - h->low) >> (h->log2 & 31);
	__u8 b;

	for (int i = 0; i < HS_MAX_HOPS; i++) {
		if (bpf_probe_read_user(&b, 1, (void *)(h->segmap + idx)))
			return 0;
		if (b == HS_SEG_FREE)
			return 0;
		if (b == 0)
			return h->low + (idx << (h->log2 & 31));
		if (b > idx)
			return 0;
		idx -= b;
	}
	return 0;
}

static __always_inline void hs_record(struct jp_uw_state *u, __u32 n, __u64 v)
{
	u->st.ips[n] = v;
	u->n = n + 1;
	u->st.hash = (u->st.hash ^ v) * 0x100000001b3ULL;
	u->hs_frames++;
}

/* An interpreter frame keeps rbp: its Method* and the caller's sp are
 * slots below it, the caller's rbp and pc the two words at it. */
static __always_inline int hs_interp_step(struct jp_uw_state *u, const struct jp_hs_proc *hp,
					  __u32 n)
{
	__u64 bp = u->bp, method = 0, sender_sp = 0, pair[2];

	if (bp < u->sp || bp - u->sp > HS_MAX_FRAME || (bp & 7))
		goto lost;
	if (bpf_probe_read_user(&method, 8, (void *)(bp + 8 * (__s64)hp->iframe_method)) ||
	    bpf_probe_read_user(&sender_sp, 8, (void *)(bp + 8 * (__s64)hp->iframe_sender_sp)) ||
	    bpf_probe_read_user(pair, sizeof(pair), (void *)bp))
		goto lost;
	if (method < 4096 || method >= HS_USER_TOP || (method & 7))
		goto lost;
	hs_record(u, n, method | JP_IP_JAVA_METHOD);
	/* The caller's sp as it was at the call (before this frame's
	 * arguments and locals were pushed): what a compiled caller's frame
	 * size counts from. */
	if (sender_sp < bp + 16 || sender_sp - bp > HS_MAX_FRAME)
		return 1;
	u->sp = sender_sp;
	u->bp = pair[0];
	u->pc = pair[1];
	u->by_cfi = 0;
	return u->pc ? 0 : 1;
lost:
	/* The leaf may be the interpreter before its frame is built: the pc
	 * at least. */
	hs_record(u, n, u->pc);
	u->hs_lost = 1;
	return 1;
}

__noinline int hs_java_step(struct jp_uw_state *u, const struct jp_hs_proc *hp)
{
	const struct jp_hs_heap *h = NULL;
	__u64 pc, block, csp, pair[2];
	__s32 fs = 0;
	__u32 n;

	if (!u || !hp)
		return 1;
	n = u->n;
	if (n >= JP_MAX_STACK_DEPTH)
		return 1;
	pc = u->pc;
	if (pc >= hp->interp_lo && pc < hp->interp_hi)
		return hs_interp_step(u, hp, n);
	for (int i = 0; i < JP_HS_MAX_HEAPS; i++)
		if (i < hp->nheaps && pc >= hp->heaps[i].low && pc < hp->heaps[i].high)
			h = &hp->heaps[i];
	/* A return address points after its call: the blob holds pc - 1. */
	block = h ? hs_block_at(h, n && !u->interrupted ? pc - 1 : pc) : 0;
	if (block && bpf_probe_read_user(&fs, 4, (void *)(block + hp->hblock_size +
							   hp->blob_frame_size)))
		block = 0;
	hs_record(u, n, pc);
	u->interrupted = 0;
	if (!block) {
		u->hs_lost = 1;
		return 1;
	}
	if (fs <= 0) {
		/* Frameless in HotSpot's books (the call stub and the other
		 * StubRoutines): these set up rbp, which leads on. */
		__u64 bp = u->bp;

		if (bp < u->sp || bp - u->sp > HS_MAX_FRAME || (bp & 7) ||
		    bpf_probe_read_user(pair, sizeof(pair), (void *)bp))
			return 1;
		u->sp = bp + 16;
		u->bp = pair[0];
		u->pc = pair[1];
		u->by_cfi = 0;
		return u->pc ? 0 : 1;
	}
	/* A compiled frame (nmethod, adapter, runtime stub): rbp is no frame
	 * pointer here; the frame's size in words (return address included)
	 * gives the caller's sp, the return address and saved rbp sit just
	 * below it. */
	if ((__u64)fs * 8 > HS_MAX_FRAME)
		return 1;
	csp = u->sp + (__u64)fs * 8;
	if (bpf_probe_read_user(pair, sizeof(pair), (void *)(csp - 16)))
		return 1;
	/* Compiled code is called from compiled code only (other methods,
	 * adapters, the call stub): a return address outside the code heap
	 * means the leaf was caught with its frame not (or no longer) there,
	 * in its prologue or epilogue: the return address is then at sp
	 * (after pop rbp) or above the saved rbp (after add rsp). */
	if (!n && !hs_in_code(hp, pair[1]) &&
	    !bpf_probe_read_user(pair, sizeof(pair), (void *)u->sp)) {
		if (hs_in_code(hp, pair[0])) {
			u->pc = pair[0];
			u->sp += 8;
			return 0;
		}
		if (!hs_in_code(hp, pair[1]))
			return 1;
		csp = u->sp + 16;
	}
	u->sp = csp;
	u->bp = pair[0];
	u->pc = pair[1];
	u->by_cfi = 0;
	return u->pc ? 0 : 1;
}
