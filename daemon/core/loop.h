/* The daemon's one epoll loop: fd watches and timers (timerfd). Sources are
 * freed only between dispatch rounds, so a callback may remove any source,
 * including one whose event is still pending in the same round. */
#ifndef JPROF_LOOP_H
#define JPROF_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_source;

typedef void (*loop_io_fn)(struct loop_source *src, int fd, uint32_t events, void *arg);
typedef void (*loop_timer_fn)(struct loop_source *src, void *arg);

int loop_new(struct loop **out);
/* Closes the epoll fd and frees every source (their fds are the callers'). */
void loop_free(struct loop *l);

/* Watches fd (borrowed: the caller closes it after loop_remove). */
int loop_add_io(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *arg,
		struct loop_source **out);
int loop_set_events(struct loop_source *src, uint32_t events);

/* A timer: first expiry after first_ms, then every interval_ms (0 = once). */
int loop_add_timer(struct loop *l, uint64_t first_ms, uint64_t interval_ms, loop_timer_fn fn,
		   void *arg, struct loop_source **out);

/* Stops watching; the source is freed after the current round. NULL-safe. */
void loop_remove(struct loop_source *src);

/* Runs until loop_quit(); returns 0, or -errno on an epoll failure. */
int loop_run(struct loop *l);
void loop_quit(struct loop *l);

#endif
