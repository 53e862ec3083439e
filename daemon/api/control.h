/* Layer api (daemon/api/): what peers talk to (control socket, requests,
 * recordings, HTTP, metrics, configuration). Uses every layer below.
 *
 * The control server: Unix stream listeners, one connection per client,
 * newline-delimited JSON requests (proto/), authorization per request by the
 * peer's SO_PEERCRED credentials. The face main.c uses; server.c is the
 * transport, requests.c and req_*.c answer the requests. */
#ifndef JPROF_CONTROL_H
#define JPROF_CONTROL_H

#include <stdint.h>
#include <sys/types.h>

struct agentlink;
struct hostview;
struct loop;
struct quota;
struct render;
struct sampler;
struct session_mgr;
struct control;

struct control_config {
	gid_t group;                     /* authorized group, (gid_t)-1 = none */
	const char *group_name;          /* for messages */
	unsigned max_clients;            /* default 1024 */
	unsigned max_sessions_per_client;/* default 4 */
	size_t max_output;               /* queued bytes per client before it is dropped; default 512 MiB */
	struct quota *quota;             /* per-uid connections, queued bytes, recordings; NULL: none */
	struct render *render;           /* where host profiles are rendered; NULL: on the loop */
};

/* agents: where connections that speak the agent protocol go (NULL: refused
 * as bad JSON). */
int control_new(struct loop *loop, struct session_mgr *sessions, struct sampler *sampler,
		struct agentlink *agents, const struct control_config *cfg, struct control **out);
/* Flushes what it can to every client and closes them; NULL-safe. Sessions
 * must have been ended first (session_mgr_free tells their clients). */
void control_free(struct control *c);

/* Serves a listening socket (taken: closed by control_free). */
int control_add_listener(struct control *c, int fd);

/* Creates a listening socket at path, mode 0666 (authorization is per request),
 * creating the parent directory (0755) if missing and replacing a stale
 * socket. Refuses to replace anything that is not a socket. */
int control_listen_unix(const char *path, int *out_fd);

/* Serves "profile" requests from hv (NULL: the host view is off). */
void control_set_hostview(struct control *c, struct hostview *hv);

unsigned control_client_count(const struct control *c);

#endif
