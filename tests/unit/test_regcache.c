/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "test.h"

#include <gdx/gdx.h>

#include "gpu/device.h"
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

/* An emulated device, a cache on it, and 1 MiB of device memory entered whole. */
static void cache_with_device_entry(struct gdx_device **dev, struct gdx_regcache **rc, void **d)
{
	released = 0;
	assert_int_equal(gdx_device_open("emulated", dev), 0);
	assert_int_equal(gdx_regcache_create(*dev, on_release, NULL, rc), 0);
	assert_int_equal(gdx_device_malloc(*dev, 1 << 20, d), 0);
	assert_int_equal(gdx_regcache_insert(*rc, *d, 1 << 20, NULL, NULL), 0);
}

/* Device memory freed and re-allocated at the same address must not hit. */
static void no_stale_hit_after_free(void **state)
{
	struct gdx_regcache *rc;
	struct gdx_device *dev;
	struct gdx_reg *r;
	void *d1, *d2;

	(void)state;
	cache_with_device_entry(&dev, &rc, &d1);
	assert_int_equal(gdx_regcache_lookup(rc, d1, 4096, &r), 0);
	assert_int_equal(r->kind, GDX_MEM_DEVICE);
	assert_true(r->buffer_id != 0);
	gdx_regcache_put(rc, r);

	/* A refused free (a pointer inside the allocation) leaves the entry alone. */
	assert_int_equal(gdx_device_free(dev, (char *)d1 + 4096), GDX_EBADPTR);
	assert_int_equal(gdx_regcache_count(rc), 1);
	assert_int_equal(released, 0);

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

static void bad_arguments(void **state)
{
	static char buf[8192];
	struct gdx_regcache *rc;
	struct gdx_reg *r;

	(void)state;
	released = 0;
	assert_int_equal(gdx_regcache_create(NULL, on_release, NULL, &rc), 0);
	assert_int_equal(gdx_regcache_insert(NULL, buf, 1, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_regcache_insert(rc, NULL, 1, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_regcache_insert(rc, buf, 0, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_regcache_insert(rc, buf, SIZE_MAX, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_regcache_insert(rc, buf, 4096, NULL, NULL), 0);
	/* An empty or wrapping lookup is not a hit on whatever lies nearby. */
	assert_int_equal(gdx_regcache_lookup(rc, buf + 4096, 0, &r), -EINVAL);
	assert_int_equal(gdx_regcache_lookup(rc, buf, 0, &r), -EINVAL);
	assert_int_equal(gdx_regcache_lookup(rc, buf + 10, SIZE_MAX, &r), -EINVAL);
	assert_int_equal(gdx_regcache_lookup(rc, buf, 1, NULL), -EINVAL);
	assert_int_equal(gdx_regcache_lookup(NULL, buf, 1, &r), -EINVAL);
	assert_int_equal(gdx_regcache_lookup(rc, buf + 4095, 1, &r), 0);
	gdx_regcache_put(rc, r);
	assert_int_equal(gdx_regcache_lookup(rc, buf + 4096, 1, &r), -ENOENT);
	assert_int_equal(gdx_regcache_remove(NULL, buf), -EINVAL);
	assert_int_equal(gdx_regcache_count(NULL), 0);
	/* Notifying an empty range drops nothing. */
	gdx_mem_notify_release(buf, 0);
	assert_int_equal(gdx_regcache_count(rc), 1);
	gdx_regcache_destroy(rc);
	assert_int_equal(released, 1);
	gdx_regcache_destroy(NULL);
}

/* gdx_mem_notify_release drops exactly the entries the range touches. */
static void notify_drops_only_overlaps(void **state)
{
	static char buf[64 * 1024];
	struct gdx_regcache *rc, *rc2;

	(void)state;
	released = 0;
	assert_int_equal(gdx_regcache_create(NULL, on_release, NULL, &rc), 0);
	assert_int_equal(gdx_regcache_create(NULL, on_release, NULL, &rc2), 0);
	for (int i = 0; i < 16; i++)
		assert_int_equal(gdx_regcache_insert(rc, buf + i * 4096, 4096, NULL, NULL), 0);
	assert_int_equal(gdx_regcache_insert(rc2, buf + 5 * 4096, 100, NULL, NULL), 0);
	/* From the last byte of entry 4 to the first byte of entry 7: 4, 5, 6, 7. */
	gdx_mem_notify_release(buf + 5 * 4096 - 1, 2 * 4096 + 2);
	assert_int_equal(released, 5);
	assert_int_equal(gdx_regcache_count(rc), 12);
	assert_int_equal(gdx_regcache_count(rc2), 0);
	/* A range in a gap touches nothing; the end is exclusive. */
	gdx_mem_notify_release(buf + 5 * 4096, 4096);
	gdx_mem_notify_release(buf, 0);
	assert_int_equal(released, 5);
	gdx_mem_notify_release(buf + 8 * 4096 - 10, 10);
	assert_int_equal(released, 5);
	gdx_mem_notify_release(buf + 8 * 4096 - 10, 11);
	assert_int_equal(released, 6);
	/* A range that wraps the address space is clamped, not ignored. */
	gdx_mem_notify_release(buf + 15 * 4096, SIZE_MAX);
	assert_int_equal(released, 7);
	gdx_regcache_destroy(rc2);
	gdx_regcache_destroy(rc);
	assert_int_equal(released, 7 + 10);
}

/* Against a plain array model, with thousands of entries and random operations. */
#define SLOTS 4096
#define SLOT 256

static void matches_model(void **state)
{
	static char arena[SLOTS * SLOT];
	static int start_of[SLOTS];		/* slot -> first slot of its entry, or -1 */
	static int len_of[SLOTS];		/* for entry starts: length in slots */
	struct gdx_regcache *rc;
	uint64_t s = 12345;
	size_t live = 0;
	int inserted = 0;

	(void)state;
	released = 0;
	for (int i = 0; i < SLOTS; i++)
		start_of[i] = -1;
	assert_int_equal(gdx_regcache_create(NULL, on_release, NULL, &rc), 0);
	for (int it = 0; it < 60000; it++) {
		int op = (int)(t_rand(&s) % 10), a = (int)(t_rand(&s) % SLOTS);
		int n = 1 + (int)(t_rand(&s) % 8);
		struct gdx_reg *r;
		bool free_run = true;

		if (a + n > SLOTS)
			n = SLOTS - a;
		if (op < 4) {
			for (int k = a; k < a + n; k++)
				free_run &= start_of[k] < 0;
			assert_int_equal(gdx_regcache_insert(rc, arena + a * SLOT, (size_t)n * SLOT,
							     (void *)(intptr_t)(a + 1), NULL),
					 free_run ? 0 : -EEXIST);
			if (free_run) {
				for (int k = a; k < a + n; k++)
					start_of[k] = a;
				len_of[a] = n;
				live++;
				inserted++;
			}
		} else if (op < 5) {
			bool is_start = start_of[a] == a;

			assert_int_equal(gdx_regcache_remove(rc, arena + a * SLOT),
					 is_start ? 0 : -ENOENT);
			if (is_start) {
				for (int k = a; k < a + len_of[a]; k++)
					start_of[k] = -1;
				live--;
			}
		} else {
			/* A lookup inside slot a, of up to the rest of a's entry or beyond. */
			size_t off = t_rand(&s) % SLOT, len = 1 + t_rand(&s) % (3 * SLOT);
			int e = start_of[a];
			bool hit = e >= 0 &&
				   (size_t)a * SLOT + off + len <= (size_t)(e + len_of[e]) * SLOT;
			int ret = gdx_regcache_lookup(rc, arena + (size_t)a * SLOT + off, len, &r);

			assert_int_equal(ret, hit ? 0 : -ENOENT);
			if (hit) {
				assert_ptr_equal(r->payload, (void *)(intptr_t)(e + 1));
				assert_int_equal(r->start, (uintptr_t)(arena + e * SLOT));
				gdx_regcache_put(rc, r);
			}
		}
		if (!(it % 1000))
			assert_int_equal(gdx_regcache_count(rc), live);
	}
	assert_int_equal(gdx_regcache_count(rc), live);
	gdx_regcache_destroy(rc);
	/* Every entry ever inserted was released exactly once. */
	assert_int_equal(released, inserted);
}

/*
 * A release callback that calls back into gdx: here it unregisters host memory
 * it had page-locked, which notifies every cache.  Must not deadlock.
 */
static struct gdx_device *reenter_dev;
static int reenter_ok;

static void release_unregisters(struct gdx_reg *r, void *arg)
{
	(void)arg;
	if (gdx_host_unregister(reenter_dev, r->payload) == 0)
		reenter_ok++;
}

static void release_may_reenter(void **state)
{
	static char host[4][8192] __attribute__((aligned(4096)));
	struct gdx_regcache *rc;
	void *d;

	(void)state;
	reenter_ok = 0;
	assert_int_equal(gdx_device_open("emulated", &reenter_dev), 0);
	assert_int_equal(gdx_regcache_create(reenter_dev, release_unregisters, NULL, &rc), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gdx_host_register(reenter_dev, host[i], sizeof(host[i]), 0), 0);
	assert_int_equal(gdx_device_malloc(reenter_dev, 65536, &d), 0);

	/* Through remove, */
	assert_int_equal(gdx_regcache_insert(rc, host[0], 4096, host[0], NULL), 0);
	assert_int_equal(gdx_regcache_remove(rc, host[0]), 0);
	assert_int_equal(reenter_ok, 1);
	/* through a free that notifies every cache, */
	assert_int_equal(gdx_regcache_insert(rc, d, 65536, host[1], NULL), 0);
	assert_int_equal(gdx_device_free(reenter_dev, d), 0);
	assert_int_equal(reenter_ok, 2);
	/* through an unregister of the entry's own range, which notifies again, */
	assert_int_equal(gdx_regcache_insert(rc, host[2], 8192, host[3], NULL), 0);
	assert_int_equal(gdx_host_unregister(reenter_dev, host[2]), 0);
	assert_int_equal(reenter_ok, 3);
	/* and through destroy. */
	assert_int_equal(gdx_host_register(reenter_dev, host[0], 8192, 0), 0);
	assert_int_equal(gdx_regcache_insert(rc, host[0] + 100, 10, host[0], NULL), 0);
	gdx_regcache_destroy(rc);
	assert_int_equal(reenter_ok, 4);
	gdx_device_close(reenter_dev);
}

/* Ranges running past the device allocation are refused. */
static void range_must_fit_allocation(void **state)
{
	struct gdx_regcache *rc;
	struct gdx_device *dev;
	void *d;

	(void)state;
	assert_int_equal(gdx_device_open("emulated", &dev), 0);
	assert_int_equal(gdx_regcache_create(dev, NULL, NULL, &rc), 0);
	assert_int_equal(gdx_device_malloc(dev, 10000, &d), 0);
	assert_int_equal(gdx_regcache_insert(rc, d, 10001, NULL, NULL), GDX_EBADPTR);
	assert_int_equal(gdx_regcache_insert(rc, (char *)d + 5000, 5001, NULL, NULL), GDX_EBADPTR);
	assert_int_equal(gdx_regcache_insert(rc, (char *)d + 5000, 5000, NULL, NULL), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_regcache_count(rc), 0);
	gdx_regcache_destroy(rc);
	gdx_device_close(dev);
}

/*
 * Memory freed behind gdx's back (as an application's own cuMemFree would) and
 * re-allocated: the lookup finds the allocation changed and drops the entry.
 */
static void stale_after_foreign_free(void **state)
{
	struct gdx_regcache *rc;
	struct gdx_device *dev;
	struct gdx_reg *r;
	void *d1, *d2;

	(void)state;
	cache_with_device_entry(&dev, &rc, &d1);
	assert_int_equal(dev->ops->free(dev->priv, d1), 0);	/* no notification */
	assert_int_equal(gdx_regcache_count(rc), 1);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d2), 0);
	assert_int_equal(gdx_regcache_lookup(rc, d1, 4096, &r), -ENOENT);
	assert_int_equal(gdx_regcache_count(rc), 0);
	assert_int_equal(released, 1);
	assert_int_equal(gdx_device_free(dev, d2), 0);
	gdx_regcache_destroy(rc);
	gdx_device_close(dev);
}

/* Lookups racing with inserts, removes and notifications: no lost or double release. */
#define RACE_ITERS 20000
static atomic_int race_released;
static atomic_bool race_stop;
static char race_buf[64 * 4096];

static void race_release(struct gdx_reg *r, void *arg)
{
	(void)arg;
	(void)r;
	atomic_fetch_add(&race_released, 1);
}

static void *race_lookups(void *arg)
{
	struct gdx_regcache *rc = arg;
	uint64_t s = (uint64_t)(uintptr_t)pthread_self();
	long bad = 0;

	while (!atomic_load(&race_stop)) {
		int slot = (int)(t_rand(&s) % 64);
		struct gdx_reg *r;

		if (!gdx_regcache_lookup(rc, race_buf + slot * 4096 + 8, 16, &r)) {
			if (r->start != (uintptr_t)(race_buf + slot * 4096) || r->len != 4096)
				bad++;
			gdx_regcache_put(rc, r);
		}
	}
	return (void *)bad;
}

static void concurrent_lookups(void **state)
{
	struct gdx_regcache *rc;
	pthread_t th[3];
	uint64_t s = 99;
	int inserted = 0;

	(void)state;
	atomic_store(&race_released, 0);
	atomic_store(&race_stop, false);
	assert_int_equal(gdx_regcache_create(NULL, race_release, NULL, &rc), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, race_lookups, rc), 0);
	for (int it = 0; it < RACE_ITERS; it++) {
		int slot = (int)(t_rand(&s) % 64);

		switch (t_rand(&s) % 3) {
		case 0:
			if (!gdx_regcache_insert(rc, race_buf + slot * 4096, 4096, NULL, NULL))
				inserted++;
			break;
		case 1:
			gdx_regcache_remove(rc, race_buf + slot * 4096);
			break;
		default:
			gdx_mem_notify_release(race_buf + slot * 4096 + 100, 3 * 4096);
			break;
		}
	}
	atomic_store(&race_stop, true);
	for (int i = 0; i < 3; i++) {
		void *bad;

		pthread_join(th[i], &bad);
		assert_null(bad);
	}
	gdx_regcache_destroy(rc);
	assert_int_equal(atomic_load(&race_released), inserted);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(insert_lookup_overlap),
		cmocka_unit_test(no_stale_hit_after_free),
		cmocka_unit_test(bad_arguments),
		cmocka_unit_test(notify_drops_only_overlaps),
		cmocka_unit_test(matches_model),
		cmocka_unit_test(release_may_reenter),
		cmocka_unit_test(range_must_fit_allocation),
		cmocka_unit_test(stale_after_foreign_free),
		cmocka_unit_test(concurrent_lookups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
