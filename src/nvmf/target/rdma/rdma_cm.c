/* SPDX-License-Identifier: MIT */
/*
 * NVMe/RDMA target: the connection manager's side.  Devices and their
 * protection domains, the listeners on reactor 0, connect requests checked
 * and handed to the reactor of their QID, which sets the queue up and
 * accepts, and each queue's CM events on its reactor.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/target/rdma/rdma_int.h"

/*
 * Has reactor 0 read the device's asynchronous events (dev_lock held).  Kept
 * while the transport runs: rdma_cm keeps a device's context open as long.
 */
static void async_watch(struct rdma_tgt *rt, struct ibv_context *verbs)
{
	struct epoll_event e = { .events = EPOLLIN };
	struct rdma_async *a;

	for (unsigned i = 0; i < rt->nasync; i++)
		if (rt->async[i].verbs == verbs)
			return;
	if (rt->nasync == MAX_DEVS)
		return;
	a = &rt->async[rt->nasync];
	a->ev.kind = EV_ASYNC;
	a->verbs = verbs;
	e.data.ptr = &a->ev;
	fcntl(verbs->async_fd, F_SETFL, fcntl(verbs->async_fd, F_GETFL) | O_NONBLOCK);
	if (epoll_ctl(rt->reactors[0].epfd, EPOLL_CTL_ADD, verbs->async_fd, &e)) {
		GDX_WARN(SUBSYS, "rdma: cannot watch %s's asynchronous events: %s",
			 ibv_get_device_name(verbs->device), strerror(errno));
		return;
	}
	rt->nasync++;
}

static struct rdma_dev *dev_get(struct rdma_tgt *rt, struct ibv_context *verbs)
{
	struct rdma_dev *d;

	pthread_mutex_lock(&rt->dev_lock);
	for (d = rt->devs; d; d = d->next)
		if (d->verbs == verbs)
			break;
	if (!d) {
		struct ibv_device_attr a;

		d = calloc(1, sizeof(*d));
		if (d) {
			d->verbs = verbs;
			d->pd = ibv_alloc_pd(verbs);
			if (ibv_query_device(verbs, &a)) {
				d->max_rd_atom = 1;
			} else {
				d->max_rd_atom = GDX_MIN(a.max_qp_rd_atom, a.max_qp_init_rd_atom);
				d->max_srq_wr = a.max_srq ? a.max_srq_wr : 0;
			}
			if (!d->pd) {
				free(d);
				d = NULL;
			} else {
				d->next = rt->devs;
				rt->devs = d;
				async_watch(rt, verbs);
			}
		}
	}
	if (d)
		d->refs++;
	pthread_mutex_unlock(&rt->dev_lock);
	return d;
}

void nvmf_rdma_dev_put(struct rdma_tgt *rt, struct rdma_dev *d)
{
	struct rdma_dev **pp;

	if (!d)
		return;
	pthread_mutex_lock(&rt->dev_lock);
	if (--d->refs == 0) {
		for (pp = &rt->devs; *pp != d; pp = &(*pp)->next)
			;
		*pp = d->next;
		ibv_dealloc_pd(d->pd);
		free(d);
	}
	pthread_mutex_unlock(&rt->dev_lock);
}

void nvmf_rdma_srq_destroy(struct rdma_tgt *rt, struct rdma_cc *c)
{
	if (c->srq)
		ibv_destroy_srq(c->srq);
	if (c->srq_mr)
		ibv_dereg_mr(c->srq_mr);
	free(c->srq_mem);
	free(c->srq_recvs);
	nvmf_rdma_dev_put(rt, c->dev);
	c->srq = NULL;
	c->srq_mr = NULL;
	c->srq_mem = NULL;
	c->srq_recvs = NULL;
	c->dev = NULL;
}

/*
 * The reactor's shared receive queue on d: nvmf.target.rdma_srq receives (as
 * many as the device takes), each as large as the largest capsule a queue may
 * send.  None where the device has none or the knob is 0: then each queue pair
 * keeps a receive per entry.
 */
static void srq_create(struct rdma_reactor *r, struct rdma_cc *c, struct rdma_dev *d)
{
	const struct gdx_nvmf_target *t = r->rt->t;
	size_t slot = sizeof(struct gdx_nvme_sqe) + GDX_MAX((uint32_t)ADMIN_INLINE,
							     t->core.inline_data);
	unsigned n = GDX_MIN(t->rdma_srq, (unsigned)d->max_srq_wr);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = n, .max_sge = 1 } };

	if (!n)
		return;
	c->srq = ibv_create_srq(d->pd, &sa);
	if (!c->srq) {
		GDX_INFO(SUBSYS, "rdma reactor %u: no shared receive queue on %s (%s): a receive "
			 "queue per queue pair", r->id, ibv_get_device_name(d->verbs->device),
			 strerror(errno));
		return;
	}
	c->dev = dev_get(r->rt, d->verbs);
	c->srq_mem = aligned_alloc(4096, GDX_ALIGN_UP(slot * n, 4096u));
	c->srq_recvs = calloc(n, sizeof(*c->srq_recvs));
	if (c->srq_mem)
		c->srq_mr = ibv_reg_mr(d->pd, c->srq_mem, slot * n, IBV_ACCESS_LOCAL_WRITE);
	if (!c->dev || !c->srq_recvs || !c->srq_mr)
		goto fail;
	for (unsigned i = 0; i < n; i++) {
		struct rdma_recv *rv = &c->srq_recvs[i];
		struct ibv_recv_wr *bad;

		rv->ctx.kind = WR_RECV;
		rv->buf = c->srq_mem + i * slot;
		rv->sge = (struct ibv_sge){ (uintptr_t)rv->buf, (uint32_t)slot, c->srq_mr->lkey };
		rv->wr = (struct ibv_recv_wr){ .wr_id = (uintptr_t)&rv->ctx, .sg_list = &rv->sge,
					       .num_sge = 1 };
		rv->srq = c->srq;
		if (ibv_post_srq_recv(c->srq, &rv->wr, &bad))
			goto fail;
	}
	GDX_DBG(SUBSYS, "rdma reactor %u: a shared receive queue of %u receives of %zu bytes on %s",
		r->id, n, slot, ibv_get_device_name(d->verbs->device));
	return;
fail:
	GDX_WARN(SUBSYS, "rdma reactor %u: setting up a shared receive queue on %s failed (%s): a "
		 "receive queue per queue pair", r->id, ibv_get_device_name(d->verbs->device),
		 strerror(errno));
	nvmf_rdma_srq_destroy(r->rt, c);
}

/* What the reactor keeps for a device: a completion channel and a shared receive queue. */
static struct rdma_cc *reactor_dev(struct rdma_reactor *r, struct rdma_dev *d)
{
	struct epoll_event e = { .events = EPOLLIN };
	struct rdma_cc *c;

	for (unsigned i = 0; i < r->ncc; i++)
		if (r->ccs[i].verbs == d->verbs)
			return &r->ccs[i];
	if (r->ncc == MAX_DEVS)
		return NULL;
	c = &r->ccs[r->ncc];
	c->cc = ibv_create_comp_channel(d->verbs);
	if (!c->cc)
		return NULL;
	fcntl(c->cc->fd, F_SETFL, fcntl(c->cc->fd, F_GETFL) | O_NONBLOCK);
	c->verbs = d->verbs;
	c->ev.kind = EV_CQ;
	e.data.ptr = &c->ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->cc->fd, &e)) {
		ibv_destroy_comp_channel(c->cc);
		return NULL;
	}
	r->ncc++;
	srq_create(r, c, d);
	return c;
}

void nvmf_rdma_reject(struct rdma_cm_id *id, uint16_t sts)
{
	struct gdx_rdma_cm_rej rej;

	gdx_rdma_cm_rej_init(&rej, sts);
	rdma_reject(id, &rej, sizeof(rej));
}

static void peer_name(struct rdma_cm_id *id, char *out, size_t n)
{
	struct sockaddr *sa = rdma_get_peer_addr(id);

	nvmf_target_addr_str(sa, sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
								   sizeof(struct sockaddr_in),
			     out, n);
}

void nvmf_rdma_reactor_wake(struct rdma_reactor *r)
{
	uint64_t one = 1;

	if (write(r->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		GDX_WARN(SUBSYS, "rdma reactor %u wake: %s", r->id, strerror(errno));
}

static void aen_kick(void *handle)
{
	struct rdma_queue *q = handle;

	atomic_store(&q->r->aen, true);
	nvmf_rdma_reactor_wake(q->r);
}

/* Sets up the queue pair for a checked connect request and accepts it. */
static void queue_accept(struct rdma_reactor *r, const struct handoff *h)
{
	static const char *const names[] = { "commands", "errors", "bytes_in", "bytes_out" };
	struct gdx_nvmf_target *t = r->rt->t;
	struct rdma_queue *q = calloc(1, sizeof(*q));
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param p = { 0 };
	struct gdx_rdma_cm_rep rep;
	struct rdma_cc *cc;
	size_t slot;

	if (!q) {
		nvmf_rdma_reject(h->id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(h->id);
		return;
	}
	q->tgt = t;
	q->r = r;
	atomic_fetch_add(&t->nconns, 1);
	q->id = h->id;
	q->id->context = q;
	q->born_ns = gdx_now_ns();
	q->depth = h->qr.sq_size;
	q->inline_max = h->qr.qid ? t->core.inline_data : ADMIN_INLINE;
	q->state = Q_LIVE;
	q->drain_recv.kind = WR_DRAIN_RECV;
	q->drain_send.kind = WR_DRAIN_SEND;
	q->post_tail = &q->post_head;
	nvmf_bufs_init(&q->bufs, t, &q->sq, q->peer);
	q->sq.tgt = &t->core;
	q->sq.ioctx = r->ioctx;
	q->sq.port = h->port;
	q->sq.handle = q;
	q->sq.aen_kick = aen_kick;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(q->sq.ctr); i++)
		q->sq.ctr[i].name = names[i];
	memcpy(&q->sq.local, rdma_get_local_addr(q->id), sizeof(struct sockaddr_in6));
	peer_name(q->id, q->peer, sizeof(q->peer));
	q->next = r->queues;
	if (r->queues)
		r->queues->prev = q;
	r->queues = q;

	q->dev = dev_get(r->rt, q->id->verbs);
	cc = q->dev ? reactor_dev(r, q->dev) : NULL;
	if (!cc)
		goto no_rsc;
	q->srq = cc->srq;
	atomic_init(&q->last_wqe, !q->srq);
	/* per request: one READ or one WRITE, and the response; a receive each */
	q->cq = ibv_create_cq(q->id->verbs, 3 * q->depth + 2, q, cc->cc, 0);
	if (!q->cq || ibv_req_notify_cq(q->cq, 0))
		goto no_rsc;
	qa.qp_context = q;
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = q->cq;
	qa.recv_cq = q->cq;
	qa.cap.max_send_wr = 2u * q->depth + 1;
	qa.cap.max_send_sge = 1;
	qa.srq = q->srq;
	if (!q->srq) {
		qa.cap.max_recv_wr = q->depth + 1u;
		qa.cap.max_recv_sge = 1;
	}
	if (rdma_create_qp(q->id, q->dev->pd, &qa))
		goto no_rsc;

	q->rsps = calloc(q->depth, sizeof(*q->rsps));
	q->reqs = calloc(q->depth, sizeof(*q->reqs));
	if (!q->rsps || !q->reqs)
		goto no_rsc;
	q->rsp_mr = ibv_reg_mr(q->dev->pd, q->rsps, q->depth * sizeof(*q->rsps), 0);
	if (!q->rsp_mr)
		goto no_rsc;
	slot = sizeof(struct gdx_nvme_sqe) + q->inline_max;
	if (!q->srq) {
		q->recv_mem = aligned_alloc(4096, GDX_ALIGN_UP(slot * q->depth, 4096u));
		q->recvs = calloc(q->depth, sizeof(*q->recvs));
		if (!q->recv_mem || !q->recvs)
			goto no_rsc;
		q->recv_mr = ibv_reg_mr(q->dev->pd, q->recv_mem, slot * q->depth,
					IBV_ACCESS_LOCAL_WRITE);
		if (!q->recv_mr)
			goto no_rsc;
	}
	for (unsigned i = 0; i < q->depth; i++) {
		struct rdma_req *rr = &q->reqs[i];

		if (!q->srq) {
			struct rdma_recv *rv = &q->recvs[i];

			rv->ctx.kind = WR_RECV;
			rv->buf = q->recv_mem + i * slot;
			rv->sge = (struct ibv_sge){ (uintptr_t)rv->buf, (uint32_t)slot,
						    q->recv_mr->lkey };
			rv->wr = (struct ibv_recv_wr){ .wr_id = (uintptr_t)&rv->ctx,
						       .sg_list = &rv->sge, .num_sge = 1 };
			if (nvmf_rdma_post_recv(q, rv))
				goto no_rsc;
		}
		rr->q = q;
		rr->read_ctx.kind = WR_READ;
		rr->write_ctx.kind = WR_WRITE;
		rr->send_ctx.kind = WR_SEND;
		rr->rsp = &q->rsps[i];
		rr->next_free = q->free_reqs;
		q->free_reqs = rr;
	}

	gdx_rdma_cm_rep_init(&rep, q->depth);
	p.private_data = &rep;
	p.private_data_len = sizeof(rep);
	/*
	 * The target reads host memory: as many READs in flight as both sides
	 * allow.  The CM hands the request's values over from this side's point of
	 * view: its initiator depth is what the host will serve.
	 */
	p.initiator_depth = (uint8_t)GDX_MIN((int)h->initiator_depth, q->dev->max_rd_atom);
	p.responder_resources = (uint8_t)GDX_MIN((int)h->responder_resources, q->dev->max_rd_atom);
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	if (rdma_accept(q->id, &p)) {
		GDX_WARN(SUBSYS, "%s qid %u: accept: %s", q->peer, h->qr.qid, strerror(errno));
		q->state = Q_DEAD;
		q->drained_recv = q->drained_send = true;
		nvmf_rdma_reap_later(q);
		return;
	}
	GDX_DBG(SUBSYS, "%s: qid %u accepted on reactor %u, %u entries", q->peer, h->qr.qid, r->id,
		q->depth);
	return;
no_rsc:
	GDX_WARN(SUBSYS, "%s qid %u: no resources for the queue (%s)", q->peer, h->qr.qid,
		 strerror(errno));
	nvmf_rdma_reject(q->id, GDX_RDMA_CM_NO_RSC);
	q->state = Q_DEAD;
	q->drained_recv = q->drained_send = true;
	nvmf_rdma_reap_later(q);
}

static void connect_request(struct rdma_tgt *rt, struct rdma_cm_event *ev)
{
	const struct rdma_conn_param *cp = &ev->param.conn;
	struct rdma_listener *l = ev->listen_id->context;
	struct gdx_nvmf_target *t = rt->t;
	struct gdx_rdma_cm_limits lim = {
		.max_qid = t->core.max_io_queues,
		.max_qsize = t->core.max_qdepth,
	};
	struct handoff h = { .id = ev->id, .port = l->port };
	struct rdma_reactor *to;
	uint16_t sts;
	char peer[64];

	sts = gdx_rdma_cm_req_parse(cp->private_data, cp->private_data_len, &lim, &h.qr);
	if (!sts && atomic_load(&t->nconns) >= t->max_conns) {
		GDX_WARN(SUBSYS, "rdma: connect refused: nvmf.target.max_conns (%u) reached",
			 t->max_conns);
		sts = GDX_RDMA_CM_NO_RSC;
	}
	if (sts) {
		peer_name(ev->id, peer, sizeof(peer));
		GDX_INFO(SUBSYS, "%s: connect rejected: %s", peer, gdx_rdma_cm_status_str(sts));
		nvmf_rdma_reject(ev->id, sts);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(h.id);
		return;
	}
	h.initiator_depth = cp->initiator_depth;
	h.responder_resources = cp->responder_resources;
	/*
	 * The new id inherited the listener as its context.  Until its queue
	 * exists, an event for it on the reactor (the host gave up: REJECTED,
	 * DISCONNECTED) must find no queue there, not the listener read as one.
	 */
	h.id->context = NULL;
	rdma_ack_cm_event(ev);
	/* I/O queue N on reactor (N-1) % reactors, as the TCP transport does */
	to = &rt->reactors[h.qr.qid ? (h.qr.qid - 1u) % rt->nreactors :
				      atomic_fetch_add(&rt->next_reactor, 1) % rt->nreactors];
	if (rdma_migrate_id(h.id, to->cm_ch)) {
		peer_name(h.id, peer, sizeof(peer));
		GDX_WARN(SUBSYS, "%s: cannot move the connection to its reactor: %s", peer,
			 strerror(errno));
		nvmf_rdma_reject(h.id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(h.id);
		return;
	}
	pthread_mutex_lock(&to->lock);
	if (to->nhandoff == to->handoff_cap) {
		unsigned cap = to->handoff_cap ? 2 * to->handoff_cap : 16;
		struct handoff *n = realloc(to->handoff, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&to->lock);
			nvmf_rdma_reject(h.id, GDX_RDMA_CM_NO_RSC);
			rdma_destroy_id(h.id);
			return;
		}
		to->handoff = n;
		to->handoff_cap = cap;
	}
	to->handoff[to->nhandoff++] = h;
	pthread_mutex_unlock(&to->lock);
	nvmf_rdma_reactor_wake(to);
}

void nvmf_rdma_listen_events(struct rdma_tgt *rt)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(rt->listen_ch, &ev)) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			connect_request(rt, ev);
			continue;
		}
		if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
			GDX_WARN(SUBSYS, "rdma: a listener's device went away");
		rdma_ack_cm_event(ev);
	}
}

void nvmf_rdma_queue_events(struct rdma_reactor *r)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(r->cm_ch, &ev)) {
		struct rdma_queue *q = ev->id->context;
		enum rdma_cm_event_type type = ev->event;

		rdma_ack_cm_event(ev);
		if (!q || q->reaped)
			continue;
		switch (type) {
		case RDMA_CM_EVENT_ESTABLISHED:
			GDX_DBG(SUBSYS, "%s: queue established", q->peer);
			/*
			 * It ended before: its disconnect found the connection not
			 * established yet and sent nothing, and the host would learn
			 * only when the queue is freed.  Now the request goes out.
			 */
			if (q->state != Q_LIVE) {
				GDX_DBG(SUBSYS, "%s qid %u: ended before established: disconnect sent "
					"now", q->peer, q->sq.qid);
				rdma_disconnect(q->id);
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			nvmf_rdma_queue_end(q, "host disconnected");
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			nvmf_rdma_queue_end(q, "device removed");
			break;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			nvmf_rdma_queue_end(q, rdma_event_str(type));
			break;
		default:
			break;
		}
	}
}

static bool event_fatal(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_CQ_ERR:
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		return true;
	default:
		return false;
	}
}

/* The queue whose queue pair qp is, if it is one of this transport's (in one of its PDs). */
static struct rdma_queue *qp_queue(struct rdma_tgt *rt, struct ibv_qp *qp)
{
	struct rdma_dev *d;

	pthread_mutex_lock(&rt->dev_lock);
	for (d = rt->devs; d && d->pd != qp->pd; d = d->next)
		;
	pthread_mutex_unlock(&rt->dev_lock);
	return d ? qp->qp_context : NULL;
}

/*
 * A queue pair's event names its queue, which may be another reactor's: it
 * is not freed before this returns, as destroying the queue pair waits for
 * its events to be acknowledged.
 */
void nvmf_rdma_async_events(struct rdma_tgt *rt, struct rdma_async *a)
{
	struct ibv_async_event e;

	while (!ibv_get_async_event(a->verbs, &e)) {
		bool qp_event = e.event_type == IBV_EVENT_QP_LAST_WQE_REACHED ||
				e.event_type == IBV_EVENT_COMM_EST;
		struct rdma_queue *q = qp_event ? qp_queue(rt, e.element.qp) : NULL;

		if (q && e.event_type == IBV_EVENT_QP_LAST_WQE_REACHED) {
			GDX_DBG(SUBSYS, "%s qid %u: last WQE reached", q->peer, q->sq.qid);
			atomic_store(&q->last_wqe, true);
			nvmf_rdma_reactor_wake(q->r);
		} else if (q) {
			/*
			 * The host's first capsule came before the CM's RTU: the
			 * connection is established, as the CM learns here (as
			 * nvmet-rdma tells it), so that a disconnect is sent.
			 */
			GDX_DBG(SUBSYS, "%s qid %u: a capsule before the RTU", q->peer, q->sq.qid);
			rdma_notify(q->id, IBV_EVENT_COMM_EST);
		} else if (event_fatal(e.event_type)) {
			/* a queue pair's error ends its queue through its completions */
			GDX_WARN(SUBSYS, "rdma: %s: %s", ibv_get_device_name(a->verbs->device),
				 ibv_event_type_str(e.event_type));
		} else {
			GDX_DBG(SUBSYS, "rdma: %s: %s", ibv_get_device_name(a->verbs->device),
				ibv_event_type_str(e.event_type));
		}
		ibv_ack_async_event(&e);
	}
}

void nvmf_rdma_take_handoffs(struct rdma_reactor *r)
{
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nhandoff; i++)
		queue_accept(r, &r->handoff[i]);
	r->nhandoff = 0;
	pthread_mutex_unlock(&r->lock);
}

int nvmf_rdma_listen_on(struct rdma_tgt *rt, struct nvmf_port *p, int *bound)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
	struct rdma_listener *l = &rt->listeners[rt->nlisteners];
	struct addrinfo *ai;
	int ret;

	ret = getaddrinfo(p->traddr, p->trsvcid, &hints, &ai);
	if (ret) {
		GDX_ERR(SUBSYS, "port %u: rdma address %s:%s: %s", p->portid, p->traddr, p->trsvcid,
			gai_strerror(ret));
		return -EINVAL;
	}
	if (rdma_create_id(rt->listen_ch, &l->id, l, RDMA_PS_TCP)) {
		ret = -errno;
		freeaddrinfo(ai);
		return ret;
	}
	if (rdma_bind_addr(l->id, ai->ai_addr) || rdma_listen(l->id, LISTEN_BACKLOG)) {
		ret = -errno;
		GDX_ERR(SUBSYS, "port %u: rdma listen on %s:%s: %s (is an RDMA device up there?)",
			p->portid, p->traddr, p->trsvcid, strerror(errno));
		freeaddrinfo(ai);
		rdma_destroy_id(l->id);
		return ret;
	}
	freeaddrinfo(ai);
	l->port = p;
	rt->nlisteners++;
	*bound = ntohs(rdma_get_src_port(l->id));
	if (!strcmp(p->trsvcid, "0"))
		snprintf(p->trsvcid, sizeof(p->trsvcid), "%d", *bound);
	GDX_INFO(SUBSYS, "port %u listening on rdma %s%s%s:%d", p->portid,
		 strchr(p->traddr, ':') ? "[" : "", p->traddr, strchr(p->traddr, ':') ? "]" : "",
		 *bound);
	return 0;
}
