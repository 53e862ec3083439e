/* The CFI walk over a copied stack. See uwalk.h; every rule mirrors
 * unwind_step in bpf/unwind.bpf.c, whose comments say why. */
#include "uwalk.h"

#include <string.h>

#define UWALK_USER_TOP 0x00007ffffffff000ull
#define UWALK_MAX_FRAME (8ull << 20)

struct uwalk_stack {
	uint64_t base;         /* the sp the copy starts at */
	const uint8_t *bytes;
	size_t len;
	bool short_copy;       /* a read went past the copy's end */
};

/* The 8 bytes at addr of the copy; false outside it. */
static bool uwalk_read(struct uwalk_stack *st, uint64_t addr, uint64_t *out)
{
	if (addr < st->base || addr - st->base > st->len || st->len - (addr - st->base) < 8) {
		st->short_copy |= addr >= st->base;
		return false;
	}
	memcpy(out, st->bytes + (addr - st->base), 8);
	return true;
}

static int uwalk_find_map(const struct jp_unwind_proc *p, uint64_t pc)
{
	uint32_t lo = 0, hi = p->n < JP_UNWIND_MAX_MAPS ? p->n : JP_UNWIND_MAX_MAPS;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (p->maps[mid].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || pc >= p->maps[lo - 1].end)
		return -1;
	return (int)(lo - 1);
}

static const struct jp_unwind_row *uwalk_find_row(uwalk_row_fn row, void *arg, uint32_t first,
						  uint32_t count, uint32_t off)
{
	uint32_t lo = 0, hi = count;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		const struct jp_unwind_row *r = row(arg, first + mid);

		if (!r)
			return NULL;
		if (r->pc <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? row(arg, first + lo - 1) : NULL;
}

void uwalk_walk(const struct jp_unwind_proc *p, uwalk_row_fn row, void *arg,
		const struct uwalk_regs *regs, const uint8_t *stack, size_t len, uint64_t *ips,
		uint32_t max, struct uwalk_result *out)
{
	struct uwalk_stack st = { regs->sp, stack, len, false };
	uint64_t pc = regs->ip, sp = regs->sp, bp = regs->bp;
	bool interrupted = false;
	int last_map = -1;

	memset(out, 0, sizeof(*out));
	if (max > JP_MAX_STACK_DEPTH)
		max = JP_MAX_STACK_DEPTH;
	while (out->n < max) {
		const struct jp_unwind_map *m = NULL;
		const struct jp_unwind_row *r = NULL;
		uint64_t look, cfa, ra, nbp, pair[2];
		uint32_t n = out->n;
		int mi;

		if (pc < 4096 || pc >= UWALK_USER_TOP)
			break;
		look = n && !interrupted ? pc - 1 : pc;
		mi = last_map;
		if (mi < 0 || look < p->maps[mi].start || look >= p->maps[mi].end)
			mi = uwalk_find_map(p, look);
		last_map = mi;
		if (mi >= 0)
			m = &p->maps[mi];
		if (!m && n)
			break;
		ips[n] = pc | (interrupted && n ? JP_IP_INTERRUPTED : 0);
		interrupted = false;
		out->n = n + 1;
		if (!m)
			break;
		if (m->row_count && look - m->bias < 0xffffffffull)
			r = uwalk_find_row(row, arg, m->row_first, m->row_count,
					   (uint32_t)(look - m->bias));
		if (r && r->kind == JP_UW_END) {
			out->root = true;
			break;
		}
		if (r && r->kind == JP_UW_SIGNAL) {
			uint64_t ctx_sp, ctx_ip;

			if (!uwalk_read(&st, sp + (int64_t)r->cfa_off, &ctx_sp) ||
			    !uwalk_read(&st, sp + (int64_t)r->cfa_off + 8, &ctx_ip) ||
			    !uwalk_read(&st, sp + (int64_t)r->rbp_off, &nbp))
				break;
			if (ctx_sp < 4096 || ctx_sp >= UWALK_USER_TOP || ctx_ip < 4096 ||
			    ctx_ip >= UWALK_USER_TOP)
				break;
			ips[n] |= JP_IP_SIGNAL;
			sp = ctx_sp;
			pc = ctx_ip;
			bp = nbp;
			interrupted = true;
			continue;
		}
		if (r && (r->kind == JP_UW_CFA_RSP || r->kind == JP_UW_CFA_RBP)) {
			cfa = (r->kind == JP_UW_CFA_RSP ? sp : bp) + (int64_t)r->cfa_off;
			if (cfa <= sp || cfa - sp > UWALK_MAX_FRAME || !uwalk_read(&st, cfa - 8, &ra))
				break;
			if (r->rbp_off) {
				if (!uwalk_read(&st, cfa + (int64_t)r->rbp_off, &nbp))
					break;
				bp = nbp;
			}
			sp = cfa;
			pc = ra;
			if (!ra)
				break;
			continue;
		}
		/* No CFI for this code: its frame pointer, if it is one. */
		if (bp < sp || bp - sp > UWALK_MAX_FRAME || (bp & 7) ||
		    !uwalk_read(&st, bp, &pair[0]) || !uwalk_read(&st, bp + 8, &pair[1]))
			break;
		sp = bp + 16;
		bp = pair[0];
		pc = pair[1];
		out->fp_frames++;
		if (!pc)
			break;
	}
	out->short_copy = st.short_copy;
}
