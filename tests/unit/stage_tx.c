/* SPDX-License-Identifier: MIT */
/*
 * test_stage: a D2H lane on the agent's ring with fault policy REDO, as
 * tcp's transmit side uses it (the fixture is test_stage.c's).
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
void redo_waits_for_halt(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * A post whose worker launch fails (test_dev_send_launch_fails): REDO
 * returns the error and keeps the room, which a worker may still copy
 * into, until the context is halted.
 */
void redo_launch_fails_before_halt(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * A payload larger than the ring, a chunk at a time through its two halves
 * (test_dev_large_send_recopied_after_halt): the second chunk's copy faults,
 * and once another lane halted the agent the wait for it makes it again;
 * the third goes synchronously into the room the first gave back.
 */
void redo_chunks_after_halt(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * With a done word every copy takes a mark: none free, a reservation that
 * may not wait fails (tcp queues the frame late) rather than leave its post
 * to wait for one under the producer's lock.
 */
void nowait_marks_full(void **state)
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
	lane_ctx_close(st, ctx);
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
void watch_post_own_copy(void **state)
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
void watch_post_abort(void **state)
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
	lane_ctx_close(st, ctx);
}

/*
 * Copies of bytes kept outside the ring (tcp's kept ring: each takes a
 * ticket of align bytes in the lane) when the agent faults
 * (test_dev_kept_agent_fault): their effects run in order, those whose copy
 * landed without an error and the rest with the fault; then the lane goes
 * on synchronously and such copies land at once.
 */
void fault_kept_effects(void **state)
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
	lane_ctx_close(st, ctx);
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

void redo_post_while_hook_waits(void **state)
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
