#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agentlink.h"
#include "authz.h"
#include "buf.h"
#include "jprof_proto.h"
#include "log.h"
#include "loop.h"

#define READ_CHUNK 65536
#define READ_BUDGET (1024 * 1024)   /* bytes per wakeup, so one client cannot starve others */
#define MAX_LISTENERS 8

struct server_client {
	struct server *srv;
	struct server_client *next;
	int fd;
	struct loop_source *src;
	struct authz_peer peer;
	struct buf in, out;
	bool discarding;            /* inside an oversized request line */
	bool decided;               /* JSON client, not an agent */
	bool want_out;
	bool dead;
	max_align_t data[];         /* cfg.client_data_size bytes for the dispatcher */
};

struct listener {
	int fd;
	struct loop_source *src;
};

struct server {
	struct loop *loop;
	struct server_config cfg;
	struct server_hooks hooks;
	struct listener listeners[MAX_LISTENERS];
	unsigned nlisteners;
	struct server_client *clients;
	unsigned nclients;
};

/* ---- output ---- */

static void client_flush(struct server_client *c)
{
	while (c->out.len) {
		ssize_t n = send(c->fd, c->out.data, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			c->dead = true;  /* EPIPE etc.: the read side will clean up */
			buf_reset(&c->out);
			break;
		}
		buf_consume(&c->out, (size_t)n);
	}
	if (c->dead)
		return;
	if (!!c->out.len != c->want_out) {
		c->want_out = c->out.len != 0;
		loop_set_events(c->src, EPOLLIN | EPOLLRDHUP | (c->want_out ? EPOLLOUT : 0));
	}
}

void server_client_send(struct server_client *c, const char *line, size_t len)
{
	if (c->dead)
		return;
	if (c->out.len + len > c->srv->cfg.max_output || buf_append(&c->out, line, len) < 0) {
		log_warn("client pid %d uid %u: not reading its replies (%zu bytes queued); disconnecting",
			 (int)c->peer.pid, (unsigned)c->peer.uid, c->out.len);
		c->dead = true;
		buf_reset(&c->out);
		return;
	}
	client_flush(c);
}

void server_client_send_error(struct server_client *c, int64_t id, bool has_id, const char *code,
			      const char *message)
{
	char *line = jprof_error_line(id, has_id, code, message);

	if (line)
		server_client_send(c, line, strlen(line));
	free(line);
}

void *server_client_data(struct server_client *c)
{
	return c->data;
}

/* ---- input: line framing ---- */

static void send_line_too_long(struct server_client *c)
{
	char msg[64];

	snprintf(msg, sizeof(msg), "request line longer than %d bytes", JPROF_PROTO_MAX_REQUEST);
	server_client_send_error(c, 0, false, JPROF_E_LINE_TOO_LONG, msg);
}

static bool is_blank(const char *line, size_t len)
{
	/* Keep-alives and stray CRs are not requests. */
	for (size_t i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
			return false;
	return true;
}

static void process_input(struct server_client *c)
{
	struct server *srv = c->srv;
	char *nl;

	while (!c->dead && (nl = memchr(c->in.data, '\n', c->in.len))) {
		size_t len = (size_t)(nl - c->in.data);

		if (c->discarding)
			c->discarding = false;  /* end of an oversized line, already answered */
		else if (len + 1 > JPROF_PROTO_MAX_REQUEST)
			send_line_too_long(c);
		else if (!is_blank(c->in.data, len))
			srv->hooks.line(srv->hooks.ctx, c, &c->peer, c->in.data, len);
		buf_consume(&c->in, len + 1);
	}
	if (c->in.len >= JPROF_PROTO_MAX_REQUEST) {
		if (!c->discarding)
			send_line_too_long(c);
		c->discarding = true;
		buf_reset(&c->in);
	}
}

/* ---- connections ---- */

static void client_unlink(struct server_client *c)
{
	struct server *srv = c->srv;
	struct server_client **pp = &srv->clients;

	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	srv->nclients--;
	loop_remove(c->src);  /* deregisters the fd before anyone else watches it */
}

static void client_drop(struct server_client *c)
{
	c->srv->hooks.gone(c->srv->hooks.ctx, c);
	client_unlink(c);
	close(c->fd);
	buf_release(&c->in);
	buf_release(&c->out);
	free(c);
}

/* The first bytes tell a JVM agent (binary frames, "JPAG") from a JSON
 * client. Returns true when the connection was handed to the agent link. */
static bool maybe_hand_over(struct server_client *c)
{
	static const char magic[4] = { 'J', 'P', 'A', 'G' };
	struct agentlink *agents = c->srv->cfg.agents;
	size_t n = c->in.len < 4 ? c->in.len : 4;
	int r;

	if (c->decided)
		return false;
	if (memcmp(c->in.data, magic, n) != 0 || !agents) {
		c->decided = true;
		return false;
	}
	if (n < 4)
		return false;  /* wait for the rest of the magic */
	client_unlink(c);
	r = agentlink_adopt(agents, c->fd, c->peer.pid, c->peer.uid, c->in.data, c->in.len);
	if (r < 0 && r != -ESRCH)  /* its process gone: agentlink's audit line says so */
		log_warn("cannot serve the agent of pid %d: %s", (int)c->peer.pid, strerror(-r));
	buf_release(&c->in);
	buf_release(&c->out);
	free(c);
	return true;
}

static void on_client(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct server_client *c = arg;
	size_t budget = READ_BUDGET;

	if (events & EPOLLOUT)
		client_flush(c);
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
		while (budget && !c->dead) {
			ssize_t n;

			if (buf_reserve(&c->in, READ_CHUNK) < 0) {
				c->dead = true;
				break;
			}
			n = recv(fd, c->in.data + c->in.len, READ_CHUNK, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				if (errno != EAGAIN && errno != EWOULDBLOCK)
					c->dead = true;
				break;
			}
			if (n == 0) {
				c->dead = true;
				break;
			}
			c->in.len += (size_t)n;
			c->in.data[c->in.len] = '\0';
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			if (maybe_hand_over(c))
				return;
			process_input(c);
		}
	}
	if (c->dead)
		client_drop(c);
}

/* Refuses a connection past max_clients with an error line it may read. */
static void refuse_busy(int cfd)
{
	char *line = jprof_error_line(0, false, JPROF_E_LIMIT, "too many clients connected");

	if (line)
		send(cfd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
	free(line);
	close(cfd);
}

static void on_listener(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct server *srv = arg;

	for (int i = 0; i < 64; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct server_client *c;
		int r;

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				log_warn("accept failed: %s", strerror(errno));
			return;
		}
		if (srv->nclients >= srv->cfg.max_clients) {
			refuse_busy(cfd);
			continue;
		}
		c = calloc(1, sizeof(*c) + srv->cfg.client_data_size);
		if (!c) {
			close(cfd);
			continue;
		}
		c->srv = srv;
		c->fd = cfd;
		r = authz_peer_from_fd(cfd, srv->cfg.group, &c->peer);
		if (r == 0)
			r = loop_add_io(srv->loop, cfd, EPOLLIN | EPOLLRDHUP, on_client, c, &c->src);
		if (r < 0) {
			log_warn("cannot serve a new client: %s", strerror(-r));
			close(cfd);
			free(c);
			continue;
		}
		c->next = srv->clients;
		srv->clients = c;
		srv->nclients++;
		log_debug("client connected: pid %d uid %u%s", (int)c->peer.pid, (unsigned)c->peer.uid,
			  c->peer.privileged ? " (privileged)" : "");
	}
}

int server_new(struct loop *loop, const struct server_config *cfg, const struct server_hooks *hooks,
	       struct server **out)
{
	struct server *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->cfg = *cfg;
	s->hooks = *hooks;
	if (!s->cfg.max_clients)
		s->cfg.max_clients = 1024;
	if (!s->cfg.max_output)
		s->cfg.max_output = 512u << 20;
	*out = s;
	return 0;
}

int server_add_listener(struct server *s, int fd)
{
	struct listener *l;
	int r;

	if (s->nlisteners >= MAX_LISTENERS) {
		close(fd);
		return -EMFILE;
	}
	l = &s->listeners[s->nlisteners];
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	r = loop_add_io(s->loop, fd, EPOLLIN, on_listener, s, &l->src);
	if (r < 0) {
		close(fd);
		return r;
	}
	l->fd = fd;
	s->nlisteners++;
	return 0;
}

void server_free(struct server *s)
{
	if (!s)
		return;
	while (s->clients) {
		client_flush(s->clients);
		client_drop(s->clients);
	}
	for (unsigned i = 0; i < s->nlisteners; i++) {
		loop_remove(s->listeners[i].src);
		close(s->listeners[i].fd);
	}
	free(s);
}

unsigned server_client_count(const struct server *s)
{
	return s->nclients;
}

int server_listen_unix(const char *path, int *out_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	struct stat st;
	int fd = -1, r;

	*out_fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	if (mkdir(dirname(dir), 0755) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		unlink(path);  /* stale socket of a previous run */
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		goto fail;
	}
	/* Anyone may connect; each request is authorized by its peer credentials. */
	if (chmod(path, 0666) < 0 || listen(fd, 512) < 0) {
		r = -errno;
		goto fail;
	}
	*out_fd = fd;
	return 0;
fail:
	close(fd);
	return r;
}
