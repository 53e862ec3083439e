#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "ctl.h"
#include "field.h"
#include "jprof_formats.h"
#include "output.h"

/* Signal state, shared with the handler: the first Ctrl-C wakes the
 * receive loop through the pipe, the second leaves at once. */
static volatile sig_atomic_t run_signal_count;
static int run_signal_pipe[2] = { -1, -1 };

/* run_option() result: not one of RUN_OPTIONS. */
#define RUN_NOT_OURS (-2)

void run_init(struct run *run, const char *cmd, enum jprof_cmd type, const char *socket_path,
	      void (*help)(void))
{
	memset(run, 0, sizeof(*run));
	jprof_request_init(&run->req, type, CONN_ID_COMMAND);
	run->cmd = cmd;
	run->help = help;
	run->socket_path = socket_path;
}

/* CTL_CONTINUE, the exit code to stop with, or RUN_NOT_OURS. */
static int run_option(struct run *run, int o, char **argv)
{
	int id;

	switch (o) {
	case 'o':
		if (!*optarg)
			return ctl_usage_err(run->cmd, "empty output file name");
		run->output = optarg;
		break;
	case 'f':
		id = jprof_format_parse(optarg);
		if (id < 0)
			return ctl_usage_err(run->cmd, "invalid format '%s': use one of %s "
					     "('jprofctl formats' describes them)", optarg,
					     jprof_format_names());
		/* The name, not an alias: what every daemon of this table knows. */
		run->format = jprof_format_info((enum jprof_format)id)->name;
		break;
	case RUN_OPT_JSON_EVENTS:
		run->json_events = true;
		break;
	case RUN_OPT_SOCKET:
		run->socket_path = optarg;
		break;
	case 'h':
		run->help();
		return CTL_EXIT_OK;
	case ':':
	case '?':
		return ctl_bad_option(run->cmd, argv, o);
	default:
		return RUN_NOT_OURS;
	}
	return CTL_CONTINUE;
}

int run_getopt(struct run *run, int argc, char **argv, const char *shortopts,
	       const struct option *opts, int *r)
{
	int o;

	while (*r == CTL_CONTINUE && (o = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
		*r = run_option(run, o, argv);
		if (*r == RUN_NOT_OURS) {
			*r = CTL_CONTINUE;
			return o;
		}
	}
	if (*r == CTL_CONTINUE)
		*r = ctl_no_operands(run->cmd, argc, argv);
	return -1;
}

static void run_on_signal(int sig)
{
	static const char msg[] = "\r\033[Kjprofctl: aborted\n";
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t ignored;

	if (run_signal_count++ > 0) {
		/* Second Ctrl-C: leave at once, without a half-written file. */
		output_abort();
		ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(CTL_EXIT_ERROR);
	}
	ignored = write(run_signal_pipe[1], &b, 1);
	(void)ignored;
	errno = saved;
}

/* SIGINT and SIGTERM make *wake_fd readable. 0 or -errno. */
static int run_signals_install(int *wake_fd)
{
	struct sigaction sa = { .sa_handler = run_on_signal };
	int r = 0;

	if (pipe2(run_signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = -errno;
		goto out;
	}
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		r = -errno;
		goto out;
	}
	*wake_fd = run_signal_pipe[0];
out:
	return r;
}

static void run_print_event(struct json_object *obj)
{
	size_t len;
	char *line = jprof_json_line(obj, &len);

	if (line) {
		fwrite(line, 1, len, stderr);
		fflush(stderr);
	}
	free(line);
}

static void run_show_progress(const struct run *run, int64_t elapsed_ms, int64_t duration_ms,
			      int64_t samples)
{
	if (run->progress_line)
		output_progress(run->target, elapsed_ms, duration_ms, samples, run->cancelling);
}

/* Says when the profile holds clearly fewer samples than the CPU time its
 * per-thread events counted stands for (summary.samples_expected): samples
 * were lost on the way (a full ring buffer, the kernel's throttling). One
 * missing at each end of each thread's events is no loss. */
static void warn_lost(struct json_object *summary)
{
	int64_t expected = field_int(summary, "samples_expected");
	int64_t samples = field_int(summary, "samples");
	int64_t threads = field_int(summary, "threads");
	char a[32], b[32];

	if (expected <= 0 || samples < 0)
		return;
	if (samples + (threads > 0 ? threads : 1) + 2 + expected / 10 >= expected)
		return;
	ctl_err("%s of the %s samples the recorded threads' CPU time stands for were lost "
		"(`jprofctl status` counts losses by cause)",
		ctl_num(a, sizeof(a), expected - samples), ctl_num(b, sizeof(b), expected));
}

/* Writes the profile of a "profile" message and says so. Returns an exit code. */
static int run_finish(struct run *run, struct jprof_response *resp)
{
	struct json_object *summary = field_member(resp->root, "summary", json_type_object);
	struct json_object *data_obj = field_member(resp->root, "data", json_type_string);
	const char *status = field_str(resp->root, "status");
	const char *encoding = field_str(resp->root, "encoding");
	const char *data;
	char *decoded = NULL;
	size_t len;
	char a[32], b[32];
	int r;

	if (!status || !data_obj) {
		ctl_err("malformed profile response from jprofd");
		r = CTL_EXIT_ERROR;
		goto out;
	}
	data = json_object_get_string(data_obj);
	len = (size_t)json_object_get_string_len(data_obj);
	if (encoding && strcmp(encoding, "base64") == 0) {
		decoded = jprof_base64_decode(data, len, &len);
		if (!decoded) {
			ctl_err("malformed profile response from jprofd (bad base64 data)");
			r = CTL_EXIT_ERROR;
			goto out;
		}
		data = decoded;
	} else if (encoding && strcmp(encoding, "utf-8") != 0) {
		ctl_err("profile in unknown encoding \"%s\"", encoding);
		r = CTL_EXIT_ERROR;
		goto out;
	}

	ctl_status_clear();
	if (output_write(run->output, data, len) < 0) {
		r = CTL_EXIT_ERROR;
		goto out;
	}
	if (run->json_events) {
		/* The data went to the output; the event says how it ended. */
		json_object_object_del(resp->root, "data");
		run_print_event(resp->root);
	} else {
		fprintf(stderr, "wrote %s: %s samples, %s stacks (%s)\n",
			run->output ? run->output : "stdout",
			ctl_num(a, sizeof(a), field_int(summary, "samples")),
			ctl_num(b, sizeof(b), field_int(summary, "stacks")), status);
		if (field_bool(summary, "truncated") == 1)
			ctl_err("the profile was truncated by the daemon's limits");
		warn_lost(summary);
	}
	if (strcmp(status, "process_exited") == 0) {
		if (!run->json_events)
			ctl_err("%s exited during the recording", run->target);
		r = CTL_EXIT_PROCESS_EXITED;
	} else if (strcmp(status, "agent_gone") == 0) {
		if (!run->json_events)
			ctl_err("the JVM agent of %s went away, so the recording stopped", run->target);
		r = CTL_EXIT_ERROR;
	} else if (strcmp(status, "access_lost") == 0) {
		/* What was written covers only the time before it. */
		if (!run->json_events)
			ctl_err("%s changed credentials (exec of a setuid program?); you may no longer "
				"record it, so the recording stopped", run->target);
		r = CTL_EXIT_PERMISSION;
	} else {
		r = CTL_EXIT_OK;
	}
out:
	free(decoded);
	return r;
}

/* A progress event of a stream: "started", "sampling", "progress", "warning". */
static void run_on_event(struct run *run, const struct jprof_response *resp)
{
	const char *type = resp->type;

	if (strcmp(type, "started") == 0) {
		struct json_object *t = field_member(resp->root, "target", json_type_object);
		const char *comm = field_str(t, "comm");

		if (field_bool(t, "all") == 1)
			snprintf(run->target, sizeof(run->target), "all processes");
		else if (comm)
			snprintf(run->target, sizeof(run->target), "pid %d (%.32s)", run->pid, comm);
		run_show_progress(run, 0, field_int(resp->root, "duration_ms"), 0);
	} else if (strcmp(type, "progress") == 0) {
		run_show_progress(run, field_int(resp->root, "elapsed_ms"),
				  field_int(resp->root, "duration_ms"), field_int(resp->root, "samples"));
	} else if (strcmp(type, "sampling") == 0 && !run->json_events) {
		/* The start gate: said only when one would notice the wait; a
		 * deadline comes with its own warning. */
		int64_t wait = field_int(resp->root, "wait_ms");

		if (wait > 500 && field_bool(resp->root, "ready") == 1)
			ctl_warn("sampling started %lld ms after the request (the process was getting "
				 "ready); the duration counts from there", (long long)wait);
	} else if (strcmp(type, "warning") == 0 && !run->json_events) {
		const char *msg = field_str(resp->root, "message");

		ctl_warn("%s", msg ? msg : "(no message)");
	}
	/* Other types are newer additions; ignore them. */
}

/* Handles one response. Returns CTL_CONTINUE, or the exit code to stop with. */
static int run_on_response(struct run *run, struct jprof_response *resp)
{
	bool cancel_reply = run->events && resp->has_id && resp->id == CONN_ID_CANCEL;
	bool is_profile = resp->ok && strcmp(resp->type, "profile") == 0;
	int r = CTL_CONTINUE;

	if (!cancel_reply && !conn_is_answer(resp, CONN_ID_COMMAND)) {
		ctl_err("malformed response from jprofd (unexpected id)");
		r = CTL_EXIT_ERROR;
		goto out;
	}
	if (run->events && run->json_events && !is_profile)
		run_print_event(resp->root);
	if (cancel_reply) {
		/* The record may have ended just before our cancel arrived. */
		if (!resp->ok && strcmp(resp->err_code, JPROF_E_NO_SUCH_SESSION) != 0 &&
		    !run->json_events)
			ctl_err("cancel failed: %s", resp->err_message);
		goto out;
	}
	r = conn_check_answer(resp, CONN_ID_COMMAND);
	if (r)
		goto out;
	if (is_profile) {
		r = run_finish(run, resp);
	} else if (run->events) {
		run_on_event(run, resp);
		r = CTL_CONTINUE;
	} else {
		ctl_err("malformed response from jprofd (type \"%s\" instead of \"profile\")",
			resp->type);
		r = CTL_EXIT_ERROR;
	}
out:
	return r;
}

static int run_cancel(struct run *run, struct conn *conn)
{
	struct jprof_request req;

	run->cancelling = true;
	if (run->progress_line)
		ctl_status_show("stopping %s (Ctrl-C again to abort)", run->target);
	jprof_request_init(&req, JPROF_CMD_CANCEL, CONN_ID_CANCEL);
	req.cancel.target = CONN_ID_COMMAND;
	return conn_send(conn, &req);
}

int run_request(struct run *run)
{
	struct conn conn = CONN_INIT;
	struct jprof_response resp = { 0 };
	char *format = run->req.cmd == JPROF_CMD_RECORD ? run->req.record.format
							 : run->req.profile.format;
	/* A stream lasts as long as the user asked; a single answer is rendered
	 * at once, but from up to a day of the host profile. */
	int timeout_ms = run->events ? -1 : CONN_REPLY_TIMEOUT_MS * 6;
	int r;

	_Static_assert(sizeof(run->req.record.format) == sizeof(run->req.profile.format),
		       "one size for both requests' format");
	snprintf(format, sizeof(run->req.record.format), "%s",
		 output_choose_format(run->format, run->output));
	r = conn_handshake(&conn, run->socket_path);
	if (r)
		goto out;
	if (run->events) {
		r = run_signals_install(&conn.wake_fd);
		if (r < 0) {
			ctl_err("cannot set up signal handling: %s", strerror(-r));
			r = CTL_EXIT_ERROR;
			goto out;
		}
	}
	r = conn_send(&conn, &run->req);
	if (r)
		goto out;
	for (;;) {
		r = conn_recv(&conn, timeout_ms, &resp);
		if (r == -EINTR) {
			if (!run->cancelling) {
				r = run_cancel(run, &conn);
				if (r)
					goto out;
			}
			continue;
		}
		if (r)
			goto out;
		r = run_on_response(run, &resp);
		jprof_response_free(&resp);
		if (r != CTL_CONTINUE)
			goto out;
	}
out:
	ctl_status_clear();
	jprof_response_free(&resp);
	conn_close(&conn);
	return r;
}
