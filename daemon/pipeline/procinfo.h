/* What a sample says about its process besides the stack: the name and the
 * labels (cgroup v2 path, systemd unit, container id), read from /proc once
 * per process and cached (re-read after 2 s, so a process moved to another
 * cgroup is followed; trimmed of processes unseen for 30 s, and of exited
 * ones after 2 s). The one place the daemon reads these from /proc for
 * samples. */
#ifndef JPROF_PROCINFO_H
#define JPROF_PROCINFO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sample.h"

struct procinfo;

int procinfo_new(struct procinfo **out);
void procinfo_free(struct procinfo *pi);

/* Names and labels of pid ("[exited]" when it is gone). now_ns: CLOCK_MONOTONIC,
 * 0 = read the clock. The strings stay valid until the next call into pi. */
int procinfo_get(struct procinfo *pi, pid_t pid, uint64_t now_ns, struct sample_names *out);
/* /proc/PID/task/TID/comm into buf, "[exited]" if gone; returns buf. */
const char *procinfo_thread_name(pid_t pid, pid_t tid, char *buf, size_t len);
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
