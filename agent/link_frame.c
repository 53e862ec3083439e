/* The agent's framing on the daemon socket: a jpag_hdr and its payload,
 * fds passed with SCM_RIGHTS. The agent thread only. */
#include "link_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int link_send(int sock, uint16_t type, const void *payload, size_t len)
{
	return link_send_set(sock, type, 0, payload, len);
}

int link_send_set(int sock, uint16_t type, uint32_t set, const void *payload, size_t len)
{
	struct jpag_hdr hdr = {
		.magic = JPAG_MAGIC,
		.version = JPAG_VERSION,
		.type = type,
		.len = (uint32_t)len,
		.reserved = set,
	};
	struct iovec iov[2] = {
		{ .iov_base = &hdr, .iov_len = sizeof(hdr) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	ssize_t n;

	while (msg.msg_iovlen) {
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		while (n > 0 && msg.msg_iovlen) {
			size_t k = (size_t)n < msg.msg_iov->iov_len ? (size_t)n : msg.msg_iov->iov_len;

			msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + k;
			msg.msg_iov->iov_len -= k;
			n -= (ssize_t)k;
			if (!msg.msg_iov->iov_len) {
				msg.msg_iov++;
				msg.msg_iovlen--;
			}
		}
	}
	return 0;
}

/* Reads exactly len bytes. The first SCM_RIGHTS fd goes to *fd (if fd is
 * not NULL and *fd is -1); any other received fd is closed. */
static int link_recv_full(int sock, void *buf, size_t len, int *fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	size_t got = 0;

	while (got < len) {
		struct iovec iov = { .iov_base = (char *)buf + got, .iov_len = len - got };
		struct msghdr msg = {
			.msg_iov = &iov,
			.msg_iovlen = 1,
			.msg_control = ctl.buf,
			.msg_controllen = sizeof(ctl.buf),
		};
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t nfd;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
				if (fd && *fd < 0)
					*fd = f;
				else
					close(f);
			}
		}
		got += (size_t)n;
	}
	return 0;
}

/* Reads one frame into link_rx. *fd: the fd sent with it, or -1. */
int link_recv_frame(int sock, struct jpag_hdr *hdr, int *fd)
{
	int ret;

	*fd = -1;
	ret = link_recv_full(sock, hdr, sizeof(*hdr), fd);
	if (ret < 0)
		goto out;
	if (hdr->magic != JPAG_MAGIC || hdr->version != JPAG_VERSION ||
	    hdr->len > JPAG_MAX_PAYLOAD) {
		ret = -EPROTO;
		goto out;
	}
	ret = link_recv_full(sock, link_rx, hdr->len, fd);
out:
	if (ret < 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return ret;
}

