/* jprofctl's common ground: exit codes and everything it says on stderr
 * (errors, usage errors, warnings, and the status line that progress redraws
 * in place and every other message clears first). */
#ifndef JPROF_CLIENT_CTL_H
#define JPROF_CLIENT_CTL_H

#include <stddef.h>
#include <stdint.h>

enum ctl_exit {
	CTL_EXIT_OK = 0,
	CTL_EXIT_ERROR = 1,
	CTL_EXIT_USAGE = 2,
	CTL_EXIT_NO_DAEMON = 3,
	CTL_EXIT_PERMISSION = 4,
	CTL_EXIT_NO_PROCESS = 5,
	CTL_EXIT_PROCESS_EXITED = 6,
};

/* A step's result meaning "not finished, go on"; exit codes are >= 0. */
#define CTL_CONTINUE (-1)

/* "jprofctl: <message>" on stderr. */
void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "jprofctl: warning: <message>" on stderr. */
void ctl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error of command cmd (NULL: the global options); returns
 * CTL_EXIT_USAGE. */
int ctl_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* getopt_long() returned ':' or '?': reports it; returns CTL_EXIT_USAGE. */
int ctl_bad_option(const char *cmd, char **argv, int o);
/* After getopt: CTL_CONTINUE when no operand is left, else a usage error. */
int ctl_no_operands(const char *cmd, int argc, char **argv);

/* The status line: replaces what it showed before, stays until cleared. */
void ctl_status_show(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ctl_status_clear(void);

/* Flushes stdout: CTL_EXIT_OK, or CTL_EXIT_ERROR after saying why. */
int ctl_flush_stdout(void);

/* Exit code for a daemon error code (JPROF_E_*). */
int ctl_exit_for_error(const char *code);
/* "850ms", "12.3s", "5m 02s", "3h 04m", "2d 01h"; "?" when negative. */
void ctl_format_span(char *buf, size_t size, int64_t ms);
/* A counter as text in buf, "?" when negative (unknown). Returns buf. */
const char *ctl_num(char *buf, size_t size, int64_t v);

#endif
