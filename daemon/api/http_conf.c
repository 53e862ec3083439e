/* http.h's configuration helpers: the bearer token (its file and its
 * constant-time comparison). Apart from the listener: config.c and the unit
 * tests use them without one. The listen address: core/netaddr.c. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

int http_token_read(const char *path, char **out, char *err, size_t errlen)
{
	char data[HTTP_TOKEN_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd, r = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		snprintf(err, errlen, "http token file %s: not a regular file", path);
		goto out;
	}
	if (st.st_mode & (S_IROTH | S_IWOTH)) {
		r = -EPERM;
		snprintf(err, errlen, "http token file %s: mode %04o lets other users read or write it; "
			 "chmod o-rw %s", path, (unsigned)(st.st_mode & 07777), path);
		goto out;
	}
	n = read(fd, data, sizeof(data) - 1);
	if (n < 0) {
		r = -errno;
		snprintf(err, errlen, "http token file %s: %s", path, strerror(-r));
		goto out;
	}
	len = (size_t)n;
	while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		len--;
	data[len] = '\0';
	if ((size_t)n > HTTP_TOKEN_MAX + 1 || len > HTTP_TOKEN_MAX || len < HTTP_TOKEN_MIN) {
		r = -EINVAL;
		snprintf(err, errlen, "http token file %s: the token must be %d..%d bytes long", path,
			 HTTP_TOKEN_MIN, HTTP_TOKEN_MAX);
		goto out;
	}
	for (size_t i = 0; i < len; i++) {
		if (data[i] <= ' ' || data[i] > '~') {
			r = -EINVAL;
			snprintf(err, errlen, "http token file %s: the token must be one line of visible "
				 "ASCII characters (no spaces)", path);
			goto out;
		}
	}
	*out = strdup(data);
	if (!*out) {
		r = -ENOMEM;
		snprintf(err, errlen, "http token file %s: out of memory", path);
	}
out:
	explicit_bzero(data, sizeof(data));
	close(fd);
	return r;
}

bool http_token_equal(const char *expected, const char *presented)
{
	size_t el = strlen(expected), i, pl = 0;
	unsigned char diff = 0;
	bool ended = false;

	/* Walks the expected token only; a shorter presented token is read up
	 * to its NUL and then compared against zeros. */
	for (i = 0; i < el; i++) {
		unsigned char p = ended ? 0 : (unsigned char)presented[i];

		if (!p)
			ended = true;
		else
			pl++;
		diff |= (unsigned char)expected[i] ^ p;
	}
	if (!ended && presented[el] != '\0')
		diff |= 1;
	return diff == 0 && pl == el;
}
