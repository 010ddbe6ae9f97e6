/* SPDX-License-Identifier: MIT */
/*
 * Transport conformance: one suite, every backend.  GDX_TEST_XPORT picks the
 * backend (loop, tcp, rdma; default loop) and GDX_TEST_XPORT_ADDR the listen
 * address (default loop://conformance, tcp://127.0.0.1:0; rdma needs one).
 * GDX_TEST_XPORT_MAX caps the largest message (default 64 MiB).
 *
 * Both ends live in this process except for the peer-death case, which runs a
 * peer as a child process (this program re-executed with "peer ADDR") and
 * kills it with work pending.
 *
 * The cases live by theme in xport_conf_*.c (xport_conf.h); this file has
 * what they share, the case list and the peer's mode.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "common/config.h"
#include "test.h"
#include "xport_conf.h"

const char *backend = "loop";
char listen_addr[128];
size_t max_msg = 64u << 20;
struct gdx_device *dev;
static int case_no;

void *accept_thread(void *arg)
{
	struct acc *a = arg;

	a->ret = gdx_xport_accept(a->l, a->cq, 30000, &a->ep);
	return NULL;
}

/* Listens on a fresh address (loop names must differ), connects, accepts. */
void pair_open(struct pair *p, const struct gdx_xport_opts *os,
	       const struct gdx_xport_opts *oc)
{
	char addr[160];
	struct acc a = { 0 };
	pthread_t th;

	memset(p, 0, sizeof(*p));
	if (!strcmp(backend, "loop"))
		snprintf(addr, sizeof(addr), "%s-%d", listen_addr, ++case_no);
	else
		snprintf(addr, sizeof(addr), "%s", listen_addr);
	assert_int_equal(gdx_xport_listen(addr, os, &p->l), 0);
	assert_int_equal(gdx_xport_cq_create(&p->cqs), 0);
	assert_int_equal(gdx_xport_cq_create(&p->cqc), 0);
	a.l = p->l;
	a.cq = p->cqs;
	assert_int_equal(pthread_create(&th, NULL, accept_thread, &a), 0);
	assert_int_equal(gdx_xport_connect(gdx_xport_listener_addr(p->l), oc, p->cqc, &p->c), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	p->s = a.ep;
	assert_string_equal(gdx_xport_ep_backend(p->c), strcmp(backend, "rdma") ? backend : "rdma");
	assert_int_equal(gdx_xport_ep_connected(p->c), 1);
}

void pair_close(struct pair *p)
{
	gdx_xport_ep_destroy(p->c);
	gdx_xport_ep_destroy(p->s);
	gdx_xport_listener_close(p->l);
	assert_int_equal(gdx_xport_cq_destroy(p->cqs), 0);
	assert_int_equal(gdx_xport_cq_destroy(p->cqc), 0);
}

void get_cqe(struct gdx_xport_cq *cq, struct gdx_xport_cqe *e)
{
	for (int i = 0; i < 600; i++) {
		int n = gdx_xport_cq_poll(cq, e, 1);

		assert_true(n >= 0);
		if (n == 1)
			return;
		assert_true(gdx_xport_cq_wait(cq, 100) >= 0);
	}
	fail_msg("no completion within 60 s");
}

void expect(struct gdx_xport_cq *cq, uint64_t wr_id, enum gdx_xport_op op, int status,
	    uint64_t len)
{
	struct gdx_xport_cqe e;

	get_cqe(cq, &e);
	if (e.wr_id != wr_id || e.op != op || e.status != status)
		fail_msg("completion wr_id %llu op %s status %d (%s); expected wr_id %llu op %s "
			 "status %d (%s)", (unsigned long long)e.wr_id, gdx_xport_op_name(e.op),
			 e.status, gdx_strerror(e.status), (unsigned long long)wr_id,
			 gdx_xport_op_name(op), status, gdx_strerror(status));
	if (!status)
		assert_int_equal(e.len, len);
}

void expect_none(struct gdx_xport_cq *cq)
{
	struct gdx_xport_cqe e;

	assert_int_equal(gdx_xport_cq_poll(cq, &e, 1), 0);
}

/*
 * The cases that reach into the tcp backend's device paths through the
 * emulated device's knobs (agent faults, slow copies) run only there.
 */
bool tcp_on_emulated(void)
{
	return !strcmp(backend, "tcp") && !strncmp(gdx_device_name(dev), "emulated", 8);
}

void *kalloc(enum kind k, size_t n)
{
	void *p;

	if (k == K_DEV) {
		assert_int_equal(gdx_device_malloc(dev, n ? n : 1, &p), 0);
		return p;
	}
	p = malloc(n ? n : 1);
	assert_non_null(p);
	return p;
}

void kfree(enum kind k, void *p)
{
	if (k == K_DEV)
		gdx_device_free(dev, p);
	else
		free(p);
}

void kfill(enum kind k, void *p, size_t n, uint64_t seed)
{
	void *h;

	if (k == K_HOST) {
		t_fill(p, n, seed);
		return;
	}
	h = malloc(n ? n : 1);
	t_fill(h, n, seed);
	assert_int_equal(gdx_memcpy(dev, p, h, n), 0);
	free(h);
}

void kcheck(enum kind k, const void *p, size_t n, uint64_t seed)
{
	unsigned char *want = malloc(n ? n : 1), *got = malloc(n ? n : 1);

	t_fill(want, n, seed);
	if (k == K_DEV)
		assert_int_equal(gdx_memcpy(dev, got, p, n), 0);
	else
		memcpy(got, p, n);
	if (memcmp(want, got, n)) {
		size_t i = 0;

		while (want[i] == got[i])
			i++;
		fail_msg("data differs at byte %zu of %zu", i, n);
	}
	free(want);
	free(got);
}

/* Remote registration of device memory can be refused on verbs without dma-buf/peermem. */
int reg_remote(struct gdx_xport_ep *ep, void *p, size_t n, unsigned acc,
	       struct gdx_xport_mr **mr)
{
	int ret = gdx_xport_mr_reg(ep, p, n, acc, mr);

	if (ret == -EOPNOTSUPP) {
		assert_string_equal(backend, "rdma");
		return ret;
	}
	assert_int_equal(ret, 0);
	return 0;
}

/* The peer process: connects, registers a region, sends its key, then waits to be killed. */
static int peer_main(const char *addr)
{
	struct gdx_xport_opts o;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	struct gdx_xport_mr *mr;
	struct gdx_xport_cqe e;
	static unsigned char region[1 << 20];
	uint64_t msg[2];

	gdx_xport_opts_init(&o, sizeof(o));
	o.max_unexpected = 4096;	/* so the parent's big send stalls */
	if (gdx_xport_cq_create(&cq) || gdx_xport_connect(addr, &o, cq, &ep))
		return 1;
	if (gdx_xport_mr_reg(ep, region, sizeof(region), GDX_XPORT_ACCESS_REMOTE_READ |
			     GDX_XPORT_ACCESS_REMOTE_WRITE, &mr))
		return 1;
	msg[0] = gdx_xport_mr_addr(mr);
	msg[1] = gdx_xport_mr_key(mr);
	if (gdx_xport_post_send(ep, msg, sizeof(msg), 1, 0))
		return 1;
	while (gdx_xport_cq_poll(cq, &e, 1) == 0)
		gdx_xport_cq_wait(cq, 1000);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_outstanding),
		cmocka_unit_test(test_imm_and_order),
		cmocka_unit_test(test_fence_forwards_read),
		cmocka_unit_test(test_read_then_write),
		cmocka_unit_test(test_dev_read_then_write),
		cmocka_unit_test(test_read_then_write_both_ways),
		cmocka_unit_test(test_dev_outstanding),
		cmocka_unit_test(test_dev_small_ring_and_no_agent),
		cmocka_unit_test(test_dev_then_host_order),
		cmocka_unit_test(test_dev_setup_off_rx_thread),
		cmocka_unit_test(test_dev_staged_at_connect),
		cmocka_unit_test(test_dev_setup_off_rx_thread_more),
		cmocka_unit_test(test_dev_agent_fault),
		cmocka_unit_test(test_dev_sends_through_agent),
		cmocka_unit_test(test_dev_sends_odd_sizes),
		cmocka_unit_test(test_dev_sends_behind_fence),
		cmocka_unit_test(test_dev_send_agent_fault),
		cmocka_unit_test(test_dev_send_launch_fails),
		cmocka_unit_test(test_dev_ring_aligned),
		cmocka_unit_test(test_dev_recv_launch_fails),
		cmocka_unit_test(test_dev_send_after_recv_agent_failed),
		cmocka_unit_test(test_dev_setup_off_tx_thread),
		cmocka_unit_test(test_dev_snap_unlocked),
		cmocka_unit_test(test_dev_agent_stuck),
		cmocka_unit_test(test_dev_send_copy_stuck),
		cmocka_unit_test(test_dev_sends_redone_after_halt),
		cmocka_unit_test(test_dev_large_send_recopied_after_halt),
		cmocka_unit_test(test_dev_disconnect),
		cmocka_unit_test(test_dev_then_too_large),
		cmocka_unit_test(test_bad_access),
		cmocka_unit_test(test_recv_too_small),
		cmocka_unit_test(test_recv_posted_during_arrival),
		cmocka_unit_test(test_unexpected_limit),
		cmocka_unit_test(test_unexpected_flag),
		cmocka_unit_test(test_dev_kept),
		cmocka_unit_test(test_kept_while_stalled),
		cmocka_unit_test(test_dev_kept_agent_fault),
		cmocka_unit_test(test_disconnect),
		cmocka_unit_test(test_dev_reg_after_end),
		cmocka_unit_test(test_progress_without_polling),
		cmocka_unit_test(test_peer_death),
		cmocka_unit_test(test_srq),
		cmocka_unit_test(test_paths_and_strict),
		cmocka_unit_test(test_cq_fd),
		cmocka_unit_test(test_cq_waiter_and_poller),
		cmocka_unit_test(test_served_while_waiting),
	};
	const char *v;
	int ret;

	if (argc == 3 && !strcmp(argv[1], "peer"))
		return peer_main(argv[2]);
	signal(SIGPIPE, SIG_IGN);
	if ((v = getenv("GDX_TEST_XPORT")) && *v)
		backend = v;
	if ((v = getenv("GDX_TEST_XPORT_MAX")) && *v) {
		uint64_t m;

		if (gdx_parse_size(v, &m))
			return 2;
		max_msg = m;
	}
	if ((v = getenv("GDX_TEST_XPORT_ADDR")) && *v)
		snprintf(listen_addr, sizeof(listen_addr), "%s", v);
	else if (!strcmp(backend, "loop"))
		snprintf(listen_addr, sizeof(listen_addr), "loop://conformance");
	else if (!strcmp(backend, "tcp"))
		snprintf(listen_addr, sizeof(listen_addr), "tcp://127.0.0.1:0");
	else {
		fprintf(stderr, "GDX_TEST_XPORT=%s needs GDX_TEST_XPORT_ADDR\n", backend);
		return T_EXIT_SKIP;
	}
	if (gdx_device_open(NULL, &dev)) {
		fprintf(stderr, "no device (GDX_DEVICE=emulated gives one)\n");
		return T_EXIT_SKIP;
	}
	ret = cmocka_run_group_tests_name(backend, tests, NULL, NULL);
	gdx_device_close(dev);
	return ret;
}
