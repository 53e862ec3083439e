/* Internals shared by the join's files: jvmjoin.c (queues, bounds,
 * joining) and jvmjoin_names.c (method ids and their names). Not for other
 * modules. */
#ifndef JPROF_JVMJOIN_INT_H
#define JPROF_JVMJOIN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "htab.h"
#include "jvmjoin.h"

enum { M_NEW = 0, M_ASKED, M_NAMED, M_UNKNOWN };

struct jmethod {
	uint64_t id;
	uint8_t state;
	char *cls, *name, *sig;   /* cls dotted ("java.lang.String") */
	struct jpag_line *lines;
	unsigned nlines;
};

/* Queue elements begin with their time: the queues are heaps on it. */
struct bpf_rec {
	uint64_t time;
	uint32_t nk, nu;
	bool kernel_mode, kstack_lost, ustack_lost;
	bool host_feed;
	uint64_t *ips;            /* nk kernel then nu user, leaf first each */
};

struct agent_rec {
	uint64_t time;
	int32_t num;
	struct jvm_frame *frames; /* leaf first, as ASGCT writes them */
};

/* Per thread, two binary min-heaps on time (b[0] and a[0] the earliest):
 * records of one thread arrive in time order unless the agent lies, and a
 * lying agent must not make each insert cost the queue's length. */
struct tidq {
	uint32_t tid;
	struct bpf_rec *b;
	size_t nb, capb;
	struct agent_rec *a;
	size_t na, capa;
};

struct held {
	uint64_t created;
	struct bpf_rec b;
	uint32_t tid;
	unsigned njava;
	unsigned settled;         /* java[0..settled) are named or unnameable */
	const char *marker;       /* at the leaf of the Java frames, or NULL */
	struct jvm_frame *java;   /* root first */
	/* An event sample (jvm_join_add_event), else event 0: */
	int event;
	char *leaf;               /* the class frame, owned */
	const char *state;        /* wall records: the state frame (static), or NULL */
	uint64_t values[JVM_EVENT_VALUES];
};

struct tname {
	uint32_t tid;             /* host tid */
	char *name;               /* cleaned */
	uint64_t java_id;         /* java.lang.Thread's id; 0: not known */
};

struct jvm_budget {
	size_t used, peak, limit;
	unsigned refs;
};

/* Queues and methods live in arrays (in the order first seen); the maps
 * give a tid or method id its index. Every heap byte is counted in bytes
 * (the maps add theirs themselves) and, through synced, in the budget. */
struct jvm_join {
	struct jvm_join_opts o;
	struct tidq *q;
	size_t qcap, nq;
	size_t run_next;            /* jvm_join_run_some resumes at this queue */
	struct htab_map q_of_tid;
	struct htab_map host_of_ns;   /* agent's namespace tid -> host tid */
	struct jmethod *m;
	size_t mcap, nm;
	struct htab_map m_of_id;
	uint64_t *wanted;             /* [wanted_head, nwanted) not handed out yet */
	size_t wanted_head, nwanted, capwanted;
	size_t unanswered;            /* methods in M_ASKED */
	struct tname *tn;             /* Java thread names, in the order first seen */
	size_t ntn, tncap;
	struct htab_map tn_of_tid;
	struct held *held;            /* in the order created */
	size_t nheld, capheld;
	bool names_changed;           /* since the held samples were last checked */
	size_t pending;               /* records queued + held */
	size_t bytes, synced;         /* heap bytes; the part already in the budget */
	struct jvm_budget *budget;
	bool limit_reported;
	struct jvm_join_stats st;
};

/* memmove that accepts (NULL, 0): empty queues have no storage yet. */
static inline void jvm_join_move(void *dst, const void *src, size_t n)
{
	if (n)
		memmove(dst, src, n);
}

/* jvmjoin.c: the bounds. 0 when `more` heap bytes fit this join's and the
 * uid's bounds; else -ENOBUFS (this join's) or -EDQUOT (the uid's), counted
 * in the stats when count is set. */
int jvm_join_bytes_fit(struct jvm_join *j, size_t more, bool count);
void jvm_join_bytes_add(struct jvm_join *j, size_t n);
/* *p grows to hold need elements (within the bounds): 0 or -errno. */
int jvm_join_grow(struct jvm_join *j, void **p, size_t *cap, size_t need, size_t elem);
/* Entry of key in a map from key to array index: the index of an existing
 * one, or a new zeroed element appended to the array. NULL on 0 keys (never
 * valid), at the bounds and on ENOMEM. */
void *jvm_join_table_get(struct jvm_join *j, struct htab_map *map, uint64_t key, bool create,
			 void **arr, size_t *n, size_t *cap, size_t elem);

/* jvmjoin_names.c */
struct jmethod *jvm_join_method_get(const struct jvm_join *j, uint64_t id);
/* Named, or never to be named (unknown, or untracked past the bounds). */
bool jvm_join_frame_settled(const struct jvm_join *j, const struct jvm_frame *f);
/* Adds the frames' methods to the table and asks for the new ones. */
void jvm_join_want(struct jvm_join *j, const struct jvm_frame *f, unsigned n);
void jvm_join_methods_free(struct jvm_join *j);
/* "byte[]", "java.lang.String" from a JVM class signature ("[B",
 * "Ljava/lang/String;"), cleaned like method names; malloc'd, or NULL. */
char *jvm_join_class_name(const char *sig, size_t len);

#endif
