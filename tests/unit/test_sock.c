/* SPDX-License-Identifier: MIT */
/*
 * gdx_recv_full, the waiting receive of the NVMe/TCP host's PDUs: every byte
 * lands in its place across iovecs whatever the pieces the peer sends and
 * wherever the GDX_RX_WAIT_MAX bound cuts an iovec; empty iovecs are stepped
 * over; the peer's end mid-way is -ECONNRESET, SO_RCVTIMEO's timeout -EAGAIN.
 * Over a socketpair and over TCP loopback with whole (a large read's rest
 * waited for whole).  gdx_rx_wait_for, that wait (also the tcp transport's):
 * it ends only once the bytes are queued, or at the peer's end, or its
 * timeout; the wake-up threshold is back at 1 after every call.
 */
#include <linux/sockios.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/sock.h"
#include "test.h"

struct feed {
	int fd;
	size_t len, piece;	/* bytes to send, in pieces of this size */
	unsigned gap_us;	/* between pieces */
	bool close_after;
};

static unsigned char pat(size_t i)
{
	return (unsigned char)(i * 131u + (i >> 12));
}

static void *feeder(void *arg)
{
	struct feed *f = arg;
	unsigned char *b = malloc(f->len);

	for (size_t i = 0; i < f->len; i++)
		b[i] = pat(i);
	for (size_t off = 0; off < f->len; off += f->piece) {
		struct iovec v = { b + off, GDX_MIN(f->piece, f->len - off) };

		if (gdx_send_full(f->fd, &v, 1))
			break;
		if (f->gap_us) {
			struct timespec ts = { 0, (long)f->gap_us * 1000 };

			nanosleep(&ts, NULL);
		}
	}
	free(b);
	if (f->close_after)
		shutdown(f->fd, SHUT_WR);
	return NULL;
}

/*
 * sv[0] the sender's end, sv[1] the receiver's: a socketpair, or TCP loopback
 * with tcp; f fed into sv[0] by a thread of its own.
 */
static void feed_start(struct feed *f, int sv[2], bool tcp, pthread_t *th)
{
	int sz = 4 << 20;

	if (tcp)
		t_tcp_pair(sv);
	else
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	/* room for the whole feed: the feeder never waits on the reader */
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	f->fd = sv[0];
	if (f->len)
		assert_int_equal(pthread_create(th, NULL, feeder, f), 0);
}

/* A pair with nothing fed. */
static void pair(int sv[2], bool tcp)
{
	struct feed none = { .len = 0 };

	feed_start(&none, sv, tcp, NULL);
}

/* The wake-up threshold the calls leave: always the default, 1. */
static void assert_lowat_default(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l), 0);
	assert_int_equal(v, 1);
}

static size_t queued(int fd)
{
	int v = 0;

	assert_int_equal(ioctl(fd, SIOCINQ, &v), 0);
	return (size_t)v;
}

/* Receives lens[0..n) bytes (some may be 0) fed as described, and checks them. */
static void recv_layout_on(bool tcp, const size_t *lens, int n, size_t piece, unsigned gap_us)
{
	struct iovec iov[8], keep[8];
	struct feed f = { .piece = piece, .gap_us = gap_us };
	size_t total = 0, off = 0;
	pthread_t th;
	int sv[2];

	assert_true(n <= 8);
	for (int i = 0; i < n; i++) {
		iov[i].iov_len = lens[i];
		iov[i].iov_base = malloc(lens[i] ? lens[i] : 1);
		total += lens[i];
	}
	memcpy(keep, iov, sizeof(iov[0]) * (size_t)n);
	f.len = total;
	feed_start(&f, sv, tcp, &th);
	assert_int_equal(gdx_recv_full(sv[1], iov, n, tcp), 0);
	pthread_join(th, NULL);
	assert_lowat_default(sv[1]);
	for (int i = 0; i < n; i++) {
		const unsigned char *p = keep[i].iov_base;

		for (size_t j = 0; j < keep[i].iov_len; j++, off++)
			if (p[j] != pat(off))
				fail_msg("iovec %d byte %zu: %#x, want %#x", i, j, p[j], pat(off));
		free(keep[i].iov_base);
	}
	assert_int_equal(off, total);
	close(sv[0]);
	close(sv[1]);
}

static void recv_layout(const size_t *lens, int n, size_t piece, unsigned gap_us)
{
	recv_layout_on(false, lens, n, piece, gap_us);
	recv_layout_on(true, lens, n, piece, gap_us);
}

static void test_one_large_buffer(void **state)
{
	size_t l[] = { 5 * GDX_RX_WAIT_MAX / 2 };

	(void)state;
	recv_layout(l, 1, 1 << 20, 0);
	/* trickling in: the bounded reads resume over many pieces */
	recv_layout(l, 1, 40000, 200);
}

static void test_bound_cuts_inside_iovecs(void **state)
{
	/* the bound falls inside the second iovec, then inside the third, ... */
	size_t a[] = { 100 << 10, 200 << 10, 300 << 10, 4 };
	/* a payload and its 4-byte digest, the bound exactly at the payload's end */
	size_t b[] = { GDX_RX_WAIT_MAX, 4 };
	size_t c[] = { GDX_RX_WAIT_MAX - 1, 4, GDX_RX_WAIT_MAX + 3 };

	(void)state;
	recv_layout(a, 4, 64 << 10, 0);
	recv_layout(b, 2, 1 << 20, 0);
	recv_layout(c, 3, 3000, 0);
}

static void test_empty_iovecs(void **state)
{
	size_t a[] = { 0, 0, 4096, 0, 100, 0 };
	struct iovec v[2] = { { NULL, 0 }, { NULL, 0 } };
	int sv[2];

	(void)state;
	recv_layout(a, 6, 1000, 0);
	/* nothing to read: done at once, even with the peer gone */
	pair(sv, false);
	close(sv[0]);
	assert_int_equal(gdx_recv_full(sv[1], v, 2, false), 0);
	assert_int_equal(gdx_recv_full(sv[1], v, 0, false), 0);
	close(sv[1]);
}

/* The peer ends after 300 KiB of 1 MiB: a reader waiting for all of a read still wakes. */
static void peer_ends_midway_on(bool tcp)
{
	struct feed f = { .len = 300 << 10, .piece = 64 << 10, .gap_us = 1000,
			  .close_after = true };
	char *buf = malloc(1 << 20);
	struct iovec v = { buf, 1 << 20 };
	pthread_t th;
	int sv[2];

	feed_start(&f, sv, tcp, &th);
	assert_int_equal(gdx_recv_full(sv[1], &v, 1, tcp), -ECONNRESET);
	pthread_join(th, NULL);
	assert_lowat_default(sv[1]);
	/* what came was placed: the iovec was trimmed past it */
	assert_ptr_equal(v.iov_base, buf + f.len);
	assert_int_equal(v.iov_len, (1 << 20) - f.len);
	for (size_t i = 0; i < f.len; i++)
		if ((unsigned char)buf[i] != pat(i))
			fail_msg("byte %zu", i);
	free(buf);
	close(sv[0]);
	close(sv[1]);
}

static void test_peer_ends_midway(void **state)
{
	(void)state;
	peer_ends_midway_on(false);
	peer_ends_midway_on(true);
}

/*
 * 200 KiB in pieces of 40 KB 2 ms apart: the wait ends once they are all
 * queued, not at the first piece; a wait for 64 KiB or less, or without
 * whole, ends at the first byte.
 */
static void test_wait_for_whole(void **state)
{
	struct feed f = { .len = 200 << 10, .piece = 40000, .gap_us = 2000 };
	pthread_t th;
	int sv[2], ev;

	(void)state;
	feed_start(&f, sv, true, &th);
	ev = gdx_rx_wait_for(sv[1], f.len, true, 10000);
	assert_true(ev > 0 && (ev & POLLIN));
	assert_int_equal(queued(sv[1]), f.len);
	assert_lowat_default(sv[1]);
	pthread_join(th, NULL);
	close(sv[0]);
	close(sv[1]);

	f.gap_us = 20000;
	feed_start(&f, sv, true, &th);
	assert_true(gdx_rx_wait_for(sv[1], f.len, false, 10000) & POLLIN);
	assert_true(queued(sv[1]) < f.len);
	assert_true(gdx_rx_wait_for(sv[1], 64 << 10, true, 10000) & POLLIN);
	assert_true(queued(sv[1]) < f.len);
	pthread_join(th, NULL);
	close(sv[0]);
	close(sv[1]);
}

/* The peer's end before the bytes ends the wait; so does the timeout, with nothing lost. */
static void test_wait_for_end_and_timeout(void **state)
{
	struct feed f = { .len = 100 << 10, .piece = 50 << 10, .gap_us = 1000,
			  .close_after = true };
	pthread_t th;
	int sv[2], ev;

	(void)state;
	feed_start(&f, sv, true, &th);
	ev = gdx_rx_wait_for(sv[1], 256 << 10, true, 10000);
	pthread_join(th, NULL);
	assert_true(ev > 0 && (ev & POLLIN));
	assert_lowat_default(sv[1]);
	close(sv[0]);
	close(sv[1]);

	pair(sv, true);
	assert_int_equal(write(sv[0], "abc", 3), 3);
	assert_int_equal(gdx_rx_wait_for(sv[1], 256 << 10, true, 20), 0);
	assert_lowat_default(sv[1]);
	assert_int_equal(queued(sv[1]), 3);
	close(sv[0]);
	close(sv[1]);
}

static void test_timeout_is_eagain(void **state)
{
	struct timeval tv = { 0, 20000 };
	char buf[16];
	struct iovec v = { buf, sizeof(buf) };
	int sv[2];

	(void)state;
	pair(sv, false);
	assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(write(sv[0], "abc", 3), 3);
	assert_int_equal(gdx_recv_full(sv[1], &v, 1, false), -EAGAIN);
	assert_int_equal(v.iov_len, sizeof(buf) - 3);
	assert_memory_equal(buf, "abc", 3);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_large_buffer),
		cmocka_unit_test(test_bound_cuts_inside_iovecs),
		cmocka_unit_test(test_empty_iovecs),
		cmocka_unit_test(test_peer_ends_midway),
		cmocka_unit_test(test_timeout_is_eagain),
		cmocka_unit_test(test_wait_for_whole),
		cmocka_unit_test(test_wait_for_end_and_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
