/* SPDX-License-Identifier: MIT */
/*
 * test_stage: posts in reservation order, pieces ready out of order, and
 * no set-up on the data path (the fixture is test_stage.c's).
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

/* Reserve, post, flush, progress, wait, wait_idle, defer: no stream, event, pinned memory or agent. */
void no_setup_on_data_path(void **state)
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
void stream_enqueue_fault_drain(void **state)
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
void post_in_reservation_order(void **state)
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
	lane_ctx_close(st, ctx);
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
void ready_out_of_order(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * A piece with nothing to copy (a failed or empty read) is posted in turn
 * all the same: the device is untouched there, its effect runs in order and
 * its room comes back.
 */
void ready_nothing_to_copy(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * The third piece's copy cannot be enqueued while two ready pieces are held
 * behind the second: the call that makes the second ready posts it and the
 * third, and says the fault; the held ones fail behind it.  The drain runs
 * the first two effects without the error (their copies landed), the rest
 * with it, all in reservation order.
 */
void ready_fault_held(void **state)
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
void ready_drain_held(void **state)
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
void ready_d2h_release_order(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * The same with copies held back for batches: a batch that fails to enqueue
 * (its third copy refused) may be in part or not at all, so its effects
 * fail with the error; the batch before it landed, and its effects run
 * without it.
 */
void stream_batch_fault_drain(void **state)
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
