/* The agent thread and everything it owns: the connection to jprofd, the
 * protocol, the per-thread perf fds and the recording's lifecycle. Other
 * threads only queue work for it (link_thread_event, link_kick). */
#ifndef JPROF_AGENT_LINK_H
#define JPROF_AGENT_LINK_H

#include <stdbool.h>
#include <stdint.h>

/* Creates the wakeup eventfd. Returns 0 or -errno. */
int link_init(const char *socket_path);
/* Starts the agent thread (once; later calls are no-ops). */
int link_start(void);
/* A later attach: use socket_path from now on (if not NULL) and, if
 * disconnected, reconnect at once. */
void link_kick(const char *socket_path);
/* From JVMTI ThreadStart / ThreadEnd on the thread itself; name: the Java
 * thread's name (copied) or NULL, java_id its java.lang.Thread id (0: not
 * known). Cheap and lock-free when no recording runs. */
void link_thread_event(uint32_t tid, bool started, const char *name, uint64_t java_id);
/* Wakes the agent thread (queued event records to send). Any thread. */
void link_notify(void);
/* True while a recording runs (thread events are wanted). */
bool link_is_recording(void);
/* VMDeath: the handler stops calling into the JVM, the thread disconnects. */
void link_vm_death(void);

#endif
