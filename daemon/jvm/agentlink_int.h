/* Internals shared by the agent link's files: agentlink.c (connections,
 * the outgoing queue, the API) and agentlink_in.c (incoming frames). Not
 * for other modules. */
#ifndef JPROF_AGENTLINK_INT_H
#define JPROF_AGENTLINK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentlink.h"
#include "buf.h"
#include "proc.h"

#define AGENT_MAX_QUEUED (1u << 20)   /* bytes waiting for a slow agent */

struct outmsg {
	struct outmsg *next;
	char *data;
	size_t len, off;
	int fd;                       /* owned dup, sent with the first byte; -1 none */
	bool charged;                 /* fd counts in the agent uid's QUOTA_PERF_EVENTS */
};

struct agent {
	struct agentlink *link;
	struct agent *next;
	int fd;
	struct loop_source *src;
	pid_t pid;
	uid_t uid;
	struct proc_ident ident;      /* the process that connected, not just its pid */
	struct proc_exec_id exec;     /* what it ran then, as whom: an exec ends the binding */
	struct loop_source *exit_src; /* its pidfd: closes the connection at its exit */
	struct buf in;
	bool hello;
	bool dead;
	char jvm[64];
	struct outmsg *out_head, *out_tail;
	size_t out_bytes;
	bool want_out;
	struct jring *ring;           /* from START until the last recording lets go */
	/* The recordings served, one per event set (jprof_agent.h): bind[0]
	 * sent START, the others SET_ADD. */
	struct agent_bind {
		const struct agentlink_ops *ops;
		void *ctx;
	} bind[JPAG_MAX_SETS];
	bool sets_ok;                 /* its HELLO has JPAG_HELLO_SETS */
	int ev_set;                   /* the set whose alloc/lock events are on; -1 none */
};

struct agentlink {
	struct loop *loop;
	agentlink_connect_fn on_connect;
	void *arg;
	struct agent *agents;
	struct agentlink_stats st;
	struct quota *quota;          /* agent connections per uid; NULL: none */
};

/* agentlink.c */
/* A connection belongs to the process that made it, for as long as that
 * process runs: once it exits (its socket may live on in another process
 * it passed it to), or its pid names another process, the connection is
 * closed. Any context. */
int agent_verify(struct agent *a);
/* Queues one frame; fd (taken; -1: none) rides on its first byte. charged:
 * fd counts in the uid's perf events (given back once sent or dropped). */
int agent_send_fd(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd,
		  bool charged);
int agent_send(struct agent *a, uint16_t type, const void *payload, uint32_t len, int fd);
/* A frame of event set `set` (jpag_hdr.reserved). */
int agent_send_set(struct agent *a, uint16_t type, uint32_t set, const void *payload,
		   uint32_t len, int fd, bool charged);
/* Whether any recording is bound. */
bool agent_bound(const struct agent *a);
void agent_send_error(struct agent *a, int code, const char *msg);
void agent_free(struct agent *a);
void agent_unlink(struct agent *a);
/* Handler context only: tells the bound session, once. */
void agent_drop(struct agent *a, const char *why);

/* agentlink_in.c */
/* Handles every complete frame buffered in a->in; stops once a is dead. */
void agentlink_process_input(struct agent *a);

#endif
