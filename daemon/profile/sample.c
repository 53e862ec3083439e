#include "sample.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

#define SAMPLE_SMALL_FRAMES 512

static uint32_t intern(struct store *st, const struct sample_frame *f)
{
	return store_frame_ref_at(st, f->kind, f->name, f->module ? f->module : "", f->loc);
}

/* The process is named as last sampled: its comm changes at exec, and the
 * program it exec'd is what runs from then on (a process first sampled
 * between fork and exec would otherwise keep its parent's name: "bash",
 * "setpriv"). A name read too late ("[exited]", samples that come without
 * BPF's copy of the comm) never replaces a known one. */
static void set_names(struct store *st, const struct built_sample *bs)
{
	const char *cur = store_process_name(st, bs->pid);
	char buf[64];

	if (bs->names && bs->names->comm && (!cur || strcmp(cur, bs->names->comm)) &&
	    (!cur || strcmp(bs->names->comm, SAMPLE_NAME_EXITED))) {
		struct store_labels l = { bs->names->cgroup, bs->names->unit, bs->names->container };

		store_set_process_name(st, bs->pid, bs->names->comm);
		store_set_process_labels(st, bs->pid, &l);
	}
	if (!store_thread_name(st, bs->pid, bs->tid) && bs->thread_name)
		store_set_thread_name(st, bs->pid, bs->tid, bs->thread_name(bs, buf, sizeof(buf)));
}

/* The sample's values in the store's order of sample types. */
static void map_values(const struct store *st, const struct built_sample *bs, uint64_t *out)
{
	size_t n = store_value_count(st);

	for (size_t i = 0; i < n; i++) {
		const struct sample_type *t = store_value_type(st, i);

		out[i] = 0;
		for (size_t j = 0; j < bs->event->ntypes; j++) {
			const struct sample_type *e = &bs->event->types[j];

			if (e == t || sample_type_eq(e, t)) {
				out[i] = bs->values[j];
				break;
			}
		}
	}
}

int sample_store_add(struct store *st, const struct built_sample *bs,
		     const struct sample_frame *prefix)
{
	uint32_t small[SAMPLE_SMALL_FRAMES], *ids = small;
	uint64_t values[STORE_MAX_VALUES];
	size_t n = 0, want = bs->nframes + (prefix ? 1 : 0);
	int r;

	if (want > SAMPLE_SMALL_FRAMES) {
		ids = malloc(want * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
	}
	set_names(st, bs);
	if (prefix)
		ids[n++] = intern(st, prefix);
	for (size_t i = 0; i < bs->nframes; i++)
		ids[n++] = intern(st, &bs->frames[i]);
	map_values(st, bs, values);
	r = store_add(st, &(struct store_sample){
		.pid = bs->pid, .tid = bs->tid, .frames = ids, .nframes = n, .values = values,
		.time_ns = bs->time_ns,
	});
	if (ids != small)
		free(ids);
	return r;
}
