/* Prometheus text exposition (format 0.0.4) of the daemon's health, built
 * from the modules' stats structs. Every family is named jprofd_*, has HELP
 * and TYPE lines, and counters end in _total. Pure formatting: the caller
 * gathers the inputs, so the unit test feeds fixed numbers. */
#ifndef JPROF_METRICS_H
#define JPROF_METRICS_H

#include <stdint.h>

#include "agentlink.h"
#include "buf.h"
#include "hostview.h"
#include "sampler.h"
#include "session.h"
#include "symbols.h"

/* The daemon process itself. */
struct metrics_self {
	double cpu_user_s, cpu_system_s;  /* getrusage(RUSAGE_SELF) */
	uint64_t rss_bytes;               /* /proc/self/statm resident pages */
	uint64_t virtual_bytes;           /* /proc/self/statm size */
	unsigned open_fds;                /* entries of /proc/self/fd */
	double start_time_s;              /* Unix time of the start */
};

struct metrics_http {
	uint64_t requests;                /* answered, any status */
	uint64_t unauthorized;            /* 401 and 403: no authorization */
	uint64_t rejected_busy;           /* 503 for too many profile requests */
	uint64_t profiles_shared;         /* joined an open window */
	uint64_t profiles_cancelled;      /* the client hung up while waiting */
	unsigned profiles_in_flight;      /* suspended /debug/pprof/profile */
	unsigned profile_windows;         /* their distinct windows (taps) */
};

/* NULL members are left out of the exposition (module not running). */
struct metrics_input {
	const char *version;
	const struct sampler_stats *sampler;
	const struct symbols_stats *symbols;
	const struct agentlink_stats *agents;
	const struct hostview_stats *hostview;
	const struct metrics_http *http;
	const struct metrics_self *self;
	const struct session_gate_stats *gate;
	unsigned sessions;
	unsigned clients;
};

/* Appends the exposition to out. 0 or -ENOMEM. */
int metrics_render(const struct metrics_input *in, struct buf *out);

/* Reads the daemon's own CPU time, memory and fds. 0 or -errno (members
 * that could not be read stay 0). */
int metrics_read_self(struct metrics_self *out);

#endif
