/* SPDX-License-Identifier: MIT */
/*
 * loop://name — both ends in one process.  A request is appended to the
 * peer's inbound queue and the queue is run at once under one lock: requests
 * execute in post order, a send that finds no receive is kept (up to
 * max_unexpected bytes) or stalls the queue until one is posted, and one-sided
 * accesses go through the same key table as tcp.  Data moves with gdx_memcpy,
 * so every memory kind works; the path is reported as "emulated".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/xport.h"

#define SUBSYS "xport.loop"

struct qent {			/* request queue entry or unexpected message */
	struct gdx_xport_req *req;
	void *data;		/* unexpected send: a copy of the payload */
	uint64_t len;
	int is_imm;
	uint32_t imm;
	struct qent *next;
};

struct fifo {
	struct qent *head, *tail;
};

struct loop_ep {
	struct loop_pair *pair;
	struct loop_ep *peer;
	struct gdx_xport_ep *fe;	/* NULL until accepted */
	struct fifo inbound;		/* the peer's requests, in post order */
	struct fifo recvs;
	struct fifo unexpected;
	uint64_t unexpected_bytes, max_unexpected;
	struct loop_ep *next_pending;
};

struct loop_pair {
	int refs;
	int closed;
};

struct loop_listener {
	char name[64];
	int efd;
	struct loop_ep *pending;
	struct loop_listener *next;
	uint64_t max_unexpected;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static struct loop_listener *listeners;

static void fifo_push(struct fifo *f, struct qent *e)
{
	e->next = NULL;
	if (f->tail)
		f->tail->next = e;
	else
		f->head = e;
	f->tail = e;
}

static struct qent *fifo_pop(struct fifo *f)
{
	struct qent *e = f->head;

	if (e) {
		f->head = e->next;
		if (!f->head)
			f->tail = NULL;
	}
	return e;
}

static int copy(struct gdx_device *dev, void *dst, const void *src, size_t n)
{
	if (!n)
		return 0;
	if (!dev) {
		memcpy(dst, src, n);
		return 0;
	}
	return gdx_memcpy(dev, dst, src, n);
}

static int lp_listen(struct gdx_xport_listener *l, const char *hostport, void **priv,
		     char *bound, size_t bound_len)
{
	struct loop_listener *ll;

	if (!*hostport || strlen(hostport) >= sizeof(ll->name) || strlen(hostport) >= bound_len)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	for (ll = listeners; ll; ll = ll->next) {
		if (!strcmp(ll->name, hostport)) {
			pthread_mutex_unlock(&lock);
			return -EADDRINUSE;
		}
	}
	ll = calloc(1, sizeof(*ll));
	if (!ll) {
		pthread_mutex_unlock(&lock);
		return -ENOMEM;
	}
	ll->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ll->efd < 0) {
		int err = -errno;

		pthread_mutex_unlock(&lock);
		free(ll);
		return err;
	}
	strcpy(ll->name, hostport);
	ll->max_unexpected = l->opts.max_unexpected;
	ll->next = listeners;
	listeners = ll;
	pthread_mutex_unlock(&lock);
	strcpy(bound, hostport);
	*priv = ll;
	return 0;
}

static int lp_listener_fd(void *lpriv)
{
	return ((struct loop_listener *)lpriv)->efd;
}

static void match_unexpected(struct loop_ep *e);
static void run_inbound(struct loop_ep *e);

static void complete_locked(struct gdx_xport_req *req, int status, uint64_t len)
{
	gdx_xport_complete(req, status, len);
}

/* Fails everything either side has outstanding.  Caller holds the lock. */
static void flush_side(struct loop_ep *e)
{
	struct qent *q;

	if (e->fe)
		gdx_xport_ep_set_disconnected(e->fe);
	while ((q = fifo_pop(&e->recvs))) {
		complete_locked(q->req, GDX_EDISCONNECTED, 0);
		free(q);
	}
	/* The peer's requests that never ran here. */
	while ((q = fifo_pop(&e->inbound))) {
		complete_locked(q->req, GDX_EDISCONNECTED, 0);
		free(q);
	}
	while ((q = fifo_pop(&e->unexpected))) {
		free(q->data);
		free(q);
	}
	e->unexpected_bytes = 0;
}

static void close_pair(struct loop_ep *e)
{
	if (e->pair->closed)
		return;
	e->pair->closed = 1;
	flush_side(e);
	flush_side(e->peer);
}

static void pair_put(struct loop_ep *e)
{
	if (--e->pair->refs == 0)
		free(e->pair);
	free(e);
}

static void lp_listener_close(void *lpriv)
{
	struct loop_listener *ll = lpriv;
	struct loop_ep *e;

	pthread_mutex_lock(&lock);
	for (struct loop_listener **pp = &listeners; *pp; pp = &(*pp)->next) {
		if (*pp == ll) {
			*pp = ll->next;
			break;
		}
	}
	while ((e = ll->pending)) {
		ll->pending = e->next_pending;
		close_pair(e);
		pair_put(e);
	}
	pthread_mutex_unlock(&lock);
	close(ll->efd);
	free(ll);
}

static int lp_accept(void *lpriv, struct gdx_xport_ep *ep, int timeout_ms, void **priv)
{
	struct loop_listener *ll = lpriv;
	struct timespec ts;
	struct loop_ep *e;
	uint64_t v;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (timeout_ms >= 0) {
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&lock);
	while (!ll->pending) {
		int r = timeout_ms >= 0 ? pthread_cond_timedwait(&arrived, &lock, &ts)
					: pthread_cond_wait(&arrived, &lock);

		if (r == ETIMEDOUT && !ll->pending) {
			pthread_mutex_unlock(&lock);
			return -ETIMEDOUT;
		}
	}
	e = ll->pending;
	ll->pending = e->next_pending;
	if (!ll->pending && read(ll->efd, &v, sizeof(v)) < 0)
		GDX_DBG(SUBSYS, "eventfd read: %s", strerror(errno));
	e->fe = ep;
	e->max_unexpected = ep->opts.max_unexpected;
	if (e->pair->closed) {
		gdx_xport_ep_set_disconnected(ep);
	} else if (ep->opts.srq) {
		/* Messages sent before the accept may have shared receives waiting. */
		match_unexpected(e);
		run_inbound(e);
	}
	pthread_mutex_unlock(&lock);
	*priv = e;
	return 0;
}

static int lp_connect(struct gdx_xport_ep *ep, const char *hostport, void **priv)
{
	struct loop_listener *ll;
	struct loop_ep *c, *s;
	struct loop_pair *pair;
	uint64_t one = 1;

	pthread_mutex_lock(&lock);
	for (ll = listeners; ll; ll = ll->next)
		if (!strcmp(ll->name, hostport))
			break;
	if (!ll) {
		pthread_mutex_unlock(&lock);
		return -ECONNREFUSED;
	}
	c = calloc(1, sizeof(*c));
	s = calloc(1, sizeof(*s));
	pair = calloc(1, sizeof(*pair));
	if (!c || !s || !pair) {
		pthread_mutex_unlock(&lock);
		free(c);
		free(s);
		free(pair);
		return -ENOMEM;
	}
	pair->refs = 2;
	c->pair = s->pair = pair;
	c->peer = s;
	s->peer = c;
	c->fe = ep;
	c->max_unexpected = ep->opts.max_unexpected;
	s->max_unexpected = ll->max_unexpected;
	s->next_pending = ll->pending;
	ll->pending = s;
	if (write(ll->efd, &one, sizeof(one)) < 0)
		GDX_DBG(SUBSYS, "eventfd write: %s", strerror(errno));
	pthread_cond_broadcast(&arrived);
	pthread_mutex_unlock(&lock);
	*priv = c;
	return 0;
}

static void lp_disconnect(void *priv)
{
	struct loop_ep *e = priv;

	pthread_mutex_lock(&lock);
	close_pair(e);
	pthread_mutex_unlock(&lock);
}

static void lp_destroy(void *priv)
{
	pthread_mutex_lock(&lock);
	pair_put(priv);
	pthread_mutex_unlock(&lock);
}

static int lp_mr_reg(void *priv, struct gdx_xport_region *r)
{
	(void)priv;
	r->addr = (uint64_t)(uintptr_t)r->p;
	r->path = GDX_XPORT_PATH_EMULATED;
	r->why = "in-process copy";
	if (!r->access)
		return 0;
	return gdx_xport_rkey_add(r, &r->key);
}

static void lp_mr_dereg(void *priv, struct gdx_xport_region *r)
{
	(void)priv;
	if (r->access)
		gdx_xport_rkey_del(r->key);
}

/* A receive is waiting for e's next message (its own, or in its SRQ).  Lock held. */
static int have_recv(struct loop_ep *e)
{
	return e->fe && e->fe->opts.srq ? gdx_xport_srq_waiting(e->fe) > 0 : e->recvs.head != NULL;
}

/* The receive e's next message goes into, or NULL. */
static struct gdx_xport_req *take_recv(struct loop_ep *e)
{
	struct gdx_xport_req *req = NULL;
	struct qent *r;

	if (e->fe && e->fe->opts.srq)
		return gdx_xport_srq_take(e->fe, &req) ? NULL : req;
	r = fifo_pop(&e->recvs);
	if (r) {
		req = r->req;
		free(r);
	}
	return req;
}

/* Delivers a send or an immediate into the next receive (have_recv said there is one). */
static void deliver(struct loop_ep *e, const void *src, struct gdx_device *src_dev,
		    uint64_t len, int is_imm, uint32_t imm, int unexpected, int *status)
{
	struct gdx_xport_req *rreq = take_recv(e);
	int st = 0;

	if (!rreq) {
		/* The shared receive could not be used (its error completed it). */
		*status = GDX_EREMOTE;
		return;
	}
	if (unexpected)
		rreq->cqe_flags |= GDX_XPORT_CQE_UNEXPECTED;
	if (is_imm) {
		gdx_xport_complete_imm(rreq, 0, len, GDX_XPORT_OP_RECV_WRITE_IMM, imm);
		*status = 0;
		return;
	}
	if (len > rreq->buf.len) {
		GDX_DBG(SUBSYS, "send of %llu bytes into a %zu-byte receive",
			(unsigned long long)len, rreq->buf.len);
		gdx_xport_complete(rreq, -EMSGSIZE, 0);
		*status = GDX_EREMOTE;
		return;
	}
	st = copy(rreq->buf.dev ? rreq->buf.dev : src_dev, rreq->buf.p, src, len);
	gdx_xport_complete(rreq, st, st ? 0 : len);
	*status = st ? GDX_EREMOTE : 0;
}

/* Runs e's inbound queue until it is empty or a send stalls.  Lock held. */
static void run_inbound(struct loop_ep *e)
{
	struct qent *q;

	while ((q = e->inbound.head)) {
		struct gdx_xport_req *req = q->req;
		struct gdx_xport_rkey *k;
		struct gdx_xport_region reg;
		uint64_t len = req->buf.len;
		void *p;
		int st;

		switch (req->op) {
		case GDX_XPORT_OP_SEND:
			if (have_recv(e) && !e->unexpected.head) {
				deliver(e, req->buf.p, req->buf.dev, len, 0, 0, 0, &st);
				break;
			}
			if (e->unexpected_bytes + len > e->max_unexpected)
				return;	/* receiver not ready: stall, as RC would retry */
			{
				struct qent *u = calloc(1, sizeof(*u));

				if (u && len && !(u->data = malloc(len))) {
					free(u);
					u = NULL;
				}
				if (!u) {
					st = -ENOMEM;
					break;
				}
				u->len = len;
				st = copy(req->buf.dev, u->data, req->buf.p, len);
				if (st) {
					free(u->data);
					free(u);
					break;
				}
				fifo_push(&e->unexpected, u);
				e->unexpected_bytes += len;
			}
			break;
		case GDX_XPORT_OP_WRITE:
		case GDX_XPORT_OP_WRITE_IMM:
			st = gdx_xport_rkey_get(e->fe, req->key, req->raddr, len,
						GDX_XPORT_ACCESS_REMOTE_WRITE, &k, &p, &reg);
			if (st)
				break;
			st = copy(reg.dev ? reg.dev : req->buf.dev, p, req->buf.p, len);
			gdx_xport_rkey_put(k);
			if (st || req->op == GDX_XPORT_OP_WRITE)
				break;
			if (have_recv(e) && !e->unexpected.head) {
				deliver(e, NULL, NULL, len, 1, req->imm, 0, &st);
			} else {
				struct qent *u = calloc(1, sizeof(*u));

				if (!u) {
					st = -ENOMEM;
					break;
				}
				u->is_imm = 1;
				u->imm = req->imm;
				u->len = len;
				fifo_push(&e->unexpected, u);
			}
			break;
		case GDX_XPORT_OP_READ:
			st = gdx_xport_rkey_get(e->fe, req->key, req->raddr, len,
						GDX_XPORT_ACCESS_REMOTE_READ, &k, &p, &reg);
			if (st)
				break;
			st = copy(reg.dev ? reg.dev : req->buf.dev, req->buf.p, p, len);
			gdx_xport_rkey_put(k);
			break;
		default:
			st = -EINVAL;
			break;
		}
		fifo_pop(&e->inbound);
		free(q);
		gdx_xport_complete(req, st, st ? 0 : len);
	}
}

/* Matches receives posted on e with messages that arrived before them. */
static void match_unexpected(struct loop_ep *e)
{
	while (have_recv(e) && e->unexpected.head) {
		struct qent *u = fifo_pop(&e->unexpected);
		int st;

		if (!u->is_imm)
			e->unexpected_bytes -= u->len;
		deliver(e, u->data, NULL, u->len, u->is_imm, u->imm, 1, &st);
		free(u->data);
		free(u);
	}
}

static int lp_post(void *priv, struct gdx_xport_req *req)
{
	struct loop_ep *e = priv;
	struct qent *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->req = req;
	req->buf.path = req->buf.len ? GDX_XPORT_PATH_EMULATED : GDX_XPORT_PATH_NONE;
	pthread_mutex_lock(&lock);
	if (e->pair->closed) {
		pthread_mutex_unlock(&lock);
		free(q);
		return GDX_EDISCONNECTED;
	}
	if (req->op == GDX_XPORT_OP_RECV) {
		fifo_push(&e->recvs, q);
		match_unexpected(e);
		run_inbound(e);
	} else {
		fifo_push(&e->peer->inbound, q);
		run_inbound(e->peer);
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

static void lp_srq_kick(void *priv)
{
	struct loop_ep *e = priv;

	pthread_mutex_lock(&lock);
	if (!e->pair->closed) {
		match_unexpected(e);
		run_inbound(e);
	}
	pthread_mutex_unlock(&lock);
}

const struct gdx_xport_ops gdx_xport_loop_ops = {
	.scheme = "loop",
	.listen = lp_listen,
	.listener_fd = lp_listener_fd,
	.accept = lp_accept,
	.listener_close = lp_listener_close,
	.connect = lp_connect,
	.disconnect = lp_disconnect,
	.destroy = lp_destroy,
	.mr_reg = lp_mr_reg,
	.mr_dereg = lp_mr_dereg,
	.post = lp_post,
	.srq_kick = lp_srq_kick,
};
