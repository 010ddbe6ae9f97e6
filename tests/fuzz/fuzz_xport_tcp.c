/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the tcp transport's receive path against whatever a peer
 * sends.  A raw socket does the hello, then writes the input (after its first
 * byte) to a real endpoint that has work posted: two receives, a send, a read
 * and a write of its own, and a region the peer may read and write (its key
 * and address stand wherever the input has the 8-byte words KEY_MAGIC and
 * ADDR_MAGIC, so that mutations reach the served paths, not only the key
 * check).  The first byte picks host or (emulated) device memory for the
 * receives, the read and the region, and whether device memory goes through
 * the copy agent.  A third receive is posted once the input is out, so that
 * messages kept for want of one are handed over (tcp's receive thread does
 * that on an endpoint with the agent), or, the connection gone, it fails.
 * Then the peer hangs up.  Beyond "no crash": every request
 * posted completes exactly once, nothing hangs, and no byte lands outside the
 * buffers and region (guards around the host ones).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "tcp_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT (64u << 10)
#define BUF 8192
#define GUARD 256
#define KEY_MAGIC 0x59454b5a5a5a5a5aull		/* "ZZZZZKEY" little-endian */
#define ADDR_MAGIC 0x5244445a5a5a5a5aull	/* "ZZZZZDDR" */
#define NREQ 6

/* Host memory with guards on both sides; the device twin of each buffer. */
static uint8_t host[5][GUARD + BUF + GUARD];
static void *devbuf[4];
static struct gdx_device *dev;
static struct gdx_xport_listener *l;
static struct gdx_xport_cq *cq;
static uint16_t port;

static void quiet(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)msg;
	(void)arg;
}

static void setup(void)
{
	const char *a;

	gdx_log_set_callback(quiet, NULL);
	if (gdx_device_open("emulated", &dev))
		abort();
	for (int i = 0; i < 4; i++)
		if (gdx_device_malloc(dev, BUF, &devbuf[i]))
			abort();
	/* any address: each run connects to another of 127/8 (raw_connect) */
	if (gdx_xport_listen("tcp://0.0.0.0:0", NULL, &l) || gdx_xport_cq_create(&cq))
		abort();
	a = strrchr(gdx_xport_listener_addr(l), ':');
	port = (uint16_t)atoi(a + 1);
}

/* A failure of the harness, not of the code under test: says what, then stops. */
static void die(const char *what, const char *why)
{
	fprintf(stderr, "fuzz_xport_tcp: %s: %s\n", what, why);
	abort();
}

/*
 * Connects to the endpoint's listener at 127.0.0.x, x going round 1 to 250:
 * the runs' connections end in TIME_WAIT on this side (it hangs up first),
 * and over one address tens of thousands of runs would use up the ports.
 */
static int raw_connect(void)
{
	static unsigned run;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK + run++ % 250) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), err = 0;
	socklen_t len = sizeof(err);

	if (fd < 0)
		die("socket", strerror(errno));
	if (!connect(fd, (struct sockaddr *)&sin, sizeof(sin)))
		return fd;
	/*
	 * libFuzzer's -timeout timer (SIGALRM, no SA_RESTART) can interrupt a
	 * connect the listener's full backlog holds: it goes on by itself.
	 */
	if (errno != EINTR)
		die("connect", strerror(errno));
	for (struct pollfd pfd = { .fd = fd, .events = POLLOUT }; poll(&pfd, 1, -1) != 1;)
		if (errno != EINTR)
			die("poll", strerror(errno));
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)
		die("connect", strerror(err ? err : errno));
	return fd;
}

/* Reads n bytes, through the timer's interruptions. */
static void recv_all(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("recv", strerror(errno));
		p = (char *)p + r;
		n -= (size_t)r;
	}
}

/* Writes n bytes while the endpoint reads them; gives up if it stops reading. */
static void feed(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT | POLLIN };
		char sink[4096];
		ssize_t w;

		if (poll(&pfd, 1, 200) <= 0)
			return;
		/* what the endpoint sends (answers, read data) must not fill its socket */
		while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		if (!(pfd.revents & POLLOUT))
			continue;
		w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return;
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		}
	}
}

/* Takes what completed, each request once: how many. */
static int reap(unsigned *seen, unsigned *done)
{
	struct gdx_xport_cqe e[8];
	int n = gdx_xport_cq_poll(cq, e, 8);

	if (n < 0)
		abort();
	for (int i = 0; i < n; i++) {
		if (e[i].wr_id >= NREQ || seen[e[i].wr_id]++)
			abort();
		(*done)++;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t in[MAX_INPUT];
	unsigned seen[NREQ] = { 0 }, done = 0;
	bool on_dev, agent;
	struct gdx_xport_ep *ep;
	struct gdx_xport_mr *mr;
	struct frame f = { .type = TF_HELLO, .imm = TCP_HELLO_MAGIC, .id = 1 };
	uint8_t *region;
	uint64_t key, addr;
	int fd, ret;

	if (size < 1 || size > MAX_INPUT)
		return 0;
	if (!l)
		setup();
	on_dev = data[0] & 1;
	agent = data[0] & 2;
	if (gdx_config_set("xport.tcp_copy_agent", agent ? "1" : "0"))
		abort();
	for (int i = 0; i < 5; i++)
		memset(host[i], 0xa5, sizeof(host[i]));

	/* the hello first: accept finds it waiting and answers */
	fd = raw_connect();
	if (send(fd, &f, sizeof(f), MSG_NOSIGNAL) != sizeof(f))
		die("send", strerror(errno));
	if ((ret = gdx_xport_accept(l, cq, 5000, &ep)))
		die("accept", gdx_strerror(ret));
	recv_all(fd, &f, sizeof(f));

	region = on_dev ? devbuf[2] : host[3] + GUARD;
	if (gdx_xport_mr_reg(ep, region, BUF,
			     GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE, &mr))
		abort();
	key = gdx_xport_mr_key(mr);
	addr = gdx_xport_mr_addr(mr);

	/*
	 * wr_id i: receives 0 and 1; requests 2 (send, id 1), 3 (read, id 2), 4 (write,
	 * id 3); receive 5 after the input
	 */
	if (gdx_xport_post_recv(ep, host[0] + GUARD, 4096, 0) ||
	    gdx_xport_post_recv(ep, on_dev ? devbuf[0] : host[1] + GUARD, BUF, 1) ||
	    gdx_xport_post_send(ep, host[0] + GUARD + 4096, 100, 2, 0) ||
	    gdx_xport_post_read(ep, on_dev ? devbuf[1] : host[2] + GUARD, 4096, 0x1000, 77, 3,
				0) ||
	    gdx_xport_post_write(ep, host[0] + GUARD + 4096, 64, 0x2000, 78, 4, 0))
		abort();

	memcpy(in, data + 1, size - 1);
	for (size_t i = 0; i + 8 <= size - 1; i++) {
		uint64_t w;

		memcpy(&w, in + i, 8);
		if (w == KEY_MAGIC)
			memcpy(in + i, &key, 8);
		else if (w == ADDR_MAGIC)
			memcpy(in + i, &addr, 8);
	}
	feed(fd, in, size - 1);
	/* the first two messages taken (or a pause): receive 5 may find the next kept */
	while ((!seen[0] || !seen[1]) && (reap(seen, &done) || gdx_xport_cq_wait(cq, 2) == 1))
		;
	ret = gdx_xport_post_recv(ep, on_dev ? devbuf[3] : host[4] + GUARD, BUF, 5);
	if (ret == GDX_EDISCONNECTED) {
		seen[5] = 1;	/* the connection ended already: it never completes */
		done++;
	} else if (ret) {
		abort();
	}
	shutdown(fd, SHUT_WR);

	/* The peer is gone: every request completes, once. */
	while (done < NREQ) {
		char sink[4096];

		if (reap(seen, &done))
			continue;
		while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		if (gdx_xport_cq_wait(cq, 5000) != 1)
			abort();	/* hung: nothing completed in 5 s */
	}
	close(fd);
	if (gdx_xport_mr_dereg(mr))
		abort();
	gdx_xport_ep_destroy(ep);
	for (int i = 0; i < 5; i++)
		for (size_t j = 0; j < GUARD; j++)
			if (host[i][j] != 0xa5 || host[i][GUARD + BUF + j] != 0xa5)
				abort();
	return 0;
}
