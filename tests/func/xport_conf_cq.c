/* SPDX-License-Identifier: MIT */
/*
 * Transport conformance (test_xport_conformance.c): shared receive queues,
 * paths and strict mode, the CQ's fd and its waiters, addresses.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include "test.h"
#include "xport_conf.h"

/* ---- shared receive queue --------------------------------------------------------- */

void test_srq(void **state)
{
	enum { N = 6 };
	unsigned char rx[N][64], tx[2][64];
	struct gdx_xport_ep *s[2], *c[2];
	struct gdx_xport_cq *cqs, *cqc;
	struct gdx_xport_listener *l;
	struct gdx_xport_opts o;
	struct gdx_xport_srq *q;
	struct gdx_xport_cqe e;
	char addr[160];
	void *dbuf;

	(void)state;
	assert_int_equal(gdx_xport_srq_create(N, &q), 0);
	gdx_xport_opts_init(&o, sizeof(o));
	o.srq = q;
	if (!strcmp(backend, "loop"))
		snprintf(addr, sizeof(addr), "%s-srq", listen_addr);
	else
		snprintf(addr, sizeof(addr), "%s", listen_addr);
	assert_int_equal(gdx_xport_cq_create(&cqs), 0);
	assert_int_equal(gdx_xport_cq_create(&cqc), 0);
	assert_int_equal(gdx_xport_listen(addr, &o, &l), 0);
	{
		for (int i = 0; i < 2; i++) {
			struct acc a = { .l = l, .cq = cqs };
			pthread_t th;

			pthread_create(&th, NULL, accept_thread, &a);
			assert_int_equal(gdx_xport_connect(gdx_xport_listener_addr(l), NULL, cqc,
							   &c[i]), 0);
			pthread_join(th, NULL);
			assert_int_equal(a.ret, 0);
			s[i] = a.ep;
		}
	}
	/* Receives go to the queue, not to an endpoint that shares one. */
	assert_int_equal(gdx_xport_post_recv(s[0], rx[0], 64, 1), -EINVAL);
	assert_int_equal(gdx_xport_srq_destroy(q), -EBUSY);

	/* A message before any receive is posted waits for one. */
	t_fill(tx[1], 64, 100);
	assert_int_equal(gdx_xport_post_send(c[1], tx[1], 40, 200, 0), 0);
	usleep(20000);
	expect_none(cqs);
	for (int i = 0; i < N; i++)
		assert_int_equal(gdx_xport_srq_post_recv(q, rx[i], 64, i), 0);
	get_cqe(cqs, &e);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.wr_id, 0);		/* the oldest receive */
	assert_ptr_equal(e.ep, s[1]);		/* on the endpoint it arrived on */
	assert_int_equal(e.len, 40);
	kcheck(K_HOST, rx[0], 40, 100);
	/* N - 1 left: one more fits, then the queue is full. */
	assert_int_equal(gdx_xport_srq_post_recv(q, rx[0], 64, 99), 0);
	assert_int_equal(gdx_xport_srq_post_recv(q, rx[0], 64, 98), -EAGAIN);

	/* Both connections draw from the one queue. */
	t_fill(tx[0], 64, 101);
	assert_int_equal(gdx_xport_post_send(c[0], tx[0], 64, 201, 0), 0);
	get_cqe(cqs, &e);
	assert_int_equal(e.status, 0);
	assert_ptr_equal(e.ep, s[0]);
	assert_int_equal(e.wr_id, 1);
	kcheck(K_HOST, rx[1], 64, 101);
	assert_int_equal(gdx_xport_post_send(c[1], tx[1], 8, 202, 0), 0);
	get_cqe(cqs, &e);
	assert_ptr_equal(e.ep, s[1]);
	assert_int_equal(e.wr_id, 2);
	for (int i = 0; i < 3; i++)
		get_cqe(cqc, &e);

	/* A disconnect leaves the queue's receives alone: the other connection still gets one. */
	gdx_xport_disconnect(c[0]);
	assert_int_equal(gdx_xport_post_send(c[1], tx[1], 8, 203, 0), 0);
	get_cqe(cqs, &e);
	assert_int_equal(e.status, 0);
	assert_ptr_equal(e.ep, s[1]);
	assert_int_equal(e.wr_id, 3);

	/* Device memory in the queue, after the receives already there (4, 5, 99). */
	dbuf = kalloc(K_DEV, 64);
	assert_int_equal(gdx_xport_srq_post_recv(q, dbuf, 64, 7), 0);
	for (int i = 0, left = 5; i < 4; i++) {
		t_fill(tx[1], 64, 110 + (uint64_t)i);
		assert_int_equal(gdx_xport_post_send(c[1], tx[1], 48, 204 + (uint64_t)i, 0), 0);
		get_cqe(cqs, &e);
		assert_int_equal(e.status, 0);
		assert_ptr_equal(e.ep, s[1]);
		assert_int_equal(e.wr_id, i < 2 ? 4 + (uint64_t)i : i == 2 ? 99 : 7);
		assert_int_equal(e.len, 48);
		/* The send buffer is refilled only once its send completed. */
		do {
			get_cqe(cqc, &e);
			left--;
		} while (e.wr_id != 204 + (uint64_t)i);
		if (i == 3)
			assert_int_equal(left, 0);
	}
	kcheck(K_DEV, dbuf, 48, 113);
	for (int i = 0; i < 2; i++) {
		gdx_xport_ep_destroy(c[i]);
		gdx_xport_ep_destroy(s[i]);
	}
	kfree(K_DEV, dbuf);
	gdx_xport_listener_close(l);
	/* No endpoint left: the queue goes, with the receives still in it. */
	assert_int_equal(gdx_xport_srq_destroy(q), 0);
	gdx_xport_cq_destroy(cqs);
	gdx_xport_cq_destroy(cqc);
}

/* ---- paths, strict mode, the CQ fd, addresses ---------------------------------- */

void test_paths_and_strict(void **state)
{
	struct gdx_xport_opts strict;
	unsigned char host[4096];
	void *dbuf = kalloc(K_DEV, 4096);
	struct gdx_xport_mr *hm, *dm;
	enum gdx_xport_path hp, dp;
	struct gdx_xport_cqe e;
	const char *why;
	struct pair p;
	int ret;

	(void)state;
	pair_open(&p, NULL, NULL);
	assert_int_equal(gdx_xport_mr_reg(p.c, host, sizeof(host), 0, &hm), 0);
	assert_int_equal(gdx_xport_mr_reg(p.c, dbuf, 4096, 0, &dm), 0);
	hp = gdx_xport_mr_path(hm, &why);
	assert_non_null(why);
	dp = gdx_xport_mr_path(dm, &why);
	assert_true(strlen(why) > 0);
	if (!strcmp(backend, "loop")) {
		assert_int_equal(hp, GDX_XPORT_PATH_EMULATED);
		assert_int_equal(dp, GDX_XPORT_PATH_EMULATED);
	} else {
		/* The emulated device has no dma-buf and no peer memory: device data bounces. */
		assert_int_equal(hp, GDX_XPORT_PATH_DIRECT);
		assert_int_equal(dp, GDX_XPORT_PATH_BOUNCE);
	}
	/* Completions carry the path their local buffer took. */
	assert_int_equal(gdx_xport_post_recv(p.s, host, 64, 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, dbuf, 64, 2, 0), 0);
	get_cqe(p.cqc, &e);
	assert_int_equal(e.status, 0);
	assert_int_equal(e.path, dp);
	get_cqe(p.cqs, &e);
	assert_int_equal(e.path, hp);
	gdx_xport_mr_dereg(hm);
	gdx_xport_mr_dereg(dm);
	pair_close(&p);

	/* require_direct: a transfer that would not be direct fails, up front. */
	gdx_xport_opts_init(&strict, sizeof(strict));
	strict.require_direct = 1;
	pair_open(&p, NULL, &strict);
	ret = gdx_xport_post_send(p.c, dbuf, 64, 1, 0);
	assert_int_equal(ret, GDX_ENOTDIRECT);
	assert_int_equal(gdx_xport_mr_reg(p.c, dbuf, 4096, 0, &dm), GDX_ENOTDIRECT);
	/* Into the other half: the sender may still read its buffer while it lands. */
	assert_int_equal(gdx_xport_post_recv(p.s, host + 2048, 64, 2), 0);
	ret = gdx_xport_post_send(p.c, host, 64, 3, 0);
	if (hp == GDX_XPORT_PATH_DIRECT) {
		assert_int_equal(ret, 0);
		expect(p.cqc, 3, GDX_XPORT_OP_SEND, 0, 64);
		expect(p.cqs, 2, GDX_XPORT_OP_RECV, 0, 64);
	} else {
		assert_int_equal(ret, GDX_ENOTDIRECT);
	}
	/* Zero bytes move no data: no path, allowed. */
	assert_int_equal(gdx_xport_post_send(p.c, NULL, 0, 4, 0), 0);
	pair_close(&p);
	kfree(K_DEV, dbuf);
}

void test_cq_fd(void **state)
{
	unsigned char a[32] = { 1 }, b[32];
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct gdx_xport_cqe e[4];
	int ep, n, total = 0;
	struct pair p;

	(void)state;
	pair_open(&p, NULL, NULL);
	ep = epoll_create1(0);
	assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, gdx_xport_cq_fd(p.cqs), &ev), 0);
	assert_int_equal(gdx_xport_cq_arm(p.cqs), 0);
	assert_int_equal(epoll_wait(ep, &out, 1, 0), 0);
	assert_int_equal(gdx_xport_post_recv(p.s, b, sizeof(b), 1), 0);
	assert_int_equal(gdx_xport_post_send(p.c, a, sizeof(a), 2, 0), 0);
	assert_int_equal(epoll_wait(ep, &out, 1, 30000), 1);
	while (total < 1) {
		n = gdx_xport_cq_poll(p.cqs, e, 4);
		assert_true(n >= 0);
		total += n;
		if (!n)
			assert_true(gdx_xport_cq_wait(p.cqs, 1000) >= 0);
	}
	assert_int_equal(e[0].wr_id, 1);
	expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, sizeof(a));
	/* Drained: the fd goes quiet again once re-armed. */
	assert_int_equal(gdx_xport_cq_poll(p.cqs, e, 4), 0);
	assert_int_equal(gdx_xport_cq_arm(p.cqs), 0);
	assert_int_equal(epoll_wait(ep, &out, 1, 0), 0);
	close(ep);
	pair_close(&p);
}

struct waiter {
	struct gdx_xport_cq *cq;
	sem_t woke, go;
	int rounds, ret;
};

/* Sleeps in cq_wait until something is pending, rounds times; never polls. */
static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	for (int i = 0; i < w->rounds; i++) {
		w->ret = gdx_xport_cq_wait(w->cq, 20000);
		sem_post(&w->woke);
		if (w->ret != 1)
			break;
		sem_wait(&w->go);
	}
	return NULL;
}

/*
 * A thread sleeping in cq_wait while another polls the same CQ: the poller
 * takes the completion the sleeper was woken (or about to be woken) for; the
 * sleeper must still wake for the next one.
 */
void test_cq_waiter_and_poller(void **state)
{
	enum { ROUNDS = 20 };
	unsigned char a[32] = { 1 }, b[32];
	struct gdx_xport_cqe e;
	struct waiter w;
	struct timespec ts;
	struct pair p;
	pthread_t th;

	(void)state;
	pair_open(&p, NULL, NULL);
	w = (struct waiter){ .cq = p.cqs, .rounds = ROUNDS };
	sem_init(&w.woke, 0, 0);
	sem_init(&w.go, 0, 0);
	pthread_create(&th, NULL, waiter_main, &w);
	for (int i = 0; i < ROUNDS; i++) {
		int n = 0;

		usleep(2000);	/* the waiter is asleep by now, most rounds */
		assert_int_equal(gdx_xport_post_recv(p.s, b, sizeof(b), 1), 0);
		assert_int_equal(gdx_xport_post_send(p.c, a, sizeof(a), 2, 0), 0);
		/* Race the waiter for it. */
		while (!n) {
			n = gdx_xport_cq_poll(p.cqs, &e, 1);
			assert_true(n >= 0);
		}
		assert_int_equal(e.wr_id, 1);
		expect(p.cqc, 2, GDX_XPORT_OP_SEND, 0, sizeof(a));
		/* The next one is the waiter's (or it already returned for the first). */
		assert_int_equal(gdx_xport_post_recv(p.s, b, sizeof(b), 3), 0);
		assert_int_equal(gdx_xport_post_send(p.c, a, sizeof(a), 4, 0), 0);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		assert_int_equal(sem_timedwait(&w.woke, &ts), 0);
		assert_int_equal(w.ret, 1);
		get_cqe(p.cqs, &e);
		assert_int_equal(e.wr_id, 3);
		expect(p.cqc, 4, GDX_XPORT_OP_SEND, 0, sizeof(a));
		sem_post(&w.go);
	}
	pthread_join(th, NULL);
	sem_destroy(&w.woke);
	sem_destroy(&w.go);
	pair_close(&p);
}

struct collector {
	struct gdx_xport_cq *cq;
	uint64_t until;			/* wr_id that ends the wait */
	struct gdx_xport_cqe e[8];
	int n, ret;
};

/* Only waits on the CQ (gdx_xport_cq_wait, then takes what it found) until wr_id `until`. */
static void *collect_main(void *arg)
{
	struct collector *c = arg;

	while (c->n < 8) {
		int r = gdx_xport_cq_wait(c->cq, 20000);

		if (r != 1) {
			c->ret = r ? r : -ETIMEDOUT;
			return NULL;
		}
		r = gdx_xport_cq_poll(c->cq, &c->e[c->n], (unsigned)(8 - c->n));
		if (r < 0) {
			c->ret = r;
			return NULL;
		}
		for (int i = 0; i < r; i++)
			if (c->e[c->n + i].wr_id == c->until)
				c->ret = 1;
		c->n += r;
		if (c->ret)
			return NULL;
	}
	c->ret = -ENOSPC;
	return NULL;
}

static const struct gdx_xport_cqe *collected(const struct collector *c, uint64_t wr_id)
{
	for (int i = 0; i < c->n; i++)
		if (c->e[i].wr_id == wr_id)
			return &c->e[i];
	fail_msg("no completion for wr_id %llu", (unsigned long long)wr_id);
	return NULL;
}

/*
 * The client sleeps in cq_wait with an answer due that the server holds back
 * (its receive side is stalled on a message no receive takes): meanwhile the
 * server writes (with immediate) into and reads from the client's memory, and
 * both are served although the client only waits.  Then the client's
 * connection is closed under a new waiter: its request completes with the error.
 */
void test_served_while_waiting(void **state)
{
	enum { SZ = 4096 };
	unsigned char *msg = calloc(2, SZ), *creg = malloc(SZ), *sin = malloc(2 * SZ);
	unsigned char *w = malloc(SZ), *r = malloc(SZ);
	struct gdx_xport_mr *mr;
	struct gdx_xport_opts os;
	struct collector c = { 0 };
	struct pair p;
	pthread_t th;

	(void)state;
	gdx_xport_opts_init(&os, sizeof(os));
	os.max_unexpected = SZ;	/* the server keeps the first message, stalls on the second */
	pair_open(&p, &os, NULL);
	if (reg_remote(p.c, creg, SZ, GDX_XPORT_ACCESS_REMOTE_WRITE | GDX_XPORT_ACCESS_REMOTE_READ,
		       &mr))
		goto out;
	t_fill(creg, SZ, 61);
	t_fill(w, SZ, 62);
	assert_int_equal(gdx_xport_post_recv(p.c, msg, SZ, 10), 0);
	c = (struct collector){ .cq = p.cqc, .until = 2 };
	assert_int_equal(pthread_create(&th, NULL, collect_main, &c), 0);
	assert_int_equal(gdx_xport_post_send(p.c, msg, SZ, 1, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, msg + SZ, SZ, 2, 0), 0);
	usleep(50000);	/* the client sleeps, its second send unanswered */
	assert_int_equal(gdx_xport_post_write_imm(p.s, w, SZ, gdx_xport_mr_addr(mr),
						  gdx_xport_mr_key(mr), 77, 20, 0), 0);
	assert_int_equal(gdx_xport_post_read(p.s, r, SZ, gdx_xport_mr_addr(mr),
					     gdx_xport_mr_key(mr), 21, 0), 0);
	usleep(50000);
	/* Now the server takes both messages and answers the second send. */
	assert_int_equal(gdx_xport_post_recv(p.s, sin, SZ, 30), 0);
	assert_int_equal(gdx_xport_post_recv(p.s, sin + SZ, SZ, 31), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.ret, 1);
	assert_int_equal(collected(&c, 1)->status, 0);
	assert_int_equal(collected(&c, 10)->op, GDX_XPORT_OP_RECV_WRITE_IMM);
	assert_int_equal(collected(&c, 10)->imm, 77);
	kcheck(K_HOST, creg, SZ, 62);
	c = (struct collector){ .n = 4 };
	for (int i = 0; i < 4; i++) {
		get_cqe(p.cqs, &c.e[i]);
		assert_int_equal(c.e[i].status, 0);
		assert_int_equal(c.e[i].len, SZ);
	}
	assert_int_equal(collected(&c, 30)->op, GDX_XPORT_OP_RECV);
	assert_int_equal(collected(&c, 31)->op, GDX_XPORT_OP_RECV);
	assert_int_equal(collected(&c, 20)->op, GDX_XPORT_OP_WRITE_IMM);
	assert_int_equal(collected(&c, 21)->op, GDX_XPORT_OP_READ);
	kcheck(K_HOST, r, SZ, 62);
	expect_none(p.cqc);

	/* A waiter that may hold the socket when the connection goes. */
	assert_int_equal(gdx_xport_post_send(p.c, msg, SZ, 3, 0), 0);
	assert_int_equal(gdx_xport_post_send(p.c, msg + SZ, SZ, 4, 0), 0);
	c = (struct collector){ .cq = p.cqc, .until = 4 };
	assert_int_equal(pthread_create(&th, NULL, collect_main, &c), 0);
	usleep(50000);
	assert_int_equal(gdx_xport_disconnect(p.c), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.ret, 1);
	/*
	 * tcp and loop take message 3 as unexpected (up to the server's
	 * max_unexpected) and hold message 4 back, which the close fails.
	 * verbs has no unexpected buffer: with no receive posted, both wait
	 * for one (RNR retry without end), and the close fails both.
	 */
	assert_int_equal(collected(&c, 3)->status,
			 strcmp(backend, "rdma") ? 0 : GDX_EDISCONNECTED);
	assert_int_equal(collected(&c, 4)->status, GDX_EDISCONNECTED);
	gdx_xport_mr_dereg(mr);
out:
	pair_close(&p);
	free(msg);
	free(creg);
	free(sin);
	free(w);
	free(r);
}

void test_addresses(void **state)
{
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;

	(void)state;
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	assert_int_equal(gdx_xport_listen("bogus://x:1", NULL, &l), -EINVAL);
	assert_int_equal(gdx_xport_listen("no-scheme", NULL, &l), -EINVAL);
	assert_int_equal(gdx_xport_connect(NULL, NULL, cq, &ep), -EINVAL);
	assert_int_equal(gdx_xport_connect("loop://nobody-listens", NULL, cq, &ep),
			 -ECONNREFUSED);
	if (strcmp(backend, "loop")) {
		char bad[160];

		snprintf(bad, sizeof(bad), "%s://127.0.0.1", backend);
		assert_int_equal(gdx_xport_connect(bad, NULL, cq, &ep), -EINVAL);
		snprintf(bad, sizeof(bad), "%s://127.0.0.1:99999", backend);
		assert_int_equal(gdx_xport_connect(bad, NULL, cq, &ep), -EINVAL);
	}
	if (!strcmp(backend, "tcp")) {
		/* A port nobody listens on (bound, then closed). */
		assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &l), 0);
		char addr[128];

		snprintf(addr, sizeof(addr), "%s", gdx_xport_listener_addr(l));
		gdx_xport_listener_close(l);
		assert_int_equal(gdx_xport_connect(addr, NULL, cq, &ep), -ECONNREFUSED);
	}
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
}
