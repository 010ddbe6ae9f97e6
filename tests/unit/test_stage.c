/* SPDX-License-Identifier: MIT */
/*
 * The staging module (src/mem/stage.c) on the emulated device, each state
 * reached directly: the device's operations are wrapped to fail a launch or
 * count set-up calls, the agent's workers fault or copy slowly through the
 * emulated.agent_* knobs, and malloc fails on demand (--wrap=malloc).
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

#define CHUNK 4096u
#define BIG (1u << 20)

static struct gdx_device *dev;
static const struct gdx_device_ops *real;
static struct gdx_device_ops wrapped;
static void *dbuf;		/* BIG bytes of device memory */
static unsigned char *src, *back;

/* ---- wrapped device operations ---------------------------------------- */

static _Atomic int setup_calls;	/* streams, events, pinned memory, agent starts */
static _Atomic int fail_launch;	/* worker launches fail */
static _Atomic int fail_start;	/* agent starts (the module's load) fail */
static _Atomic int drop_words;	/* stream stores of a done word are dropped */
static _Atomic int query_err;	/* nonzero: stream queries report it */

static int w_stream_create(void *priv, void *stream, void *native)
{
	atomic_fetch_add(&setup_calls, 1);
	return real->stream_create(priv, stream, native);
}

static int w_event_create(void *priv, void *event, unsigned flags)
{
	atomic_fetch_add(&setup_calls, 1);
	return real->event_create(priv, event, flags);
}

static int w_pinned_alloc(void *priv, size_t size, void **p)
{
	atomic_fetch_add(&setup_calls, 1);
	return real->pinned_alloc(priv, size, p);
}

static int w_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	if (!stream && atomic_load(&fail_start))
		return -ENOEXEC;
	if (!stream)
		atomic_fetch_add(&setup_calls, 1);
	else if (atomic_load(&fail_launch))
		return GDX_EDRIVER;
	return real->agent_launch(priv, stream, a);
}

static int w_stream_write_value32(void *priv, void *stream, uint32_t *addr, uint32_t value)
{
	if (atomic_load(&drop_words))
		return 0;
	return real->stream_write_value32(priv, stream, addr, value);
}

static int w_stream_query(void *priv, void *stream)
{
	int err = atomic_load(&query_err);

	return err ? err : real->stream_query(priv, stream);
}

/* ---- malloc that fails on demand ---------------------------------------- */

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static _Atomic int fail_malloc;

void *__wrap_malloc(size_t n)
{
	int one = 1;

	if (atomic_compare_exchange_strong(&fail_malloc, &one, 0))
		return NULL;
	return __real_malloc(n);
}

/* ---- logs ---------------------------------------------------------------- */

static _Atomic int halt_timeouts;

static void log_cb(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)arg;
	if (strstr(msg, "did not stop"))
		atomic_fetch_add(&halt_timeouts, 1);
}

/* ---- effects -------------------------------------------------------------- */

struct rec {
	unsigned n, ends;
	int id[512], err[512];
};

static void run(void *owner, void *effect, int err)
{
	struct rec *r = owner;

	if (!effect) {
		r->ends++;
		return;
	}
	assert_true(r->n < GDX_ARRAY_SIZE(r->id));
	r->id[r->n] = *(int *)effect;
	r->err[r->n++] = err;
}

/* ---- helpers -------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	return gdx_now_ns() / 1000000;
}

static struct gdx_stage_ctx *ctx_open(bool agent, unsigned lanes)
{
	struct gdx_stage_ctx_opts o;
	struct gdx_stage_ctx *ctx;

	gdx_stage_ctx_opts_init(&o, sizeof(o));
	o.agent = agent;
	o.lanes = lanes;
	o.workers = 1;
	assert_int_equal(gdx_stage_ctx_open(dev, &o, &ctx), 0);
	assert_int_equal(gdx_stage_ctx_has_agent(ctx), agent);
	return ctx;
}

static struct gdx_stage *lane_open(struct gdx_stage_ctx *ctx, enum gdx_stage_mode mode,
				   enum gdx_stage_fault fault, unsigned chunks, struct rec *r)
{
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = mode;
	o.fault = fault;
	o.chunk = CHUNK;
	o.chunks = chunks;
	o.effect_size = sizeof(int);
	o.run = run;
	o.owner = r;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	return st;
}

/* Copies src[off, off + n) to the device at off through the lane; returns its mark. */
static int put(struct gdx_stage *st, size_t off, size_t n, uint64_t *mark)
{
	struct gdx_stage_span sp;
	int rc = gdx_stage_reserve(st, n, 0, &sp);

	if (rc)
		return rc;
	assert_int_equal(sp.n, n);
	memcpy(sp.p, src + off, n);
	*mark = sp.end;
	return gdx_stage_post(st, &sp, (char *)dbuf + off);
}

static void check_dev(size_t off, size_t n)
{
	assert_int_equal(gdx_memcpy(dev, back, (char *)dbuf + off, n), 0);
	assert_memory_equal(back, src + off, n);
}

static int setup(void **state)
{
	(void)state;
	gdx_config_reset();
	atomic_store(&fail_launch, 0);
	atomic_store(&fail_start, 0);
	atomic_store(&drop_words, 0);
	atomic_store(&query_err, 0);
	atomic_store(&fail_malloc, 0);
	atomic_store(&halt_timeouts, 0);
	t_fill(src, BIG, 7);
	return gdx_memset(dev, dbuf, 0, BIG);
}

static int teardown(void **state)
{
	(void)state;
	gdx_config_reset();
	return 0;
}

/* ---- tests ---------------------------------------------------------------- */

static void byte_ring_wrap(void **state)
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
static void ring_aligned_skip(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* A ring of one chunk takes pieces of a chunk after an odd one: split at its end. */
static void one_chunk_ring(void **state)
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
static void modes_cadence(void **state)
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
static void fault_effects_in_order(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	unsigned ok = 0;
	uint64_t m = 0;

	(void)state;
	/* slow: all eight are posted before the fault shows */
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "3"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 8, &r);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
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
	for (int i = 8; i < 12; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
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
static void on_halt_before_effects(void **state)
{
	struct gdx_stage_ctx_opts co;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	struct halt_seen h = { .r = &r };
	unsigned failed = 0;
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "3"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	gdx_stage_ctx_opts_init(&co, sizeof(co));
	co.agent = true;
	co.workers = 1;
	co.on_halt = on_halt;
	co.owner = &h;
	assert_int_equal(gdx_stage_ctx_open(dev, &co, &ctx), 0);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FALLBACK, 8, &r);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
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
static void fail_policy(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;
	int rc;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "3"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	ctx = ctx_open(true, 1);
	st = lane_open(ctx, GDX_STAGE_AGENT, GDX_STAGE_FAIL, 8, &r);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
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
static void launch_fails_memory_held(void **state)
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
static void fallback_piece_in_hand(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);

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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* Halted by another lane with copies in flight: REDO makes them again. */
static void redo_after_halt(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* Another lane halted the context: FALLBACK fails what did not land and goes on. */
static void fallback_after_fault(void **state)
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
	for (int i = 0; i < 6; i++) {
		assert_int_equal(put(b, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(b, m, &i), 0);
	}
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
static void drain_stuck_worker(void **state)
{
	struct gdx_stage_ctx_opts co;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_opts o;
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
	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = GDX_STAGE_AGENT;
	o.chunk = CHUNK;
	o.chunks = 2;
	o.effect_size = sizeof(int);
	o.run = run;
	o.owner = &r;
	o.abort = &stop;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
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

static void *raise_later(void *arg)
{
	usleep(50000);
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A wait on a copy that does not land ends on the abort word, and faults nothing. */
static void wait_abort(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_opts o;
	struct gdx_stage *st;
	pthread_t t;
	int stop = 0;
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1000000"), 0);
	ctx = ctx_open(true, 1);
	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = GDX_STAGE_AGENT;
	o.fault = GDX_STAGE_REDO;
	o.chunk = CHUNK;
	o.chunks = 2;
	o.abort = &stop;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
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
static void fail_twice_concurrent(void **state)
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
static void landed_other_thread(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
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
 * Another thread's wait ends once the copies landed though the producer does
 * not look (tcp's receive thread waits so on copies the lock holder posted,
 * and the holder may be waiting on it): with a done word the watcher reads
 * it itself.  Bounded: a watch still spinning after 5 s is ended by the
 * abort word, and fails the test.
 */
static void watch_without_producer(void **state)
{
	static const enum gdx_stage_mode modes[] = { GDX_STAGE_AGENT, GDX_STAGE_WORD };

	(void)state;
	for (unsigned k = 0; k < GDX_ARRAY_SIZE(modes); k++) {
		struct gdx_stage_ctx *ctx = ctx_open(modes[k] == GDX_STAGE_AGENT, 1);
		struct watch_alone w = { 0 };
		struct gdx_stage_opts o;
		uint64_t until, m = 0;
		int stop = 0;
		pthread_t t;

		gdx_stage_opts_init(&o, sizeof(o));
		o.mode = modes[k];
		o.chunk = CHUNK;
		o.chunks = 8;
		o.abort = &stop;
		assert_int_equal(gdx_stage_open(ctx, &o, &w.st), 0);
		assert_int_equal(gdx_stage_mode_of(w.st), modes[k]);
		/* fewer copies than chunks: reserve never waits, so never learns */
		for (int i = 0; i < 4; i++)
			assert_int_equal(put(w.st, (size_t)i * CHUNK, CHUNK, &m), 0);
		w.mark = m;
		assert_int_equal(pthread_create(&t, NULL, watch_alone_thread, &w), 0);
		for (until = now_ms() + 5000; !atomic_load(&w.done) && now_ms() < until;)
			usleep(1000);
		__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		assert_int_equal(atomic_load(&w.rc), 0);
		/* the producer has not learnt it: the watcher read the word */
		assert_false(gdx_stage_landed(w.st, m));
		check_dev(0, 4 * CHUNK);
		stop = 0;
		assert_int_equal(gdx_stage_drain(w.st, GDX_EDRIVER), 0);
		assert_true(gdx_stage_landed(w.st, m));
		gdx_stage_close(w.st);
		assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	}
}

/*
 * A stream lane's watcher asks the stream itself: one whose done word never
 * comes (the stores dropped here) ends once the stream is idle, every copy
 * landed (0), or with the stream's error; it does not spin until the abort
 * word (tcp's connection end) for copies that landed or never will.
 * Bounded: a watch still spinning after 5 s is ended by the abort word, and
 * fails the test.
 */
static void watch_stream_asked(void **state)
{
	static const int errs[] = { 0, GDX_EDRIVER };

	(void)state;
	for (unsigned k = 0; k < GDX_ARRAY_SIZE(errs); k++) {
		struct gdx_stage_ctx *ctx = ctx_open(false, 1);
		struct watch_alone w = { 0 };
		struct gdx_stage_opts o;
		uint64_t until, m = 0;
		int stop = 0;
		pthread_t t;

		gdx_stage_opts_init(&o, sizeof(o));
		o.mode = GDX_STAGE_WORD;
		o.chunk = CHUNK;
		o.chunks = 8;
		o.abort = &stop;
		assert_int_equal(gdx_stage_open(ctx, &o, &w.st), 0);
		assert_int_equal(gdx_stage_mode_of(w.st), GDX_STAGE_WORD);
		atomic_store(&drop_words, 1);
		for (int i = 0; i < 4; i++)
			assert_int_equal(put(w.st, (size_t)i * CHUNK, CHUNK, &m), 0);
		atomic_store(&query_err, errs[k]);
		w.mark = m;
		assert_int_equal(pthread_create(&t, NULL, watch_alone_thread, &w), 0);
		for (until = now_ms() + 5000; !atomic_load(&w.done) && now_ms() < until;)
			usleep(1000);
		__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		assert_int_equal(atomic_load(&w.rc), errs[k]);
		atomic_store(&query_err, 0);
		atomic_store(&drop_words, 0);
		stop = 0;
		/* no word came: the drain waits for the stream */
		assert_int_equal(gdx_stage_drain(w.st, GDX_EDRIVER), 0);
		check_dev(0, 4 * CHUNK);
		gdx_stage_close(w.st);
		assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	}
}

/* No memory to queue an effect: it waits for the copies, then runs behind the others. */
static void defer_nomem(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage *st;
	struct rec r = { 0 };
	uint64_t m = 0;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
	st = lane_open(ctx, GDX_STAGE_EVENTS, GDX_STAGE_FAIL, 128, &r);
	for (int i = 0; i < 64; i++) {
		assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &m), 0);
		assert_int_equal(gdx_stage_defer(st, m, &i), 0);
	}
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A lane opened again on an agent ring (an NVMe/TCP reconnect) goes on from
 * the ring's done word: its worker, launched again after idling, looks for
 * the seq after it.
 */
static void adopt_ring_after_reopen(void **state)
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
static void mark_seq_wrap(void **state)
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
static void sync_copy_fault_piece(void **state)
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
static void d2h_release_order(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * An agent that cannot start: the caller that requires one gets its start
 * error and no context (tcp: its stream path, said with that error); one
 * that does not gets a stream-only context whose lanes run on streams (the
 * NVMe/TCP host), and an AGENT lane on it is refused.
 */
static void ctx_open_agent_error(void **state)
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
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	/* the start works again: required or not, the agent */
	atomic_store(&fail_start, 0);
	o.agent_required = true;
	assert_int_equal(gdx_stage_ctx_open(dev, &o, &ctx), 0);
	assert_true(gdx_stage_ctx_has_agent(ctx));
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* ---- D2H, REDO: tcp's transmit lane ------------------------------------- */

/* A D2H lane on the agent's ring, REDO (tcp's stage ring); abort: its abort word or NULL. */
static struct gdx_stage *tx_open(struct gdx_stage_ctx *ctx, unsigned chunks, unsigned marks,
				 const int *abort)
{
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = GDX_STAGE_D2H;
	o.mode = GDX_STAGE_AGENT;
	o.fault = GDX_STAGE_REDO;
	o.chunk = CHUNK;
	o.chunks = chunks;
	o.marks = marks;
	o.align = 64;
	o.abort = abort;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	return st;
}

/* Copies the device's bytes at off into the ring (room taken without waiting). */
static int get(struct gdx_stage *st, size_t off, size_t n, struct gdx_stage_span *sp)
{
	int rc = gdx_stage_reserve(st, n, GDX_STAGE_NOWAIT, sp);

	if (rc)
		return rc;
	assert_int_equal(sp->n, n);
	return gdx_stage_post(st, sp, (char *)dbuf + off);
}

/*
 * emulated.agent_fault_after counts the copies of workers launched with it
 * set, from a launch without it: one copy so, the worker left to idle out
 * (idle_us 2000), then the knob; the next worker counts from 0.
 */
static void fault_after(struct gdx_stage *st, const char *n)
{
	struct gdx_stage_span sp;

	assert_int_equal(get(st, 0, 64, &sp), 0);
	assert_int_equal(gdx_stage_wait(st, sp.end), 0);
	gdx_stage_release(st, sp.end);
	usleep(20000);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", n), 0);
}

/*
 * The agent faults under copies out of the device (test_dev_send_agent_fault,
 * test_dev_sends_redone_after_halt): the wait that finds it before any halt
 * gets the fault, the lane unchanged and its ring held (tcp ends the
 * connection); once another lane or the teardown halted the context, the
 * wait makes the copies the agent owed again, and the lane goes on
 * synchronously.
 */
static void redo_waits_for_halt(void **state)
{
	struct gdx_stage_span sp[8];
	struct gdx_stage_stats s;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	uint32_t tk[8];
	void *b[2];
	size_t bsz;
	int rc, n;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, 8 * CHUNK), 0);
	ctx = ctx_open(true, 1);
	st = tx_open(ctx, 8, 0, NULL);
	fault_after(st, "2");
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(get(st, (size_t)i * CHUNK, CHUNK, &sp[i]), 0);
		tk[i] = gdx_stage_ticket(st);
	}
	rc = gdx_stage_wait(st, sp[7].end);
	assert_true(rc < 0);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_AGENT);
	assert_int_equal(gdx_stage_watch_post(st, sp[7].end, tk[7]), rc);
	assert_false(gdx_stage_seen(st, sp[7].end, tk[7]));
	/* a worker may still write the ring: not lent out */
	assert_int_equal(gdx_stage_halves(st, b, &bsz), -EBUSY);
	assert_int_equal(gdx_stage_ctx_fail(ctx, rc), rc);
	n = gdx_stage_wait(st, sp[7].end);
	/*
	 * The third copy faulted: it and those behind it, and those of its
	 * round (a worker stores the done word once per round of up to 4)
	 */
	assert_in_range(n, 6, 8);
	gdx_stage_stats(st, &s);
	assert_int_equal(s.redone, (uint64_t)n);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_SYNC);
	for (int i = 0; i < 8; i++) {
		assert_true(gdx_stage_seen(st, sp[i].end, tk[i]));
		assert_memory_equal(sp[i].p, src + (size_t)i * CHUNK, CHUNK);
	}
	/* then synchronously, into room given back */
	gdx_stage_release(st, sp[7].end);
	assert_int_equal(get(st, 3 * CHUNK, CHUNK, &sp[0]), 0);
	assert_true(gdx_stage_landed(st, sp[0].end));
	assert_memory_equal(sp[0].p, src + 3 * CHUNK, CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A post whose worker launch fails (test_dev_send_launch_fails): REDO
 * returns the error and keeps the room, which a worker may still copy
 * into, until the context is halted.
 */
static void redo_launch_fails_before_halt(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage_span sp;
	struct gdx_stage *st;
	void *b[2];
	size_t bsz;

	(void)state;
	st = tx_open(ctx, 2, 0, NULL);
	atomic_store(&fail_launch, 1);
	assert_int_equal(get(st, 0, CHUNK, &sp), GDX_EDRIVER);
	atomic_store(&fail_launch, 0);
	assert_int_equal(gdx_stage_mode_of(st), GDX_STAGE_AGENT);
	assert_false(gdx_stage_landed(st, sp.end));
	assert_int_equal(gdx_stage_halves(st, b, &bsz), -EBUSY);
	assert_int_equal(gdx_stage_ctx_fail(ctx, GDX_EDRIVER), GDX_EDRIVER);
	assert_int_equal(gdx_stage_halves(st, b, &bsz), 0);
	assert_int_equal(bsz, CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A payload larger than the ring, a chunk at a time through its two halves
 * (test_dev_large_send_recopied_after_halt): the second chunk's copy faults,
 * and once another lane halted the agent the wait for it makes it again;
 * the third goes synchronously into the room the first gave back.
 */
static void redo_chunks_after_halt(void **state)
{
	struct gdx_stage_span c[3];
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	int n;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, 3 * CHUNK), 0);
	ctx = ctx_open(true, 2);
	st = tx_open(ctx, 2, 0, NULL);
	fault_after(st, "1");
	assert_int_equal(get(st, 0, CHUNK, &c[0]), 0);
	assert_int_equal(gdx_stage_wait(st, c[0].end), 0);
	assert_int_equal(get(st, CHUNK, CHUNK, &c[1]), 0);
	/* both held: the ring is full until the first is sent */
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &c[2]), -EAGAIN);
	assert_memory_equal(c[0].p, src, CHUNK);
	gdx_stage_release(st, c[0].end);
	assert_int_equal(gdx_stage_ctx_fail(ctx, GDX_EDRIVER), GDX_EDRIVER);
	n = gdx_stage_wait(st, c[1].end);
	assert_int_equal(n, 1);
	assert_int_equal(get(st, 2 * CHUNK, CHUNK, &c[2]), 0);
	assert_ptr_equal(c[2].p, c[0].p);
	assert_memory_equal(c[1].p, src + CHUNK, CHUNK);
	assert_memory_equal(c[2].p, src + 2 * CHUNK, CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * With a done word every copy takes a mark: none free, a reservation that
 * may not wait fails (tcp queues the frame late) rather than leave its post
 * to wait for one under the producer's lock.
 */
static void nowait_marks_full(void **state)
{
	struct gdx_stage_span sp[5];
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, 5 * CHUNK), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "50000"), 0);
	ctx = ctx_open(true, 1);
	st = tx_open(ctx, 8, 4, NULL);
	for (int i = 0; i < 4; i++)
		assert_int_equal(get(st, (size_t)i * CHUNK, CHUNK, &sp[i]), 0);
	/* room for four more, no mark */
	assert_int_equal(get(st, 4 * CHUNK, CHUNK, &sp[4]), -EAGAIN);
	assert_int_equal(gdx_stage_wait(st, sp[0].end), 0);
	assert_int_equal(get(st, 4 * CHUNK, CHUNK, &sp[4]), 0);
	assert_int_equal(gdx_stage_wait(st, sp[4].end), 0);
	for (int i = 0; i < 5; i++)
		assert_memory_equal(sp[i].p, src + (size_t)i * CHUNK, CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

struct post_watch {
	struct gdx_stage *st;
	uint64_t mark, last;
	uint32_t ticket, last_ticket;
	_Atomic int rc, done, later_seen, producer_knew;
};

static void *post_watch_thread(void *arg)
{
	struct post_watch *w = arg;

	atomic_store(&w->rc, gdx_stage_watch_post(w->st, w->mark, w->ticket));
	atomic_store(&w->later_seen, gdx_stage_seen(w->st, w->last, w->last_ticket));
	atomic_store(&w->producer_knew, gdx_stage_landed(w->st, w->mark));
	atomic_store(&w->done, 1);
	return NULL;
}

/*
 * Another thread waits for one post by its ticket (tcp's transmit thread,
 * for the frame it is about to send): it ends once that copy has landed,
 * not the ones posted after it, and without the producer learning it.
 * Copies take 200 ms; the worker takes the first alone (a round is the
 * copies ready when it starts), the others 600 ms later.
 */
static bool watch_post_own_copy_try(useconds_t first_alone)
{
	struct gdx_stage_span sp[4];
	struct gdx_stage_ctx *ctx;
	struct post_watch w = { 0 };
	uint32_t tk[4];
	uint64_t until;
	int stop = 0;
	pthread_t t;

	assert_int_equal(gdx_memcpy(dev, dbuf, src, 4 * CHUNK), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "200000"), 0);
	ctx = ctx_open(true, 1);
	w.st = tx_open(ctx, 4, 0, &stop);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(get(w.st, (size_t)i * CHUNK, CHUNK, &sp[i]), 0);
		tk[i] = gdx_stage_ticket(w.st);
		if (!i)
			usleep(first_alone);
	}
	w.mark = sp[0].end;
	w.ticket = tk[0];
	w.last = sp[3].end;
	w.last_ticket = tk[3];
	assert_int_equal(pthread_create(&t, NULL, post_watch_thread, &w), 0);
	for (until = now_ms() + 5000; !atomic_load(&w.done) && now_ms() < until;)
		usleep(1000);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&w.rc), 0);
	assert_false(atomic_load(&w.producer_knew));
	assert_memory_equal(sp[0].p, src, CHUNK);
	stop = 0;
	assert_int_equal(gdx_stage_drain(w.st, GDX_EDRIVER), 0);
	for (int i = 0; i < 4; i++)
		assert_true(gdx_stage_seen(w.st, sp[i].end, tk[i]));
	gdx_stage_close(w.st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	return !atomic_load(&w.later_seen);
}

/*
 * A worker starved of CPU past the pause can take all four copies in one
 * round; then the watch cannot tell them apart and the try says nothing:
 * it is made again with a longer pause, and the last try must tell.
 */
static void watch_post_own_copy(void **state)
{
	(void)state;
	for (useconds_t pause = 50000; pause < 800000; pause *= 4)
		if (watch_post_own_copy_try(pause))
			return;
	assert_true(watch_post_own_copy_try(800000));
}

/*
 * A copy out of the device that does not land (a wedged worker: 1 s here)
 * while the connection ends (test_dev_send_copy_stuck): another thread's
 * wait for it by its ticket ends on the abort word, faulting nothing.
 */
static void watch_post_abort(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_span sp;
	struct gdx_stage *st;
	int stop = 0;
	pthread_t t;

	(void)state;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1000000"), 0);
	ctx = ctx_open(true, 1);
	st = tx_open(ctx, 2, 0, &stop);
	assert_int_equal(get(st, 0, CHUNK, &sp), 0);
	assert_int_equal(pthread_create(&t, NULL, raise_later, &stop), 0);
	assert_int_equal(gdx_stage_watch_post(st, sp.end, gdx_stage_ticket(st)),
			 GDX_EDISCONNECTED);
	pthread_join(t, NULL);
	assert_false(gdx_stage_seen(st, sp.end, gdx_stage_ticket(st)));
	assert_int_equal(gdx_stage_ctx_status(ctx), 0);
	stop = 0;
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * Copies of bytes kept outside the ring (tcp's kept ring: each takes a
 * ticket of align bytes in the lane) when the agent faults
 * (test_dev_kept_agent_fault): their effects run in order, those whose copy
 * landed without an error and the rest with the fault; then the lane goes
 * on synchronously and such copies land at once.
 */
static void fault_kept_effects(void **state)
{
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_opts o;
	struct gdx_stage_span sp;
	struct gdx_stage *st;
	struct rec r = { 0 };
	unsigned char *kept;
	unsigned ok = 0;

	(void)state;
	ctx = ctx_open(true, 1);
	assert_int_equal(gdx_pinned_alloc(dev, 12 * CHUNK, (void **)&kept), 0);
	memcpy(kept, src, 12 * CHUNK);
	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = GDX_STAGE_AGENT;
	o.fault = GDX_STAGE_FALLBACK;
	o.chunk = CHUNK;
	o.chunks = 2;
	o.align = 64;
	o.effect_size = sizeof(int);
	o.run = run;
	o.owner = &r;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	/* a worker counts from its launch: none with the knob off, then the knob (fault_after) */
	assert_int_equal(put(st, 0, 64, &(uint64_t){ 0 }), 0);
	assert_int_equal(gdx_stage_wait(st, gdx_stage_mark(st)), 0);
	usleep(20000);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "3"), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "20000"), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(gdx_stage_reserve(st, 64, 0, &sp), 0);
		sp.p = kept + (size_t)i * CHUNK;
		sp.n = CHUNK;
		assert_int_equal(gdx_stage_post(st, &sp, (char *)dbuf + (size_t)i * CHUNK), 0);
		assert_int_equal(gdx_stage_defer(st, sp.end, &i), 0);
	}
	assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
	assert_int_equal(r.n, 8);
	for (unsigned i = 0; i < 8; i++) {
		assert_int_equal(r.id[i], (int)i);
		if (!r.err[i]) {
			assert_int_equal(ok++, i);	/* the landed ones first */
			check_dev((size_t)i * CHUNK, CHUNK);
		}
	}
	assert_in_range(ok, 0, 3);
	assert_int_not_equal(r.err[7], 0);
	for (int i = 8; i < 12; i++) {
		assert_int_equal(gdx_stage_reserve(st, 64, 0, &sp), 0);
		sp.p = kept + (size_t)i * CHUNK;
		sp.n = CHUNK;
		assert_int_equal(gdx_stage_post(st, &sp, (char *)dbuf + (size_t)i * CHUNK), 0);
		assert_true(gdx_stage_landed(st, sp.end));
		assert_int_equal(gdx_stage_defer(st, sp.end, &i), 0);
		assert_int_equal(r.err[i], 0);
	}
	check_dev(8 * CHUNK, 4 * CHUNK);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
	assert_int_equal(gdx_pinned_free(dev, kept), 0);
}

/*
 * The owner's halt hook takes a lock the REDO lane's producer holds (tcp:
 * on_halt takes t->lock, whose holder posts to the transmit lane).  A post
 * that finds the agent halted while the hook waits for that lock makes its
 * copy without failing the context again, which would wait for the hook:
 * deadlock.  Bounded: a post not done after 5 s fails the test.
 */
struct hook_lock {
	pthread_mutex_t m;
	_Atomic int in_hook, held, posted;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	int rc;
};

static void lock_hook(void *owner, int err)
{
	struct hook_lock *h = owner;

	(void)err;
	atomic_store(&h->in_hook, 1);
	pthread_mutex_lock(&h->m);
	pthread_mutex_unlock(&h->m);
}

static void *hook_fail_thread(void *arg)
{
	struct hook_lock *h = arg;

	gdx_stage_ctx_fail(h->ctx, GDX_EDRIVER);
	return NULL;
}

static void *hook_post_thread(void *arg)
{
	struct hook_lock *h = arg;
	struct gdx_stage_span sp;

	pthread_mutex_lock(&h->m);
	atomic_store(&h->held, 1);
	while (!atomic_load(&h->in_hook))
		usleep(1000);
	h->rc = get(h->st, 0, CHUNK, &sp);
	if (!h->rc && memcmp(sp.p, src, CHUNK))
		h->rc = -EIO;
	atomic_store(&h->posted, 1);
	pthread_mutex_unlock(&h->m);
	return NULL;
}

static void redo_post_while_hook_waits(void **state)
{
	struct gdx_stage_ctx_opts co;
	struct hook_lock h = { .m = PTHREAD_MUTEX_INITIALIZER };
	pthread_t tf, tp;
	uint64_t until;

	(void)state;
	assert_int_equal(gdx_memcpy(dev, dbuf, src, CHUNK), 0);
	gdx_stage_ctx_opts_init(&co, sizeof(co));
	co.agent = true;
	co.workers = 1;
	co.on_halt = lock_hook;
	co.owner = &h;
	assert_int_equal(gdx_stage_ctx_open(dev, &co, &h.ctx), 0);
	h.st = tx_open(h.ctx, 2, 0, NULL);
	assert_int_equal(pthread_create(&tp, NULL, hook_post_thread, &h), 0);
	while (!atomic_load(&h.held))
		usleep(1000);
	assert_int_equal(pthread_create(&tf, NULL, hook_fail_thread, &h), 0);
	for (until = now_ms() + 5000; !atomic_load(&h.posted) && now_ms() < until;)
		usleep(1000);
	assert_true(atomic_load(&h.posted));
	pthread_join(tp, NULL);
	pthread_join(tf, NULL);
	assert_int_equal(h.rc, 0);
	assert_int_equal(gdx_stage_mode_of(h.st), GDX_STAGE_SYNC);
	assert_int_equal(gdx_stage_drain(h.st, GDX_EDRIVER), 0);
	gdx_stage_close(h.st);
	assert_int_equal(gdx_stage_ctx_close(h.ctx), 0);
}

/* Reserve, post, flush, progress, wait, wait_idle, defer: no stream, event, pinned memory or agent. */
static void no_setup_on_data_path(void **state)
{
	static const enum gdx_stage_mode modes[] = { GDX_STAGE_AGENT, GDX_STAGE_WORD,
						     GDX_STAGE_EVENTS, GDX_STAGE_SYNC };
	struct gdx_stage_ctx *ctx = ctx_open(true, 1);
	struct gdx_stage *st[4];
	struct rec r = { 0 };

	(void)state;
	for (int k = 0; k < 4; k++)
		st[k] = lane_open(ctx, modes[k], GDX_STAGE_FAIL, 4, &r);
	atomic_store(&setup_calls, 0);
	for (int k = 0; k < 4; k++) {
		uint64_t m = 0;

		for (int i = 0; i < 40; i++) {
			assert_int_equal(put(st[k], (size_t)i * CHUNK, CHUNK, &m), 0);
			assert_int_equal(gdx_stage_defer(st[k], m, &i), 0);
			assert_int_equal(gdx_stage_progress(st[k]), 0);
			assert_int_equal(gdx_stage_flush(st[k]), 0);
		}
		assert_int_equal(gdx_stage_wait(st[k], m), 0);
		assert_int_equal(gdx_stage_wait_idle(st[k], NULL, NULL, 1000), 0);
		assert_int_equal(gdx_stage_drain(st[k], GDX_EDRIVER), 0);
		check_dev(0, 40 * CHUNK);
	}
	assert_int_equal(atomic_load(&setup_calls), 0);
	for (int k = 0; k < 4; k++)
		gdx_stage_close(st[k]);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A stream lane (the uring file driver's) whose fourth copy cannot be
 * enqueued (emulated.copy_fault_after), FAIL: the post says so, and the
 * drain runs the three effects deferred before it without the error, their
 * bytes in place: only what lies behind a fault mid-batch fails.
 */
static void stream_enqueue_fault_drain(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct rec r = { 0 };
	struct gdx_stage *st;
	uint64_t mark = 0;

	(void)state;
	for (int mode = GDX_STAGE_WORD; mode <= GDX_STAGE_EVENTS; mode++) {
		memset(&r, 0, sizeof(r));
		st = lane_open(ctx, mode, GDX_STAGE_FAIL, 8, &r);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(put(st, (size_t)i * CHUNK, CHUNK, &mark), 0);
			assert_int_equal(gdx_stage_defer(st, mark, &i), 0);
			/* the first copy, with the knob at 0, restarts the count */
			if (!i)
				assert_int_equal(gdx_config_set("emulated.copy_fault_after", "2"), 0);
		}
		assert_int_equal(put(st, 3 * CHUNK, CHUNK, &mark), -EIO);
		assert_int_equal(gdx_stage_progress(st), -EIO);
		assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), -EIO);
		assert_int_equal(r.n, 3);
		for (int i = 0; i < 3; i++) {
			assert_int_equal(r.id[i], i);
			assert_int_equal(r.err[i], 0);
		}
		check_dev(0, 3 * CHUNK);
		gdx_stage_close(st);
		assert_int_equal(gdx_config_set("emulated.copy_fault_after", "0"), 0);
	}
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * Pieces are posted in the order reserved: the later one posted first is
 * copied, the earlier one then refused (its room was given back with the
 * later one's mark).  An empty piece (nothing to copy) gives its room back
 * in turn.
 */
static void post_in_reservation_order(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span a, b, c;
	struct rec r = { 0 };
	struct gdx_stage *st = lane_open(ctx, GDX_STAGE_WORD, GDX_STAGE_FAIL, 4, &r);

	(void)state;
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &a), 0);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &b), 0);
	memcpy(b.p, src + CHUNK, CHUNK);
	assert_int_equal(gdx_stage_post(st, &b, (char *)dbuf + CHUNK), 0);
	assert_int_equal(gdx_stage_post(st, &a, dbuf), -EINVAL);
	assert_int_equal(gdx_stage_wait(st, b.end), 0);
	check_dev(CHUNK, CHUNK);
	/* an empty piece: posted, its mark lands, the ring is empty again */
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &c), 0);
	c.n = 0;
	assert_int_equal(gdx_stage_post(st, &c, dbuf), 0);
	assert_int_equal(gdx_stage_wait(st, c.end), 0);
	assert_int_equal(gdx_byte_ring_used(&st->r), 0);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* A lane whose pieces fill out of order (gdx_stage_ready): at most `pieces` out. */
static struct gdx_stage *pieces_open(struct gdx_stage_ctx *ctx, enum gdx_stage_dir dir,
				     unsigned pieces, struct rec *r)
{
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.mode = dir == GDX_STAGE_H2D ? GDX_STAGE_WORD : GDX_STAGE_SYNC;
	o.fault = GDX_STAGE_FAIL;
	o.chunk = CHUNK;
	o.chunks = 8;
	o.pieces = pieces;
	o.effect_size = sizeof(int);
	o.run = run;
	o.owner = r;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	return st;
}

/* Piece i of CHUNK bytes, src's bytes at i * CHUNK, ready for the device there. */
static int ready_piece(struct gdx_stage *st, struct gdx_stage_span *sp, int i)
{
	memcpy(sp->p, src + (size_t)i * CHUNK, CHUNK);
	return gdx_stage_ready(st, sp, (char *)dbuf + (size_t)i * CHUNK, &i);
}

/*
 * Pieces ready out of order are held until those reserved before them are
 * ready, then posted in reservation order, their effects run in it; a
 * piece cannot be ready twice, and no more than `pieces` are reserved.
 */
static void ready_out_of_order(void **state)
{
	static const int order[] = { 2, 1, 3, 0 };
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[4], more;
	struct gdx_stage_stats ss;
	struct rec r = { 0 };
	struct gdx_stage *st = pieces_open(ctx, GDX_STAGE_H2D, 4, &r);

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
	assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &more), -EAGAIN);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(ready_piece(st, &sp[order[k]], order[k]), 1);
		assert_int_equal(gdx_stage_held(st), (unsigned)k + 1);
	}
	assert_int_equal(ready_piece(st, &sp[1], 1), -EINVAL);
	/* nothing posted while the first is not ready */
	assert_int_equal(gdx_stage_mark(st), 0);
	assert_int_equal(ready_piece(st, &sp[0], 0), 0);
	assert_int_equal(gdx_stage_held(st), 0);
	assert_int_equal(gdx_stage_mark(st), sp[3].end);
	assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
	assert_int_equal(r.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(r.id[i], i);
		assert_int_equal(r.err[i], 0);
	}
	check_dev(0, 4 * CHUNK);
	assert_int_equal(gdx_byte_ring_used(&st->r), 0);
	gdx_stage_stats(st, &ss);
	assert_int_equal(ss.held, 3);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A piece with nothing to copy (a failed or empty read) is posted in turn
 * all the same: the device is untouched there, its effect runs in order and
 * its room comes back.
 */
static void ready_nothing_to_copy(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[3];
	struct rec r = { 0 };
	struct gdx_stage *st = pieces_open(ctx, GDX_STAGE_H2D, 4, &r);
	int two = 2;

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
	/* the last one: no later mark gives its room back for it */
	sp[2].n = 0;
	assert_int_equal(gdx_stage_ready(st, &sp[2], (char *)dbuf + 2 * CHUNK, &two), 1);
	assert_int_equal(ready_piece(st, &sp[1], 1), 1);
	assert_int_equal(ready_piece(st, &sp[0], 0), 0);
	assert_int_equal(gdx_stage_wait_idle(st, NULL, NULL, 0), 0);
	assert_int_equal(r.n, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(r.id[i], i);
		assert_int_equal(r.err[i], 0);
	}
	check_dev(0, 2 * CHUNK);
	memset(back, 1, CHUNK);
	assert_int_equal(gdx_memcpy(dev, back, (char *)dbuf + 2 * CHUNK, CHUNK), 0);
	for (size_t i = 0; i < CHUNK; i++)
		assert_int_equal(back[i], 0);
	assert_int_equal(gdx_byte_ring_used(&st->r), 0);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * The third piece's copy cannot be enqueued while two ready pieces are held
 * behind the second: the call that makes the second ready posts it and the
 * third, and says the fault; the held ones fail behind it.  The drain runs
 * the first two effects without the error (their copies landed), the rest
 * with it, all in reservation order.
 */
static void ready_fault_held(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[5];
	struct rec r = { 0 };
	struct gdx_stage *st = pieces_open(ctx, GDX_STAGE_H2D, 8, &r);

	(void)state;
	for (int i = 0; i < 5; i++)
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
	/* the first copy, with the knob at 0, restarts the count: the third fails */
	assert_int_equal(ready_piece(st, &sp[0], 0), 0);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "1"), 0);
	assert_int_equal(ready_piece(st, &sp[4], 4), 1);
	assert_int_equal(ready_piece(st, &sp[2], 2), 1);
	assert_int_equal(ready_piece(st, &sp[3], 3), 1);
	assert_int_equal(ready_piece(st, &sp[1], 1), -EIO);
	assert_int_equal(gdx_stage_held(st), 0);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), -EIO);
	assert_int_equal(r.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(r.id[i], i);
		assert_int_equal(r.err[i], i < 2 ? 0 : GDX_EDRIVER);
	}
	check_dev(0, 2 * CHUNK);
	gdx_stage_close(st);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "0"), 0);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * A drain with pieces held behind one never ready (a queue torn down with
 * an answer missing): the held ones fail with the drain's err, in order, at
 * once; the pieces still to come fail as they get ready, nothing copied.
 */
static void ready_drain_held(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[4];
	struct rec r = { 0 };
	struct gdx_stage *st = pieces_open(ctx, GDX_STAGE_H2D, 4, &r);

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
	assert_int_equal(ready_piece(st, &sp[3], 3), 1);
	assert_int_equal(ready_piece(st, &sp[1], 1), 1);
	assert_int_equal(r.n, 0);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	assert_int_equal(gdx_stage_held(st), 0);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.id[0], 1);
	assert_int_equal(r.id[1], 3);
	assert_int_equal(ready_piece(st, &sp[2], 2), 0);
	assert_int_equal(ready_piece(st, &sp[0], 0), 0);
	assert_int_equal(r.n, 4);
	assert_int_equal(r.id[2], 2);
	assert_int_equal(r.id[3], 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(r.err[i], GDX_EDRIVER);
	assert_int_equal(gdx_stage_mark(st), 0);
	memset(back, 1, 4 * CHUNK);
	assert_int_equal(gdx_memcpy(dev, back, dbuf, 4 * CHUNK), 0);
	for (size_t i = 0; i < 4 * CHUNK; i++)
		assert_int_equal(back[i], 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/* D2H: a piece's room goes back once those reserved before it are done with. */
static void ready_d2h_release_order(void **state)
{
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_span sp[3];
	struct rec r = { 0 };
	struct gdx_stage *st = pieces_open(ctx, GDX_STAGE_D2H, 4, &r);
	int one = 1;

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_int_equal(gdx_stage_reserve(st, CHUNK, GDX_STAGE_NOWAIT, &sp[i]), 0);
	assert_int_equal(gdx_stage_ready(st, &sp[0], NULL, &one), -EINVAL);
	assert_int_equal(gdx_stage_ready(st, &sp[1], NULL, NULL), 1);
	assert_int_equal(gdx_byte_ring_used(&st->r), 3 * CHUNK);
	assert_int_equal(gdx_stage_ready(st, &sp[0], NULL, NULL), 0);
	assert_int_equal(gdx_byte_ring_used(&st->r), CHUNK);
	assert_int_equal(gdx_stage_ready(st, &sp[2], NULL, NULL), 0);
	assert_int_equal(gdx_byte_ring_used(&st->r), 0);
	assert_int_equal(r.n, 0);
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

/*
 * The same with copies held back for batches: a batch that fails to enqueue
 * (its third copy refused) may be in part or not at all, so its effects
 * fail with the error; the batch before it landed, and its effects run
 * without it.
 */
static void stream_batch_fault_drain(void **state)
{
	enum { PIECE = CHUNK / 8 };	/* four of them a batch, well under a chunk */
	struct gdx_stage_ctx *ctx = ctx_open(false, 1);
	struct gdx_stage_opts o;
	struct rec r = { 0 };
	struct gdx_stage *st;
	uint64_t mark = 0;

	(void)state;
	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = GDX_STAGE_WORD;
	o.fault = GDX_STAGE_FAIL;
	o.chunk = CHUNK;
	o.chunks = 16;
	o.batch = 4;
	o.effect_size = sizeof(int);
	o.run = run;
	o.owner = &r;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	for (int i = 0; i < 8; i++) {
		int rc = put(st, (size_t)i * PIECE, PIECE, &mark);

		/* the fourth post sends the batch (the knob at 0 restarts the count) */
		if (i == 3)
			assert_int_equal(gdx_config_set("emulated.copy_fault_after", "2"), 0);
		if (i == 7) {
			assert_int_equal(rc, -EIO);
			break;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(gdx_stage_defer(st, mark, &i), 0);
	}
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), -EIO);
	assert_int_equal(r.n, 7);
	for (int i = 0; i < 7; i++) {
		assert_int_equal(r.id[i], i);
		assert_int_equal(r.err[i], i < 4 ? 0 : GDX_EDRIVER);
	}
	check_dev(0, 4 * PIECE);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(byte_ring_wrap),
		cmocka_unit_test_setup_teardown(ring_aligned_skip, setup, teardown),
		cmocka_unit_test_setup_teardown(one_chunk_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(modes_cadence, setup, teardown),
		cmocka_unit_test_setup_teardown(fault_effects_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(on_halt_before_effects, setup, teardown),
		cmocka_unit_test_setup_teardown(fail_policy, setup, teardown),
		cmocka_unit_test_setup_teardown(launch_fails_memory_held, setup, teardown),
		cmocka_unit_test_setup_teardown(fallback_piece_in_hand, setup, teardown),
		cmocka_unit_test_setup_teardown(redo_after_halt, setup, teardown),
		cmocka_unit_test_setup_teardown(fallback_after_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(drain_stuck_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(wait_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(fail_twice_concurrent, setup, teardown),
		cmocka_unit_test_setup_teardown(landed_other_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_without_producer, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_stream_asked, setup, teardown),
		cmocka_unit_test_setup_teardown(defer_nomem, setup, teardown),
		cmocka_unit_test_setup_teardown(adopt_ring_after_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(mark_seq_wrap, setup, teardown),
		cmocka_unit_test_setup_teardown(d2h_release_order, setup, teardown),
		cmocka_unit_test_setup_teardown(ctx_open_agent_error, setup, teardown),
		cmocka_unit_test_setup_teardown(redo_waits_for_halt, setup, teardown),
		cmocka_unit_test_setup_teardown(redo_launch_fails_before_halt, setup, teardown),
		cmocka_unit_test_setup_teardown(redo_chunks_after_halt, setup, teardown),
		cmocka_unit_test_setup_teardown(nowait_marks_full, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_post_own_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_post_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(fault_kept_effects, setup, teardown),
		cmocka_unit_test_setup_teardown(redo_post_while_hook_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(no_setup_on_data_path, setup, teardown),
		cmocka_unit_test_setup_teardown(sync_copy_fault_piece, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_enqueue_fault_drain, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_batch_fault_drain, setup, teardown),
		cmocka_unit_test_setup_teardown(post_in_reservation_order, setup, teardown),
		cmocka_unit_test_setup_teardown(ready_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(ready_nothing_to_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(ready_fault_held, setup, teardown),
		cmocka_unit_test_setup_teardown(ready_drain_held, setup, teardown),
		cmocka_unit_test_setup_teardown(ready_d2h_release_order, setup, teardown),
	};
	int ret;

	/* the emulated device: its agent faults and slows down on demand */
	ret = gdx_device_open("emulated", &dev);
	if (ret)
		return 1;
	gdx_log_set_callback(log_cb, NULL);
	real = dev->ops;
	wrapped = *real;
	wrapped.stream_create = w_stream_create;
	wrapped.event_create = w_event_create;
	wrapped.pinned_alloc = w_pinned_alloc;
	wrapped.agent_launch = w_agent_launch;
	wrapped.stream_write_value32 = w_stream_write_value32;
	wrapped.stream_query = w_stream_query;
	dev->ops = &wrapped;
	src = malloc(BIG);
	back = malloc(BIG);
	if (!src || !back || gdx_device_malloc(dev, BIG, &dbuf))
		return 1;
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	gdx_device_free(dev, dbuf);
	dev->ops = real;
	gdx_device_close(dev);
	free(src);
	free(back);
	return ret;
}
