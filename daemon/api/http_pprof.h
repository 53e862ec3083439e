/* /debug/pprof/profile for http.c: the Go net/http/pprof scrape contract
 * over the host view. A request opens a host-view tap, waits its N seconds
 * suspended (MHD_suspend_connection) under a loop timer, then is resumed
 * with the tap's samples rendered as gzipped pprof. Errors are text/plain
 * with X-Go-Pprof: 1, which `go tool pprof` prints as the message. */
#ifndef JPROF_HTTP_PPROF_H
#define JPROF_HTTP_PPROF_H

#include <stdint.h>

struct hostview;
struct loop;
struct MHD_Connection;
struct MHD_Response;
struct http_pprof;

struct http_pprof_config {
	struct loop *loop;
	struct hostview *hostview;       /* NULL: answered with 503 (host view off) */
	unsigned host_rate_hz;           /* for the profile's period */
	unsigned max_profiles;           /* waiting requests, then 503 */
	unsigned max_seconds;            /* seconds=N is clamped to 1..this */
	unsigned default_seconds;        /* when seconds is missing or <= 0 */
	void (*resumed)(void *ctx);      /* a waiting request is ready: run MHD */
	void *ctx;
};

int http_pprof_new(const struct http_pprof_config *cfg, struct http_pprof **out);
/* Frees the requests MHD never handed back; call after MHD stopped. NULL-safe. */
void http_pprof_free(struct http_pprof *pp);

/* Answers a profile request, on its first call and after its resume
 * (*con_cls is MHD's per-connection pointer). Returns the response with
 * *status; NULL with *status 0 when the request now waits suspended; NULL
 * with another status when out of memory. */
struct MHD_Response *http_pprof_answer(struct http_pprof *pp, struct MHD_Connection *c,
				       void **con_cls, unsigned *status);
/* MHD finished a connection whose *con_cls this module set. */
void http_pprof_completed(struct http_pprof *pp, void *con_cls);
/* Shutdown: stops every wait and resumes the connection; each is answered
 * 503 ("jprofd is shutting down") on MHD's next run. */
void http_pprof_resume_all(struct http_pprof *pp);

unsigned http_pprof_waiting(const struct http_pprof *pp);
uint64_t http_pprof_rejected(const struct http_pprof *pp);   /* 503 for too many waiting */

#endif
