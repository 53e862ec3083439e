/* The one path from a request to a written profile, shared by `record` and
 * `profile`: hello → the request → progress events (and Ctrl-C → cancel)
 * → the "profile" message → the file or stdout. A command parses its own
 * options into struct run and calls run_request(). */
#ifndef JPROF_CLIENT_RUN_H
#define JPROF_CLIENT_RUN_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "jprof_proto.h"

/* Option codes of the options every profile command takes. */
enum {
	RUN_OPT_JSON_EVENTS = 0x200,
	RUN_OPT_SOCKET,
};

/* Their struct option entries, for a command's table. */
#define RUN_OPTIONS                                                      \
	{ "output", required_argument, NULL, 'o' },                      \
	{ "format", required_argument, NULL, 'f' },                      \
	{ "json-events", no_argument, NULL, RUN_OPT_JSON_EVENTS },       \
	{ "socket", required_argument, NULL, RUN_OPT_SOCKET },           \
	{ "help", no_argument, NULL, 'h' }

struct run {
	struct jprof_request req;
	const char *cmd;          /* "record": for usage messages */
	void (*help)(void);
	const char *socket_path;
	const char *output;       /* -o; NULL: stdout */
	const char *format;       /* -f, a name from the table; NULL: from -o */
	bool events;              /* the daemon streams events until the profile
				   * (record), and Ctrl-C cancels; else one answer */
	bool progress_line;       /* draw progress on stderr (a terminal) */
	bool json_events;         /* --json-events */
	bool cancelling;
	int32_t pid;              /* the target's pid, 0 for none */
	char target[96];          /* "pid 1234 (java)", "all processes", "the host" */
};

/* help prints the command's --help. */
void run_init(struct run *run, const char *cmd, enum jprof_cmd type, const char *socket_path,
	      void (*help)(void));
/* getopt_long() for a command that runs a request: handles RUN_OPTIONS,
 * unknown options and (at the end) stray operands itself, and returns the
 * command's own options one by one; -1 at the end. *r starts as
 * CTL_CONTINUE; a command that finds an error sets it to the exit code, and
 * the next call ends the loop. After the loop *r is CTL_CONTINUE or the exit
 * code to stop with. */
int run_getopt(struct run *run, int argc, char **argv, const char *shortopts,
	       const struct option *opts, int *r);
/* Runs the request and writes its profile. Returns the exit code. */
int run_request(struct run *run);

#endif
