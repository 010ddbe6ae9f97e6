/* SPDX-License-Identifier: MIT */
/*
 * The socket sampler of `gdx bench xport --sockets` (bench/sockwatch.c): it
 * finds the client's and the server's end of a loopback connection by the
 * listener's port, and files every sample under the first class that holds
 * (bytes unread at the server, unsent, unread at the client, none with the
 * depth in flight, none with room).  Each state is set up on a real loopback
 * connection and held while the sampler runs, so every sample must land in
 * its class.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../bench/sockwatch.h"
#include "test.h"

struct conn {
	int l, cli, srv;
	unsigned port;
};

static void conn_open(struct conn *c, int small_rcvbuf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int v = 4096;

	c->l = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(c->l >= 0);
	assert_int_equal(bind(c->l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(c->l, 1), 0);
	assert_int_equal(getsockname(c->l, (struct sockaddr *)&a, &len), 0);
	c->port = ntohs(a.sin_port);
	c->cli = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(c->cli >= 0);
	/* set before the connect, so the window it advertises stays small */
	if (small_rcvbuf)
		assert_int_equal(setsockopt(c->cli, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)), 0);
	assert_int_equal(connect(c->cli, (struct sockaddr *)&a, sizeof(a)), 0);
	c->srv = accept(c->l, NULL, NULL);
	assert_true(c->srv >= 0);
}

static void conn_close(struct conn *c)
{
	close(c->cli);
	close(c->srv);
	close(c->l);
}

/* Samples for 5 ms; every sample must be of class want. */
static void expect_class(const struct conn *c, const unsigned *inflight, int want)
{
	struct sockwatch *w;
	struct sockwatch_tally t = { 0 };
	const struct timespec ms5 = { 0, 5000000 };

	assert_int_equal(sockwatch_start(&w, c->port, inflight, 16), 0);
	nanosleep(&ms5, NULL);
	sockwatch_stop(w, &t);
	assert_true(t.samples > 0);
	for (int k = 0; k < SW_NCLASS; k++)
		assert_int_equal(t.n[k], k == want ? t.samples : 0);
}

static void put(int fd, size_t n)
{
	char buf[256];

	memset(buf, 'x', sizeof(buf));
	assert_true(n <= sizeof(buf));
	assert_int_equal(send(fd, buf, n, 0), (ssize_t)n);
}

/* Reads n bytes (they are on their way or there). */
static void take(int fd, size_t n)
{
	char buf[256];

	while (n) {
		ssize_t r = recv(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0);

		assert_true(r > 0);
		n -= (size_t)r;
	}
}

/* Waits until fd has n bytes to read (loopback delivers within microseconds). */
static void arrived(int fd, int n)
{
	for (int i = 0; i < 1000; i++) {
		char buf[256];

		if (recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT) >= n)
			return;
		usleep(100);
	}
	fail_msg("%d bytes did not arrive", n);
}

static void test_each_class(void **state)
{
	struct conn c;
	unsigned inflight = 0;

	(void)state;
	conn_open(&c, 0);
	/* nothing anywhere: idle with room to post, window full with the depth out */
	expect_class(&c, &inflight, SW_IDLE);
	inflight = 16;
	expect_class(&c, &inflight, SW_WINDOW_FULL);
	/* answers unread at the client (they win over the window's state) */
	put(c.srv, 100);
	arrived(c.cli, 100);
	expect_class(&c, &inflight, SW_CLIENT_UNREAD);
	/* data unread at the server goes first, whatever the client holds */
	put(c.cli, 200);
	arrived(c.srv, 200);
	expect_class(&c, &inflight, SW_SERVER_UNREAD);
	take(c.srv, 200);
	take(c.cli, 100);
	inflight = 3;
	expect_class(&c, &inflight, SW_IDLE);
	conn_close(&c);
}

/* The server's writes outrun a small window at the client: bytes stay unsent. */
static void test_unsent(void **state)
{
	struct conn c;
	unsigned inflight = 0;
	char buf[65536];
	size_t sent = 0;

	(void)state;
	conn_open(&c, 1);
	memset(buf, 'y', sizeof(buf));
	assert_int_equal(fcntl(c.srv, F_SETFL, O_NONBLOCK), 0);
	for (;;) {
		ssize_t n = send(c.srv, buf, sizeof(buf), 0);

		if (n < 0) {
			assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
			break;
		}
		sent += (size_t)n;
	}
	assert_true(sent > 0);
	/* the client holds what the window let through; the rest waits at the server */
	expect_class(&c, &inflight, SW_UNSENT);
	conn_close(&c);
}

/* No connection to that port here: refused, nothing started. */
static void test_no_such_connection(void **state)
{
	struct conn c;
	struct sockwatch *w = NULL;
	unsigned inflight = 0;

	(void)state;
	conn_open(&c, 0);
	assert_int_equal(sockwatch_start(&w, c.port == 65535 ? 1 : c.port + 1, &inflight, 16),
			 -ENOENT);
	assert_null(w);
	conn_close(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_class),
		cmocka_unit_test(test_unsent),
		cmocka_unit_test(test_no_such_connection),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
