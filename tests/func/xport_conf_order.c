/* SPDX-License-Identifier: MIT */
/*
 * Transport conformance (test_xport_conformance.c): message sizes, many
 * requests outstanding, immediate data and the ordering rules, one-sided reads
 * and writes of one range.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "common/util.h"
#include "test.h"
#include "xport_conf.h"

/* ---- sizes --------------------------------------------------------------- */

void xfer(struct pair *p, size_t n, enum kind src, enum kind dst)
{
	void *a = kalloc(src, n), *b = kalloc(dst, n);
	struct gdx_xport_mr *mr;
	uint64_t seed = n * 7 + src * 3 + dst;

	/* send / recv */
	kfill(src, a, n, seed);
	assert_int_equal(gdx_xport_post_recv(p->s, b, n, 1), 0);
	assert_int_equal(gdx_xport_post_send(p->c, a, n, 2, 0), 0);
	expect(p->cqs, 1, GDX_XPORT_OP_RECV, 0, n);
	expect(p->cqc, 2, GDX_XPORT_OP_SEND, 0, n);
	kcheck(dst, b, n, seed);

	/* write into the server's buffer, read it back into a fresh one */
	if (n && !reg_remote(p->s, b, n, GDX_XPORT_ACCESS_REMOTE_READ |
			     GDX_XPORT_ACCESS_REMOTE_WRITE, &mr)) {
		void *c = kalloc(src, n);

		kfill(src, a, n, seed + 1);
		assert_int_equal(gdx_xport_post_write(p->c, a, n, gdx_xport_mr_addr(mr),
						      gdx_xport_mr_key(mr), 3, 0), 0);
		expect(p->cqc, 3, GDX_XPORT_OP_WRITE, 0, n);
		kcheck(dst, b, n, seed + 1);
		assert_int_equal(gdx_xport_post_read(p->c, c, n, gdx_xport_mr_addr(mr),
						     gdx_xport_mr_key(mr), 4, 0), 0);
		expect(p->cqc, 4, GDX_XPORT_OP_READ, 0, n);
		kcheck(src, c, n, seed + 1);
		assert_int_equal(gdx_xport_mr_dereg(mr), 0);
		kfree(src, c);
	}
	expect_none(p->cqs);
	expect_none(p->cqc);
	kfree(src, a);
	kfree(dst, b);
}

void test_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 7, 4096, 65537, 1u << 20, 4u << 20 };
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	for (size_t i = 0; i < GDX_ARRAY_SIZE(sizes); i++)
		if (sizes[i] <= max_msg)
			xfer(&p, sizes[i], K_HOST, K_HOST);
	xfer(&p, max_msg, K_HOST, K_HOST);
	/* Device memory on either side and both: small, unaligned, and bigger than a chunk. */
	xfer(&p, 65537, K_DEV, K_HOST);
	xfer(&p, 65537, K_HOST, K_DEV);
	xfer(&p, GDX_MIN(max_msg, (size_t)(3u << 20) + 5), K_DEV, K_DEV);
	pair_close(&p);
}

/* ---- many outstanding, selective signalling ------------------------------ */

void test_outstanding(void **state)
{
	enum { N = 200, SZ = 4096 };
	unsigned char *rx = malloc((size_t)N * SZ), *tx = malloc((size_t)N * SZ);
	unsigned char *region = calloc(N, SZ);
	struct gdx_xport_opts o;
	struct gdx_xport_mr *mr;
	struct pair p;

	(void)state;
	gdx_xport_opts_init(&o, sizeof(o));
	o.rq_depth = N;
	o.sq_depth = N;
	pair_open(&p, &o, &o);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 1000 + i), 0);
	/* The receive queue is full. */
	assert_int_equal(gdx_xport_post_recv(p.s, rx, SZ, 1), -EAGAIN);
	for (int i = 0; i < N; i++) {
		size_t n = 1 + (size_t)(i * 37) % SZ;

		t_fill(tx + (size_t)i * SZ, n, i);
		assert_int_equal(gdx_xport_post_send(p.c, tx + (size_t)i * SZ, n, 2000 + i, 0), 0);
	}
	/* Receives complete in post order, sends in post order. */
	for (int i = 0; i < N; i++) {
		size_t n = 1 + (size_t)(i * 37) % SZ;

		expect(p.cqs, 1000 + i, GDX_XPORT_OP_RECV, 0, n);
		kcheck(K_HOST, rx + (size_t)i * SZ, n, i);
		expect(p.cqc, 2000 + i, GDX_XPORT_OP_SEND, 0, n);
	}

	/* Unsignaled writes complete silently; the one signaled write completes after them. */
	assert_int_equal(gdx_xport_mr_reg(p.s, region, (size_t)N * SZ,
					  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	for (int i = 0; i < N; i++) {
		t_fill(tx + (size_t)i * SZ, SZ, 5000 + i);
		assert_int_equal(gdx_xport_post_write(p.c, tx + (size_t)i * SZ, SZ,
						      gdx_xport_mr_addr(mr) + (uint64_t)i * SZ,
						      gdx_xport_mr_key(mr), 3000 + i,
						      i == N - 1 ? 0 : GDX_XPORT_UNSIGNALED), 0);
	}
	expect(p.cqc, 3000 + N - 1, GDX_XPORT_OP_WRITE, 0, SZ);
	expect_none(p.cqc);
	for (int i = 0; i < N; i++)
		kcheck(K_HOST, region + (size_t)i * SZ, SZ, 5000 + i);
	gdx_xport_mr_dereg(mr);
	pair_close(&p);
	free(rx);
	free(tx);
	free(region);
}

/* ---- immediate data and ordering ----------------------------------------- */

void test_imm_and_order(void **state)
{
	enum { SZ = 8192 };
	unsigned char *src = malloc(SZ), *rbuf = malloc(64), *sbuf = malloc(64), *back = malloc(SZ);
	void *dregion = kalloc(K_DEV, SZ);
	unsigned char *hregion = calloc(1, SZ);
	struct gdx_xport_mr *hmr, *dmr = NULL;
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_mr_reg(p.s, hregion, SZ, GDX_XPORT_ACCESS_REMOTE_WRITE |
					  GDX_XPORT_ACCESS_REMOTE_READ, &hmr), 0);

	/* write with immediate into a posted receive */
	t_fill(src, SZ, 11);
	assert_int_equal(gdx_xport_post_recv(p.s, rbuf, 64, 1), 0);
	assert_int_equal(gdx_xport_post_write_imm(p.c, src, SZ, gdx_xport_mr_addr(hmr),
						  gdx_xport_mr_key(hmr), 0xdeadbeef, 2, 0), 0);
	get_cqe(p.cqs, &e);
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(e.op, GDX_XPORT_OP_RECV_WRITE_IMM);
	assert_int_equal(e.status, 0);
	assert_true(e.flags & GDX_XPORT_CQE_IMM);
	assert_int_equal(e.imm, 0xdeadbeef);
	assert_int_equal(e.len, SZ);
	/* The data is in place when the receive completes. */
	kcheck(K_HOST, hregion, SZ, 11);
	expect(p.cqc, 2, GDX_XPORT_OP_WRITE_IMM, 0, SZ);

	/*
	 * write with immediate before the receive is posted: the immediate waits
	 * for one (tcp and loop keep it; verbs retries on receiver-not-ready).
	 */
	t_fill(src, SZ, 12);
	assert_int_equal(gdx_xport_post_write_imm(p.c, src, 100, gdx_xport_mr_addr(hmr) + 50,
						  gdx_xport_mr_key(hmr), 7, 3, 0), 0);
	usleep(20000);
	expect_none(p.cqs);
	assert_int_equal(gdx_xport_post_recv(p.s, rbuf, 64, 4), 0);
	expect(p.cqc, 3, GDX_XPORT_OP_WRITE_IMM, 0, 100);
	get_cqe(p.cqs, &e);
	assert_int_equal(e.wr_id, 4);
	assert_int_equal(e.op, GDX_XPORT_OP_RECV_WRITE_IMM);
	assert_int_equal(e.imm, 7);
	assert_int_equal(e.len, 100);

	/*
	 * Ordering: a write, then a send; when the send's receive completes the
	 * written data is visible — also in device memory.  Then a read of the
	 * same range returns what the write put there.
	 */
	if (!reg_remote(p.s, dregion, SZ, GDX_XPORT_ACCESS_REMOTE_WRITE |
			GDX_XPORT_ACCESS_REMOTE_READ, &dmr)) {
		t_fill(src, SZ, 13);
		t_fill(sbuf, 64, 14);
		assert_int_equal(gdx_xport_post_recv(p.s, rbuf, 64, 5), 0);
		assert_int_equal(gdx_xport_post_write(p.c, src, SZ, gdx_xport_mr_addr(dmr),
						      gdx_xport_mr_key(dmr), 6,
						      GDX_XPORT_UNSIGNALED), 0);
		assert_int_equal(gdx_xport_post_send(p.c, sbuf, 64, 7, 0), 0);
		assert_int_equal(gdx_xport_post_read(p.c, back, SZ, gdx_xport_mr_addr(dmr),
						     gdx_xport_mr_key(dmr), 8, 0), 0);
		expect(p.cqs, 5, GDX_XPORT_OP_RECV, 0, 64);
		kcheck(K_DEV, dregion, SZ, 13);
		kcheck(K_HOST, rbuf, 64, 14);
		expect(p.cqc, 7, GDX_XPORT_OP_SEND, 0, 64);
		expect(p.cqc, 8, GDX_XPORT_OP_READ, 0, SZ);
		kcheck(K_HOST, back, SZ, 13);
		gdx_xport_mr_dereg(dmr);
	}

	/* Mixed operations complete in post order. */
	assert_int_equal(gdx_xport_post_recv(p.s, rbuf, 64, 9), 0);
	assert_int_equal(gdx_xport_post_read(p.c, back, 512, gdx_xport_mr_addr(hmr),
					     gdx_xport_mr_key(hmr), 10, 0), 0);
	assert_int_equal(gdx_xport_post_write(p.c, src, 512, gdx_xport_mr_addr(hmr) + 512,
					      gdx_xport_mr_key(hmr), 11, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, sbuf, 64, 12, GDX_XPORT_FENCE), 0);
	expect(p.cqc, 10, GDX_XPORT_OP_READ, 0, 512);
	expect(p.cqc, 11, GDX_XPORT_OP_WRITE, 0, 512);
	expect(p.cqc, 12, GDX_XPORT_OP_SEND, 0, 64);
	expect(p.cqs, 9, GDX_XPORT_OP_RECV, 0, 64);

	gdx_xport_mr_dereg(hmr);
	pair_close(&p);
	kfree(K_DEV, dregion);
	free(src);
	free(rbuf);
	free(sbuf);
	free(back);
	free(hregion);
}

/*
 * Rule 5 where it matters: a read into a buffer, then a fenced send of that
 * buffer carries what the read brought, in host and in device memory (tcp
 * copies device memory to send ahead of time, but never a fenced request's).
 */
void test_fence_forwards_read(void **state)
{
	enum { SZ = 16384, ROUNDS = 4 };
	unsigned char *region = malloc(SZ), *rbuf = malloc(SZ);
	struct gdx_xport_mr *mr;
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_mr_reg(p.s, region, SZ, GDX_XPORT_ACCESS_REMOTE_READ, &mr), 0);
	for (int k = K_HOST; k <= K_DEV; k++) {
		void *x = kalloc((enum kind)k, SZ);

		for (int r = 0; r < ROUNDS; r++) {
			uint64_t seed = 1000 + 10 * (uint64_t)k + (uint64_t)r;

			t_fill(region, SZ, seed);
			kfill((enum kind)k, x, SZ, 1);
			assert_int_equal(gdx_xport_post_recv(p.s, rbuf, SZ, 1), 0);
			assert_int_equal(gdx_xport_post_read(p.c, x, SZ, gdx_xport_mr_addr(mr),
							     gdx_xport_mr_key(mr), 2, 0), 0);
			assert_int_equal(gdx_xport_post_send(p.c, x, SZ, 3, GDX_XPORT_FENCE), 0);
			expect(p.cqc, 2, GDX_XPORT_OP_READ, 0, SZ);
			expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, SZ);
			expect(p.cqs, 1, GDX_XPORT_OP_RECV, 0, SZ);
			kcheck(K_HOST, rbuf, SZ, seed);
		}
		kfree((enum kind)k, x);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	pair_close(&p);
	free(region);
	free(rbuf);
}

struct gdx_xport_opts deep_opts(unsigned n)
{
	struct gdx_xport_opts o;

	gdx_xport_opts_init(&o, sizeof(o));
	o.sq_depth = n;
	o.rq_depth = n;
	return o;
}

/*
 * Rule 1 for a read then a write of the same range, no fence: the read
 * returns the bytes from before the write.  tcp answers a read from the
 * transmit queue, so the answer's bytes must be taken before the write that
 * follows lands.  Per round: NBIG reads of a large range of region B (the
 * later ones' answers wait in the queue behind the first), NS small reads of
 * the chunks of region S, then writes of other bytes to S, chunk by chunk,
 * and to B's range (with an immediate every other round); every read must
 * see the old bytes, the regions the new ones.  B and S are of kinds bk and sk (a host B ahead of a device S: tcp
 * copies S's answers into its stage ring while B's go out).
 */
static void read_then_write(enum kind bk, enum kind sk, int rounds)
{
	enum { NBIG = 3, NS = 64, CH = 4096 };
	const size_t big = GDX_MIN(max_msg, (size_t)(8u << 20)), len = big + NS * CH;
	void *rb = kalloc(bk, big), *rs = kalloc(sk, NS * CH);
	unsigned char *back = malloc(NBIG * big + NS * CH), *got = malloc(len);
	unsigned char *data[2] = { malloc(len), malloc(len) };
	struct gdx_xport_opts o = deep_opts(2 * NS + 2 * NBIG + 8);
	struct gdx_xport_mr *mb, *ms;
	struct pair p;

	pair_open(&p, &o, &o);
	if (reg_remote(p.s, rb, big, GDX_XPORT_ACCESS_REMOTE_WRITE | GDX_XPORT_ACCESS_REMOTE_READ,
		       &mb))
		goto out;
	if (reg_remote(p.s, rs, NS * CH, GDX_XPORT_ACCESS_REMOTE_WRITE |
		       GDX_XPORT_ACCESS_REMOTE_READ, &ms)) {
		gdx_xport_mr_dereg(mb);
		goto out;
	}
	/* B then S hold data[r % 2] when round r starts, data[(r + 1) % 2] after it */
	t_fill(data[0], len, 5000 + 10 * bk + sk);
	t_fill(data[1], len, 5002 + 10 * bk + sk);
	if (bk == K_DEV)
		assert_int_equal(gdx_memcpy(dev, rb, data[0], big), 0);
	else
		memcpy(rb, data[0], big);
	if (sk == K_DEV)
		assert_int_equal(gdx_memcpy(dev, rs, data[0] + big, NS * CH), 0);
	else
		memcpy(rs, data[0] + big, NS * CH);
	for (int r = 0; r < rounds; r++) {
		const unsigned char *old = data[r % 2], *neu = data[(r + 1) % 2];
		uint64_t ab = gdx_xport_mr_addr(mb), kb = gdx_xport_mr_key(mb);
		uint64_t as = gdx_xport_mr_addr(ms), ks = gdx_xport_mr_key(ms), id = 1;

		memset(back, 0, NBIG * big + NS * CH);
		for (int i = 0; i < NBIG; i++)
			assert_int_equal(gdx_xport_post_read(p.c, back + i * big, big, ab, kb, id++,
							     0), 0);
		for (int i = 0; i < NS; i++)
			assert_int_equal(gdx_xport_post_read(p.c, back + NBIG * big + i * CH, CH,
							     as + i * CH, ks, id++, 0), 0);
		for (int i = 0; i < NS; i++)
			assert_int_equal(gdx_xport_post_write(p.c, neu + big + i * CH, CH,
							      as + i * CH, ks, id++, 0), 0);
		/* every other round B's write comes with an immediate */
		if (r % 2) {
			assert_int_equal(gdx_xport_post_recv(p.s, got, 1, 7), 0);
			assert_int_equal(gdx_xport_post_write_imm(p.c, neu, big, ab, kb, 0x5eed, id++,
								  0), 0);
		} else {
			assert_int_equal(gdx_xport_post_write(p.c, neu, big, ab, kb, id++, 0), 0);
		}
		for (uint64_t i = 1; i < id; i++)
			expect(p.cqc, i, i <= NBIG + NS ? GDX_XPORT_OP_READ :
			       i == id - 1 && r % 2 ? GDX_XPORT_OP_WRITE_IMM : GDX_XPORT_OP_WRITE, 0,
			       i <= NBIG || i == id - 1 ? big : CH);
		if (r % 2) {
			struct gdx_xport_cqe e;

			get_cqe(p.cqs, &e);
			assert_int_equal(e.op, GDX_XPORT_OP_RECV_WRITE_IMM);
			assert_int_equal(e.imm, 0x5eed);
		}
		for (int i = 0; i < NS; i++)
			if (memcmp(back + NBIG * big + i * CH, old + big + i * CH, CH))
				fail_msg("round %d: small read %d returned bytes the write after "
					 "it wrote", r, i);
		for (int i = 0; i < NBIG; i++)
			if (memcmp(back + i * big, old, big))
				fail_msg("round %d: read %d of %zu bytes returned bytes the write "
					 "after it wrote", r, i, big);
		if (bk == K_DEV)
			assert_int_equal(gdx_memcpy(dev, got, rb, big), 0);
		else
			memcpy(got, rb, big);
		if (sk == K_DEV)
			assert_int_equal(gdx_memcpy(dev, got + big, rs, NS * CH), 0);
		else
			memcpy(got + big, rs, NS * CH);
		assert_memory_equal(got, neu, len);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_xport_mr_dereg(ms), 0);
	assert_int_equal(gdx_xport_mr_dereg(mb), 0);
out:
	pair_close(&p);
	kfree(bk, rb);
	kfree(sk, rs);
	free(back);
	free(got);
	free(data[0]);
	free(data[1]);
}

/* verbs runs in an emulated guest: fewer rounds there */
static int rtw_rounds(void)
{
	return strcmp(backend, "rdma") ? 6 : 2;
}

void test_read_then_write(void **state)
{
	(void)state;
	read_then_write(K_HOST, K_HOST, rtw_rounds());
}

/* The same into device memory; tcp also without the copy agent (the transmit thread's stream). */
void test_dev_read_then_write(void **state)
{
	(void)state;
	read_then_write(K_DEV, K_DEV, rtw_rounds());
	read_then_write(K_HOST, K_DEV, rtw_rounds());
	if (!strcmp(backend, "tcp")) {
		assert_int_equal(gdx_config_set("xport.tcp_copy_agent", "0"), 0);
		read_then_write(K_DEV, K_DEV, rtw_rounds() / 2);
		gdx_config_reset();
	}
}

/*
 * Both ends at once: each reads a range of the other's region, then writes
 * other bytes to it, no fence.  A write may wait for the answers ahead of it
 * to take their bytes, never for them to go out: the answers of each end go
 * out only as fast as the other end's receive thread reads them.
 */
void test_read_then_write_both_ways(void **state)
{
	enum { NBIG = 3 };
	const size_t big = GDX_MIN(max_msg, (size_t)(8u << 20));
	unsigned char *region[2] = { malloc(big), malloc(big) }, *back[2];
	unsigned char *data[2] = { malloc(big), malloc(big) };
	struct gdx_xport_mr *mr[2];
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	struct gdx_xport_ep *ep[2] = { p.c, p.s };
	struct gdx_xport_cq *cq[2] = { p.cqc, p.cqs };

	t_fill(data[0], big, 6000);
	t_fill(data[1], big, 6002);
	for (int e = 0; e < 2; e++) {
		back[e] = malloc(NBIG * big);
		memcpy(region[e], data[0], big);
		assert_int_equal(gdx_xport_mr_reg(ep[e], region[e], big,
						  GDX_XPORT_ACCESS_REMOTE_READ |
						  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr[e]), 0);
	}
	for (int r = 0; r < rtw_rounds() / 2; r++) {
		const unsigned char *old = data[r % 2], *neu = data[(r + 1) % 2];

		/* ep[e] reads and writes the region of the other end, ep[!e]'s */
		for (int e = 0; e < 2; e++) {
			uint64_t a = gdx_xport_mr_addr(mr[!e]), k = gdx_xport_mr_key(mr[!e]);

			for (int i = 0; i < NBIG; i++)
				assert_int_equal(gdx_xport_post_read(ep[e], back[e] + i * big, big, a,
								     k, 1 + i, 0), 0);
			assert_int_equal(gdx_xport_post_write(ep[e], neu, big, a, k, 1 + NBIG, 0),
					 0);
		}
		for (int e = 0; e < 2; e++) {
			for (int i = 0; i < NBIG; i++)
				expect(cq[e], 1 + i, GDX_XPORT_OP_READ, 0, big);
			expect(cq[e], 1 + NBIG, GDX_XPORT_OP_WRITE, 0, big);
			for (int i = 0; i < NBIG; i++)
				if (memcmp(back[e] + i * big, old, big))
					fail_msg("round %d, end %d: read %d returned bytes the write "
						 "after it wrote", r, e, i);
			/* ep[e]'s write is done: the other end's region holds its bytes */
			assert_memory_equal(region[!e], neu, big);
		}
	}
	for (int e = 0; e < 2; e++) {
		assert_int_equal(gdx_xport_mr_dereg(mr[e]), 0);
		free(back[e]);
		free(region[e]);
		free(data[e]);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close(&p);
}
