/* SPDX-License-Identifier: MIT */
/*
 * Transport conformance (test_xport_conformance.c): device memory sent --
 * tcp's copies through the copy agent and its stage ring, the agent's launch
 * failures, faults, stuck copies and halts.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "common/stats.h"
#include "common/util.h"
#include "gpu/device.h"
#include "dev_watch.h"
#include "test.h"
#include "xport_conf.h"

/*
 * tcp copies device memory it sends (sends, writes, read data; through the
 * stage ring or, past a stage buffer, chunk by chunk) with the endpoint's copy
 * agent: its transmit threads make no copy or stream wait of the device.
 * With xport.tcp_copy_agent=0 they do (the watch sees them), and the data is
 * the same both ways: more than the ring holds at once, host sends between
 * device ones, a payload larger than a stage buffer among them.
 */
static atomic_uint tx_copy_calls;

static void watch_tx_copies(const char *op)
{
	char name[16] = "";

	if (strcmp(op, "memcpy") && strcmp(op, "stream_synchronize"))
		return;
	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (!strcmp(name, "gdx-tcp-tx"))
		atomic_fetch_add(&tx_copy_calls, 1);
}

/* tcp's stage ring counters, summed over the endpoints alive (stats scopes xport.tcp.N) */
struct sr_ctr {
	uint64_t frames, late, caught_up, tx_copied, redone, recopied;
};

static void sr_counters(struct sr_ctr *c)
{
	struct json_object *root = gdx_stats_json(), *v;
	static const char *const names[] = { "sr_frames", "sr_late", "sr_caught_up",
					     "sr_tx_copied", "sr_redone", "tx_recopied" };
	uint64_t *out[] = { &c->frames, &c->late, &c->caught_up, &c->tx_copied, &c->redone,
			    &c->recopied };

	assert_non_null(root);
	memset(c, 0, sizeof(*c));
	json_object_object_foreach(root, scope, set) {
		if (strncmp(scope, "xport.tcp.", 10))
			continue;
		for (unsigned i = 0; i < GDX_ARRAY_SIZE(names); i++)
			if (json_object_object_get_ex(set, names[i], &v))
				*out[i] += json_object_get_uint64(v);
	}
	json_object_put(root);
}

/* What the counters of the endpoints alive added since *base (endpoints of a failed test stay). */
static struct sr_ctr sr_since(const struct sr_ctr *base)
{
	struct sr_ctr c;

	sr_counters(&c);
	c.frames -= base->frames;
	c.late -= base->late;
	c.caught_up -= base->caught_up;
	c.tx_copied -= base->tx_copied;
	c.redone -= base->redone;
	c.recopied -= base->recopied;
	return c;
}

/* *c: what the stage ring counted (sr_since) */
static void dev_sends(struct sr_ctr *c)
{
	/* more than the stage ring holds (2 MiB), a large payload in the middle */
	enum { N = 48, SZ = 65536 };
	const size_t big = GDX_MIN(max_msg, (size_t)(3u << 20) + 5);
	char *src = kalloc(K_DEV, (size_t)N * SZ), *dbig = kalloc(K_DEV, big);
	char *dregion = kalloc(K_DEV, (size_t)N * SZ);
	unsigned char *rx = malloc((size_t)N * SZ), *hbig = malloc(big);
	unsigned char *back = malloc((size_t)N * SZ), *hsrc = malloc((size_t)N * SZ);
	struct gdx_xport_opts o = deep_opts(4 * N);
	struct gdx_xport_mr *hmr, *dmr;
	struct sr_ctr base;
	struct pair p;

	sr_counters(&base);
	pair_open(&p, &o, &o);
	kfill(K_DEV, src, (size_t)N * SZ, 11);
	kfill(K_HOST, hsrc, (size_t)N * SZ, 11);
	kfill(K_DEV, dbig, big, 12);
	kfill(K_DEV, dregion, (size_t)N * SZ, 13);
	assert_int_equal(gdx_xport_mr_reg(p.s, hbig, big, GDX_XPORT_ACCESS_REMOTE_WRITE, &hmr), 0);
	assert_int_equal(gdx_xport_mr_reg(p.s, dregion, (size_t)N * SZ,
					  GDX_XPORT_ACCESS_REMOTE_READ, &dmr), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 100 + i), 0);
	/* every fifth send from host memory (the same bytes), between the device ones */
	for (int i = 0; i < N; i++) {
		const char *from = i % 5 == 4 ? (const char *)hsrc : src;

		if (i == N / 2)
			assert_int_equal(gdx_xport_post_write(p.c, dbig, big, gdx_xport_mr_addr(hmr),
							      gdx_xport_mr_key(hmr), 300, 0), 0);
		assert_int_equal(gdx_xport_post_send(p.c, from + (size_t)i * SZ, SZ, 200 + i, 0),
				 0);
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_read(p.c, back + (size_t)i * SZ, SZ,
						     gdx_xport_mr_addr(dmr) + (uint64_t)i * SZ,
						     gdx_xport_mr_key(dmr), 400 + i, 0), 0);
	for (int i = 0; i < N; i++)
		expect(p.cqs, 100 + i, GDX_XPORT_OP_RECV, 0, SZ);
	for (int i = 0; i < N; i++) {
		if (i == N / 2)
			expect(p.cqc, 300, GDX_XPORT_OP_WRITE, 0, big);
		expect(p.cqc, 200 + i, GDX_XPORT_OP_SEND, 0, SZ);
	}
	for (int i = 0; i < N; i++)
		expect(p.cqc, 400 + i, GDX_XPORT_OP_READ, 0, SZ);
	kcheck(K_HOST, rx, (size_t)N * SZ, 11);
	kcheck(K_HOST, hbig, big, 12);
	kcheck(K_HOST, back, (size_t)N * SZ, 13);
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_xport_mr_dereg(hmr), 0);
	assert_int_equal(gdx_xport_mr_dereg(dmr), 0);
	*c = sr_since(&base);
	pair_close(&p);
	kfree(K_DEV, src);
	kfree(K_DEV, dbig);
	kfree(K_DEV, dregion);
	free(rx);
	free(hbig);
	free(back);
	free(hsrc);
}

void test_dev_sends_through_agent(void **state)
{
	struct sr_ctr c;

	(void)state;
	if (strcmp(backend, "tcp") || !dev->ops->agent_launch)
		skip();
	dev_watch_start(dev, watch_tx_copies);
	dev_watch_copies();
	atomic_store(&tx_copy_calls, 0);
	dev_sends(&c);
	assert_int_equal(atomic_load(&tx_copy_calls), 0);
	/*
	 * The device sends, the write and the peer's read answers go through
	 * the stage ring; the transmit thread copies only the write over a
	 * stage buffer, chunk by chunk: the frames behind it, late while it
	 * has the ring, are staged once it is sent (sr_catch_up).
	 */
	assert_true(c.frames > 0);
	assert_int_equal(c.tx_copied, max_msg > (1u << 20) ? 1 : 0);
	assert_int_equal(c.caught_up, c.late - c.tx_copied);
	assert_int_equal(gdx_config_set("xport.tcp_copy_agent", "0"), 0);
	dev_sends(&c);
	assert_true(atomic_load(&tx_copy_calls) > 0);
	assert_int_equal(c.frames, 0);
	gdx_config_reset();
	dev_watch_stop(dev);
}

/*
 * tcp's stage ring with payloads of odd sizes, from device memory: large ones
 * that do not divide the ring (where one would run past its end, its start
 * takes it), between more tiny ones than the agent holds descriptors while its
 * copies are slowed (frames that find none, or no room, go late); every
 * message arrives whole and in order.
 */
void test_dev_sends_odd_sizes(void **state)
{
	enum { N = 1400 };
	size_t *sz = malloc(N * sizeof(*sz)), total = 0;
	struct gdx_xport_opts o = deep_opts(N);
	struct sr_ctr base;
	uint64_t seed = 77;
	unsigned char *rx;
	struct pair p;
	char *src;

	(void)state;
	assert_non_null(sz);
	for (int i = 0; i < N; i++) {
		/* tiny ones first: more copies at once than descriptors, the ring far from full */
		sz[i] = i >= 1100 && i % 8 == 0 ? 300001 + (size_t)(t_rand(&seed) % 360000) * 2
						: 1 + (size_t)(t_rand(&seed) % 64);
		total += sz[i];
	}
	src = kalloc(K_DEV, total);
	rx = malloc(total);
	assert_non_null(rx);
	kfill(K_DEV, src, total, 31);
	memset(rx, 0, total);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "5"), 0);
	sr_counters(&base);
	pair_open(&p, &o, &o);
	for (size_t i = 0, off = 0; i < N; off += sz[i++])
		assert_int_equal(gdx_xport_post_recv(p.s, rx + off, sz[i], i), 0);
	for (size_t i = 0, off = 0; i < N; off += sz[i++])
		assert_int_equal(gdx_xport_post_send(p.c, src + off, sz[i], 10000 + i, 0), 0);
	for (size_t i = 0; i < N; i++)
		expect(p.cqs, i, GDX_XPORT_OP_RECV, 0, sz[i]);
	for (size_t i = 0; i < N; i++)
		expect(p.cqc, 10000 + i, GDX_XPORT_OP_SEND, 0, sz[i]);
	kcheck(K_HOST, rx, total, 31);
	if (!strcmp(backend, "tcp") && dev->ops->agent_launch) {
		/*
		 * None is fenced or larger than a stage buffer: a late frame is
		 * staged (sr_catch_up) at the latest when the ring empties, so
		 * the transmit thread never meets one, however the copies and
		 * sends interleave (docs/xport.md, the stage ring).
		 */
		struct sr_ctr c = sr_since(&base);

		assert_int_equal(c.frames, N);
		assert_int_equal(c.tx_copied, 0);
		assert_int_equal(c.caught_up, c.late);
	}
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close(&p);
	gdx_config_reset();
	kfree(K_DEV, src);
	free(rx);
	free(sz);
}

/*
 * Device sends queued behind a fenced one that waits for a read: the fenced
 * send is late (copied by the transmit thread once the read is done, rule 5)
 * and so is every one behind it (room is taken in queue order).  Once the
 * fenced one goes, the others are staged as room comes back, while the frames
 * ahead of them are sent: the transmit thread copies the fenced one only.
 * The receiver holds the read until receives are posted (a send beyond
 * max_unexpected ahead of it), so all of it is queued by then.
 */
void test_dev_sends_behind_fence(void **state)
{
	enum { N = 64, SZ = 65536, BIG = 200000 };
	unsigned char *big, *rbig, *region, *back, *rx;
	struct gdx_xport_opts o = deep_opts(N + 4);
	struct gdx_xport_mr *mr;
	struct sr_ctr base, c;
	struct pair p;
	char *src;

	(void)state;
	if (strcmp(backend, "tcp") || !dev->ops->agent_launch)
		skip();
	src = kalloc(K_DEV, (size_t)(N + 1) * SZ);
	big = kalloc(K_HOST, BIG);
	rbig = kalloc(K_HOST, BIG);
	region = kalloc(K_HOST, SZ);
	back = kalloc(K_HOST, SZ);
	rx = kalloc(K_HOST, (size_t)(N + 1) * SZ);
	o.max_unexpected = 64u << 10;
	sr_counters(&base);
	pair_open(&p, &o, &o);
	kfill(K_DEV, src, (size_t)(N + 1) * SZ, 41);
	kfill(K_HOST, big, BIG, 42);
	kfill(K_HOST, region, SZ, 43);
	assert_int_equal(gdx_xport_mr_reg(p.s, region, SZ, GDX_XPORT_ACCESS_REMOTE_READ, &mr), 0);
	assert_int_equal(gdx_xport_post_send(p.c, big, BIG, 1, 0), 0);
	assert_int_equal(gdx_xport_post_read(p.c, back, SZ, gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 2, 0), 0);
	for (int i = 0; i <= N; i++)
		assert_int_equal(gdx_xport_post_send(p.c, src + (size_t)i * SZ, SZ, 100 + i,
						     i ? 0 : GDX_XPORT_FENCE), 0);
	assert_int_equal(gdx_xport_post_recv(p.s, rbig, BIG, 3), 0);
	for (int i = 0; i <= N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 200 + i), 0);
	expect(p.cqc, 1, GDX_XPORT_OP_SEND, 0, BIG);
	expect(p.cqc, 2, GDX_XPORT_OP_READ, 0, SZ);
	for (int i = 0; i <= N; i++)
		expect(p.cqc, 100 + i, GDX_XPORT_OP_SEND, 0, SZ);
	expect(p.cqs, 3, GDX_XPORT_OP_RECV, 0, BIG);
	for (int i = 0; i <= N; i++)
		expect(p.cqs, 200 + i, GDX_XPORT_OP_RECV, 0, SZ);
	kcheck(K_HOST, rbig, BIG, 42);
	kcheck(K_HOST, back, SZ, 43);
	kcheck(K_HOST, rx, (size_t)(N + 1) * SZ, 41);
	c = sr_since(&base);
	assert_int_equal(c.frames, N + 1);
	assert_int_equal(c.late, N + 1);
	assert_int_equal(c.tx_copied, 1);
	assert_int_equal(c.caught_up, N);
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	pair_close(&p);
	kfree(K_DEV, src);
	kfree(K_HOST, big);
	kfree(K_HOST, rbig);
	kfree(K_HOST, region);
	kfree(K_HOST, back);
	kfree(K_HOST, rx);
}

/*
 * The copy agent faults under sends out of device memory: the connection
 * ends (a frame whose payload cannot be copied cannot be sent), every request
 * on both sides completes once, the ones that succeeded with their data in
 * place, and the next connection works.
 */
void test_dev_send_agent_fault(void **state)
{
	enum { N = 32, SZ = 4096 };
	char *src = kalloc(K_DEV, (size_t)N * SZ);
	unsigned char *rx = malloc((size_t)N * SZ);
	struct gdx_xport_opts o = deep_opts(4 * N);
	int rst[N], sst[N], failed = 0;
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	for (int i = 0; i < N; i++)
		kfill(K_DEV, src + (size_t)i * SZ, SZ, 21 + (uint64_t)i);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "5"), 0);
	pair_open(&p, &o, &o);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 100 + i), 0);
	for (int i = 0; i < N; i++) {
		int r = gdx_xport_post_send(p.c, src + (size_t)i * SZ, SZ, 200 + i, 0);

		/* a post after the end is refused and completes nothing */
		sst[i] = r ? 1 : -1;
		if (r)
			assert_int_equal(r, GDX_EDISCONNECTED);
	}
	for (int i = 0; i < N; i++) {
		get_cqe(p.cqs, &e);
		assert_int_equal(e.wr_id, 100 + i);
		rst[i] = e.status;
		if (e.status)
			assert_int_equal(e.status, GDX_EDISCONNECTED);
		else
			kcheck(K_HOST, rx + (size_t)i * SZ, SZ, 21 + (uint64_t)i);
	}
	for (int i = 0; i < N; i++) {
		if (sst[i] == 1)
			continue;
		get_cqe(p.cqc, &e);
		assert_int_equal(e.wr_id, 200 + i);
		/* a sender told of success: its receive has the data */
		if (!e.status)
			assert_int_equal(rst[i], 0);
		failed += e.status != 0 || sst[i] == 1;
	}
	if (tcp_on_emulated())
		assert_true(failed > 0);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close(&p);
	pair_open(&p, NULL, NULL);
	xfer(&p, 70000, K_DEV, K_HOST);
	pair_close(&p);
	kfree(K_DEV, src);
	free(rx);
}

/*
 * A post whose worker launch failed may still be copied by a worker that runs
 * on (include/gdx/device.h: its memory stays off limits until the agent is
 * stopped).  The launch here launches the worker, whose copies are slowed,
 * and then reports a failure, under the transmit thread's copy of read data
 * larger than a stage buffer: the region the peer reads keeps its key (its
 * deregistration waits) until the receive thread has stopped the agent.
 */
static const struct gdx_device_ops *lf_real;
static struct gdx_device_ops lf_ops;
static atomic_int lf_armed;

/*
 * lf_ops: the device's ops with agent_launch replaced; the caller arms what
 * launch looks at, then installs them (dev->ops = &lf_ops), and puts lf_real
 * back once the endpoints are gone.
 */
static void lf_wrap(int (*launch)(void *priv, void *stream, const struct gdx_agent_args *a))
{
	lf_real = dev->ops;
	lf_ops = *lf_real;
	lf_ops.agent_launch = launch;
}

/* Closes p, then puts the device's own ops back: the endpoints' threads use lf_ops till gone. */
static void pair_close_unwrap(struct pair *p)
{
	pair_close(p);
	dev->ops = lf_real;
}

/* the worker whose launch said it failed: started all the same */
static void *lf_priv, *lf_worker;

static int lf_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	int rc = lf_real->agent_launch(priv, stream, a);

	if (rc || !stream || !atomic_exchange(&lf_armed, 0))
		return rc;
	lf_priv = priv;
	lf_worker = stream;
	return -EIO;
}

void test_dev_send_launch_fails(void **state)
{
	const size_t n = (size_t)3 << 20;
	char *region;
	unsigned char *back;
	struct gdx_xport_mr *mr;
	struct gdx_xport_cqe e;
	struct pair p;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	region = kalloc(K_DEV, n);
	back = malloc(n);
	assert_non_null(back);
	pair_open(&p, NULL, NULL);
	/* the agent starts here; its workers on their first copies */
	assert_int_equal(gdx_xport_mr_reg(p.s, region, n, GDX_XPORT_ACCESS_REMOTE_READ, &mr), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "200000"), 0);
	lf_wrap(lf_agent_launch);
	atomic_store(&lf_armed, 1);
	dev->ops = &lf_ops;
	assert_int_equal(gdx_xport_post_read(p.c, back, n, gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 1, 0), 0);
	get_cqe(p.cqc, &e);
	assert_int_equal(e.wr_id, 1);
	assert_int_not_equal(e.status, 0);
	assert_int_equal(atomic_load(&lf_armed), 0);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	/* the region went back once no worker could copy out of it: the agent halted */
	assert_int_equal(lf_real->stream_query(lf_priv, lf_worker), 0);
	gdx_config_reset();
	pair_close_unwrap(&p);
	kfree(K_DEV, region);
	free(back);
}

/*
 * tcp's pinned rings place each piece at a 64-byte boundary whatever the sizes
 * before it: the cuda agent copies with 16-byte vectors only where both ends
 * are aligned (src/gpu/agent.cu), byte by byte elsewhere.  Sends of 4097 bytes
 * between aligned device buffers; the agents' descriptors (found at their
 * workers' launches) say where the copies went out of the receive ring (ring
 * 0, the source) and into the stage ring (ring 1, the destination).
 */
static pthread_mutex_t al_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gdx_agent_args al_args[4];
static int al_n;

static int al_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	pthread_mutex_lock(&al_lock);
	if (stream) {
		int i = 0;

		while (i < al_n && al_args[i].descs != a->descs)
			i++;
		if (i == al_n && al_n < (int)GDX_ARRAY_SIZE(al_args))
			al_args[al_n++] = *a;
	}
	pthread_mutex_unlock(&al_lock);
	return lf_real->agent_launch(priv, stream, a);
}

void test_dev_ring_aligned(void **state)
{
	enum { N = 24, SZ = 4097, STRIDE = 8192 };
	char *src, *rx;
	unsigned char *got, *want;
	struct gdx_xport_opts o = deep_opts(N);
	unsigned checked[2] = { 0, 0 };
	struct gdx_agent_args args[GDX_ARRAY_SIZE(al_args)];
	struct pair p;
	int n;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	src = kalloc(K_DEV, (size_t)N * STRIDE);
	rx = kalloc(K_DEV, (size_t)N * STRIDE);
	got = malloc((size_t)N * STRIDE);
	want = malloc((size_t)N * STRIDE);
	assert_true(got && want);
	kfill(K_DEV, src, (size_t)N * STRIDE, 41);
	lf_wrap(al_agent_launch);
	al_n = 0;
	dev->ops = &lf_ops;
	pair_open(&p, &o, &o);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * STRIDE, SZ, i), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_send(p.c, src + (size_t)i * STRIDE, SZ, 100 + i, 0),
				 0);
	for (int i = 0; i < N; i++)
		expect(p.cqs, (uint64_t)i, GDX_XPORT_OP_RECV, 0, SZ);
	for (int i = 0; i < N; i++)
		expect(p.cqc, 100 + (uint64_t)i, GDX_XPORT_OP_SEND, 0, SZ);
	t_fill(want, (size_t)N * STRIDE, 41);
	assert_int_equal(gdx_memcpy(dev, got, rx, (size_t)N * STRIDE), 0);
	for (int i = 0; i < N; i++)
		assert_memory_equal(got + (size_t)i * STRIDE, want + (size_t)i * STRIDE, SZ);
	pthread_mutex_lock(&al_lock);
	n = al_n;
	memcpy(args, al_args, sizeof(args));
	pthread_mutex_unlock(&al_lock);
	/* the agents run until the pair is closed: their descriptors are there */
	for (int k = 0; k < n; k++) {
		for (uint32_t r = 0; r < 2 && r < args[k].nrings; r++) {
			for (uint32_t i = 0; i < args[k].entries; i++) {
				const struct gdx_agent_desc *d = (const struct gdx_agent_desc *)(uintptr_t)
					args[k].descs + (size_t)r * args[k].entries + i;
				unsigned w = r ? 0 : 2;	/* the ring's side: src of 0, dst of 1 */
				uint64_t at = (uint32_t)d->w[w] | (uint64_t)(uint32_t)d->w[w + 1] << 32;

				if (!(d->w[4] >> 32))
					continue;
				if (at % 64)
					fail_msg("copy %u of ring %u goes %s %#llx", i, r,
						 r ? "to" : "from", (unsigned long long)at);
				checked[r]++;
			}
		}
	}
	assert_int_equal(checked[0], N);
	assert_int_equal(checked[1], N);
	pair_close_unwrap(&p);
	kfree(K_DEV, src);
	kfree(K_DEV, rx);
	free(got);
	free(want);
}

/*
 * The agent fails on p's server's receive side, lf_ops (launching with
 * lf_agent_launch) installed by the caller: a receive into device memory at
 * dbuf starts the agent; then, its worker's copies slowed (the caller resets
 * them) and its launch armed to start the worker and report failure, n bytes
 * of tx, filled with seed, are sent into it.  The receive fails, and the send
 * with GDX_EREMOTE.
 */
static void recv_agent_fails(struct pair *p, void *dbuf, unsigned char *tx, size_t n,
			     uint64_t seed)
{
	struct gdx_xport_cqe e;

	atomic_store(&lf_armed, 0);	/* the agent's start goes through */
	assert_int_equal(gdx_xport_post_recv(p->s, dbuf, n, 1), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "300000"), 0);
	atomic_store(&lf_armed, 1);
	t_fill(tx, n, seed);
	assert_int_equal(gdx_xport_post_send(p->c, tx, n, 2, 0), 0);
	get_cqe(p->cqs, &e);
	assert_int_equal(e.wr_id, 1);
	assert_int_not_equal(e.status, 0);
	assert_int_equal(atomic_load(&lf_armed), 0);
	expect(p->cqc, 2, GDX_XPORT_OP_SEND, GDX_EREMOTE, n);
}

/* Opens p with lf_ops installed (launching with lf_agent_launch), then recv_agent_fails. */
static void pair_open_recv_agent_failed(struct pair *p, void *dbuf, unsigned char *tx, size_t n,
					uint64_t seed)
{
	pair_open(p, NULL, NULL);
	lf_wrap(lf_agent_launch);
	dev->ops = &lf_ops;
	recv_agent_fails(p, dbuf, tx, n, seed);
}

/*
 * A receive whose copy's post failed to launch the worker (the launch starts
 * the slowed worker and then reports failure, as in dev_send_launch_fails):
 * the receive fails, and nothing lands in its buffer once it has completed,
 * though the worker took the descriptor; the connection goes on, receiving
 * device memory without the agent.
 */
void test_dev_recv_launch_fails(void **state)
{
	enum { SZ = 16384 };
	unsigned char *tx;
	char *dbuf;
	struct pair p;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	tx = malloc(SZ);
	assert_non_null(tx);
	dbuf = kalloc(K_DEV, SZ);
	pair_open_recv_agent_failed(&p, dbuf, tx, SZ, 51);
	/* the buffer is the user's again: what it puts there stays, past the worker's copy */
	kfill(K_DEV, dbuf, SZ, 52);
	usleep(600000);
	kcheck(K_DEV, dbuf, SZ, 52);
	gdx_config_reset();
	t_fill(tx, SZ, 53);
	assert_int_equal(gdx_xport_post_recv(p.s, dbuf, SZ, 3), 0);
	assert_int_equal(gdx_xport_post_send(p.c, tx, SZ, 4, 0), 0);
	expect(p.cqs, 3, GDX_XPORT_OP_RECV, 0, SZ);
	expect(p.cqc, 4, GDX_XPORT_OP_SEND, 0, SZ);
	kcheck(K_DEV, dbuf, SZ, 53);
	pair_close_unwrap(&p);
	kfree(K_DEV, dbuf);
	free(tx);
}

/*
 * After the agent failed on the receive side (a launch that reports failure,
 * as in dev_recv_launch_fails), the endpoint goes on without it: a send out
 * of the agent's device's memory still goes, as receives into it do.
 */
void test_dev_send_after_recv_agent_failed(void **state)
{
	enum { SZ = 16384 };
	unsigned char *tx, *rx;
	char *dbuf;
	struct pair p;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	tx = malloc(SZ);
	rx = malloc(SZ);
	assert_non_null(tx);
	assert_non_null(rx);
	dbuf = kalloc(K_DEV, SZ);
	pair_open_recv_agent_failed(&p, dbuf, tx, SZ, 61);
	gdx_config_reset();
	kfill(K_DEV, dbuf, SZ, 62);
	assert_int_equal(gdx_xport_post_recv(p.c, rx, SZ, 3), 0);
	assert_int_equal(gdx_xport_post_send(p.s, dbuf, SZ, 4, 0), 0);
	expect(p.cqs, 4, GDX_XPORT_OP_SEND, 0, SZ);
	expect(p.cqc, 3, GDX_XPORT_OP_RECV, 0, SZ);
	kcheck(K_HOST, rx, SZ, 62);
	pair_close_unwrap(&p);
	kfree(K_DEV, dbuf);
	free(tx);
	free(rx);
}

/*
 * tcp's transmit thread sets nothing up either (a stream's creation or a
 * pinned allocation may synchronise the context on CUDA, while a stream
 * waits for a completion only an endpoint thread delivers): device memory
 * sent through the stream path has its stager (a stream and two pinned
 * buffers of the device) set up by the thread that posts it to be sent, or
 * registers it for remote read.  Sends (staged ones, and ones larger than a
 * stage buffer), writes and read data out of a second device, alternating
 * with the agent's device, with the agent and without it (the knob off: both
 * devices go the stream path); and out of the agent's device after the agent
 * failed on the receive side (its stream set up when the memory was posted,
 * its buffers the halves of the stage ring).
 */
static atomic_uint tx_setup_calls;

static void watch_tx(const char *op)
{
	watch_on(op, "gdx-tcp-tx", &tx_setup_calls);
}

/*
 * n bytes of d's memory at src, filled with seed, go out of endpoint a (CQ
 * cqa) to b (cqb): a send into a receive, a write into a region of b, and
 * read data, b reading them out of a region of a; all into host memory.
 */
static void dev_out(struct gdx_xport_ep *a, struct gdx_xport_cq *cqa, struct gdx_xport_ep *b,
		    struct gdx_xport_cq *cqb, struct gdx_device *d, void *src, size_t n,
		    uint64_t seed)
{
	unsigned char *want = malloc(n), *got = malloc(n);
	struct gdx_xport_mr *mr;

	assert_true(want && got);
	t_fill(want, n, seed);
	assert_int_equal(gdx_memcpy(d, src, want, n), 0);
	memset(got, 0, n);
	assert_int_equal(gdx_xport_post_recv(b, got, n, 1), 0);
	assert_int_equal(gdx_xport_post_send(a, src, n, 2, 0), 0);
	expect(cqb, 1, GDX_XPORT_OP_RECV, 0, n);
	expect(cqa, 2, GDX_XPORT_OP_SEND, 0, n);
	assert_memory_equal(got, want, n);
	memset(got, 0, n);
	assert_int_equal(gdx_xport_mr_reg(b, got, n, GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
	assert_int_equal(gdx_xport_post_write(a, src, n, gdx_xport_mr_addr(mr),
					      gdx_xport_mr_key(mr), 3, 0), 0);
	expect(cqa, 3, GDX_XPORT_OP_WRITE, 0, n);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	assert_memory_equal(got, want, n);
	memset(got, 0, n);
	assert_int_equal(gdx_xport_mr_reg(a, src, n, GDX_XPORT_ACCESS_REMOTE_READ, &mr), 0);
	assert_int_equal(gdx_xport_post_read(b, got, n, gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 4, 0), 0);
	expect(cqb, 4, GDX_XPORT_OP_READ, 0, n);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	assert_memory_equal(got, want, n);
	free(want);
	free(got);
}

/* No set-up call on a transmit thread since the count was reset: else says which case made some. */
static void tx_setup_none(const char *what)
{
	unsigned n = atomic_exchange(&tx_setup_calls, 0);

	if (n)
		fail_msg("%u set-up calls on a transmit thread (%s)", n, what);
}

void test_dev_setup_off_tx_thread(void **state)
{
	enum { SZ = 16384, BIG = (3 << 20) + 5 };
	const struct gdx_device_ops *ops2;
	struct gdx_device *dev2;
	void *dbuf, *d2buf;
	unsigned char *tx;
	struct pair p;

	(void)state;
	second_device(&dev2);
	tx = malloc(SZ);
	assert_non_null(tx);
	dbuf = kalloc(K_DEV, BIG);
	assert_int_equal(gdx_device_malloc(dev2, BIG, &d2buf), 0);
	/* the agent's launches can be made to fail (lf_armed), the set-up calls are watched */
	lf_wrap(lf_agent_launch);
	atomic_store(&lf_armed, 0);
	dev->ops = &lf_ops;
	dev_watch_start(dev, watch_tx);
	ops2 = dev2->ops;
	dev2->ops = &dw_ops;
	atomic_store(&tx_setup_calls, 0);

	/* a second device alternating with the first: with the agent, then without */
	for (int agent = 1; agent >= 0; agent--) {
		assert_int_equal(gdx_config_set("xport.tcp_copy_agent", agent ? "1" : "0"), 0);
		pair_open(&p, NULL, NULL);
		for (int r = 0; r < 2; r++) {
			uint64_t seed = 10 * (uint64_t)(2 * agent + r);

			dev_out(p.c, p.cqc, p.s, p.cqs, dev, dbuf, SZ, seed + 1);
			dev_out(p.c, p.cqc, p.s, p.cqs, dev2, d2buf, SZ, seed + 2);
			dev_out(p.c, p.cqc, p.s, p.cqs, dev, dbuf, BIG, seed + 3);
			dev_out(p.c, p.cqc, p.s, p.cqs, dev2, d2buf, BIG, seed + 4);
		}
		pair_close(&p);
		tx_setup_none(agent ? "a second device" : "two devices without the agent");
	}
	assert_int_equal(gdx_config_set("xport.tcp_copy_agent", "1"), 0);

	/*
	 * The agent fails on the server's receive side (a launch that reports
	 * failure, as in dev_send_after_recv_agent_failed); then the server
	 * sends out of the agent's device's memory without it.
	 */
	pair_open(&p, NULL, NULL);
	recv_agent_fails(&p, dbuf, tx, SZ, 60);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
	for (int r = 0; r < 2; r++) {
		dev_out(p.s, p.cqs, p.c, p.cqc, dev, dbuf, SZ, 70 + (uint64_t)r);
		dev_out(p.s, p.cqs, p.c, p.cqc, dev, dbuf, BIG, 80 + (uint64_t)r);
	}
	pair_close(&p);
	tx_setup_none("the agent's device after the agent failed");

	dev_watch_stop(dev);
	dev2->ops = ops2;
	dev->ops = lf_real;
	gdx_config_reset();
	kfree(K_DEV, dbuf);
	assert_int_equal(gdx_device_free(dev2, d2buf), 0);
	gdx_device_close(dev2);
	free(tx);
}

/*
 * A write over a read answer still queued makes the receive thread take the
 * bytes the answer has yet to take out of the region (rule 1): out of device
 * memory, a copy of the device, after a wait for the transmit thread's
 * copies of the answer on its lane.  It does so without the endpoint's lock,
 * which posters and the transmit thread need: while that copy or wait runs
 * (the device's memcpy, or the stream query the wait makes every 64 spins,
 * is wrapped) another thread posts a receive on the endpoint, which must get
 * through within 5 s, and the copy or wait then lingers 600 ms, while the
 * transmit thread goes on with the answer.  The transmit thread's first copy
 * lands 300 ms late (no agent: a host function that sleeps goes on its lane's
 * stream first), or the agent's copies are slowed; the write is posted once
 * that copy is under way (the answer is taken), or at once.  The read returns the bytes from before the write, the
 * region has the write's.
 */
static atomic_int sn_copy_armed, sn_sync_armed, sn_slow, sn_probes, sn_blocked, sn_post_ret;
static sem_t sn_go, sn_done, sn_busy;
static struct gdx_xport_ep *sn_ep;
static uintptr_t sn_lo, sn_hi;
static unsigned char sn_rbuf[64];

static void *sn_poster(void *arg)
{
	(void)arg;
	sem_wait(&sn_go);
	atomic_store(&sn_post_ret, gdx_xport_post_recv(sn_ep, sn_rbuf, sizeof(sn_rbuf), 77));
	sem_post(&sn_done);
	return NULL;
}

static int sn_thread_is(const char *want)
{
	char name[16] = "";

	pthread_getname_np(pthread_self(), name, sizeof(name));
	return !strcmp(name, want);
}

static int sn_timedwait(sem_t *sem, int sec)
{
	struct timespec ts;
	int r;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += sec;
	do
		r = sem_timedwait(sem, &ts);
	while (r && errno == EINTR);
	return r;
}

/* The receive thread's copy or wait is under way: the poster goes meanwhile. */
static void sn_probe(void)
{
	atomic_fetch_add(&sn_probes, 1);
	sem_post(&sn_go);
	/* not through: it waits for a lock this thread holds */
	if (sn_timedwait(&sn_done, 5))
		atomic_store(&sn_blocked, 1);
	usleep(600000);
}

static void sn_sleep(void *arg)
{
	(void)arg;
	usleep(300000);
}

static int sn_memcpy(void *priv, void *dst, const void *src, size_t n, void *stream)
{
	if (!stream && (uintptr_t)src >= sn_lo && (uintptr_t)src < sn_hi &&
	    sn_thread_is("gdx-tcp-rx") && atomic_exchange(&sn_copy_armed, 0))
		sn_probe();
	if (stream && sn_thread_is("gdx-tcp-tx") && atomic_exchange(&sn_slow, 0)) {
		int ret = lf_real->launch_host_func(priv, stream, sn_sleep, NULL);

		sem_post(&sn_busy);
		if (ret)
			return ret;
	}
	return lf_real->memcpy(priv, dst, src, n, stream);
}

static int sn_stream_query(void *priv, void *stream)
{
	if (sn_thread_is("gdx-tcp-rx") && atomic_exchange(&sn_sync_armed, 0))
		sn_probe();
	return lf_real->stream_query(priv, stream);
}

/* the transmit thread's first copy of the agent launches its worker */
static int sn_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	if (stream && sn_thread_is("gdx-tcp-tx") && atomic_exchange(&sn_slow, 0))
		sem_post(&sn_busy);
	return lf_real->agent_launch(priv, stream, a);
}

void test_dev_snap_unlocked(void **state)
{
	enum { N = (2 << 20) + 4096, WLEN = 4096 };
	static const struct {
		int agent, taken, small;
		const char *what;
	} v[] = {
		{ 0, 1, 0, "no agent: the answer's stream copies waited for, the rest copied" },
		{ 1, 1, 0, "the answer's copies on the agent, the rest copied" },
		{ 0, 0, 0, "no agent, the write at once" },
		{ 0, 1, 1, "no agent: the answer's copies all made, waited for, and it goes" },
	};
	unsigned char *old, *want, *back, *neu;
	char blocked[GDX_ARRAY_SIZE(v)] = { 0 }, msg[512] = "";
	struct gdx_xport_mr *mr;
	char *region;
	pthread_t th;
	struct pair p;

	(void)state;
	if (!tcp_on_emulated() ||
	    !dev->ops->agent_launch)
		skip();
	old = malloc(N);
	want = malloc(N);
	back = malloc(N);
	neu = malloc(WLEN);
	assert_true(old && want && back && neu);
	region = kalloc(K_DEV, N);
	t_fill(old, N, 300);
	t_fill(neu, WLEN, 301);
	lf_wrap(sn_agent_launch);
	lf_ops.memcpy = sn_memcpy;
	lf_ops.stream_query = sn_stream_query;
	dev->ops = &lf_ops;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(v); i++) {
		/* the write lands past the bytes of the answer's first copy (1 MiB) */
		size_t n = v[i].small ? 65536 : N, woff = v[i].small ? 32768 : 3 << 19;
		uint64_t addr, key;

		assert_int_equal(gdx_config_set("xport.tcp_copy_agent", v[i].agent ? "1" : "0"), 0);
		pair_open(&p, NULL, NULL);
		assert_int_equal(gdx_memcpy(dev, region, old, N), 0);
		assert_int_equal(gdx_xport_mr_reg(p.s, region, N, GDX_XPORT_ACCESS_REMOTE_READ |
						  GDX_XPORT_ACCESS_REMOTE_WRITE, &mr), 0);
		addr = gdx_xport_mr_addr(mr);
		key = gdx_xport_mr_key(mr);
		sn_ep = p.s;
		sn_lo = (uintptr_t)region;
		sn_hi = sn_lo + N;
		assert_int_equal(sem_init(&sn_go, 0, 0), 0);
		assert_int_equal(sem_init(&sn_done, 0, 0), 0);
		assert_int_equal(sem_init(&sn_busy, 0, 0), 0);
		atomic_store(&sn_post_ret, 1);
		atomic_store(&sn_blocked, 0);
		atomic_store(&sn_probes, 0);
		assert_int_equal(pthread_create(&th, NULL, sn_poster, NULL), 0);
		/* the agent's workers start with the first copies, and read it then */
		if (v[i].agent)
			assert_int_equal(gdx_config_set("emulated.agent_copy_us", "300000"), 0);
		atomic_store(&sn_slow, 1);
		atomic_store(v[i].small ? &sn_sync_armed : &sn_copy_armed, 1);
		memset(back, 0, n);
		assert_int_equal(gdx_xport_post_read(p.c, back, n, addr, key, 1, 0), 0);
		if (v[i].taken)
			assert_int_equal(sn_timedwait(&sn_busy, 10), 0);
		assert_int_equal(gdx_xport_post_write(p.c, neu, WLEN, addr + woff, key, 2, 0), 0);
		expect(p.cqc, 1, GDX_XPORT_OP_READ, 0, n);
		expect(p.cqc, 2, GDX_XPORT_OP_WRITE, 0, WLEN);
		pthread_join(th, NULL);
		assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
		assert_int_equal(atomic_load(&sn_probes), 1);
		assert_int_equal(atomic_load(&sn_post_ret), 0);
		blocked[i] = (char)atomic_load(&sn_blocked);
		assert_memory_equal(back, old, n);
		memcpy(want, old, N);
		memcpy(want + woff, neu, WLEN);
		assert_int_equal(gdx_memcpy(dev, back, region, N), 0);
		assert_memory_equal(back, want, N);
		/* the receive the other thread posted */
		assert_int_equal(gdx_xport_post_send(p.c, neu, 16, 3, 0), 0);
		expect(p.cqs, 77, GDX_XPORT_OP_RECV, 0, 16);
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, 16);
		assert_memory_equal(sn_rbuf, neu, 16);
		assert_int_equal(gdx_xport_mr_dereg(mr), 0);
		pair_close(&p);
		sem_destroy(&sn_go);
		sem_destroy(&sn_done);
		sem_destroy(&sn_busy);
		/* the region is old again */
		assert_int_equal(gdx_memcpy(dev, region, old, N), 0);
	}
	dev->ops = lf_real;
	gdx_config_reset();
	kfree(K_DEV, region);
	free(old);
	free(want);
	free(back);
	free(neu);
	for (size_t i = 0; i < GDX_ARRAY_SIZE(v); i++)
		if (blocked[i])
			snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "; %s", v[i].what);
	if (*msg)
		fail_msg("a post waited for the receive thread's copy or wait%s", msg);
}

/*
 * Copies that outlast the agent's stop timeout (2 s) at the disconnect: a
 * write into a device region and a send into a device receive, each copy
 * taking 1.5 s on the emulated device, the worker in the first when the
 * disconnect comes.  The endpoint keeps the receive's buffer and the region
 * until the worker has stopped: once the receive has completed and the
 * region is deregistered, nothing lands in them any more.
 */
void test_dev_agent_stuck(void **state)
{
	enum { SZ = 16384 };
	unsigned char *tx;
	char *dbuf, *dregion;
	const struct gdx_agent_desc *descs;
	struct gdx_xport_mr *mr;
	struct gdx_xport_cqe e;
	uint64_t t0;
	unsigned entries;
	struct pair p;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	tx = malloc(2 * SZ);
	assert_non_null(tx);
	dbuf = kalloc(K_DEV, SZ);
	dregion = kalloc(K_DEV, SZ);
	lf_wrap(al_agent_launch);
	al_n = 0;
	dev->ops = &lf_ops;
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_mr_reg(p.s, dregion, SZ, GDX_XPORT_ACCESS_REMOTE_WRITE, &mr),
			 0);
	assert_int_equal(gdx_xport_post_recv(p.s, dbuf, SZ, 1), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1500000"), 0);
	t_fill(tx, 2 * SZ, 81);
	assert_int_equal(gdx_xport_post_write(p.c, tx, SZ, gdx_xport_mr_addr(mr),
					      gdx_xport_mr_key(mr), 2, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, tx + SZ, SZ, 3, 0), 0);
	/* both copies posted (ring 0's first two descriptors), the worker in the first */
	for (int i = 0;; i++) {
		pthread_mutex_lock(&al_lock);
		descs = al_n ? (const struct gdx_agent_desc *)(uintptr_t)al_args[0].descs : NULL;
		entries = al_n ? al_args[0].entries : 0;
		pthread_mutex_unlock(&al_lock);
		if (descs && __atomic_load_n(&descs[1].w[4], __ATOMIC_ACQUIRE) >> 32 == 1 &&
		    __atomic_load_n(&descs[2 % entries].w[4], __ATOMIC_ACQUIRE) >> 32 == 2)
			break;
		assert_true(i < 1000);
		usleep(10000);
	}
	usleep(200000);
	t0 = gdx_now_ns();
	assert_int_equal(gdx_xport_disconnect(p.s), 0);
	get_cqe(p.cqs, &e);
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	/* given back: what the user puts there stays, past both copies' time */
	kfill(K_DEV, dbuf, SZ, 82);
	kfill(K_DEV, dregion, SZ, 83);
	while (gdx_now_ns() - t0 < 3500000000ull)
		usleep(100000);
	kcheck(K_DEV, dbuf, SZ, 82);
	kcheck(K_DEV, dregion, SZ, 83);
	for (int i = 0; i < 2; i++)
		get_cqe(p.cqc, &e);
	gdx_config_reset();
	pair_close_unwrap(&p);
	kfree(K_DEV, dbuf);
	kfree(K_DEV, dregion);
	free(tx);
}

static atomic_int stuck_said;

static void stuck_log(enum gdx_log_level level, const char *subsys, const char *msg, void *arg)
{
	(void)arg;
	if (level == GDX_LOG_ERROR && !strcmp(subsys, "stage") && strstr(msg, "not stopped"))
		atomic_fetch_add(&stuck_said, 1);
}

/*
 * A copy out of device memory for a send that still runs when the endpoint
 * disconnects (4 s on the emulated device; a wedged device's never ends, and
 * the agent's status says nothing of it): the transmit thread stops waiting
 * for it, and the teardown waits for the agent to stop, saying so at every
 * stop timeout (2 s), with the send's memory held until then.  Before, the
 * transmit thread spun until the copy landed and the disconnect waited in
 * silence (forever, for a wedged worker).
 */
void test_dev_send_copy_stuck(void **state)
{
	enum { SZ = 16384 };
	struct gdx_xport_cqe e;
	struct pair p;
	uint64_t t0;
	char *dbuf;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	dbuf = kalloc(K_DEV, SZ);
	kfill(K_DEV, dbuf, SZ, 91);
	pair_open(&p, NULL, NULL);
	/* read when the worker is launched: by the send's post, which starts the agent */
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "4000000"), 0);
	atomic_store(&stuck_said, 0);
	gdx_log_set_callback(stuck_log, NULL);
	assert_int_equal(gdx_xport_post_send(p.s, dbuf, SZ, 1, 0), 0);
	usleep(300000);
	t0 = gdx_now_ns();
	assert_int_equal(gdx_xport_disconnect(p.s), 0);
	get_cqe(p.cqs, &e);
	gdx_log_set_callback(NULL, NULL);
	gdx_config_reset();
	assert_int_equal(e.wr_id, 1);
	assert_int_equal(e.status, GDX_EDISCONNECTED);
	/* the stop timeout passed before the copy landed: said, not waited for in silence */
	assert_true(atomic_load(&stuck_said) >= 1);
	assert_true(gdx_now_ns() - t0 < 20000000000ull);
	pair_close(&p);
	kfree(K_DEV, dbuf);
}

/*
 * Copies the halted agent owed, made again by the transmit thread (sr_redo,
 * tx_chunk_wait): the client's transmit thread waits for the agent's copies
 * of frames it took when the receive side finds the agent failed and halts
 * it (tcp_on_halt).  To get there every time: the device counts agent copies from
 * a launch with emulated.agent_fault_after=0 (worker 0's, for a first receive
 * into the client's device memory, rd_open); then agent_fault_after=1 makes
 * the second copy of worker 1 (ring 1: copies out of device memory to send)
 * fault, so it and every later descriptor of that ring are never copied.  The
 * transmit thread is held in its wait (the agent's status asks the workers'
 * streams: rd_stream_query) from before that copy faults until the receive
 * side halted the agent, which it finds failed while a receive's copy keeps
 * it waiting (rd_halt): before, the transmit thread would find the fault
 * itself and end the connection.
 */
static struct gdx_agent_args rd_args;	/* the agent's rings, from its first launch */
static atomic_int rd_claim, rd_have, rd_armed, rd_held, rd_go;
static atomic_uint rd_gate;		/* hold once ring 1's descriptor of this seq is posted */

static int rd_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	int none = 0;

	if (stream && atomic_compare_exchange_strong(&rd_claim, &none, 1)) {
		rd_args = *a;
		atomic_store(&rd_have, 1);
	}
	return lf_real->agent_launch(priv, stream, a);
}

static int rd_posted(uint32_t seq)
{
	const struct gdx_agent_desc *d = (const struct gdx_agent_desc *)(uintptr_t)rd_args.descs +
					 rd_args.entries + (seq & (rd_args.entries - 1));

	return __atomic_load_n(&d->w[4], __ATOMIC_ACQUIRE) >> 32 == seq;
}

static uint32_t rd_worker_err(unsigned w)
{
	const struct gdx_agent_worker *wk = (const struct gdx_agent_worker *)(uintptr_t)
					    rd_args.workers + w;

	return __atomic_load_n(&wk->err, __ATOMIC_ACQUIRE);
}

static int rd_stream_query(void *priv, void *stream)
{
	char name[16] = "";
	unsigned gate = atomic_load(&rd_gate);

	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (!strcmp(name, "gdx-tcp-tx") && atomic_load(&rd_armed) &&
	    (!gate || (atomic_load(&rd_have) && rd_posted(gate))) &&
	    atomic_exchange(&rd_armed, 0)) {
		atomic_store(&rd_held, 1);
		while (!atomic_load(&rd_go))
			usleep(1000);
	}
	return lf_real->stream_query(priv, stream);
}

/* A pair whose client has its agent and a known copy count; dr: 2 * 4096 bytes. */
static void rd_open(struct pair *p, const struct gdx_xport_opts *o, char *dr)
{
	unsigned char tx[4096];

	atomic_store(&rd_claim, 0);
	atomic_store(&rd_have, 0);
	atomic_store(&rd_armed, 0);
	atomic_store(&rd_held, 0);
	atomic_store(&rd_go, 0);
	atomic_store(&rd_gate, 0);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
	lf_wrap(rd_agent_launch);
	lf_ops.stream_query = rd_stream_query;
	dev->ops = &lf_ops;
	pair_open(p, o, o);
	t_fill(tx, sizeof(tx), 90);
	assert_int_equal(gdx_xport_post_recv(p->c, dr, sizeof(tx), 1), 0);
	assert_int_equal(gdx_xport_post_send(p->s, tx, sizeof(tx), 1, 0), 0);
	expect(p->cqc, 1, GDX_XPORT_OP_RECV, 0, sizeof(tx));
	expect(p->cqs, 1, GDX_XPORT_OP_SEND, 0, sizeof(tx));
	kcheck(K_DEV, dr, sizeof(tx), 90);
	assert_int_equal(atomic_load(&rd_have), 1);
	/* read at each worker's launch: worker 1's first copy is the first counted */
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "250000"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "1"), 0);
}

/*
 * Once the transmit thread is held and worker 1 has faulted: a send into the
 * client's device memory (dr + 4096), whose copy (worker 0, relaunched) keeps
 * the receive thread waiting until it asks the agent's status and halts it.
 * Its receive completes after that, and the transmit thread goes on.
 */
static void rd_halt(struct pair *p, char *dr)
{
	unsigned char tx[4096];
	struct gdx_xport_cqe e;

	for (int i = 0; !atomic_load(&rd_held) || !rd_worker_err(1); i++) {
		assert_true(i < 2000);
		usleep(5000);
	}
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
	t_fill(tx, sizeof(tx), 91);
	assert_int_equal(gdx_xport_post_recv(p->c, dr, sizeof(tx), 2), 0);
	assert_int_equal(gdx_xport_post_send(p->s, tx, sizeof(tx), 2, 0), 0);
	get_cqe(p->cqc, &e);
	assert_int_equal(e.wr_id, 2);
	atomic_store(&rd_go, 1);
}

/* The server's completions: its send 2 (any status: rd_halt) among receives in order. */
static void rd_server_cqes(struct pair *p, uint64_t first, int n, const uint64_t *len)
{
	struct gdx_xport_cqe e;
	int got = 0, send = 0;

	while (got < n || !send) {
		get_cqe(p->cqs, &e);
		if (e.wr_id == 2 && e.op == GDX_XPORT_OP_SEND) {
			assert_false(send);
			send = 1;
			continue;
		}
		assert_int_equal(e.wr_id, first + (uint64_t)got);
		assert_int_equal(e.op, GDX_XPORT_OP_RECV);
		assert_int_equal(e.status, 0);
		assert_int_equal(e.len, len[got]);
		got++;
	}
}

/*
 * sr_redo: ring frames taken in one train (sends behind a fenced one held by
 * a read, as in dev_sends_behind_fence) whose copies the agent never made are
 * copied again through the stage stream into their room, and arrive intact.
 */
void test_dev_sends_redone_after_halt(void **state)
{
	enum { N = 8, SZ = 4096, BIG = 200000 };
	unsigned char *big, *rbig, *region, *back, *rx;
	struct gdx_xport_opts o = deep_opts(N + 8);
	uint64_t lens[N + 1];
	struct gdx_xport_mr *mr;
	struct sr_ctr base, c;
	struct pair p;
	char *src, *dr;

	(void)state;
	if (!tcp_on_emulated())
		skip();
	src = kalloc(K_DEV, (size_t)N * SZ);
	dr = kalloc(K_DEV, 2 * SZ);
	big = kalloc(K_HOST, BIG);
	rbig = kalloc(K_HOST, BIG);
	region = kalloc(K_HOST, SZ);
	back = kalloc(K_HOST, SZ);
	rx = kalloc(K_HOST, (size_t)N * SZ);
	kfill(K_DEV, src, (size_t)N * SZ, 71);
	kfill(K_HOST, big, BIG, 72);
	kfill(K_HOST, region, SZ, 73);
	/* the server holds the read behind a send beyond max_unexpected */
	o.max_unexpected = 64u << 10;
	sr_counters(&base);
	rd_open(&p, &o, dr);
	assert_int_equal(gdx_xport_mr_reg(p.s, region, SZ, GDX_XPORT_ACCESS_REMOTE_READ, &mr), 0);
	atomic_store(&rd_armed, 1);
	assert_int_equal(gdx_xport_post_send(p.c, big, BIG, 10, 0), 0);
	assert_int_equal(gdx_xport_post_read(p.c, back, SZ, gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 11, 0), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_post_send(p.c, src + (size_t)i * SZ, SZ, 100 + i,
						     i ? 0 : GDX_XPORT_FENCE), 0);
	lens[0] = BIG;
	assert_int_equal(gdx_xport_post_recv(p.s, rbig, BIG, 99), 0);
	for (int i = 0; i < N; i++) {
		lens[i + 1] = SZ;
		assert_int_equal(gdx_xport_post_recv(p.s, rx + (size_t)i * SZ, SZ, 100 + i), 0);
	}
	expect(p.cqc, 10, GDX_XPORT_OP_SEND, 0, BIG);
	expect(p.cqc, 11, GDX_XPORT_OP_READ, 0, SZ);
	rd_halt(&p, dr + SZ);
	for (int i = 0; i < N; i++)
		expect(p.cqc, 100 + i, GDX_XPORT_OP_SEND, 0, SZ);
	rd_server_cqes(&p, 99, N + 1, lens);
	kcheck(K_HOST, rbig, BIG, 72);
	kcheck(K_HOST, back, SZ, 73);
	kcheck(K_HOST, rx, (size_t)N * SZ, 71);
	/* all N in the train; the first one's copy landed unless the second shared its round */
	c = sr_since(&base);
	assert_true(c.redone == N - 1 || c.redone == N);
	assert_int_equal(c.recopied, 0);
	expect_none(p.cqs);
	expect_none(p.cqc);
	assert_int_equal(gdx_xport_mr_dereg(mr), 0);
	pair_close_unwrap(&p);
	gdx_config_reset();
	kfree(K_DEV, src);
	kfree(K_DEV, dr);
	kfree(K_HOST, big);
	kfree(K_HOST, rbig);
	kfree(K_HOST, region);
	kfree(K_HOST, back);
	kfree(K_HOST, rx);
}

/*
 * tx_chunk_wait: a send larger than a stage buffer goes through the stage
 * ring's halves chunk by chunk; the agent never made the copy of its second
 * chunk, which is made again through the stage stream, and the rest of the
 * payload through the stream too.
 */
void test_dev_large_send_recopied_after_halt(void **state)
{
	const size_t n = ((size_t)3 << 20) + 5;
	struct gdx_xport_opts o = deep_opts(8);
	struct sr_ctr base, c;
	unsigned char *hbig;
	uint64_t len = n;
	struct pair p;
	char *src, *dr;

	(void)state;
	if (!tcp_on_emulated() || max_msg < n)
		skip();
	src = kalloc(K_DEV, n);
	dr = kalloc(K_DEV, 2 * 4096);
	hbig = kalloc(K_HOST, n);
	kfill(K_DEV, src, n, 75);
	sr_counters(&base);
	rd_open(&p, &o, dr);
	/* held in the wait for the second chunk's copy (ring 1's second descriptor) */
	atomic_store(&rd_gate, 2);
	atomic_store(&rd_armed, 1);
	assert_int_equal(gdx_xport_post_recv(p.s, hbig, n, 10), 0);
	assert_int_equal(gdx_xport_post_send(p.c, src, n, 10, 0), 0);
	rd_halt(&p, dr + 4096);
	expect(p.cqc, 10, GDX_XPORT_OP_SEND, 0, n);
	rd_server_cqes(&p, 10, 1, &len);
	kcheck(K_HOST, hbig, n, 75);
	c = sr_since(&base);
	assert_int_equal(c.recopied, 1);
	assert_int_equal(c.redone, 0);
	expect_none(p.cqs);
	expect_none(p.cqc);
	pair_close_unwrap(&p);
	gdx_config_reset();
	kfree(K_DEV, src);
	kfree(K_DEV, dr);
	kfree(K_HOST, hbig);
}
