/* SPDX-License-Identifier: MIT */
/*
 * The key table of the software backends (tcp, loop): keys are 64 random bits
 * that name no slot, a key is never good again once its region is gone, and a
 * key with any bit changed, for another endpoint, out of bounds or without the
 * access asked is refused with GDX_EREMOTE.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test.h"

#include <gdx/gdx.h>

#include "xport/xport.h"

static char buf[4096];
/* Endpoints are only compared by address here. */
static const struct gdx_xport_ep *const ep_a = (const void *)&buf[0];
static const struct gdx_xport_ep *const ep_b = (const void *)&buf[1];

static uint64_t add(const struct gdx_xport_ep *domain, unsigned access)
{
	struct gdx_xport_region r = { .p = buf, .len = sizeof(buf), .access = access,
				      .domain = domain, .addr = 0x10000 };
	uint64_t key = 0;

	assert_int_equal(gdx_xport_rkey_add(&r, &key), 0);
	assert_true(key != 0);
	return key;
}

static int get(const struct gdx_xport_ep *domain, uint64_t key, uint64_t addr, uint64_t len,
	       unsigned access)
{
	struct gdx_xport_rkey *k;
	void *p;
	int st = gdx_xport_rkey_get(domain, key, addr, len, access, &k, &p, NULL);

	if (st == 0) {
		assert_true((char *)p - buf == (ptrdiff_t)(addr - 0x10000));
		gdx_xport_rkey_put(k);
	}
	return st;
}

#define RW (GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE)

/* Every one of the 64 bits varies across keys: none is a slot index or a constant. */
static void key_bits_random(void **state)
{
	enum { N = 256 };
	uint64_t keys[N], ones = 0, zeros = 0;

	(void)state;
	for (int i = 0; i < N; i++) {
		keys[i] = add(ep_a, RW);
		ones |= keys[i];
		zeros |= ~keys[i];
		for (int j = 0; j < i; j++)
			assert_true(keys[j] != keys[i]);
	}
	assert_true(ones == UINT64_MAX);
	assert_true(zeros == UINT64_MAX);
	for (int i = 0; i < N; i++)
		gdx_xport_rkey_del(keys[i]);
}

/*
 * A region deregistered and another registered in its place: the old key is
 * refused, and the new key shares neither half with it (a slot index would
 * come back as the same low half).
 */
static void freed_key_not_reused(void **state)
{
	uint64_t old = add(ep_a, RW);

	(void)state;
	for (int i = 0; i < 1000; i++) {
		uint64_t neu;

		assert_int_equal(get(ep_a, old, 0x10000, 16, RW), 0);
		gdx_xport_rkey_del(old);
		assert_int_equal(get(ep_a, old, 0x10000, 16, RW), GDX_EREMOTE);
		neu = add(ep_a, RW);
		assert_int_equal(get(ep_a, old, 0x10000, 16, RW), GDX_EREMOTE);
		assert_true((uint32_t)neu != (uint32_t)old);
		assert_true(neu >> 32 != old >> 32);
		old = neu;
	}
	gdx_xport_rkey_del(old);
	assert_int_equal(get(ep_a, old, 0x10000, 16, RW), GDX_EREMOTE);
}

static void forged_keys_refused(void **state)
{
	uint64_t key = add(ep_a, GDX_XPORT_ACCESS_REMOTE_WRITE);

	(void)state;
	assert_int_equal(get(ep_a, key, 0x10000, sizeof(buf), GDX_XPORT_ACCESS_REMOTE_WRITE), 0);
	for (int b = 0; b < 64; b++)
		assert_int_equal(get(ep_a, key ^ 1ull << b, 0x10000, 16,
				     GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	assert_int_equal(get(ep_a, 0, 0x10000, 16, GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	assert_int_equal(get(ep_b, key, 0x10000, 16, GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	assert_int_equal(get(ep_a, key, 0x10000, 16, GDX_XPORT_ACCESS_REMOTE_READ), GDX_EREMOTE);
	assert_int_equal(get(ep_a, key, 0xffff, 16, GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	assert_int_equal(get(ep_a, key, 0x10000 + sizeof(buf) - 15, 16,
			     GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	assert_int_equal(get(ep_a, key, 0x10000, sizeof(buf) + 1,
			     GDX_XPORT_ACCESS_REMOTE_WRITE), GDX_EREMOTE);
	gdx_xport_rkey_del(key);
}

/*
 * Thousands of keys live at once (the table grows several times), removed in
 * a scrambled order and added again: every live key is found, every removed
 * one refused, whatever removals moved within a probe run.
 */
static void churn(void **state)
{
	enum { N = 3000 };
	static uint64_t keys[N];
	static char live[N];
	uint64_t s = 0x9e3779b97f4a7c15ull;

	(void)state;
	for (int i = 0; i < N; i++) {
		keys[i] = add(ep_a, RW);
		live[i] = 1;
	}
	for (int round = 0; round < 4; round++) {
		for (int n = 0; n < N / 2; n++) {
			int i = (int)(t_rand(&s) % N);

			if (live[i]) {
				gdx_xport_rkey_del(keys[i]);
				live[i] = 0;
			} else {
				keys[i] = add(ep_a, RW);
				live[i] = 1;
			}
		}
		for (int i = 0; i < N; i++)
			assert_int_equal(get(ep_a, keys[i], 0x10000, 16, RW),
					 live[i] ? 0 : GDX_EREMOTE);
	}
	for (int i = 0; i < N; i++)
		if (live[i])
			gdx_xport_rkey_del(keys[i]);
}

static atomic_int deleted;

static void *del_main(void *arg)
{
	gdx_xport_rkey_del(*(uint64_t *)arg);
	atomic_store(&deleted, 1);
	return NULL;
}

/* Deregistration waits for a lookup that holds the region, while the table grows. */
static void del_waits_for_holder(void **state)
{
	enum { N = 500 };
	static uint64_t more[N];
	struct timespec ms20 = { .tv_nsec = 20 * 1000 * 1000 };
	uint64_t key = add(ep_a, RW);
	struct gdx_xport_rkey *k;
	pthread_t t;
	void *p;

	(void)state;
	assert_int_equal(gdx_xport_rkey_get(ep_a, key, 0x10000, 16, RW, &k, &p, NULL), 0);
	atomic_store(&deleted, 0);
	assert_int_equal(pthread_create(&t, NULL, del_main, &key), 0);
	nanosleep(&ms20, NULL);
	/* dying: refused to new lookups, and still held */
	assert_int_equal(get(ep_a, key, 0x10000, 16, RW), GDX_EREMOTE);
	for (int i = 0; i < N; i++)
		more[i] = add(ep_a, RW);
	nanosleep(&ms20, NULL);
	assert_int_equal(atomic_load(&deleted), 0);
	gdx_xport_rkey_put(k);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(atomic_load(&deleted), 1);
	for (int i = 0; i < N; i++) {
		assert_int_equal(get(ep_a, more[i], 0x10000, 16, RW), 0);
		gdx_xport_rkey_del(more[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(key_bits_random),
		cmocka_unit_test(freed_key_not_reused),
		cmocka_unit_test(forged_keys_refused),
		cmocka_unit_test(churn),
		cmocka_unit_test(del_waits_for_holder),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
