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
	FRAME_KIND_COUNT
};

/* "native", "kernel", "java_interp", "java_jit", "java_inlined", "jit", "marker" */
const char *frame_kind_name(enum frame_kind kind);

#endif
