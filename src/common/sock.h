/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_SOCK_H
#define GDX_COMMON_SOCK_H

#include <errno.h>
#include <poll.h>
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
 * A wait for more than this many bytes sleeps until they are all there
 * (gdx_rx_wait_for), not until each segment comes: loopback's segments are
 * up to 64 KiB, so a smaller wait wakes about once anyway, and the two
 * setsockopt calls around it would cost more than they save.
 */
#define GDX_RX_LOWAT_MIN (64u << 10)

/*
 * Waits up to timeout_ms (-1: no bound) for input on a blocking or
 * non-blocking socket whose reader lacks n bytes.  With whole, and n over
 * GDX_RX_LOWAT_MIN, until min(n, GDX_RX_WAIT_MAX) bytes are queued, through
 * SO_RCVLOWAT meanwhile, so that the segments of a large payload wake the
 * reader once, not each (the peer's end, an error, or a receive window too
 * small to hold them also end the wait).  Returns poll's revents, 0 at the
 * timeout (or a signal), or -errno.  A waiting read (MSG_WAITALL) cannot do
 * this: one that took part of the bytes and then slept with the threshold
 * set would need that many more before it woke.  whole is false on kTLS
 * sockets, whose record layer decides when its reader wakes.
 */
static inline int gdx_rx_wait_for(int fd, size_t n, bool whole, int timeout_ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int v = (int)GDX_MIN(n, (size_t)GDX_RX_WAIT_MAX), one = 1, r, err;
	bool low = whole && n > GDX_RX_LOWAT_MIN;

	if (low)
		setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v));
	r = poll(&pf, 1, timeout_ms);
	err = errno;
	if (low)
		setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	if (r < 0)
		return err == EINTR ? 0 : -err;
	return r ? pf.revents : 0;
}

/*
 * Receives exactly the bytes iov[0..cnt) describes on a blocking socket (the
 * iovecs are trimmed as it goes), in waiting reads of at most GDX_RX_WAIT_MAX:
 * 0, -ECONNRESET at the peer's end, or -errno of the read that failed
 * (SO_RCVTIMEO's timeout is -EAGAIN).  whole (not on kTLS sockets): a read
 * of more than GDX_RX_LOWAT_MIN takes what is there and waits for the rest
 * whole (gdx_rx_wait_for), without SO_RCVTIMEO's bound.
 */
static inline int gdx_recv_full(int fd, struct iovec *iov, int cnt, bool whole)
{
	/* empty iovecs first: a read of nothing would look like the peer's end */
	while ((iov = gdx_iov_advance(iov, &cnt, 0)), cnt > 0) {
		struct msghdr m = { .msg_iov = iov };
		size_t ask = 0, last;
		bool low;
		ssize_t r;

		while ((int)m.msg_iovlen < cnt && ask < GDX_RX_WAIT_MAX)
			ask += iov[m.msg_iovlen++].iov_len;
		last = iov[m.msg_iovlen - 1].iov_len;
		if (ask > GDX_RX_WAIT_MAX) {
			iov[m.msg_iovlen - 1].iov_len -= ask - GDX_RX_WAIT_MAX;
			ask = GDX_RX_WAIT_MAX;
		}
		low = whole && ask > GDX_RX_LOWAT_MIN;
		r = recvmsg(fd, &m, low ? MSG_DONTWAIT : MSG_WAITALL);
		iov[m.msg_iovlen - 1].iov_len = last;
		if (r == 0)
			return -ECONNRESET;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && low && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int ev = gdx_rx_wait_for(fd, ask, true, -1);

			if (ev < 0)
				return ev;
			continue;
		}
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
