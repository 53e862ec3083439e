/* /debug/pprof/profile for http.c: the Go net/http/pprof scrape contract
 * over the host view. Errors are text/plain with X-Go-Pprof: 1, which
 * `go tool pprof` prints as the message.
 *
 * A request joins a window: one host-view tap and one timer for its N
 * seconds. Requests with the same filter and seconds that arrive before the
 * window's tap has seen a sample (within one drain of each other) join the
 * same window and get the same bytes, rendered once; any other request
 * opens its own window. Requests wait suspended (MHD_suspend_connection);
 * MHD does not notice a suspended client that hangs up, so this module
 * watches each waiting socket for the hang-up itself and then drops the
 * request at once, and its window (tap and timer) with its last request.
 *
 * Bounds: max_windows open windows and max_waiting waiting requests, then
 * 503 with a message saying which bound was hit; root's requests (on the
 * Unix socket) have HTTP_PPROF_ROOT_RESERVE more of each, so root is
 * answered while token holders fill the rest. */
#ifndef JPROF_HTTP_PPROF_H
#define JPROF_HTTP_PPROF_H

#include <stdbool.h>
#include <stdint.h>

struct hostview;
struct loop;
struct render;
struct MHD_Connection;
struct MHD_Response;
struct http_pprof;

#define HTTP_PPROF_ROOT_RESERVE 2

struct http_pprof_config {
	struct loop *loop;
	struct hostview *hostview;       /* NULL: answered with 503 (host view off) */
	unsigned host_rate_hz;           /* for the profile's period */
	struct render *render;           /* where windows are rendered; NULL: on the loop */
	unsigned max_windows;            /* distinct windows open at once, then 503 */
	unsigned max_waiting;            /* requests waiting in all windows, then 503 */
	unsigned max_seconds;            /* seconds=N is clamped to 1..this */
	unsigned default_seconds;        /* when seconds is missing or <= 0 */
	void (*resumed)(void *ctx);      /* a waiting request is ready: run MHD */
	void *ctx;
};

struct http_pprof_stats {
	unsigned waiting;                /* requests waiting now */
	unsigned windows;                /* windows open now */
	uint64_t rejected_busy;          /* 503 past max_windows or max_waiting */
	uint64_t shared;                 /* requests that joined an open window */
	uint64_t cancelled;              /* requests dropped because the client hung up */
};

int http_pprof_new(const struct http_pprof_config *cfg, struct http_pprof **out);
/* Frees the requests MHD never handed back; call after MHD stopped. NULL-safe. */
void http_pprof_free(struct http_pprof *pp);

/* Answers a profile request, on its first call and after its resume
 * (*con_cls is MHD's per-connection pointer); root: the client is root and
 * may use the reserve. Returns the response with
 * *status; NULL with *status 0 when the request now waits suspended; NULL
 * with another status when the connection is to be closed without an
 * answer (out of memory). */
struct MHD_Response *http_pprof_answer(struct http_pprof *pp, struct MHD_Connection *c,
				       void **con_cls, bool root, unsigned *status);
/* MHD finished a connection whose *con_cls this module set. */
void http_pprof_completed(struct http_pprof *pp, void *con_cls);
/* Shutdown: ends every window and resumes its requests; each is answered
 * 503 ("jprofd is shutting down") on MHD's next run. */
void http_pprof_resume_all(struct http_pprof *pp);

void http_pprof_get_stats(const struct http_pprof *pp, struct http_pprof_stats *out);

#endif
