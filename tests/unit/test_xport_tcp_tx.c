/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's transmit queue when the copy agent is dropped
 * (tcp_tx_drop_agent), on an endpoint built by hand: frames whose bytes began
 * to go out stay ring frames, going, whatever their copy's state.  A poster
 * writes a small device send itself once its copy was seen and leaves it on
 * the queue, going, while it writes with the lock dropped and after a short
 * write; an agent fault in that window (the receive thread's or a CQ
 * waiter's) must not turn it back into a queued stream frame: that move is no
 * edge of its state machine (an assertion), and the frame would be sent
 * again from its first byte, or keep its room in the ring for good.
 */
#include <pthread.h>
#include <stdlib.h>

#include "xport/tcp/tcp_int.h"
#include "test.h"

static void drop_agent_over(enum txi_state st)
{
	struct tcp_ep *t = calloc(1, sizeof(*t));
	struct txi going = { .path = TXP_RING, .state = st, .off = 100 };
	struct txi late = { .path = TXP_RING, .state = TXS_LATE };

	assert_non_null(t);
	pthread_mutex_init(&t->lock, NULL);
	t->txq_head = &going;
	t->txq_tail = &going;
	t->sr_late = &late;	/* not on the queue: only the pointer is cleared */
	tcp_tx_drop_agent(t);
	assert_int_equal(going.state, st);
	assert_int_equal(going.path, TXP_RING);
	assert_int_equal(going.off, 100);
	assert_int_equal(tcp_tx_noagent(t), 1);
	assert_null(t->sr_late);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* A poster's frame: its copy was seen, its bytes are going out of the ring. */
static void test_drop_agent_leaves_going_staged(void **state)
{
	(void)state;
	drop_agent_over(TXS_GOING_STAGED);
}

/* A LATE frame a train took whole through the ring's halves. */
static void test_drop_agent_leaves_going(void **state)
{
	(void)state;
	drop_agent_over(TXS_GOING);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drop_agent_leaves_going_staged),
		cmocka_unit_test(test_drop_agent_leaves_going),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
