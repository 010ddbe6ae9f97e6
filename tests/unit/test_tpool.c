/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

#include "common/tpool.h"

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* A gate jobs can wait on, opened from the test. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	int waiting;
};

static struct gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0 };

static void gate_reset(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.open = false;
	gate.waiting = 0;
	pthread_mutex_unlock(&gate.lock);
}

static void gate_job(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate.lock);
	gate.waiting++;
	pthread_cond_broadcast(&gate.cond);
	while (!gate.open)
		pthread_cond_wait(&gate.cond, &gate.lock);
	pthread_mutex_unlock(&gate.lock);
}

static void gate_wait_for_waiters(int n)
{
	pthread_mutex_lock(&gate.lock);
	while (gate.waiting < n)
		pthread_cond_wait(&gate.cond, &gate.lock);
	pthread_mutex_unlock(&gate.lock);
}

static void gate_open(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.open = true;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

static atomic_int counter;

static void count_job(void *arg)
{
	(void)arg;
	atomic_fetch_add(&counter, 1);
}

/* Like gate_wait_for_waiters, but gives up after ms: false then. */
static bool gate_wait_for_waiters_ms(int n, int ms)
{
	struct timespec dl;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&gate.lock);
	while (ok && gate.waiting < n)
		ok = pthread_cond_timedwait(&gate.cond, &gate.lock, &dl) == 0 || gate.waiting >= n;
	pthread_mutex_unlock(&gate.lock);
	return ok;
}

static void bad_arguments(void **state)
{
	struct gdx_tpool *tp;

	(void)state;
	assert_int_equal(gdx_tpool_create(0, "t", &tp), -EINVAL);
	assert_int_equal(gdx_tpool_create(100000, "t", &tp), -EINVAL);
	assert_int_equal(gdx_tpool_create(1, "t", NULL), -EINVAL);
	assert_int_equal(gdx_tpool_create(3, NULL, &tp), 0);
	assert_int_equal(gdx_tpool_size(tp), 3);
	assert_int_equal(gdx_tpool_submit(tp, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_tpool_submit(NULL, count_job, NULL), -EINVAL);
	gdx_tpool_destroy(tp);
	gdx_tpool_destroy(NULL);
	gdx_tpool_drain(NULL);
	assert_int_equal(gdx_tpool_size(NULL), 0);
}

struct order {
	int seen[1000];
	int n;
};

static struct order order;

static void order_job(void *arg)
{
	order.seen[order.n++] = (int)(intptr_t)arg;
}

/* One worker runs jobs exactly in submission order. */
static void fifo_order(void **state)
{
	struct gdx_tpool *tp;

	(void)state;
	memset(&order, 0, sizeof(order));
	assert_int_equal(gdx_tpool_create(1, "fifo", &tp), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(gdx_tpool_submit(tp, order_job, (void *)(intptr_t)i), 0);
	gdx_tpool_drain(tp);
	assert_int_equal(order.n, 1000);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(order.seen[i], i);
	gdx_tpool_destroy(tp);
}

#define SUBMITTERS 8
#define PER_SUBMITTER 20000

static void *submitter(void *arg)
{
	struct gdx_tpool *tp = arg;

	for (int i = 0; i < PER_SUBMITTER; i++)
		if (gdx_tpool_submit(tp, count_job, NULL))
			return (void *)1;
	/* Drain concurrently with other submitters: must return, not starve. */
	gdx_tpool_drain(tp);
	return NULL;
}

static void many_submitters(void **state)
{
	pthread_t th[SUBMITTERS];
	struct gdx_tpool *tp;

	(void)state;
	atomic_store(&counter, 0);
	assert_int_equal(gdx_tpool_create(4, "many", &tp), 0);
	for (int i = 0; i < SUBMITTERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, submitter, tp), 0);
	for (int i = 0; i < SUBMITTERS; i++) {
		void *r;

		pthread_join(th[i], &r);
		assert_null(r);
	}
	gdx_tpool_drain(tp);
	assert_int_equal(atomic_load(&counter), SUBMITTERS * PER_SUBMITTER);
	gdx_tpool_destroy(tp);
}

static atomic_bool drained;

static void *drainer(void *arg)
{
	gdx_tpool_drain(arg);
	atomic_store(&drained, true);
	return NULL;
}

/* drain() waits for a running job, and for jobs queued behind it. */
static void drain_waits(void **state)
{
	struct gdx_tpool *tp;
	pthread_t th;

	(void)state;
	gate_reset();
	atomic_store(&counter, 0);
	atomic_store(&drained, false);
	assert_int_equal(gdx_tpool_create(2, "drain", &tp), 0);
	assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
	assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
	assert_int_equal(gdx_tpool_submit(tp, count_job, NULL), 0);
	gate_wait_for_waiters(2);
	assert_int_equal(pthread_create(&th, NULL, drainer, tp), 0);
	sleep_ms(50);
	assert_false(atomic_load(&drained));
	assert_int_equal(atomic_load(&counter), 0);
	gate_open();
	pthread_join(th, NULL);
	assert_true(atomic_load(&drained));
	assert_int_equal(atomic_load(&counter), 1);
	gdx_tpool_destroy(tp);
}

static void *destroyer(void *arg)
{
	gdx_tpool_destroy(arg);
	return NULL;
}

static struct gdx_tpool *spawn_pool;
static atomic_int spawn_failures;

static void spawn_job(void *arg)
{
	int depth = (int)(intptr_t)arg;

	atomic_fetch_add(&counter, 1);
	/* cmocka's asserts belong to the test thread: count failures instead. */
	if (depth > 0 && gdx_tpool_submit(spawn_pool, spawn_job, (void *)(intptr_t)(depth - 1)))
		atomic_fetch_add(&spawn_failures, 1);
}

/* destroy() runs what is queued, even jobs queued by jobs while it waits. */
static void destroy_runs_queued_jobs(void **state)
{
	struct gdx_tpool *tp;
	pthread_t th;
	int ret;

	(void)state;
	gate_reset();
	atomic_store(&counter, 0);
	assert_int_equal(gdx_tpool_create(1, "destroy", &tp), 0);
	spawn_pool = tp;
	assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(gdx_tpool_submit(tp, count_job, NULL), 0);
	assert_int_equal(gdx_tpool_submit(tp, spawn_job, (void *)(intptr_t)5), 0);
	gate_wait_for_waiters(1);
	assert_int_equal(pthread_create(&th, NULL, destroyer, tp), 0);
	/* Once destroy has begun, outsiders are refused; jobs already queued are not dropped. */
	while ((ret = gdx_tpool_submit(tp, count_job, NULL)) == 0) {
		atomic_fetch_sub(&counter, 1);	/* accepted before the stop: it will run */
		sleep_ms(1);
	}
	assert_int_equal(ret, -ESHUTDOWN);
	gate_open();
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&counter), 100 + 6);
	assert_int_equal(atomic_load(&spawn_failures), 0);
}

struct logged {
	int errors;
};

static void log_cb(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	struct logged *l = arg;

	(void)msg;
	if (lvl == GDX_LOG_ERROR && !strcmp(subsys, "tpool"))
		l->errors++;
}

static struct gdx_tpool *self_pool;

static void self_drain_job(void *arg)
{
	(void)arg;
	gdx_tpool_drain(self_pool);	/* would wait for itself */
	gdx_tpool_destroy(self_pool);	/* would join itself */
	atomic_fetch_add(&counter, 1);
}

static void drain_from_job_is_refused(void **state)
{
	struct logged l = { 0 };

	(void)state;
	atomic_store(&counter, 0);
	gdx_log_set_callback(log_cb, &l);
	assert_int_equal(gdx_tpool_create(1, "self", &self_pool), 0);
	assert_int_equal(gdx_tpool_submit(self_pool, self_drain_job, NULL), 0);
	gdx_tpool_drain(self_pool);
	assert_int_equal(atomic_load(&counter), 1);
	assert_int_equal(l.errors, 2);
	gdx_tpool_destroy(self_pool);
	gdx_log_set_callback(NULL, NULL);
}

/*
 * A spinning worker takes a job without a wake, but jobs beyond what it can
 * take must still wake the sleepers: three jobs that only finish together
 * need all three workers at once.
 */
static void spinning_worker(void **state)
{
	struct gdx_tpool *tp;

	(void)state;
	gdx_tpool_set_spin(NULL, 10, 1);
	assert_int_equal(gdx_tpool_create(3, "spin", &tp), 0);
	for (int round = 0; round < 4; round++) {
		/* One spinner, then two: the third job needs the sleeper either way. */
		gdx_tpool_set_spin(tp, 5000000, 1 + round % 2);
		atomic_store(&counter, 0);
		assert_int_equal(gdx_tpool_submit(tp, count_job, NULL), 0);
		gdx_tpool_drain(tp);
		assert_int_equal(atomic_load(&counter), 1);
		sleep_ms(5);	/* the worker that ran it now spins */
		if (round % 2) {
			/* Two jobs at once, so that two workers come out of them spinning. */
			gate_reset();
			assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
			assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
			assert_true(gate_wait_for_waiters_ms(2, 10000));
			gate_open();
			gdx_tpool_drain(tp);
			sleep_ms(5);
		}
		gate_reset();
		for (int i = 0; i < 3; i++)
			assert_int_equal(gdx_tpool_submit(tp, gate_job, NULL), 0);
		assert_true(gate_wait_for_waiters_ms(3, 10000));
		gate_open();
		gdx_tpool_drain(tp);
	}
	/* Destroy does not wait out a spin (5 s here). */
	assert_int_equal(gdx_tpool_submit(tp, count_job, NULL), 0);
	gdx_tpool_drain(tp);
	gdx_tpool_destroy(tp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bad_arguments),
		cmocka_unit_test(fifo_order),
		cmocka_unit_test(many_submitters),
		cmocka_unit_test(drain_waits),
		cmocka_unit_test(destroy_runs_queued_jobs),
		cmocka_unit_test(drain_from_job_is_refused),
		cmocka_unit_test(spinning_worker),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
