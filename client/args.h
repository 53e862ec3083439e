/* What a user types on jprofctl's command line: times, spans and pids.
 * Pure functions; each returns 0, -EINVAL (malformed) or -ERANGE. */
#ifndef JPROF_CLIENT_ARGS_H
#define JPROF_CLIENT_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* "<digits>[.<digits>]<unit>" in microseconds. Units: us, ms, s, m, h.
 * Without a unit bare_unit_us applies, or it is an error when that is 0.
 * Exact integer arithmetic: "1.5s" is 1500000, "0.1us" is rejected. */
int args_parse_time_us(const char *s, uint64_t bare_unit_us, uint64_t *out);
/* -d: a bare number means seconds; whole milliseconds, 1 ms to 24 h. */
int args_parse_duration_ms(const char *s, uint64_t *ms);
/* -i: a unit is required, since "10" could mean anything from µs to s. */
int args_parse_interval_us(const char *s, uint64_t *us);
/* --threshold: a unit is required as for -i; 1 us to 10 s. */
int args_parse_threshold_us(const char *s, uint64_t *us);
/* --alloc: bytes, a bare number or with a binary suffix k, m or g (512k is
 * 524288); JPROF_ALLOC_BYTES_MIN to JPROF_ALLOC_BYTES_MAX. */
int args_parse_alloc_bytes(const char *s, uint64_t *bytes);
/* -e: one event or a comma-separated list (jprof_event_list_parse): the
 * events as bits (1 << index in jprof_events), or -EINVAL with why filled. */
int args_parse_events(const char *s, unsigned *mask, char *why, size_t len);
/* A span back from now: whole milliseconds of at most 24 h. */
int args_parse_ago_ms(const char *s, int64_t *ms);
/* A positive pid that fits the protocol's int32. */
int args_parse_pid(const char *s, int32_t *pid);

#endif
