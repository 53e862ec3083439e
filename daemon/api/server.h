/* The control socket's transport: Unix stream listeners, one connection per
 * client with its SO_PEERCRED/SO_PEERGROUPS credentials read at accept,
 * input framed into newline-terminated lines, replies queued per client.
 * It knows no request kinds: every complete line goes to the dispatcher's
 * hook together with the client's credentials (requests.c answers it).
 *
 * Fairness and bounds: lines are at most JPROF_PROTO_MAX_REQUEST bytes
 * (longer ones are answered with line_too_long and skipped up to the next
 * newline), a client is read for at most 1 MiB per wakeup and its requests
 * are handled 16 per loop round (the rest wait, unread), and a client
 * that does not read its replies is dropped past max_output queued bytes
 * or past its uid's quota of queued bytes (quota.h); a reply that could
 * never fit is replaced by a limit_exceeded error. Connections are charged
 * to the peer's uid (refused with limit_exceeded past its quota or past
 * the share of max_clients kept for uids other than root). When accept()
 * runs out of fds the listener rests (50 ms, doubling up to 1 s).
 * A connection whose first bytes are the agent protocol's magic ("JPAG") is
 * handed to the agent link instead. */
#ifndef JPROF_SERVER_H
#define JPROF_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct agentlink;
struct authz_peer;
struct loop;
struct quota;
struct server;
struct server_client;

struct server_hooks {
	/* One complete, non-blank line (without its newline) from c. */
	void (*line)(void *ctx, struct server_client *c, const struct authz_peer *peer,
		     const char *line, size_t len);
	/* c is about to be freed (it hung up, was dropped, or the server
	 * stops); nothing more may be sent to it. */
	void (*gone)(void *ctx, struct server_client *c);
	void *ctx;
};

struct server_config {
	gid_t group;                     /* authorized group, (gid_t)-1 = none */
	unsigned max_clients;            /* default 1024 */
	size_t max_output;               /* queued bytes per client before it is dropped; default 512 MiB */
	size_t client_data_size;         /* zeroed bytes per client for the dispatcher */
	struct agentlink *agents;        /* NULL: agent connections are refused as bad JSON */
	struct quota *quota;             /* per-uid connections and queued bytes; NULL: none */
};

int server_new(struct loop *loop, const struct server_config *cfg, const struct server_hooks *hooks,
	       struct server **out);
/* Flushes what it can to every client, closes them (calling hooks.gone)
 * and the listeners; NULL-safe. */
void server_free(struct server *s);

/* Serves a listening socket (taken: closed by server_free). */
int server_add_listener(struct server *s, int fd);

/* Creates a listening socket at path, mode 0666 (authorization is per request),
 * creating the parent directory (0755) if missing and replacing a stale
 * socket. Refuses to replace anything that is not a socket. */
int server_listen_unix(const char *path, int *out_fd);

unsigned server_client_count(const struct server *s);

/* Queues one complete line for c and sends what the socket takes now. A
 * client past max_output is marked dead and dropped after its callback. */
void server_client_send(struct server_client *c, const char *line, size_t len);
/* Holds c's requests while an answer of it is prepared elsewhere (the render
 * worker): its further lines wait unhandled and it is not read, so that its
 * answers keep the order of its requests; on false they are taken up in the
 * next loop round. Replies may still be sent to a held client. */
void server_client_hold(struct server_client *c, bool on);
/* Sends {"ok":false,"error":{code,message}} with the id when has_id. */
void server_client_send_error(struct server_client *c, int64_t id, bool has_id, const char *code,
			      const char *message);
/* The cfg.client_data_size bytes kept for the dispatcher, zeroed at accept. */
void *server_client_data(struct server_client *c);

#endif
