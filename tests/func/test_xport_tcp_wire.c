/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport against a hostile or broken peer: a raw socket speaks the
 * wire protocol by hand (48-byte frame header: u8 type, u8 flags, u16 0,
 * i32 status, u32 imm, u32 0, u64 id, u64 raddr, u64 key, u64 len) and sends
 * a bad hello, frames of unknown type, answers to requests never made, wrong
 * read lengths, truncated frames.  Each must end the connection cleanly: the
 * endpoint's posted work completes with GDX_EDISCONNECTED and nothing crashes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <gdx/device.h>
#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "common/stats.h"
#include "tcp_frame.h"
#include "test.h"
#include "xport_raw.h"

/* Posts receives, lets `hostile` misbehave, and checks the endpoint went down cleanly. */
static void expect_dropped(int (*hostile)(int fd, struct gdx_xport_ep *ep))
{
	struct gdx_xport_cqe e;
	unsigned char buf[4][64];
	int got = 0, want = 4;
	struct raw_conn conn;

	raw_open(&conn, NULL);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_xport_post_recv(conn.ep, buf[i], 64, i), 0);
	want += hostile(conn.fd, conn.ep);	/* plus the requests it made us post */
	while (got < want) {
		int n = gdx_xport_cq_poll(conn.cq, &e, 1);

		assert_true(n >= 0);
		if (!n) {
			assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
			continue;
		}
		assert_int_equal(e.status, GDX_EDISCONNECTED);
		got++;
	}
	assert_int_equal(gdx_xport_ep_connected(conn.ep), 0);
	assert_int_equal(gdx_xport_post_recv(conn.ep, buf[0], 64, 9), GDX_EDISCONNECTED);
	raw_close(&conn);
}

static int unknown_type(int fd, struct gdx_xport_ep *ep)
{
	(void)ep;
	send_frame(fd, 99, 1, 0, 0);
	return 0;
}

static int resp_without_request(int fd, struct gdx_xport_ep *ep)
{
	(void)ep;
	send_frame(fd, 5 /* RESP */, 42, 0, 0);
	return 0;
}

static int resp_bad_status(int fd, struct gdx_xport_ep *ep)
{
	static unsigned char src[16];

	/* A real request is outstanding; the answer carries a status no gdx code has. */
	assert_int_equal(gdx_xport_post_send(ep, src, sizeof(src), 100, 0), 0);
	{
		struct frame f;

		assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
		assert_int_equal(recv(fd, src, sizeof(src), MSG_WAITALL), sizeof(src));
		send_frame(fd, 5, f.id, 0, -99999);
	}
	return 1;
}

static int read_resp_wrong_len(int fd, struct gdx_xport_ep *ep)
{
	static unsigned char dst[64];
	struct frame f;

	assert_int_equal(gdx_xport_post_read(ep, dst, sizeof(dst), 0x1000, 1, 100, 0), 0);
	assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 4);	/* READ */
	assert_int_equal(f.len, sizeof(dst));
	/* More data than was asked for would overrun the buffer: refused. */
	send_frame(fd, 6 /* READ_RESP */, f.id, sizeof(dst) * 2, 0);
	return 1;
}

static int huge_len(int fd, struct gdx_xport_ep *ep)
{
	(void)ep;
	send_frame(fd, 2 /* SEND */, 1, 1ull << 50, 0);
	return 0;
}

static int truncated(int fd, struct gdx_xport_ep *ep)
{
	struct frame f = { .type = 2, .id = 1, .len = 64 };

	(void)ep;
	/* Half a header, then the connection goes. */
	assert_int_equal(send(fd, &f, 20, MSG_NOSIGNAL), 20);
	shutdown(fd, SHUT_WR);
	return 0;
}

static int truncated_payload(int fd, struct gdx_xport_ep *ep)
{
	static const unsigned char part[10];

	(void)ep;
	send_frame(fd, 2, 1, 64, 0);
	assert_int_equal(send(fd, part, sizeof(part), MSG_NOSIGNAL), sizeof(part));
	shutdown(fd, SHUT_WR);
	return 0;
}

static void test_malformed_frames(void **state)
{
	(void)state;
	expect_dropped(unknown_type);
	expect_dropped(resp_without_request);
	expect_dropped(resp_bad_status);
	expect_dropped(read_resp_wrong_len);
	expect_dropped(huge_len);
	expect_dropped(truncated);
	expect_dropped(truncated_payload);
}

/* Reads the listener's hello, then waits up to 5 s for the listener to hang up: ms it took. */
static long hello_then_hangup(int fd)
{
	struct timeval tv = { .tv_sec = 5 };
	struct timespec t0, t1;
	struct frame f;
	char c;

	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(recv(fd, &c, 1, 0), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
}

/*
 * A peer with a bad hello, and one that connects and says nothing: the
 * listener drops each (the bad hello at once, the silent one when the
 * handshake's 200 ms are up) and the accept under way goes on: it returns the
 * real client that comes next.  An accept with nothing coming returns
 * -ETIMEDOUT at its own timeout.
 */
static void test_bad_hello(void **state)
{
	struct gdx_xport_opts o;
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	struct acc a = { 0 };
	struct frame f = { .type = 1, .imm = 0x12345678, .id = 1 };
	struct timespec t0, t1;
	pthread_t th;
	long ms;
	int fd;

	(void)state;
	gdx_xport_opts_init(&o, sizeof(o));
	o.timeout_ms = 200;
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), 0);
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	a.l = l;
	a.cq = cq;
	pthread_create(&th, NULL, accept_main, &a);
	fd = raw_connect(gdx_xport_listener_addr(l));
	assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	ms = hello_then_hangup(fd);
	assert_true(ms < 150);
	close(fd);

	fd = raw_connect(gdx_xport_listener_addr(l));
	ms = hello_then_hangup(fd);
	assert_true(ms >= 100 && ms < 2000);
	close(fd);

	assert_int_equal(gdx_xport_connect(gdx_xport_listener_addr(l), NULL, cq, &ep), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	gdx_xport_ep_destroy(a.ep);
	gdx_xport_ep_destroy(ep);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(gdx_xport_accept(l, cq, 200, &ep), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 199 && ms < 1000);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
}

/*
 * A receive posted while a message that found none is still arriving: the
 * message must land in it once complete (it once stayed stranded among the
 * unexpected messages while the receive waited for the next one).
 */
static void test_recv_posted_mid_message(void **state)
{
	struct gdx_xport_cqe e;
	static unsigned char payload[1 << 20], rx[1 << 20];
	struct frame f;
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	t_fill(payload, sizeof(payload), 7);
	send_frame(conn.fd, 2 /* SEND */, 1, sizeof(payload), 0);
	assert_int_equal(send(conn.fd, payload, 1000, MSG_NOSIGNAL), 1000);
	usleep(50000);
	assert_int_equal(gdx_xport_post_recv(conn.ep, rx, sizeof(rx), 5), 0);
	assert_int_equal(send(conn.fd, payload + 1000, sizeof(payload) - 1000, MSG_NOSIGNAL),
			 (ssize_t)(sizeof(payload) - 1000));
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.wr_id, 5);
	assert_int_equal(e.len, sizeof(payload));
	assert_memory_equal(rx, payload, sizeof(payload));
	/* The peer is answered. */
	assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 5);
	assert_int_equal(f.id, 1);
	assert_int_equal(f.status, 0);
	raw_close(&conn);
}

/*
 * A 1 MiB send whose payload trickles in (pieces of 200 KiB, 10 ms apart):
 * the receive thread reads it in waiting reads of at most 256 KiB
 * (RX_WAIT_MAX), each where the last ended, and the receive gets every byte
 * in place and the peer its answer.  Then one cut short by the peer's end
 * after 600 KiB: its receive completes with GDX_EDISCONNECTED, no wait left.
 */
static void test_send_trickles_in(void **state)
{
	enum { SZ = 1 << 20, PIECE = 200 << 10 };
	static unsigned char payload[SZ], rx[SZ];
	struct gdx_xport_cqe e;
	struct raw_conn conn;
	struct frame f;

	(void)state;
	raw_open(&conn, NULL);
	t_fill(payload, SZ, 11);
	assert_int_equal(gdx_xport_post_recv(conn.ep, rx, SZ, 1), 0);
	send_frame(conn.fd, 2 /* SEND */, 7, SZ, 0);
	for (size_t o = 0; o < SZ; o += PIECE) {
		size_t n = SZ - o < PIECE ? SZ - o : PIECE;

		assert_int_equal(send(conn.fd, payload + o, n, MSG_NOSIGNAL), (ssize_t)n);
		usleep(10000);
	}
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(e.len, SZ);
	assert_memory_equal(rx, payload, SZ);
	assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 5);
	assert_int_equal(f.id, 7);
	assert_int_equal(f.status, 0);

	assert_int_equal(gdx_xport_post_recv(conn.ep, rx, SZ, 2), 0);
	send_frame(conn.fd, 2, 8, SZ, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(send(conn.fd, payload + (size_t)i * PIECE, PIECE, MSG_NOSIGNAL),
				 PIECE);
		usleep(10000);
	}
	shutdown(conn.fd, SHUT_WR);
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.wr_id, 2);
	assert_int_equal(e.status, GDX_EDISCONNECTED);
	raw_close(&conn);
}

/*
 * A message too large for its receive, cut short by the connection's end
 * while tcp reads and drops its payload, behind messages into device memory
 * whose copies are slow (2 ms each on the emulated device): the too-small
 * receive's completion still comes after the earlier receives' (their
 * deferred effects first, rule 7), whose successes, data in place, come
 * before their failures.
 */
static void test_too_large_cut_behind_device(void **state)
{
	enum { N = 64, SZ = 4096 };
	static unsigned char payload[N * SZ], got[N * SZ];
	struct gdx_device *dev;
	struct gdx_xport_cqe e;
	unsigned char small[64];
	int seen_fail = 0;
	void *rx;
	struct raw_conn conn;

	(void)state;
	if (gdx_device_open(NULL, &dev))
		skip();
	assert_int_equal(gdx_device_malloc(dev, sizeof(payload), &rx), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "2000"), 0);
	raw_open(&conn, NULL);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(conn.ep, (char *)rx + (size_t)i * SZ, SZ, i),
				 0);
	assert_int_equal(gdx_xport_post_recv(conn.ep, small, sizeof(small), N), 0);
	t_fill(payload, sizeof(payload), 3);
	for (int i = 0; i < N; i++) {
		send_frame(conn.fd, 2 /* SEND */, 10 + (uint64_t)i, SZ, 0);
		assert_int_equal(send(conn.fd, payload + (size_t)i * SZ, SZ, MSG_NOSIGNAL), SZ);
	}
	send_frame(conn.fd, 2, 10 + N, 1 << 20, 0);
	assert_int_equal(send(conn.fd, payload, 1000, MSG_NOSIGNAL), 1000);
	shutdown(conn.fd, SHUT_WR);
	for (int i = 0; i <= N; i++) {
		while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
			assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
		if (e.wr_id != (uint64_t)i)
			fail_msg("receive %llu (%s) completed where %d was due",
				 (unsigned long long)e.wr_id, gdx_strerror(e.status), i);
		if (i == N && e.status != GDX_EDISCONNECTED) {
			assert_int_equal(e.status, -EMSGSIZE);
		} else if (e.status) {
			assert_int_equal(e.status, GDX_EDISCONNECTED);
			seen_fail = 1;
		} else {
			assert_false(seen_fail);
			assert_int_equal(gdx_memcpy(dev, got, (char *)rx + (size_t)i * SZ, SZ), 0);
			assert_memory_equal(got, payload + (size_t)i * SZ, SZ);
		}
	}
	assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
	raw_close(&conn);
	gdx_config_reset();
	gdx_device_free(dev, rx);
	gdx_device_close(dev);
}

/*
 * An answer to a request whose frame has not begun to go out (queued behind a
 * large write the peer does not read) is refused: the connection drops and
 * the request completes with GDX_EDISCONNECTED, never with success (and never
 * while its frame still points at it).  The write, answered while its bytes
 * were going out, may complete.
 */
static void test_answer_before_sent(void **state)
{
	static unsigned char big[8u << 20], small[16];
	struct gdx_xport_cqe e;
	struct frame f;
	int st[2] = { 1, 1 };
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	/* more than the sockets hold: the transmit thread stays inside the write */
	assert_int_equal(gdx_xport_post_write(conn.ep, big, sizeof(big), 0x1000, 1, 100, 0), 0);
	assert_int_equal(gdx_xport_post_send(conn.ep, small, sizeof(small), 101, 0), 0);
	assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 3);	/* WRITE */
	send_frame(conn.fd, 5, f.id, 0, 0);
	send_frame(conn.fd, 5, f.id + 1, 0, 0);
	for (int got = 0; got < 2; got++) {
		while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
			assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
		assert_true(e.wr_id == 100 || e.wr_id == 101);
		st[e.wr_id - 100] = e.status;
	}
	assert_true(st[0] == 0 || st[0] == GDX_EDISCONNECTED);
	assert_int_equal(st[1], GDX_EDISCONNECTED);
	assert_int_equal(gdx_xport_ep_connected(conn.ep), 0);
	assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
	raw_close(&conn);
}

/* Reads n bytes into p, each wait for more at most ms; returns the bytes read. */
static size_t recv_within(int fd, void *p, size_t n, int ms)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pf, 1, ms) <= 0)
			break;
		r = recv(fd, (char *)p + got, n - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/*
 * The endpoint's socket in this process: the one whose peer is peer_fd's own
 * address (the raw peer's end of the connection).
 */
static int ep_sock_of(int peer_fd)
{
	struct sockaddr_in me, peer, mine;
	socklen_t l = sizeof(me);
	int found = -1;

	assert_int_equal(getsockname(peer_fd, (struct sockaddr *)&me, &l), 0);
	l = sizeof(peer);
	assert_int_equal(getpeername(peer_fd, (struct sockaddr *)&peer, &l), 0);
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in its;

		l = sizeof(its);
		if (fd == peer_fd || getpeername(fd, (struct sockaddr *)&its, &l) ||
		    its.sin_family != AF_INET || its.sin_port != me.sin_port ||
		    its.sin_addr.s_addr != me.sin_addr.s_addr)
			continue;
		l = sizeof(mine);
		assert_int_equal(getsockname(fd, (struct sockaddr *)&mine, &l), 0);
		if (mine.sin_port != peer.sin_port || mine.sin_addr.s_addr != peer.sin_addr.s_addr)
			continue;
		assert_int_equal(found, -1);
		found = fd;
	}
	assert_true(found >= 0);
	return found;
}

/* Reads the endpoint's send of n bytes, which must be fill `seed`; returns its frame. */
static struct frame recv_send_within(int fd, unsigned char *sink, unsigned char *want, size_t n,
				     uint64_t seed)
{
	struct frame f;

	assert_int_equal(recv_within(fd, &f, sizeof(f), 5000), sizeof(f));
	assert_int_equal(f.type, TF_SEND);
	assert_int_equal(f.len, n);
	assert_int_equal(recv_within(fd, sink, n, 5000), n);
	t_fill(want, n, seed);
	assert_memory_equal(sink, want, n);
	return f;
}

/*
 * A fenced send the socket takes only part of (its buffers set small), in
 * one train with a read posted behind it: the read counts as in flight once
 * gathered, and the fence of the send, half-sent at the head of the queue,
 * held the rest of it back for that read's answer, which could never come
 * (the peer waits for the rest of the send): the connection hung for good.
 * Now a fenced request already going is past its fence.  Two ways to that
 * train, alternately:
 *  - held: a 64 KiB send, a fenced one and the read, posted while a send is
 *    on the wire unanswered, are held (tcp_post) and go together at a poll
 *    of the CQ, twice what the socket takes;
 *  - raced: a 768 KiB fenced send whose poster the socket cut short, and the
 *    read posted at once: where a train takes large requests (tx_host_rides),
 *    the read's post may find the socket free before the transmit thread
 *    wakes and send both (some rounds; else the transmit thread takes the
 *    send alone).
 * Every byte arrives, in order, and every request completes.
 */
static void fence_round(struct raw_conn *conn, uint64_t id, int held)
{
	static unsigned char big[768u << 10], sink[768u << 10], want[768u << 10];
	const size_t n = held ? 64u << 10 : sizeof(big);
	unsigned char rd[16], z[sizeof(rd)] = { 0 };
	struct frame lead = { 0 }, s = { 0 }, f, fr, a;
	struct gdx_xport_cqe e;
	uint64_t first = id;

	if (held) {
		/* on the wire unanswered: the posts after it are held */
		assert_int_equal(gdx_xport_post_send(conn->ep, z, sizeof(z), id++, 0), 0);
		assert_int_equal(recv_within(conn->fd, &lead, sizeof(lead), 5000), sizeof(lead));
		assert_int_equal(recv_within(conn->fd, sink, sizeof(z), 5000), sizeof(z));
		t_fill(big + n, n, id);
		assert_int_equal(gdx_xport_post_send(conn->ep, big + n, n, id++, 0), 0);
	}
	t_fill(big, n, id);
	assert_int_equal(gdx_xport_post_send(conn->ep, big, n, id++, GDX_XPORT_FENCE), 0);
	assert_int_equal(gdx_xport_post_read(conn->ep, rd, sizeof(rd), 0x1000, 7, id++, 0), 0);
	if (held) {
		assert_int_equal(gdx_xport_cq_poll(conn->cq, &e, 1), 0);
		s = recv_send_within(conn->fd, sink, want, n, first + 1);
	}
	f = recv_send_within(conn->fd, sink, want, n, id - 2);
	assert_int_equal(recv_within(conn->fd, &fr, sizeof(fr), 5000), sizeof(fr));
	assert_int_equal(fr.type, TF_READ);
	if (held) {
		send_frame(conn->fd, TF_RESP, lead.id, 0, 0);
		send_frame(conn->fd, TF_RESP, s.id, 0, 0);
	}
	send_frame(conn->fd, TF_RESP, f.id, 0, 0);
	a = (struct frame){ .type = TF_READ_RESP, .id = fr.id, .len = sizeof(rd) };
	assert_int_equal(send(conn->fd, &a, sizeof(a), MSG_NOSIGNAL), sizeof(a));
	assert_int_equal(send(conn->fd, z, sizeof(z), MSG_NOSIGNAL), sizeof(z));
	for (uint64_t w = first; w < id; w++) {
		while (gdx_xport_cq_poll(conn->cq, &e, 1) == 0)
			assert_int_equal(gdx_xport_cq_wait(conn->cq, 10000), 1);
		assert_int_equal(e.wr_id, w);
		assert_int_equal(e.status, 0);
	}
}

static void test_fence_cut_short_read_behind(void **state)
{
	struct raw_conn conn;
	int small = 32 << 10;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "0"), 0);
	raw_open(&conn, NULL);
	assert_int_equal(setsockopt(ep_sock_of(conn.fd), SOL_SOCKET, SO_SNDBUF, &small,
				    sizeof(small)), 0);
	assert_int_equal(setsockopt(conn.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	for (unsigned round = 0; round < 16; round++)
		fence_round(&conn, 10 * round, round % 2 == 0);
	raw_close(&conn);
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "1"), 0);
}

/*
 * A peer that sends a message no receive can take, beyond what is kept as
 * unexpected (the receive thread then stalls until a receive is posted), and
 * hangs up: the endpoint sees it go all the same, and the request waiting for
 * an answer completes with GDX_EDISCONNECTED instead of waiting forever.
 */
static void test_peer_gone_while_stalled(void **state)
{
	static unsigned char dst[64], part[16];
	struct gdx_xport_cqe e;
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	assert_int_equal(gdx_xport_post_read(conn.ep, dst, sizeof(dst), 0x1000, 1, 100, 0), 0);
	send_frame(conn.fd, 2 /* SEND */, 1, sizeof(part), 0);
	assert_int_equal(send(conn.fd, part, sizeof(part), MSG_NOSIGNAL), sizeof(part));
	send_frame(conn.fd, 2, 2, 1ull << 30, 0);
	shutdown(conn.fd, SHUT_WR);
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.wr_id, 100);
	assert_int_equal(e.status, GDX_EDISCONNECTED);
	assert_int_equal(gdx_xport_ep_connected(conn.ep), 0);
	raw_close(&conn);
}

/*
 * A message kept for a later receive is answered at once, so its sender has
 * it delivered.  A receive posted for it while the connection is up gets it,
 * even when the connection ends right after: here while the receive thread
 * reads the payload of the next message (an endpoint with a copy agent,
 * where the receive thread hands kept messages over; the poster did, before
 * the kept ring, and no end could come in between).
 */
static void test_kept_then_cut(void **state)
{
	static unsigned char payload[1 << 20], rx[4096];
	struct gdx_device *dev;
	struct gdx_xport_cqe e;
	struct frame f;
	void *drx;
	struct raw_conn conn;

	(void)state;
	if (gdx_device_open(NULL, &dev))
		skip();
	assert_int_equal(gdx_device_malloc(dev, 4096, &drx), 0);
	raw_open(&conn, NULL);
	t_fill(payload, sizeof(payload), 11);
	/* device memory posted: the copy agent starts, and the kept ring */
	assert_int_equal(gdx_xport_post_recv(conn.ep, drx, 4096, 1), 0);
	send_frame(conn.fd, TF_SEND, 1, 100, 0);
	assert_int_equal(send(conn.fd, payload, 100, MSG_NOSIGNAL), 100);
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(e.status, 0);
	assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	/* kept, and answered */
	send_frame(conn.fd, TF_SEND, 2, 1000, 0);
	assert_int_equal(send(conn.fd, payload, 1000, MSG_NOSIGNAL), 1000);
	assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, TF_RESP);
	assert_int_equal(f.id, 2);
	assert_int_equal(f.status, 0);
	/* the next one's payload, in part: the receive thread waits in it */
	send_frame(conn.fd, TF_SEND, 3, sizeof(payload), 0);
	assert_int_equal(send(conn.fd, payload, 1000, MSG_NOSIGNAL), 1000);
	usleep(50000);
	assert_int_equal(gdx_xport_post_recv(conn.ep, rx, sizeof(rx), 7), 0);
	usleep(50000);
	close(conn.fd);
	conn.fd = -1;
	while (gdx_xport_cq_poll(conn.cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
	assert_int_equal(e.wr_id, 7);
	if (e.status)
		fail_msg("the receive posted for a kept message failed (%s) at the "
			 "connection's end", gdx_strerror(e.status));
	assert_int_equal(e.len, 1000);
	assert_memory_equal(rx, payload, 1000);
	assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
	raw_close(&conn);
	gdx_device_free(dev, drx);
	gdx_device_close(dev);
}

#define KEY "NVMeTLSkey-1:01:ERERERERERERERERERERERERERERERERERERERERERHYIEm8:"
#define BAD "NVMeTLSkey-1:01:IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIGuf2I:"

/* Whether this kernel has kTLS: the "tls" upper layer protocol on an established socket. */
static int ktls_here(void)
{
	int fd[2], ok;

	t_tcp_pair(fd);
	ok = !setsockopt(fd[0], SOL_TCP, TCP_ULP, "tls", sizeof("tls"));
	close(fd[0]);
	close(fd[1]);
	return ok;
}

/* Connects with key and identity (NULL: none); the result and the ms it took. */
static int tls_connect(const char *addr, const char *key, const char *id,
		       struct gdx_xport_cq *cq, struct gdx_xport_ep **ep, long *ms)
{
	struct gdx_xport_opts o;
	struct timespec t0, t1;
	int ret;

	gdx_xport_opts_init(&o, sizeof(o));
	o.timeout_ms = 5000;
	o.tls_key = key;
	o.tls_identity = id;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = gdx_xport_connect(addr, &o, cq, ep);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	return ret;
}

/* The next completion on cq: wr_id's, a success. */
static void tls_wait(struct gdx_xport_cq *cq, uint64_t wr_id)
{
	struct gdx_xport_cqe e;

	while (gdx_xport_cq_poll(cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(cq, 30000), 1);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.wr_id, wr_id);
}

/*
 * A connection with the key and identity, accepted on l: 1 MiB crosses
 * byte-exact, a send, then a write into device memory the server exposes and
 * a read of it back (the staged paths).
 */
static void tls_data(struct gdx_xport_listener *l, struct gdx_xport_cq *cq)
{
	static unsigned char tx[1 << 20], rx[1 << 20];
	struct acc a = { .l = l, .cq = cq, .ms = 30000 };
	struct gdx_xport_ep *ep = NULL;
	struct gdx_xport_cqe e[2];
	struct gdx_device *dev;
	struct gdx_xport_mr *mr;
	pthread_t th;
	int done = 0;
	long ms;
	void *d;

	pthread_create(&th, NULL, accept_main, &a);
	assert_int_equal(tls_connect(gdx_xport_listener_addr(l), KEY, "rank-0", cq, &ep, &ms), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	t_fill(tx, sizeof(tx), 9);
	assert_int_equal(gdx_xport_post_recv(a.ep, rx, sizeof(rx), 1), 0);
	assert_int_equal(gdx_xport_post_send(ep, tx, sizeof(tx), 2, 0), 0);
	while (done < 2) {
		while (gdx_xport_cq_poll(cq, &e[done], 1) == 0)
			assert_int_equal(gdx_xport_cq_wait(cq, 30000), 1);
		assert_int_equal(e[done].status, 0);
		done++;
	}
	assert_int_equal(e[0].wr_id + e[1].wr_id, 3);
	assert_memory_equal(rx, tx, sizeof(tx));

	assert_int_equal(gdx_device_open(NULL, &dev), 0);
	assert_int_equal(gdx_device_malloc(dev, sizeof(tx), &d), 0);
	assert_int_equal(gdx_xport_mr_reg(a.ep, d, sizeof(tx), GDX_XPORT_ACCESS_REMOTE_READ |
					  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	t_fill(tx, sizeof(tx), 10);
	assert_int_equal(gdx_xport_post_write(ep, tx, sizeof(tx), gdx_xport_mr_addr(mr),
					      gdx_xport_mr_key(mr), 3, 0), 0);
	tls_wait(cq, 3);
	memset(rx, 0, sizeof(rx));
	assert_int_equal(gdx_xport_post_read(ep, rx, sizeof(rx), gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 4, 0), 0);
	tls_wait(cq, 4);
	assert_memory_equal(rx, tx, sizeof(tx));
	assert_int_equal(gdx_memcpy(dev, rx, d, sizeof(rx)), 0);
	assert_memory_equal(rx, tx, sizeof(tx));
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	gdx_xport_ep_destroy(a.ep);
	gdx_xport_ep_destroy(ep);
	gdx_device_free(dev, d);
	gdx_device_close(dev);
}

/*
 * A listener with opts.tls_key refuses, before any frame, a clear peer, a
 * peer with another key and one with another identity, each at once (well
 * within the 5 s handshake timeout), and its accept goes on.  The peer with
 * the key and identity is the one accepted, and its data crosses (tls_data):
 * by kTLS where this kernel has it and by the record relay (tls.record=user),
 * by the relay alone where it has none, and there tls.record=kernel fails
 * both sides with -EOPNOTSUPP (the connect's error), nothing in clear.
 * GDX_TEST_KTLS=1 (the interop guest, t_xport_tls.sh) requires kTLS.
 */
static void test_tls_psk(void **state)
{
	struct gdx_xport_opts o;
	struct gdx_xport_listener *l, *plain;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep = NULL;
	struct acc a = { 0 };
	const char *addr;
	pthread_t th;
	long ms;
	int ktls = ktls_here();

	(void)state;
	if (getenv("GDX_TEST_KTLS"))
		assert_true(ktls);
	gdx_xport_opts_init(&o, sizeof(o));
	o.timeout_ms = 5000;
	o.tls_key = KEY;
	o.tls_identity = "rank-0";
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), 0);
	addr = gdx_xport_listener_addr(l);
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	a.l = l;
	a.cq = cq;
	a.ms = 3000;
	pthread_create(&th, NULL, accept_main, &a);

	assert_int_not_equal(tls_connect(addr, NULL, NULL, cq, &ep, &ms), 0);
	assert_true(ms < 2500);
	assert_int_equal(tls_connect(addr, BAD, "rank-0", cq, &ep, &ms), -EKEYREJECTED);
	assert_true(ms < 2500);
	assert_int_equal(tls_connect(addr, KEY, "rank-1", cq, &ep, &ms), -EKEYREJECTED);
	assert_true(ms < 2500);
	assert_int_equal(tls_connect(addr, KEY, NULL, cq, &ep, &ms), -EKEYREJECTED);
	assert_true(ms < 2500);
	if (!ktls) {
		assert_int_equal(gdx_config_set("tls.record", "kernel"), 0);
		assert_int_equal(tls_connect(addr, KEY, "rank-0", cq, &ep, &ms), -EOPNOTSUPP);
		assert_int_equal(gdx_config_set("tls.record", "auto"), 0);
	}
	pthread_join(th, NULL);
	assert_int_equal(a.ret, -ETIMEDOUT);
	tls_data(l, cq);
	if (ktls) {
		assert_int_equal(gdx_config_set("tls.record", "user"), 0);
		tls_data(l, cq);
		assert_int_equal(gdx_config_set("tls.record", "auto"), 0);
	}
	gdx_xport_listener_close(l);

	/* a TLS client at a clear listener: refused, never a clear connection */
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &plain), 0);
	a = (struct acc){ .l = plain, .cq = cq };
	pthread_create(&th, NULL, accept_main, &a);
	assert_int_not_equal(tls_connect(gdx_xport_listener_addr(plain), KEY, "rank-0", cq, &ep,
					 &ms), 0);
	assert_true(ms < 2500);
	assert_int_equal(gdx_xport_connect(gdx_xport_listener_addr(plain), NULL, cq, &ep), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	gdx_xport_ep_destroy(a.ep);
	gdx_xport_ep_destroy(ep);
	gdx_xport_listener_close(plain);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
}

/* The option is checked, never ignored: other backends, an identity alone, a bad key. */
static void test_tls_opts(void **state)
{
	struct gdx_xport_opts o;
	struct gdx_xport_listener *l;

	(void)state;
	gdx_xport_opts_init(&o, sizeof(o));
	o.tls_key = KEY;
	assert_int_equal(gdx_xport_listen("loop://tls", &o, &l), -EOPNOTSUPP);
	o.tls_key = NULL;
	o.tls_identity = "rank-0";
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), -EINVAL);
	o.tls_key = "NVMeTLSkey-1:01:ERERERERERERERERERERERERERERERERERERERERERHYIEm9:";
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), -EBADMSG);
	o.tls_key = KEY;
	o.tls_identity = "rank\x01";
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), -EINVAL);
	o.tls_key = "/nonexistent/key";
	o.tls_identity = NULL;
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", &o, &l), -ENOENT);
}

/* An argument: run only the tests whose names match it (cmocka's filter, * a wildcard). */
int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_hello),
		cmocka_unit_test(test_malformed_frames),
		cmocka_unit_test(test_recv_posted_mid_message),
		cmocka_unit_test(test_send_trickles_in),
		cmocka_unit_test(test_too_large_cut_behind_device),
		cmocka_unit_test(test_answer_before_sent),
		cmocka_unit_test(test_fence_cut_short_read_behind),
		cmocka_unit_test(test_peer_gone_while_stalled),
		cmocka_unit_test(test_kept_then_cut),
		cmocka_unit_test(test_tls_psk),
		cmocka_unit_test(test_tls_opts),
	};

	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
