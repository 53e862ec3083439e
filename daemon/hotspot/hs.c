/* The per-process context, its bounded memory reader and the names of the
 * offsets a JVM did not export. */
#include "hs_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

int hs_read(struct hs *h, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n;

	if (!len)
		return 0;
	/* A pointer the process wrote: NULL pages and wrap-around never hold
	 * what we want, and the kernel need not be asked. */
	if (addr < 4096 || addr + len < addr)
		return -EFAULT;
	if (h->loading) {
		if (len > h->budget)
			return -EBADMSG;
		h->budget -= len;
	}
	h->st.reads++;
	n = process_vm_readv(h->pid, &local, 1, &remote, 1, 0);
	if (n < 0)
		return errno == ENOMEM ? -EFAULT : -errno;
	h->st.bytes_read += (uint64_t)n;
	return (size_t)n == len ? 0 : -EFAULT;
}

int hs_read_str(struct hs *h, uint64_t addr, char *buf, size_t size)
{
	size_t got = 0;

	/* 64 bytes first (VMStructs names are shorter), then the rest; never
	 * across a page in one read: a short string near the end of its
	 * mapping is read without touching the next page, which need not be
	 * mapped. */
	while (got < size) {
		uint64_t a = addr + got;
		size_t chunk = 4096 - (size_t)(a & 4095);
		char *nul;
		int r;

		if (!got && chunk > 64)
			chunk = 64;
		if (chunk > size - got)
			chunk = size - got;
		r = hs_read(h, a, buf + got, chunk);
		if (r < 0)
			return r;
		nul = memchr(buf + got, 0, chunk);
		if (nul)
			return (int)(nul - buf);
		got += chunk;
	}
	return -EBADMSG;
}

int hs_open(pid_t pid, const char *proc_root, struct hs **out)
{
	struct hs *h = calloc(1, sizeof(*h));
	int ret;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	h->pid = pid;
	ret = hs_vmstructs_load(h, proc_root ? proc_root : "/proc");
	if (ret < 0) {
		free(h);
		return ret;
	}
	*out = h;
	return 0;
}

void hs_free(struct hs *h)
{
	if (!h)
		return;
	if (h->names)
		for (size_t i = 0; i < HS_NAME_CACHE; i++) {
			free(h->names[i].text);
			free(h->names[i].raw);
		}
	free(h->names);
	free(h);
}

const struct hs_offsets *hs_offsets(const struct hs *h)
{
	return &h->off;
}

const struct hs_stats *hs_stats(const struct hs *h)
{
	return &h->st;
}

const char *hs_vm_release(const struct hs *h)
{
	return h->release;
}

size_t hs_offsets_missing(const struct hs *h, char *buf, size_t size)
{
	const struct hs_offsets *o = &h->off;
	const struct {
		const char *name;
		int32_t v;
	} need[] = {
		{ "Method::_constMethod", o->method_const },
		{ "ConstMethod::_constants", o->cmethod_constants },
		{ "ConstMethod::_name_index", o->cmethod_name_index },
		{ "ConstMethod::_signature_index", o->cmethod_sig_index },
		{ "ConstantPool::_pool_holder", o->cpool_holder },
		{ "ConstantPool::_length", o->cpool_length },
		{ "sizeof(ConstantPool)", o->cpool_size },
		{ "Klass::_name", o->klass_name },
		{ "Symbol::_length", o->symbol_length },
		{ "Symbol::_body", o->symbol_body },
		{ "CodeCache::_heaps", o->codecache_heaps ? 0 : -1 },
		{ "GrowableArrayBase::_len", o->garray_len },
		{ "GrowableArray<int>::_data", o->garray_data },
		{ "CodeHeap::_memory", o->heap_memory },
		{ "CodeHeap::_segmap", o->heap_segmap },
		{ "CodeHeap::_log2_segment_size", o->heap_log2_seg },
		{ "VirtualSpace::_low", o->vspace_low },
		{ "VirtualSpace::_high", o->vspace_high },
		{ "HeapBlock::Header::_length", o->hblock_length },
		{ "HeapBlock::Header::_used", o->hblock_used },
		{ "sizeof(HeapBlock)", o->hblock_size },
		{ "CodeBlob::_name", o->blob_name },
		{ "CodeBlob::_size", o->blob_size },
		{ "CodeBlob::_frame_size", o->blob_frame_size },
		{ "nmethod::_method", o->nmethod_method },
		{ "JavaThread::_anchor", o->thread_anchor },
		{ "JavaFrameAnchor::_last_Java_sp", o->anchor_sp },
		{ "JavaFrameAnchor::_last_Java_pc", o->anchor_pc },
		{ "JavaFrameAnchor::_last_Java_fp", o->anchor_fp },
	};
	size_t n = 0, used = 0;

	if (size)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		int w;

		if (need[i].v >= 0)
			continue;
		n++;
		if (used >= size)
			continue;
		w = snprintf(buf + used, size - used, "%s%s", used ? " " : "", need[i].name);
		used += w > 0 ? (size_t)w : 0;
	}
	return n;
}

const char *hs_blob_kind_name(enum hs_blob_kind k)
{
	switch (k) {
	case HS_BLOB_NMETHOD: return "nmethod";
	case HS_BLOB_NATIVE: return "native";
	case HS_BLOB_INTERPRETER: return "interpreter";
	case HS_BLOB_ADAPTER: return "adapter";
	case HS_BLOB_STUB: return "stub";
	default: return "unknown";
	}
}
