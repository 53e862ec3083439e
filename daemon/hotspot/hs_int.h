/* What the hotspot layer's files share; not for other layers. */
#ifndef JPROF_HS_INT_H
#define JPROF_HS_INT_H

#include "hs.h"

struct hs_name_slot {
	uint64_t method;              /* 0: empty */
	uint64_t used;                /* names_tick when last used */
	/* What the name was derived from, compared again on every hit */
	uint64_t cmethod, cpool, klass, class_sym, name_sym;
	uint16_t name_index, class_len, name_len;
	char *text;                   /* "package.Class.method" */
	char *raw;                    /* the class Symbol's bytes, then the method name's */
};

struct hs {
	pid_t pid;
	struct hs_offsets off;
	struct hs_stats st;
	uint64_t budget;              /* bytes hs_read may still read while loading; 0: no bound */
	bool loading;
	char release[64];
	struct hs_name_slot *names;   /* HS_NAME_CACHE slots, allocated on first use */
	size_t names_bytes;           /* held by the slots' strings */
	uint64_t names_tick;
};

/* len bytes at addr of the process into buf: 0, -EFAULT (not all of it
 * mapped), -ESRCH, -EPERM, -EBADMSG (over the load budget). */
int hs_read(struct hs *h, uint64_t addr, void *buf, size_t len);
/* A NUL-terminated string of at most size bytes (NUL included) at addr:
 * its length, -EBADMSG when no NUL comes within size bytes, -EFAULT. */
int hs_read_str(struct hs *h, uint64_t addr, char *buf, size_t size);

/* hs_vmstructs.c: fills h->off from the process's tables. */
int hs_vmstructs_load(struct hs *h, const char *proc_root);

#endif
