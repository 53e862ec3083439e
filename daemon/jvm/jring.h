/* The shared-memory sample ring of one JVM agent (layout in
 * proto/jprof_agent.h). The daemon creates it (memfd, sealed so the agent can
 * neither shrink nor grow it), hands the fd to the agent and reads what the
 * agent's signal handlers write. Everything in the mapping is hostile input:
 * the reader keeps its own geometry and read position, copies each slot
 * before validating it, bounds its work per call, and counts what it had to
 * reject instead of trusting it. */
#ifndef JPROF_JRING_H
#define JPROF_JRING_H

#include <stdbool.h>
#include <stdint.h>

#include "jprof_agent.h"

struct jring;

struct jring_record {
	uint32_t tid;                 /* agent's namespace tid, unchecked */
	int32_t num_frames;           /* 0..JPRING_MAX_FRAMES, or JPRING_* error */
	uint64_t time_ns;
	const struct jpring_frame *frames;  /* private copy, valid during the callback */
	/* Checked: kind is a known enum jpring_kind; for JPRING_KIND_WALL,
	 * state a known enum jpring_state and weight 1..JPRING_WALL_MAX_WEIGHT;
	 * for CPU records both 0. */
	uint16_t kind, state;
	uint32_t weight;
	uint16_t set;                 /* the event set whose record it is, < JPAG_MAX_SETS */
};

struct jring_stats {
	uint64_t records;             /* delivered */
	uint64_t agent_dropped;       /* the agent says it found the ring full */
	uint64_t overrun;             /* slots the write index ran past before we read them */
	uint64_t corrupt;             /* slots or headers that failed validation */
	uint64_t stuck;               /* reserved slots never committed (skipped) */
	bool header_corrupt;          /* magic/version/geometry or indices were tampered with */
};

/* Creates a ring of nslots slots. *memfd_out is the fd to pass to the agent
 * (O_CLOEXEC; the caller closes it after sending). */
int jring_new(uint32_t nslots, struct jring **out, int *memfd_out);
void jring_free(struct jring *r);
uint32_t jring_bytes(const struct jring *r);
uint32_t jring_nslots(const struct jring *r);

/* Delivers at most max committed records in order; returns how many were
 * delivered or -errno. A slot reserved but not yet committed ends the call;
 * one that stays uncommitted across `stuck_after` calls is skipped. */
int jring_read(struct jring *r, unsigned max, unsigned stuck_after,
	       void (*cb)(const struct jring_record *rec, void *arg), void *arg);

void jring_get_stats(const struct jring *r, struct jring_stats *out);

/* For tests: the writable mapping, as the agent sees it. */
void *jring_mapping(struct jring *r);

#endif
