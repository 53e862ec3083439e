/* What kind of code a stack frame belongs to. Shared by symbols, store and
 * exporters so every output format names and colours frames the same way. */
#ifndef JPROF_FRAME_H
#define JPROF_FRAME_H

enum frame_kind {
	FRAME_NATIVE = 0,      /* user-space machine code (C, C++, Rust, libjvm...) */
	FRAME_KERNEL,          /* kernel text, from kallsyms */
	FRAME_JAVA_INTERP,     /* Java method, interpreted */
	FRAME_JAVA_JIT,        /* Java method, JIT-compiled */
	FRAME_JAVA_INLINED,    /* Java method inlined into a compiled caller */
	FRAME_JIT_UNKNOWN,     /* address in anonymous executable memory (JIT code) */
	FRAME_MARKER,          /* synthetic: "[unknown]", "[gc_active]", thread roots... */
	FRAME_JAVA,            /* Java method, execution mode unknown (AsyncGetCallTrace does not say) */
	FRAME_JAVA_C1,         /* Java method, compiled by C1 (FRAME_JAVA_JIT: C2, or tier unknown) */
	FRAME_KIND_COUNT
};

#include <stdbool.h>
#include <stdint.h>

/* Where a user frame's code lies, so that a profile can say it in a form a
 * backend can symbolize again (pprof Location.address and Mapping). Only
 * file-backed user code has one; kernel frames never do (no kernel address
 * leaves the daemon), nor do JIT, vdso and marker frames. */
struct frame_loc {
	uint64_t addr;            /* the sampled address; for a return address, the
				   * address - 1 that was looked up (inside the call) */
	uint64_t map_start;       /* its mapping, as in /proc/PID/maps */
	uint64_t map_limit;       /* exclusive */
	uint64_t map_offset;      /* file offset of map_start */
	const char *path;         /* the file as mapped (in the process's mount namespace) */
	const char *build_id;     /* GNU build-id as lowercase hex; "" when none */
	bool symbolized;          /* the name came from a symbol table, not module+0x... */
	uint64_t vaddr;           /* addr in the ELF file's own address space (what
				   * DWARF and addr2line use); valid with a build_id */
	uint32_t pid;             /* the process the address is from: an address and
				   * mapping go only where that process may be shown */
	/* Whether the build-id stands for the same code in every file that
	 * carries it (a file no user could write); else what was read from the
	 * file serves that file alone, keyed by its device and inode. */
	bool build_id_shared;
	uint64_t file_dev, file_ino;
};

/* Source position of user code from debug info (symbols/lines.h): one per
 * function, inlined ones first. file "" and line 0 when unknown. */
#define FRAME_LINE_FILE_MAX 512
#define FRAME_LINE_FUNC_MAX 512
struct frame_line {
	char file[FRAME_LINE_FILE_MAX];
	char function[FRAME_LINE_FUNC_MAX];  /* "" when the debug info names none */
	uint32_t line;
};

/* "native", "kernel", "java_interp", "java_jit", "java_c1", "java_inlined", "jit",
 * "marker", "java" */
const char *frame_kind_name(enum frame_kind kind);

#endif
