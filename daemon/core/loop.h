/* The daemon's one event loop: fd watches, timers, signals and child
 * processes, on top of sd-event (libsystemd).
 *
 * Why a layer remains instead of sd_event_* everywhere:
 * - fd watches are dispatched in batches: they live in one epoll set that
 *   is a single sd-event source. sd-event runs one callback per iteration
 *   and polls its whole epoll set before each, so n fds ready at once cost
 *   O(n^2): 1000 clients asking at once took 6.5 times the CPU;
 * - fds are borrowed: the caller closes its fd after loop_remove, and
 *   loop_remove takes the fd out of epoll at once;
 * - a source is freed only after the current dispatch round, so a callback
 *   may remove any source, itself or one whose event is still pending, and
 *   a second loop_remove of the same source in that round is harmless;
 * - errors are -errno from one place, and callbacks return void: sd-event
 *   would disable a source whose callback returned an error;
 * - timers are in milliseconds, precise (sd-event would coalesce them within
 *   250 ms by default), and repeating ones keep a fixed rate like timerfd. */
#ifndef JPROF_LOOP_H
#define JPROF_LOOP_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct loop;
struct loop_source;

typedef void (*loop_io_fn)(struct loop_source *src, int fd, uint32_t events, void *arg);
typedef void (*loop_timer_fn)(struct loop_source *src, void *arg);
typedef void (*loop_signal_fn)(struct loop_source *src, int signo, void *arg);
typedef void (*loop_child_fn)(struct loop_source *src, const siginfo_t *si, void *arg);

int loop_new(struct loop **out);
/* Frees every source still added (their fds are the callers') and the loop. */
void loop_free(struct loop *l);

/* Watches fd (borrowed: the caller closes it after loop_remove). */
int loop_add_io(struct loop *l, int fd, uint32_t events, loop_io_fn fn, void *arg,
		struct loop_source **out);
int loop_set_events(struct loop_source *src, uint32_t events);

/* A timer: first expiry after first_ms, then every interval_ms (0 = once). */
int loop_add_timer(struct loop *l, uint64_t first_ms, uint64_t interval_ms, loop_timer_fn fn,
		   void *arg, struct loop_source **out);

/* Delivers signo from the loop. signo must already be blocked in every
 * thread (main does that; -EBUSY otherwise), so it never interrupts code. */
int loop_add_signal(struct loop *l, int signo, loop_signal_fn fn, void *arg,
		    struct loop_source **out);

/* Calls fn once when our child behind pidfd (borrowed) has exited; the loop
 * reaps the child after fn returns. SIGCHLD must be blocked (-EBUSY
 * otherwise), as sd-event requires. Removed before the exit, the source
 * leaves the child running and unreaped: its owner kills and reaps it. */
int loop_add_child(struct loop *l, int pidfd, loop_child_fn fn, void *arg,
		   struct loop_source **out);

/* Sends systemd WATCHDOG=1 from the loop when the service has a watchdog
 * (WATCHDOG_USEC): > 0 when it does, 0 when not, else -errno. */
int loop_enable_watchdog(struct loop *l);

/* Stops watching; the source is freed after the current round. NULL-safe. */
void loop_remove(struct loop_source *src);

/* Runs until loop_quit(); returns 0, or -errno when the loop itself fails.
 * May run again after it returned. */
int loop_run(struct loop *l);
void loop_quit(struct loop *l);

#endif
