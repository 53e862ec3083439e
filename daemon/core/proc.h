/* Small readers of /proc used by sessions and authorization. All take the
 * proc root ("/proc" normally) so tests can point elsewhere. */
#ifndef JPROF_PROC_H
#define JPROF_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Thread (tid > 0) or process (tid == 0) name from .../comm, newline
 * stripped, sanitized to printable ASCII. 0 or -errno. */
int proc_read_comm(pid_t pid, pid_t tid, char *buf, size_t len);

/* Real, effective, saved and filesystem uids from /proc/PID/status. */
int proc_read_uids(pid_t pid, uid_t uids[4]);

/* Calls fn for every tid in /proc/PID/task; stops when fn returns non-zero
 * and returns that value. -errno if the directory cannot be read. */
int proc_foreach_task(pid_t pid, int (*fn)(pid_t tid, void *arg), void *arg);

/* Owner of /proc/PID: the process's euid, or 0 when it is not dumpable. */
int proc_dump_owner(pid_t pid, uid_t *out);

/* Thread ns_tid of process pid as seen in pid's own pid namespace, in our
 * namespace. -ESRCH when pid has no such thread. */
int proc_ns_tid_to_host(pid_t pid, pid_t ns_tid, pid_t *host);

/* When pid started, as CLOCK_BOOTTIME nanoseconds (/proc/PID/stat). */
int proc_read_start_boottime(pid_t pid, uint64_t *out_ns);

#endif
