/* jprofctl: the command-line client of jprofd. Thin by design: argv becomes
 * one request, responses are rendered to stderr and the profile is written
 * to a file or stdout. The protocol is in docs/protocol.md. This file reads
 * the global options and hands the rest to a command (cmd_<name>.c). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "ctl.h"
#include "jprof_proto.h"

#ifndef JPROF_VERSION
#define JPROF_VERSION "0.0.0"
#endif

static const struct main_cmd {
	const char *name;
	int (*run)(int argc, char **argv, const char *socket_path);
	const char *summary;
} main_cmds[] = {
	{ "status", cmd_status, "show the daemon's state (--json for the raw response)" },
	{ "record", cmd_record, "record a profile of a process (--pid) or the host (--all)" },
	{ "profile", cmd_profile, "the continuous host profile of the last minutes (--last)" },
	{ "formats", cmd_formats, "list the output formats (--names: names only)" },
};

static void main_help(void)
{
	printf("Usage: jprofctl [--socket PATH] COMMAND [options]\n"
	       "\n"
	       "Client of jprofd, the system-wide profiler daemon.\n"
	       "\n"
	       "Commands:\n");
	for (size_t i = 0; i < sizeof(main_cmds) / sizeof(main_cmds[0]); i++)
		printf("  %-10s %s\n", main_cmds[i].name, main_cmds[i].summary);
	printf("\n"
	       "Options:\n"
	       "  --socket PATH    daemon socket (default $%s, else %s)\n"
	       "  -h, --help       show this help; 'jprofctl COMMAND --help' for a command\n"
	       "  -V, --version    show the version\n"
	       "\n"
	       "Exit status:\n"
	       "  0  success (also after Ctrl-C, with the partial profile written)\n"
	       "  1  other error\n"
	       "  2  usage error\n"
	       "  3  the daemon is not running or its socket is unreachable\n"
	       "  4  permission denied\n"
	       "  5  no such process\n"
	       "  6  the process exited during the recording (partial profile written)\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket_path = getenv(JPROF_SOCKET_ENV);
	const char *cmd;
	int o;

	/* A closed stdout or socket is reported as EPIPE, not a silent death. */
	signal(SIGPIPE, SIG_IGN);
	if (!socket_path || !*socket_path)
		socket_path = JPROF_DEFAULT_SOCKET;

	/* '+': stop at the command; its options are parsed by the command. */
	while ((o = getopt_long(argc, argv, "+:hV", opts, NULL)) != -1) {
		switch (o) {
		case 'S':
			socket_path = optarg;
			break;
		case 'h':
			main_help();
			return CTL_EXIT_OK;
		case 'V':
			printf("jprofctl %s (protocol %d)\n", JPROF_VERSION, JPROF_PROTO_VERSION);
			return CTL_EXIT_OK;
		default:
			return ctl_bad_option(NULL, argv, o);
		}
	}
	if (optind >= argc)
		return ctl_usage_err(NULL, "no command given");
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 0; /* 0 re-initializes glibc's getopt for the command's options */

	for (size_t i = 0; i < sizeof(main_cmds) / sizeof(main_cmds[0]); i++)
		if (strcmp(cmd, main_cmds[i].name) == 0)
			return main_cmds[i].run(argc, argv, socket_path);
	if (strcmp(cmd, "help") == 0) {
		main_help();
		return CTL_EXIT_OK;
	}
	return ctl_usage_err(NULL, "unknown command '%s'", cmd);
}
