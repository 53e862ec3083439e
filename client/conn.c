#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "field.h"

#ifndef JPROF_VERSION
#define JPROF_VERSION "0.0.0"
#endif

static const char conn_start_hint[] =
	"is jprofd running? Start it with `sudo systemctl start jprofd` (or run jprofd as root)";

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->len = c->cap = c->scanned = c->consumed = 0;
}

/* Connects to the daemon's socket. */
static int conn_open(struct conn *c, const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = -1, r, err;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->wake_fd = -1;
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
			ctl_err("cannot connect to %s: %s; %s", path, strerror(err), conn_start_hint);
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
static int conn_send_line(struct conn *c, const char *line, size_t len)
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
		r = poll(&pfd, 1, CONN_REPLY_TIMEOUT_MS);
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

int conn_send(struct conn *c, const struct jprof_request *req)
{
	char *line = jprof_request_encode(req);
	int r;

	if (!line) {
		ctl_err("out of memory");
		return CTL_EXIT_ERROR;
	}
	r = conn_send_line(c, line, strlen(line));
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

/* Hands out the next complete line if one is buffered: 1 with *line and *len
 * (valid until the next call), 0 if none. */
static int conn_take_line(struct conn *c, char **line, size_t *len)
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
static int conn_fill(struct conn *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		size_t cap = c->cap ? c->cap * 2 : 131072;
		char *p;

		if (cap > CONN_MAX_LINE + 65536)
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

/* Waits for the next line. Returns 1 with a line, 0 at EOF, -EINTR when
 * wake_fd became readable, -ETIMEDOUT, or another -errno. */
static int conn_read_line(struct conn *c, int timeout_ms, char **line, size_t *len)
{
	struct pollfd pfd[2] = {
		{ .fd = c->fd, .events = POLLIN },
		{ .fd = c->wake_fd, .events = POLLIN },
	};
	int r;

	for (;;) {
		r = conn_take_line(c, line, len);
		if (r)
			goto out;
		r = poll(pfd, c->wake_fd >= 0 ? 2 : 1, timeout_ms);
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
		if (c->wake_fd >= 0 && (pfd[1].revents & POLLIN)) {
			unsigned char b[16];

			while (read(c->wake_fd, b, sizeof(b)) > 0)
				;
			r = -EINTR;
			goto out;
		}
		if (pfd[0].revents) {
			r = conn_fill(c);
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
static int conn_read_failed(const struct conn *c, int r)
{
	if (r == 0)
		ctl_err("jprofd closed the connection unexpectedly");
	else if (r == -ETIMEDOUT)
		ctl_err("no answer from jprofd at %s", c->path);
	else if (r == -EMSGSIZE)
		ctl_err("response from jprofd is larger than %zu bytes", CONN_MAX_LINE);
	else
		ctl_err("reading from jprofd: %s", strerror(-r));
	return CTL_EXIT_ERROR;
}

int conn_recv(struct conn *c, int timeout_ms, struct jprof_response *resp)
{
	char *line = NULL;
	size_t len = 0;
	int r;

	r = conn_read_line(c, timeout_ms, &line, &len);
	if (r == -EINTR)
		goto out;
	if (r <= 0) {
		r = conn_read_failed(c, r);
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

bool conn_is_answer(const struct jprof_response *resp, int64_t want_id)
{
	return resp->has_id ? resp->id == want_id : !resp->ok;
}

int conn_check_answer(const struct jprof_response *resp, int64_t want_id)
{
	const char *msg;

	if (!conn_is_answer(resp, want_id)) {
		ctl_err("malformed response from jprofd (unexpected id)");
		return CTL_EXIT_ERROR;
	}
	if (!resp->ok) {
		msg = resp->err_message && *resp->err_message ? resp->err_message : resp->err_code;
		ctl_err("%s", msg);
		return ctl_exit_for_error(resp->err_code);
	}
	return 0;
}

int conn_call(struct conn *c, const struct jprof_request *req, struct jprof_response *resp)
{
	int r = conn_send(c, req);

	if (r)
		return r;
	r = conn_recv(c, CONN_REPLY_TIMEOUT_MS, resp);
	if (r)
		return r;
	return conn_check_answer(resp, req->id);
}

int conn_handshake(struct conn *c, const char *path)
{
	struct jprof_request req;
	struct jprof_response resp = { 0 };
	int64_t version;
	int r;

	r = conn_open(c, path);
	if (r)
		goto out;
	jprof_request_init(&req, JPROF_CMD_HELLO, CONN_ID_HELLO);
	snprintf(req.hello.client, sizeof(req.hello.client), "jprofctl %s", JPROF_VERSION);
	r = conn_call(c, &req, &resp);
	if (r)
		goto out;
	if (strcmp(resp.type, "hello") != 0) {
		ctl_err("malformed response from jprofd (type \"%s\" instead of \"hello\")",
			resp.type);
		r = CTL_EXIT_ERROR;
	} else if ((version = field_int(resp.root, "version")) != JPROF_PROTO_VERSION) {
		ctl_err("jprofd answered with protocol version %" PRId64 ", jprofctl speaks %d",
			version, JPROF_PROTO_VERSION);
		r = CTL_EXIT_ERROR;
	}
out:
	jprof_response_free(&resp);
	return r;
}
