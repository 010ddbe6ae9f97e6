/* SPDX-License-Identifier: MIT */
/*
 * rdma://host:port — verbs through rdma-core: one RC queue pair per endpoint,
 * connected with rdma_cm.  The NIC does the work: one-sided reads and writes
 * are served by the peer's NIC with no peer CPU involved, and the key is the
 * MR's rkey.
 *
 * Device memory is registered with ibv_reg_dmabuf_mr on the dma-buf the device
 * layer exports, else with ibv_reg_mr on the device pointer where
 * nvidia_peermem lets the NIC pin GPU pages; both are the direct path.  With
 * neither, local buffers go through a pinned bounce buffer (path "bounce"),
 * and remote access to such memory is refused, because no CPU would be there
 * to move what the peer's NIC writes.
 *
 * Small sends and writes go inline; unsignaled requests are tracked in post
 * order and completed when a later signaled one completes (a signal is forced
 * every half queue so the send queue never fills with unreaped work).  On
 * disconnect the QP is moved to the error state and a signaled marker request
 * drains the send queue, so every request completes exactly once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <gdx/topo.h>

#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "xport/xport.h"

#define SUBSYS "xport.verbs"
#define INLINE_WANT 128
#define RESOLVE_MS 5000

struct vb_reg {
	struct ibv_mr *mr;	/* NULL: bounce (no MR on this memory) */
	int dmabuf_fd;
};

/*
 * A shared receive queue: one ibv_srq on one PD that every member endpoint
 * uses (rxe, like the spec, checks a receive's lkey against the QP's PD), so
 * the members share a registration domain: their keys work for each other's
 * peers.  Receives are registered through the queue's anchor endpoint, whose
 * backend state this is (hence pd first, as in vb_ep: mr_reg takes either).
 */
struct vb_srq {
	struct ibv_pd *pd;
	struct gdx_xport_ep *anchor;
	struct ibv_context *ctx;
	struct ibv_srq *srq;
	pthread_mutex_t lock;		/* posted; keeps the queue's order into the hardware */
	struct gdx_xport_req **posted;	/* in the hardware, by slot (req->be[2] - 1) */
	unsigned depth;
};

struct vb_ep {
	struct ibv_pd *pd;		/* first: see vb_srq */
	struct vb_srq *srq;		/* opts.srq's, whose pd this is */
	struct gdx_xport_ep *fe;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t max_inline;
	pthread_mutex_t lock;
	/* send-side requests in post order, for unsignaled completion */
	struct gdx_xport_req **ring;
	unsigned ring_size, head, count, since_signal;
	unsigned reads;			/* reads in the ring */
	/*
	 * Requests held back in post order (vb_post): the first is fenced and
	 * staged through a bounce buffer, and reads are in flight.
	 */
	struct gdx_xport_req **held;	/* ring_size slots, from held_head */
	unsigned held_head, nheld;
	int dead, drain_posted, drained;
	pthread_t cm_thread;
	int cm_started, stop_fd;
	_Atomic int armed;	/* notifications requested since the channel was last drained */
};

struct vb_listener {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

/* The wr_id of the marker that drains the send queue on disconnect. */
static char drain_marker;

static int status_of(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return 0;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR: return GDX_EREMOTE;
	case IBV_WC_LOC_LEN_ERR: return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR: return -EFAULT;
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR: return GDX_EDISCONNECTED;
	default: return -EIO;
	}
}

/* ---- bounce buffers for device memory without a direct path ---------------- */

static int bounce_get(struct ibv_pd *pd, struct gdx_xport_req *req)
{
	struct gdx_device *dev = req->buf.dev;
	struct ibv_mr *mr;
	void *b;
	int ret = gdx_pinned_alloc(dev, req->buf.len, &b);

	if (ret)
		return ret;
	mr = ibv_reg_mr(pd, b, req->buf.len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		ret = -errno;
		gdx_pinned_free(dev, b);
		return ret;
	}
	req->be[0] = b;
	req->be[1] = mr;
	return 0;
}

static void bounce_put(struct gdx_xport_req *req)
{
	if (!req->be[0])
		return;
	ibv_dereg_mr(req->be[1]);
	gdx_pinned_free(req->buf.dev, req->be[0]);
	req->be[0] = NULL;
}

/* Completes req; data that landed in a bounce buffer goes to the device first. */
static void finish(struct gdx_xport_req *req, int st, uint64_t len, const struct ibv_wc *wc)
{
	if (!st && req->be[0] && (req->op == GDX_XPORT_OP_READ || req->op == GDX_XPORT_OP_RECV))
		st = gdx_memcpy(req->buf.dev, req->buf.p, req->be[0], len);
	bounce_put(req);
	/* A completion's opcode is defined only when it succeeded. */
	if (wc && !wc->status && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		gdx_xport_complete_imm(req, st, st ? 0 : len, GDX_XPORT_OP_RECV_WRITE_IMM,
				       ntohl(wc->imm_data));
	else
		gdx_xport_complete(req, st, st ? 0 : len);
}

/* Where the NIC finds req's data: its bounce buffer, or its registered memory. */
static struct ibv_sge req_sge(const struct gdx_xport_req *req)
{
	const struct vb_reg *g = req->buf.reg;
	struct ibv_sge sge = { .addr = (uintptr_t)req->buf.p, .length = (uint32_t)req->buf.len };

	if (req->be[0]) {
		sge.addr = (uintptr_t)req->be[0];
		sge.lkey = ((struct ibv_mr *)req->be[1])->lkey;
	} else if (req->buf.len) {
		sge.lkey = g->mr->lkey;
	}
	return sge;
}

/* ---- shared receive queues ----------------------------------------------- */

/* Hands receive req (of the queue's anchor) to the hardware queue.  s->lock held. */
static int srq_post(struct vb_srq *s, struct gdx_xport_req *req)
{
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { .wr_id = (uintptr_t)req, .sg_list = &sge,
				  .num_sge = req->buf.len ? 1 : 0 }, *bad;
	unsigned slot;
	int ret;

	if (req->buf.len > UINT32_MAX)
		return -EMSGSIZE;
	for (slot = 0; slot < s->depth && s->posted[slot]; slot++)
		;
	if (slot == s->depth)
		return -EAGAIN;	/* the front end keeps depth: cannot happen */
	if (req->buf.len && req->buf.path == GDX_XPORT_PATH_BOUNCE) {
		ret = bounce_get(s->pd, req);
		if (ret)
			return ret;
	}
	sge = req_sge(req);
	ret = ibv_post_srq_recv(s->srq, &wr, &bad);
	if (ret) {
		bounce_put(req);
		return -ret;
	}
	s->posted[slot] = req;
	req->be[2] = (void *)(uintptr_t)(slot + 1);
	return 0;
}

/* Moves the receives waiting in the front end's queue to the hardware; via: a member. */
static void srq_fill(struct vb_srq *s, struct gdx_xport_ep *via)
{
	struct gdx_xport_req *req;

	pthread_mutex_lock(&s->lock);
	while (!gdx_xport_srq_take(via, &req)) {
		int ret = srq_post(s, req);

		if (ret) {
			GDX_ERR(SUBSYS, "posting a shared receive: %s", gdx_strerror(ret));
			gdx_xport_complete(req, ret, 0);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* A receive of the hardware queue completed on v: it is v's now. */
static void srq_arrived(struct vb_ep *v, struct gdx_xport_req *r)
{
	struct vb_srq *s = v->srq;

	pthread_mutex_lock(&s->lock);
	s->posted[(uintptr_t)r->be[2] - 1] = NULL;
	pthread_mutex_unlock(&s->lock);
	r->ep = v->fe;
}

static int vb_srq_open(struct gdx_xport_ep *anchor, void *arg, unsigned depth, void **priv)
{
	struct vb_ep *v = arg;
	struct ibv_srq_init_attr a = { .attr = { .max_wr = depth, .max_sge = 1 } };
	struct vb_srq *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	s->posted = calloc(depth, sizeof(*s->posted));
	s->ctx = v->id->verbs;
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->posted || !s->pd) {
		ret = -ENOMEM;
		goto fail;
	}
	s->srq = ibv_create_srq(s->pd, &a);
	if (!s->srq) {
		/* Providers do not all set errno: never report success here. */
		ret = errno ? -errno : -ENOMEM;
		GDX_ERR(SUBSYS, "ibv_create_srq (%u receives) on %s: %s", depth,
			ibv_get_device_name(s->ctx->device), strerror(-ret));
		goto fail;
	}
	s->anchor = anchor;
	s->depth = depth;
	pthread_mutex_init(&s->lock, NULL);
	*priv = s;
	return 0;
fail:
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	free(s->posted);
	free(s);
	return ret;
}

static void vb_srq_close(void *priv)
{
	struct vb_srq *s = priv;

	/* No QP uses it any more: what is posted is never going to complete. */
	ibv_destroy_srq(s->srq);
	s->srq = NULL;
	for (unsigned i = 0; i < s->depth; i++) {
		if (s->posted[i]) {
			bounce_put(s->posted[i]);
			gdx_xport_req_drop(s->posted[i]);
			s->posted[i] = NULL;
		}
	}
}

static void vb_srq_free(void *priv)
{
	struct vb_srq *s = priv;

	if (ibv_dealloc_pd(s->pd))
		GDX_WARN(SUBSYS, "shared receive queue's PD still in use");
	pthread_mutex_destroy(&s->lock);
	free(s->posted);
	free(s);
}

static void vb_srq_kick(void *priv)
{
	struct vb_ep *v = priv;

	srq_fill(v->srq, v->fe);
}

/* ---- completions --------------------------------------------------------- */

static void vb_kill(struct vb_ep *v);
static int vb_arm(void *priv);
static void vb_release(struct vb_ep *v);

/* Send-side completion for wr: everything posted before it finished without error. Lock held. */
static void sq_complete(struct vb_ep *v, const struct ibv_wc *wc)
{
	while (v->count) {
		struct gdx_xport_req *r = v->ring[v->head];

		v->ring[v->head] = NULL;
		v->head = (v->head + 1) % v->ring_size;
		v->count--;
		if (r != (void *)&drain_marker && r->op == GDX_XPORT_OP_READ)
			v->reads--;
		if ((uint64_t)(uintptr_t)r == wc->wr_id) {
			if (r == (void *)&drain_marker) {
				v->drained = 1;
				return;
			}
			finish(r, status_of(wc->status), r->buf.len, NULL);
			return;
		}
		if (r == (void *)&drain_marker)
			v->drained = 1;
		else
			finish(r, 0, r->buf.len, NULL);
	}
	GDX_ERR(SUBSYS, "completion for a request not outstanding (wr_id 0x%llx)",
		(unsigned long long)wc->wr_id);
}

static int vb_progress(void *priv)
{
	struct vb_ep *v = priv;
	struct ibv_wc wc[32];
	int n, total = 0, failed = 0;

	pthread_mutex_lock(&v->lock);
	/* Reap notifications so the channel fd goes quiet; only armed CQs have any. */
	while (atomic_load_explicit(&v->armed, memory_order_relaxed)) {
		struct ibv_cq *ev_cq;
		void *ctx;

		if (ibv_get_cq_event(v->cc, &ev_cq, &ctx)) {
			atomic_store(&v->armed, 0);
			break;
		}
		ibv_ack_cq_events(ev_cq, 1);
	}
	while ((n = ibv_poll_cq(v->cq, GDX_ARRAY_SIZE(wc), wc)) > 0) {
		for (int i = 0; i < n; i++) {
			struct gdx_xport_req *r = (void *)(uintptr_t)wc[i].wr_id;

			if (wc[i].status != IBV_WC_SUCCESS) {
				if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
					GDX_DBG(SUBSYS, "completion error: %s (vendor 0x%x)",
						ibv_wc_status_str(wc[i].status),
						wc[i].vendor_err);
				/*
				 * The QP is in the error state (librdmacm moves it there on a
				 * disconnect before the event is read): say so before any
				 * completion tells the user.
				 */
				gdx_xport_ep_set_disconnected(v->fe);
				failed = 1;
			}
			/* Flushed completions have no opcode: the request says which queue. */
			if (r != (void *)&drain_marker && r->op == GDX_XPORT_OP_RECV) {
				int st = status_of(wc[i].status);

				if (v->srq)
					srq_arrived(v, r);

				/* rxe reports a message longer than the receive this way. */
				if (wc[i].status == IBV_WC_LOC_QP_OP_ERR)
					st = -EMSGSIZE;
				finish(r, st, wc[i].byte_len, &wc[i]);
			} else
				sq_complete(v, &wc[i]);
		}
		total += n;
	}
	if (!failed)
		vb_release(v);
	pthread_mutex_unlock(&v->lock);
	/* Any error leaves the QP in the error state: the connection is over. */
	if (failed) {
		rdma_disconnect(v->id);
		vb_kill(v);
	}
	return total;
}

static int vb_arm(void *priv)
{
	struct vb_ep *v = priv;

	atomic_store(&v->armed, 1);
	ibv_req_notify_cq(v->cq, 0);
	return 0;
}

static int vb_event_fd(void *priv)
{
	return ((struct vb_ep *)priv)->cc->fd;
}

/* ---- connection management ------------------------------------------------ */

static int wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int timeout_ms,
		      struct rdma_cm_event **out)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	uint64_t end = gdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
	struct rdma_cm_event *ev;
	int r;

	/* a signal does not end the wait, nor make it longer */
	while ((r = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR) {
		uint64_t now = gdx_now_ns();

		if (timeout_ms < 0)
			continue;
		if (now >= end)
			return -ETIMEDOUT;
		timeout_ms = (int)((end - now + 999999) / 1000000);
	}
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	if (rdma_get_cm_event(ch, &ev))
		return -errno;
	if (ev->event != want) {
		int st = ev->status;

		GDX_DBG(SUBSYS, "rdma_cm: %s (status %d) while waiting for %s",
			rdma_event_str(ev->event), st, rdma_event_str(want));
		switch (ev->event) {
		case RDMA_CM_EVENT_REJECTED: r = -ECONNREFUSED; break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE: r = st < 0 ? st : -EHOSTUNREACH; break;
		default: r = -ECONNABORTED; break;
		}
		rdma_ack_cm_event(ev);
		return r;
	}
	if (out) {
		*out = ev;
		return 0;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static void qp_to_error(struct vb_ep *v)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (v->qp)
		ibv_modify_qp(v->qp, &a, IBV_QP_STATE);
}

/* Moves the QP to error and posts the marker that tells when the send queue is drained. */
static void vb_kill(struct vb_ep *v)
{
	struct ibv_send_wr wr = { .wr_id = (uintptr_t)&drain_marker, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	pthread_mutex_lock(&v->lock);
	if (v->dead) {
		pthread_mutex_unlock(&v->lock);
		return;
	}
	v->dead = 1;
	gdx_xport_ep_set_disconnected(v->fe);
	qp_to_error(v);
	for (; v->nheld; v->nheld--) {
		struct gdx_xport_req *r = v->held[v->held_head];

		v->held_head = (v->held_head + 1) % v->ring_size;
		finish(r, GDX_EDISCONNECTED, 0, NULL);
	}
	if (v->qp && !ibv_post_send(v->qp, &wr, &bad)) {
		v->ring[(v->head + v->count) % v->ring_size] = (void *)&drain_marker;
		v->count++;
		v->drain_posted = 1;
	} else {
		/* Nothing was executed unsignaled that a flush would not report: finish here. */
		GDX_WARN(SUBSYS, "could not post the drain marker; completing the send queue");
		while (v->count) {
			struct gdx_xport_req *r = v->ring[v->head];

			v->head = (v->head + 1) % v->ring_size;
			v->count--;
			finish(r, GDX_EDISCONNECTED, 0, NULL);
		}
	}
	pthread_mutex_unlock(&v->lock);
	/* Wake anyone sleeping on the completion channel. */
	vb_arm(v);
}

static void *cm_main(void *arg)
{
	struct vb_ep *v = arg;
	struct pollfd pfd[2] = { { .fd = v->ch->fd, .events = POLLIN },
				 { .fd = v->stop_fd, .events = POLLIN } };

	for (;;) {
		struct rdma_cm_event *ev;
		enum rdma_cm_event_type t;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN) || rdma_get_cm_event(v->ch, &ev))
			continue;
		t = ev->event;
		rdma_ack_cm_event(ev);
		GDX_DBG(SUBSYS, "rdma_cm: %s", rdma_event_str(t));
		if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		    t == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			rdma_disconnect(v->id);
			vb_kill(v);
		}
	}
	return NULL;
}

static int setup_qp(struct vb_ep *v, struct gdx_xport_ep *fe)
{
	const struct gdx_xport_opts *o = gdx_xport_ep_opts(fe);
	struct ibv_qp_init_attr qa = { 0 };
	unsigned rq = o->rq_depth;
	int ret;

	v->fe = fe;
	if (o->srq) {
		ret = gdx_xport_srq_priv(fe, v, (void **)&v->srq);
		if (ret)
			return ret;
		if (v->srq->ctx != v->id->verbs) {
			GDX_ERR(SUBSYS, "a shared receive queue serves one device (%s), not %s",
				ibv_get_device_name(v->srq->ctx->device),
				ibv_get_device_name(v->id->verbs->device));
			v->srq = NULL;
			return -EINVAL;
		}
		v->pd = v->srq->pd;
		/* Every receive of the queue may complete here. */
		rq = GDX_MAX(rq, v->srq->depth);
		qa.srq = v->srq->srq;
	} else {
		v->pd = ibv_alloc_pd(v->id->verbs);
	}
	v->cc = ibv_create_comp_channel(v->id->verbs);
	if (!v->pd || !v->cc)
		return -errno ? -errno : -ENOMEM;
	fcntl(v->cc->fd, F_SETFL, fcntl(v->cc->fd, F_GETFL) | O_NONBLOCK);
	v->cq = ibv_create_cq(v->id->verbs, (int)(o->sq_depth + rq + 1), v, v->cc, 0);
	if (!v->cq)
		return -errno;
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = v->cq;
	qa.recv_cq = v->cq;
	qa.sq_sig_all = 0;
	qa.cap.max_send_wr = o->sq_depth + 1;
	qa.cap.max_recv_wr = o->rq_depth;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = INLINE_WANT;
	if (rdma_create_qp(v->id, v->pd, &qa)) {
		/* Some devices take no inline data at all. */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(v->id, v->pd, &qa))
			return -errno;
	}
	v->qp = v->id->qp;
	v->max_inline = qa.cap.max_inline_data;
	v->ring_size = o->sq_depth + 2;
	v->ring = calloc(v->ring_size, sizeof(*v->ring));
	v->held = calloc(v->ring_size, sizeof(*v->held));
	if (!v->ring || !v->held)
		return -ENOMEM;
	pthread_mutex_init(&v->lock, NULL);
	v->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (v->stop_fd < 0)
		return -errno;
	atomic_store(&v->armed, 1);
	ret = ibv_req_notify_cq(v->cq, 0);
	return ret ? -ret : 0;
}

static void conn_param(struct vb_ep *v, struct rdma_conn_param *p)
{
	struct ibv_device_attr a;
	int rd = 16;

	if (!ibv_query_device(v->id->verbs, &a))
		rd = GDX_MIN(rd, GDX_MIN(a.max_qp_rd_atom, a.max_qp_init_rd_atom));
	memset(p, 0, sizeof(*p));
	p->responder_resources = (uint8_t)rd;
	p->initiator_depth = (uint8_t)rd;
	p->retry_count = 7;
	p->rnr_retry_count = 7;	/* a send waits for its receive indefinitely */
}

static void vb_free(struct vb_ep *v)
{
	if (v->cm_started) {
		uint64_t one = 1;

		if (write(v->stop_fd, &one, sizeof(one)) < 0)
			GDX_DBG(SUBSYS, "eventfd write: %s", strerror(errno));
		pthread_join(v->cm_thread, NULL);
	}
	if (v->qp)
		rdma_destroy_qp(v->id);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->cc)
		ibv_destroy_comp_channel(v->cc);
	if (v->pd && !v->srq)
		ibv_dealloc_pd(v->pd);
	if (v->id)
		rdma_destroy_id(v->id);
	if (v->ch)
		rdma_destroy_event_channel(v->ch);
	if (v->stop_fd > 0)
		close(v->stop_fd);
	if (v->ring)
		pthread_mutex_destroy(&v->lock);
	free(v->ring);
	free(v->held);
	free(v);
}

static int start_cm(struct vb_ep *v)
{
	int ret = -pthread_create(&v->cm_thread, NULL, cm_main, v);

	if (!ret)
		v->cm_started = 1;
	return ret;
}

/*
 * Sets up the queue pair, accepts (passive) or connects, and waits until
 * established, timeout_ms at most.
 */
static int establish(struct vb_ep *v, struct gdx_xport_ep *fe, int passive, int timeout_ms)
{
	struct rdma_conn_param p;
	int ret = setup_qp(v, fe);

	if (ret)
		return ret;
	conn_param(v, &p);
	if (passive ? rdma_accept(v->id, &p) : rdma_connect(v->id, &p))
		return -errno;
	ret = wait_event(v->ch, RDMA_CM_EVENT_ESTABLISHED, timeout_ms, NULL);
	if (!ret)
		ret = start_cm(v);
	return ret;
}

/*
 * The IPv4 address of the RDMA NIC nearest (by PCIe distance) to the GPU the
 * endpoint serves, so that rdma_cm binds there.  0 when there is no GPU on PCI,
 * no RDMA NIC, or the NIC's netdev has no IPv4 address.
 */
static int nearest_nic_addr(struct gdx_device *dev, struct sockaddr_in *out)
{
	struct gdx_device_props props;
	struct gdx_topo_dev nic = { .size = sizeof(nic) };
	struct gdx_topo *t;
	struct ifaddrs *ifa, *i;
	int gpu, n, link, found = 0;

	if (!dev || gdx_device_props(dev, &props) || !props.pci_bdf[0])
		return 0;
	if (gdx_topo_open(&t, NULL))
		return 0;
	gpu = gdx_topo_find(t, GDX_TOPO_GPU, props.pci_bdf);
	/* Active ports only, hardware before Soft-RoCE, then PCIe distance (as gdx check says). */
	n = gpu < 0 ? -1 : gdx_topo_rdma_nic(t, gpu, &link);
	if (n >= 0 && !gdx_topo_get(t, n, &nic) && nic.rdma && nic.netdev[0] &&
	    !getifaddrs(&ifa)) {
		for (i = ifa; i; i = i->ifa_next) {
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
			    !strcmp(i->ifa_name, nic.netdev)) {
				memcpy(out, i->ifa_addr, sizeof(*out));
				found = 1;
				GDX_INFO(SUBSYS, "%s: using %s (%s), %s from the GPU", props.pci_bdf,
					 nic.name, nic.netdev, gdx_topo_link_name(link));
				break;
			}
		}
		freeifaddrs(ifa);
	}
	gdx_topo_close(t);
	return found;
}

static int vb_listen(struct gdx_xport_listener *l, const char *hostport, void **priv,
		     char *bound, size_t bound_len)
{
	struct vb_listener *vl = calloc(1, sizeof(*vl));
	struct addrinfo *ai;
	struct sockaddr_in sin;
	char host[64];
	int ret;

	if (!vl)
		return -ENOMEM;
	ret = gdx_xport_resolve(hostport, AF_INET, 1, &ai);
	if (ret) {
		free(vl);
		return ret;
	}
	memcpy(&sin, ai->ai_addr, sizeof(sin));
	freeaddrinfo(ai);
	if (sin.sin_addr.s_addr == htonl(INADDR_ANY) && l->opts.dev) {
		struct sockaddr_in nic;
		uint16_t port = sin.sin_port;

		if (nearest_nic_addr(l->opts.dev, &nic)) {
			sin = nic;
			sin.sin_port = port;
		}
	}
	vl->ch = rdma_create_event_channel();
	if (!vl->ch || rdma_create_id(vl->ch, &vl->id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(vl->id, (struct sockaddr *)&sin) || rdma_listen(vl->id, 64)) {
		ret = -errno ? -errno : -ENODEV;
		if (vl->id)
			rdma_destroy_id(vl->id);
		if (vl->ch)
			rdma_destroy_event_channel(vl->ch);
		free(vl);
		return ret;
	}
	inet_ntop(AF_INET, &sin.sin_addr, host, sizeof(host));
	snprintf(bound, bound_len, "%s:%u", host, ntohs(rdma_get_src_port(vl->id)));
	*priv = vl;
	return 0;
}

static int vb_listener_fd(void *lpriv)
{
	return ((struct vb_listener *)lpriv)->ch->fd;
}

static void vb_listener_close(void *lpriv)
{
	struct vb_listener *vl = lpriv;

	rdma_destroy_id(vl->id);
	rdma_destroy_event_channel(vl->ch);
	free(vl);
}

/*
 * Waits timeout_ms (-1: forever) for a connection request and establishes it
 * within what is left of that, ACCEPT_EST_MS at least (a request that came
 * at the last moment still gets its round trip), opts.timeout_ms at most.
 */
#define ACCEPT_EST_MS 50
static int vb_accept(void *lpriv, struct gdx_xport_ep *fe, int timeout_ms, void **priv)
{
	struct vb_listener *vl = lpriv;
	struct rdma_cm_event *ev = NULL;
	uint64_t end = gdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int ret, est_ms = fe->opts.timeout_ms;
	struct vb_ep *v;

	ret = wait_event(vl->ch, RDMA_CM_EVENT_CONNECT_REQUEST, timeout_ms, &ev);
	if (ret)
		return ret;
	if (timeout_ms >= 0) {
		uint64_t now = gdx_now_ns();
		int left = now < end ? (int)((end - now) / 1000000) : 0;

		est_ms = GDX_MIN(est_ms, GDX_MAX(left, ACCEPT_EST_MS));
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		struct rdma_cm_id *id = ev->id;

		/* the request's id is ours to destroy: its later events would reach this channel */
		rdma_reject(id, NULL, 0);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(id);
		return -ENOMEM;
	}
	v->id = ev->id;
	rdma_ack_cm_event(ev);
	v->ch = rdma_create_event_channel();
	if (!v->ch || rdma_migrate_id(v->id, v->ch)) {
		ret = -errno;
		goto fail;
	}
	ret = establish(v, fe, 1, est_ms);
	if (ret)
		goto fail;
	*priv = v;
	return 0;
fail:
	if (v->id && !v->qp)
		rdma_reject(v->id, NULL, 0);
	vb_free(v);
	return ret;
}

static int vb_connect(struct gdx_xport_ep *fe, const char *hostport, void **priv)
{
	struct vb_ep *v = calloc(1, sizeof(*v));
	struct sockaddr_in src;
	struct addrinfo *ai;
	int ret, have_src;

	if (!v)
		return -ENOMEM;
	ret = gdx_xport_resolve(hostport, AF_INET, 0, &ai);
	if (ret) {
		free(v);
		return ret;
	}
	have_src = nearest_nic_addr(fe->opts.dev, &src);
	v->ch = rdma_create_event_channel();
	if (!v->ch || rdma_create_id(v->ch, &v->id, NULL, RDMA_PS_TCP)) {
		ret = -errno ? -errno : -ENODEV;
		goto fail;
	}
	if (rdma_resolve_addr(v->id, have_src ? (struct sockaddr *)&src : NULL, ai->ai_addr,
			      RESOLVE_MS)) {
		ret = -errno;
		goto fail;
	}
	ret = wait_event(v->ch, RDMA_CM_EVENT_ADDR_RESOLVED, RESOLVE_MS + 1000, NULL);
	if (ret)
		goto fail;
	if (rdma_resolve_route(v->id, RESOLVE_MS)) {
		ret = -errno;
		goto fail;
	}
	ret = wait_event(v->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, RESOLVE_MS + 1000, NULL);
	if (ret)
		goto fail;
	ret = establish(v, fe, 0, fe->opts.timeout_ms);
	if (ret)
		goto fail;
	freeaddrinfo(ai);
	GDX_DBG(SUBSYS, "connected to %s on %s, inline %u", hostport,
		ibv_get_device_name(v->id->verbs->device), v->max_inline);
	*priv = v;
	return 0;
fail:
	freeaddrinfo(ai);
	vb_free(v);
	return ret;
}

static void vb_disconnect(void *priv)
{
	struct vb_ep *v = priv;

	rdma_disconnect(v->id);
	vb_kill(v);
}

static void vb_destroy(void *priv)
{
	vb_free(priv);
}

/* ---- memory ------------------------------------------------------------------- */

static int peermem_loaded(void)
{
	return !access("/sys/module/nvidia_peermem", F_OK) ||
	       !access("/sys/module/nv_peer_mem", F_OK);
}

static int vb_mr_reg(void *priv, struct gdx_xport_region *r)
{
	/* An endpoint's or a shared receive queue's anchor's: both start with their PD. */
	struct ibv_pd *pd = *(struct ibv_pd **)priv;
	struct vb_reg *g = calloc(1, sizeof(*g));
	int acc = IBV_ACCESS_LOCAL_WRITE;

	if (!g)
		return -ENOMEM;
	g->dmabuf_fd = -1;
	if (r->access & GDX_XPORT_ACCESS_REMOTE_READ)
		acc |= IBV_ACCESS_REMOTE_READ;
	if (r->access & GDX_XPORT_ACCESS_REMOTE_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE;
	r->addr = (uint64_t)(uintptr_t)r->p;
	r->priv = g;
	if (r->kind == GDX_MEM_HOST || r->kind == GDX_MEM_PINNED) {
		g->mr = ibv_reg_mr(pd, r->p, r->len, acc);
		if (!g->mr) {
			int err = -errno;

			free(g);
			return err;
		}
		r->key = g->mr->rkey;
		r->path = GDX_XPORT_PATH_DIRECT;
		r->why = "the NIC DMAs host memory";
		return 0;
	}
	if (r->dev) {
		size_t pg = (size_t)sysconf(_SC_PAGESIZE);
		uintptr_t s = GDX_ALIGN_DOWN((uintptr_t)r->p, pg);
		uintptr_t e = GDX_ALIGN_UP((uintptr_t)r->p + r->len, pg);
		uint64_t off;

		if (!gdx_device_export_dmabuf(r->dev, (void *)s, e - s, &g->dmabuf_fd, &off)) {
			g->mr = ibv_reg_dmabuf_mr(pd, off + ((uintptr_t)r->p - s), r->len,
						  r->addr, g->dmabuf_fd, acc);
			if (g->mr) {
				r->key = g->mr->rkey;
				r->path = GDX_XPORT_PATH_DIRECT;
				r->why = "device memory registered through dma-buf";
				return 0;
			}
			GDX_DBG(SUBSYS, "ibv_reg_dmabuf_mr: %s", strerror(errno));
			close(g->dmabuf_fd);
			g->dmabuf_fd = -1;
		}
		if (peermem_loaded()) {
			g->mr = ibv_reg_mr(pd, r->p, r->len, acc);
			if (g->mr) {
				r->key = g->mr->rkey;
				r->path = GDX_XPORT_PATH_DIRECT;
				r->why = "device memory registered through nvidia_peermem";
				return 0;
			}
			GDX_DBG(SUBSYS, "ibv_reg_mr on device memory: %s", strerror(errno));
		}
	}
	if (r->access) {
		GDX_ERR(SUBSYS, "%s memory at %p cannot be exposed for one-sided access: "
			"no dma-buf export and no nvidia_peermem", gdx_mem_kind_name(r->kind), r->p);
		free(g);
		return -EOPNOTSUPP;
	}
	r->path = GDX_XPORT_PATH_BOUNCE;
	r->why = "no dma-buf export and no nvidia_peermem: staged through pinned memory";
	return 0;
}

static void vb_mr_dereg(void *priv, struct gdx_xport_region *r)
{
	struct vb_reg *g = r->priv;

	(void)priv;
	if (!g)
		return;
	if (g->mr)
		ibv_dereg_mr(g->mr);
	if (g->dmabuf_fd >= 0)
		close(g->dmabuf_fd);
	free(g);
}

/* ---- requests ------------------------------------------------------------------- */

/* Whether req is fenced and its data is copied into a bounce buffer when it goes. */
static int fenced_bounce(const struct gdx_xport_req *req)
{
	return (req->flags & GDX_XPORT_FENCE) && req->be[0] && req->op != GDX_XPORT_OP_READ;
}

/*
 * Hands send-side request req to the hardware, its data first into its bounce
 * buffer if it has one.  Lock held; 0 or a negative errno.
 */
static int post_send_wr(struct vb_ep *v, struct gdx_xport_req *req)
{
	struct ibv_sge sge = req_sge(req);
	struct ibv_send_wr wr = { .wr_id = (uintptr_t)req, .sg_list = &sge,
				  .num_sge = req->buf.len ? 1 : 0 }, *bad;
	int sig = !(req->flags & GDX_XPORT_UNSIGNALED) ||
		  v->since_signal + 1 >= (v->ring_size - 2) / 2;
	int ret;

	if (req->be[0] && req->op != GDX_XPORT_OP_READ) {
		ret = gdx_memcpy(req->buf.dev, req->be[0], req->buf.p, req->buf.len);
		if (ret)
			return ret;
	}
	switch (req->op) {
	case GDX_XPORT_OP_SEND: wr.opcode = IBV_WR_SEND; break;
	case GDX_XPORT_OP_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
	case GDX_XPORT_OP_WRITE_IMM:
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(req->imm);
		break;
	default: wr.opcode = IBV_WR_RDMA_READ; break;
	}
	if (req->op != GDX_XPORT_OP_SEND) {
		wr.wr.rdma.remote_addr = req->raddr;
		wr.wr.rdma.rkey = (uint32_t)req->key;
	}
	if (sig)
		wr.send_flags |= IBV_SEND_SIGNALED;
	if (req->flags & GDX_XPORT_FENCE)
		wr.send_flags |= IBV_SEND_FENCE;
	if (req->op != GDX_XPORT_OP_READ && req->buf.len && req->buf.len <= v->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	ret = ibv_post_send(v->qp, &wr, &bad);
	if (ret)
		return -ret;
	v->ring[(v->head + v->count) % v->ring_size] = req;
	v->count++;
	v->since_signal = sig ? 0 : v->since_signal + 1;
	v->reads += req->op == GDX_XPORT_OP_READ;
	return 0;
}

/*
 * Sends the held requests that may go now (vb_post): up to a fenced bounced
 * one while reads are still in flight.  One that fails to go completes with
 * its error.  Lock held.
 */
static void vb_release(struct vb_ep *v)
{
	while (v->nheld && !(fenced_bounce(v->held[v->held_head]) && v->reads)) {
		struct gdx_xport_req *r = v->held[v->held_head];
		int ret;

		v->held_head = (v->held_head + 1) % v->ring_size;
		v->nheld--;
		ret = post_send_wr(v, r);
		if (ret)
			finish(r, ret, 0, NULL);
	}
}

static int vb_post(void *priv, struct gdx_xport_req *req)
{
	struct vb_ep *v = priv;
	int ret;

	if (req->buf.len > UINT32_MAX)
		return -EMSGSIZE;
	if (req->buf.len && req->buf.path == GDX_XPORT_PATH_BOUNCE) {
		ret = bounce_get(v->pd, req);
		if (ret)
			return ret;
	}
	pthread_mutex_lock(&v->lock);
	if (v->dead) {
		pthread_mutex_unlock(&v->lock);
		bounce_put(req);
		return GDX_EDISCONNECTED;
	}
	if (req->op == GDX_XPORT_OP_RECV) {
		struct ibv_sge sge = req_sge(req);
		struct ibv_recv_wr wr = { .wr_id = (uintptr_t)req, .sg_list = &sge,
					  .num_sge = req->buf.len ? 1 : 0 }, *bad;

		ret = -ibv_post_recv(v->qp, &wr, &bad);
	} else if (v->nheld || (fenced_bounce(req) && v->reads)) {
		/*
		 * The NIC's fence waits for the reads before it, not for their
		 * copies out of bounce buffers, which are made as they complete:
		 * a fenced request whose data goes through a bounce buffer (the
		 * data an earlier read brings, maybe) is copied and handed over
		 * once the reads before it have completed (vb_release, from
		 * vb_progress), and what is posted after it waits behind it.
		 */
		/* the front end lets no more than sq_depth be outstanding */
		v->held[(v->held_head + v->nheld++) % v->ring_size] = req;
		ret = 0;
	} else {
		ret = post_send_wr(v, req);
	}
	pthread_mutex_unlock(&v->lock);
	if (ret) {
		bounce_put(req);
		return ret;
	}
	return 0;
}

const struct gdx_xport_ops gdx_xport_verbs_ops = {
	.scheme = "rdma",
	.listen = vb_listen,
	.listener_fd = vb_listener_fd,
	.accept = vb_accept,
	.listener_close = vb_listener_close,
	.connect = vb_connect,
	.disconnect = vb_disconnect,
	.destroy = vb_destroy,
	.mr_reg = vb_mr_reg,
	.mr_dereg = vb_mr_dereg,
	.post = vb_post,
	.srq_kick = vb_srq_kick,
	.srq_open = vb_srq_open,
	.srq_close = vb_srq_close,
	.srq_free = vb_srq_free,
	.progress = vb_progress,
	.arm = vb_arm,
	.event_fd = vb_event_fd,
};
