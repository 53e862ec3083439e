#include "store_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Names and labels of a stack's thread and process. Merges go from older
 * to newer data (host-view buckets oldest first, a session's checked
 * samples into its store), so the process is named as last sampled, as
 * sample.c's set_names does within one store: a process that exec'd
 * between two buckets has the exec'd program's name. "[exited]" never
 * replaces a known name; a thread keeps its first name, as in set_names. */
static void store_copy_names(struct store *dst, const struct store *src, uint32_t pid, uint32_t tid)
{
	const char *name = store_process_name(src, pid), *cur;
	struct store_labels l;

	cur = name ? store_process_name(dst, pid) : NULL;
	if (name && (!cur || (strcmp(cur, name) && strcmp(name, STORE_NAME_EXITED)))) {
		store_set_process_name(dst, pid, name);
		if (store_process_labels(src, pid, &l))
			store_set_process_labels(dst, pid, &l);
	}
	name = store_thread_name(src, pid, tid);
	if (name && !store_thread_name(dst, pid, tid) &&
	    store_set_thread_name(dst, pid, tid, name) == 0)
		store_set_thread_java_id(dst, pid, tid, store_thread_java_id(src, pid, tid));
}

/* dst's values from src's (vmap: src index -> dst index, -1 = dropped). */
static void store_map_values(const struct store *dst, const int *vmap, size_t nsrc,
			     const uint64_t *in, uint64_t *out)
{
	memset(out, 0, dst->nvalues * sizeof(*out));
	for (size_t i = 0; i < nsrc; i++)
		if (vmap[i] >= 0)
			out[vmap[i]] = in[i];
}

/* Sample times of the copied stacks (stack_map: src stack -> dst stack). */
static void store_merge_times(struct store *dst, const struct store *src, const uint32_t *stack_map,
			      const int *vmap)
{
	uint64_t vals[STORE_MAX_VALUES];

	for (size_t i = 0; i < src->ntimes; i++) {
		const struct time_rec *t = &src->times[i];

		if (stack_map[t->stack] == HTAB_NONE)
			continue;
		store_map_values(dst, vmap, src->nvalues, src->time_values + i * src->nvalues, vals);
		store_record_time(dst, stack_map[t->stack], t->tid, t->time_ns, vals);
	}
}

int store_merge(struct store *dst, const struct store *src, store_merge_fn filter, void *arg)
{
	size_t nframes = store_frame_count(src), nstacks = store_stack_count(src), ids_cap = 0, i;
	uint32_t *fmap = NULL, *ids = NULL, *stack_map = NULL, prefix;
	uint64_t vals[STORE_MAX_VALUES];
	int vmap[STORE_MAX_VALUES];
	bool times = dst && src && dst->times_max && src->ntimes;
	int r = 0;

	if (!dst || !src || dst == src)
		return -EINVAL;
	for (i = 0; i < src->nvalues; i++) {
		vmap[i] = -1;
		for (size_t j = 0; j < dst->nvalues; j++)
			if (sample_type_eq(&src->types[i], &dst->types[j]))
				vmap[i] = (int)j;
	}
	fmap = malloc(nframes * sizeof(*fmap));
	stack_map = times ? malloc(nstacks * sizeof(*stack_map)) : NULL;
	if (!fmap || (times && !stack_map)) {
		r = -ENOMEM;
		goto out;
	}
	memset(fmap, 0xff, nframes * sizeof(*fmap));
	for (i = 0; i < nstacks; i++) {
		const struct store_stack *s = &src->stacks[i].pub;
		struct store_sample smp = { .pid = s->pid, .tid = s->tid, .values = vals };
		size_t n = 0, at;

		if (stack_map)
			stack_map[i] = HTAB_NONE;
		prefix = STORE_NO_FRAME;
		if (filter && !filter(src, s, dst, &prefix, arg))
			continue;
		if (s->nframes + 1 > ids_cap) {
			uint32_t *nids = realloc(ids, (s->nframes + 1) * sizeof(*ids));

			if (!nids) {
				r = -ENOMEM;
				goto out;
			}
			ids = nids;
			ids_cap = s->nframes + 1;
		}
		if (prefix != STORE_NO_FRAME)
			ids[n++] = prefix;
		for (uint32_t j = 0; j < s->nframes; j++) {
			uint32_t fid = s->frames[j];

			const struct store_frame *f = &src->frames[fid];
			/* A frame's address is from one process: it goes only
			 * with a stack of that process, so a profile filtered to
			 * one process never shows where another mapped its code. */
			bool own = f->loc && f->loc->pid == s->pid;

			/* One address of a function: the same address in dst
			 * (which keeps it per address or gives it to the
			 * function's frame, as store_frame_ref_at decides). */
			if (f->function != fid && own) {
				if (fmap[fid] == HTAB_NONE)
					fmap[fid] = store_frame_ref_at(dst, f->kind, f->name, f->module, f->loc);
				ids[n++] = fmap[fid];
				continue;
			}
			if (f->function != fid) {
				ids[n++] = store_frame_ref(dst, f->kind, f->name, f->module);
				continue;
			}
			if (fmap[fid] == HTAB_NONE)
				fmap[fid] = store_frame_ref(dst, f->kind, f->name, f->module);
			if (own)
				store_frame_set_loc(dst, fmap[fid], f->loc);
			ids[n++] = fmap[fid];
		}
		store_copy_names(dst, src, s->pid, s->tid);
		store_map_values(dst, vmap, src->nvalues, s->values, vals);
		smp.frames = ids;
		smp.nframes = n;
		r = store_add_at(dst, &smp, &at);
		if (r < 0)
			goto out;
		if (stack_map)
			stack_map[i] = (uint32_t)at;
	}
	if (times)
		store_merge_times(dst, src, stack_map, vmap);
	r = 0;
out:
	free(ids);
	free(fmap);
	free(stack_map);
	return r;
}

