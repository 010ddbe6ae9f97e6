/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's short paths, seen from a raw peer on the wire (the
 * hello and frames by hand, xport_raw.h) and counted by the endpoints'
 * counters: a post that writes the socket itself, a sleeping caller that
 * receives for itself (host and device memory), a response held for the
 * caller's next post, a socket lent to the caller's next wait.  Each test
 * asserts the count of the path it is about, so that losing the path fails it.
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

#include <json-c/json.h>

#include "common/config.h"
#include "common/stats.h"
#include "common/util.h"
#include "tcp_frame.h"
#include "test.h"
#include "xport_raw.h"

/* Counter `name` of the tcp endpoints alive (stats scopes xport.tcp.N), summed. */
static uint64_t tcp_counter(const char *name)
{
	struct json_object *root = gdx_stats_json(), *v;
	uint64_t sum = 0;

	assert_non_null(root);
	json_object_object_foreach(root, scope, set) {
		if (!strncmp(scope, "xport.tcp.", 10) && json_object_object_get_ex(set, name, &v))
			sum += json_object_get_uint64(v);
	}
	json_object_put(root);
	return sum;
}

/* Reads a frame of the endpoint and its n-byte payload, which must be fill `seed`. */
static struct frame recv_frame(int fd, size_t n, unsigned seed)
{
	unsigned char *got = malloc(n), *want = malloc(n);
	struct frame f;

	assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.len, n);
	assert_int_equal(recv(fd, got, n, MSG_WAITALL), (ssize_t)n);
	t_fill(want, n, seed);
	assert_memory_equal(got, want, n);
	free(got);
	free(want);
	return f;
}

/*
 * Reads the response to send resp_id and a send of n bytes, fill `seed`,
 * in either order (a response held for a post goes ahead of it, one that
 * missed it after), and returns the send's frame.
 */
static struct frame recv_resp_and_send(int fd, uint64_t resp_id, size_t n, unsigned seed)
{
	struct frame f, sf = { 0 };
	int resp = 0, send = 0;

	while (!resp || !send) {
		assert_int_equal(recv(fd, &f, sizeof(f), MSG_PEEK | MSG_WAITALL), sizeof(f));
		if (f.type == TF_RESP) {
			assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
			assert_false(resp);
			assert_int_equal(f.id, resp_id);
			assert_int_equal(f.status, 0);
			resp = 1;
		} else {
			assert_false(send);
			sf = recv_frame(fd, n, seed);
			assert_int_equal(sf.type, TF_SEND);
			send = 1;
		}
	}
	return sf;
}

/* Reads the endpoint's response frame to the peer's request id; returns it. */
static struct frame recv_resp(int fd, uint64_t id)
{
	struct frame f;

	assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, TF_RESP);
	assert_int_equal(f.id, id);
	return f;
}

/* Waits for the next completion on cq and returns it. */
static struct gdx_xport_cqe next_cqe(struct gdx_xport_cq *cq)
{
	struct gdx_xport_cqe e;

	while (gdx_xport_cq_poll(cq, &e, 1) == 0)
		assert_int_equal(gdx_xport_cq_wait(cq, 10000), 1);
	return e;
}

/* The longest single poll of the last spin_cqe. */
static uint64_t spin_slowest_ns;

/* Polls cq until a completion comes (10 s at most). */
static struct gdx_xport_cqe spin_cqe(struct gdx_xport_cq *cq)
{
	uint64_t end = gdx_now_ns() + 10000000000ull, t0, t1;
	struct gdx_xport_cqe e;
	int n;

	spin_slowest_ns = 0;
	do {
		t0 = gdx_now_ns();
		n = gdx_xport_cq_poll(cq, &e, 1);
		t1 = gdx_now_ns();
		spin_slowest_ns = GDX_MAX(spin_slowest_ns, t1 - t0);
	} while (!n && t1 < end);
	assert_int_equal(n, 1);
	return e;
}

/* Answers request frame f on c's raw peer and waits for its completion. */
static void answer(const struct raw_conn *c, const struct frame *f, uint64_t wr_id)
{
	struct gdx_xport_cqe e;

	send_frame(c->fd, TF_RESP, f->id, 0, 0);
	e = next_cqe(c->cq);
	assert_int_equal(e.wr_id, wr_id);
	assert_int_equal(e.status, 0);
}

/*
 * The device (the test is skipped without one), n bytes of it at *a and,
 * unless b is NULL, at *b, and conn on it: the endpoint's copy agent stages
 * its device memory.
 */
static struct gdx_device *dev_conn_open(struct raw_conn *conn, size_t n, void **a, void **b)
{
	struct gdx_device *dev;

	if (gdx_device_open(NULL, &dev))
		skip();
	assert_int_equal(gdx_device_malloc(dev, n, a), 0);
	if (b)
		assert_int_equal(gdx_device_malloc(dev, n, b), 0);
	raw_open(conn, dev);
	return dev;
}

/* Closes conn, puts the knobs back to their defaults, frees dev_conn_open's device and memory. */
static void dev_conn_close(struct raw_conn *conn, struct gdx_device *dev, void *a, void *b)
{
	raw_close(conn);
	gdx_config_reset();
	gdx_device_free(dev, a);
	if (b)
		gdx_device_free(dev, b);
	gdx_device_close(dev);
}

/*
 * A post at an idle transmit side writes the socket from the posting thread:
 * a 4 KiB send at depth 1, and (zero-copy off) a 128 KiB one, which a
 * loopback socket's default buffers take unread, are counted as written by
 * the poster, none by the transmit thread.  A 16 MiB send the unread socket
 * cannot take is begun by the poster and finished by the transmit thread
 * (counted once, handed), in one piece.
 */
static void test_post_writes_socket(void **state)
{
	enum { MID = 128 << 10, BIG = 16 << 20 };
	unsigned char *buf = malloc(BIG);
	struct frame f;
	struct raw_conn conn;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "0"), 0);
	raw_open(&conn, NULL);

	t_fill(buf, 4096, 1);
	assert_int_equal(gdx_xport_post_send(conn.ep, buf, 4096, 1, 0), 0);
	assert_int_equal(tcp_counter("tx_direct"), 1);
	assert_int_equal(tcp_counter("tx_handed"), 0);
	f = recv_frame(conn.fd, 4096, 1);
	assert_int_equal(f.type, TF_SEND);
	answer(&conn, &f, 1);

	t_fill(buf, MID, 2);
	assert_int_equal(gdx_xport_post_send(conn.ep, buf, MID, 2, 0), 0);
	assert_int_equal(tcp_counter("tx_direct"), 2);
	assert_int_equal(tcp_counter("tx_handed"), 0);
	f = recv_frame(conn.fd, MID, 2);
	answer(&conn, &f, 2);

	t_fill(buf, BIG, 3);
	assert_int_equal(gdx_xport_post_send(conn.ep, buf, BIG, 3, 0), 0);
	/* the socket took what it could: the rest is the transmit thread's */
	f = recv_frame(conn.fd, BIG, 3);
	answer(&conn, &f, 3);
	assert_int_equal(tcp_counter("tx_direct"), 2);
	assert_int_equal(tcp_counter("tx_handed"), 1);

	raw_close(&conn);
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "1"), 0);
	free(buf);
}

/*
 * A small send of device memory posted at an idle transmit side is written
 * by the posting thread once its stage copy landed (it waits a moment for
 * it), not handed to the transmit thread: tx_direct goes up by one, tx_handed
 * not, and the bytes are the device buffer's.  The copy may be slow to land
 * on a busy machine (the poster then wakes the transmit thread, as before),
 * so a few tries.
 */
static void test_post_writes_device(void **state)
{
	enum { SZ = 4096 };
	static unsigned char want[SZ];
	struct gdx_device *dev;
	void *dtx;
	int done = 0;
	struct raw_conn conn;

	(void)state;
	dev = dev_conn_open(&conn, SZ, &dtx, NULL);
	for (unsigned i = 0; i < 50 && !done; i++) {
		uint64_t d0 = tcp_counter("tx_direct"), h0 = tcp_counter("tx_handed");
		struct frame f;

		t_fill(want, SZ, 1100 + i);
		assert_int_equal(gdx_memcpy(dev, dtx, want, SZ), 0);
		assert_int_equal(gdx_xport_post_send(conn.ep, dtx, SZ, 1200 + i, 0), 0);
		f = recv_frame(conn.fd, SZ, 1100 + i);
		assert_int_equal(f.type, TF_SEND);
		answer(&conn, &f, 1200 + i);
		done = tcp_counter("tx_direct") - d0 == 1 && tcp_counter("tx_handed") == h0;
	}
	assert_true(done);
	dev_conn_close(&conn, dev, dtx, NULL);
}

struct late_send {
	int fd;
	uint64_t id;
	size_t n, first;	/* payload bytes, and those sent with the header */
	unsigned seed;
	int ms;			/* before the header, and again before the rest */
};

static void *late_send_main(void *arg)
{
	struct late_send *ls = arg;
	unsigned char *p = malloc(ls->n);

	t_fill(p, ls->n, ls->seed);
	usleep((useconds_t)ls->ms * 1000);
	send_frame(ls->fd, TF_SEND, ls->id, ls->n, 0);
	assert_int_equal(send(ls->fd, p, ls->first, MSG_NOSIGNAL), (ssize_t)ls->first);
	if (ls->first < ls->n) {
		usleep((useconds_t)ls->ms * 1000);
		assert_int_equal(send(ls->fd, p + ls->first, ls->n - ls->first, MSG_NOSIGNAL),
				 (ssize_t)(ls->n - ls->first));
	}
	free(p);
	return NULL;
}

/*
 * Posts a host receive of ls->n bytes into rx (id wr_id), lets the receive
 * thread park, and has the raw peer send ls's message; returns once take
 * (next_cqe: sleeping, spin_cqe: polling) gave the receive's completion,
 * checked, with the bytes (want: room for the expected ones).
 */
static void late_message(const struct raw_conn *conn, struct late_send *ls, unsigned char *rx,
			 unsigned char *want, uint64_t wr_id,
			 struct gdx_xport_cqe (*take)(struct gdx_xport_cq *))
{
	struct gdx_xport_cqe e;
	pthread_t th;

	memset(rx, 0, ls->n);
	assert_int_equal(gdx_xport_post_recv(conn->ep, rx, ls->n, wr_id), 0);
	rx_let_park();
	pthread_create(&th, NULL, late_send_main, ls);
	e = take(conn->cq);
	pthread_join(th, NULL);
	assert_int_equal(e.wr_id, wr_id);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.len, ls->n);
	t_fill(want, ls->n, ls->seed);
	assert_memory_equal(rx, want, ls->n);
}

/*
 * A caller asleep in gdx_xport_cq_wait with a host receive posted reads the
 * peer's send itself: the message completes without the receive thread
 * (counted rx_waiter).  One whose payload stops half-way for longer than the
 * waiter waits is finished by the receive thread (rx_part), in one piece,
 * answered once.  The waiter takes the socket only from a receive thread
 * parked between frames, so each kind gets a few tries.
 */
static void test_waiter_receives(void **state)
{
	enum { N = 5, SZ = 64 << 10 };
	unsigned char *rx = malloc(SZ), *want = malloc(SZ);
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	for (int part = 0; part < 2; part++) {
		const char *ctr = part ? "rx_part" : "rx_waiter";
		uint64_t base = tcp_counter(ctr);

		for (int i = 0; i < N && tcp_counter(ctr) == base; i++) {
			unsigned seed = 10 * (unsigned)part + (unsigned)i;
			struct late_send ls = { .fd = conn.fd, .id = seed + 1, .n = SZ,
						.first = part ? SZ / 2 : SZ, .seed = seed,
						.ms = 30 };

			late_message(&conn, &ls, rx, want, seed, next_cqe);
			assert_int_equal(recv_resp(conn.fd, seed + 1).status, 0);
		}
		assert_true(tcp_counter(ctr) > base);
	}
	raw_close(&conn);
	free(rx);
	free(want);
}

struct burst {
	int fd;
	unsigned n;		/* sends of sz bytes, fill seed + i, ids 1..n */
	size_t sz;
	unsigned seed;
};

/* The sends of a burst, written back to back: they wait in the socket together. */
static void *burst_main(void *arg)
{
	struct burst *b = arg;
	unsigned char *p = malloc(b->sz);

	for (unsigned i = 0; i < b->n; i++) {
		t_fill(p, b->sz, b->seed + i);
		send_frame(b->fd, TF_SEND, i + 1, b->sz, 0);
		assert_int_equal(send(b->fd, p, b->sz, MSG_NOSIGNAL), (ssize_t)b->sz);
	}
	free(p);
	return NULL;
}

/*
 * A stream of large writes is answered a few at a time: the receive thread,
 * which reads each large frame's header on its own (the payloads skip its
 * buffer), answered every write alone whenever it owed just one, one
 * sendmsg a frame (at 64 KiB a quarter of its time on the H200).  Now what
 * is owed waits while frames are already there, and goes every RESP_BYTES
 * (128 KiB: every fourth 40 KiB write) or when input pauses: of 32 writes
 * written back to back, at most 24 answer writes (tx_writes; one each
 * before), every write answered, in order, and its bytes in place.
 */
static void test_writes_answered_together(void **state)
{
	enum { N = 32, SZ = 40 << 10 };
	unsigned char *dst = calloc(N, SZ), *src = malloc((size_t)N * (SZ + sizeof(struct frame)));
	struct gdx_xport_mr *mr;
	struct raw_conn conn;
	uint64_t base;
	size_t off = 0;

	(void)state;
	raw_open(&conn, NULL);
	assert_int_equal(gdx_xport_mr_reg(conn.ep, dst, (size_t)N * SZ,
					  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	for (unsigned i = 0; i < N; i++) {
		struct frame f = { .type = TF_WRITE, .id = i + 1, .len = SZ, .key = gdx_xport_mr_key(mr),
				   .raddr = gdx_xport_mr_addr(mr) + (uint64_t)i * SZ };

		memcpy(src + off, &f, sizeof(f));
		t_fill(src + off + sizeof(f), SZ, 800 + i);
		off += sizeof(f) + SZ;
	}
	base = tcp_counter("tx_writes");
	assert_int_equal(send(conn.fd, src, off, MSG_NOSIGNAL), (ssize_t)off);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(recv_resp(conn.fd, i + 1).status, 0);
	assert_true(tcp_counter("tx_writes") - base <= N * 3 / 4);
	for (unsigned i = 0; i < N; i++) {
		t_fill(src, SZ, 800 + i);
		assert_memory_equal(dst + (size_t)i * SZ, src, SZ);
	}
	gdx_xport_mr_dereg(mr);
	raw_close(&conn);
	free(src);
	free(dst);
}

struct frames_reader {
	int fd;
	unsigned n;
	size_t sz;
	unsigned seed;
	struct frame f[16];
};

/* Reads n sends of sz bytes, fills seed, seed + 1, ...: their frames in f. */
static void *frames_reader_main(void *arg)
{
	struct frames_reader *r = arg;

	for (unsigned i = 0; i < r->n; i++) {
		r->f[i] = recv_frame(r->fd, r->sz, r->seed + i);
		assert_int_equal(r->f[i].type, TF_SEND);
	}
	return NULL;
}

/*
 * Sends posted while another is on the wire unanswered are held for one
 * train (tcp_post), which a poll of the CQ sends: sixteen of 64 KiB go in one
 * write of 1 MiB, as a raw sender's, where trains of 256 KiB took four (a
 * fifth of the 64 KiB stream's bandwidth on the H200).  tx_writes counts
 * the writes.  The receive thread's timed wake may send what is held before
 * the poll does, and the socket may take less than the train (the transmit
 * thread sends the rest), so a few tries.  Every send's bytes arrive in
 * order and every one completes.
 */
static void test_held_sends_one_train(void **state)
{
	enum { N = 16, SZ = 64 << 10 };
	unsigned char *buf = malloc((size_t)N * SZ);
	struct raw_conn conn;
	int done = 0;

	(void)state;
	assert_non_null(buf);
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "0"), 0);
	raw_open(&conn, NULL);
	for (unsigned try = 0; try < 5 && !done; try++) {
		unsigned seed = 1000 + 100 * try;
		struct frames_reader r = { .fd = conn.fd, .n = N, .sz = SZ, .seed = seed + 1 };
		struct gdx_xport_cqe e;
		struct frame first;
		pthread_t th;
		uint64_t w0, posted;

		/* on the wire and unanswered: the posts after it are held */
		t_fill(buf, 4096, seed);
		assert_int_equal(gdx_xport_post_send(conn.ep, buf, 4096, seed, 0), 0);
		first = recv_frame(conn.fd, 4096, seed);
		for (unsigned i = 0; i < N; i++)
			t_fill(buf + (size_t)i * SZ, SZ, seed + 1 + i);
		w0 = tcp_counter("tx_writes");
		for (unsigned i = 0; i < N; i++)
			assert_int_equal(gdx_xport_post_send(conn.ep, buf + (size_t)i * SZ, SZ,
							     seed + 1 + i, 0), 0);
		posted = tcp_counter("tx_writes") - w0;
		pthread_create(&th, NULL, frames_reader_main, &r);
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
		pthread_join(th, NULL);
		done = !posted && tcp_counter("tx_writes") - w0 == 1;
		answer(&conn, &first, seed);
		for (unsigned i = 0; i < N; i++)
			answer(&conn, &r.f[i], seed + 1 + i);
	}
	assert_true(done);
	raw_close(&conn);
	assert_int_equal(gdx_config_set("xport.tcp_zerocopy", "1"), 0);
	free(buf);
}

/*
 * Large payloads go from the socket straight into their receives: of 16
 * sends of 64 KiB written back to back, a read for a header takes the
 * payload along into the endpoint's buffer, and copies it again from there,
 * only until a large one has been seen: then the reads for headers take a
 * page (GDX_RX_HEAD, common/sock.h).  Counted as
 * rx_buffered: before, every payload went through the buffer (1 MiB).  Then
 * a 1 KiB send after them arrives whole (its header read took part of it).
 */
static void test_big_payloads_direct(void **state)
{
	enum { N = 16, SZ = 64 << 10, SMALL = 1024 };
	struct burst b = { .n = N, .sz = SZ, .seed = 500 };
	unsigned char *rx = malloc((size_t)N * SZ), *want = malloc(SZ);
	uint64_t base;
	pthread_t th;
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	b.fd = conn.fd;
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(conn.ep, rx + (size_t)i * SZ, SZ, i), 0);
	base = tcp_counter("rx_buffered");
	pthread_create(&th, NULL, burst_main, &b);
	for (unsigned i = 0; i < N; i++) {
		struct gdx_xport_cqe e = next_cqe(conn.cq);

		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.len, SZ);
		t_fill(want, SZ, b.seed + i);
		assert_memory_equal(rx + (size_t)i * SZ, want, SZ);
		recv_resp(conn.fd, i + 1);
	}
	pthread_join(th, NULL);
	assert_true(tcp_counter("rx_buffered") - base <= SZ + N * 4096);
	/* a small payload after them, whole and through the buffer */
	b = (struct burst){ .fd = conn.fd, .n = 1, .sz = SMALL, .seed = 900 };
	assert_int_equal(gdx_xport_post_recv(conn.ep, rx, SMALL, 99), 0);
	burst_main(&b);
	{
		struct gdx_xport_cqe e = next_cqe(conn.cq);

		assert_int_equal(e.wr_id, 99);
		assert_int_equal(e.len, SMALL);
		t_fill(want, SMALL, 900);
		assert_memory_equal(rx, want, SMALL);
	}
	raw_close(&conn);
	free(rx);
	free(want);
}

struct late_raw {
	int fd;
	const void *p;
	size_t n;
	int ms;			/* before it is sent */
};

static void *late_raw_main(void *arg)
{
	struct late_raw *lr = arg;

	usleep((useconds_t)lr->ms * 1000);
	assert_int_equal(send(lr->fd, lr->p, lr->n, MSG_NOSIGNAL), (ssize_t)lr->n);
	return NULL;
}

/*
 * A caller asleep in gdx_xport_cq_wait with a receive of device memory
 * posted (the endpoint's device, whose copy agent serves the receive lane)
 * reads the peer's send itself: it receives the payload into the lane's
 * ring and posts the copy, and completes the receive once the copy landed,
 * without a hand-off to the receive thread (rx_waiter_dev up, rx_dev not).
 * Three cases, each a few tries (a take needs a parked receive thread):
 *  - a 4 KiB send;
 *  - a 64 KiB one whose payload stops a few bytes past half-way for 30 ms:
 *    the waiter posts what came in whole 64-byte units and leaves the rest
 *    to the receive thread, which finishes it through the lane behind those
 *    pieces (rx_part), the bytes whole, every copy 16-byte aligned (the
 *    emulated agent faults on others: emulated.agent_aligned);
 *  - a 4 KiB send into device memory then one into host memory in one
 *    write, the device copies slowed to 2 ms: the host receive completes
 *    second (its completion queued behind the device one's, rule 2), and
 *    the device bytes are in place when the first completes.
 * Every message's response comes once, in order.
 */
static void test_waiter_receives_device(void **state)
{
	enum { SZ = 4096, BIG = 64 << 10, TRIES = 10 };
	static unsigned char msg[2 * (sizeof(struct frame) + SZ)], got[BIG], want[BIG], hrx[SZ];
	struct gdx_device *dev;
	void *drx;
	struct raw_conn conn;

	(void)state;
	/* read when the agent's workers start */
	assert_int_equal(gdx_config_set("emulated.agent_aligned", "1"), 0);
	dev = dev_conn_open(&conn, BIG, &drx, NULL);
	/* the first half of the 64 KiB payload goes at once, not when the header is acked */
	assert_int_equal(setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)),
			 0);
	for (int c = 0; c < 3; c++) {
		uint64_t w0 = tcp_counter("rx_waiter_dev"), d0, p0;
		int done = 0;

		if (c == 2)
			assert_int_equal(gdx_config_set("emulated.agent_copy_us", "2000"), 0);
		for (unsigned i = 0; i < TRIES && !done; i++) {
			unsigned seed = 500 + 10 * (unsigned)c + i;
			uint64_t id = 1000 * (uint64_t)c + i;
			size_t n = c == 1 ? BIG : SZ;
			struct late_send ls = { .fd = conn.fd, .id = id, .n = n, .first = n / 2 + 5,
						.seed = seed, .ms = 30 };
			struct frame *f = (struct frame *)msg;
			struct late_raw lr = { .fd = conn.fd, .p = msg, .n = sizeof(*f) + SZ,
					       .ms = 30 };
			struct gdx_xport_cqe e;
			pthread_t th;

			d0 = tcp_counter("rx_dev");
			p0 = tcp_counter("rx_part");
			assert_int_equal(gdx_xport_post_recv(conn.ep, drx, n, 1), 0);
			if (c == 1) {
				rx_let_park();
				pthread_create(&th, NULL, late_send_main, &ls);
			} else {
				/* one write: the header alone would leave the payload to Nagle */
				f[0] = (struct frame){ .type = TF_SEND, .id = id, .len = SZ };
				t_fill(f + 1, SZ, seed);
				if (c == 2) {
					assert_int_equal(gdx_xport_post_recv(conn.ep, hrx, SZ, 2),
							 0);
					f = (struct frame *)(msg + lr.n);
					f[0] = (struct frame){ .type = TF_SEND, .id = id + 100,
							       .len = SZ };
					t_fill(f + 1, SZ, seed + 1);
					lr.n = sizeof(msg);
				}
				rx_let_park();
				pthread_create(&th, NULL, late_raw_main, &lr);
			}
			e = next_cqe(conn.cq);
			/* the host message's bytes are not looked at before its receive completed */
			assert_int_equal(e.wr_id, 1);
			assert_int_equal(e.status, 0);
			assert_int_equal(e.len, n);
			assert_int_equal(gdx_memcpy(dev, got, drx, n), 0);
			t_fill(want, n, seed);
			assert_memory_equal(got, want, n);
			if (c == 2) {
				e = next_cqe(conn.cq);
				assert_int_equal(e.wr_id, 2);
				assert_int_equal(e.status, 0);
				t_fill(want, SZ, seed + 1);
				assert_memory_equal(hrx, want, SZ);
			}
			pthread_join(th, NULL);
			assert_int_equal(recv_resp(conn.fd, id).status, 0);
			if (c == 2)
				recv_resp(conn.fd, id + 100);
			/* taken by the waiter, not handed to the receive thread */
			done = tcp_counter("rx_waiter_dev") > w0 && tcp_counter("rx_dev") == d0 &&
			       (c != 1 || tcp_counter("rx_part") > p0);
		}
		assert_true(done);
	}
	dev_conn_close(&conn, dev, drx, NULL);
}

/*
 * A device send awaiting its answer does not keep a sleeper from the socket:
 * a device payload never goes MSG_ZEROCOPY, so no notification of it can wake
 * the sleeper for nothing.  The raw peer reads a 4 KiB send of device memory
 * and leaves it unanswered, then sends a message for a host receive while the
 * caller sleeps: the waiter takes the socket (rx_takes + 1) and reads it
 * itself (rx_waiter + 1).  Before, any request sent by the transmit thread
 * counted as one that may have gone zero-copy, and no sleeper took the
 * socket while it was on the wire: a device echo's sender never read the
 * next message itself.  A few tries (a take needs a parked receive thread).
 */
static void test_waiter_behind_device_send(void **state)
{
	enum { SZ = 4096 };
	static unsigned char msg[sizeof(struct frame) + SZ], rx[SZ], want[SZ];
	struct gdx_device *dev;
	void *dtx;
	int done = 0;
	struct raw_conn conn;

	(void)state;
	dev = dev_conn_open(&conn, SZ, &dtx, NULL);
	for (unsigned i = 0; i < 10 && !done; i++) {
		struct late_raw lr = { .fd = conn.fd, .p = msg, .n = sizeof(msg), .ms = 30 };
		struct frame *f = (struct frame *)msg, sf;
		uint64_t t0, w0;
		struct gdx_xport_cqe e;
		pthread_t th;

		t_fill(want, SZ, 800 + i);
		assert_int_equal(gdx_memcpy(dev, dtx, want, SZ), 0);
		assert_int_equal(gdx_xport_post_send(conn.ep, dtx, SZ, 900 + i, 0), 0);
		sf = recv_frame(conn.fd, SZ, 800 + i);
		assert_int_equal(sf.type, TF_SEND);
		assert_int_equal(gdx_xport_post_recv(conn.ep, rx, SZ, i), 0);
		*f = (struct frame){ .type = TF_SEND, .id = 700 + i, .len = SZ };
		t_fill(f + 1, SZ, 700 + i);
		t0 = tcp_counter("rx_takes");
		w0 = tcp_counter("rx_waiter");
		rx_let_park();
		pthread_create(&th, NULL, late_raw_main, &lr);
		e = next_cqe(conn.cq);
		pthread_join(th, NULL);
		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		assert_memory_equal(rx, f + 1, SZ);
		done = tcp_counter("rx_takes") > t0 && tcp_counter("rx_waiter") > w0;
		recv_resp(conn.fd, 700 + i);
		answer(&conn, &sf, 900 + i);
	}
	assert_true(done);
	dev_conn_close(&conn, dev, dtx, NULL);
}

struct answer_then_echo {
	int fd;
	unsigned seed;
};

/* Reads a 4 KiB send, answers it, and 30 ms later sends it back. */
static void *answer_then_echo_main(void *arg)
{
	struct answer_then_echo *ae = arg;
	unsigned char p[4096];
	struct frame f = recv_frame(ae->fd, sizeof(p), ae->seed);

	usleep(30000);
	send_frame(ae->fd, TF_RESP, f.id, 0, 0);
	usleep(30000);
	t_fill(p, sizeof(p), ae->seed);
	send_frame(ae->fd, TF_SEND, 100 + ae->seed, sizeof(p), 0);
	assert_int_equal(send(ae->fd, p, sizeof(p), MSG_NOSIGNAL), (ssize_t)sizeof(p));
	return NULL;
}

/*
 * A send ping-pong's wait: the answer to an unsignaled send wakes the caller
 * for no completion, then the echo comes.  The waiter keeps the socket
 * between the two sleeps of its one gdx_xport_cq_wait: both frames completed
 * by it (rx_waiter + 2) for one take of the socket (rx_takes + 1), not one per
 * sleep.  A take needs a parked receive thread, so a few tries.
 */
static void test_waiter_keeps_socket(void **state)
{
	struct gdx_xport_cqe e;
	unsigned char tx[4096], rx[4096], want[4096];
	uint64_t done = 0, takes = 0;
	struct raw_conn conn;

	(void)state;
	raw_open(&conn, NULL);
	for (unsigned i = 0; i < 5 && done != 2; i++) {
		struct answer_then_echo ae = { .fd = conn.fd, .seed = 40 + i };
		uint64_t w0 = tcp_counter("rx_waiter"), t0 = tcp_counter("rx_takes");
		pthread_t th;

		assert_int_equal(gdx_xport_post_recv(conn.ep, rx, sizeof(rx), i), 0);
		t_fill(tx, sizeof(tx), ae.seed);
		assert_int_equal(gdx_xport_post_send(conn.ep, tx, sizeof(tx), 100 + i,
						     GDX_XPORT_UNSIGNALED), 0);
		rx_let_park();
		pthread_create(&th, NULL, answer_then_echo_main, &ae);
		/* one wait: nothing completes before the echo */
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 1);
		pthread_join(th, NULL);
		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		t_fill(want, sizeof(want), ae.seed);
		assert_memory_equal(rx, want, sizeof(want));
		done = tcp_counter("rx_waiter") - w0;
		takes = tcp_counter("rx_takes") - t0;
		/* the response the waiter owed the echo */
		recv_resp(conn.fd, 100 + ae.seed);
	}
	assert_int_equal(done, 2);
	assert_int_equal(takes, 1);
	raw_close(&conn);
}

/* Sends a send frame and its payload, fill `seed`, in one write 30 ms from now. */
static void *send_later_main(void *arg)
{
	const struct late_send *ls = arg;
	struct frame *f = calloc(1, sizeof(*f) + ls->n);

	*f = (struct frame){ .type = TF_SEND, .id = ls->id, .len = ls->n };
	t_fill(f + 1, ls->n, ls->seed);
	usleep(30000);
	assert_int_equal(send(ls->fd, f, sizeof(*f) + ls->n, MSG_NOSIGNAL),
			 (ssize_t)(sizeof(*f) + ls->n));
	free(f);
	return NULL;
}

/*
 * The response a CQ waiter owes for a send it received waits for the
 * caller's next post, which carries it in its own write (resp_rode + 1,
 * tx_writes + 1 for both frames): a send answered by a send costs the peer
 * one write and one wake-up, as a raw request and response do.  The wait
 * lends the socket (rx_gives + 0 when it returns, and after the post), and
 * the caller's next wait takes it over and reads the answer (rx_takes + 1
 * for both waits, rx_waiter + 2; it gives the socket back when it returns
 * with nothing held).  Without a
 * post it goes at a poll that finds the CQ empty (on the socket when that
 * poll returns), and with no poll either, from the receive thread
 * (xport.tcp_resp_hold_ms): else it never would.  The waiter takes the socket only
 * from a receive thread parked between frames, and the response rides only
 * if the post comes before that timeout (hold_ms here: under TSan a post
 * takes longer than the default 1 ms), so each case gets a few tries.
 * hows: the cases run (1: the post only).  A send of over 64 KiB carries
 * the response too, in the write that begins it (the socket may not take
 * all of it in that one: tx_writes is not counted then).  The timeout also
 * ends the lent socket: a 256 KiB send read and checked by the peer under
 * TSan on a loaded machine takes over 100 ms, and the answer's wait then
 * finds the socket back with the receive thread.
 */
static void waiter_resp_rides(size_t sz, int hows, const char *hold_ms)
{
	unsigned char *rx = malloc(sz), *tx = malloc(sz), *want = malloc(sz);
	struct raw_conn conn;

	assert_non_null(rx);
	assert_non_null(tx);
	assert_non_null(want);
	assert_int_equal(gdx_config_set("xport.tcp_resp_hold_ms", hold_ms), 0);
	/* the sleeper's lend, asserted to the take: polls that read (tcp_poll_read) off */
	assert_int_equal(gdx_config_set("xport.tcp_poll_read", "0"), 0);
	raw_open(&conn, NULL);
	for (int how = 0; how < hows; how++) {
		int done = 0;

		for (unsigned i = 0; i < 10 && !done; i++) {
			unsigned seed = 60 + 10 * (unsigned)how + i;
			struct late_send ls = { .fd = conn.fd, .id = seed, .n = sz, .seed = seed };
			uint64_t t0 = tcp_counter("rx_takes"), w0 = tcp_counter("rx_waiter"), r0, n0;
			uint64_t g0 = tcp_counter("rx_gives");
			struct pollfd pf = { .fd = conn.fd, .events = POLLIN };
			struct gdx_xport_cqe e;
			struct frame f;
			pthread_t th;
			int took, lent;

			assert_int_equal(gdx_xport_post_recv(conn.ep, rx, sz, seed), 0);
			rx_let_park();
			pthread_create(&th, NULL, send_later_main, &ls);
			assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
			pthread_join(th, NULL);
			took = tcp_counter("rx_takes") - t0 == 1 && tcp_counter("rx_waiter") - w0 == 1;
			/* the socket is lent, not given back, until the post */
			lent = tcp_counter("rx_gives") == g0;
			r0 = tcp_counter("resp_rode");
			n0 = tcp_counter("tx_writes");
			assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 1);
			assert_int_equal(e.wr_id, seed);
			assert_int_equal(e.status, 0);
			t_fill(want, sz, seed);
			assert_memory_equal(rx, want, sz);
			if (how == 0) {
				t_fill(tx, sz, seed + 1000);
				assert_int_equal(gdx_xport_post_send(conn.ep, tx, sz, seed + 1000,
								     0), 0);
				done = took && lent && tcp_counter("resp_rode") - r0 == 1 &&
				       (sz > (64 << 10) || tcp_counter("tx_writes") - n0 == 1) &&
				       tcp_counter("rx_gives") == g0;
			} else if (how == 1) {
				assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
				if (took) {
					assert_int_equal(poll(&pf, 1, 0), 1);
					done = 1;
				}
			} else {
				assert_int_equal(poll(&pf, 1, 5000), 1);
				done = took;
			}
			if (how == 0) {
				f = recv_resp_and_send(conn.fd, seed, sz, seed + 1000);
				answer(&conn, &f, seed + 1000);
				/*
				 * That wait took the lent socket over, no second
				 * take, and read the answer itself (rx_waiter + 2).
				 */
				done = done && tcp_counter("rx_takes") - t0 == 1 &&
				       tcp_counter("rx_gives") - g0 == 1 &&
				       tcp_counter("rx_waiter") - w0 == 2;
			} else {
				assert_int_equal(recv_resp(conn.fd, seed).status, 0);
			}
		}
		assert_true(done);
	}
	raw_close(&conn);
	assert_int_equal(gdx_config_set("xport.tcp_resp_hold_ms", "1"), 0);
	assert_int_equal(gdx_config_set("xport.tcp_poll_read", "1"), 0);
	free(rx);
	free(tx);
	free(want);
}

static void test_waiter_resp_rides(void **state)
{
	(void)state;
	waiter_resp_rides(4096, 3, "100");
}

/* Before, the held response went alone, a write ahead of the large send's. */
static void test_waiter_resp_rides_big_send(void **state)
{
	(void)state;
	waiter_resp_rides(256 << 10, 1, "1000");
}

/*
 * The receive thread holds the lone response to a send it received (into
 * device memory here: always the receive thread's) for the caller's post,
 * and a post of device memory, which the transmit thread sends once its
 * copy into the stage ring has landed, carries it in that write: tx_writes
 * goes up by one for both frames, where the response went alone before.
 * The caller posts 200 us after the completion, when the receive thread
 * has parked (a response it did not hold has gone alone by then), and the
 * copies are slowed (500 us) so that a held response not waiting for its
 * frame's copy goes alone too; a few tries, as the receive thread may not
 * have parked by then on a busy machine.
 */
static void test_held_resp_rides_device(void **state)
{
	enum { SZ = 4096 };
	static unsigned char msg[sizeof(struct frame) + SZ], got[SZ], want[SZ];
	struct gdx_device *dev;
	void *drx, *dtx;
	int done = 0;
	struct raw_conn conn;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "500"), 0);
	/* the post must come within the hold, also on a sanitizer's slow build */
	assert_int_equal(gdx_config_set("xport.tcp_resp_hold_ms", "100"), 0);
	dev = dev_conn_open(&conn, SZ, &drx, &dtx);
	for (unsigned i = 0; i < 10 && !done; i++) {
		struct frame *f = (struct frame *)msg, r;
		struct gdx_xport_cqe e;
		uint64_t n0;

		assert_int_equal(gdx_xport_post_recv(conn.ep, drx, SZ, i), 0);
		t_fill(want, SZ, 200 + i);
		assert_int_equal(gdx_memcpy(dev, dtx, want, SZ), 0);
		*f = (struct frame){ .type = TF_SEND, .id = 300 + i, .len = SZ };
		t_fill(f + 1, SZ, 100 + i);
		n0 = tcp_counter("tx_writes");
		assert_int_equal(send(conn.fd, msg, sizeof(msg), MSG_NOSIGNAL),
				 (ssize_t)sizeof(msg));
		e = next_cqe(conn.cq);
		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		assert_int_equal(gdx_memcpy(dev, got, drx, SZ), 0);
		assert_memory_equal(got, f + 1, SZ);
		/* long enough for the receive thread to have parked: it held the response */
		usleep(200);
		assert_int_equal(gdx_xport_post_send(conn.ep, dtx, SZ, 400 + i, 0), 0);
		r = recv_resp_and_send(conn.fd, 300 + i, SZ, 200 + i);
		/* after the answer: the transmit thread counts its write once sendmsg returned */
		answer(&conn, &r, 400 + i);
		done = tcp_counter("tx_writes") - n0 == 1;
	}
	assert_true(done);
	dev_conn_close(&conn, dev, drx, dtx);
}

/*
 * A wait that received a send into device memory returns with its response
 * held and the socket lent; the caller posts the answer, a device send whose
 * stage copy is slow (2 ms: the transmit thread sends it, with the response),
 * and polls the empty CQ: the socket stays lent (rx_gives unchanged), as the
 * answer was posted, and the caller's next wait takes it over without a move.
 * Before, that poll gave the socket back (two epoll_ctl), and the receive
 * thread read the next message.  A few tries (a take needs a parked receive
 * thread).
 */
static void test_lent_over_device_answer(void **state)
{
	enum { SZ = 4096 };
	static unsigned char msg[sizeof(struct frame) + SZ], want[SZ];
	struct gdx_device *dev;
	void *drx, *dtx;
	int done = 0;
	struct raw_conn conn;

	(void)state;
	/* the post comes within the hold, also on a sanitizer's slow build */
	assert_int_equal(gdx_config_set("xport.tcp_resp_hold_ms", "100"), 0);
	/* the lend's moves, counted: polls that read (tcp_poll_read) off */
	assert_int_equal(gdx_config_set("xport.tcp_poll_read", "0"), 0);
	dev = dev_conn_open(&conn, SZ, &drx, &dtx);
	for (unsigned i = 0; i < 10 && !done; i++) {
		struct late_raw lr = { .fd = conn.fd, .p = msg, .n = sizeof(msg), .ms = 30 };
		struct frame *f = (struct frame *)msg, r;
		struct gdx_xport_cqe e;
		uint64_t w0, g0, t0;
		pthread_t th;
		int lent;

		assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
		assert_int_equal(gdx_xport_post_recv(conn.ep, drx, SZ, i), 0);
		*f = (struct frame){ .type = TF_SEND, .id = 1300 + i, .len = SZ };
		t_fill(f + 1, SZ, 1300 + i);
		w0 = tcp_counter("rx_waiter_dev");
		rx_let_park();
		pthread_create(&th, NULL, late_raw_main, &lr);
		e = next_cqe(conn.cq);
		pthread_join(th, NULL);
		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		g0 = tcp_counter("rx_gives");
		assert_int_equal(gdx_config_set("emulated.agent_copy_us", "2000"), 0);
		t_fill(want, SZ, 1400 + i);
		assert_int_equal(gdx_memcpy(dev, dtx, want, SZ), 0);
		assert_int_equal(gdx_xport_post_send(conn.ep, dtx, SZ, 1400 + i, 0), 0);
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
		/* the waiter received it and lent the socket, and the poll left it so */
		lent = tcp_counter("rx_waiter_dev") > w0 && tcp_counter("rx_gives") == g0;
		t0 = tcp_counter("rx_takes");
		r = recv_resp_and_send(conn.fd, 1300 + i, SZ, 1400 + i);
		/* its wait reads the answer on the socket lent to it, taken over */
		answer(&conn, &r, 1400 + i);
		done = lent && tcp_counter("rx_takes") == t0;
	}
	assert_true(done);
	dev_conn_close(&conn, dev, drx, dtx);
	assert_int_equal(gdx_config_set("xport.tcp_poll_read", "1"), 0);
}

/*
 * A socket lent by a wait that returned with a response held (the caller
 * neither posts, polls nor waits after) still serves the peer: the receive
 * thread's timed park sends the response and takes the socket back within
 * xport.tcp_resp_hold_ms, and a read request of the peer arriving afterwards is
 * answered.  Without the take-back the socket stayed in the CQ's set with
 * nobody reading it and the read was never answered.  The hold is 100 ms here:
 * a round counts where the wait took the socket and nothing gave it back yet,
 * read after the wait, which under a sanitizer on a busy machine can come
 * later than the default 1 ms (ten rounds then all missed it).
 */
static void test_lent_socket_serves_peer(void **state)
{
	enum { SZ = 4096, RN = 64 };
	static unsigned char rx[SZ], region[RN], got[RN];
	struct gdx_xport_mr *mr;
	int done = 0;
	struct raw_conn conn;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_resp_hold_ms", "100"), 0);
	raw_open(&conn, NULL);
	t_fill(region, RN, 7);
	assert_int_equal(gdx_xport_mr_reg(conn.ep, region, RN, GDX_XPORT_ACCESS_REMOTE_READ, &mr),
			 0);
	for (unsigned i = 0; i < 10 && !done; i++) {
		struct late_send ls = { .fd = conn.fd, .id = 500 + i, .n = SZ, .seed = 500 + i };
		uint64_t t0 = tcp_counter("rx_takes"), g0 = tcp_counter("rx_gives");
		struct pollfd pf = { .fd = conn.fd, .events = POLLIN };
		struct gdx_xport_cqe e;
		struct frame f;
		pthread_t th;

		assert_int_equal(gdx_xport_post_recv(conn.ep, rx, SZ, i), 0);
		rx_let_park();
		pthread_create(&th, NULL, send_later_main, &ls);
		assert_int_equal(gdx_xport_cq_wait(conn.cq, 10000), 1);
		pthread_join(th, NULL);
		done = tcp_counter("rx_takes") - t0 == 1 && tcp_counter("rx_gives") == g0;
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 1);
		assert_int_equal(e.wr_id, i);
		assert_int_equal(e.status, 0);
		/* no post, no poll, no wait from here */
		assert_int_equal(poll(&pf, 1, 5000), 1);
		recv_resp(conn.fd, 500 + i);
		f = (struct frame){ .type = TF_READ, .id = 600 + i, .raddr = gdx_xport_mr_addr(mr),
				    .key = gdx_xport_mr_key(mr), .len = RN };
		assert_int_equal(send(conn.fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
		assert_int_equal(poll(&pf, 1, 5000), 1);
		assert_int_equal(recv(conn.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
		assert_int_equal(f.type, TF_READ_RESP);
		assert_int_equal(f.id, 600 + i);
		assert_int_equal(f.status, 0);
		assert_int_equal(f.len, RN);
		assert_int_equal(recv(conn.fd, got, RN, MSG_WAITALL), RN);
		assert_memory_equal(got, region, RN);
	}
	assert_true(done);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	raw_close(&conn);
	gdx_config_reset();
}

/* An argument: run only the tests whose names match it (cmocka's filter, * a wildcard). */
/*
 * The kept ring starts over at its beginning once it is empty.  With a
 * 64 KiB ring, a 20 KiB message kept and handed to its device receive leaves
 * the ring empty 20 KiB in; a 50 KiB message kept next goes into the ring
 * (kept_ring), not to host memory (kept_host) for want of room past the end
 * of the last one.  Both land whole, flagged as having come first.
 */
/*
 * With a receive posted, an empty poll lends conn's socket; then the polls
 * stop: the receive thread takes it back (rx_gives) and alone receives the
 * next send, and answers it without any poll or wait (rx_waiter stays).
 */
static void polls_stop(const struct raw_conn *conn, unsigned char *rx, unsigned char *want,
		       size_t sz)
{
	struct late_send ls = { .fd = conn->fd, .id = 1600, .n = sz, .first = sz, .seed = 1600 };
	uint64_t w0 = tcp_counter("rx_waiter"), g0 = tcp_counter("rx_gives");
	struct gdx_xport_cqe e;
	pthread_t th;

	memset(rx, 0, sz);
	assert_int_equal(gdx_xport_post_recv(conn->ep, rx, sz, 1600), 0);
	for (int tries = 0; tries < 100 && tcp_counter("rx_gives") == g0; tries++) {
		uint64_t t0 = tcp_counter("rx_takes");

		rx_let_park();
		assert_int_equal(gdx_xport_cq_poll(conn->cq, &e, 1), 0);
		if (tcp_counter("rx_takes") == t0)
			continue;	/* not taken: the thread was not parked */
		for (int ms = 0; ms < 2000 && tcp_counter("rx_gives") == g0; ms++)
			usleep(1000);
	}
	assert_true(tcp_counter("rx_gives") > g0);
	pthread_create(&th, NULL, late_send_main, &ls);
	pthread_join(th, NULL);
	assert_int_equal(recv_resp(conn->fd, 1600).status, 0);
	e = spin_cqe(conn->cq);
	assert_int_equal(e.wr_id, 1600);
	t_fill(want, sz, 1600);
	assert_memory_equal(rx, want, sz);
	assert_int_equal(tcp_counter("rx_waiter"), w0);
}

/*
 * A caller spinning on gdx_xport_cq_poll with a host receive posted reads the
 * peer's send itself (xport.tcp_poll_read): the message completes without the
 * receive thread's wake-up and hand-off (rx_waiter counts it), and the next
 * empty poll sends the response held for it.  Once the polls stop, the lent
 * socket goes back to the receive thread within xport.tcp_resp_hold_ms
 * (rx_gives), which then serves the peer alone.  With the knob off the
 * receive thread completes every message (rx_waiter stays).  A take needs a
 * parked receive thread: a few tries each.
 */
static void test_poller_receives(void **state)
{
	/* whole segments: the raw peer's Nagle holds a short payload behind its header */
	enum { SZ = 64 << 10, N = 5 };
	unsigned char *rx = malloc(SZ), *want = malloc(SZ);

	(void)state;
	assert_non_null(rx);
	assert_non_null(want);
	for (int on = 1; on >= 0; on--) {
		uint64_t base = tcp_counter("rx_waiter");
		struct gdx_xport_cqe e;
		struct raw_conn conn;
		int counted = 0;

		/* read by the endpoint when it starts */
		assert_int_equal(gdx_config_set("xport.tcp_poll_read", on ? "1" : "0"), 0);
		raw_open(&conn, NULL);
		for (unsigned i = 0; i < N && !counted; i++) {
			unsigned seed = 1500 + 10 * (unsigned)on + i;
			struct late_send ls = { .fd = conn.fd, .id = seed, .n = SZ, .first = SZ,
						.seed = seed, .ms = 20 };
			uint64_t w0 = tcp_counter("rx_waiter");

			late_message(&conn, &ls, rx, want, seed, spin_cqe);
			/* nothing posted: the next poll sends the held response */
			assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
			assert_int_equal(recv_resp(conn.fd, seed).status, 0);
			counted = tcp_counter("rx_waiter") - w0 == 1;
		}
		if (on) {
			assert_true(counted);
			polls_stop(&conn, rx, want, SZ);
		} else {
			assert_int_equal(tcp_counter("rx_waiter"), base);
		}
		raw_close(&conn);
	}
	assert_int_equal(gdx_config_set("xport.tcp_poll_read", "1"), 0);
	free(rx);
	free(want);
}

/*
 * A poll does not block: a payload that stops half-way for 50 ms is begun by
 * a poll and finished by the receive thread (rx_part), no poll taking more
 * than a few milliseconds (W_PART_MS, 2 ms, in all); and a receive of device
 * memory is left to the receive thread (rx_dev), whose copies a poll would
 * otherwise wait for (rx_waiter_dev stays).  A few tries each: a take needs a
 * parked receive thread.
 */
static void test_poller_bounded(void **state)
{
	enum { SZ = 64 << 10 };
	unsigned char *rx = malloc(SZ), *want = malloc(SZ);
	struct gdx_device *dev;
	struct raw_conn conn;
	void *drx;
	int done = 0;

	(void)state;
	assert_non_null(rx);
	assert_non_null(want);
	raw_open(&conn, NULL);
	for (unsigned i = 0; i < 5 && !done; i++) {
		struct late_send ls = { .fd = conn.fd, .id = 1800 + i, .n = SZ, .first = SZ / 2,
					.seed = 1800 + i, .ms = 50 };
		uint64_t p0 = tcp_counter("rx_part");

		late_message(&conn, &ls, rx, want, 1800 + i, spin_cqe);
		/* well under the stall, with room for a loaded machine */
		assert_true(spin_slowest_ns < 25000000);
		assert_int_equal(recv_resp(conn.fd, 1800 + i).status, 0);
		done = tcp_counter("rx_part") > p0;
	}
	assert_true(done);
	raw_close(&conn);

	done = 0;
	dev = dev_conn_open(&conn, SZ, &drx, NULL);
	/* the payload goes at once, not when the header is acked */
	assert_int_equal(setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)),
			 0);
	for (unsigned i = 0; i < 5 && !done; i++) {
		struct late_send ls = { .fd = conn.fd, .id = 1900 + i, .n = 4096, .first = 4096,
					.seed = 1900 + i, .ms = 20 };
		uint64_t w0 = tcp_counter("rx_waiter_dev"), d0 = tcp_counter("rx_dev");
		struct gdx_xport_cqe e;
		pthread_t th;

		assert_int_equal(gdx_xport_post_recv(conn.ep, drx, 4096, 1900 + i), 0);
		rx_let_park();
		pthread_create(&th, NULL, late_send_main, &ls);
		e = spin_cqe(conn.cq);
		pthread_join(th, NULL);
		assert_int_equal(e.wr_id, 1900 + i);
		assert_int_equal(e.status, 0);
		assert_int_equal(gdx_memcpy(dev, rx, drx, 4096), 0);
		t_fill(want, 4096, 1900 + i);
		assert_memory_equal(rx, want, 4096);
		assert_int_equal(tcp_counter("rx_waiter_dev"), w0);
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
		assert_int_equal(recv_resp(conn.fd, 1900 + i).status, 0);
		done = tcp_counter("rx_dev") > d0;
	}
	assert_true(done);
	dev_conn_close(&conn, dev, drx, NULL);
	free(rx);
	free(want);
}

/*
 * On a CQ of more endpoints than a poll reads for (POLL_READ_EPS in cq.c,
 * 4), a spinning caller leaves the reading to the receive threads: a read of
 * each endpoint per poll would cost more than their hand-offs.
 */
static void test_poller_many_endpoints(void **state)
{
	enum { SZ = 64 << 10, EPS = 5 };
	unsigned char *rx = malloc(SZ), *want = malloc(SZ);
	struct gdx_xport_ep *eps[EPS];
	int fds[EPS];
	struct raw_conn conn;
	uint64_t base = tcp_counter("rx_waiter");

	(void)state;
	assert_non_null(rx);
	assert_non_null(want);
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &conn.l), 0);
	assert_int_equal(gdx_xport_cq_create(&conn.cq), 0);
	for (int i = 0; i < EPS; i++)
		eps[i] = accept_raw(conn.l, conn.cq, &fds[i]);
	conn.ep = eps[0];
	conn.fd = fds[0];
	for (unsigned i = 0; i < 3; i++) {
		struct late_send ls = { .fd = conn.fd, .id = 1700 + i, .n = SZ, .first = SZ,
					.seed = 1700 + i, .ms = 20 };
		struct gdx_xport_cqe e;

		late_message(&conn, &ls, rx, want, 1700 + i, spin_cqe);
		assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
		assert_int_equal(recv_resp(conn.fd, 1700 + i).status, 0);
	}
	assert_int_equal(tcp_counter("rx_waiter"), base);
	for (int i = 0; i < EPS; i++) {
		close(fds[i]);
		gdx_xport_ep_destroy(eps[i]);
	}
	gdx_xport_listener_close(conn.l);
	assert_int_equal(gdx_xport_cq_destroy(conn.cq), 0);
	free(rx);
	free(want);
}

static void test_kept_ring_starts_over(void **state)
{
	enum { RING = 64 << 10, FIRST = 4 << 10 };
	static const size_t sz[2] = { 20 << 10, 50 << 10 };
	static unsigned char msg[RING], got[RING], want[RING];
	struct gdx_xport_cqe e;
	struct gdx_device *dev;
	struct raw_conn conn;
	uint64_t ring0, host0;
	void *drx;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_kept_ring", "64k"), 0);
	dev = dev_conn_open(&conn, RING, &drx, NULL);
	/* a device receive first: the copy agent starts, and the kept ring */
	assert_int_equal(gdx_xport_post_recv(conn.ep, drx, RING, 1), 0);
	t_fill(msg, FIRST, 70);
	send_frame(conn.fd, TF_SEND, 1, FIRST, 0);
	assert_int_equal(send(conn.fd, msg, FIRST, MSG_NOSIGNAL), FIRST);
	e = next_cqe(conn.cq);
	assert_int_equal(e.status, 0);
	assert_int_equal(recv_resp(conn.fd, 1).status, 0);
	ring0 = tcp_counter("kept_ring");
	host0 = tcp_counter("kept_host");
	for (int i = 0; i < 2; i++) {
		uint64_t id = 2 + (uint64_t)i;

		t_fill(msg, sz[i], 71 + (unsigned)i);
		send_frame(conn.fd, TF_SEND, id, sz[i], 0);
		assert_int_equal(send(conn.fd, msg, sz[i], MSG_NOSIGNAL), (ssize_t)sz[i]);
		/* answered: kept, no receive being posted */
		assert_int_equal(recv_resp(conn.fd, id).status, 0);
		assert_int_equal(gdx_xport_post_recv(conn.ep, drx, RING, 10 + id), 0);
		e = next_cqe(conn.cq);
		assert_int_equal(e.wr_id, 10 + id);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.len, sz[i]);
		assert_true(e.flags & GDX_XPORT_CQE_UNEXPECTED);
		assert_int_equal(gdx_memcpy(dev, got, drx, sz[i]), 0);
		t_fill(want, sz[i], 71 + (unsigned)i);
		assert_memory_equal(got, want, sz[i]);
	}
	assert_int_equal(tcp_counter("kept_ring") - ring0, 2);
	assert_int_equal(tcp_counter("kept_host") - host0, 0);
	dev_conn_close(&conn, dev, drx, NULL);
}

struct two_sends {
	int fd;
	const unsigned char *p1, *p2;	/* payloads: the first's receive is posted, the second's not */
	size_t n1, n2;
};

static void *two_sends_main(void *arg)
{
	struct two_sends *ts = arg;

	send_frame(ts->fd, TF_SEND, 1, ts->n1, 0);
	assert_int_equal(send(ts->fd, ts->p1, ts->n1, MSG_NOSIGNAL), (ssize_t)ts->n1);
	send_frame(ts->fd, TF_SEND, 2, ts->n2, 0);
	assert_int_equal(send(ts->fd, ts->p2, ts->n2, MSG_NOSIGNAL), (ssize_t)ts->n2);
	return NULL;
}

/*
 * A message that finds no receive, kept within max_unexpected on an endpoint
 * with a kept ring, waits for none of the device copies in flight.  The
 * agent's copies take 2 s: a 4 KiB message into a device receive, then
 * 16 MiB (more than the socket buffers hold) with no receive posted.  The
 * peer's write of the second returns while the first's receive has not
 * completed: the receive thread read it while the copy was in flight.  Both land whole,
 * in order, the second flagged as having come first.
 */
static void test_kept_without_waiting(void **state)
{
	enum { SZ = 4096, BIG = 16 << 20 };
	unsigned char *big = malloc(BIG), *want = malloc(BIG), got[SZ], wsz[SZ];
	struct two_sends ts = { .p1 = wsz, .p2 = want, .n1 = SZ, .n2 = BIG };
	struct gdx_xport_cqe e;
	struct gdx_device *dev;
	struct raw_conn conn;
	pthread_t th;
	void *drx;

	(void)state;
	t_fill(wsz, SZ, 80);
	t_fill(want, BIG, 81);
	/* read when the agent's workers start */
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "2000000"), 0);
	dev = dev_conn_open(&conn, SZ, &drx, NULL);
	/* a real device's copy lands in microseconds: the order below needs the slow one */
	if (strcmp(gdx_device_kind(dev), "emulated")) {
		dev_conn_close(&conn, dev, drx, NULL);
		free(big);
		free(want);
		skip();
	}
	ts.fd = conn.fd;
	assert_int_equal(gdx_xport_post_recv(conn.ep, drx, SZ, 1), 0);
	pthread_create(&th, NULL, two_sends_main, &ts);
	pthread_join(th, NULL);
	/* the 16 MiB went into the endpoint while the 4 KiB's copy is still on its way */
	assert_int_equal(gdx_xport_cq_poll(conn.cq, &e, 1), 0);
	e = next_cqe(conn.cq);
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(e.status, 0);
	assert_int_equal(gdx_memcpy(dev, got, drx, SZ), 0);
	assert_memory_equal(got, wsz, SZ);
	assert_int_equal(gdx_xport_post_recv(conn.ep, big, BIG, 2), 0);
	e = next_cqe(conn.cq);
	assert_int_equal(e.wr_id, 2);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.len, BIG);
	assert_true(e.flags & GDX_XPORT_CQE_UNEXPECTED);
	assert_memory_equal(big, want, BIG);
	assert_int_equal(recv_resp(conn.fd, 1).status, 0);
	assert_int_equal(recv_resp(conn.fd, 2).status, 0);
	dev_conn_close(&conn, dev, drx, NULL);
	free(big);
	free(want);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_post_writes_socket),
		cmocka_unit_test(test_post_writes_device),
		cmocka_unit_test(test_waiter_receives),
		cmocka_unit_test(test_big_payloads_direct),
		cmocka_unit_test(test_writes_answered_together),
		cmocka_unit_test(test_held_sends_one_train),
		cmocka_unit_test(test_waiter_receives_device),
		cmocka_unit_test(test_waiter_behind_device_send),
		cmocka_unit_test(test_waiter_keeps_socket),
		cmocka_unit_test(test_waiter_resp_rides),
		cmocka_unit_test(test_waiter_resp_rides_big_send),
		cmocka_unit_test(test_held_resp_rides_device),
		cmocka_unit_test(test_lent_socket_serves_peer),
		cmocka_unit_test(test_lent_over_device_answer),
		cmocka_unit_test(test_poller_receives),
		cmocka_unit_test(test_poller_many_endpoints),
		cmocka_unit_test(test_poller_bounded),
		cmocka_unit_test(test_kept_ring_starts_over),
		cmocka_unit_test(test_kept_without_waiting),
	};

	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
