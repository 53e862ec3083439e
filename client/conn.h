/* jprofctl's one connection to the daemon: connect and say hello, send a
 * request, read newline-delimited responses and match them to requests.
 * Functions that report to the user return 0 or an exit code (ctl.h). */
#ifndef JPROF_CLIENT_CONN_H
#define JPROF_CLIENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jprof_proto.h"

/* Request ids on our one connection. */
#define CONN_ID_HELLO 1
#define CONN_ID_COMMAND 2
#define CONN_ID_CANCEL 3

/* How long to wait for replies that need no work (hello, status, a send). */
#define CONN_REPLY_TIMEOUT_MS 15000
/* A profile can be large, but not this large: stop a runaway peer before it
 * exhausts our memory. */
#define CONN_MAX_LINE ((size_t)1 << 30)

struct conn {
	int fd;
	int wake_fd;      /* readable: conn_recv() returns -EINTR; -1 none */
	const char *path;
	char *buf;        /* received bytes; buf[0..len) */
	size_t len;
	size_t cap;
	size_t scanned;   /* bytes of buf known to hold no '\n' */
	size_t consumed;  /* length of the line handed out last, dropped on next read */
};

#define CONN_INIT { .fd = -1, .wake_fd = -1 }

/* Connects to the daemon at path and negotiates the protocol version. */
int conn_handshake(struct conn *c, const char *path);
void conn_close(struct conn *c);

int conn_send(struct conn *c, const struct jprof_request *req);
/* The next response (caller frees *resp). -EINTR when wake_fd became
 * readable (it is drained); timeout_ms < 0 waits forever. */
int conn_recv(struct conn *c, int timeout_ms, struct jprof_response *resp);
/* An answer to want_id: a response with that id, or an error without id. */
bool conn_is_answer(const struct jprof_response *resp, int64_t want_id);
/* 0 when resp is a successful answer to want_id, else reports why not. */
int conn_check_answer(const struct jprof_response *resp, int64_t want_id);
/* Sends req and waits for its successful answer (caller frees *resp). */
int conn_call(struct conn *c, const struct jprof_request *req, struct jprof_response *resp);

#endif
