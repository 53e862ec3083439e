/* jprofctl formats: the output format table (proto/jprof_formats.h), for
 * people and, with --names, for scripts and the shell completion. Needs no
 * daemon. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "ctl.h"
#include "jprof_formats.h"

static void cmd_formats_help(void)
{
	printf("Usage: jprofctl formats [--names]\n"
	       "\n"
	       "List the output formats that --format takes and record and profile write:\n"
	       "name, file extensions (the -o FILE names that choose it), whether the data\n"
	       "is text or binary, and a description.\n"
	       "\n"
	       "  --names          only the names, one a line (for scripts)\n"
	       "  -h, --help       show this help\n");
}

static void cmd_formats_table(void)
{
	char ext[JPROF_FMT_COUNT][128];
	int name_w = (int)strlen("NAME"), ext_w = (int)strlen("EXTENSIONS");

	for (int i = 0; i < JPROF_FMT_COUNT; i++) {
		const struct jprof_format_info *f = jprof_format_info((enum jprof_format)i);
		size_t off = 0;

		snprintf(ext[i], sizeof(ext[i]), "-");
		for (const char *const *e = f->extensions; e && *e && off < sizeof(ext[i]); e++)
			off += (size_t)snprintf(ext[i] + off, sizeof(ext[i]) - off, "%s%s",
						off ? " " : "", *e);
		if ((int)strlen(f->name) > name_w)
			name_w = (int)strlen(f->name);
		if ((int)strlen(ext[i]) > ext_w)
			ext_w = (int)strlen(ext[i]);
	}
	printf("%-*s  %-*s  %-6s  %s\n", name_w, "NAME", ext_w, "EXTENSIONS", "DATA", "DESCRIPTION");
	for (int i = 0; i < JPROF_FMT_COUNT; i++) {
		const struct jprof_format_info *f = jprof_format_info((enum jprof_format)i);

		printf("%-*s  %-*s  %-6s  %s\n", name_w, f->name, ext_w, ext[i],
		       f->binary ? "binary" : "text", f->summary);
	}
}

int cmd_formats(int argc, char **argv, const char *socket_path)
{
	static const struct option opts[] = {
		{ "names", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool names = false;
	int r = CTL_CONTINUE, o;

	while (r == CTL_CONTINUE && (o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			names = true;
			break;
		case 'h':
			cmd_formats_help();
			r = CTL_EXIT_OK;
			break;
		default:
			r = ctl_bad_option("formats", argv, o);
			break;
		}
	}
	if (r == CTL_CONTINUE)
		r = ctl_no_operands("formats", argc, argv);
	if (r != CTL_CONTINUE)
		goto out;

	if (names) {
		for (int i = 0; i < JPROF_FMT_COUNT; i++)
			printf("%s\n", jprof_format_info((enum jprof_format)i)->name);
	} else {
		cmd_formats_table();
	}
	r = ctl_flush_stdout();
out:
	return r;
}
