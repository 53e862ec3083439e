/* The HTTP listener for fleet scrapers (off unless configured): Prometheus
 * metrics at /metrics, the Go net/http/pprof scrape contract at
 * /debug/pprof/profile, and an index page at /. libmicrohttpd runs inside the
 * daemon's one epoll loop (MHD_USE_EPOLL: its epoll fd is watched by the
 * loop, a loop timer follows MHD_get_timeout); no threads.
 *
 * A profile request waits its N seconds suspended (MHD_suspend_connection)
 * under a loop timer, then gets the host view's samples of that time as
 * gzipped pprof. With a token configured, every request needs
 * "Authorization: Bearer TOKEN" (compared in constant time). */
#ifndef JPROF_HTTP_H
#define JPROF_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "metrics.h"

struct agentlink;
struct control;
struct hostview;
struct loop;
struct MHD_Response;
struct sampler;
struct session_mgr;
struct symbols;
struct http;

#define HTTP_DEFAULT_PORT 9464
#define HTTP_TOKEN_MIN 16            /* bytes; shorter tokens are refused */
#define HTTP_TOKEN_MAX 4096

struct http_config {
	const char *listen;              /* "ADDR:PORT", see http_addr_parse */
	const char *token;               /* NULL: no authentication */
	unsigned max_profiles;           /* waiting profile requests; default 8, then 503 */
	unsigned max_seconds;            /* seconds=N is clamped to 1..this; default 600 */
	unsigned default_seconds;        /* when seconds is missing or <= 0; default 30 */
	unsigned max_connections;        /* default 64 */
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
	unsigned host_rate_hz;           /* for the profile's period */
};

/* "ADDR:PORT", "[V6ADDR]:PORT", ":PORT" or "PORT" (127.0.0.1). Numeric
 * addresses only (no name lookups in the daemon). 0 or -EINVAL. */
int http_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len, bool *loopback);

/* Reads the bearer token from path: a regular file, not readable or writable
 * by others, holding one token of HTTP_TOKEN_MIN..HTTP_TOKEN_MAX visible
 * ASCII bytes (a final newline is ignored). *out is malloc'd. -errno with a
 * message naming path in err. */
int http_token_read(const char *path, char **out, char *err, size_t errlen);

int http_new(struct loop *loop, const struct http_config *cfg, const struct http_sources *src,
	     struct http **out);
/* Answers waiting profile requests with 503 and stops listening; NULL-safe. */
void http_free(struct http *h);

/* The bound port (useful with port 0). */
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
