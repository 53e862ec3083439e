#include "jring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct jring {
	void *map;
	uint32_t nslots;
	uint32_t bytes;
	uint64_t read_idx;            /* ours; the header copy is informational for the agent */
	uint64_t stuck_idx;           /* slot we are waiting on */
	unsigned stuck_calls;
	struct jring_stats st;
	struct jpring_slot copy;      /* private copy of the slot being validated */
};

static struct jpring_header *hdr(struct jring *r)
{
	return r->map;
}

static struct jpring_slot *slot_at(struct jring *r, uint64_t idx)
{
	return (struct jpring_slot *)((char *)r->map + JPRING_HEADER_BYTES +
				      (size_t)(idx % r->nslots) * JPRING_SLOT_BYTES);
}

int jring_new(uint32_t nslots, struct jring **out, int *memfd_out)
{
	struct jring *r = NULL;
	struct jpring_header *h;
	uint64_t bytes;
	int fd = -1, ret;

	*out = NULL;
	*memfd_out = -1;
	if (nslots == 0 || nslots > (1u << 20))
		return -EINVAL;
	bytes = JPRING_HEADER_BYTES + (uint64_t)nslots * JPRING_SLOT_BYTES;
	if (bytes > UINT32_MAX)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->map = MAP_FAILED;
	fd = memfd_create("jprofd-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		ret = -errno;
		goto fail;
	}
	if (ftruncate(fd, (off_t)bytes) < 0) {
		ret = -errno;
		goto fail;
	}
	/* A shrunk memfd would turn our reads into SIGBUS: forbid resizing. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		ret = -errno;
		goto fail;
	}
	r->map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r->map == MAP_FAILED) {
		ret = -errno;
		goto fail;
	}
	r->nslots = nslots;
	r->bytes = (uint32_t)bytes;
	h = hdr(r);
	h->magic = JPRING_MAGIC;
	h->version = JPRING_VERSION;
	h->slot_bytes = JPRING_SLOT_BYTES;
	h->nslots = nslots;
	*out = r;
	*memfd_out = fd;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	jring_free(r);
	return ret;
}

void jring_free(struct jring *r)
{
	if (!r)
		return;
	if (r->map != MAP_FAILED && r->map)
		munmap(r->map, r->bytes);
	free(r);
}

uint32_t jring_bytes(const struct jring *r)
{
	return r->bytes;
}

uint32_t jring_nslots(const struct jring *r)
{
	return r->nslots;
}

void *jring_mapping(struct jring *r)
{
	return r->map;
}

static void check_header(struct jring *r)
{
	struct jpring_header *h = hdr(r);

	if (__atomic_load_n(&h->magic, __ATOMIC_RELAXED) != JPRING_MAGIC ||
	    __atomic_load_n(&h->version, __ATOMIC_RELAXED) != JPRING_VERSION ||
	    __atomic_load_n(&h->slot_bytes, __ATOMIC_RELAXED) != JPRING_SLOT_BYTES ||
	    __atomic_load_n(&h->nslots, __ATOMIC_RELAXED) != r->nslots)
		r->st.header_corrupt = true;
}

/* A CPU record has no state or weight (agents before wall records zeroed
 * the three fields); a wall record has both, in range. The event set above
 * the kind's low byte must be one that exists. */
static bool kind_valid(const struct jpring_slot *s)
{
	if (s->kind >> JPRING_KIND_SET_SHIFT >= JPAG_MAX_SETS)
		return false;
	switch (s->kind & JPRING_KIND_MASK) {
	case JPRING_KIND_CPU:
		return s->state == 0 && s->weight == 0;
	case JPRING_KIND_WALL:
		return (s->state == JPRING_STATE_SLEEPING || s->state == JPRING_STATE_UNINTERRUPTIBLE) &&
		       s->weight >= 1 && s->weight <= JPRING_WALL_MAX_WEIGHT;
	default:
		return false;
	}
}

int jring_read(struct jring *r, unsigned max, unsigned stuck_after,
	       void (*cb)(const struct jring_record *rec, void *arg), void *arg)
{
	struct jpring_header *h = hdr(r);
	uint64_t w, dropped;
	int n = 0;

	check_header(r);
	dropped = __atomic_load_n(&h->dropped, __ATOMIC_RELAXED);
	if (dropped > r->st.agent_dropped)
		r->st.agent_dropped = dropped;
	w = __atomic_load_n(&h->write_idx, __ATOMIC_ACQUIRE);
	if (w < r->read_idx) {
		/* The write index went backwards: tampering. Follow it so a
		 * recovered writer is read again, but say so. */
		r->st.header_corrupt = true;
		r->st.corrupt++;
		r->read_idx = w;
		goto out;
	}
	if (w - r->read_idx > r->nslots) {
		/* More reserved than fits: the writer ignored our read index. */
		r->st.overrun += w - r->read_idx - r->nslots;
		r->read_idx = w - r->nslots;
	}
	while (r->read_idx < w && (unsigned)n < max) {
		uint64_t idx = r->read_idx;
		struct jpring_slot *s = slot_at(r, idx);
		struct jring_record rec;

		/* Copy first, then validate the copy: the agent may change the
		 * shared slot at any time. */
		memcpy(&r->copy, s, sizeof(r->copy));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != idx + 1 || r->copy.seq != idx + 1) {
			if (r->stuck_idx != idx) {
				r->stuck_idx = idx;
				r->stuck_calls = 0;
			}
			if (++r->stuck_calls <= stuck_after)
				break;  /* a handler may still be writing it */
			r->st.stuck++;
			r->read_idx++;
			continue;
		}
		r->read_idx++;
		if (r->copy.num_frames < JPRING_MIN_ERROR || r->copy.num_frames > JPRING_MAX_FRAMES ||
		    r->copy.tid == 0 || !kind_valid(&r->copy)) {
			r->st.corrupt++;
			continue;
		}
		rec.tid = r->copy.tid;
		rec.num_frames = r->copy.num_frames;
		rec.time_ns = r->copy.time_ns;
		rec.frames = r->copy.frames;
		rec.kind = r->copy.kind & JPRING_KIND_MASK;
		rec.set = r->copy.kind >> JPRING_KIND_SET_SHIFT;
		rec.state = r->copy.state;
		rec.weight = r->copy.weight;
		r->st.records++;
		n++;
		cb(&rec, arg);
	}
out:
	__atomic_store_n(&h->read_idx, r->read_idx, __ATOMIC_RELEASE);
	return n;
}

void jring_get_stats(const struct jring *r, struct jring_stats *out)
{
	*out = r->st;
}
