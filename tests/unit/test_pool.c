/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <numa.h>
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

static struct gdx_device *dev;

struct logged {
	pthread_mutex_t lock;
	int errors;
	char last[256];
};

static struct logged logged = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void log_cb(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)arg;
	(void)subsys;
	if (lvl != GDX_LOG_ERROR)
		return;
	pthread_mutex_lock(&logged.lock);
	logged.errors++;
	snprintf(logged.last, sizeof(logged.last), "%s", msg);
	pthread_mutex_unlock(&logged.lock);
}

static int errors_logged(void)
{
	int n;

	pthread_mutex_lock(&logged.lock);
	n = logged.errors;
	pthread_mutex_unlock(&logged.lock);
	return n;
}

static int setup(void **state)
{
	(void)state;
	gdx_log_set_callback(log_cb, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	dev = NULL;
	gdx_log_set_callback(NULL, NULL);
	return 0;
}

static struct gdx_bounce_pool *make(size_t buf_size, unsigned count, int node)
{
	struct gdx_bounce_pool_opts o;
	struct gdx_bounce_pool *p = NULL;

	gdx_bounce_pool_opts_init(&o, sizeof(o));
	o.buf_size = buf_size;
	o.count = count;
	o.numa_node = node;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), 0);
	return p;
}

static void defaults_and_layout(void **state)
{
	struct gdx_device_props props;
	struct gdx_bounce_pool *p;
	struct gdx_ptr_attrs a;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *base;
	void *b[16];

	(void)state;
	assert_int_equal(gdx_device_props(dev, &props), 0);
	assert_int_equal(gdx_bounce_pool_create(dev, NULL, &p), 0);
	assert_int_equal(gdx_bounce_buf_size(p), 1u << 20);
	assert_int_equal(gdx_bounce_count(p), 16);
	/* By default the pool sits on the device's node; the emulated device has none. */
	assert_int_equal(gdx_bounce_numa_node(p), props.numa_node < 0 ? -1 : props.numa_node);
	base = gdx_bounce_base(p);
	/* 16 MiB: big enough to be placed on a huge page boundary. */
	assert_true(((uintptr_t)base & ((2u << 20) - 1)) == 0);

	for (unsigned i = 0; i < 16; i++) {
		assert_int_equal(gdx_bounce_get(p, 0, &b[i]), 0);
		assert_int_equal(gdx_bounce_index(p, b[i]), (unsigned)((unsigned char *)b[i] - base) >> 20);
		assert_ptr_equal(b[i], base + (size_t)gdx_bounce_index(p, b[i]) * (1u << 20));
		for (unsigned j = 0; j < i; j++)
			assert_ptr_not_equal(b[i], b[j]);
	}
	/* The whole range is page-locked on the device: the device sees it as pinned. */
	assert_int_equal(gdx_pointer_query(dev, base + (15u << 20) + 5, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_PINNED);
	if (a.size) {
		assert_ptr_equal(a.base, base);
		assert_int_equal(a.size, 16u << 20);
	}

	assert_int_equal(gdx_bounce_index(p, base + 3 * (1u << 20) + 17), 3);
	assert_int_equal(gdx_bounce_index(p, base + (16u << 20)), UINT_MAX);
	assert_int_equal(gdx_bounce_index(p, base - 1), UINT_MAX);
	for (unsigned i = 0; i < 16; i++)
		gdx_bounce_put(p, b[i]);
	gdx_bounce_pool_destroy(p);

	/* Sizes round up to the page size; a small pool needs no huge alignment. */
	p = make(100, 3, -1);
	assert_int_equal(gdx_bounce_buf_size(p), pg);
	assert_true(((uintptr_t)gdx_bounce_base(p) & (pg - 1)) == 0);
	gdx_bounce_pool_destroy(p);
}

static void bad_options(void **state)
{
	struct gdx_bounce_pool_opts o;
	struct gdx_bounce_pool *p;

	(void)state;
	gdx_bounce_pool_opts_init(&o, sizeof(o));
	assert_int_equal(gdx_bounce_pool_create(NULL, &o, &p), -EINVAL);
	assert_int_equal(gdx_bounce_pool_create(dev, &o, NULL), -EINVAL);
	o.count = 0;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EINVAL);
	gdx_bounce_pool_opts_init(&o, sizeof(o));
	o.buf_size = 0;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EINVAL);
	gdx_bounce_pool_opts_init(&o, sizeof(o));
	o.buf_size = SIZE_MAX / 2;
	o.count = 4;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EOVERFLOW);
	o.buf_size = SIZE_MAX - 10;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EOVERFLOW);
	gdx_bounce_pool_opts_init(&o, sizeof(o));
	o.numa_node = -2;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EINVAL);
	o.struct_size = 0;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EINVAL);

	/* An older caller's shorter struct: the fields it lacks get their defaults. */
	memset(&o, 0xff, sizeof(o));
	gdx_bounce_pool_opts_init(&o, offsetof(struct gdx_bounce_pool_opts, count));
	assert_int_equal(o.buf_size, 1u << 20);
	o.buf_size = 8192;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), 0);
	assert_int_equal(gdx_bounce_buf_size(p), 8192);
	assert_int_equal(gdx_bounce_count(p), 16);
	gdx_bounce_pool_destroy(p);

	/* NULL pools answer harmlessly. */
	assert_int_equal(gdx_bounce_get(NULL, 0, (void **)&o), -EINVAL);
	gdx_bounce_put(NULL, &o);
	gdx_bounce_pool_destroy(NULL);
	assert_int_equal(gdx_bounce_count(NULL), 0);
	assert_int_equal(gdx_bounce_index(NULL, &o), UINT_MAX);
	assert_null(gdx_bounce_base(NULL));
	assert_int_equal(gdx_bounce_numa_node(NULL), -1);
}

static void numa_placement(void **state)
{
	struct gdx_bounce_pool_opts o;
	struct gdx_bounce_pool *p;
	void *page;
	int status = -1;

	(void)state;
	gdx_bounce_pool_opts_init(&o, sizeof(o));
	o.buf_size = 64 << 10;
	o.count = 4;
	o.numa_node = 0;
	if (numa_available() < 0) {
		assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EOPNOTSUPP);
		skip();
	}
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), 0);
	assert_int_equal(gdx_bounce_numa_node(p), 0);
	page = (char *)gdx_bounce_base(p) + 3 * (64 << 10);
	assert_int_equal(numa_move_pages(0, 1, &page, NULL, &status, 0), 0);
	assert_int_equal(status, 0);
	gdx_bounce_pool_destroy(p);

	o.numa_node = numa_max_node() + 1;
	assert_int_equal(gdx_bounce_pool_create(dev, &o, &p), -EINVAL);
}

static void exhaustion_and_wait(void **state)
{
	struct gdx_bounce_pool *p = make(4096, 2, -1);
	void *a, *b, *c;

	(void)state;
	assert_int_equal(gdx_bounce_get(p, 0, &a), 0);
	assert_int_equal(gdx_bounce_get(p, 0, &b), 0);
	assert_int_equal(gdx_bounce_get(p, 0, &c), -EAGAIN);
	gdx_bounce_put(p, a);
	assert_int_equal(gdx_bounce_get(p, 0, &c), 0);
	assert_ptr_equal(c, a);
	gdx_bounce_put(p, b);
	gdx_bounce_put(p, c);
	assert_int_equal(gdx_bounce_get(NULL, 1, &a), -EINVAL);
	assert_int_equal(gdx_bounce_get(p, 1, NULL), -EINVAL);
	gdx_bounce_pool_destroy(p);
}

struct waiter {
	struct gdx_bounce_pool *p;
	void *got;
	atomic_bool done;
};

static void *wait_get(void *arg)
{
	struct waiter *w = arg;

	if (gdx_bounce_get(w->p, 1, &w->got))
		w->got = NULL;
	atomic_store(&w->done, true);
	return NULL;
}

static void blocking_get_waits_for_put(void **state)
{
	struct gdx_bounce_pool *p = make(4096, 1, -1);
	struct timespec ts = { 0, 30 * 1000000 };
	struct waiter w = { .p = p };
	pthread_t th;
	void *a;

	(void)state;
	assert_int_equal(gdx_bounce_get(p, 0, &a), 0);
	assert_int_equal(pthread_create(&th, NULL, wait_get, &w), 0);
	nanosleep(&ts, NULL);
	assert_false(atomic_load(&w.done));
	gdx_bounce_put(p, a);
	pthread_join(th, NULL);
	assert_ptr_equal(w.got, a);
	gdx_bounce_put(p, w.got);
	gdx_bounce_pool_destroy(p);
}

/* Counts the buffers get hands out before -EAGAIN, all distinct, then returns them. */
static unsigned drain_count(struct gdx_bounce_pool *p)
{
	void *v[64];
	unsigned n = 0;

	while (n < 64 && !gdx_bounce_get(p, 0, &v[n])) {
		for (unsigned j = 0; j < n; j++)
			assert_ptr_not_equal(v[j], v[n]);
		n++;
	}
	for (unsigned j = 0; j < n; j++)
		gdx_bounce_put(p, v[j]);
	return n;
}

static void bad_puts_are_ignored(void **state)
{
	struct gdx_bounce_pool *p = make(8192, 4, -1);
	struct gdx_bounce_pool *q = make(8192, 4, -1);
	unsigned char *base = gdx_bounce_base(p);
	int before = errors_logged();
	char local;
	void *a, *b;

	(void)state;
	assert_int_equal(gdx_bounce_get(p, 0, &a), 0);
	gdx_bounce_put(p, a);
	gdx_bounce_put(p, a);			/* double put */
	assert_int_equal(errors_logged(), before + 1);
	assert_non_null(strstr(logged.last, "twice"));
	gdx_bounce_put(p, base + 4 * 8192);	/* one past the end */
	gdx_bounce_put(p, base + 8192 + 1);	/* inside a buffer */
	gdx_bounce_put(p, base - 8192);		/* before the start */
	gdx_bounce_put(p, &local);		/* not pool memory at all */
	assert_int_equal(gdx_bounce_get(q, 0, &b), 0);
	gdx_bounce_put(p, b);			/* another pool's buffer */
	assert_int_equal(errors_logged(), before + 6);
	assert_non_null(strstr(logged.last, "not one of its buffers"));
	/* Neither pool's free list was disturbed. */
	assert_int_equal(drain_count(p), 4);
	assert_int_equal(drain_count(q), 3);
	gdx_bounce_put(q, b);
	assert_int_equal(drain_count(q), 4);

	/* Destroying with a buffer out says so. */
	assert_int_equal(gdx_bounce_get(q, 0, &b), 0);
	gdx_bounce_pool_destroy(q);
	assert_int_equal(errors_logged(), before + 7);
	assert_non_null(strstr(logged.last, "still out"));
	gdx_bounce_pool_destroy(p);
}

#define HAMMERS 6
#define HAMMER_ITERS 20000
#define COPY_ITERS 150
#define BUF 16384

struct hammer {
	struct gdx_bounce_pool *p;
	int id;
	int failures;
	void *dbuf;
};

/*
 * Each thread stamps the buffer it holds with its id and checks the stamp is
 * still there before putting it back: two holders of one buffer would clash.
 */
static void *hammer(void *arg)
{
	struct hammer *h = arg;

	for (int i = 0; i < HAMMER_ITERS; i++) {
		uint32_t *b;
		uint32_t tag = (uint32_t)h->id << 24 | (uint32_t)i;

		if (gdx_bounce_get(h->p, i & 1, (void **)&b)) {
			if (!(i & 1))
				continue;	/* non-blocking get found none free */
			h->failures++;
			break;
		}
		b[0] = tag;
		b[BUF / 4 - 1] = tag;
		if (!(i % 64))
			sched_yield();
		if (b[0] != tag || b[BUF / 4 - 1] != tag)
			h->failures++;
		gdx_bounce_put(h->p, b);
	}
	return NULL;
}

/* Round trip through device memory: bounce -> device -> bounce must be bit-exact. */
static void *copier(void *arg)
{
	struct hammer *h = arg;
	unsigned char *want = malloc(BUF);

	for (int i = 0; i < COPY_ITERS && want; i++) {
		unsigned char *b;

		if (gdx_bounce_get(h->p, 1, (void **)&b)) {
			h->failures++;
			break;
		}
		t_fill(want, BUF, (uint64_t)h->id * 100000 + (uint64_t)i);
		memcpy(b, want, BUF);
		if (gdx_memcpy(dev, h->dbuf, b, BUF))
			h->failures++;
		memset(b, 0, BUF);
		if (gdx_memcpy(dev, b, h->dbuf, BUF))
			h->failures++;
		if (memcmp(b, want, BUF))
			h->failures++;
		gdx_bounce_put(h->p, b);
	}
	free(want);
	return NULL;
}

static void threads_hammer_get_put(void **state)
{
	struct gdx_bounce_pool *p = make(BUF, 4, -1);
	struct hammer h[HAMMERS * 2];
	pthread_t th[HAMMERS * 2];
	int before = errors_logged();

	(void)state;
	for (int i = 0; i < HAMMERS * 2; i++) {
		h[i] = (struct hammer){ .p = p, .id = i + 1 };
		if (i >= HAMMERS)
			assert_int_equal(gdx_device_malloc(dev, BUF, &h[i].dbuf), 0);
		assert_int_equal(pthread_create(&th[i], NULL, i < HAMMERS ? hammer : copier, &h[i]), 0);
	}
	for (int i = 0; i < HAMMERS * 2; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(h[i].failures, 0);
		if (h[i].dbuf)
			assert_int_equal(gdx_device_free(dev, h[i].dbuf), 0);
	}
	assert_int_equal(drain_count(p), 4);
	assert_int_equal(errors_logged(), before);
	gdx_bounce_pool_destroy(p);
}

/* The pool keeps its device alive, and gives its registration back on destroy. */
static void holds_device_reference(void **state)
{
	struct gdx_device *d2;
	struct gdx_bounce_pool *p;
	struct gdx_ptr_attrs a;
	void *base, *b, *dbuf;

	(void)state;
	if (strcmp(gdx_device_kind(dev), "emulated"))
		skip();	/* needs a second device that nobody else holds */
	/* A device nobody else holds, so the pool's reference is the only one left. */
	assert_int_equal(gdx_config_set("emulated.devices", "2"), 0);
	assert_int_equal(gdx_device_open("emulated:1", &d2), 0);
	assert_int_equal(gdx_bounce_pool_create(d2, NULL, &p), 0);
	base = gdx_bounce_base(p);
	gdx_device_close(d2);
	/* Still usable through the pool's reference (ASan would catch a freed device). */
	assert_int_equal(gdx_bounce_get(p, 0, &b), 0);
	assert_int_equal(gdx_device_malloc(d2, 4096, &dbuf), 0);
	assert_int_equal(gdx_memcpy(d2, dbuf, b, 4096), 0);
	assert_int_equal(gdx_pointer_query(d2, base, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_PINNED);
	assert_int_equal(gdx_device_free(d2, dbuf), 0);
	gdx_bounce_put(p, b);
	/* Opening it again finds the same live device. */
	assert_int_equal(gdx_device_open("emulated:1", &d2), 0);
	gdx_bounce_pool_destroy(p);
	assert_int_equal(gdx_pointer_query(d2, base, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_HOST);
	gdx_device_close(d2);
	assert_int_equal(gdx_config_set("emulated.devices", NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_and_layout),
		cmocka_unit_test(bad_options),
		cmocka_unit_test(numa_placement),
		cmocka_unit_test(exhaustion_and_wait),
		cmocka_unit_test(blocking_get_waits_for_put),
		cmocka_unit_test(bad_puts_are_ignored),
		cmocka_unit_test(threads_hammer_get_put),
		cmocka_unit_test(holds_device_reference),
	};
	int ret;

	/* $GDX_DEVICE: emulated in CI, cuda when tests/gpu/run.sh runs this on a GPU. */
	ret = gdx_device_open(NULL, &dev);
	if (ret == GDX_ENODEVICE || ret == GDX_ENOLIB) {
		fprintf(stderr, "no device: %s\n", gdx_strerror(ret));
		return T_EXIT_SKIP;
	}
	if (ret)
		return 1;
	return cmocka_run_group_tests(tests, setup, teardown);
}
