/* The HTTP listeners for fleet scrapers (off unless configured): Prometheus
 * metrics at /metrics, the Go net/http/pprof scrape contract at
 * /debug/pprof/profile, and an index page at /. A TCP listener, a Unix
 * socket listener, or both; libmicrohttpd runs inside the daemon's one epoll
 * loop (MHD_USE_EPOLL: each listener's epoll fd is watched by the loop, a
 * loop timer follows MHD_get_timeout); no threads.
 *
 * Who may read what (docs/operations.md, "HTTP access"):
 * - profile data (/debug/pprof/...) needs authorization on every listener,
 *   loopback included: the bearer token ("Authorization: Bearer TOKEN",
 *   compared in constant time), or on the Unix socket a peer that is root or
 *   in the configured group (SO_PEERCRED, as the control socket's whole-host
 *   rule). Without either: 401 when a token is configured, else 403 saying
 *   how to configure one;
 * - /metrics and / carry only daemon-wide counters (no pid, comm, cgroup,
 *   unit, path, stack or address): they need the token on the TCP listener
 *   when one is configured, and are open otherwise.
 *
 * A profile request waits its N seconds suspended under a loop timer, then
 * gets the host view's samples of that time as gzipped pprof (http_pprof.h:
 * shared windows, cancel on hang-up, bounds). */
#ifndef JPROF_HTTP_H
#define JPROF_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "metrics.h"

struct agentlink;
struct control;
struct hostview;
struct loop;
struct MHD_Response;
struct sampler;
struct render;
struct session_mgr;
struct symbols;
struct http;

#define HTTP_DEFAULT_PORT 9464
#define HTTP_TOKEN_MIN 16            /* bytes; shorter tokens are refused */
#define HTTP_TOKEN_MAX 4096

struct http_config {
	const char *listen;              /* TCP "ADDR:PORT" (netaddr_parse), NULL: none */
	const char *socket;              /* Unix socket path, NULL: none */
	const char *token;               /* NULL: no bearer token */
	gid_t group;                     /* besides root, reads profiles on the Unix
					  * socket; (gid_t)-1: none */
	const char *group_name;          /* for messages */
	unsigned max_profiles;           /* distinct profile windows open; default 8, then 503 */
	unsigned max_seconds;            /* seconds=N is clamped to 1..this; default 600 */
	unsigned default_seconds;        /* when seconds is missing or <= 0; default 30 */
	unsigned max_connections;        /* per listener, default 64; also bounds the
					  * waiting profile requests */
};

/* Where the numbers and profiles come from (borrowed; any may be NULL
 * except loop, which the caller keeps alive longer than the listener). A
 * NULL hostview answers profile requests with 503 (host view off). */
struct http_sources {
	struct sampler *sampler;
	struct symbols *symbols;
	struct agentlink *agents;
	struct hostview *hostview;
	struct session_mgr *sessions;
	struct control *control;
	struct render *render;           /* where scrapes are rendered; NULL: on the loop */
	unsigned host_rate_hz;           /* for the profile's period */
};

/* Reads the bearer token from path: a regular file, not readable or writable
 * by others, holding one token of HTTP_TOKEN_MIN..HTTP_TOKEN_MAX visible
 * ASCII bytes (a final newline is ignored). *out is malloc'd. -errno with a
 * message naming path in err. */
int http_token_read(const char *path, char **out, char *err, size_t errlen);

/* At least one of cfg->listen and cfg->socket. The Unix socket is created
 * (mode 0666: authorization is per request) and removed by http_free. */
int http_new(struct loop *loop, const struct http_config *cfg, const struct http_sources *src,
	     struct http **out);
/* Answers waiting profile requests with 503 and stops listening; NULL-safe. */
void http_free(struct http *h);

/* The bound TCP port (useful with port 0); 0 without a TCP listener. */
unsigned http_port(const struct http *h);
void http_get_stats(const struct http *h, struct metrics_http *out);

/* For http_pprof.c: a text response with Cache-Control: no-store, and
 * X-Go-Pprof: 1 when go_pprof. NULL on ENOMEM. */
#define HTTP_TEXT_PLAIN "text/plain; charset=utf-8"
struct MHD_Response *http_text_response(const char *ctype, bool go_pprof, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Constant-time comparison of a presented token with the expected one: the
 * time depends only on the expected token's length. */
bool http_token_equal(const char *expected, const char *presented);

#endif
