/* The JVM's VMStructs tables, read from outside: libjvm.so's .dynsym (from
 * the mapped file, through /proc/PID/map_files) says where the exported
 * gHotSpotVM* variables are; their values, the tables and every string
 * come from the process's memory, bounded (entries, stride, string length,
 * a byte budget for the whole load). */
#include "hs_int.h"

#include "elfsym.h"
#include "procmaps.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* .dynsym entries looked at: libjvm has ~1,000; a forged file may claim any
 * number, and each costs a libelf call. */
#define HS_DYNSYM_MAX (1u << 18)
/* Bytes of .dynsym and of its string table read (libjvm 17 and 25: about
 * 12 KB and 8 KB). */
#define HS_DYNSYM_BYTES_MAX (8u << 20)

/* The exported variables read, in this order (index = enum below). */
enum hs_sym {
	S_STRUCTS, S_ST_TYPE, S_ST_FIELD, S_ST_TSTR, S_ST_STATIC, S_ST_OFF, S_ST_ADDR, S_ST_STRIDE,
	S_TYPES, S_TY_NAME, S_TY_SIZE, S_TY_STRIDE,
	S_INTS, S_IN_NAME, S_IN_VALUE, S_IN_STRIDE,
	S_LONGS, S_LO_NAME, S_LO_VALUE, S_LO_STRIDE,
	S_COUNT
};
static const char *const hs_sym_names[S_COUNT] = {
	"gHotSpotVMStructs", "gHotSpotVMStructEntryTypeNameOffset",
	"gHotSpotVMStructEntryFieldNameOffset", "gHotSpotVMStructEntryTypeStringOffset",
	"gHotSpotVMStructEntryIsStaticOffset", "gHotSpotVMStructEntryOffsetOffset",
	"gHotSpotVMStructEntryAddressOffset", "gHotSpotVMStructEntryArrayStride",
	"gHotSpotVMTypes", "gHotSpotVMTypeEntryTypeNameOffset", "gHotSpotVMTypeEntrySizeOffset",
	"gHotSpotVMTypeEntryArrayStride",
	"gHotSpotVMIntConstants", "gHotSpotVMIntConstantEntryNameOffset",
	"gHotSpotVMIntConstantEntryValueOffset", "gHotSpotVMIntConstantEntryArrayStride",
	"gHotSpotVMLongConstants", "gHotSpotVMLongConstantEntryNameOffset",
	"gHotSpotVMLongConstantEntryValueOffset", "gHotSpotVMLongConstantEntryArrayStride",
};

/* Instance fields: (type, field) -> offset. Several rows may fill one
 * offset where JDKs differ; the first found wins. */
#define F(t, f, m) { t, f, offsetof(struct hs_offsets, m) }
static const struct hs_field {
	const char *type, *field;
	size_t at;
} hs_fields[] = {
	F("Method", "_constMethod", method_const),
	F("Method", "_code", method_code),
	F("ConstMethod", "_constants", cmethod_constants),
	F("ConstMethod", "_name_index", cmethod_name_index),
	F("ConstMethod", "_signature_index", cmethod_sig_index),
	F("ConstantPool", "_pool_holder", cpool_holder),
	F("ConstantPool", "_length", cpool_length),
	F("Klass", "_name", klass_name),
	F("Symbol", "_length", symbol_length),
	F("Symbol", "_body", symbol_body),
	F("GrowableArrayBase", "_len", garray_len),
	F("GrowableArray<int>", "_data", garray_data),
	F("CodeHeap", "_memory", heap_memory),
	F("CodeHeap", "_segmap", heap_segmap),
	F("CodeHeap", "_log2_segment_size", heap_log2_seg),
	F("VirtualSpace", "_low", vspace_low),
	F("VirtualSpace", "_high", vspace_high),
	F("HeapBlock::Header", "_length", hblock_length),
	F("HeapBlock::Header", "_used", hblock_used),
	F("CodeBlob", "_name", blob_name),
	F("CodeBlob", "_size", blob_size),
	F("CodeBlob", "_frame_size", blob_frame_size),
	F("CodeBlob", "_kind", blob_kind),
	F("CodeBlob", "_code_begin", blob_code_begin),
	F("CodeBlob", "_code_offset", blob_code_offset),
	F("nmethod", "_method", nmethod_method),
	F("CompiledMethod", "_method", nmethod_method),
	F("nmethod", "_comp_level", nmethod_comp_level),
	F("CompiledMethod", "_comp_level", nmethod_comp_level),
	F("JavaThread", "_anchor", thread_anchor),
	F("JavaFrameAnchor", "_last_Java_sp", anchor_sp),
	F("JavaFrameAnchor", "_last_Java_pc", anchor_pc),
	F("JavaFrameAnchor", "_last_Java_fp", anchor_fp),
	F("JavaThread", "_osthread", thread_osthread),
	F("Thread", "_osthread", thread_osthread),
	F("OSThread", "_thread_id", osthread_tid),
};
static const struct hs_field hs_sizes[] = {
	F("ConstMethod", NULL, cmethod_size),
	F("ConstantPool", NULL, cpool_size),
	F("HeapBlock", NULL, hblock_size),
};
static const struct hs_field hs_ints[] = {
	F("frame::interpreter_frame_method_offset", NULL, iframe_method),
	F("frame::interpreter_frame_bcp_offset", NULL, iframe_bcp),
	F("frame::interpreter_frame_sender_sp_offset", NULL, iframe_sender_sp),
	F("frame::interpreter_frame_locals_offset", NULL, iframe_locals),
	F("CodeBlobKind::Nmethod", NULL, kind_nmethod),
	F("CodeBlobKind::Adapter", NULL, kind_adapter),
	F("CodeBlobKind::RuntimeStub", NULL, kind_runtime_stub),
};
#undef F

static int32_t *hs_slot(struct hs *h, size_t at)
{
	return (int32_t *)((char *)&h->off + at);
}

/* Where libjvm.so is mapped: the mapping of its first page, and whether
 * its file may be opened (not on a FUSE mount, whose server need never
 * answer). */
static int hs_find_libjvm(pid_t pid, const char *proc_root, struct procmaps_entry *out)
{
	char path[PATH_MAX];
	unsigned fuse[64];
	struct procmaps *m = NULL;
	size_t nfuse;
	int ret;

	snprintf(path, sizeof(path), "%s/%d/maps", proc_root, (int)pid);
	ret = procmaps_read(path, &m);
	if (ret < 0)
		goto out;
	snprintf(path, sizeof(path), "%s/%d/mountinfo", proc_root, (int)pid);
	nfuse = procmaps_fuse_devices(path, fuse, sizeof(fuse) / sizeof(fuse[0]));
	ret = -ENOENT;
	for (size_t i = 0; i < m->count; i++) {
		const struct procmaps_entry *e = &m->entries[i];
		const char *base = strrchr(e->path, '/');

		if (!base || strcmp(base, "/libjvm.so") || e->offset != 0)
			continue;
		if (procmaps_on_devices(e, fuse, nfuse)) {
			ret = -EPERM;
			break;
		}
		*out = *e;
		out->path = NULL;
		ret = 0;
		break;
	}
out:
	procmaps_free(m);
	return ret;
}

/* The file behind the mapping, as mapped (map_files), regular files only. */
static int hs_open_mapped(pid_t pid, const char *proc_root, const struct procmaps_entry *e)
{
	char path[PATH_MAX];
	struct stat sb;
	int fd;

	snprintf(path, sizeof(path), "%s/%d/map_files/%" PRIx64 "-%" PRIx64, proc_root, (int)pid,
		 e->start, e->end);
	if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
		return -ENOENT;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/* The run-time addresses of the gHotSpotVM* variables: .dynsym values plus
 * the load bias of the mapping at file offset 0. */
static int hs_dynsym(int fd, uint64_t map_start, uint64_t addr[S_COUNT])
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t nphdr, nsym, found = 0;
	uint64_t bias = 0;
	bool have_bias = false;
	int ret = -ENOENT;

	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || gelf_getclass(elf) != ELFCLASS64 ||
	    elf_getphdrnum(elf, &nphdr) != 0)
		goto out;
	/* The segment holding file offset 0 is what map_start shows. */
	for (size_t i = 0; i < nphdr && i < 64; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_offset == 0) {
			bias = map_start - ph.p_vaddr;
			have_bias = true;
			break;
		}
	}
	if (!have_bias)
		goto out;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		Elf_Data *d;

		Elf_Scn *strs;
		GElf_Shdr ssh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		/* libelf copies a section whole when it is first read: the
		 * file's (any user's) sizes are bounded before. */
		strs = elf_getscn(elf, sh.sh_link);
		if (sh.sh_size > HS_DYNSYM_BYTES_MAX || !strs || !gelf_getshdr(strs, &ssh) ||
		    ssh.sh_size > HS_DYNSYM_BYTES_MAX)
			break;
		d = elf_getdata(scn, NULL);
		if (!d)
			break;
		nsym = sh.sh_size / sh.sh_entsize;
		if (nsym > HS_DYNSYM_MAX)
			nsym = HS_DYNSYM_MAX;
		for (size_t i = 0; i < nsym && found < S_COUNT; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    GELF_ST_TYPE(sym.st_info) != STT_OBJECT)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || strncmp(name, "gHotSpotVM", 10))
				continue;
			for (size_t k = 0; k < S_COUNT; k++)
				if (!addr[k] && !strcmp(name, hs_sym_names[k])) {
					addr[k] = bias + sym.st_value;
					found++;
				}
		}
		break;
	}
	ret = found == S_COUNT ? 0 : -ENOENT;
out:
	elf_end(elf);
	return ret;
}

/* One table's layout: where the entries are, their stride and the offsets
 * of the fields read (all within the stride). */
struct hs_table {
	uint64_t base;
	uint64_t stride;
	uint64_t name_off, name2_off, value_off, static_off, addr_off;
	bool has_name2, has_static;
};

/* The last string read at one pointer: consecutive VMStructs entries share
 * their type name. */
struct hs_strcache {
	uint64_t ptr;
	int len;
	char s[HS_STR_MAX];
};

static int hs_str(struct hs *h, struct hs_strcache *c, uint64_t ptr)
{
	if (c->ptr && c->ptr == ptr)
		return c->len;
	c->ptr = 0;
	c->len = hs_read_str(h, ptr, c->s, sizeof(c->s));
	if (c->len >= 0)
		c->ptr = ptr;
	return c->len;
}

static uint64_t hs_get(const unsigned char *e, uint64_t off, size_t size)
{
	uint64_t v = 0;

	memcpy(&v, e + off, size);  /* little-endian (x86_64, aarch64) */
	return v;
}

/* The table's entries, each handed to fn with its name (and the second
 * name: a struct's field), until the terminator (a NULL name). An entry
 * count past HS_TABLE_ENTRIES_MAX is an error: a HotSpot table ends. */
static int hs_walk(struct hs *h, const struct hs_table *t, uint32_t *count,
		   int (*fn)(struct hs *h, const unsigned char *e, const char *n1,
			     const char *n2, const struct hs_table *t))
{
	unsigned char buf[16 * HS_STRIDE_MAX];
	struct hs_strcache *c = malloc(2 * sizeof(*c));
	size_t per = sizeof(buf) / t->stride, have = 0, at = 0;
	int ret = 0;

	if (!c)
		return -ENOMEM;
	c[0].ptr = c[1].ptr = 0;
	for (uint32_t i = 0;; i++, at++) {
		const unsigned char *e;
		uint64_t n1, n2 = 0;

		if (i >= HS_TABLE_ENTRIES_MAX) {
			ret = -EBADMSG;
			goto out;
		}
		if (at == have) {
			/* A chunk at a time; one entry at a time near the end of
			 * the mapping, where a whole chunk may not be mapped. */
			uint64_t a = t->base + (uint64_t)i * t->stride;

			have = per;
			ret = hs_read(h, a, buf, per * t->stride);
			if (ret == -EFAULT) {
				have = 1;
				ret = hs_read(h, a, buf, t->stride);
			}
			if (ret < 0)
				goto out;
			at = 0;
		}
		e = buf + at * t->stride;
		n1 = hs_get(e, t->name_off, 8);
		if (!n1)
			break;
		*count = i + 1;
		ret = hs_str(h, &c[0], n1);
		if (ret < 0)
			goto out;
		if (t->has_name2) {
			n2 = hs_get(e, t->name2_off, 8);
			/* A struct entry without a field name is skipped */
			if (!n2)
				continue;
			ret = hs_str(h, &c[1], n2);
			if (ret < 0)
				goto out;
		}
		ret = fn(h, e, c[0].s, t->has_name2 ? c[1].s : NULL, t);
		if (ret < 0)
			goto out;
	}
	ret = 0;
out:
	free(c);
	return ret;
}

/* An offset read from the process, as an int32_t field offset: HotSpot's
 * objects are small, anything past 1 MiB is not one of them. */
static int32_t hs_small(uint64_t v)
{
	return v < (1u << 20) ? (int32_t)v : -1;
}

static int hs_on_struct(struct hs *h, const unsigned char *e, const char *type,
			const char *field, const struct hs_table *t)
{
	uint64_t v;

	if (hs_get(e, t->static_off, 4)) {
		v = hs_get(e, t->addr_off, 8);
		if (!strcmp(type, "CodeCache") && !strcmp(field, "_heaps"))
			h->off.codecache_heaps = v;
		else if (!strcmp(type, "Abstract_VM_Version") && !strcmp(field, "_s_vm_release")) {
			uint64_t p;
			char s[HS_STR_MAX];

			int n;

			/* The process's bytes: made printable before anyone logs them. */
			if (hs_read(h, v, &p, sizeof(p)) == 0 &&
			    (n = hs_read_str(h, p, s, sizeof(s))) > 0)
				elfsym_sanitize(s, (size_t)n, h->release, sizeof(h->release));
		}
		return 0;
	}
	v = hs_get(e, t->value_off, 8);
	for (size_t i = 0; i < sizeof(hs_fields) / sizeof(hs_fields[0]); i++) {
		int32_t *slot = hs_slot(h, hs_fields[i].at);

		if (*slot < 0 && !strcmp(type, hs_fields[i].type) &&
		    !strcmp(field, hs_fields[i].field))
			*slot = hs_small(v);
	}
	return 0;
}

static int hs_on_type(struct hs *h, const unsigned char *e, const char *type, const char *unused,
		      const struct hs_table *t)
{
	(void)unused;
	for (size_t i = 0; i < sizeof(hs_sizes) / sizeof(hs_sizes[0]); i++)
		if (!strcmp(type, hs_sizes[i].type))
			*hs_slot(h, hs_sizes[i].at) = hs_small(hs_get(e, t->value_off, 8));
	return 0;
}

static int hs_on_int(struct hs *h, const unsigned char *e, const char *name, const char *unused,
		     const struct hs_table *t)
{
	(void)unused;
	for (size_t i = 0; i < sizeof(hs_ints) / sizeof(hs_ints[0]); i++)
		if (!strcmp(name, hs_ints[i].type))
			*hs_slot(h, hs_ints[i].at) = (int32_t)hs_get(e, t->value_off, 4);
	return 0;
}

static int hs_on_long(struct hs *h, const unsigned char *e, const char *name, const char *unused,
		      const struct hs_table *t)
{
	(void)h, (void)e, (void)name, (void)unused, (void)t;
	return 0;
}

/* A table's layout from its exported variables: the stride bounded, every
 * field read (width w) inside an entry. */
static int hs_table(struct hs *h, const uint64_t *addr, enum hs_sym base, enum hs_sym stride,
		    const enum hs_sym *fields, const size_t *widths, size_t n, uint64_t *offs,
		    struct hs_table *t)
{
	uint64_t p;
	int ret;

	ret = hs_read(h, addr[base], &p, sizeof(p));
	if (ret < 0)
		return ret;
	t->base = p;
	ret = hs_read(h, addr[stride], &t->stride, sizeof(t->stride));
	if (ret < 0)
		return ret;
	if (t->stride < 8 || t->stride > HS_STRIDE_MAX || !p)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		ret = hs_read(h, addr[fields[i]], &offs[i], sizeof(offs[i]));
		if (ret < 0)
			return ret;
		if (offs[i] > t->stride || t->stride - offs[i] < widths[i])
			return -EBADMSG;
	}
	return 0;
}

static void hs_offsets_init(struct hs_offsets *o)
{
	int32_t *p = (int32_t *)o;

	memset(o, 0, sizeof(*o));
	/* Every int32_t member starts missing; the one uint64_t is 0. */
	for (size_t i = 0; i < sizeof(*o) / sizeof(int32_t); i++)
		p[i] = -1;
	o->codecache_heaps = 0;
	o->iframe_method = o->iframe_bcp = o->iframe_sender_sp = o->iframe_locals = INT32_MIN;
}

int hs_vmstructs_load(struct hs *h, const char *proc_root)
{
	static const enum hs_sym st_f[] = { S_ST_TYPE, S_ST_FIELD, S_ST_STATIC, S_ST_OFF, S_ST_ADDR };
	static const size_t st_w[] = { 8, 8, 4, 8, 8 };
	static const enum hs_sym ty_f[] = { S_TY_NAME, S_TY_SIZE };
	static const enum hs_sym in_f[] = { S_IN_NAME, S_IN_VALUE };
	static const enum hs_sym lo_f[] = { S_LO_NAME, S_LO_VALUE };
	static const size_t w88[] = { 8, 8 }, w84[] = { 8, 4 };
	/* The name/value tables: types (sizes), int and long constants. */
	const struct {
		enum hs_sym base, stride;
		const enum hs_sym *fields;
		const size_t *widths;
		uint32_t *count;
		int (*fn)(struct hs *h, const unsigned char *e, const char *n1, const char *n2,
			  const struct hs_table *t);
	} nv[] = {
		{ S_TYPES, S_TY_STRIDE, ty_f, w88, &h->st.type_entries, hs_on_type },
		{ S_INTS, S_IN_STRIDE, in_f, w84, &h->st.int_entries, hs_on_int },
		{ S_LONGS, S_LO_STRIDE, lo_f, w88, &h->st.long_entries, hs_on_long },
	};
	struct procmaps_entry jvm;
	uint64_t addr[S_COUNT] = { 0 }, o[5];
	struct hs_table t;
	int fd = -1, ret;

	hs_offsets_init(&h->off);
	h->loading = true;
	h->budget = HS_LOAD_BYTES_MAX;
	ret = hs_find_libjvm(h->pid, proc_root, &jvm);
	if (ret < 0)
		goto out;
	fd = hs_open_mapped(h->pid, proc_root, &jvm);
	if (fd < 0) {
		ret = fd;
		goto out;
	}
	ret = hs_dynsym(fd, jvm.start, addr);
	if (ret < 0)
		goto out;

	memset(&t, 0, sizeof(t));
	ret = hs_table(h, addr, S_STRUCTS, S_ST_STRIDE, st_f, st_w, 5, o, &t);
	if (ret < 0)
		goto out;
	t.name_off = o[0], t.name2_off = o[1], t.static_off = o[2], t.value_off = o[3];
	t.addr_off = o[4], t.has_name2 = true, t.has_static = true;
	ret = hs_walk(h, &t, &h->st.struct_entries, hs_on_struct);
	if (ret < 0)
		goto out;

	for (size_t i = 0; i < sizeof(nv) / sizeof(nv[0]); i++) {
		memset(&t, 0, sizeof(t));
		ret = hs_table(h, addr, nv[i].base, nv[i].stride, nv[i].fields, nv[i].widths, 2, o, &t);
		if (ret < 0)
			goto out;
		t.name_off = o[0], t.value_off = o[1];
		ret = hs_walk(h, &t, nv[i].count, nv[i].fn);
		if (ret < 0)
			goto out;
	}
	/* HeapBlock::Header::_length is a size_t on JDK 17 and a uint32_t on
	 * 25; _used follows it directly on both. */
	if (h->off.hblock_length >= 0 && h->off.hblock_used > h->off.hblock_length) {
		int32_t w = h->off.hblock_used - h->off.hblock_length;

		h->off.hblock_length_size = w >= 8 ? 8 : w >= 4 ? 4 : -1;
		if (h->off.hblock_length_size < 0)
			h->off.hblock_length = -1;
	} else {
		h->off.hblock_length = -1;
	}
out:
	if (fd >= 0)
		close(fd);
	h->loading = false;
	return ret;
}
