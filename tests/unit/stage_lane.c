/* SPDX-License-Identifier: MIT */
/*
 * test_stage: a lane's rings and modes, faults and halts, and watches
 * from other threads (the fixture is test_stage.c's, see stage_suite.h).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

#include "common/config.h"
#include "common/util.h"
#include "gpu/device.h"
#include "mem/stage.h"
#include "stage_suite.h"

/* Copies chunks from .. to - 1 (src's at i * CHUNK, to the device there), effect i behind each. */
static void put_defer(struct gdx_stage *st, int from, int to)
{
	uint64_t m = 0;

	for (int i = from; i < to; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
}

/* The agent faults on its fourth copy, each slow (20 ms): eight are all posted before it shows. */
static void agent_faults_fourth(void)
{
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "3"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
}

void byte_ring_wrap(void **state)
{
	struct gdx_byte_ring r = { .size = 100 };
	size_t n, skip, off;

	(void)state;
	/* fits */
	r.head = 1000;
	n = 30;
	assert_int_equal(gdx_byte_ring_place(&r, &n, 1, &skip), 0);
	assert_int_equal(skip, 0);
	/* would run past the end: the tail is skipped, one piece stays one copy */
	r.head = 1090;
	n = 20;
	off = gdx_byte_ring_place(&r, &n, 1, &skip);
	assert_int_equal(off, 0);
	assert_int_equal(skip, 10);
	assert_int_equal(n, 20);
	/* too large for the tail and the piece: up to the end */
	r.head = 1090;
	n = 100;
	off = gdx_byte_ring_place(&r, &n, 1, &skip);
	assert_int_equal(off, 90);
	assert_int_equal(skip, 0);
	assert_int_equal(n, 10);
	/* aligned: padded up to the next multiple */
	r.size = 256;
	r.head = ((uint64_t)1 << 40) + 10;
	n = 64;
	off = gdx_byte_ring_place(&r, &n, 64, &skip);
	assert_int_equal(off, 64);
	assert_int_equal(skip, 54);
	/* aligned, at the end: skipped to the start */
	r.head = ((uint64_t)1 << 40) + 200;
	n = 64;
	off = gdx_byte_ring_place(&r, &n, 64, &skip);
	assert_int_equal(off, 0);
	assert_int_equal(skip, 56);
	r.tail = r.head - 56;
	assert_int_equal(gdx_byte_ring_used(&r), 56);
}

/* Pieces start at multiples of align; the padding is room taken. */
void ring_aligned_skip(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_opts o;
	struct gdx_stage_span sp;
	struct gdx_stage *st;
	size_t size;
	char *base;

	(void)state;
	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = GDX_STAGE_WORD;
	o.chunk = CHUNK;
	o.chunks = 2;
	o.align = 64;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	base = gdx_stage_ring(st, &size);
	assert_int_equal(size, 2 * CHUNK);
	for (size_t off = 0, i = 0; i < 200; i++) {
		size_t n = 100 + i * 37 % 3000;

		assert_int_equal(gdx_stage_reserve(st, n, 0, &sp), 0);
		assert_int_equal(((char *)sp.p - base) % 64, 0);
		assert_true((char *)sp.p + sp.n <= base + size);
		assert_int_equal(sp.pos % 64, ((char *)sp.p - base) % 64);
		memcpy(sp.p, src + off, sp.n);
		assert_int_equal(gdx_stage_post(st, &sp, (char *)dbuf + off), 0);
		off += sp.n;
		if (i == 199) {
			assert_int_equal(gdx_stage_wait(st, sp.end), 0);
			check_dev(0, off);
		}
	}
	lane_ctx_close(st, ctx);
}

/* A ring of one chunk takes pieces of a chunk after an odd one: split at its end. */
void one_chunk_ring(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp;
	struct gdx_stage *st;
	struct rec r = { 0 };
	size_t off = 0;

	(void)state;
	for (int mode = GDX_STAGE_WORD; mode <= GDX_STAGE_SYNC; mode++) {
		off = 0;
		st = lane_open(ctx, (enum gdx_stage_mode)mode, GDX_STAGE_FAIL, 1, &r);
		for (int i = 0; i < 40; i++) {
			size_t n = i % 3 ? CHUNK : 1000;

			assert_int_equal(gdx_stage_reserve(st, n, 0, &sp), 0);
			assert_true(sp.n <= n && sp.n);
			memcpy(sp.p, src + off, sp.n);
			assert_int_equal(gdx_stage_post(st, &sp, (char *)dbuf + off), 0);
			off += sp.n;
		}
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		check_dev(0, off);
		gdx_stage_close(st);
	}
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * What one 4 KiB copy costs in each mode (docs/nvmf-host.md's table): with
 * events a record per 8 KiB of ring and a wait per idle spell, with a done
 * word a store per copy and no query, with batches a call per batch, with
 * the agent no device call at all.
 */
void modes_cadence(void **state)
{
	static const struct {
		enum gdx_stage_mode mode;
		unsigned batch;
		struct gdx_stage_stats want;
	} c[] = {
		{ GDX_STAGE_EVENTS, 1, { 64, 64, 32, 0, 64, 0, 0 } },
		{ GDX_STAGE_WORD, 1, { 64, 64, 64, 0, 0, 0, 0 } },
		/* a batch goes out at 4 copies or a chunk's worth of bytes (2 here) */
		{ GDX_STAGE_WORD, 4, { 64, 32, 32, 0, 0, 0, 0 } },
		{ GDX_STAGE_AGENT, 1, { 64, 0, 0, 0, 0, 0, 0 } },
	};
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);

	(void)state;
	for (unsigned k = 0; k < GDX_ARRAY_SIZE(c); k++) {
		struct gdx_stage_opts o;
		struct gdx_stage_stats s;
		struct gdx_stage *st;
		struct rec r = { 0 };

		gdx_stage_opts_init(&o, sizeof(o));
		o.mode = c[k].mode;
		o.batch = c[k].batch;
		o.chunk = 2 * CHUNK;
		o.chunks = 3;
		o.effect_size = sizeof(int);
		o.run = run;
		o.owner = &r;
		assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
		for (int i = 0; i < 64; i++) {
			uint64_t m = 0;

			assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
			/* batches: the reads of a burst complete together */
			if (c[k].batch > 1 && i % 4 != 3)
				continue;
			assert_int_equal(gdx_stage_defer(st, m, &i), 0);
			/* the socket ran dry */
			assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
			assert_int_equal(gdx_stage_deferred(st), 0);
		}
		gdx_stage_stats(st, &s);
		/* a done word's wait is a spin that may find the copy landed at once */
		if (o.mode != GDX_STAGE_EVENTS)
			s.waits = 0;
		assert_memory_equal(&s, &c[k].want, sizeof(s));
		assert_int_equal(r.n, c[k].batch > 1 ? 16 : 64);
		check_dev(0, 64 * CHUNK);
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		gdx_stage_close(st);
	}
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * The agent faults on its fourth copy: every effect runs, in order, those
 * behind the fault with its error; FALLBACK then goes on synchronously.
 */
void fault_effects_in_order(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	unsigned ok = 0;

	(void)state;
	agent_faults_fourth();
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 8, &r);
	put_defer(st, 0, 8);
	assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
	assert_int_equal(r.n, 8);
	for (unsigned i = 0; i < r.n; i++) {
		assert_int_equal(r.id[i], (int)i);
		if (!r.err[i])
			assert_int_equal(ok++, i);	/* the landed ones first */
	}
	assert_true(ok <= 3);
	assert_int_not_equal(gdx_stage_ctx_status(ctx), 0);
	/* the lane goes on synchronously, and lends its ring out */
	put_defer(st, 8, 12);
	assert_int_equal(r.n, 12);
	for (unsigned i = 8; i < 12; i++)
		assert_int_equal(r.err[i], 0);
	check_dev(8 * CHUNK, 4 * CHUNK);
	{
		void *b[2];
		size_t bsz;

		assert_int_equal(gdx_stage_halves(st, b, &bsz), 0);
		assert_int_equal(bsz, 4 * CHUNK);
	}
	lane_ctx_close(st, ctx);
}

struct halt_seen {
	struct rec *r;
	unsigned calls, failed_before;	/* effects run with an error when it was called */
	int err;
};

static void on_halt(void *owner, int err)
{
	struct halt_seen *h = owner;

	h->calls++;
	h->err = err;
	for (unsigned i = 0; i < h->r->n; i++)
		h->failed_before += h->r->err[i] != 0;
}

/*
 * The owner's halt hook runs once, with the fault, before the lane fails the
 * effects whose copies did not land (tcp moves its transmit side off the
 * agent there, before a failed receive is reported).
 */
void on_halt_before_effects(void **state)
{
	struct gdx_stage_ctx_opts co;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	struct halt_seen h = { .r = &r };
	unsigned failed = 0;

	(void)state;
	agent_faults_fourth();
	gdx_stage_ctx_opts_init(&co, sizeof(co));
	co.agent = true;
	co.workers = 1;
	co.on_halt = on_halt;
	co.owner = &h;
	assert_int_equal(gdx_stage_ctx_open(dev, &co, &ctx), 0);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 8, &r);
	put_defer(st, 0, 8);
	assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
	assert_int_equal(r.n, 8);
	for (unsigned i = 0; i < r.n; i++)
		failed += r.err[i] != 0;
	assert_true(failed > 0);
	assert_int_equal(h.calls, 1);
	assert_int_equal(h.failed_before, 0);
	assert_int_equal(h.err, gdx_stage_ctx_status(ctx));
	assert_int_not_equal(h.err, 0);
	/* a later fail (the teardown's) does not call it again */
	assert_int_equal(gdx_stage_ctx_fail(ctx, -ESHUTDOWN), h.err);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	assert_int_equal(h.calls, 1);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* FAIL: the error comes back from every call; drain fails what did not land. */
void fail_policy(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	int rc;

	(void)state;
	agent_faults_fourth();
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 8, &r);
	put_defer(st, 0, 6);
	rc = gdx_stage_wait_idle(st, NULL, NULL, 0);
	assert_true(rc < 0);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, 0, &(struct gdx_stage_span){ 0 }), rc);
	assert_int_equal(gdx_stage_progress(st), rc);
	assert_int_equal(gdx_stage_drain(st, -EIO), rc);
	assert_int_equal(r.n, 6);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(r.id[i], (int)i);
		assert_true(r.err[i] == 0 || r.err[i] == -EIO);
	}
	assert_int_equal(r.err[5], -EIO);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A post whose worker launch fails: its copy may still be made by a worker,
 * so its room stays taken and the ring is not lent out until the halt.
 */
void launch_fails_memory_held(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage *st;
	struct rec r = { 0 };
	void *b[2];
	size_t bsz;
	uint64_t m = 0;
	int one = 1;

	(void)state;
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 2, &r);
	atomic_store(&fail_launch, 1);
	assert_int_equal(put(st, 0, CHUNK, &m), GDX_EDRIVER);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, 0, &(struct gdx_stage_span){ 0 }),
			 GDX_EDRIVER);
	assert_false(gdx_stage_landed(st, CHUNK));
	assert_int_equal(gdx_stage_halves(st, b, &bsz), -EBUSY);
	assert_int_equal(gdx_stage_defer(st, CHUNK, &one), 0);
	assert_int_equal(gdx_stage_drain(st, -EIO), GDX_EDRIVER);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.err[0], -EIO);
	/* halted: no worker can make it any more */
	assert_int_equal(gdx_stage_halves(st, b, &bsz), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * FALLBACK: the call that finds the fault with a piece in hand fails that
 * piece (tcp fails the receive it was for) and leaves the device untouched;
 * the next piece goes synchronously.  Found by a post whose launch fails, and
 * by a reserve or post after another lane halted the context.
 */
void fallback_piece_in_hand(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;

	(void)state;
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 2, &r);
	atomic_store(&fail_launch, 1);
	assert_int_equal(put(st, 0, CHUNK, &m), GDX_EDRIVER);
	atomic_store(&fail_launch, 0);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_SYNC);
	assert_int_equal(gdx_memcpy(dev, back, dbuf, CHUNK), 0);
	for (unsigned i = 0; i < CHUNK; i++)
		assert_int_equal(back[i], 0);
	assert_int_equal(put(st, CHUNK, CHUNK, &m), 0);
	assert_true(gdx_stage_landed(st, m));
	check_dev(CHUNK, CHUNK);
	lane_ctx_close(st, ctx);

	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "30000"), 0);
	ctx = ctx_open(true, 2);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 2, &r);
	assert_int_equal(put(st, 2 * CHUNK, CHUNK, &m), 0);
	assert_int_equal(put(st, 3 * CHUNK, CHUNK, &m), 0);
	assert_int_equal(gdx_stage_ctx_fail(ctx, -EIO), -EIO);
	/* found by the reserve (ring full) or the post (agent halted) */
	assert_int_equal(put(st, 4 * CHUNK, CHUNK, &m), -EIO);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_SYNC);
	assert_int_equal(put(st, 5 * CHUNK, CHUNK, &m), 0);
	check_dev(5 * CHUNK, CHUNK);
	lane_ctx_close(st, ctx);
}

/* Halted by another lane with copies in flight: REDO makes them again. */
void redo_after_halt(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_stats s;
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;
	int rc;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "30000"), 0);
	ctx = ctx_open(true, 2);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_REDO, 8, &r);
	for (int i = 0; i < 8; i++)
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
	assert_int_equal(gdx_stage_ctx_fail(ctx, GDX_EDRIVER), GDX_EDRIVER);
	rc = gdx_stage_wait(st, m);
	assert_in_range(rc, 1, 8);
	gdx_stage_stats(st, &s);
	assert_int_equal(s.redone, (uint64_t)rc);
	check_dev(0, 8 * CHUNK);
	/* then synchronously */
	assert_int_equal(put(st, 8 * CHUNK, CHUNK, &m), 0);
	assert_true(gdx_stage_landed(st, m));
	check_dev(8 * CHUNK, CHUNK);
	lane_ctx_close(st, ctx);
}

/* Another lane halted the context: FALLBACK fails what did not land and goes on. */
void fallback_after_fault(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *a, *b;
	struct rec ra = { 0 }, rb = { 0 };
	uint64_t m = 0;
	unsigned failed = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "30000"), 0);
	ctx = ctx_open(true, 2);
	a = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 2, &ra);
	{
		struct gdx_stage_opts o;

		gdx_stage_opts_init(&o, sizeof(o));
		o.mode = GDX_STAGE_AGENT;
		o.fault = GDX_STAGE_FALLBACK;
		o.chunk = CHUNK;
		o.chunks = 8;
		o.lane = 1;
		o.effect_size = sizeof(int);
		o.run = run;
		o.owner = &rb;
		assert_int_equal(gdx_stage_open(ctx, &o, &b), 0);
	}
	put_defer(b, 0, 6);
	assert_int_equal(gdx_stage_ctx_fail(ctx, GDX_EDRIVER), GDX_EDRIVER);
	assert_int_equal(gdx_stage_wait_idle(b, NULL, NULL, 0), 0);
	assert_int_equal(rb.n, 6);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(rb.id[i], (int)i);
		failed += rb.err[i] == GDX_EDRIVER;
	}
	assert_true(failed >= 1);
	assert_int_equal(rb.err[5], GDX_EDRIVER);
	for (int i = 6; i < 10; i++) {
		assert_int_equal(put(b, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(b, m, &i), 0);
		assert_int_equal(rb.err[i], 0);
	}
	check_dev(6 * CHUNK, 4 * CHUNK);
	/* the FAIL lane sees the fault */
	assert_int_equal(put(a, 20 * CHUNK, CHUNK, &m), GDX_EDRIVER);
	assert_int_equal(gdx_stage_drain(a, -EIO), GDX_EDRIVER);
	assert_int_equal(gdx_stage_drain(b, -EIO), 0);
	gdx_stage_close(a);
	gdx_stage_close(b);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A worker that takes 1.5 s per copy, given up on: drain halts the agent and
 * returns only once it has stopped (the ring's memory held), saying each
 * stop timeout.
 */
void drain_stuck_worker(void **state)
{
	struct gdx_stage_ctx_opts co;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	int stop = 0, one = 1;
	uint64_t m = 0, t0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1500000"), 0);
	gdx_stage_ctx_opts_init(&co, sizeof(co));
	co.agent = true;
	co.workers = 1;
	co.stop_timeout_ms = 200;
	assert_int_equal(gdx_stage_ctx_open(dev, &co, &ctx), 0);
	st = lane_open_abort(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 2, &r, &stop);
	assert_int_equal(put(st, 0, CHUNK, &m), 0);
	assert_int_equal(gdx_stage_defer(st, m, &one), 0);
	/* let the worker take it */
	usleep(100000);
	t0 = now_ms();
	stop = 1;
	assert_int_equal(gdx_stage_drain(st, GDX_EDISCONNECTED), GDX_EDISCONNECTED);
	assert_true(now_ms() - t0 >= 1000);
	assert_true(atomic_load(&halt_timeouts) >= 2);
	assert_int_equal(r.n, 1);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* A wait on a copy that does not land ends on the abort word, and faults nothing. */
void wait_abort(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	pthread_t t;
	int stop = 0;
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1000000"), 0);
	ctx = ctx_open(true, 1);
	st = lane_open_abort(ctx, GDX_STAGE_AGENT, GDX_STAGE_REDO, 2, NULL, &stop);
	assert_int_equal(put(st, 0, CHUNK, &m), 0);
	assert_int_equal(pthread_create(&t, NULL, raise_later, &stop), 0);
	assert_int_equal(gdx_stage_wait(st, m), GDX_EDISCONNECTED);
	/* ended by the word, not by the copy (1 s) */
	assert_true((int32_t)(__atomic_load_n(st->word, __ATOMIC_ACQUIRE) - st->seq) < 0);
	pthread_join(t, NULL);
	assert_int_equal(gdx_stage_ctx_status(ctx), 0);
	assert_int_equal(gdx_stage_watch(st, m), GDX_EDISCONNECTED);
	stop = 0;
	assert_int_equal(gdx_stage_wait(st, m), 0);
	check_dev(0, CHUNK);
	lane_ctx_close(st, ctx);
}

struct failer {
	struct gdx_stage_ctx *ctx;
	const uint32_t *word;
	int err, got;
	bool moved;
	pthread_barrier_t *go;
};

/* Fails the context; once that returns no worker runs: the done word stays. */
static void *fail_thread(void *arg)
{
	struct failer *f = arg;
	uint32_t w;

	pthread_barrier_wait(f->go);
	f->got = gdx_stage_ctx_fail(f->ctx, f->err);
	w = __atomic_load_n(f->word, __ATOMIC_ACQUIRE);
	usleep(60000);
	f->moved = __atomic_load_n(f->word, __ATOMIC_ACQUIRE) != w;
	return NULL;
}

/* Two threads fail the context at once: one fault, one halt, both return halted. */
void fail_twice_concurrent(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	pthread_barrier_t go;
	struct failer f[2];
	pthread_t t[2];
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 8, &r);
	for (int i = 0; i < 8; i++)
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
	pthread_barrier_init(&go, NULL, 2);
	for (int i = 0; i < 2; i++) {
		f[i] = (struct failer){ ctx, st->word, i ? -EIO : GDX_EDRIVER, 0, false, &go };
		assert_int_equal(pthread_create(&t[i], NULL, fail_thread, &f[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	assert_int_equal(f[0].got, f[1].got);
	assert_true(f[0].got == -EIO || f[0].got == GDX_EDRIVER);
	assert_int_equal(gdx_stage_ctx_fault_gen(ctx), 1);
	assert_false(f[0].moved);
	assert_false(f[1].moved);
	assert_int_equal(gdx_stage_drain(st, -EIO), f[0].got);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

struct watcher {
	struct gdx_stage *st;
	uint64_t mark;
	int rc;
};

static void *watch_thread(void *arg)
{
	struct watcher *w = arg;

	w->rc = gdx_stage_watch(w->st, w->mark);
	if (!w->rc)
		w->rc = gdx_memcpy(dev, back, dbuf, 16 * CHUNK);
	return NULL;
}

/* Another thread sees a mark landed once the producer learnt it, and the bytes with it. */
void landed_other_thread(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage *st;
	struct watcher w;
	struct rec r = { 0 };
	pthread_t t;
	uint64_t m = 0;

	(void)state;
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 4, &r);
	for (int i = 0; i < 16; i++)
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
	w = (struct watcher){ st, m, -1 };
	assert_int_equal(pthread_create(&t, NULL, watch_thread, &w), 0);
	while (!gdx_stage_landed(st, m))
		assert_int_equal(gdx_stage_progress(st), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, 0);
	assert_memory_equal(back, src, 16 * CHUNK);
	lane_ctx_close(st, ctx);
}

struct watch_alone {
	struct gdx_stage *st;
	uint64_t mark;
	_Atomic int rc, done;
};

static void *watch_alone_thread(void *arg)
{
	struct watch_alone *w = arg;

	atomic_store(&w->rc, gdx_stage_watch(w->st, w->mark));
	atomic_store(&w->done, 1);
	return NULL;
}

/*
 * Watches mark on st from another thread, the producer not looking: a watch
 * still spinning after 5 s is ended by raising *stop (the test then fails on
 * what it returns).  Returns the watch's result, *stop raised.
 */
static int watch_alone(struct gdx_stage *st, uint64_t mark, int *stop)
{
	struct watch_alone w = { .st = st, .mark = mark };
	uint64_t until;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, watch_alone_thread, &w), 0);
	for (until = now_ms() + 5000; !atomic_load(&w.done) && now_ms() < until;)
		usleep(1000);
	__atomic_store_n(stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	return atomic_load(&w.rc);
}

/*
 * Another thread's wait ends once the copies landed though the producer does
 * not look (tcp's receive thread waits so on copies the lock holder posted,
 * and the holder may be waiting on it): with a done word the watcher reads
 * it itself.
 */
void watch_without_producer(void **state)
{
	static const enum gdx_stage_mode modes[] = { GDX_STAGE_AGENT, GDX_STAGE_WORD };

	(void)state;
	for (unsigned k = 0; k < GDX_ARRAY_SIZE(modes); k++) {
		struct gdx_stage_ctx *ctx = ctx_open(modes[k] == GDX_STAGE_AGENT, 1);
		struct gdx_stage *st;
		uint64_t m = 0;
		int stop = 0;

		st = lane_open_abort(ctx, modes[k], GDX_STAGE_FAIL, 8, NULL, &stop);
		assert_int_equal(gdx_stage_mode_of(st), modes[k]);
		/* fewer copies than chunks: reserve never waits, so never learns */
		for (int i = 0; i < 4; i++)
			assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(watch_alone(st, m, &stop), 0);
		/* the producer has not learnt it: the watcher read the word */
		assert_false(gdx_stage_landed(st, m));
		check_dev(0, 4 * CHUNK);
		stop = 0;
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		assert_true(gdx_stage_landed(st, m));
		gdx_stage_close(st);
		assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	}
}

/*
 * A stream lane's watcher asks the stream itself: one whose done word never
 * comes (the stores dropped here) ends once the stream is idle, every copy
 * landed (0), or with the stream's error; it does not spin until the abort
 * word (tcp's connection end) for copies that landed or never will.
 */
void watch_stream_asked(void **state)
{
	static const int errs[] = { 0, GDX_EDRIVER };

	(void)state;
	for (unsigned k = 0; k < GDX_ARRAY_SIZE(errs); k++) {
		struct gdx_stage_ctx *ctx = ctx_open(false, 1);
		struct gdx_stage *st;
		uint64_t m = 0;
		int stop = 0;

		st = lane_open_abort(ctx, GDX_STAGE_WORD, GDX_STAGE_FAIL, 8, NULL, &stop);
		assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_WORD);
		atomic_store(&drop_words, 1);
		for (int i = 0; i < 4; i++)
			assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		atomic_store(&query_err, errs[k]);
		assert_int_equal(watch_alone(st, m, &stop), errs[k]);
		atomic_store(&query_err, 0);
		atomic_store(&drop_words, 0);
		stop = 0;
		/* no word came: the drain waits for the stream */
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		check_dev(0, 4 * CHUNK);
		gdx_stage_close(st);
		assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	}
}

/* No memory to queue an effect: it waits for the copies, then runs behind the others. */
void defer_nomem(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
	st = lane_open(ctx, GDX_STAGE_EVENTS, GDX_STAGE_FAIL, 128, &r);
	put_defer(st, 0, 64);
	assert_int_equal(put(st, 64 * CHUNK, CHUNK, &m), 0);
	atomic_store(&fail_malloc, 1);
	assert_int_equal(gdx_stage_defer(st, m, &(int){ 64 }), 0);
	assert_int_equal(atomic_load(&fail_malloc), 0);
	assert_int_equal(r.n, 65);
	for (unsigned i = 0; i < 65; i++) {
		assert_int_equal(r.id[i], (int)i);
		assert_int_equal(r.err[i], 0);
	}
	assert_int_equal(gdx_stage_deferred(st), 0);
	check_dev(0, 65 * CHUNK);
	lane_ctx_close(st, ctx);
}

/*
 * A lane opened again on an agent ring (an NVMe/TCP reconnect) goes on from
 * the ring's done word: its worker, launched again after idling, looks for
 * the seq after it.
 */
void adopt_ring_after_reopen(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;

	(void)state;
	for (int round = 0; round < 3; round++) {
		st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 4, &r);
		for (int i = 0; i < 5; i++)
			assert_int_equal(put(st, (size_t)(round * 5 + i) * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_wait(st, m), 0);
		check_dev((size_t)round * 5 * CHUNK, 5 * CHUNK);
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		gdx_stage_close(st);
		/* the worker goes idle and ends (idle_us 2000) */
		usleep(20000);
	}
	/* no copy of an earlier round was made again over the bytes it left */
	check_dev(0, 15 * CHUNK);
	assert_int_equal(gdx_stage_ctx_status(ctx), 0);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A done word's seqs wrap past 2^32: marks compare by their distance.  The
 * stream is held on a gate, so nothing may be seen landed before it opens.
 */
void mark_seq_wrap(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint32_t *gate;
	uint64_t m[16];

	(void)state;
	st = lane_open(ctx, GDX_STAGE_WORD, GDX_STAGE_FAIL, 16, &r);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_WORD);
	assert_int_equal(gdx_stream_synchronize(st->stream), 0);
	st->seq = UINT32_MAX - 7;
	__atomic_store_n(st->word, st->seq, __ATOMIC_RELEASE);
	assert_int_equal(gdx_pinned_alloc(dev, sizeof(*gate), (void **)&gate), 0);
	*gate = 0;
	assert_int_equal(gdx_stream_wait_value32(st->stream, gate, 1), 0);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m[i]), 0);
		assert_int_equal(gdx_stage_defer(st, m[i], &i), 0);
		assert_int_equal(gdx_stage_progress(st), 0);
	}
	/* seqs 2^32 - 6 .. 8: none landed while the stream waits */
	assert_int_equal(st->seq, 8);
	assert_false(gdx_stage_landed(st, m[0]));
	assert_int_equal(r.n, 0);
	/* once the stream is through, reading the word (seq 8) lands them all */
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
	assert_int_equal(gdx_stream_synchronize(st->stream), 0);
	assert_int_equal(gdx_stage_progress(st), 0);
	assert_int_equal(r.n, 16);
	for (unsigned i = 0; i < 16; i++)
		assert_int_equal(r.id[i], (int)i);
	check_dev(0, 16 * CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_pinned_free(dev, gate), 0);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A lane synchronous from the start (the NVMe/RDMA host's write side): a
 * copy that fails (a span past its device allocation) fails its piece
 * only; the next reservation and copy succeed, each direction.
 */
void sync_copy_fault_piece(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	char *bad = (char *)dbuf + BIG - CHUNK / 2;	/* runs past the allocation */
	struct gdx_stage_span sp;
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, CHUNK), 0);
	for (int dir = GDX_STAGE_H2D; dir <= GDX_STAGE_D2H; dir++) {
		gdx_stage_opts_init(&o, sizeof(o));
		o.dir = dir;
		o.mode = GDX_STAGE_SYNC;
		o.fault = GDX_STAGE_FAIL;
		o.chunk = CHUNK;
		o.chunks = 2;
		assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp), 0);
			assert_int_equal(gdx_stage_post(st, &sp, bad), GDX_EBADPTR);
			gdx_stage_unreserve(st, &sp);
		}
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp), 0);
		if (dir == GDX_STAGE_H2D)
			memcpy(sp.p, src + CHUNK, CHUNK);
		assert_int_equal(gdx_stage_post(st, &sp, dir == GDX_STAGE_H2D ?
					       (char *)dbuf + CHUNK : dbuf), 0);
		assert_true(gdx_stage_landed(st, sp.end));
		if (dir == GDX_STAGE_D2H) {
			assert_memory_equal(sp.p, src, CHUNK);
			gdx_stage_release(st, sp.end);
		}
		assert_int_equal(gdx_stage_progress(st), 0);
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
		gdx_stage_close(st);
	}
	check_dev(CHUNK, CHUNK);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* D2H: room comes back when the consumer releases it, in order. */
void d2h_release_order(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[3];
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, 4 * CHUNK), 0);
	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = GDX_STAGE_D2H;
	o.mode = GDX_STAGE_SYNC;
	o.chunk = CHUNK;
	o.chunks = 2;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
		assert_int_equal(gdx_stage_post(st, &sp[i], (char *)dbuf + i * CHUNK), 0);
		assert_true(gdx_stage_landed(st, sp[i].end));
		assert_memory_equal(sp[i].p, src + i * CHUNK, CHUNK);
	}
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[2]), -EAGAIN);
	gdx_stage_release(st, sp[0].end);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[2]), 0);
	assert_ptr_equal(sp[2].p, sp[0].p);
	gdx_stage_unreserve(st, &sp[2]);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[2]), 0);
	assert_int_equal(sp[2].pos, 2 * CHUNK);
	assert_int_equal(gdx_stage_post(st, &sp[2], dbuf), 0);
	/* all given back: the next piece starts at the ring's beginning, whole */
	gdx_stage_release(st, sp[2].end);
	assert_int_equal(gdx_stage_reserve(st, 100, GDX_STAGE_NOWAIT, &sp[0]), 0);
	assert_int_equal(gdx_stage_post(st, &sp[0], dbuf), 0);
	gdx_stage_release(st, sp[0].end);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[1]), 0);
	assert_ptr_equal(sp[1].p, gdx_stage_ring(st, NULL));
	assert_int_equal(sp[1].n, CHUNK);
	lane_ctx_close(st, ctx);
}

/*
 * An agent that cannot start: the caller that requires one gets its start
 * error and no context (tcp: its stream path, said with that error); one
 * that does not gets a stream-only context whose lanes run on streams (the
 * NVMe/TCP host), and an AGENT lane on it is refused.
 */
void ctx_open_agent_error(void **state)
{
	struct gdx_stage_ctx_opts o;
	struct gdx_stage_ctx *ctx = NULL;
	struct gdx_stage *st;
	struct rec r = { 0 };
	struct gdx_stage_opts lo;
	uint64_t m = 0;

	(void)state;
	atomic_store(&fail_start, 1);
	gdx_stage_ctx_opts_init(&o, sizeof(o));
	o.agent = true;
	o.agent_required = true;
	assert_int_equal(gdx_stage_ctx_open(dev, &o, &ctx), -ENOEXEC);
	assert_null(ctx);
	o.agent_required = false;
	assert_int_equal(gdx_stage_ctx_open(dev, &o, &ctx), 0);
	assert_false(gdx_stage_ctx_has_agent(ctx));
	gdx_stage_opts_init(&lo, sizeof(lo));
	lo.mode = GDX_STAGE_AGENT;
	lo.chunk = CHUNK;
	assert_int_equal(gdx_stage_open(ctx, &lo, &st), -EINVAL);
	st = lane_open(ctx, GDX_STAGE_WORD, GDX_STAGE_FAIL, 2, &r);
	assert_int_equal(put(st, 0, CHUNK, &m), 0);
	assert_int_equal(gdx_stage_wait(st, m), 0);
	check_dev(0, CHUNK);
	lane_ctx_close(st, ctx);
	/* the start works again: required or not, the agent */
	atomic_store(&fail_start, 0);
	o.agent_required = true;
	assert_int_equal(gdx_stage_ctx_open(dev, &o, &ctx), 0);
	assert_true(gdx_stage_ctx_has_agent(ctx));
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A producer posts what came (gdx_stage_trim): the last reservation gives
 * the room past it back at once, an earlier one keeps it until its mark;
 * every trimmed piece lands whole, through the agent.
 */
void trim_gives_room_back(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage *st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 4, NULL);
	const size_t q = CHUNK / 8;
	struct gdx_stage_span sp[4];
	uint64_t end2;

	(void)state;
	assert_int_equal(gdx_stage_reserve(st, CHUNK, 0, &sp[0]), 0);
	memcpy(sp[0].p, src, 2 * q);
	gdx_stage_trim(st, &sp[0], 2 * q);
	assert_int_equal(sp[0].n, 2 * q);
	assert_true(sp[0].end == sp[0].pos + 2 * q);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, 0, &sp[1]), 0);
	/* the rest of the first chunk came back: the next piece starts in it */
	assert_true(sp[1].pos >= sp[0].end && sp[1].pos < sp[0].pos + CHUNK);
	memcpy(sp[1].p, src + 2 * q, CHUNK);
	assert_int_equal(gdx_stage_post(st, &sp[0], dbuf), 0);
	assert_int_equal(gdx_stage_post(st, &sp[1], (char *)dbuf + 2 * q), 0);

	/* not the last reservation: it keeps its room (its end) until its mark */
	assert_int_equal(gdx_stage_reserve(st, 4 * q, 0, &sp[2]), 0);
	assert_int_equal(gdx_stage_reserve(st, q, 0, &sp[3]), 0);
	end2 = sp[2].end;
	gdx_stage_trim(st, &sp[2], q);
	assert_int_equal(sp[2].n, q);
	assert_true(sp[2].end == end2);
	/* asking for more than the piece holds changes nothing */
	gdx_stage_trim(st, &sp[3], 2 * q);
	assert_int_equal(sp[3].n, q);
	memcpy(sp[2].p, src + 10 * q, q);
	memcpy(sp[3].p, src + 11 * q, q);
	assert_int_equal(gdx_stage_post(st, &sp[2], (char *)dbuf + 10 * q), 0);
	assert_int_equal(gdx_stage_post(st, &sp[3], (char *)dbuf + 11 * q), 0);
	assert_int_equal(gdx_stage_wait(st, sp[3].end), 0);
	check_dev(0, 12 * q);
	lane_ctx_close(st, ctx);
}
