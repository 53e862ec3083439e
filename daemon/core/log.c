#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum log_level log_max = LOG_LVL_INFO;

void log_set_level(enum log_level max)
{
	log_max = max;
}

enum log_level log_get_level(void)
{
	return log_max;
}

int log_level_parse(const char *s)
{
	static const struct { const char *name; enum log_level lvl; } names[] = {
		{ "err", LOG_LVL_ERR }, { "error", LOG_LVL_ERR },
		{ "warning", LOG_LVL_WARNING }, { "warn", LOG_LVL_WARNING },
		{ "notice", LOG_LVL_NOTICE }, { "info", LOG_LVL_INFO },
		{ "debug", LOG_LVL_DEBUG },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].lvl;
	return -EINVAL;
}

void log_vmsg(enum log_level lvl, const char *fmt, va_list ap)
{
	char small[2048], *text = small, *line, *save = NULL;
	va_list ap2;
	int n;

	if (lvl > log_max)
		return;
	va_copy(ap2, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	/* Long messages (libbpf's verifier log) are kept whole. */
	if ((size_t)n >= sizeof(small)) {
		text = malloc((size_t)n + 1);
		if (!text)
			text = small;
		else
			vsnprintf(text, (size_t)n + 1, fmt, ap);
	}
	/* One record per line so journald keeps the priority on each. */
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		fprintf(stderr, "<%d>%s\n", (int)lvl, line);
	if (text != small)
		free(text);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(lvl, fmt, ap);
	va_end(ap);
}

