#include "frame.h"

const char *frame_kind_name(enum frame_kind kind)
{
	static const char *const names[FRAME_KIND_COUNT] = {
		[FRAME_NATIVE] = "native",
		[FRAME_KERNEL] = "kernel",
		[FRAME_JAVA_INTERP] = "java_interp",
		[FRAME_JAVA_JIT] = "java_jit",
		[FRAME_JAVA_INLINED] = "java_inlined",
		[FRAME_JIT_UNKNOWN] = "jit",
		[FRAME_MARKER] = "marker",
		[FRAME_JAVA] = "java",
		[FRAME_JAVA_C1] = "java_c1",
	};

	if ((unsigned)kind >= FRAME_KIND_COUNT)
		return "unknown";
	return names[kind];
}
