/* What a sample says about its process besides the stack: the name and the
 * labels (cgroup v2 path, systemd unit, container id), read from /proc once
 * per process and cached (re-read after 2 s, so a process moved to another
 * cgroup is followed; trimmed of processes unseen for 30 s, and of exited
 * ones after 2 s). The one place the daemon reads these from /proc for
 * samples.
 *
 * A process is (pid, start time): samples are drained up to a second after
 * they were taken, and by then their process may have exited and another
 * taken its pid. Names are cached with the start time they were read for,
 * and /proc is read only between two reads of the start time that match the
 * sample's, so a sample never gets the names of a later process. */
#ifndef JPROF_PROCINFO_H
#define JPROF_PROCINFO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sample.h"

struct procinfo;

int procinfo_new(struct procinfo **out);
void procinfo_free(struct procinfo *pi);

/* A process start time from BPF (task start_boottime, ns) at the resolution
 * /proc/PID/stat has (clock ticks): the identity built samples carry, equal
 * to what proc_read_start_boottime() reads for the same process. */
uint64_t procinfo_start_identity(uint64_t boottime_ns);

/* Names and labels of process (pid, start_ns) (start_ns as
 * procinfo_start_identity(); 0 = whichever process has pid). "[exited]"
 * and no labels when it is gone and was not cached, or when pid now names
 * another process. now_ns: CLOCK_MONOTONIC, 0 = read the clock. The strings
 * stay valid until the next call into pi. */
int procinfo_get(struct procinfo *pi, pid_t pid, uint64_t start_ns, uint64_t now_ns,
		 struct sample_names *out);
/* /proc/PID/task/TID/comm into buf; "[exited]" if gone, or if start_ns is
 * set and pid now names another process. Returns buf. */
const char *procinfo_thread_name(pid_t pid, uint64_t start_ns, pid_t tid, char *buf, size_t len);
/* Trims the cache (at most every 2 s, whatever the call rate). */
void procinfo_expire(struct procinfo *pi, uint64_t now_ns);

/* Label parsers (exposed for tests). cgroup: the path from /proc/PID/cgroup
 * text (the "0::" line, else "name=systemd", else the first). unit: the
 * deepest ".service"/".scope" component of a cgroup path. container: the
 * deepest 64-hex-digit id in a cgroup path. 0, -ENOENT, -ENAMETOOLONG. */
int procinfo_parse_cgroup(const char *text, char *path, size_t len);
int procinfo_parse_unit(const char *cgroup, char *unit, size_t len);
int procinfo_parse_container(const char *cgroup, char *id, size_t len);

#endif
