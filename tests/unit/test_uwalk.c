/* Unit tests of the CFI walk over a copied stack (daemon/unwind/uwalk.c),
 * the daemon's twin of bpf/unwind.bpf.c's walk for young samples: this
 * test's own stack, copied as BPF copies one, walked with tables built from
 * its own executable and libraries, must reach _start; a copy cut short
 * stops the walk and says so. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfi.h"
#include "check_main.h"
#include "procmaps.h"
#include "uwalk.h"

extern void _start(void);

#define COPY_MAX JP_USTACK_COPY_BYTES

/* A process entry and its rows, as unwtab writes them for BPF. */
struct fixture {
	struct jp_unwind_proc proc;
	struct jp_unwind_row *rows;
	size_t nrows;
};

static const struct jp_unwind_row *fixture_row(void *arg, uint32_t idx)
{
	struct fixture *f = arg;

	return idx < f->nrows ? &f->rows[idx] : NULL;
}

/* Every executable file mapping of this process with its table. */
static void fixture_load(struct fixture *f)
{
	struct procmaps *m = NULL;

	memset(f, 0, sizeof(*f));
	ck_assert_int_eq(procmaps_read("/proc/self/maps", &m), 0);
	for (size_t i = 0; i < m->count && f->proc.n < JP_UNWIND_MAX_MAPS; i++) {
		const struct procmaps_entry *e = &m->entries[i];
		struct jp_unwind_map *mm = &f->proc.maps[f->proc.n];
		struct cfi_table *t = NULL;
		enum cfi_error why;
		uint64_t vaddr;
		int fd;

		if (!(e->perms & PROCMAPS_EXEC) || e->path[0] != '/')
			continue;
		mm->start = e->start;
		mm->end = e->end;
		f->proc.n++;
		fd = open(e->path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (cfi_build_fd(fd, -1, &(struct cfi_limits){ .max_rows = 1u << 22 }, &t, &why) == 0 &&
		    cfi_offset_to_vaddr(t, e->offset, &vaddr) == 0) {
			f->rows = realloc(f->rows, (f->nrows + t->n) * sizeof(*f->rows));
			ck_assert_ptr_nonnull(f->rows);
			memcpy(f->rows + f->nrows, t->rows, t->n * sizeof(*t->rows));
			mm->bias = e->start - vaddr;
			mm->row_first = (uint32_t)f->nrows;
			mm->row_count = (uint32_t)t->n;
			f->nrows += t->n;
		}
		cfi_table_free(t);
		close(fd);
	}
	procmaps_free(m);
}

/* The top of this thread's stack ([stack] of the maps). */
static uint64_t stack_top(void)
{
	struct procmaps *m = NULL;
	uint64_t top = 0;

	ck_assert_int_eq(procmaps_read("/proc/self/maps", &m), 0);
	for (size_t i = 0; i < m->count; i++)
		if (strcmp(m->entries[i].path, "[stack]") == 0)
			top = m->entries[i].end;
	procmaps_free(m);
	return top;
}

struct capture {
	struct uwalk_regs regs;
	uint8_t stack[COPY_MAX];
	size_t len;
};

/* This frame's ip, sp and bp, and the stack above sp, as a BPF program
 * would copy them at a sample here: byte by byte, uninstrumented (under
 * AddressSanitizer the stack holds poisoned red zones; BPF reads them all
 * the same). */
__attribute__((noinline, no_sanitize_address)) static void capture_here(struct capture *c,
									  uint64_t top)
{
	const volatile uint8_t *from;

	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
			 : "=r"(c->regs.ip), "=r"(c->regs.sp), "=r"(c->regs.bp));
	c->len = top - c->regs.sp < COPY_MAX ? top - c->regs.sp : COPY_MAX;
	from = (const volatile uint8_t *)(uintptr_t)c->regs.sp;
	for (size_t i = 0; i < c->len; i++)
		c->stack[i] = from[i];
}

__attribute__((noinline)) static void caller_b(struct capture *c, uint64_t top)
{
	capture_here(c, top);
	__asm__ volatile("" ::: "memory");  /* not a tail call */
}

__attribute__((noinline)) static void caller_a(struct capture *c, uint64_t top)
{
	caller_b(c, top);
	__asm__ volatile("" ::: "memory");
}

static bool in_function(uint64_t ip, void *fn)
{
	return ip >= (uint64_t)(uintptr_t)fn && ip < (uint64_t)(uintptr_t)fn + 256;
}

START_TEST(test_own_stack_to_root)
{
	static struct fixture f;
	static struct capture c;
	uint64_t ips[JP_MAX_STACK_DEPTH];
	struct uwalk_result res;
	bool a = false, b = false;

	fixture_load(&f);
	caller_a(&c, stack_top());
	uwalk_walk(&f.proc, fixture_row, &f, &c.regs, c.stack, c.len, ips, JP_MAX_STACK_DEPTH, &res);
	for (uint32_t i = 0; i < res.n; i++) {
		a |= in_function(ips[i], (void *)caller_a);
		b |= in_function(ips[i], (void *)caller_b);
	}
	ck_assert_msg(res.root, "walk of %u frames did not reach _start (short copy: %d)", res.n,
		      res.short_copy);
	ck_assert(a && b);
	ck_assert(in_function(ips[0], (void *)capture_here));
	ck_assert(!res.short_copy);
	free(f.rows);
}
END_TEST

START_TEST(test_short_copy_stops)
{
	static struct fixture f;
	static struct capture c;
	uint64_t ips[JP_MAX_STACK_DEPTH];
	struct uwalk_result res;

	fixture_load(&f);
	caller_a(&c, stack_top());
	/* Only the leaf's own frame: its return address is beyond the copy. */
	uwalk_walk(&f.proc, fixture_row, &f, &c.regs, c.stack, 8, ips, JP_MAX_STACK_DEPTH, &res);
	ck_assert_uint_le(res.n, 2);
	ck_assert(!res.root);
	ck_assert(res.short_copy);
	free(f.rows);
}
END_TEST

START_TEST(test_no_maps_one_frame)
{
	static struct capture c;
	struct jp_unwind_proc p = { 0 };
	uint64_t ips[4];
	struct uwalk_result res;

	caller_a(&c, stack_top());
	uwalk_walk(&p, fixture_row, NULL, &c.regs, c.stack, c.len, ips, 4, &res);
	/* The leaf as is, then nothing to go on: as BPF's walk. */
	ck_assert_uint_eq(res.n, 1);
	ck_assert_uint_eq(ips[0], c.regs.ip);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("uwalk");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_own_stack_to_root);
	tcase_add_test(tc, test_short_copy_stops);
	tcase_add_test(tc, test_no_maps_one_frame);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
