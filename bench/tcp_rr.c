/* SPDX-License-Identifier: MIT */
/*
 * The latency ceiling of the benchmarks (ceiling.h): a raw TCP request/response
 * on the loopback, req bytes out and rsp bytes back, each end a thread that
 * sleeps in recv() until its message is complete, as a transport's receiver
 * and its peer's do.  What one exchange of a protocol over the same socket
 * cannot beat: `gdx bench nvmf-host` (a 4 KiB read: a 72-byte CapsuleCmd out,
 * 24 + 4096 bytes of C2HData back) and `gdx bench xport` (a send answered by
 * a send of the same size) measure against it in the same run.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_rr.h"
#include "common/util.h"

struct rr {
	int fd;
	size_t req, rsp;
};

static bool xfer(int fd, void *buf, size_t len, bool out)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = out ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
				: recv(fd, (char *)buf + done, len - done, 0);

		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

static void *rr_server(void *arg)
{
	struct rr *s = arg;
	char *buf = calloc(1, GDX_MAX(s->req, s->rsp));

	while (buf && xfer(s->fd, buf, s->req, false) && xfer(s->fd, buf, s->rsp, true))
		;
	free(buf);
	return NULL;
}

double bench_tcp_rr(size_t req, size_t rsp, double secs)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = -1, one = 1;
	struct rr s = { .fd = -1, .req = req, .rsp = rsp };
	char *buf = calloc(1, GDX_MAX(req, rsp));
	uint64_t t0 = 0, n = 0, end;
	double us = -1;
	pthread_t th;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!buf || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&a, &al))
		goto out;
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&a, sizeof(a)))
		goto out;
	s.fd = accept(lfd, NULL, NULL);
	if (s.fd < 0)
		goto out;
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (pthread_create(&th, NULL, rr_server, &s))
		goto out;
	/* 0.2 s of warm-up (both threads placed, the socket's buffers grown), then timed */
	end = gdx_now_ns() + 200000000ull;
	for (int phase = 0; phase < 2; phase++) {
		while (gdx_now_ns() < end) {
			if (!xfer(cfd, buf, req, true) || !xfer(cfd, buf, rsp, false))
				break;
			n++;
		}
		if (!phase) {
			t0 = gdx_now_ns();
			end = t0 + (uint64_t)(secs * 1e9);
			n = 0;
		}
	}
	if (n)
		us = (double)(gdx_now_ns() - t0) / 1e3 / (double)n;
	shutdown(cfd, SHUT_RDWR);
	shutdown(s.fd, SHUT_RDWR);
	pthread_join(th, NULL);
out:
	if (s.fd >= 0)
		close(s.fd);
	if (cfd >= 0)
		close(cfd);
	if (lfd >= 0)
		close(lfd);
	free(buf);
	return us;
}
