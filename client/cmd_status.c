/* jprofctl status: the daemon's state, as text or as its JSON line. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "conn.h"
#include "ctl.h"
#include "field.h"

/* A time in microseconds from the status line ("p50": 5.2), "?" if absent. */
static const char *status_us(char *out, size_t size, struct json_object *obj, const char *key)
{
	struct json_object *v = field_member(obj, key, json_type_double);

	if (v)
		snprintf(out, size, "%.1f us", json_object_get_double(v));
	else
		snprintf(out, size, "?");
	return out;
}

/* The BPF programs' own time per sample (status sampler.bpf_sample_us). */
/* Binaries sampled in the last minute that have no unwind table (shown to
 * callers who may see the whole host), one line: name (why, rows). */
static void status_without_tables(struct json_object *list)
{
	size_t n = list ? json_object_array_length(list) : 0;
	char rows[32];

	if (!n)
		return;
	printf("  sampled without tables:");
	for (size_t i = 0; i < n; i++) {
		struct json_object *b = json_object_array_get_idx(list, i);
		const char *path = field_str(b, "path"), *why = field_str(b, "why");
		const char *err = field_str(b, "error"), *base = path ? strrchr(path, '/') : NULL;
		long long r = field_int(b, "rows");

		printf("%s %s (%s%s%s", i ? "," : "", base ? base + 1 : path ? path : "?",
		       why ? why : "?", err ? ": " : "", err ? err : "");
		if (r > 0)
			printf(", %s rows", ctl_num(rows, sizeof(rows), r));
		printf(")");
	}
	printf("\n");
}

static void status_bpf_time(struct json_object *t)
{
	char a[32], b[32], c[32], d[32], e[32];

	if (!t)
		return;
	if (field_int(t, "count") <= 0) {
		printf("BPF time per sample: none timed yet\n");
		return;
	}
	printf("BPF time per sample: p50 %s, p90 %s, p99 %s, mean %s (%s samples)\n",
	       status_us(a, sizeof(a), t, "p50"), status_us(b, sizeof(b), t, "p90"),
	       status_us(c, sizeof(c), t, "p99"), status_us(d, sizeof(d), t, "mean"),
	       ctl_num(e, sizeof(e), field_int(t, "count")));
}

static void cmd_status_print(struct json_object *st)
{
	struct json_object *sampler = field_member(st, "sampler", json_type_object);
	struct json_object *lost = field_member(sampler, "lost", json_type_object);
	struct json_object *off = field_member(sampler, "offcpu", json_type_object);
	struct json_object *uw = field_member(sampler, "unwind", json_type_object);
	struct json_object *sessions = field_member(st, "sessions", json_type_object);
	struct json_object *list = field_member(sessions, "list", json_type_array);
	struct json_object *gate = field_member(sessions, "gate", json_type_object);
	struct json_object *peer = field_member(st, "peer", json_type_object);
	const char *version = field_str(st, "version");
	const char *state = field_str(sampler, "state");
	char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
	int all;

	ctl_format_span(a, sizeof(a), field_int(st, "uptime_ms"));
	printf("jprofd %s (protocol %s), pid %s, up %s\n", version ? version : "?",
	       ctl_num(b, sizeof(b), field_int(st, "protocol")),
	       ctl_num(c, sizeof(c), field_int(st, "pid")), a);
	printf("sampler: %s at %s Hz on %s CPUs\n", state ? state : "?",
	       ctl_num(a, sizeof(a), field_int(sampler, "rate_hz")),
	       ctl_num(b, sizeof(b), field_int(sampler, "cpus")));
	printf("samples: %s (idle %s)\n", ctl_num(a, sizeof(a), field_int(sampler, "samples")),
	       ctl_num(b, sizeof(b), field_int(sampler, "idle")));
	printf("lost:");
	if (lost) {
		const char *sep = " ";

		/* Every counter the daemon reports, in its order. */
		json_object_object_foreach(lost, key, val) {
			int64_t x = json_object_is_type(val, json_type_int) ?
					    json_object_get_int64(val) : -1;

			printf("%s%s %s", sep, key, ctl_num(a, sizeof(a), x));
			sep = ", ";
		}
	} else {
		printf(" ?");
	}
	printf("\n");
	if (off)
		printf("off-CPU: %s recordings, %s intervals, %s below their threshold\n",
		       ctl_num(a, sizeof(a), field_int(off, "recordings")),
		       ctl_num(b, sizeof(b), field_int(off, "intervals")),
		       ctl_num(c, sizeof(c), field_int(off, "below_threshold")));
	if (uw && field_bool(uw, "enabled") == 1)
		printf("unwinding: %s stacks by CFI (%s to the root), %s without tables yet; "
		       "%s tables, %s of %s rows, %s processes\n",
		       ctl_num(a, sizeof(a), field_int(uw, "stacks")),
		       ctl_num(b, sizeof(b), field_int(uw, "stacks_to_root")),
		       ctl_num(c, sizeof(c), field_int(uw, "stacks_without_tables")),
		       ctl_num(d, sizeof(d), field_int(uw, "tables")),
		       ctl_num(e, sizeof(e), field_int(uw, "rows")),
		       ctl_num(f, sizeof(f), field_int(uw, "rows_capacity")),
		       ctl_num(g, sizeof(g), field_int(uw, "processes")));
	else if (uw)
		printf("unwinding: frame pointers only (unwind = frame-pointers)\n");
	if (uw)
		status_without_tables(field_member(uw, "binaries_without_tables", json_type_array));
	status_bpf_time(field_member(sampler, "bpf_sample_us", json_type_object));
	printf("sessions: %s active\n", ctl_num(a, sizeof(a), field_int(sessions, "active")));
	for (size_t i = 0; list && i < json_object_array_length(list); i++) {
		struct json_object *s = json_object_array_get_idx(list, i);

		if (!json_object_is_type(s, json_type_object))
			continue;
		ctl_format_span(a, sizeof(a), field_int(s, "elapsed_ms"));
		ctl_format_span(b, sizeof(b), field_int(s, "duration_ms"));
		printf("  session %s: ", ctl_num(c, sizeof(c), field_int(s, "id")));
		if (field_bool(s, "all") == 1)
			printf("all processes");
		else
			printf("pid %s", ctl_num(c, sizeof(c), field_int(s, "pid")));
		printf(", uid %s, %s / %s, %s samples\n", ctl_num(c, sizeof(c), field_int(s, "uid")),
		       a, b, ctl_num(d, sizeof(d), field_int(s, "samples")));
	}
	if (gate)
		printf("start gates: %s opened ready, %s at their deadline; waited %s ms in all, "
		       "%s ms at most\n", ctl_num(a, sizeof(a), field_int(gate, "opened_ready")),
		       ctl_num(b, sizeof(b), field_int(gate, "opened_deadline")),
		       ctl_num(c, sizeof(c), field_int(gate, "wait_ms_total")),
		       ctl_num(d, sizeof(d), field_int(gate, "wait_ms_max")));
	printf("clients: %s\n", ctl_num(a, sizeof(a), field_int(st, "clients")));
	all = field_bool(peer, "authorized_all");
	printf("you: uid %s, %s\n", ctl_num(a, sizeof(a), field_int(peer, "uid")),
	       all == 1 ? "may record any process and --all" :
	       all == 0 ? "may record your own processes" : "authorization unknown");
}

static void cmd_status_help(void)
{
	printf("Usage: jprofctl status [--json] [--socket PATH]\n"
	       "\n"
	       "Show the daemon's state: version, uptime, sampler state, rate and CPUs,\n"
	       "sample and lost-sample counters, active recording sessions.\n"
	       "\n"
	       "  --json           print the daemon's status response as one JSON line\n"
	       "  --socket PATH    daemon socket (default $%s or %s)\n"
	       "  -h, --help       show this help\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
}

int cmd_status(int argc, char **argv, const char *socket_path)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct conn conn = CONN_INIT;
	struct jprof_request req;
	struct jprof_response resp = { 0 };
	struct json_object *st;
	bool json = false;
	int r, o;

	while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (o) {
		case 'j':
			json = true;
			break;
		case 'S':
			socket_path = optarg;
			break;
		case 'h':
			cmd_status_help();
			r = CTL_EXIT_OK;
			goto out;
		default:
			r = ctl_bad_option("status", argv, o);
			goto out;
		}
	}
	r = ctl_no_operands("status", argc, argv);
	if (r != CTL_CONTINUE)
		goto out;

	r = conn_handshake(&conn, socket_path);
	if (r)
		goto out;
	jprof_request_init(&req, JPROF_CMD_STATUS, CONN_ID_COMMAND);
	r = conn_call(&conn, &req, &resp);
	if (r)
		goto out;
	st = field_member(resp.root, "status", json_type_object);
	if (strcmp(resp.type, "status") != 0 || !st) {
		ctl_err("malformed status response from jprofd");
		r = CTL_EXIT_ERROR;
		goto out;
	}
	if (json) {
		size_t len;
		char *line = jprof_json_line(resp.root, &len);

		if (!line || fwrite(line, 1, len, stdout) != len)
			r = CTL_EXIT_ERROR;
		free(line);
	} else {
		cmd_status_print(st);
	}
	if (ctl_flush_stdout() != CTL_EXIT_OK)
		r = CTL_EXIT_ERROR;
out:
	jprof_response_free(&resp);
	conn_close(&conn);
	return r;
}
