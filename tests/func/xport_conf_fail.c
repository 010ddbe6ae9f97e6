/* SPDX-License-Identifier: MIT */
/*
 * Transport conformance (test_xport_conformance.c): refused accesses,
 * messages too large or before their receives, disconnects and a peer's
 * death.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "common/util.h"
#include "gpu/device.h"
#include "test.h"
#include "xport_conf.h"

/* ---- refused accesses -------------------------------------------------------- */

/*
 * Each bad access gets a fresh connection: on verbs a remote access error
 * takes the queue pair down, on tcp and loop the connection survives (checked).
 */
static void bad_access(int write, uint64_t addr_off, size_t len, int key_delta,
		       unsigned access, int dereg_first)
{
	enum { SZ = 4096 };
	unsigned char *region = malloc(SZ), *local = malloc(2 * SZ);
	struct gdx_xport_mr *mr;
	uint64_t key, addr;
	struct pair p;

	pair_open(&p, NULL, NULL);
	memset(region, 0x5a, SZ);
	memset(local, 0xa5, 2 * SZ);
	assert_int_equal(gdx_xport_mr_reg(p.s, region, SZ, access, &mr), 0);
	key = gdx_xport_mr_key(mr) + (uint64_t)(int64_t)key_delta;
	addr = gdx_xport_mr_addr(mr) + addr_off;
	if (dereg_first)
		assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	if (write)
		assert_int_equal(gdx_xport_post_write(p.c, local, len, addr, key, 1, 0), 0);
	else
		assert_int_equal(gdx_xport_post_read(p.c, local, len, addr, key, 1, 0), 0);
	expect(p.cqc, 1, write ? GDX_XPORT_OP_WRITE : GDX_XPORT_OP_READ, GDX_EREMOTE, 0);
	/* Not a byte touched on either side. */
	for (size_t i = 0; i < SZ; i++)
		assert_int_equal(region[i], 0x5a);
	for (size_t i = 0; i < 2 * SZ; i++)
		assert_int_equal(local[i], 0xa5);
	if (strcmp(backend, "rdma")) {
		/* The connection still works. */
		assert_int_equal(gdx_xport_post_recv(p.s, region, 16, 2), 0);
		assert_int_equal(gdx_xport_post_send(p.c, local, 16, 3, 0), 0);
		expect(p.cqs, 2, GDX_XPORT_OP_RECV, 0, 16);
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, 16);
	}
	if (!dereg_first)
		gdx_xport_mr_dereg(mr);
	pair_close(&p);
	free(region);
	free(local);
}

/* A key is good only for the peer of the endpoint that registered it. */
static void other_connection(void)
{
	unsigned char region[256], local[256];
	struct gdx_xport_mr *mr;
	struct pair a, b;

	memset(region, 0x5a, sizeof(region));
	memset(local, 0xa5, sizeof(local));
	pair_open(&a, NULL, NULL);
	pair_open(&b, NULL, NULL);
	assert_int_equal(gdx_xport_mr_reg(a.s, region, sizeof(region),
					  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	assert_int_equal(gdx_xport_post_write(b.c, local, 16, gdx_xport_mr_addr(mr),
					      gdx_xport_mr_key(mr), 1, 0), 0);
	expect(b.cqc, 1, GDX_XPORT_OP_WRITE, GDX_EREMOTE, 0);
	for (size_t i = 0; i < sizeof(region); i++)
		assert_int_equal(region[i], 0x5a);
	/* The right connection may. */
	assert_int_equal(gdx_xport_post_write(a.c, local, 16, gdx_xport_mr_addr(mr),
					      gdx_xport_mr_key(mr), 2, 0), 0);
	expect(a.cqc, 2, GDX_XPORT_OP_WRITE, 0, 16);
	assert_int_equal(region[0], 0xa5);
	gdx_xport_mr_dereg(mr);
	pair_close(&b);
	pair_close(&a);
}

void test_bad_access(void **state)
{
	const unsigned rw = GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE;

	(void)state;
	bad_access(1, 0, 16, 1, rw, 0);			/* wrong key */
	bad_access(0, 0, 16, 0x100000, rw, 0);		/* wrong key, other slot */
	bad_access(1, 4096 - 8, 16, 0, rw, 0);		/* runs past the end */
	bad_access(0, 4096 - 8, 16, 0, rw, 0);
	bad_access(1, 0, 8192, 0, rw, 0);		/* longer than the region */
	bad_access(1, (uint64_t)-4096, 16, 0, rw, 0);	/* before the start */
	bad_access(0, 0, 16, 0, GDX_XPORT_ACCESS_REMOTE_WRITE, 0);	/* no read access */
	bad_access(1, 0, 16, 0, GDX_XPORT_ACCESS_REMOTE_READ, 0);	/* no write access */
	bad_access(1, 0, 16, 0, rw, 1);			/* deregistered */
	other_connection();
}

void test_recv_too_small(void **state)
{
	unsigned char small[16], big[64] = { 0 };
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_post_recv(p.s, small, sizeof(small), 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, big, sizeof(big), 2, 0), 0);
	expect(p.cqs, 1, GDX_XPORT_OP_RECV, -EMSGSIZE, 0);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, GDX_EREMOTE, 0);
	pair_close(&p);
}

/*
 * A receive posted while a message that found none is still arriving: the
 * message must land in it.  On tcp the payload is then being read into an
 * intermediate buffer, and the receive, finding no whole message waiting, used
 * to be queued unmatched, leaving both to wait forever.  The delays put the
 * post before, during and after that read.
 */
void test_recv_posted_during_arrival(void **state)
{
	static const unsigned delay_us[] = { 0, 500, 2000, 10000 };
	size_t n = GDX_MIN(max_msg, (size_t)32 << 20);
	struct pair p;
	void *src = kalloc(K_HOST, n), *dst = kalloc(K_HOST, n);

	(void)state;
	pair_open(&p, NULL, NULL);
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(delay_us); i++) {
		kfill(K_HOST, src, n, i + 1);
		assert_int_equal(gdx_xport_post_send(p.c, src, n, 100 + i, 0), 0);
		usleep(delay_us[i]);
		assert_int_equal(gdx_xport_post_recv(p.s, dst, n, 200 + i), 0);
		expect(p.cqs, 200 + i, GDX_XPORT_OP_RECV, 0, n);
		expect(p.cqc, 100 + i, GDX_XPORT_OP_SEND, 0, n);
		kcheck(K_HOST, dst, n, i + 1);
	}
	pair_close(&p);
	kfree(K_HOST, src);
	kfree(K_HOST, dst);
}

/*
 * A send larger than what the receiver keeps as unexpected (max_unexpected,
 * 64 KiB here), arriving before any receive, is not kept: its sender waits
 * (as on receiver-not-ready) until a receive is posted, which then takes it
 * whole; a smaller one after it waits behind it.
 */
void test_unexpected_limit(void **state)
{
	enum { BIG = 200000, SMALL = 1000 };
	struct gdx_xport_opts o;
	struct gdx_xport_cqe e;
	struct pair p;
	void *src = kalloc(K_HOST, BIG), *dst = kalloc(K_HOST, BIG), *dst2 = kalloc(K_HOST, SMALL);

	(void)state;
	gdx_xport_opts_init(&o, sizeof(o));
	o.max_unexpected = 64u << 10;
	pair_open(&p, &o, &o);
	kfill(K_HOST, src, BIG, 5);
	assert_int_equal(gdx_xport_post_send(p.c, src, BIG, 1, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, SMALL, 2, 0), 0);
	/* nothing completes while no receive is posted */
	assert_int_equal(gdx_xport_cq_wait(p.cqc, 200), 0);
	assert_int_equal(gdx_xport_cq_poll(p.cqc, &e, 1), 0);
	assert_int_equal(gdx_xport_post_recv(p.s, dst, BIG, 3), 0);
	assert_int_equal(gdx_xport_post_recv(p.s, dst2, SMALL, 4), 0);
	expect(p.cqs, 3, GDX_XPORT_OP_RECV, 0, BIG);
	expect(p.cqs, 4, GDX_XPORT_OP_RECV, 0, SMALL);
	expect(p.cqc, 1, GDX_XPORT_OP_SEND, 0, BIG);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, SMALL);
	kcheck(K_HOST, dst, BIG, 5);
	kcheck(K_HOST, dst2, SMALL, 5);
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close(&p);
	kfree(K_HOST, src);
	kfree(K_HOST, dst);
	kfree(K_HOST, dst2);
}

/*
 * A receive tells whether its message waited for it: GDX_XPORT_CQE_UNEXPECTED
 * when the message arrived before the receive was posted and was copied again
 * out of the backend's buffer (tcp, loop; on verbs such a send is retried until
 * the receive is there, and the flag is never set), never when the receive was
 * posted first.  Host and device receives.
 */
void test_unexpected_flag(void **state)
{
	enum { N = 3000 };
	int keeps = strcmp(backend, "rdma") != 0;
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	for (enum kind k = K_HOST; k <= K_DEV; k++) {
		void *src = kalloc(K_HOST, N), *dst = kalloc(k, N);

		kfill(K_HOST, src, N, 10 + k);
		assert_int_equal(gdx_xport_post_recv(p.s, dst, N, 1), 0);
		assert_int_equal(gdx_xport_post_send(p.c, src, N, 2, 0), 0);
		get_cqe(p.cqs, &e);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.flags & GDX_XPORT_CQE_UNEXPECTED, 0);
		expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, N);

		kfill(K_HOST, src, N, 20 + k);
		assert_int_equal(gdx_xport_post_send(p.c, src, N, 3, 0), 0);
		/* tcp and loop keep it and answer: it is there before the receive */
		if (keeps)
			expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, N);
		else
			usleep(20000);
		assert_int_equal(gdx_xport_post_recv(p.s, dst, N, 4), 0);
		get_cqe(p.cqs, &e);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.wr_id, 4);
		assert_int_equal(e.len, N);
		assert_int_equal(!!(e.flags & GDX_XPORT_CQE_UNEXPECTED), keeps);
		/* it sat in an intermediate buffer (loop copies everything anyway) */
		if (!strcmp(backend, "tcp"))
			assert_int_equal(e.path, GDX_XPORT_PATH_BOUNCE);
		if (!keeps)
			expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, N);
		kcheck(k, dst, N, 20 + k);
		kfree(K_HOST, src);
		kfree(k, dst);
	}
	pair_close(&p);
}

/*
 * Messages that came before their receives, many and of mixed sizes (empty,
 * larger than the kept ring), into device and host memory: each lands whole,
 * in order, flagged.  On tcp the receive thread copies them on through the
 * copy agent, from its kept ring (made small here, so that rounds wrap it
 * and its room must come back) or from host memory where the ring had no
 * room.  Then receives posted while messages arrive, an immediate kept among
 * them, and a shared receive queue of device memory posted late.
 */
static void dev_kept_rounds(struct pair *p, void **dst, const enum kind *dk, int keeps)
{
	enum { N = 12, ROUNDS = 30, MAXSZ = 70000 };
	unsigned char *src = kalloc(K_HOST, N * MAXSZ);
	struct gdx_xport_cqe e;
	uint64_t rnd = 42;
	size_t sz[N];

	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
			sz[i] = i == 0 ? 0 : i == 5 ? MAXSZ : (size_t)(rnd >> 33) % 40000;
			t_fill(src + i * MAXSZ, sz[i], (uint64_t)r * N + i);
			assert_int_equal(gdx_xport_post_send(p->c, src + i * MAXSZ, sz[i], 100 + i, 0),
					 0);
		}
		/* tcp and loop keep them and answer; verbs retries until receives are there */
		for (int i = 0; i < N && keeps; i++)
			expect(p->cqc, 100 + i, GDX_XPORT_OP_SEND, 0, sz[i]);
		if (!keeps)
			usleep(20000);
		for (int i = 0; i < N; i++)
			assert_int_equal(gdx_xport_post_recv(p->s, dst[i], MAXSZ, i), 0);
		for (int i = 0; i < N; i++) {
			get_cqe(p->cqs, &e);
			if (e.wr_id != (uint64_t)i || e.status || e.op != GDX_XPORT_OP_RECV)
				fail_msg("round %d: receive %llu status %d; expected %d", r,
					 (unsigned long long)e.wr_id, e.status, i);
			assert_int_equal(e.len, sz[i]);
			assert_int_equal(!!(e.flags & GDX_XPORT_CQE_UNEXPECTED), keeps);
			kcheck(dk[i], dst[i], sz[i], (uint64_t)r * N + i);
		}
		for (int i = 0; i < N && !keeps; i++)
			expect(p->cqc, 100 + i, GDX_XPORT_OP_SEND, 0, sz[i]);
	}
	/* receives posted as the messages arrive: kept or not, in order and whole */
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			sz[i] = (size_t)(i * 7919 + r * 131) % MAXSZ;
			t_fill(src + i * MAXSZ, sz[i], 5000 + (uint64_t)r * N + i);
			assert_int_equal(gdx_xport_post_send(p->c, src + i * MAXSZ, sz[i], 100 + i, 0),
					 0);
			assert_int_equal(gdx_xport_post_recv(p->s, dst[i], MAXSZ, i), 0);
		}
		for (int i = 0; i < N; i++) {
			expect(p->cqs, i, GDX_XPORT_OP_RECV, 0, sz[i]);
			kcheck(dk[i], dst[i], sz[i], 5000 + (uint64_t)r * N + i);
		}
		for (int i = 0; i < N; i++)
			expect(p->cqc, 100 + i, GDX_XPORT_OP_SEND, 0, sz[i]);
	}
	kfree(K_HOST, src);
}

void test_dev_kept(void **state)
{
	enum { N = 12, MAXSZ = 70000, SZ = 5000 };
	int keeps = strcmp(backend, "rdma") != 0;
	unsigned char *src = kalloc(K_HOST, SZ), *region = kalloc(K_HOST, SZ);
	void *dst[N], *dbuf[4];
	enum kind dk[N];
	struct gdx_xport_srq *q;
	struct gdx_xport_opts o;
	struct gdx_xport_cqe e;
	struct gdx_xport_mr *mr;
	struct pair p;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_kept_ring", "64k"), 0);
	pair_open(&p, NULL, NULL);
	for (int i = 0; i < N; i++) {
		dk[i] = i % 3 ? K_DEV : K_HOST;
		dst[i] = kalloc(dk[i], MAXSZ);
	}
	/* a device receive first: tcp starts its copy agent, and the kept ring */
	kfill(K_HOST, src, SZ, 1);
	assert_int_equal(gdx_xport_post_recv(p.s, dst[1], MAXSZ, 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, SZ, 2, 0), 0);
	expect(p.cqs, 1, GDX_XPORT_OP_RECV, 0, SZ);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, SZ);
	kcheck(K_DEV, dst[1], SZ, 1);
	dev_kept_rounds(&p, dst, dk, keeps);

	/* an immediate between two sends, all before their receives */
	assert_int_equal(gdx_xport_mr_reg(p.s, region, SZ, GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	kfill(K_HOST, src, SZ, 2);
	assert_int_equal(gdx_xport_post_send(p.c, src, SZ, 3, 0), 0);
	assert_int_equal(gdx_xport_post_write_imm(p.c, src, SZ, gdx_xport_mr_addr(mr),
						  gdx_xport_mr_key(mr), 0x77, 4, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, 100, 5, 0), 0);
	if (keeps) {
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SZ);
		expect(p.cqc, 4, GDX_XPORT_OP_WRITE_IMM, 0, SZ);
		expect(p.cqc, 5, GDX_XPORT_OP_SEND, 0, 100);
	}
	for (int i = 1; i <= 3; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, dst[i], MAXSZ, 10 + i), 0);
	expect(p.cqs, 11, GDX_XPORT_OP_RECV, 0, SZ);
	get_cqe(p.cqs, &e);
	assert_int_equal(e.wr_id, 12);
	assert_int_equal(e.op, GDX_XPORT_OP_RECV_WRITE_IMM);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.imm, 0x77);
	expect(p.cqs, 13, GDX_XPORT_OP_RECV, 0, 100);
	kcheck(K_DEV, dst[1], SZ, 2);
	kcheck(K_HOST, region, SZ, 2);
	if (!keeps) {
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SZ);
		expect(p.cqc, 4, GDX_XPORT_OP_WRITE_IMM, 0, SZ);
		expect(p.cqc, 5, GDX_XPORT_OP_SEND, 0, 100);
	}
	/* kept, then a device receive too small for it (verbs would end the connection) */
	if (keeps) {
		assert_int_equal(gdx_xport_post_send(p.c, src, SZ, 6, 0), 0);
		expect(p.cqc, 6, GDX_XPORT_OP_SEND, 0, SZ);
		assert_int_equal(gdx_xport_post_recv(p.s, dst[1], 100, 14), 0);
		expect(p.cqs, 14, GDX_XPORT_OP_RECV, -EMSGSIZE, 0);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	gdx_xport_mr_dereg(mr);
	pair_close(&p);

	/* device memory of a shared receive queue, posted after its messages came */
	assert_int_equal(gdx_xport_srq_create(8, &q), 0);
	gdx_xport_opts_init(&o, sizeof(o));
	o.srq = q;
	pair_open(&p, &o, NULL);
	for (int i = 0; i < 4; i++)
		dbuf[i] = kalloc(K_DEV, SZ);
	kfill(K_HOST, src, SZ, 3);
	assert_int_equal(gdx_xport_srq_post_recv(q, dbuf[0], SZ, 20), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, SZ, 21, 0), 0);
	expect(p.cqs, 20, GDX_XPORT_OP_RECV, 0, SZ);
	expect(p.cqc, 21, GDX_XPORT_OP_SEND, 0, SZ);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_xport_post_send(p.c, src, SZ - i, 30 + i, 0), 0);
	for (int i = 0; i < 4 && keeps; i++)
		expect(p.cqc, 30 + i, GDX_XPORT_OP_SEND, 0, SZ - i);
	if (!keeps)
		usleep(20000);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_xport_srq_post_recv(q, dbuf[i], SZ, 40 + i), 0);
	for (int i = 0; i < 4; i++) {
		get_cqe(p.cqs, &e);
		assert_int_equal(e.wr_id, 40 + i);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.len, SZ - i);
		kcheck(K_DEV, dbuf[i], SZ - i, 3);
	}
	for (int i = 0; i < 4 && !keeps; i++)
		expect(p.cqc, 30 + i, GDX_XPORT_OP_SEND, 0, SZ - i);
	pair_close(&p);
	assert_int_equal(gdx_xport_srq_destroy(q), 0);
	for (int i = 0; i < 4; i++)
		kfree(K_DEV, dbuf[i]);
	for (int i = 0; i < N; i++)
		kfree(dk[i], dst[i]);
	kfree(K_HOST, src);
	kfree(K_HOST, region);
	gdx_config_reset();
}

/*
 * A kept message handed to a receive while the next message, larger than what
 * is kept (max_unexpected), waits for a receive of its own: that receive
 * completes meanwhile, and its waiter is woken, since a caller may wait for
 * it before it posts the next.  On tcp with a copy agent the receive thread
 * hands the kept message over while it is stalled for the next one; a device
 * receive's completion then waits for the agent's copy, a host one's wake-up
 * for the end of the thread's burst.
 */
void test_kept_while_stalled(void **state)
{
	enum { SMALL = 3000, BIG = 200000 };
	int keeps = strcmp(backend, "rdma") != 0;
	unsigned char *src = kalloc(K_HOST, BIG), *host = kalloc(K_HOST, BIG);
	void *d = kalloc(K_DEV, BIG);
	struct gdx_xport_opts o;
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	gdx_xport_opts_init(&o, sizeof(o));
	o.max_unexpected = 64u << 10;
	pair_open(&p, &o, &o);
	/* a device receive first: tcp starts its copy agent, and the kept ring */
	kfill(K_HOST, src, SMALL, 1);
	assert_int_equal(gdx_xport_post_recv(p.s, d, BIG, 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, SMALL, 2, 0), 0);
	expect(p.cqs, 1, GDX_XPORT_OP_RECV, 0, SMALL);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, SMALL);
	for (int i = 0; i < 2; i++) {
		enum kind k = i ? K_HOST : K_DEV;
		void *dst = k == K_DEV ? d : (void *)host;
		uint64_t t0;
		int n;

		kfill(K_HOST, src, BIG, 10 + k);
		assert_int_equal(gdx_xport_post_send(p.c, src, SMALL, 3, 0), 0);
		if (keeps)
			expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SMALL);
		assert_int_equal(gdx_xport_post_send(p.c, src, BIG, 4, 0), 0);
		/* the big one arrives and waits for a receive */
		assert_int_equal(gdx_xport_cq_wait(p.cqc, 100), 0);
		assert_int_equal(gdx_xport_post_recv(p.s, dst, BIG, 5), 0);
		t0 = gdx_now_ns();
		n = gdx_xport_cq_wait(p.cqs, 5000);
		if (n != 1)
			fail_msg("%s receive of a kept message: no completion (woken) within "
				 "5 s while the next message waits for a receive (%d)",
				 k == K_DEV ? "device" : "host", n);
		assert_true(gdx_now_ns() - t0 < 4000000000ull);
		get_cqe(p.cqs, &e);
		assert_int_equal(e.wr_id, 5);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.len, SMALL);
		kcheck(k, dst, SMALL, 10 + k);
		if (!keeps)
			expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SMALL);
		assert_int_equal(gdx_xport_post_recv(p.s, dst, BIG, 6), 0);
		expect(p.cqs, 6, GDX_XPORT_OP_RECV, 0, BIG);
		expect(p.cqc, 4, GDX_XPORT_OP_SEND, 0, BIG);
		kcheck(k, dst, BIG, 10 + k);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close(&p);
	kfree(K_DEV, d);
	kfree(K_HOST, host);
	kfree(K_HOST, src);
}

/*
 * Messages kept (on tcp in its kept ring) and handed to device receives after
 * the copy agent faulted on the way (emulated.agent_fault_after): each
 * receive completes once, in order, with its message in place or the agent's
 * error (never a disconnect); those after the fault is found are copied
 * through the device's stream; the connection goes on.
 */
void test_dev_kept_agent_fault(void **state)
{
	enum { N = 16, SZ = 4096 };
	int keeps = strcmp(backend, "rdma") != 0, failed = 0;
	unsigned char *tx = malloc((size_t)N * SZ);
	char *rx = kalloc(K_DEV, (size_t)N * SZ);
	struct gdx_xport_opts o = deep_opts(4 * N);
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "5"), 0);
	pair_open(&p, &o, &o);
	/* a device receive first: tcp starts its copy agent, and the kept ring */
	t_fill(tx, SZ, 1);
	assert_int_equal(gdx_xport_post_recv(p.s, rx, SZ, 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, tx, SZ, 2, 0), 0);
	expect(p.cqs, 1, GDX_XPORT_OP_RECV, 0, SZ);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, SZ);
	for (int i = 0; i < N; i++) {
		t_fill(tx + (size_t)i * SZ, SZ, 60 + i);
		assert_int_equal(gdx_xport_post_send(p.c, tx + (size_t)i * SZ, SZ, 2000 + i, 0), 0);
	}
	for (int i = 0; i < N && keeps; i++)
		expect(p.cqc, 2000 + i, GDX_XPORT_OP_SEND, 0, SZ);
	if (!keeps)
		usleep(20000);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 1000 + i), 0);
	for (int i = 0; i < N; i++) {
		get_cqe(p.cqs, &e);
		assert_int_equal(e.wr_id, 1000 + i);
		if (e.status) {
			assert_true(e.status < 0);
			assert_int_not_equal(e.status, GDX_EDISCONNECTED);
			failed++;
		} else {
			assert_int_equal(e.len, SZ);
			kcheck(K_DEV, rx + (size_t)i * SZ, SZ, 60 + i);
		}
	}
	for (int i = 0; i < N && !keeps; i++) {
		get_cqe(p.cqc, &e);
		assert_int_equal(e.wr_id, 2000 + i);
	}
	if (tcp_on_emulated())
		assert_true(failed > 0 && failed < N);
	/* the connection goes on, a message kept again among them */
	t_fill(tx, SZ, 99);
	assert_int_equal(gdx_xport_post_send(p.c, tx, SZ, 3, 0), 0);
	if (keeps)
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SZ);
	assert_int_equal(gdx_xport_post_recv(p.s, rx, SZ, 4), 0);
	expect(p.cqs, 4, GDX_XPORT_OP_RECV, 0, SZ);
	if (!keeps)
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SZ);
	kcheck(K_DEV, rx, SZ, 99);
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
	pair_close(&p);
	kfree(K_DEV, rx);
	free(tx);
}

/* ---- disconnects --------------------------------------------------------------- */

void test_disconnect(void **state)
{
	enum { N = 20 };
	unsigned char buf[N][64];
	struct gdx_xport_cqe e;
	int seen[N] = { 0 };
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	for (int i = 0; i < N; i++) {
		assert_int_equal(gdx_xport_post_recv(p.s, buf[i], 64, i), 0);
		assert_int_equal(gdx_xport_post_recv(p.c, buf[i], 64, 100 + i), 0);
	}
	assert_int_equal(gdx_xport_disconnect(p.c), 0);
	/* Every posted receive on both sides completes with a clear error. */
	for (int i = 0; i < N; i++) {
		get_cqe(p.cqc, &e);
		assert_int_equal(e.status, GDX_EDISCONNECTED);
		assert_true(e.wr_id >= 100 && e.wr_id < 100 + N);
		seen[e.wr_id - 100]++;
	}
	for (int i = 0; i < N; i++) {
		get_cqe(p.cqs, &e);
		assert_int_equal(e.status, GDX_EDISCONNECTED);
		assert_true(e.wr_id < N);
		seen[e.wr_id] += 2;
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(seen[i], 3);
	assert_int_equal(gdx_xport_ep_connected(p.c), 0);
	assert_int_equal(gdx_xport_ep_connected(p.s), 0);
	assert_int_equal(gdx_xport_post_send(p.c, buf[0], 8, 1, 0), GDX_EDISCONNECTED);
	assert_int_equal(gdx_xport_post_recv(p.s, buf[0], 8, 1), GDX_EDISCONNECTED);
	expect_none(p.cqc);
	pair_close(&p);
}

/*
 * Device memory registered on an endpoint whose connection has already ended
 * (the receive thread has stopped what it started): tcp starts no copy agent
 * that nobody would stop, so the device is held no longer than the endpoint.
 */
void test_dev_reg_after_end(void **state)
{
	char *region = kalloc(K_DEV, 4096);
	struct gdx_xport_mr *mr;
	int refs;
	struct pair p;

	(void)state;
	refs = atomic_load(&dev->refs);
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_disconnect(p.c), 0);
	if (!reg_remote(p.c, region, 4096, GDX_XPORT_ACCESS_REMOTE_READ, &mr))
		assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	pair_close(&p);
	assert_int_equal(atomic_load(&dev->refs), refs);
	kfree(K_DEV, region);
}

/*
 * Requests go out without the poster looking at its CQ: a burst of sends is
 * received while only the receiving side polls, also while the poster's side
 * is stalled on a message of the peer's that no receive takes yet.
 */
void test_progress_without_polling(void **state)
{
	enum { N = 8, SZ = 4096 };
	unsigned char *tx = malloc(N * SZ), *rx = malloc(N * SZ), *in = malloc(3 * SZ);
	struct gdx_xport_opts oc;
	struct gdx_xport_cqe e;
	int seen[3 * N + 3] = { 0 };
	struct pair p;

	(void)state;
	gdx_xport_opts_init(&oc, sizeof(oc));
	oc.max_unexpected = SZ;	/* the client stalls on the peer's second message */
	pair_open(&p, NULL, &oc);
	for (int round = 0; round < 2; round++) {
		int base = round * N;

		t_fill(tx, N * SZ, 40 + (uint64_t)round);
		for (int i = 0; i < N; i++)
			assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, base + i),
					 0);
		if (round == 1) {
			/* Three messages the client has no receive for: it keeps one, then stalls. */
			for (int i = 0; i < 3; i++)
				assert_int_equal(gdx_xport_post_send(p.s, in + (size_t)i * SZ, SZ,
								     100 + i, 0), 0);
			usleep(50000);
		}
		for (int i = 0; i < N; i++)
			assert_int_equal(gdx_xport_post_send(p.c, tx + (size_t)i * SZ, SZ,
							     base + i, 0), 0);
		/* Only the server polls; its first send may complete among the receives. */
		for (int i = 0, sends = 0; i < N; ) {
			get_cqe(p.cqs, &e);
			assert_int_equal(e.status, 0);
			if (e.op == GDX_XPORT_OP_SEND) {
				assert_int_equal(e.wr_id, 100 + sends++);
				continue;
			}
			assert_int_equal(e.op, GDX_XPORT_OP_RECV);
			assert_int_equal(e.wr_id, base + i++);
			if (i == N && round)
				for (int j = 0; j < 3; j++)
					assert_int_equal(gdx_xport_post_recv(p.c, in + (size_t)j * SZ,
									     SZ, 200 + j), 0);
			while (i == N && round && sends < 3) {
				get_cqe(p.cqs, &e);
				assert_int_equal(e.status, 0);
				assert_int_equal(e.wr_id, 100 + sends++);
			}
		}
		kcheck(K_HOST, rx, N * SZ, 40 + (uint64_t)round);
		for (int i = 0; i < N + (round ? 3 : 0); i++) {
			get_cqe(p.cqc, &e);
			assert_int_equal(e.status, 0);
			if (e.op == GDX_XPORT_OP_RECV)
				seen[2 * N + e.wr_id - 200]++;
			else
				seen[e.wr_id]++;
		}
	}
	for (int i = 0; i < 2 * N + 3; i++)
		assert_int_equal(seen[i], 1);
	expect_none(p.cqc);
	expect_none(p.cqs);
	pair_close(&p);
	free(tx);
	free(rx);
	free(in);
}

void test_peer_death(void **state)
{
	enum { N = 16 };
	size_t big = GDX_MIN(max_msg, (size_t)(16u << 20));
	unsigned char *bigbuf, small[N][256];
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	struct gdx_xport_cqe e;
	char self[4096];
	uint64_t msg[2];
	int seen[3 * N + 2] = { 0 }, pending = 0, st;
	pid_t pid;
	ssize_t n;

	(void)state;
	if (!strcmp(backend, "loop"))
		skip();	/* in-process: there is no peer process to lose */
	bigbuf = calloc(1, big);
	assert_int_equal(gdx_xport_listen(listen_addr, NULL, &l), 0);
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = 0;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(self, self, "peer", gdx_xport_listener_addr(l), (char *)NULL);
		_exit(127);
	}
	assert_int_equal(gdx_xport_accept(l, cq, 60000, &ep), 0);
	assert_int_equal(gdx_xport_post_recv(ep, msg, sizeof(msg), 0), 0);
	expect(cq, 0, GDX_XPORT_OP_RECV, 0, sizeof(msg));

	/* Work in flight: receives, reads and writes of the peer's region, sends it cannot take. */
	for (int i = 0; i < N; i++) {
		assert_int_equal(gdx_xport_post_recv(ep, small[i], 256, 1 + i), 0);
		pending++;
	}
	assert_int_equal(gdx_xport_post_send(ep, small[0], 64, 1 + N, 0), 0);
	assert_int_equal(gdx_xport_post_send(ep, bigbuf, big, 2 + N, 0), 0);
	pending += 2;
	for (int i = 0; i < N; i++) {
		assert_int_equal(gdx_xport_post_read(ep, bigbuf + (size_t)i * 4096, 4096,
						     msg[0], msg[1], 3 + N + i, 0), 0);
		pending++;
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);

	/* Every request and receive completes; the ones the peer never answered with the error. */
	for (int i = 0; i < pending; i++) {
		get_cqe(cq, &e);
		assert_true(e.wr_id >= 1 && e.wr_id < 3 + 2 * N);
		seen[e.wr_id]++;
		if (e.op == GDX_XPORT_OP_RECV || e.wr_id == 2 + N)
			assert_int_equal(e.status, GDX_EDISCONNECTED);
		else
			assert_true(e.status == 0 || e.status == GDX_EDISCONNECTED);
	}
	for (int i = 1; i < 3 + 2 * N; i++)
		assert_int_equal(seen[i], 1);
	assert_int_equal(gdx_xport_ep_connected(ep), 0);
	assert_int_equal(gdx_xport_post_send(ep, small[0], 1, 99, 0), GDX_EDISCONNECTED);
	gdx_xport_ep_destroy(ep);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
	free(bigbuf);
}
