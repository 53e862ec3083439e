/* Where a profile goes: the format to ask the daemon for (from proto's one
 * format table), writing the file atomically or to stdout, and the progress
 * line while a recording runs. */
#ifndef JPROF_CLIENT_OUTPUT_H
#define JPROF_CLIENT_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The format name a file name asks for; collapsed when the name says nothing. */
const char *output_format_for_path(const char *path);
/* The format to ask for: format (-f) if set, else from path (-o), else text
 * for a terminal on stdout and collapsed for a pipe. */
const char *output_choose_format(const char *format, const char *path);
/* Prints -f's line of a command's --help, built from the format table:
 * the names, then "; default " and default_rule, or the extensions rule
 * when that is NULL. */
void output_help_format(const char *default_rule);

/* Writes data to path atomically (a temporary file next to it, then
 * rename()), or to stdout when path is NULL. Reports failures itself;
 * 0 or -errno. */
int output_write(const char *path, const char *data, size_t len);
/* Async-signal-safe: removes the temporary file of a write in progress. */
void output_abort(void);

/* "recording <target>: 1.0s / 30.0s, 97 samples" on the status line. */
void output_progress(const char *target, int64_t elapsed_ms, int64_t duration_ms,
		     int64_t samples, bool stopping);

#endif
