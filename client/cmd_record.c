/* jprofctl record: a new recording of one process or of the host. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cmd.h"
#include "ctl.h"
#include "output.h"
#include "run.h"

static void cmd_record_help(void)
{
	printf("Usage: jprofctl record (--pid PID | --all) [options]\n"
	       "\n"
	       "Record a profile of one process or of the whole host (CPU time by default,\n"
	       "time off the CPU, wall-clock time, or a JVM's allocations or lock waits) and\n"
	       "write it to FILE or stdout. Ctrl-C stops early and still writes what was\n"
	       "recorded; a second Ctrl-C aborts.\n"
	       "\n"
	       "  -p, --pid PID          process to profile (yours, unless you are root or\n"
	       "                         in group jprof)\n"
	       "  -a, --all              every process (root or group jprof only)\n"
	       "  -d, --duration TIME    how long: 30s, 500ms, 2m, 1h or seconds (default 30s)\n"
	       "  -e, --event EVENT      what to record (default cpu); see Events below;\n"
	       "                         several with commas (-e cpu,alloc,lock): one\n"
	       "                         profile with every event's values\n"
	       "  -i, --interval TIME    cpu, wall: sampling interval of CPU time: 10ms, 1ms,\n"
	       "                         250us, 1s (default 10ms, range 100us..10s)\n"
	       "      --threshold TIME   offcpu, wall: skip off-CPU intervals shorter than\n"
	       "                         TIME: 10us, 1ms\n"
	       "                         (default 10us, range 1us..10s)\n"
	       "      --alloc SIZE       alloc: mean bytes between sampled allocations: 512k,\n"
	       "                         1m, 65536 (default 512k, range 1k..1g)\n"
	       "      --lock TIME        lock: skip waits shorter than TIME: 10us, 1ms\n"
	       "                         (default 10us, range 1us..10s)\n"
	       "  -o, --output FILE      write the profile to FILE (atomically) instead of\n"
	       "                         stdout\n");
	output_help_format(NULL);
	printf("      --threads          add a frame per thread at the root of each stack\n"
	       "      --java MODE        Java frames for a JVM: auto (default: load the agent,\n"
	       "                         fall back to native stacks with a warning), off, or\n"
	       "                         require (fail unless Java frames can be recorded)\n"
	       "      --java-lines       Java frames as Class.method:line\n"
	       "      --java-signatures  Java frames with their JVM signatures\n"
	       "      --java-types       collapsed: Java frames with their type as a suffix,\n"
	       "                         as async-profiler: _[j] compiled (C2), _[1] C1,\n"
	       "                         _[i] inlined, _[0] interpreted (none: unknown)\n"
	       "      --no-progress      no progress line (there is none unless stderr is a\n"
	       "                         terminal)\n"
	       "      --json-events      print the daemon's events on stderr as JSON lines\n"
	       "                         (the profile's data left out)\n"
	       "      --socket PATH      daemon socket (default $%s or %s)\n"
	       "  -h, --help             show this help\n"
	       "\n"
	       "Events (-e) and the values their profiles carry:\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
	for (int i = 0; i < JPROF_EVENT_COUNT; i++)
		printf("  %-8s %s\n           values: %s\n", jprof_events[i].name,
		       jprof_events[i].summary, jprof_events[i].values);
	printf("Off-CPU profiles of a JVM have native and kernel frames only for now; wall\n"
	       "profiles of a JVM have Java frames for its blocked threads too.\n"
	       "alloc and lock record JVMs only (Java frames, the class as leaf frame) and\n"
	       "not in time-ordered formats (timeline, speedscope, jfr).\n"
	       "Several events (-e cpu,alloc,lock): any distinct events but wall with cpu or\n"
	       "offcpu (wall holds both); the profile has samples (count) and then each\n"
	       "event's values in the order given. The first event's main value is the\n"
	       "default one (pprof's default sample type, collapsed's value); text has a\n"
	       "section per event, html a selector. Time-ordered formats take cpu only.\n"
	       "\n"
	       "Exit status: 0 profile written (also after Ctrl-C), 1 error, 2 usage,\n"
	       "3 daemon not running, 4 permission denied, 5 no such process,\n"
	       "6 the process exited during the recording (partial profile written).\n");
}

/* --java: "auto", "off" or "require"; -EINVAL for anything else. */
static int cmd_record_java(const char *s, enum jprof_java *java)
{
	for (enum jprof_java j = JPROF_JAVA_AUTO; j <= JPROF_JAVA_REQUIRE; j++) {
		if (strcmp(s, jprof_java_name(j)) == 0) {
			*java = j;
			return 0;
		}
	}
	return -EINVAL;
}

int cmd_record(int argc, char **argv, const char *socket_path)
{
	enum { OPT_THREADS = 256, OPT_NO_PROGRESS, OPT_JAVA, OPT_JAVA_LINES, OPT_JAVA_SIGS,
	       OPT_JAVA_TYPES, OPT_THRESHOLD, OPT_ALLOC, OPT_LOCK };
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "all", no_argument, NULL, 'a' },
		{ "duration", required_argument, NULL, 'd' },
		{ "interval", required_argument, NULL, 'i' },
		{ "event", required_argument, NULL, 'e' },
		{ "threshold", required_argument, NULL, OPT_THRESHOLD },
		{ "alloc", required_argument, NULL, OPT_ALLOC },
		{ "lock", required_argument, NULL, OPT_LOCK },
		{ "threads", no_argument, NULL, OPT_THREADS },
		{ "java", required_argument, NULL, OPT_JAVA },
		{ "java-lines", no_argument, NULL, OPT_JAVA_LINES },
		{ "java-signatures", no_argument, NULL, OPT_JAVA_SIGS },
		{ "java-types", no_argument, NULL, OPT_JAVA_TYPES },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		RUN_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	struct jprof_record_req *rr;
	struct run run;
	bool has_pid = false, no_progress = false, has_interval = false, has_lock = false;
	bool has_threshold = false;
	unsigned ev = 1u << 0;  /* cpu */
	char why[160];
	int r = CTL_CONTINUE, o;

	run_init(&run, "record", JPROF_CMD_RECORD, socket_path, cmd_record_help);
	run.events = true;
	rr = &run.req.record;
	while ((o = run_getopt(&run, argc, argv, ":p:ad:i:e:o:f:h", opts, &r)) != -1) {
		switch (o) {
		case 'p':
			if (args_parse_pid(optarg, &rr->pid) < 0)
				r = ctl_usage_err("record", "invalid pid '%s'", optarg);
			has_pid = true;
			break;
		case 'a':
			rr->all = true;
			break;
		case 'd':
			if (args_parse_duration_ms(optarg, &rr->duration_ms) < 0)
				r = ctl_usage_err("record", "invalid duration '%s': use e.g. 30s, 500ms, "
						  "2m, 1h or seconds, from 1ms to 24h", optarg);
			break;
		case 'i':
			if (args_parse_interval_us(optarg, &rr->interval_us) < 0)
				r = ctl_usage_err("record", "invalid interval '%s': use e.g. 10ms, 1ms, "
						  "250us, 1s, from 100us to 10s", optarg);
			has_interval = true;
			break;
		case 'e':
			if (args_parse_events(optarg, &ev, why, sizeof(why)) < 0)
				r = ctl_usage_err("record", "-e '%s': %s; known events are %s",
						  optarg, why, jprof_event_names());
			else
				snprintf(rr->event, sizeof(rr->event), "%s", optarg);
			break;
		case OPT_THRESHOLD:
			if (args_parse_threshold_us(optarg, &rr->threshold_us) < 0)
				r = ctl_usage_err("record", "invalid threshold '%s': use e.g. 10us, 1ms, "
						  "from 1us to 10s", optarg);
			has_threshold = true;
			break;
		case OPT_ALLOC:
			if (args_parse_alloc_bytes(optarg, &rr->alloc_bytes) < 0)
				r = ctl_usage_err("record", "invalid --alloc size '%s': use e.g. 512k, 1m, "
						  "65536, from 1k to 1g", optarg);
			break;
		case OPT_LOCK:
			if (args_parse_threshold_us(optarg, &rr->lock_threshold_us) < 0)
				r = ctl_usage_err("record", "invalid --lock time '%s': use e.g. 10us, 1ms, "
						  "from 1us to 10s", optarg);
			has_lock = true;
			break;
		case OPT_THREADS:
			rr->thread_frames = true;
			break;
		case OPT_JAVA:
			if (cmd_record_java(optarg, &rr->java) < 0)
				r = ctl_usage_err("record", "--java wants auto, off or require, not '%s'",
						  optarg);
			break;
		case OPT_JAVA_LINES:
			rr->java_lines = true;
			break;
		case OPT_JAVA_SIGS:
			rr->java_signatures = true;
			break;
		case OPT_JAVA_TYPES:
			rr->java_types = true;
			break;
		case OPT_NO_PROGRESS:
			no_progress = true;
			break;
		}
	}
	if (r == CTL_CONTINUE && has_pid == rr->all)
		r = ctl_usage_err("record", "give exactly one of --pid PID or --all");
	/* Indexes in jprof_events (proto/jprof_proto.c). */
	enum { EV_CPU = 1u << 0, EV_OFFCPU = 1u << 1, EV_WALL = 1u << 2, EV_ALLOC = 1u << 3,
	       EV_LOCK = 1u << 4 };
	if (r == CTL_CONTINUE && has_threshold && !(ev & (EV_OFFCPU | EV_WALL)))
		r = ctl_usage_err("record", "--threshold applies to -e offcpu and -e wall only, "
				  "and -e %s has neither", rr->event);
	if (r == CTL_CONTINUE && has_lock && !(ev & EV_LOCK))
		r = ctl_usage_err("record", "--lock applies to -e lock only, and -e %s has no lock",
				  rr->event);
	if (r == CTL_CONTINUE && rr->alloc_bytes && !(ev & EV_ALLOC))
		r = ctl_usage_err("record", "--alloc applies to -e alloc only, and -e %s has no "
				  "alloc", rr->event);
	if (r == CTL_CONTINUE && (ev & (EV_ALLOC | EV_LOCK)) && rr->all)
		r = ctl_usage_err("record", "-e %s records one JVM: give --pid, not --all",
				  ev & EV_ALLOC ? JPROF_EVENT_ALLOC : JPROF_EVENT_LOCK);
	if (r == CTL_CONTINUE && has_interval && !(ev & (EV_CPU | EV_WALL)))
		r = ctl_usage_err("record", "--interval applies to -e cpu and -e wall only, and -e %s "
				  "has neither", rr->event);
	/* -e lock alone: its threshold as threshold_us, which daemons before
	 * lock_threshold_us read too. */
	if (ev == EV_LOCK) {
		rr->threshold_us = rr->lock_threshold_us;
		rr->lock_threshold_us = 0;
	}
	if (r != CTL_CONTINUE)
		goto out;

	rr->progress = !no_progress;
	run.progress_line = !no_progress && !run.json_events && isatty(STDERR_FILENO);
	run.pid = rr->pid;
	if (rr->all)
		snprintf(run.target, sizeof(run.target), "all processes");
	else
		snprintf(run.target, sizeof(run.target), "pid %d", rr->pid);
	r = run_request(&run);
out:
	return r;
}
