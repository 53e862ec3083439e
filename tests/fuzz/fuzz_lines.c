/* libFuzzer harness: file:line lookups (daemon/symbols/lines.c). The daemon
 * reads the DWARF of any binary a sampled process maps, and any user can
 * map a file it wrote (a crafted .debug_info, .debug_line, .debug_abbrev),
 * so every byte here is attacker-controlled. Input: an ELF file with debug
 * info (the seeds are real ones; the fuzzer corrupts them).
 *
 * The bytes go through both entry points (a memfd, as the daemon reads
 * /proc/PID/map_files, and memory), then addresses across the first 64 KiB
 * of the address space are looked up; an answer must be what pprof can
 * carry: at most the frames asked for, each with a line above zero. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "lines.h"

/* Debug sections a seed may grow to before it is refused, as the cap
 * refuses big files in the daemon (keeps each run fast). */
#define FUZZ_CAP (16u << 20)

static void lookups(struct lines_file *f)
{
	struct frame_line fl[LINES_MAX_FRAMES];

	for (uint64_t a = 0; a < 0x10000; a += 16) {
		size_t n = lines_file_lookup(f, a, fl, LINES_MAX_FRAMES);

		if (n > LINES_MAX_FRAMES)
			fuzz_fail("%zu frames at 0x%llx", n, (unsigned long long)a);
		for (size_t i = 0; i < n; i++)
			if (!fl[i].line || !memchr(fl[i].file, '\0', sizeof(fl[i].file)) ||
			    !memchr(fl[i].function, '\0', sizeof(fl[i].function)))
				fuzz_fail("frame %zu at 0x%llx: line %u", i, (unsigned long long)a,
					  fl[i].line);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lines_file *f = NULL;
	int fd;

	if (lines_file_open_memory(data, size, FUZZ_CAP, &f) == 0)
		lookups(f);
	lines_file_free(f);
	f = NULL;
	fd = memfd_create("fuzz_lines", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size && lines_file_open(fd, NULL, 0, FUZZ_CAP, &f) == 0)
		lookups(f);
	lines_file_free(f);
	close(fd);
	return 0;
}
