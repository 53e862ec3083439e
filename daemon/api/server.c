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
#include "quota.h"

#define READ_CHUNK 65536
#define READ_BUDGET (1024 * 1024)   /* bytes per wakeup, so one client cannot starve others */
/* Requests handled per client per loop round: a client that sends
 * thousands at once is not read further until they are handled, 16 each
 * round, so everyone else is answered in between. */
#define LINE_BUDGET 16
/* An emptied reply queue bigger than this is freed, not kept. */
#define OUT_KEEP (1024 * 1024)
#define MAX_LISTENERS 8
/* accept() out of fds or memory: the listener rests, first this long, then
 * twice as long each time up to the maximum, instead of failing in a loop. */
#define ACCEPT_PAUSE_MIN_MS 50
#define ACCEPT_PAUSE_MAX_MS 1000

struct server_client {
	struct server *srv;
	struct server_client *next;
	int fd;
	struct loop_source *src;
	struct authz_peer peer;
	struct buf in, out;
	/* Handled lines and sent bytes are skipped by offset and moved out in
	 * one go later: a memmove per line or per partial send would make a
	 * flood of requests, or a slow reader, cost quadratic time. */
	size_t in_off;              /* start of the lines not yet handled */
	size_t out_off;             /* start of the bytes not yet sent */
	bool discarding;            /* inside an oversized request line */
	bool decided;               /* JSON client, not an agent */
	bool want_out;
	bool backlog;               /* complete lines wait for the next round; not read meanwhile */
	bool held;                  /* an answer is being prepared: no lines handled, not read */
	bool dead;
	max_align_t data[];         /* cfg.client_data_size bytes for the dispatcher */
};

struct listener {
	struct server *srv;
	int fd;
	struct loop_source *src;
	struct loop_source *pause;  /* timer while the listener rests */
	unsigned pause_ms;          /* the last rest; 0 after an accept worked */
};

struct server {
	struct loop *loop;
	struct server_config cfg;
	struct server_hooks hooks;
	struct listener listeners[MAX_LISTENERS];
	unsigned nlisteners;
	struct server_client *clients;
	unsigned nclients;
	struct loop_source *backlog_timer;  /* next round for clients with a backlog */
};

/* ---- output ---- */

/* What epoll should report for c. */
static void client_watch(struct server_client *c)
{
	if (!c->dead)
		loop_set_events(c->src, (c->backlog || c->held ? 0 : EPOLLIN | EPOLLRDHUP) |
					(c->want_out ? EPOLLOUT : 0));
}

static size_t out_queued(const struct server_client *c)
{
	return c->out.len - c->out_off;
}

/* Frees the queue, giving its bytes back to the uid. */
static void out_release(struct server_client *c)
{
	quota_give(c->srv->cfg.quota, c->peer.uid, QUOTA_OUTPUT, out_queued(c));
	buf_release(&c->out);
	c->out_off = 0;
}

/* Queued bytes are charged to the peer's uid (QUOTA_OUTPUT) until sent. */
static void out_consume(struct server_client *c, size_t n)
{
	quota_give(c->srv->cfg.quota, c->peer.uid, QUOTA_OUTPUT, n);
	c->out_off += n;
	if (c->out_off == c->out.len) {
		c->out_off = 0;
		if (c->out.cap > OUT_KEEP)
			buf_release(&c->out);
		else
			buf_reset(&c->out);
	} else if (c->out_off >= c->out.len / 2) {
		/* Moves at most as much as was sent: linear overall. */
		buf_consume(&c->out, c->out_off);
		c->out_off = 0;
	}
}

/* Marks the client dead and frees its queue. The socket is shut down so
 * that its I/O handler runs next round and drops it, never under a
 * caller's feet. */
static void client_kill(struct server_client *c)
{
	out_release(c);
	if (!c->dead)
		shutdown(c->fd, SHUT_RDWR);
	c->dead = true;
}

static void client_flush(struct server_client *c)
{
	while (out_queued(c)) {
		ssize_t n = send(c->fd, c->out.data + c->out_off, out_queued(c),
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			client_kill(c);  /* EPIPE etc. */
			break;
		}
		out_consume(c, (size_t)n);
	}
	if (!!out_queued(c) != c->want_out) {
		c->want_out = out_queued(c) != 0;
		client_watch(c);
	}
}

/* The most one client may have queued: its own limit, or its uid's. */
static size_t out_limit(const struct server_client *c)
{
	uint64_t own = quota_limit(c->srv->cfg.quota, c->peer.uid, QUOTA_OUTPUT);

	return own && own < c->srv->cfg.max_output ? (size_t)own : c->srv->cfg.max_output;
}

void server_client_send(struct server_client *c, const char *line, size_t len)
{
	struct quota *q = c->srv->cfg.quota;
	char why[256], msg[384];
	int r;

	if (c->dead)
		return;
	if (len > out_limit(c)) {
		/* Could never be queued, reader or not: say so instead. */
		snprintf(msg, sizeof(msg), "a reply of %zu bytes is larger than the %zu bytes of unread "
			 "replies uid %u may have queued; it was not sent", len, out_limit(c),
			 (unsigned)c->peer.uid);
		log_warn("client pid %d uid %u: %s", (int)c->peer.pid, (unsigned)c->peer.uid, msg);
		server_client_send_error(c, 0, false, JPROF_E_LIMIT, msg);
		return;
	}
	r = out_queued(c) + len > c->srv->cfg.max_output ? -ENOBUFS :
	    quota_take(q, c->peer.uid, QUOTA_OUTPUT, len);
	if (r == 0 && buf_append(&c->out, line, len) < 0) {
		quota_give(q, c->peer.uid, QUOTA_OUTPUT, len);
		r = -ENOMEM;
	}
	if (r < 0) {
		if (r == -ENOBUFS)
			snprintf(why, sizeof(why), "%zu bytes queued for it", out_queued(c));
		else
			quota_explain(q, c->peer.uid, QUOTA_OUTPUT, r, why, sizeof(why));
		log_warn("client pid %d uid %u: not reading its replies (%s); disconnecting",
			 (int)c->peer.pid, (unsigned)c->peer.uid, why);
		client_kill(c);
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

/* Handles up to LINE_BUDGET complete lines. Returns true when complete
 * lines are left for another round. */
static bool process_input(struct server_client *c)
{
	struct server *srv = c->srv;
	unsigned handled = 0;
	char *nl;

	while (!c->dead && !c->held &&
	       (nl = memchr(c->in.data + c->in_off, '\n', c->in.len - c->in_off))) {
		const char *line = c->in.data + c->in_off;
		size_t len = (size_t)(nl - line);

		if (handled++ == LINE_BUDGET)
			return true;
		if (c->discarding)
			c->discarding = false;  /* end of an oversized line, already answered */
		else if (len + 1 > JPROF_PROTO_MAX_REQUEST)
			send_line_too_long(c);
		else if (!is_blank(line, len))
			srv->hooks.line(srv->hooks.ctx, c, &c->peer, line, len);
		c->in_off += len + 1;
	}
	buf_consume(&c->in, c->in_off);
	c->in_off = 0;
	if (c->held)
		return false;  /* complete lines may wait; server_client_hold takes them up */
	/* At most a partial line is left. */
	if (c->in.len >= JPROF_PROTO_MAX_REQUEST) {
		if (!c->discarding)
			send_line_too_long(c);
		c->discarding = true;
		buf_reset(&c->in);
	}
	return false;
}

static void on_backlog(struct loop_source *src, void *arg);

/* Puts c's remaining lines off to the next round (c is not read
 * meanwhile), or takes it off that list. false when no round could be
 * scheduled. */
static bool client_backlog(struct server_client *c, bool on)
{
	struct server *srv = c->srv;

	if (on && !srv->backlog_timer &&
	    loop_add_timer(srv->loop, 0, 0, on_backlog, srv, &srv->backlog_timer) < 0)
		return false;
	if (c->backlog != on) {
		c->backlog = on;
		client_watch(c);
	}
	return true;
}

/* Handles lines of c, LINE_BUDGET of them per round. */
static void client_input(struct server_client *c)
{
	/* Without a next round (no memory for a timer) all are handled now. */
	while (process_input(c))
		if (client_backlog(c, true))
			return;
	client_backlog(c, false);
}

static void on_backlog(struct loop_source *src, void *arg)
{
	struct server *srv = arg;

	loop_remove(srv->backlog_timer);
	srv->backlog_timer = NULL;
	/* Lines do not add or free clients (only I/O handlers do). */
	for (struct server_client *c = srv->clients; c; c = c->next)
		if (c->backlog)
			client_input(c);
}

void server_client_hold(struct server_client *c, bool on)
{
	if (c->held == on)
		return;
	c->held = on;
	client_watch(c);
	/* Lines that arrived meanwhile are handled next round, not under
	 * the caller's feet (it may be answering one of them). */
	if (!on && !client_backlog(c, true))
		client_input(c);
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
	quota_give(srv->cfg.quota, c->peer.uid, QUOTA_CLIENTS, 1);
	out_release(c);
	loop_remove(c->src);  /* deregisters the fd before anyone else watches it */
}

static void listener_wake(struct listener *l);

static void client_drop(struct server_client *c)
{
	struct server *srv = c->srv;

	srv->hooks.gone(srv->hooks.ctx, c);
	client_unlink(c);
	close(c->fd);
	buf_release(&c->in);
	free(c);
	/* An fd is free again: a resting listener may accept now. */
	for (unsigned i = 0; i < srv->nlisteners; i++)
		listener_wake(&srv->listeners[i]);
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
	/* The agent link said why: its process gone, or a quota. */
	if (r < 0 && r != -ESRCH && r != -EDQUOT && r != -EUSERS)
		log_warn("cannot serve the agent of pid %d uid %u: %s", (int)c->peer.pid,
			 (unsigned)c->peer.uid, strerror(-r));
	buf_release(&c->in);
	free(c);
	return true;
}

static void on_client(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct server_client *c = arg;
	size_t budget = READ_BUDGET;

	if (events & EPOLLOUT)
		client_flush(c);
	/* epoll reports these even unasked: a held client that hung up is
	 * dropped now (its pending answer with it), not polled in a spin. */
	if (c->held && (events & (EPOLLHUP | EPOLLERR)))
		c->dead = true;
	if (!c->backlog && !c->held && (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
		while (budget && !c->dead && !c->backlog && !c->held) {
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
			client_input(c);
		}
	}
	if (c->dead)
		client_drop(c);
}

/* Refuses a connection with an error line it may read, then closes it. */
static void refuse(int cfd, const char *code, const char *msg)
{
	char *line = jprof_error_line(0, false, code, msg);

	if (line)
		send(cfd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
	free(line);
	close(cfd);
}

/* 0 when the peer behind cfd may hold one more connection (charged to its
 * uid), else -errno after it was refused. */
static int admit(struct server *srv, int cfd, const struct authz_peer *peer)
{
	char why[256];
	int r = srv->nclients >= srv->cfg.max_clients ? -EUSERS :
		quota_take(srv->cfg.quota, peer->uid, QUOTA_CLIENTS, 1);

	if (r == 0)
		return 0;
	if (srv->cfg.quota)
		quota_explain(srv->cfg.quota, peer->uid, QUOTA_CLIENTS, r, why, sizeof(why));
	else
		snprintf(why, sizeof(why), "too many clients connected");
	log_warn("refused a connection of uid %u (pid %d): %s", (unsigned)peer->uid, (int)peer->pid,
		 why);
	refuse(cfd, JPROF_E_LIMIT, why);
	return r;
}

/* Watches a resting listener again (its rest, if any, is cut short). */
static void listener_wake(struct listener *l)
{
	if (!l->pause)
		return;
	loop_remove(l->pause);
	l->pause = NULL;
	if (loop_set_events(l->src, EPOLLIN) < 0)
		log_err("cannot watch the listening socket again; new connections wait");
}

static void on_listener_rested(struct loop_source *src, void *arg)
{
	listener_wake(arg);
}

/* accept() failed for want of fds or memory. The pending connection stays
 * in the backlog, so the listener stays readable: rather than failing in a
 * busy loop, it stops being watched for a while. */
static void listener_rest(struct listener *l, int err)
{
	unsigned ms = l->pause_ms ? l->pause_ms * 2 : ACCEPT_PAUSE_MIN_MS;

	if (l->pause)
		return;
	l->pause_ms = ms < ACCEPT_PAUSE_MAX_MS ? ms : ACCEPT_PAUSE_MAX_MS;
	log_warn("cannot accept connections: %s; trying again in %u ms", strerror(err), l->pause_ms);
	if (loop_add_timer(l->srv->loop, l->pause_ms, 0, on_listener_rested, l, &l->pause) < 0)
		return;  /* no timer: keep watching rather than stop for good */
	loop_set_events(l->src, 0);
}

static void on_listener(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct listener *l = arg;
	struct server *srv = l->srv;

	for (int i = 0; i < 64; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct server_client *c;
		struct authz_peer peer;
		int r;

		if (cfd < 0) {
			r = errno;
			if (r == EMFILE || r == ENFILE || r == ENOBUFS || r == ENOMEM)
				listener_rest(l, r);
			else if (r == ECONNABORTED || r == EINTR)
				continue;
			else if (r != EAGAIN && r != EWOULDBLOCK)
				log_warn("accept failed: %s", strerror(r));
			return;
		}
		l->pause_ms = 0;
		r = authz_peer_from_fd(cfd, srv->cfg.group, &peer);
		if (r < 0) {
			log_warn("cannot read the credentials of a new client: %s", strerror(-r));
			close(cfd);
			continue;
		}
		if (admit(srv, cfd, &peer) < 0)
			continue;
		c = calloc(1, sizeof(*c) + srv->cfg.client_data_size);
		r = -ENOMEM;
		if (c) {
			c->srv = srv;
			c->fd = cfd;
			c->peer = peer;
			r = loop_add_io(srv->loop, cfd, EPOLLIN | EPOLLRDHUP, on_client, c, &c->src);
		}
		if (r < 0) {
			log_warn("cannot serve a new client of uid %u: %s", (unsigned)peer.uid, strerror(-r));
			quota_give(srv->cfg.quota, peer.uid, QUOTA_CLIENTS, 1);
			refuse(cfd, JPROF_E_RESOURCE_EXHAUSTED, "jprofd is out of memory");
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
	l->srv = s;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	r = loop_add_io(s->loop, fd, EPOLLIN, on_listener, l, &l->src);
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
	loop_remove(s->backlog_timer);
	s->backlog_timer = NULL;
	while (s->clients) {
		client_flush(s->clients);
		client_drop(s->clients);
	}
	for (unsigned i = 0; i < s->nlisteners; i++) {
		loop_remove(s->listeners[i].pause);
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
