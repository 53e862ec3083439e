/* Listen addresses: the parser the configuration (api/config.c) and the
 * HTTP endpoint (api/http.c) share, below both. */
#ifndef JPROF_NETADDR_H
#define JPROF_NETADDR_H

#include <stdbool.h>
#include <sys/socket.h>

/* "ADDR:PORT", "[V6ADDR]:PORT", ":PORT" or "PORT" (127.0.0.1). Numeric
 * addresses only (no name lookups in the daemon). *loopback: the address is
 * a loopback one. 0 or -EINVAL. */
int netaddr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len, bool *loopback);

#endif
