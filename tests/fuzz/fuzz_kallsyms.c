/* libFuzzer harness: kallsyms parsing (daemon/symbols/kallsyms.c). The
 * file comes from the kernel, but modules (and BPF programs, which any
 * user with CAP_BPF may name) add lines, and the daemon must survive a
 * table it does not expect. Input: a kallsyms file. Every address the
 * input mentions is looked up around, and a found symbol's name and
 * module must be strings of the table. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kallsyms.h"

static void lookup(const struct kallsyms *k, uint64_t addr)
{
	const char *name, *module;
	uint64_t at;

	if (kallsyms_lookup(k, addr, &name, &module, &at) == 0) {
		fuzz_check(at <= addr, "symbol at %llx above %llx", (unsigned long long)at,
			   (unsigned long long)addr);
		fuzz_check(strlen(name) < (1u << 20) && strlen(module) < (1u << 20), "names");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	struct kallsyms *k;

	if (kallsyms_parse(p, size, &k) < 0)
		return 0;  /* -ENOMEM only */
	if (!kallsyms_available(k)) {
		const char *name, *module;

		fuzz_check(kallsyms_lookup(k, 0x1000, &name, &module, NULL) == -ENODATA,
			   "a table without addresses answers lookups");
	}
	/* The leading hex number of each line, and its neighbours. */
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		uint64_t addr = 0;
		int digits = 0;

		for (; p < eol && digits < 16; p++, digits++) {
			char c = *p;
			unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') :
				     c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;

			if (d == 16)
				break;
			addr = (addr << 4) | d;
		}
		lookup(k, addr);
		lookup(k, addr + 1);
		lookup(k, addr - 1);
		lookup(k, addr + KALLSYMS_TAIL_SPAN);
		p = eol + 1;
	}
	kallsyms_free(k);
	return 0;
}
