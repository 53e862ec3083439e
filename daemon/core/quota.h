/* Per-uid quotas: how much of each resource one uid may hold at once
 * (control connections, agent connections, recordings, perf events, bytes of
 * replies queued for it), and how much every uid but root may hold together,
 * so that root (uid 0) always finds a reserve.
 *
 * The modules that hold a resource charge it here when they take it and give
 * it back when they free it (server.c, agentlink.c, req_record.c,
 * threadset.c); this module only counts. uid 0 has no per-uid quota. Every
 * function accepts a NULL quota, which counts nothing and refuses nothing. */
#ifndef JPROF_QUOTA_H
#define JPROF_QUOTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum quota_kind {
	QUOTA_CLIENTS,        /* control socket connections */
	QUOTA_AGENTS,         /* JVM agent connections */
	QUOTA_SESSIONS,       /* recordings */
	QUOTA_PERF_EVENTS,    /* per-thread perf events over all of a uid's recordings */
	QUOTA_OUTPUT,         /* bytes of replies queued, over all of a uid's connections */
	QUOTA_NKINDS,
};

/* The share of each total kept for root: total / QUOTA_ROOT_SHARE (at least
 * 1 when the total is above 1). */
#define QUOTA_ROOT_SHARE 16

struct quota_limits {
	uint64_t per_uid[QUOTA_NKINDS];  /* for each uid but 0; 0 = no limit */
	uint64_t total[QUOTA_NKINDS];    /* all uids together; 0 = no limit */
};

struct quota;

int quota_new(const struct quota_limits *lim, struct quota **out);
void quota_free(struct quota *q);

/* Charges n units of k to uid. 0, -EDQUOT when uid's own quota would be
 * passed, -EUSERS when only the root reserve of the total is left (or, for
 * root, the total itself would be passed), -ENOMEM. Nothing is charged on
 * failure. */
int quota_take(struct quota *q, uid_t uid, enum quota_kind k, uint64_t n);
/* Gives back n units that quota_take charged to uid. */
void quota_give(struct quota *q, uid_t uid, enum quota_kind k, uint64_t n);

uint64_t quota_used(const struct quota *q, uid_t uid, enum quota_kind k);
uint64_t quota_used_total(const struct quota *q, enum quota_kind k);
/* uid's own limit (0 = none; always 0 for uid 0). */
uint64_t quota_limit(const struct quota *q, uid_t uid, enum quota_kind k);

/* One sentence saying why quota_take(q, uid, k, n) failed with err, such as
 * "uid 65534 holds 64 connections, its quota (max_clients_per_uid)". */
void quota_explain(const struct quota *q, uid_t uid, enum quota_kind k, int err, char *buf,
		   size_t len);

#endif
