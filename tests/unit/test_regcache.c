/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "test.h"

#include <gdx/gdx.h>

#include "mem/regcache.h"

static int released;

static void on_release(struct gdx_reg *r, void *arg)
{
	(void)r;
	(void)arg;
	released++;
}

static void insert_lookup_overlap(void **state)
{
	static char buf[1 << 16];
	struct gdx_regcache *rc;
	struct gdx_reg *r;

	(void)state;
	released = 0;
	assert_int_equal(gdx_regcache_create(NULL, on_release, NULL, &rc), 0);
	assert_int_equal(gdx_regcache_insert(rc, buf + 4096, 4096, (void *)1, NULL), 0);
	assert_int_equal(gdx_regcache_insert(rc, buf, 4096, (void *)2, NULL), 0);
	assert_int_equal(gdx_regcache_insert(rc, buf + 16384, 8192, (void *)3, NULL), 0);
	assert_int_equal(gdx_regcache_insert(rc, buf + 4000, 200, NULL, NULL), -EEXIST);
	assert_int_equal(gdx_regcache_insert(rc, buf + 8191, 8194, NULL, NULL), -EEXIST);
	assert_int_equal(gdx_regcache_count(rc), 3);

	assert_int_equal(gdx_regcache_lookup(rc, buf + 4100, 100, &r), 0);
	assert_ptr_equal(r->payload, (void *)1);
	gdx_regcache_put(rc, r);
	assert_int_equal(gdx_regcache_lookup(rc, buf + 16384 + 8000, 192, &r), 0);
	assert_ptr_equal(r->payload, (void *)3);
	gdx_regcache_put(rc, r);
	/* Straddling the end of an entry is a miss, not a partial hit. */
	assert_int_equal(gdx_regcache_lookup(rc, buf + 4096 + 4000, 200, &r), -ENOENT);
	assert_int_equal(gdx_regcache_lookup(rc, buf + 12288, 1, &r), -ENOENT);

	/* A held entry outlives its removal until put. */
	assert_int_equal(gdx_regcache_lookup(rc, buf, 1, &r), 0);
	assert_int_equal(gdx_regcache_remove(rc, buf), 0);
	assert_int_equal(released, 0);
	gdx_regcache_put(rc, r);
	assert_int_equal(released, 1);
	assert_int_equal(gdx_regcache_remove(rc, buf), -ENOENT);

	gdx_mem_notify_release(buf + 20000, 10);
	assert_int_equal(released, 2);
	gdx_regcache_destroy(rc);
	assert_int_equal(released, 3);
}

/* Device memory freed and re-allocated at the same address must not hit. */
static void no_stale_hit_after_free(void **state)
{
	struct gdx_regcache *rc;
	struct gdx_device *dev;
	struct gdx_reg *r;
	void *d1, *d2;

	(void)state;
	released = 0;
	assert_int_equal(gdx_device_open("emulated", &dev), 0);
	assert_int_equal(gdx_regcache_create(dev, on_release, NULL, &rc), 0);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d1), 0);
	assert_int_equal(gdx_regcache_insert(rc, d1, 1 << 20, NULL, NULL), 0);
	assert_int_equal(gdx_regcache_lookup(rc, d1, 4096, &r), 0);
	assert_int_equal(r->kind, GDX_MEM_DEVICE);
	assert_true(r->buffer_id != 0);
	gdx_regcache_put(rc, r);

	/* gdx's own free path invalidates at once. */
	assert_int_equal(gdx_device_free(dev, d1), 0);
	assert_int_equal(released, 1);
	assert_int_equal(gdx_regcache_lookup(rc, d1, 4096, &r), -ENOENT);

	/* A new allocation, perhaps at the same address, starts clean. */
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d2), 0);
	assert_int_equal(gdx_regcache_lookup(rc, d2, 4096, &r), -ENOENT);
	assert_int_equal(gdx_device_free(dev, d2), 0);
	gdx_regcache_destroy(rc);
	gdx_device_close(dev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(insert_lookup_overlap),
		cmocka_unit_test(no_stale_hit_after_free),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
