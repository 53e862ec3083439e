/* Listen addresses as the configuration and the command line give them
 * (netaddr.h). */
#include "netaddr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal port, 0..65535, digits only. */
static int netaddr_port(const char *s, unsigned *out)
{
	unsigned long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 65535)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int netaddr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len, bool *loopback)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *port_s;
	unsigned port;
	size_t hl;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		hl = (size_t)(close - s - 1);
		if (hl == 0 || hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hl);
		host[hl] = '\0';
		port_s = close + 2;
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			snprintf(host, sizeof(host), "127.0.0.1");
			port_s = s;
		} else {
			hl = (size_t)(colon - s);
			if (hl >= sizeof(host) || memchr(s, ':', hl))
				return -EINVAL;  /* a bare IPv6 address needs brackets */
			memcpy(host, s, hl);
			host[hl] = '\0';
			if (!hl)
				snprintf(host, sizeof(host), "127.0.0.1");
			port_s = colon + 1;
		}
	}
	if (netaddr_port(port_s, &port) < 0)
		return -EINVAL;
	if (strchr(host, ':')) {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

		if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
			return -EINVAL;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a6);
		*loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ||
			    (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127);
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
			return -EINVAL;
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*len = sizeof(*a4);
		*loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	}
	return 0;
}
