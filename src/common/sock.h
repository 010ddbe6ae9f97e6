/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_SOCK_H
#define GDX_COMMON_SOCK_H

#include <errno.h>
#include <stdbool.h>
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

/*
 * The most one waiting read (MSG_WAITALL) asks for at once.  Waiting for a
 * whole large payload in one read carries less: on the H200's loopback a raw
 * sink so ran at 0.8 of one waiting for 256 KiB at a time (1 MiB messages),
 * and the tcp transport's 4 MiB writes went from 0.82 to 0.90 of the stream
 * with this bound (docs/measurements/xport.md, session 23).
 */
#define GDX_RX_WAIT_MAX (256u << 10)

/*
 * Receives exactly the bytes iov[0..cnt) describes on a blocking socket (the
 * iovecs are trimmed as it goes), in waiting reads of at most GDX_RX_WAIT_MAX:
 * 0, -ECONNRESET at the peer's end, or -errno of the read that failed
 * (SO_RCVTIMEO's timeout is -EAGAIN).
 */
static inline int gdx_recv_full(int fd, struct iovec *iov, int cnt)
{
	/* empty iovecs first: a read of nothing would look like the peer's end */
	while ((iov = gdx_iov_advance(iov, &cnt, 0)), cnt > 0) {
		struct msghdr m = { .msg_iov = iov };
		size_t ask = 0, last;
		ssize_t r;

		while ((int)m.msg_iovlen < cnt && ask < GDX_RX_WAIT_MAX)
			ask += iov[m.msg_iovlen++].iov_len;
		last = iov[m.msg_iovlen - 1].iov_len;
		if (ask > GDX_RX_WAIT_MAX)
			iov[m.msg_iovlen - 1].iov_len -= ask - GDX_RX_WAIT_MAX;
		r = recvmsg(fd, &m, MSG_WAITALL);
		iov[m.msg_iovlen - 1].iov_len = last;
		if (r == 0)
			return -ECONNRESET;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		iov = gdx_iov_advance(iov, &cnt, (size_t)r);
	}
	return 0;
}

/*
 * The receive side of a framed stream (the tcp transport's frames, NVMe/TCP's
 * PDUs) read through a staging buffer: how much a read for headers asks for,
 * room being what the buffer has left and need what its reader lacks (a
 * header's rest, a short payload's).  The whole room, so that a burst of small
 * frames comes in one system call; but after a payload of GDX_RX_BIG or more
 * (big), the next one is likely as large, and the part of it such a read
 * took would be copied a second time, out of the buffer (at 64 KiB, all of
 * it): then a read takes need or GDX_RX_HEAD, and the rest of the payload
 * goes from the socket straight into its place.  GDX_RX_HEAD: a page copied
 * twice is cheap beside a system call, and it holds the headers of the many
 * frames without payload that may come between.
 */
#define GDX_RX_BIG (32u << 10)
#define GDX_RX_HEAD 4096u

static inline size_t gdx_rx_ask(bool big, size_t room, size_t need)
{
	return big ? GDX_MIN(room, GDX_MAX(need, GDX_RX_HEAD)) : room;
}

#endif
