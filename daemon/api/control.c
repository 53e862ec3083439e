/* The control server as main.c sees it: the transport (server.c) wired to
 * the request dispatcher (requests.c). */
#include "control.h"

#include <errno.h>
#include <stdlib.h>

#include "requests.h"
#include "server.h"

struct control {
	struct requests *requests;
	struct server *server;
};

int control_new(struct loop *loop, struct session_mgr *sessions, struct sampler *sampler,
		struct agentlink *agents, const struct control_config *cfg, struct control **out)
{
	struct requests_config rcfg = {
		.group_name = cfg->group_name,
		.max_sessions_per_client = cfg->max_sessions_per_client,
		.quota = cfg->quota,
		.render = cfg->render,
	};
	struct server_config scfg = {
		.group = cfg->group,
		.max_clients = cfg->max_clients,
		.max_output = cfg->max_output,
		.client_data_size = REQUESTS_CLIENT_DATA_SIZE,
		.agents = agents,
		.quota = cfg->quota,
	};
	struct control *c = calloc(1, sizeof(*c));
	struct server_hooks hooks;
	int r;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	r = requests_new(sessions, sampler, &rcfg, &c->requests);
	if (r < 0)
		goto out;
	hooks = (struct server_hooks){ .line = requests_on_line, .gone = requests_on_gone,
				       .ctx = c->requests };
	r = server_new(loop, &scfg, &hooks, &c->server);
	if (r < 0)
		goto out;
	c->requests->server = c->server;
	*out = c;
out:
	if (r < 0)
		control_free(c);
	return r;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	server_free(c->server);  /* first: its clients' recordings go with them */
	requests_free(c->requests);
	free(c);
}

int control_add_listener(struct control *c, int fd)
{
	return server_add_listener(c->server, fd);
}

int control_listen_unix(const char *path, int *out_fd)
{
	return server_listen_unix(path, out_fd);
}

void control_set_hostview(struct control *c, struct hostview *hv)
{
	c->requests->hostview = hv;
}

unsigned control_client_count(const struct control *c)
{
	return server_client_count(c->server);
}
