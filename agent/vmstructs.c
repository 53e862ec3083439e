#include "vmstructs.h"

#include "agent.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Where each needed field lies; -1 = not found. */
static struct {
	bool done;
	int ret;
	long method_code;      /* Method::_code: the method's current nmethod */
	long blob_size;        /* CodeBlob::_size: bytes from the nmethod's start */
	long nm_method;        /* nmethod::_method (CompiledMethod::_method on JDK 17) */
	long nm_level;         /* nmethod::_comp_level */
	unsigned level_size;   /* its type's size: int on JDK 17, CompLevel (1) on 25 */
} vms = { .method_code = -1, .blob_size = -1, .nm_method = -1, .nm_level = -1 };

static uint64_t vmstructs_u64(const char *name, bool *ok)
{
	const uint64_t *p = agent_jvm_sym(name);

	if (!p)
		*ok = false;
	return p ? *p : 0;
}

/* The size of a type named in gHotSpotVMTypes, or 0. */
static unsigned vmstructs_type_size(const char *type)
{
	const char *const *table = agent_jvm_sym("gHotSpotVMTypes");
	bool ok = true;
	uint64_t name_off = vmstructs_u64("gHotSpotVMTypeEntryTypeNameOffset", &ok);
	uint64_t size_off = vmstructs_u64("gHotSpotVMTypeEntrySizeOffset", &ok);
	uint64_t stride = vmstructs_u64("gHotSpotVMTypeEntryArrayStride", &ok);

	if (!table || !*table || !ok || !stride)
		return 0;
	/* Bounded: HotSpot's table has a few thousand entries. */
	for (const char *e = *table; e < *table + stride * 100000; e += stride) {
		const char *n = *(const char *const *)(e + name_off);

		if (!n)
			break;
		if (!strcmp(n, type))
			return (unsigned)*(const uint64_t *)(e + size_off);
	}
	return 0;
}

int vmstructs_init(void)
{
	const char *const *table = agent_jvm_sym("gHotSpotVMStructs");
	uint64_t type_off, field_off, tstr_off, static_off, off_off, stride;
	const char *level_type = NULL;
	bool ok = true;

	if (vms.done)
		return vms.ret;
	vms.done = true;
	type_off = vmstructs_u64("gHotSpotVMStructEntryTypeNameOffset", &ok);
	field_off = vmstructs_u64("gHotSpotVMStructEntryFieldNameOffset", &ok);
	tstr_off = vmstructs_u64("gHotSpotVMStructEntryTypeStringOffset", &ok);
	static_off = vmstructs_u64("gHotSpotVMStructEntryIsStaticOffset", &ok);
	off_off = vmstructs_u64("gHotSpotVMStructEntryOffsetOffset", &ok);
	stride = vmstructs_u64("gHotSpotVMStructEntryArrayStride", &ok);
	if (!table || !*table || !ok || !stride) {
		vms.ret = -ENOENT;
		goto out;
	}
	for (const char *e = *table; e < *table + stride * 100000; e += stride) {
		const char *type = *(const char *const *)(e + type_off);
		const char *field = *(const char *const *)(e + field_off);
		long off = (long)*(const uint64_t *)(e + off_off);

		if (!type)
			break;
		if (!field || *(const int32_t *)(e + static_off))
			continue;
		if (!strcmp(type, "Method") && !strcmp(field, "_code"))
			vms.method_code = off;
		else if (!strcmp(type, "CodeBlob") && !strcmp(field, "_size"))
			vms.blob_size = off;
		else if ((!strcmp(type, "nmethod") || !strcmp(type, "CompiledMethod")) &&
			 !strcmp(field, "_method"))
			vms.nm_method = off;
		else if (!strcmp(type, "nmethod") && !strcmp(field, "_comp_level")) {
			vms.nm_level = off;
			level_type = *(const char *const *)(e + tstr_off);
		}
	}
	if (level_type)
		vms.level_size = vmstructs_type_size(level_type);
	if (vms.method_code < 0 || vms.blob_size < 0 || vms.nm_method < 0 || vms.nm_level < 0 ||
	    (vms.level_size != 1 && vms.level_size != 4))
		vms.ret = -ENOENT;
out:
	/* Once per JVM: compiled frames are then typed compiled, not C1/C2. */
	if (vms.ret < 0)
		agent_warn("VMStructs lack nmethod tiers (Method::_code, CodeBlob::_size, "
			   "nmethod::_method, nmethod::_comp_level): C1 and C2 not told apart");
	return vms.ret;
}

int vmstructs_comp_level(uint64_t method, uintptr_t code_addr)
{
	uintptr_t m, nm, nm_method;
	int32_t size = 0;
	int32_t level = 0;
	int8_t level8;

	if (vms.ret < 0 || !vms.done)
		return 0;
	/* A jmethodID points at the Method*. */
	if (!agent_peek((uintptr_t)method, &m, sizeof(m)) ||
	    !agent_peek(m + (uintptr_t)vms.method_code, &nm, sizeof(nm)) || !nm)
		return 0;
	/* The method's current nmethod must be the one loaded at code_addr. */
	if (!agent_peek(nm + (uintptr_t)vms.blob_size, &size, sizeof(size)) || size <= 0 ||
	    code_addr < nm || code_addr - nm >= (uintptr_t)size ||
	    !agent_peek(nm + (uintptr_t)vms.nm_method, &nm_method, sizeof(nm_method)) ||
	    nm_method != m)
		return 0;
	if (vms.level_size == 1) {
		if (!agent_peek(nm + (uintptr_t)vms.nm_level, &level8, 1))
			return 0;
		level = level8;
	} else if (!agent_peek(nm + (uintptr_t)vms.nm_level, &level, sizeof(level))) {
		return 0;
	}
	return level >= 1 && level <= 4 ? level : 0;
}
