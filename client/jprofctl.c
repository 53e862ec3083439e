/* jprofctl: the command-line client of jprofd. Thin by design: argv becomes
 * one request, responses are rendered to stderr and the profile is written
 * to a file or stdout. The protocol is in docs/protocol.md. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "jprof_proto.h"

#ifndef JPROF_VERSION
#define JPROF_VERSION "0.0.0"
#endif

enum ctl_exit {
	CTL_EXIT_OK = 0,
	CTL_EXIT_ERROR = 1,
	CTL_EXIT_USAGE = 2,
	CTL_EXIT_NO_DAEMON = 3,
	CTL_EXIT_PERMISSION = 4,
	CTL_EXIT_NO_PROCESS = 5,
	CTL_EXIT_PROCESS_EXITED = 6,
};

/* Request ids on our one connection. */
#define CTL_ID_HELLO 1
#define CTL_ID_COMMAND 2
#define CTL_ID_CANCEL 3

/* A profile can be large, but not this large: stop a runaway peer before it
 * exhausts our memory. */
#define CTL_MAX_LINE ((size_t)1 << 30)
/* How long to wait for replies that need no work (hello, status, a send). */
#define CTL_REPLY_TIMEOUT_MS 15000

static const char ctl_start_hint[] =
	"is jprofd running? Start it with `sudo systemctl start jprofd` (or run jprofd as root)";

/* Signal state, shared with the handler. */
static volatile sig_atomic_t ctl_signal_count;
static int ctl_signal_pipe[2] = { -1, -1 };
/* The temporary output file, removed by the handler on a second Ctrl-C. */
static char ctl_tmp_path[PATH_MAX];
static volatile sig_atomic_t ctl_tmp_active;
/* A progress line is on the terminal and must be cleared before other text. */
static bool ctl_progress_shown;

static void ctl_clear_progress(void)
{
	if (ctl_progress_shown) {
		fputs("\r\033[K", stderr);
		ctl_progress_shown = false;
	}
}

static void ctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void ctl_err(const char *fmt, ...)
{
	va_list ap;

	ctl_clear_progress();
	fputs("jprofctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int ctl_usage_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int ctl_usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("jprofctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'jprofctl%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
	return CTL_EXIT_USAGE;
}

/* getopt_long() returned ':' or '?': name the option as the user typed it. */
static int ctl_bad_option(const char *cmd, char **argv, int o)
{
	const char *what = o == ':' ? "option '%s' needs a value" : "unknown option '%s'";
	char shortopt[3] = { '-', (char)optopt, '\0' };
	const char *name = optopt ? shortopt : argv[optind - 1];

	/* For a long option with a missing value the name is argv[optind - 1]. */
	if (o == ':' && strncmp(argv[optind - 1], "--", 2) == 0)
		name = argv[optind - 1];
	return ctl_usage_err(cmd, what, name);
}

/* ---- pure helpers (unit-tested) ------------------------------------------ */

/* Parses "<digits>[.<digits>]<unit>" into microseconds. Units: us, ms, s, m,
 * h. Without a unit bare_unit_us applies, or it is an error when that is 0.
 * Exact integer arithmetic: "1.5s" is 1500000, "0.1us" is rejected.
 * Returns 0, -EINVAL (malformed) or -ERANGE (too large). */
static int ctl_parse_time_us(const char *s, uint64_t bare_unit_us, uint64_t *out)
{
	static const struct {
		const char *name;
		uint64_t us;
	} units[] = {
		{ "us", 1 }, { "ms", 1000 }, { "s", 1000000 }, { "m", 60000000 },
		{ "h", 3600000000ULL },
	};
	uint64_t whole = 0, frac = 0, scale = 1, unit_us = 0, total, part;
	const char *p = s;
	int r = -EINVAL;

	if (*p < '0' || *p > '9')
		goto out;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole)) {
			r = -ERANGE;
			goto out;
		}
	}
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			goto out;
		for (; *p >= '0' && *p <= '9'; p++) {
			/* Beyond nanoseconds of an hour nothing is exact anyway. */
			if (scale >= 1000000000000ULL)
				goto out;
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
		}
	}
	if (*p == '\0') {
		unit_us = bare_unit_us;
	} else {
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (strcmp(p, units[i].name) == 0)
				unit_us = units[i].us;
	}
	if (unit_us == 0)
		goto out;
	if (__builtin_mul_overflow(frac, unit_us, &part) || part % scale != 0)
		goto out;
	if (__builtin_mul_overflow(whole, unit_us, &total) ||
	    __builtin_add_overflow(total, part / scale, &total)) {
		r = -ERANGE;
		goto out;
	}
	*out = total;
	r = 0;
out:
	return r;
}

/* -d: a bare number means seconds; the result is whole milliseconds. */
static int ctl_parse_duration_ms(const char *s, uint64_t *ms)
{
	uint64_t us;
	int r = ctl_parse_time_us(s, 1000000, &us);

	if (r < 0)
		return r;
	if (us % 1000 != 0)
		return -EINVAL;
	if (us / 1000 < 1 || us / 1000 > JPROF_DURATION_MS_MAX)
		return -ERANGE;
	*ms = us / 1000;
	return 0;
}

/* -i: a unit is required, since "10" could mean anything from µs to s. */
static int ctl_parse_interval_us(const char *s, uint64_t *us)
{
	int r = ctl_parse_time_us(s, 0, us);

	if (r < 0)
		return r;
	if (*us < JPROF_INTERVAL_US_MIN || *us > JPROF_INTERVAL_US_MAX)
		return -ERANGE;
	return 0;
}

/* A positive pid that fits the protocol's int32. */
static int ctl_parse_pid(const char *s, int32_t *pid)
{
	uint64_t v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > INT32_MAX)
			return -ERANGE;
	}
	if (*s || v == 0)
		return -EINVAL;
	*pid = (int32_t)v;
	return 0;
}

static bool ctl_has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n > m && strcasecmp(s + n - m, suffix) == 0;
}

/* The format a file name asks for; collapsed when the name says nothing. */
static const char *ctl_format_for_path(const char *path)
{
	static const struct {
		const char *suffix;
		const char *format;
	} map[] = {
		{ ".collapsed", "collapsed" }, { ".folded", "collapsed" }, { ".json", "json" },
		{ ".html", "html" }, { ".pb.gz", "pprof" }, { ".pprof", "pprof" },
		{ ".txt", "text" },
	};

	if (path)
		for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
			if (ctl_has_suffix(path, map[i].suffix))
				return map[i].format;
	return "collapsed";
}

/* Same rule as the codec: a short lowercase word. */
static bool ctl_format_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= sizeof(((struct jprof_record_req *)0)->format))
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* "850ms", "12.3s", "5m 02s", "3h 04m", "2d 01h". */
static void ctl_format_span(char *buf, size_t size, int64_t ms)
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

/* Exit code for a daemon error code. */
static int ctl_exit_for_error(const char *code)
{
	if (code && strcmp(code, JPROF_E_PERMISSION_DENIED) == 0)
		return CTL_EXIT_PERMISSION;
	if (code && strcmp(code, JPROF_E_NO_SUCH_PROCESS) == 0)
		return CTL_EXIT_NO_PROCESS;
	return CTL_EXIT_ERROR;
}

/* ---- JSON accessors that tolerate anything --------------------------------- */

static struct json_object *ctl_member(struct json_object *obj, const char *key,
				      enum json_type type)
{
	struct json_object *v;

	if (!obj || !json_object_is_type(obj, json_type_object) ||
	    !json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

/* -1 when missing, not an integer or negative: all counters are >= 0. */
static int64_t ctl_int(struct json_object *obj, const char *key)
{
	struct json_object *v = ctl_member(obj, key, json_type_int);
	int64_t x = v ? json_object_get_int64(v) : -1;

	return x < 0 ? -1 : x;
}

static const char *ctl_str(struct json_object *obj, const char *key)
{
	struct json_object *v = ctl_member(obj, key, json_type_string);

	return v ? json_object_get_string(v) : NULL;
}

/* 1 true, 0 false, -1 missing. */
static int ctl_bool(struct json_object *obj, const char *key)
{
	struct json_object *v = ctl_member(obj, key, json_type_boolean);

	return v ? json_object_get_boolean(v) : -1;
}

/* Formats a counter, "?" when unknown. */
static const char *ctl_num(char *buf, size_t size, int64_t v)
{
	if (v < 0)
		snprintf(buf, size, "?");
	else
		snprintf(buf, size, "%" PRId64, v);
	return buf;
}

/* ---- connection ----------------------------------------------------------- */

struct ctl_conn {
	int fd;
	const char *path;
	char *buf;        /* received bytes; buf[0..len) */
	size_t len;
	size_t cap;
	size_t scanned;   /* bytes of buf known to hold no '\n' */
	size_t consumed;  /* length of the line handed out last, dropped on next read */
};

static void ctl_conn_close(struct ctl_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->len = c->cap = c->scanned = c->consumed = 0;
}

/* Connects to the daemon; returns 0 or an exit code after reporting. */
static int ctl_conn_open(struct ctl_conn *c, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = -1, r, err;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->path = path;
	if (strlen(path) >= sizeof(addr.sun_path)) {
		ctl_err("socket path too long: %s", path);
		r = CTL_EXIT_ERROR;
		goto out;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ctl_err("socket: %s", strerror(errno));
		r = CTL_EXIT_ERROR;
		goto out;
	}
	/* A local connect completes at once unless the backlog is full. */
	while ((r = connect(fd, (struct sockaddr *)&addr, sizeof(addr))) < 0 && errno == EINTR)
		;
	if (r < 0) {
		err = errno;
		if (err == ENOENT || err == ECONNREFUSED) {
			ctl_err("cannot connect to %s: %s; %s", path, strerror(err), ctl_start_hint);
			r = CTL_EXIT_NO_DAEMON;
		} else if (err == EACCES || err == EPERM) {
			ctl_err("cannot connect to %s: %s (check the socket's permissions)", path,
				strerror(err));
			r = CTL_EXIT_PERMISSION;
		} else {
			ctl_err("cannot connect to %s: %s", path, strerror(err));
			r = CTL_EXIT_ERROR;
		}
		goto out;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		ctl_err("fcntl: %s", strerror(errno));
		r = CTL_EXIT_ERROR;
		goto out;
	}
	c->fd = fd;
	fd = -1;
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	return r;
}

/* Sends all of line; 0 or -errno. */
static int ctl_conn_send(struct ctl_conn *c, const char *line, size_t len)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
	size_t off = 0;
	ssize_t n;
	int r = 0;

	while (off < len) {
		n = send(c->fd, line + off, len - off, MSG_NOSIGNAL);
		if (n >= 0) {
			off += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			r = -errno;
			goto out;
		}
		r = poll(&pfd, 1, CTL_REPLY_TIMEOUT_MS);
		if (r < 0 && errno != EINTR) {
			r = -errno;
			goto out;
		}
		if (r == 0) {
			r = -ETIMEDOUT;
			goto out;
		}
		r = 0;
	}
out:
	return r;
}

/* Hands out the next complete line if one is buffered: 1 with *line and *len
 * (valid until the next call), 0 if none. */
static int ctl_conn_take_line(struct ctl_conn *c, char **line, size_t *len)
{
	char *nl;

	if (c->consumed) {
		memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
		c->len -= c->consumed;
		c->consumed = 0;
		c->scanned = 0;
	}
	nl = c->len > c->scanned ? memchr(c->buf + c->scanned, '\n', c->len - c->scanned) : NULL;
	if (!nl) {
		c->scanned = c->len;
		return 0;
	}
	*line = c->buf;
	*len = (size_t)(nl - c->buf) + 1;
	c->consumed = *len;
	return 1;
}

/* Reads what is available: bytes read, 0 at EOF, -EAGAIN, -EMSGSIZE or -errno. */
static int ctl_conn_fill(struct ctl_conn *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		size_t cap = c->cap ? c->cap * 2 : 131072;
		char *p;

		if (cap > CTL_MAX_LINE + 65536)
			return -EMSGSIZE;
		p = realloc(c->buf, cap);
		if (!p)
			return -ENOMEM;
		c->buf = p;
		c->cap = cap;
	}
	do
		n = read(c->fd, c->buf + c->len, c->cap - c->len);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	c->len += (size_t)n;
	return (int)(n > INT_MAX ? INT_MAX : n);
}

/* Waits for the next line. Returns 1 with a line, 0 at EOF, -EINTR when a
 * signal arrived through the self-pipe, -ETIMEDOUT, or another -errno.
 * timeout_ms < 0 waits forever. */
static int ctl_conn_read_line(struct ctl_conn *c, int timeout_ms, char **line, size_t *len)
{
	struct pollfd pfd[2] = {
		{ .fd = c->fd, .events = POLLIN },
		{ .fd = ctl_signal_pipe[0], .events = POLLIN },
	};
	int r;

	for (;;) {
		r = ctl_conn_take_line(c, line, len);
		if (r)
			goto out;
		r = poll(pfd, ctl_signal_pipe[0] >= 0 ? 2 : 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			r = -errno;
			goto out;
		}
		if (r == 0) {
			r = -ETIMEDOUT;
			goto out;
		}
		if (ctl_signal_pipe[0] >= 0 && (pfd[1].revents & POLLIN)) {
			unsigned char b[16];

			while (read(ctl_signal_pipe[0], b, sizeof(b)) > 0)
				;
			r = -EINTR;
			goto out;
		}
		if (pfd[0].revents) {
			r = ctl_conn_fill(c);
			if (r == -EAGAIN)
				continue;
			if (r <= 0)
				goto out;
		}
	}
out:
	return r;
}

/* Reports a read failure; returns the exit code. */
static int ctl_read_failed(const struct ctl_conn *c, int r)
{
	if (r == 0)
		ctl_err("jprofd closed the connection unexpectedly");
	else if (r == -ETIMEDOUT)
		ctl_err("no answer from jprofd at %s", c->path);
	else if (r == -EMSGSIZE)
		ctl_err("response from jprofd is larger than %zu bytes", CTL_MAX_LINE);
	else
		ctl_err("reading from jprofd: %s", strerror(-r));
	return CTL_EXIT_ERROR;
}

/* Reads and parses the next response for want_id (or an id-less error).
 * Returns 0 with *resp filled (caller frees), or an exit code after
 * reporting; -EINTR is passed through for the signal path. */
static int ctl_recv(struct ctl_conn *c, int timeout_ms, struct jprof_response *resp)
{
	char *line = NULL;
	size_t len = 0;
	int r;

	r = ctl_conn_read_line(c, timeout_ms, &line, &len);
	if (r == -EINTR)
		goto out;
	if (r <= 0) {
		r = ctl_read_failed(c, r);
		goto out;
	}
	if (jprof_response_parse(line, len, resp) < 0) {
		ctl_err("malformed response from jprofd");
		r = CTL_EXIT_ERROR;
		goto out;
	}
	r = 0;
out:
	return r;
}

static int ctl_send_request(struct ctl_conn *c, const struct jprof_request *req)
{
	char *line = jprof_request_encode(req);
	int r;

	if (!line) {
		ctl_err("out of memory");
		return CTL_EXIT_ERROR;
	}
	r = ctl_conn_send(c, line, strlen(line));
	free(line);
	if (r < 0) {
		if (r == -EPIPE || r == -ECONNRESET)
			ctl_err("jprofd closed the connection");
		else
			ctl_err("sending to jprofd: %s", strerror(-r));
		return CTL_EXIT_ERROR;
	}
	return 0;
}

/* Reports a daemon error response; returns the exit code. */
static int ctl_report_error(const struct jprof_response *resp)
{
	const char *msg = resp->err_message && *resp->err_message ? resp->err_message
								   : resp->err_code;

	ctl_err("%s", msg);
	return ctl_exit_for_error(resp->err_code);
}

/* An answer to want_id: a response with that id, or an error without id. */
static bool ctl_is_answer(const struct jprof_response *resp, int64_t want_id)
{
	return resp->has_id ? resp->id == want_id : !resp->ok;
}

/* Connects and negotiates the protocol version. 0 or an exit code. */
static int ctl_handshake(struct ctl_conn *c, const char *path)
{
	struct jprof_request req;
	struct jprof_response resp = { 0 };
	int64_t version;
	int r;

	r = ctl_conn_open(c, path);
	if (r)
		goto out;
	jprof_request_init(&req, JPROF_CMD_HELLO, CTL_ID_HELLO);
	snprintf(req.hello.client, sizeof(req.hello.client), "jprofctl %s", JPROF_VERSION);
	r = ctl_send_request(c, &req);
	if (r)
		goto out;
	r = ctl_recv(c, CTL_REPLY_TIMEOUT_MS, &resp);
	if (r)
		goto out;
	if (!ctl_is_answer(&resp, CTL_ID_HELLO)) {
		ctl_err("malformed response from jprofd (unexpected id)");
		r = CTL_EXIT_ERROR;
	} else if (!resp.ok) {
		r = ctl_report_error(&resp);
	} else if (strcmp(resp.type, "hello") != 0) {
		ctl_err("malformed response from jprofd (type \"%s\" instead of \"hello\")",
			resp.type);
		r = CTL_EXIT_ERROR;
	} else if ((version = ctl_int(resp.root, "version")) != JPROF_PROTO_VERSION) {
		ctl_err("jprofd answered with protocol version %" PRId64 ", jprofctl speaks %d",
			version, JPROF_PROTO_VERSION);
		r = CTL_EXIT_ERROR;
	}
out:
	jprof_response_free(&resp);
	return r;
}

/* ---- status ---------------------------------------------------------------- */

static void ctl_print_status(struct json_object *st)
{
	struct json_object *sampler = ctl_member(st, "sampler", json_type_object);
	struct json_object *lost = ctl_member(sampler, "lost", json_type_object);
	struct json_object *sessions = ctl_member(st, "sessions", json_type_object);
	struct json_object *list = ctl_member(sessions, "list", json_type_array);
	struct json_object *peer = ctl_member(st, "peer", json_type_object);
	const char *version = ctl_str(st, "version");
	const char *state = ctl_str(sampler, "state");
	char a[32], b[32], c[32], d[32];
	int all;

	ctl_format_span(a, sizeof(a), ctl_int(st, "uptime_ms"));
	printf("jprofd %s (protocol %s), pid %s, up %s\n", version ? version : "?",
	       ctl_num(b, sizeof(b), ctl_int(st, "protocol")),
	       ctl_num(c, sizeof(c), ctl_int(st, "pid")), a);
	printf("sampler: %s at %s Hz on %s CPUs\n", state ? state : "?",
	       ctl_num(a, sizeof(a), ctl_int(sampler, "rate_hz")),
	       ctl_num(b, sizeof(b), ctl_int(sampler, "cpus")));
	printf("samples: %s (idle %s)\n", ctl_num(a, sizeof(a), ctl_int(sampler, "samples")),
	       ctl_num(b, sizeof(b), ctl_int(sampler, "idle")));
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
	printf("sessions: %s active\n", ctl_num(a, sizeof(a), ctl_int(sessions, "active")));
	for (size_t i = 0; list && i < json_object_array_length(list); i++) {
		struct json_object *s = json_object_array_get_idx(list, i);

		if (!json_object_is_type(s, json_type_object))
			continue;
		ctl_format_span(a, sizeof(a), ctl_int(s, "elapsed_ms"));
		ctl_format_span(b, sizeof(b), ctl_int(s, "duration_ms"));
		printf("  session %s: ", ctl_num(c, sizeof(c), ctl_int(s, "id")));
		if (ctl_bool(s, "all") == 1)
			printf("all processes");
		else
			printf("pid %s", ctl_num(c, sizeof(c), ctl_int(s, "pid")));
		printf(", uid %s, %s / %s, %s samples\n", ctl_num(c, sizeof(c), ctl_int(s, "uid")),
		       a, b, ctl_num(d, sizeof(d), ctl_int(s, "samples")));
	}
	printf("clients: %s\n", ctl_num(a, sizeof(a), ctl_int(st, "clients")));
	all = ctl_bool(peer, "authorized_all");
	printf("you: uid %s, %s\n", ctl_num(a, sizeof(a), ctl_int(peer, "uid")),
	       all == 1 ? "may record any process and --all" :
	       all == 0 ? "may record your own processes" : "authorization unknown");
}

static void ctl_status_help(void)
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

static int ctl_cmd_status(int argc, char **argv, const char *socket_path)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_conn conn = { .fd = -1 };
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
			ctl_status_help();
			r = CTL_EXIT_OK;
			goto out;
		default:
			r = ctl_bad_option("status", argv, o);
			goto out;
		}
	}
	if (optind < argc) {
		r = ctl_usage_err("status", "unexpected argument '%s'", argv[optind]);
		goto out;
	}

	r = ctl_handshake(&conn, socket_path);
	if (r)
		goto out;
	jprof_request_init(&req, JPROF_CMD_STATUS, CTL_ID_COMMAND);
	r = ctl_send_request(&conn, &req);
	if (r)
		goto out;
	r = ctl_recv(&conn, CTL_REPLY_TIMEOUT_MS, &resp);
	if (r)
		goto out;
	if (!ctl_is_answer(&resp, CTL_ID_COMMAND)) {
		ctl_err("malformed response from jprofd (unexpected id)");
		r = CTL_EXIT_ERROR;
		goto out;
	}
	if (!resp.ok) {
		r = ctl_report_error(&resp);
		goto out;
	}
	st = ctl_member(resp.root, "status", json_type_object);
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
		ctl_print_status(st);
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		ctl_err("writing to stdout: %s", strerror(errno));
		r = CTL_EXIT_ERROR;
	}
out:
	jprof_response_free(&resp);
	ctl_conn_close(&conn);
	return r;
}

/* ---- record ---------------------------------------------------------------- */

static void ctl_on_signal(int sig)
{
	static const char msg[] = "\r\033[Kjprofctl: aborted\n";
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t ignored;

	if (ctl_signal_count++ > 0) {
		/* Second Ctrl-C: leave at once, without a half-written file. */
		if (ctl_tmp_active)
			unlink(ctl_tmp_path);
		ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(CTL_EXIT_ERROR);
	}
	ignored = write(ctl_signal_pipe[1], &b, 1);
	(void)ignored;
	errno = saved;
}

static int ctl_signals_install(void)
{
	struct sigaction sa = { .sa_handler = ctl_on_signal };
	int r = 0;

	if (pipe2(ctl_signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = -errno;
		goto out;
	}
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		r = -errno;
out:
	return r;
}

static int ctl_write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes path atomically: a temporary file next to it, then rename(), so a
 * reader never sees half a profile. Reports failures itself. */
static int ctl_write_file(const char *path, const char *data, size_t len)
{
	int fd = -1, r;

	r = snprintf(ctl_tmp_path, sizeof(ctl_tmp_path), "%s.tmp.%d", path, (int)getpid());
	if (r < 0 || (size_t)r >= sizeof(ctl_tmp_path)) {
		r = -ENAMETOOLONG;
		ctl_err("cannot write %s: %s", path, strerror(-r));
		goto out;
	}
	fd = open(ctl_tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0) {
		r = -errno;
		ctl_err("cannot create %s: %s", ctl_tmp_path, strerror(-r));
		goto out;
	}
	ctl_tmp_active = 1;
	r = ctl_write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	fd = -1;
	if (r < 0) {
		ctl_err("cannot write %s: %s", ctl_tmp_path, strerror(-r));
		goto out;
	}
	if (rename(ctl_tmp_path, path) < 0) {
		r = -errno;
		ctl_err("cannot rename %s to %s: %s", ctl_tmp_path, path, strerror(-r));
		goto out;
	}
	ctl_tmp_active = 0;
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	if (ctl_tmp_active) {
		unlink(ctl_tmp_path);
		ctl_tmp_active = 0;
	}
	return r;
}

struct ctl_record {
	struct jprof_request req;
	const char *output;     /* NULL: stdout */
	bool progress_line;     /* stderr is a terminal and progress is wanted */
	bool json_events;
	bool cancelling;
	bool started;
	char target[96];        /* "pid 1234 (java)" or "all processes" */
};

static void ctl_record_help(void)
{
	printf("Usage: jprofctl record (--pid PID | --all) [options]\n"
	       "\n"
	       "Record a CPU profile of one process or of the whole host and write it to\n"
	       "FILE or stdout. Ctrl-C stops early and still writes what was recorded;\n"
	       "a second Ctrl-C aborts.\n"
	       "\n"
	       "  -p, --pid PID          process to profile (yours, unless you are root or\n"
	       "                         in group jprof)\n"
	       "  -a, --all              every process (root or group jprof only)\n"
	       "  -d, --duration TIME    how long: 30s, 500ms, 2m, 1h or seconds (default 30s)\n"
	       "  -i, --interval TIME    sampling interval: 10ms, 1ms, 250us, 1s (default 10ms,\n"
	       "                         range 100us..10s)\n"
	       "  -o, --output FILE      write the profile to FILE (atomically) instead of\n"
	       "                         stdout\n"
	       "  -f, --format FMT       collapsed, json, html, pprof, text, raw; default from\n"
	       "                         the FILE extension (.collapsed/.folded, .json, .html,\n"
	       "                         .pb.gz/.pprof, .txt; others collapsed); without -o,\n"
	       "                         text on a terminal and collapsed otherwise\n"
	       "      --threads          add a frame per thread at the root of each stack\n"
	       "      --java MODE        Java frames for a JVM: auto (default: load the agent,\n"
	       "                         fall back to native stacks with a warning), off, or\n"
	       "                         require (fail unless Java frames can be recorded)\n"
	       "      --java-lines       Java frames as Class.method:line\n"
	       "      --java-signatures  Java frames with their JVM signatures\n"
	       "      --no-progress      no progress line (there is none unless stderr is a\n"
	       "                         terminal)\n"
	       "      --json-events      print the daemon's events on stderr as JSON lines\n"
	       "                         (the profile's data left out)\n"
	       "      --socket PATH      daemon socket (default $%s or %s)\n"
	       "  -h, --help             show this help\n"
	       "\n"
	       "Exit status: 0 profile written (also after Ctrl-C), 1 error, 2 usage,\n"
	       "3 daemon not running, 4 permission denied, 5 no such process,\n"
	       "6 the process exited during the recording (partial profile written).\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
}

static void ctl_show_progress(const struct ctl_record *rec, int64_t elapsed_ms,
			      int64_t duration_ms, int64_t samples)
{
	char n[32];

	if (!rec->progress_line)
		return;
	fprintf(stderr, "\r\033[Krecording %s: %.1fs / %.1fs, %s samples%s", rec->target,
		elapsed_ms < 0 ? 0.0 : (double)elapsed_ms / 1000.0,
		duration_ms < 0 ? 0.0 : (double)duration_ms / 1000.0,
		ctl_num(n, sizeof(n), samples), rec->cancelling ? " (stopping)" : "");
	fflush(stderr);
	ctl_progress_shown = true;
}

static void ctl_print_event(struct json_object *obj)
{
	size_t len;
	char *line = jprof_json_line(obj, &len);

	if (line) {
		fwrite(line, 1, len, stderr);
		fflush(stderr);
	}
	free(line);
}

/* Writes the profile of a "profile" response and says so. Returns an exit code. */
static int ctl_record_finish(struct ctl_record *rec, struct jprof_response *resp)
{
	struct json_object *summary = ctl_member(resp->root, "summary", json_type_object);
	struct json_object *data_obj = ctl_member(resp->root, "data", json_type_string);
	const char *status = ctl_str(resp->root, "status");
	const char *encoding = ctl_str(resp->root, "encoding");
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

	ctl_clear_progress();
	if (rec->output) {
		r = ctl_write_file(rec->output, data, len);
		if (r < 0) {
			r = CTL_EXIT_ERROR;
			goto out;
		}
	} else {
		r = ctl_write_all(STDOUT_FILENO, data, len);
		if (r < 0) {
			ctl_err("writing the profile to stdout: %s", strerror(-r));
			r = CTL_EXIT_ERROR;
			goto out;
		}
	}

	if (rec->json_events) {
		/* The data went to the output; the event says how it ended. */
		json_object_object_del(resp->root, "data");
		ctl_print_event(resp->root);
	} else {
		fprintf(stderr, "wrote %s: %s samples, %s stacks (%s)\n",
			rec->output ? rec->output : "stdout",
			ctl_num(a, sizeof(a), ctl_int(summary, "samples")),
			ctl_num(b, sizeof(b), ctl_int(summary, "stacks")), status);
		if (ctl_bool(summary, "truncated") == 1)
			fprintf(stderr, "jprofctl: the profile was truncated by the daemon's limits\n");
	}
	if (strcmp(status, "process_exited") == 0) {
		if (!rec->json_events)
			fprintf(stderr, "jprofctl: %s exited during the recording\n", rec->target);
		r = CTL_EXIT_PROCESS_EXITED;
	} else {
		r = CTL_EXIT_OK;
	}
out:
	free(decoded);
	return r;
}

/* ctl_record_event() result meaning "not finished yet"; exit codes are >= 0. */
#define CTL_CONTINUE (-1)

/* Handles one response during a recording. Returns CTL_CONTINUE, or the exit
 * code to stop with. */
static int ctl_record_event(struct ctl_record *rec, struct jprof_response *resp)
{
	const char *type = resp->type;
	int r = CTL_CONTINUE;

	if (!resp->has_id || resp->id != CTL_ID_CANCEL) {
		if (!ctl_is_answer(resp, CTL_ID_COMMAND)) {
			ctl_err("malformed response from jprofd (unexpected id)");
			r = CTL_EXIT_ERROR;
			goto out;
		}
	}
	if (rec->json_events && !(resp->ok && strcmp(type, "profile") == 0))
		ctl_print_event(resp->root);

	if (resp->has_id && resp->id == CTL_ID_CANCEL) {
		/* The record may have ended just before our cancel arrived. */
		if (!resp->ok && strcmp(resp->err_code, JPROF_E_NO_SUCH_SESSION) != 0 &&
		    !rec->json_events)
			ctl_err("cancel failed: %s", resp->err_message);
		goto out;
	}
	if (!resp->ok) {
		r = ctl_report_error(resp);
		goto out;
	}
	if (strcmp(type, "started") == 0) {
		struct json_object *t = ctl_member(resp->root, "target", json_type_object);
		const char *comm = ctl_str(t, "comm");

		if (ctl_bool(t, "all") == 1)
			snprintf(rec->target, sizeof(rec->target), "all processes");
		else if (comm)
			snprintf(rec->target, sizeof(rec->target), "pid %d (%.32s)", rec->req.record.pid,
				 comm);
		rec->started = true;
		ctl_show_progress(rec, 0, ctl_int(resp->root, "duration_ms"), 0);
	} else if (strcmp(type, "progress") == 0) {
		ctl_show_progress(rec, ctl_int(resp->root, "elapsed_ms"),
				  ctl_int(resp->root, "duration_ms"), ctl_int(resp->root, "samples"));
	} else if (strcmp(type, "profile") == 0) {
		r = ctl_record_finish(rec, resp);
	} else if (strcmp(type, "warning") == 0 && !rec->json_events) {
		const char *msg = ctl_str(resp->root, "message");

		if (rec->progress_line)
			fprintf(stderr, "\r\033[K");
		fprintf(stderr, "jprofctl: warning: %s\n", msg ? msg : "(no message)");
	}
	/* Other types are newer additions; ignore them. */
out:
	return r;
}

static int ctl_record_cancel(struct ctl_record *rec, struct ctl_conn *conn)
{
	struct jprof_request req;

	rec->cancelling = true;
	if (rec->progress_line) {
		fprintf(stderr, "\r\033[Kstopping %s (Ctrl-C again to abort)", rec->target);
		fflush(stderr);
		ctl_progress_shown = true;
	}
	jprof_request_init(&req, JPROF_CMD_CANCEL, CTL_ID_CANCEL);
	req.cancel.target = CTL_ID_COMMAND;
	return ctl_send_request(conn, &req);
}

static int ctl_cmd_record(int argc, char **argv, const char *socket_path)
{
	enum { OPT_THREADS = 256, OPT_NO_PROGRESS, OPT_JSON_EVENTS, OPT_SOCKET, OPT_JAVA,
	       OPT_JAVA_LINES, OPT_JAVA_SIGS };
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "all", no_argument, NULL, 'a' },
		{ "duration", required_argument, NULL, 'd' },
		{ "interval", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "threads", no_argument, NULL, OPT_THREADS },
		{ "java", required_argument, NULL, OPT_JAVA },
		{ "java-lines", no_argument, NULL, OPT_JAVA_LINES },
		{ "java-signatures", no_argument, NULL, OPT_JAVA_SIGS },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		{ "json-events", no_argument, NULL, OPT_JSON_EVENTS },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_conn conn = { .fd = -1 };
	struct jprof_response resp = { 0 };
	struct ctl_record rec = { 0 };
	const char *format = NULL;
	bool has_pid = false, no_progress = false;
	int r, o;

	jprof_request_init(&rec.req, JPROF_CMD_RECORD, CTL_ID_COMMAND);
	while ((o = getopt_long(argc, argv, ":p:ad:i:o:f:h", opts, NULL)) != -1) {
		switch (o) {
		case 'p':
			r = ctl_parse_pid(optarg, &rec.req.record.pid);
			if (r < 0) {
				r = ctl_usage_err("record", "invalid pid '%s'", optarg);
				goto out;
			}
			has_pid = true;
			break;
		case 'a':
			rec.req.record.all = true;
			break;
		case 'd':
			r = ctl_parse_duration_ms(optarg, &rec.req.record.duration_ms);
			if (r < 0) {
				r = ctl_usage_err("record",
						  "invalid duration '%s': use e.g. 30s, 500ms, 2m, 1h "
						  "or seconds, from 1ms to 24h", optarg);
				goto out;
			}
			break;
		case 'i':
			r = ctl_parse_interval_us(optarg, &rec.req.record.interval_us);
			if (r < 0) {
				r = ctl_usage_err("record",
						  "invalid interval '%s': use e.g. 10ms, 1ms, 250us, 1s, "
						  "from 100us to 10s", optarg);
				goto out;
			}
			break;
		case 'o':
			if (!*optarg) {
				r = ctl_usage_err("record", "empty output file name");
				goto out;
			}
			rec.output = optarg;
			break;
		case 'f':
			if (!ctl_format_name_ok(optarg)) {
				r = ctl_usage_err("record", "invalid format '%s'", optarg);
				goto out;
			}
			format = optarg;
			break;
		case OPT_THREADS:
			rec.req.record.thread_frames = true;
			break;
		case OPT_JAVA:
			if (strcmp(optarg, "auto") == 0) {
				rec.req.record.java = JPROF_JAVA_AUTO;
			} else if (strcmp(optarg, "off") == 0) {
				rec.req.record.java = JPROF_JAVA_OFF;
			} else if (strcmp(optarg, "require") == 0) {
				rec.req.record.java = JPROF_JAVA_REQUIRE;
			} else {
				r = ctl_usage_err("record", "--java wants auto, off or require, not '%s'",
						  optarg);
				goto out;
			}
			break;
		case OPT_JAVA_LINES:
			rec.req.record.java_lines = true;
			break;
		case OPT_JAVA_SIGS:
			rec.req.record.java_signatures = true;
			break;
		case OPT_NO_PROGRESS:
			no_progress = true;
			break;
		case OPT_JSON_EVENTS:
			rec.json_events = true;
			break;
		case OPT_SOCKET:
			socket_path = optarg;
			break;
		case 'h':
			ctl_record_help();
			r = CTL_EXIT_OK;
			goto out;
		default:
			r = ctl_bad_option("record", argv, o);
			goto out;
		}
	}
	if (optind < argc) {
		r = ctl_usage_err("record", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (has_pid == rec.req.record.all) {
		r = ctl_usage_err("record", "give exactly one of --pid PID or --all");
		goto out;
	}
	/* Without -o a person at a terminal wants the summary, a pipe the
	 * folded stacks that flame-graph tools read. */
	if (!format)
		format = rec.output ? ctl_format_for_path(rec.output)
				    : isatty(STDOUT_FILENO) ? "text" : "collapsed";
	snprintf(rec.req.record.format, sizeof(rec.req.record.format), "%s", format);
	rec.req.record.progress = !no_progress;
	rec.progress_line = !no_progress && !rec.json_events && isatty(STDERR_FILENO);
	if (rec.req.record.all)
		snprintf(rec.target, sizeof(rec.target), "all processes");
	else
		snprintf(rec.target, sizeof(rec.target), "pid %d", rec.req.record.pid);

	r = ctl_handshake(&conn, socket_path);
	if (r)
		goto out;
	if (ctl_signals_install() < 0) {
		ctl_err("cannot set up signal handling: %s", strerror(errno));
		r = CTL_EXIT_ERROR;
		goto out;
	}
	r = ctl_send_request(&conn, &rec.req);
	if (r)
		goto out;

	for (;;) {
		r = ctl_recv(&conn, -1, &resp);
		if (r == -EINTR) {
			if (!rec.cancelling) {
				r = ctl_record_cancel(&rec, &conn);
				if (r)
					goto out;
			}
			continue;
		}
		if (r)
			goto out;
		r = ctl_record_event(&rec, &resp);
		jprof_response_free(&resp);
		if (r != CTL_CONTINUE)
			goto out;
	}
out:
	ctl_clear_progress();
	jprof_response_free(&resp);
	ctl_conn_close(&conn);
	return r;
}

/* ---- profile (the continuous host profile) --------------------------------- */

static void ctl_profile_help(void)
{
	printf("Usage: jprofctl profile [--last TIME | --from AGO [--to AGO]] [filters] [options]\n"
	       "\n"
	       "Write the continuous host profile that jprofd keeps all the time (no new\n"
	       "recording): the last TIME of it, or the range from AGO to AGO before now.\n"
	       "\n"
	       "  -l, --last TIME        how far back: 60s, 5m, 1h or seconds (default 60s,\n"
	       "                         whole seconds up to 24h)\n"
	       "      --from AGO         start of a range, e.g. 10m (ten minutes ago)\n"
	       "      --to AGO           end of the range (default now), e.g. 5m\n"
	       "  -p, --pid PID          only this process (yours, unless you are root or in\n"
	       "                         group jprof; the whole host needs one of those)\n"
	       "  -c, --comm NAME        only processes named NAME\n"
	       "  -u, --unit UNIT        only processes of the systemd unit (nginx.service)\n"
	       "  -g, --cgroup CGROUP    only processes in the cgroup path (and below), or\n"
	       "                         of the container id (at least 12 digits)\n"
	       "      --group-by KEY     root frame per none, comm, pid, thread, unit or\n"
	       "                         cgroup (default comm; none with --pid)\n"
	       "  -o, --output FILE      write the profile to FILE (atomically) instead of\n"
	       "                         stdout\n"
	       "  -f, --format FMT       collapsed, json, html, pprof, text, raw; default as\n"
	       "                         for record\n"
	       "      --json-events      print the response on stderr as a JSON line (the\n"
	       "                         profile's data left out)\n"
	       "      --socket PATH      daemon socket (default $%s or %s)\n"
	       "  -h, --help             show this help\n"
	       "\n"
	       "Exit status: 0 profile written (an empty one if nothing matched), 1 error,\n"
	       "2 usage, 3 daemon not running, 4 permission denied, 5 no such process.\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
}

/* A span back from now, in whole milliseconds of at most 24 h. */
static int ctl_parse_ago_ms(const char *s, int64_t *ms)
{
	uint64_t us;
	int r = ctl_parse_time_us(s, 1000000, &us);

	if (r < 0)
		return r;
	if (us % 1000 != 0 || us / 1000 > (uint64_t)JPROF_RANGE_MS_MAX)
		return -ERANGE;
	*ms = (int64_t)(us / 1000);
	return 0;
}

static int ctl_copy_filter(const char *opt, const char *v, char *dst, size_t size)
{
	if (!*v || strlen(v) >= size)
		return ctl_usage_err("profile", "%s wants a non-empty value of at most %zu bytes", opt,
				     size - 1);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

static int ctl_cmd_profile(int argc, char **argv, const char *socket_path)
{
	enum { OPT_FROM = 256, OPT_TO, OPT_GROUP_BY, OPT_JSON_EVENTS, OPT_SOCKET };
	static const struct option opts[] = {
		{ "last", required_argument, NULL, 'l' },
		{ "from", required_argument, NULL, OPT_FROM },
		{ "to", required_argument, NULL, OPT_TO },
		{ "pid", required_argument, NULL, 'p' },
		{ "comm", required_argument, NULL, 'c' },
		{ "unit", required_argument, NULL, 'u' },
		{ "cgroup", required_argument, NULL, 'g' },
		{ "group-by", required_argument, NULL, OPT_GROUP_BY },
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "json-events", no_argument, NULL, OPT_JSON_EVENTS },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct jprof_profile_req *pr;
	struct ctl_conn conn = { .fd = -1 };
	struct jprof_response resp = { 0 };
	struct ctl_record rec = { 0 };
	const char *format = NULL;
	bool has_last = false, has_from = false, has_to = false;
	int64_t from = 0, to = 0, last = 0;
	int r = 0, o;

	jprof_request_init(&rec.req, JPROF_CMD_PROFILE, CTL_ID_COMMAND);
	pr = &rec.req.profile;
	while ((o = getopt_long(argc, argv, ":l:p:c:u:g:o:f:h", opts, NULL)) != -1) {
		switch (o) {
		case 'l':
			if (ctl_parse_ago_ms(optarg, &last) < 0 || last % 1000 || last < 1000) {
				r = ctl_usage_err("profile", "invalid --last '%s': use e.g. 60s, 5m, 1h "
						  "(whole seconds, 1s to 24h)", optarg);
				goto out;
			}
			has_last = true;
			break;
		case OPT_FROM:
		case OPT_TO:
			if (ctl_parse_ago_ms(optarg, o == OPT_FROM ? &from : &to) < 0) {
				r = ctl_usage_err("profile", "invalid %s '%s': use e.g. 10m, 90s (before now, "
						  "up to 24h)", o == OPT_FROM ? "--from" : "--to", optarg);
				goto out;
			}
			*(o == OPT_FROM ? &has_from : &has_to) = true;
			break;
		case 'p':
			if (ctl_parse_pid(optarg, &pr->pid) < 0) {
				r = ctl_usage_err("profile", "invalid pid '%s'", optarg);
				goto out;
			}
			break;
		case 'c':
			r = ctl_copy_filter("--comm", optarg, pr->comm, sizeof(pr->comm));
			if (r)
				goto out;
			break;
		case 'u':
			r = ctl_copy_filter("--unit", optarg, pr->unit, sizeof(pr->unit));
			if (r)
				goto out;
			break;
		case 'g':
			r = ctl_copy_filter("--cgroup", optarg, pr->cgroup, sizeof(pr->cgroup));
			if (r)
				goto out;
			break;
		case OPT_GROUP_BY:
			r = ctl_copy_filter("--group-by", optarg, pr->group_by, sizeof(pr->group_by));
			if (r)
				goto out;
			break;
		case 'o':
			if (!*optarg) {
				r = ctl_usage_err("profile", "empty output file name");
				goto out;
			}
			rec.output = optarg;
			break;
		case 'f':
			if (!ctl_format_name_ok(optarg)) {
				r = ctl_usage_err("profile", "invalid format '%s'", optarg);
				goto out;
			}
			format = optarg;
			break;
		case OPT_JSON_EVENTS:
			rec.json_events = true;
			break;
		case OPT_SOCKET:
			socket_path = optarg;
			break;
		case 'h':
			ctl_profile_help();
			r = CTL_EXIT_OK;
			goto out;
		default:
			r = ctl_bad_option("profile", argv, o);
			goto out;
		}
	}
	if (optind < argc) {
		r = ctl_usage_err("profile", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if (has_last && (has_from || has_to)) {
		r = ctl_usage_err("profile", "give --last or --from/--to, not both");
		goto out;
	}
	if (has_to && !has_from) {
		r = ctl_usage_err("profile", "--to needs --from");
		goto out;
	}
	if (has_from) {
		if (from <= to) {
			r = ctl_usage_err("profile", "--from must be further back than --to");
			goto out;
		}
		pr->has_range = true;
		pr->last_s = 0;
		pr->from_ms = -from;
		pr->to_ms = -to;
	} else if (has_last) {
		pr->last_s = (uint32_t)(last / 1000);
	}
	if (!format)
		format = rec.output ? ctl_format_for_path(rec.output)
				    : isatty(STDOUT_FILENO) ? "text" : "collapsed";
	snprintf(pr->format, sizeof(pr->format), "%s", format);
	if (pr->pid)
		snprintf(rec.target, sizeof(rec.target), "pid %d", pr->pid);
	else
		snprintf(rec.target, sizeof(rec.target), "the host");

	r = ctl_handshake(&conn, socket_path);
	if (r)
		goto out;
	r = ctl_send_request(&conn, &rec.req);
	if (r)
		goto out;
	r = ctl_recv(&conn, CTL_REPLY_TIMEOUT_MS * 6, &resp);
	if (r)
		goto out;
	if (!ctl_is_answer(&resp, CTL_ID_COMMAND)) {
		ctl_err("malformed response from jprofd (unexpected id)");
		r = CTL_EXIT_ERROR;
	} else if (!resp.ok) {
		r = ctl_report_error(&resp);
	} else if (strcmp(resp.type, "profile") != 0) {
		ctl_err("malformed response from jprofd (type \"%s\" instead of \"profile\")",
			resp.type);
		r = CTL_EXIT_ERROR;
	} else {
		r = ctl_record_finish(&rec, &resp);
	}
out:
	jprof_response_free(&resp);
	ctl_conn_close(&conn);
	return r;
}

/* ---- main -------------------------------------------------------------------- */

static void ctl_help(void)
{
	printf("Usage: jprofctl [--socket PATH] COMMAND [options]\n"
	       "\n"
	       "Client of jprofd, the system-wide profiler daemon.\n"
	       "\n"
	       "Commands:\n"
	       "  status     show the daemon's state (--json for the raw response)\n"
	       "  record     record a profile of a process (--pid) or the host (--all)\n"
	       "  profile    the continuous host profile of the last minutes (--last)\n"
	       "\n"
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
			ctl_help();
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

	if (strcmp(cmd, "status") == 0)
		return ctl_cmd_status(argc, argv, socket_path);
	if (strcmp(cmd, "record") == 0)
		return ctl_cmd_record(argc, argv, socket_path);
	if (strcmp(cmd, "profile") == 0)
		return ctl_cmd_profile(argc, argv, socket_path);
	if (strcmp(cmd, "help") == 0) {
		ctl_help();
		return CTL_EXIT_OK;
	}
	return ctl_usage_err(NULL, "unknown command '%s'", cmd);
}
