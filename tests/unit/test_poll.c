/* SPDX-License-Identifier: MIT */
/*
 * gdx_poll_adapt, the poll window of the TCP target's reactors and of the
 * RDMA host's receivers: a sleep within the cap grows the window to cover it,
 * at once and with a quarter to spare, never past the cap; a longer one
 * halves it; a shorter one than the window leaves it.
 */
#include "common/util.h"
#include "test.h"

#define CAP 2000000ull

static void test_grows_to_cover_a_short_sleep(void **state)
{
	(void)state;
	/* from 0, in one step: the first sleep within the cap sizes the window */
	assert_int_equal(gdx_poll_adapt(0, 400000, CAP), 500000);
	assert_int_equal(gdx_poll_adapt(500000, 800000, CAP), 1000000);
	/* a sleep of the cap itself still counts as short */
	assert_int_equal(gdx_poll_adapt(0, CAP, CAP), CAP);
}

static void test_never_past_the_cap(void **state)
{
	(void)state;
	assert_int_equal(gdx_poll_adapt(0, 1900000, CAP), CAP);
	assert_int_equal(gdx_poll_adapt(CAP, 1000, CAP), CAP);
}

static void test_keeps_it_for_a_shorter_sleep(void **state)
{
	(void)state;
	assert_int_equal(gdx_poll_adapt(1000000, 100000, CAP), 1000000);
	assert_int_equal(gdx_poll_adapt(1000000, 0, CAP), 1000000);
}

static void test_halves_on_a_long_sleep(void **state)
{
	uint64_t w = CAP;

	(void)state;
	assert_int_equal(gdx_poll_adapt(w, CAP + 1, CAP), CAP / 2);
	/* a queue gone quiet stops spinning: sleeps longer than the cap take it to 0 */
	for (int i = 0; i < 64; i++)
		w = gdx_poll_adapt(w, 10 * CAP, CAP);
	assert_int_equal(w, 0);
	assert_int_equal(gdx_poll_adapt(0, UINT64_MAX, CAP), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grows_to_cover_a_short_sleep),
		cmocka_unit_test(test_never_past_the_cap),
		cmocka_unit_test(test_keeps_it_for_a_shorter_sleep),
		cmocka_unit_test(test_halves_on_a_long_sleep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
