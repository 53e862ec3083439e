#include "quota.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "htab.h"

struct usage {
	uint64_t used[QUOTA_NKINDS];
};

struct quota {
	struct quota_limits lim;
	uint64_t total_used[QUOTA_NKINDS];
	struct htab_map uids;       /* uid -> struct usage *, only while it holds something */
};

/* For messages: what is counted, and the setting that sizes it per uid. */
static const struct {
	const char *what;
	const char *key;
} kinds[QUOTA_NKINDS] = {
	[QUOTA_CLIENTS] = { "connections", "max_clients_per_uid" },
	[QUOTA_AGENTS] = { "agent connections", "max_agents_per_uid" },
	[QUOTA_SESSIONS] = { "recordings", "max_sessions_per_uid" },
	[QUOTA_PERF_EVENTS] = { "perf events", "max_perf_events_per_uid" },
	[QUOTA_OUTPUT] = { "bytes of unread replies", "max_output_per_uid" },
};

int quota_new(const struct quota_limits *lim, struct quota **out)
{
	struct quota *q = calloc(1, sizeof(*q));

	*out = NULL;
	if (!q)
		return -ENOMEM;
	q->lim = *lim;
	*out = q;
	return 0;
}

static bool free_usage(uint64_t key, uint64_t *val, void *arg)
{
	free((struct usage *)(uintptr_t)*val);
	return false;
}

void quota_free(struct quota *q)
{
	if (!q)
		return;
	htab_map_retain(&q->uids, free_usage, NULL);
	htab_map_release(&q->uids);
	free(q);
}

static struct usage *usage_of(const struct quota *q, uid_t uid)
{
	uint64_t *v = htab_map_get(&q->uids, uid);

	return v ? (struct usage *)(uintptr_t)*v : NULL;
}

/* What uids other than root may hold together. */
static uint64_t shared_total(const struct quota *q, enum quota_kind k)
{
	uint64_t total = q->lim.total[k], reserve = total / QUOTA_ROOT_SHARE;

	if (reserve == 0 && total > 1)
		reserve = 1;
	return total - reserve;
}

uint64_t quota_limit(const struct quota *q, uid_t uid, enum quota_kind k)
{
	return q && uid != 0 ? q->lim.per_uid[k] : 0;
}

int quota_take(struct quota *q, uid_t uid, enum quota_kind k, uint64_t n)
{
	uint64_t own = quota_limit(q, uid, k), total, *v;
	struct usage *u;
	int r;

	if (!q || n == 0)
		return 0;
	total = uid == 0 ? q->lim.total[k] : shared_total(q, k);
	if (q->lim.total[k] && q->total_used[k] + n > total)
		return -EUSERS;
	u = usage_of(q, uid);
	if (own && (u ? u->used[k] : 0) + n > own)
		return -EDQUOT;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return -ENOMEM;
		r = htab_map_upsert(&q->uids, uid, &v);
		if (r < 0) {
			free(u);
			return r;
		}
		*v = (uint64_t)(uintptr_t)u;
	}
	u->used[k] += n;
	q->total_used[k] += n;
	return 0;
}

void quota_give(struct quota *q, uid_t uid, enum quota_kind k, uint64_t n)
{
	struct usage *u;

	if (!q || n == 0)
		return;
	u = usage_of(q, uid);
	if (!u)
		return;
	/* Never below zero: a give without its take is a bug, not a credit. */
	n = n < u->used[k] ? n : u->used[k];
	u->used[k] -= n;
	q->total_used[k] -= n;
	for (int i = 0; i < QUOTA_NKINDS; i++)
		if (u->used[i])
			return;
	htab_map_del(&q->uids, uid, NULL);
	free(u);
}

uint64_t quota_used(const struct quota *q, uid_t uid, enum quota_kind k)
{
	struct usage *u = q ? usage_of(q, uid) : NULL;

	return u ? u->used[k] : 0;
}

uint64_t quota_used_total(const struct quota *q, enum quota_kind k)
{
	return q ? q->total_used[k] : 0;
}

void quota_explain(const struct quota *q, uid_t uid, enum quota_kind k, int err, char *buf,
		   size_t len)
{
	if (!q || (unsigned)k >= QUOTA_NKINDS) {
		snprintf(buf, len, "over a limit");
		return;
	}
	if (err == -EDQUOT)
		snprintf(buf, len, "uid %u holds %llu %s, its quota (%s = %llu)", (unsigned)uid,
			 (unsigned long long)quota_used(q, uid, k), kinds[k].what, kinds[k].key,
			 (unsigned long long)q->lim.per_uid[k]);
	else if (err == -EUSERS && uid != 0)
		snprintf(buf, len, "jprofd holds %llu %s, all it gives to users other than root",
			 (unsigned long long)q->total_used[k], kinds[k].what);
	else if (err == -EUSERS)
		snprintf(buf, len, "jprofd holds %llu %s, its limit", (unsigned long long)q->total_used[k],
			 kinds[k].what);
	else
		snprintf(buf, len, "cannot count %s: out of memory", kinds[k].what);
}
