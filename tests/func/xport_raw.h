/* SPDX-License-Identifier: MIT */
/*
 * A raw TCP peer of the tcp transport for the wire tests: it connects,
 * speaks the hello and sends frames by hand (tcp_frame.h's layout).
 */
#ifndef GDX_TEST_XPORT_RAW_H
#define GDX_TEST_XPORT_RAW_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gdx/xport.h>

#include "tcp_frame.h"
#include "test.h"

/*
 * Lets the receive thread park before a wait that should take the socket: a
 * waiter takes it only from a receive thread parked between frames.  An
 * answer the receive thread wrote itself (a read response) wakes this thread,
 * which on a busy machine can run on that thread's CPU and reach the wait
 * before it parked, round after round; a short sleep gives it the CPU.
 */
static inline void rx_let_park(void)
{
	usleep(5000);
}

static inline int raw_connect(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(colon + 1)),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

static inline void send_frame(int fd, uint8_t type, uint64_t id, uint64_t len, int32_t status)
{
	struct frame f = { .type = type, .id = id, .len = len, .status = status };

	assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
}

struct acc {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	int ms;			/* the accept's timeout; 0: 10 s */
	int ret;
};

static inline void *accept_main(void *arg)
{
	struct acc *a = arg;

	a->ret = gdx_xport_accept(a->l, a->cq, a->ms ? a->ms : 10000, &a->ep);
	return NULL;
}

/* A gdx endpoint accepted from a raw peer that has done the hello. */
static inline struct gdx_xport_ep *accept_raw(struct gdx_xport_listener *l, struct gdx_xport_cq *cq,
					      int *fd)
{
	struct acc a = { .l = l, .cq = cq };
	struct frame f;
	pthread_t th;

	pthread_create(&th, NULL, accept_main, &a);
	*fd = raw_connect(gdx_xport_listener_addr(l));
	f = (struct frame){ .type = 1, .imm = TCP_HELLO_MAGIC, .id = 1 };
	assert_int_equal(send(*fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	assert_int_equal(recv(*fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	assert_int_equal(f.type, 1);
	assert_int_equal(f.imm, TCP_HELLO_MAGIC);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	return a.ep;
}

/*
 * A test's connection: a gdx endpoint (its completions on cq) accepted on a
 * loopback listener from a raw peer, fd, that has done the hello.
 */
struct raw_conn {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	int fd;
};

/* dev: the listener's device (the endpoint's, for its copy agent), or NULL. */
static inline void raw_open(struct raw_conn *c, struct gdx_device *dev)
{
	struct gdx_xport_opts o;

	gdx_xport_opts_init(&o, sizeof(o));
	o.dev = dev;
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", dev ? &o : NULL, &c->l), 0);
	assert_int_equal(gdx_xport_cq_create(&c->cq), 0);
	c->ep = accept_raw(c->l, c->cq, &c->fd);
}

/* fd is closed unless the test did, and said so with -1. */
static inline void raw_close(struct raw_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	gdx_xport_ep_destroy(c->ep);
	gdx_xport_listener_close(c->l);
	assert_int_equal(gdx_xport_cq_destroy(c->cq), 0);
}

#endif
