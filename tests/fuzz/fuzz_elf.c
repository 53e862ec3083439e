/* libFuzzer harness: ELF symbol loading (daemon/symbols/elfsym.c). The
 * daemon opens every binary a profiled process maps, and an unprivileged
 * user can map any file it wrote. Input: an ELF file.
 *
 * The bytes go through both entry points the daemon uses: a file
 * (elfsym_open_fd on a memfd, with a debug directory in which the same
 * bytes are the ".gnu_debuglink" file "fuzz.debug", so separate debug
 * files are parsed too) and memory (elfsym_open_memory, as for the vdso).
 * Every symbol the input's own tables list is then looked up, which runs
 * the demangler and the sanitizer on names the input chose. A third load
 * has the limits the symbolizer's loop sets (bytes, entries), and the full
 * table is adopted into it as the worker's result is. elf.options bounds
 * each input's time. */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elfsym.h"
#include "fuzz.h"
#include "log.h"

#define FUZZ_ELF_PATH "/lib/libfuzz.so"
#define FUZZ_MAX_LOOKUPS 512

static int elf_fd = -1;
static char debug_root[64];
static char debug_file[128];

static void remove_debug_root(void)
{
	char dir[sizeof(debug_root) + 8];

	unlink(debug_file);
	snprintf(dir, sizeof(dir), "%s/lib", debug_root);
	rmdir(dir);
	rmdir(debug_root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char dir[sizeof(debug_root) + 8];

	log_set_level(LOG_LVL_ERR);
	elf_version(EV_CURRENT);
	elf_fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
	/* tmpfs: on ext4, rewriting a truncated file flushes it on close,
	 * which took the harness from thousands of runs a second to 300. */
	snprintf(debug_root, sizeof(debug_root), "/dev/shm/jprof-fuzz-elf.XXXXXX");
	if (!mkdtemp(debug_root)) {
		snprintf(debug_root, sizeof(debug_root), "/tmp/jprof-fuzz-elf.XXXXXX");
		if (!mkdtemp(debug_root))
			abort();
	}
	if (elf_fd < 0)
		abort();
	snprintf(dir, sizeof(dir), "%s/lib", debug_root);
	snprintf(debug_file, sizeof(debug_file), "%s/fuzz.debug", dir);
	if (mkdir(dir, 0700) < 0)
		abort();
	atexit(remove_debug_root);
	return 0;
}

static void write_all(int fd, const uint8_t *data, size_t size)
{
	if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
}

static void check_name(const char *name, size_t size)
{
	size_t n = strnlen(name, size);

	fuzz_check(n < size, "name not terminated");
	for (size_t i = 0; i < n; i++)
		fuzz_check((unsigned char)name[i] >= 0x20 && name[i] != 0x7f,
			   "control character in a sanitized name");
}

static void lookup(struct elfsym *e, uint64_t vaddr)
{
	char name[ELFSYM_NAME_MAX], tiny[6];
	uint64_t start;

	if (elfsym_lookup(e, vaddr, name, sizeof(name), &start) == 0) {
		fuzz_check(start <= vaddr, "symbol above the address");
		check_name(name, sizeof(name));
		elfsym_lookup(e, vaddr, tiny, sizeof(tiny), NULL);
		check_name(tiny, sizeof(tiny));
	}
	/* The .eh_frame_hdr table names unsymbolized code by function. */
	if (elfsym_function_start(e, vaddr, &start) == 0)
		fuzz_check(start <= vaddr, "function start above the address");
}

/* Looks up what the input's symbol tables say, as samples would. */
static void lookup_listed(struct elfsym *e, const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1);
	Elf_Scn *scn = NULL;
	unsigned done = 0;
	Elf *elf;

	if (!copy)
		abort();
	memcpy(copy, data, size);
	elf = elf_memory(copy, size);
	while (elf && done < FUZZ_MAX_LOOKUPS && (scn = elf_nextscn(elf, scn)) != NULL) {
		Elf_Data *d;
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (int i = 0; done < FUZZ_MAX_LOOKUPS; i++, done++) {
			GElf_Sym sym;

			if (!gelf_getsym(d, i, &sym))
				break;
			lookup(e, sym.st_value);
			if (sym.st_size)
				lookup(e, sym.st_value + sym.st_size - 1);
		}
	}
	if (elf)
		elf_end(elf);
	free(copy);
}

static void check(struct elfsym *e, const uint8_t *data, size_t size)
{
	uint64_t vaddr, value, sz;
	size_t len;

	(void)elfsym_build_id(e, &len);
	fuzz_check(len <= ELFSYM_BUILD_ID_MAX, "build-id of %zu bytes", len);
	for (uint64_t off = 0; off < size + 0x2000; off += 0x1000)
		(void)elfsym_offset_to_vaddr(e, off, &vaddr);
	(void)elfsym_find(e, "main", &value, &sz);
	lookup_listed(e, data, size);
}

/* As the symbolizer loads on its loop (a byte budget and an entry cap
 * the input may exceed), then the full table as its worker does, adopted
 * into the first. */
static void limited(const uint8_t *data, size_t size)
{
	struct elfsym_limits lim = { .max_bytes = size / 2 + 1, .max_entries = 64 };
	struct elfsym *e, *full;

	if (elfsym_open_fd_limited(elf_fd, FUZZ_ELF_PATH, debug_root, &lim, &e) < 0)
		return;
	fuzz_check(elfsym_names(e) == ELFSYM_NAMES_READ || elfsym_count(e) == 0 ||
		   elfsym_source(e) == ELFSYM_SRC_DYNSYM, "a table past the limits was read");
	check(e, data, size);
	if (elfsym_open_fd(elf_fd, FUZZ_ELF_PATH, debug_root, &full) == 0) {
		(void)elfsym_adopt(e, full, ELFSYM_SRC_DEBUGINFOD);
		check(e, data, size);
		elfsym_free(full);
	}
	elfsym_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct elfsym *e;
	int fd;

	write_all(elf_fd, data, size);
	fd = open(debug_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	write_all(fd, data, size);
	close(fd);
	if (elfsym_open_fd(elf_fd, FUZZ_ELF_PATH, debug_root, &e) == 0) {
		check(e, data, size);
		elfsym_free(e);
	}
	if (elfsym_open_memory(data, size, &e) == 0) {
		check(e, data, size);
		elfsym_free(e);
	}
	limited(data, size);
	return 0;
}
