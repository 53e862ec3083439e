#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jprof_proto.h"

/* A status line is on the terminal and must be cleared before other text. */
static bool ctl_status_shown;

void ctl_status_show(const char *fmt, ...)
{
	va_list ap;

	fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
	ctl_status_shown = true;
}

void ctl_status_clear(void)
{
	if (ctl_status_shown) {
		fputs("\r\033[K", stderr);
		ctl_status_shown = false;
	}
}

static void ctl_vsay(const char *prefix, const char *fmt, va_list ap)
{
	ctl_status_clear();
	fputs(prefix, stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void ctl_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_vsay("jprofctl: ", fmt, ap);
	va_end(ap);
}

void ctl_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_vsay("jprofctl: warning: ", fmt, ap);
	va_end(ap);
}

int ctl_usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ctl_vsay("jprofctl: ", fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'jprofctl%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
	return CTL_EXIT_USAGE;
}

/* Names the option as the user typed it. */
int ctl_bad_option(const char *cmd, char **argv, int o)
{
	const char *what = o == ':' ? "option '%s' needs a value" : "unknown option '%s'";
	char shortopt[3] = { '-', (char)optopt, '\0' };
	const char *name = optopt ? shortopt : argv[optind - 1];

	/* For a long option with a missing value the name is argv[optind - 1]. */
	if (o == ':' && strncmp(argv[optind - 1], "--", 2) == 0)
		name = argv[optind - 1];
	return ctl_usage_err(cmd, what, name);
}

int ctl_no_operands(const char *cmd, int argc, char **argv)
{
	if (optind < argc)
		return ctl_usage_err(cmd, "unexpected argument '%s'", argv[optind]);
	return CTL_CONTINUE;
}

int ctl_flush_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		ctl_err("writing to stdout: %s", strerror(errno));
		return CTL_EXIT_ERROR;
	}
	return CTL_EXIT_OK;
}

int ctl_exit_for_error(const char *code)
{
	if (code && strcmp(code, JPROF_E_PERMISSION_DENIED) == 0)
		return CTL_EXIT_PERMISSION;
	if (code && strcmp(code, JPROF_E_NO_SUCH_PROCESS) == 0)
		return CTL_EXIT_NO_PROCESS;
	return CTL_EXIT_ERROR;
}

void ctl_format_span(char *buf, size_t size, int64_t ms)
{
	if (ms < 0)
		snprintf(buf, size, "?");
	else if (ms < 1000)
		snprintf(buf, size, "%" PRId64 "ms", ms);
	else if (ms < 60000)
		snprintf(buf, size, "%.1fs", (double)ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, size, "%" PRId64 "m %02" PRId64 "s", ms / 60000, ms / 1000 % 60);
	else if (ms < 86400000)
		snprintf(buf, size, "%" PRId64 "h %02" PRId64 "m", ms / 3600000, ms / 60000 % 60);
	else
		snprintf(buf, size, "%" PRId64 "d %02" PRId64 "h", ms / 86400000, ms / 3600000 % 24);
}

const char *ctl_num(char *buf, size_t size, int64_t v)
{
	if (v < 0)
		snprintf(buf, size, "?");
	else
		snprintf(buf, size, "%" PRId64, v);
	return buf;
}
