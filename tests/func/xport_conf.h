/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_XPORT_CONF_H
#define GDX_TESTS_XPORT_CONF_H

/*
 * What the transport conformance suite's files share: the backend under test
 * and its device, a connected pair of endpoints, completions expected, memory
 * of a kind.  test_xport_conformance.c defines them and runs the cases, which
 * live by theme in xport_conf_*.c.  Include last: the globals' names are
 * common ones (dev) that a header's parameters would shadow.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

extern const char *backend;	/* GDX_TEST_XPORT: loop, tcp, rdma */
extern char listen_addr[128];
extern size_t max_msg;		/* the largest message sent */
extern struct gdx_device *dev;

struct pair {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cqs, *cqc;
	struct gdx_xport_ep *s, *c;
};

struct acc {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	int ret;
};

void *accept_thread(void *arg);
void pair_open(struct pair *p, const struct gdx_xport_opts *os, const struct gdx_xport_opts *oc);
void pair_close(struct pair *p);
void get_cqe(struct gdx_xport_cq *cq, struct gdx_xport_cqe *e);
void expect(struct gdx_xport_cq *cq, uint64_t wr_id, enum gdx_xport_op op, int status,
	    uint64_t len);
void expect_none(struct gdx_xport_cq *cq);

/* Memory of a kind; device memory is filled and checked through copies. */
enum kind { K_HOST, K_DEV };

bool tcp_on_emulated(void);
void *kalloc(enum kind k, size_t n);
void kfree(enum kind k, void *p);
void kfill(enum kind k, void *p, size_t n, uint64_t seed);
void kcheck(enum kind k, const void *p, size_t n, uint64_t seed);
int reg_remote(struct gdx_xport_ep *ep, void *p, size_t n, unsigned acc,
	       struct gdx_xport_mr **mr);

/* xport_conf_order.c */
void xfer(struct pair *p, size_t n, enum kind src, enum kind dst);
struct gdx_xport_opts deep_opts(unsigned n);
void test_sizes(void **state);
void test_outstanding(void **state);
void test_imm_and_order(void **state);
void test_fence_forwards_read(void **state);
void test_read_then_write(void **state);
void test_dev_read_then_write(void **state);
void test_read_then_write_both_ways(void **state);

/* xport_conf_dev_recv.c */
void watch_on(const char *op, const char *thread, atomic_uint *calls);
void second_device(struct gdx_device **dev2);
void test_dev_outstanding(void **state);
void test_dev_small_ring_and_no_agent(void **state);
void test_dev_then_host_order(void **state);
void test_dev_setup_off_rx_thread(void **state);
void test_dev_staged_at_connect(void **state);
void test_dev_setup_off_rx_thread_more(void **state);
void test_dev_agent_fault(void **state);
void test_dev_disconnect(void **state);
void test_dev_then_too_large(void **state);

/* xport_conf_dev_send.c */
void test_dev_sends_through_agent(void **state);
void test_dev_sends_odd_sizes(void **state);
void test_dev_sends_behind_fence(void **state);
void test_dev_send_agent_fault(void **state);
void test_dev_send_launch_fails(void **state);
void test_dev_ring_aligned(void **state);
void test_dev_recv_launch_fails(void **state);
void test_dev_send_after_recv_agent_failed(void **state);
void test_dev_setup_off_tx_thread(void **state);
void test_dev_snap_unlocked(void **state);
void test_dev_agent_stuck(void **state);
void test_dev_send_copy_stuck(void **state);
void test_dev_sends_redone_after_halt(void **state);
void test_dev_large_send_recopied_after_halt(void **state);

/* xport_conf_fail.c */
void test_bad_access(void **state);
void test_recv_too_small(void **state);
void test_recv_posted_during_arrival(void **state);
void test_unexpected_limit(void **state);
void test_unexpected_flag(void **state);
void test_dev_kept(void **state);
void test_kept_while_stalled(void **state);
void test_dev_kept_agent_fault(void **state);
void test_disconnect(void **state);
void test_dev_reg_after_end(void **state);
void test_progress_without_polling(void **state);
void test_peer_death(void **state);

/* xport_conf_cq.c */
void test_srq(void **state);
void test_paths_and_strict(void **state);
void test_cq_fd(void **state);
void test_cq_waiter_and_poller(void **state);
void test_served_while_waiting(void **state);
void test_addresses(void **state);

#endif
