/* SPDX-License-Identifier: MIT */
/*
 * The staging module (src/mem/stage.c) on the emulated device, each state
 * reached directly: the device's operations are wrapped to fail a launch or
 * count set-up calls, the agent's workers fault or copy slowly through the
 * emulated.agent_* knobs, and malloc fails on demand (--wrap=malloc).
 * This file holds that fixture and runs the cases; they live by theme in
 * stage_lane.c, stage_tx.c and stage_order.c (stage_suite.h).
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

struct gdx_device *dev;
const struct gdx_device_ops *real;
struct gdx_device_ops wrapped;
void *dbuf;		/* BIG bytes of device memory */
unsigned char *src, *back;

/* ---- wrapped device operations ---------------------------------------- */

_Atomic int setup_calls;	/* streams, events, pinned memory, agent starts */
_Atomic int fail_launch;	/* worker launches fail */
_Atomic int fail_start;	/* agent starts (the module's load) fail */
_Atomic int drop_words;	/* stream stores of a done word are dropped */
_Atomic int query_err;	/* nonzero: stream queries report it */

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
_Atomic int fail_malloc;

void *__wrap_malloc(size_t n)
{
	int one = 1;

	if (atomic_compare_exchange_strong(&fail_malloc, &one, 0))
		return NULL;
	return __real_malloc(n);
}

/* ---- logs ---------------------------------------------------------------- */

_Atomic int halt_timeouts;

static void log_cb(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)arg;
	if (strstr(msg, "did not stop"))
		atomic_fetch_add(&halt_timeouts, 1);
}

/* ---- effects -------------------------------------------------------------- */

void run(void *owner, void *effect, int err)
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

uint64_t now_ms(void)
{
	return gdx_now_ns() / 1000000;
}

struct gdx_stage_ctx *ctx_open(bool agent, unsigned lanes)
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

/* A lane whose effects (an int each) run into r, none without; its waits end once *stop is set. */
struct gdx_stage *lane_open_abort(struct gdx_stage_ctx *ctx, enum gdx_stage_mode mode,
				  enum gdx_stage_fault fault, unsigned chunks, struct rec *r,
				  const int *stop)
{
	struct gdx_stage_opts o;
	struct gdx_stage *st;

	gdx_stage_opts_init(&o, sizeof(o));
	o.mode = mode;
	o.fault = fault;
	o.chunk = CHUNK;
	o.chunks = chunks;
	if (r) {
		o.effect_size = sizeof(int);
		o.run = run;
		o.owner = r;
	}
	o.abort = stop;
	assert_int_equal(gdx_stage_open(ctx, &o, &st), 0);
	return st;
}

struct gdx_stage *lane_open(struct gdx_stage_ctx *ctx, enum gdx_stage_mode mode,
			    enum gdx_stage_fault fault, unsigned chunks, struct rec *r)
{
	return lane_open_abort(ctx, mode, fault, chunks, r, NULL);
}

/* Copies src[off, off + n) to the device at off through the lane; returns its mark. */
int put(struct gdx_stage *st, size_t off, size_t n, uint64_t *mark)
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

/* A thread's body: sets the int at arg 50 ms later (an abort word). */
void *raise_later(void *arg)
{
	usleep(50000);
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
	return NULL;
}

void check_dev(size_t off, size_t n)
{
	assert_int_equal(gdx_memcpy(dev, back, (char *)dbuf + off, n), 0);
	assert_memory_equal(back, src + off, n);
}

/* Drains st, which met no fault, and closes it and its context. */
void lane_ctx_close(struct gdx_stage *st, struct gdx_stage_ctx *ctx)
{
	assert_int_equal(gdx_stage_drain(st, GDX_EDRIVER), 0);
	gdx_stage_close(st);
	assert_int_equal(gdx_stage_ctx_close(ctx), 0);
}

int setup(void **state)
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

int teardown(void **state)
{
	(void)state;
	gdx_config_reset();
	return 0;
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
		cmocka_unit_test_setup_teardown(trim_gives_room_back, setup, teardown),
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
