/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_SOCK_H
#define GDX_COMMON_SOCK_H

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/util.h"

/*
 * Sends every byte iov[0..cnt) describes on a blocking socket (the iovecs are
 * trimmed as it goes): 0, or -errno of the send that failed (SO_SNDTIMEO's
 * timeout is -EAGAIN).
 */
static inline int gdx_send_full(int fd, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		iov = gdx_iov_advance(iov, &cnt, (size_t)w);
	}
	return 0;
}

#endif
