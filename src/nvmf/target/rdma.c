/* SPDX-License-Identifier: MIT */
/*
 * NVMe/RDMA target transport (the NVMe-oF RDMA transport binding).
 *
 * Reactor 0 owns the rdma_cm listeners.  A connect request is checked
 * against the queue limits (a bad one gets a CM reject with the binding's
 * status), then its cm_id migrates to the event channel of the reactor that
 * serves the queue's QID, which sets up the queue pair and accepts.  From
 * then on one reactor owns the queue: its CM events, its completion queue
 * (on the reactor's completion channel for that device) and its requests.
 *
 * A command arrives as a RECV of the 64-byte SQE plus in-capsule data.  The
 * receive is posted again as soon as the command is copied out of it.  Data
 * described by a keyed SGL moves by RDMA READ into the request's registered
 * buffer before the command runs (host to controller), or by RDMA WRITE from
 * it, posted unsignaled right ahead of the response SEND (controller to
 * host): the reliable connection delivers the WRITE before the SEND, so the
 * response's completion is the request's end.  Namespace memory (RAM, null)
 * is copied through that buffer rather than registered: a RAM namespace hands
 * pages back to the kernel on deallocate, which a registration would not see.
 *
 * Request buffers are counted per queue and in the target's total against
 * nvmf.target.conn_buf_max and buf_max by the helpers TCP uses too
 * (nvmf_bufs_*).  Over either, a command that needs one (keyed data either
 * way) waits, in order, holding its SQ slot and no buffer: the host can have
 * no more commands out than the queue has entries, which bounds what waits.
 * Commands under way go on and free theirs; the reactor starts waiting ones
 * at the end of the iteration whose completions freed buffers.  In-capsule
 * data is not held back: the receives bound it already.
 *
 * Nothing waits for the host's CPU to take data: a WRITE lands in its memory
 * and a READ is answered by its NIC, and the reliable connection retries
 * either a bounded number of times (retry_count) before the completion fails
 * and ends the queue.  What does wait on the host's software is a response
 * SEND when the host has no receive posted: receiver-not-ready is retried
 * without end (RNR retry 7, as hosts ask and nvmet-rdma accepts), and every
 * work request behind it on the queue pair waits too, buffers held, while the
 * host's commands (Keep Alive too) still come in.  A queue whose READs and
 * SENDs see no completion for nvmf.target.stall_timeout_ms is ended.
 *
 * A queue ends (the host disconnects, a completion fails, the host breaks the
 * protocol, keep-alive expires, the target stops) by rdma_disconnect, which
 * moves the queue pair to the error state, and one drain RECV and one drain
 * SEND posted behind everything else: once both come back flushed, no work
 * request of the queue is left, and once no request is held by a namespace
 * either, the reactor frees the queue at the end of its iteration.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/proto/rdma.h"
#include "nvmf/target/target_int.h"
#include "nvmf/target/transport.h"

#define SUBSYS "nvmf"
#define ADMIN_INLINE 4096	/* in-capsule data an admin queue takes (Connect data fits) */
#define STOP_DRAIN_MS 5000	/* how long stopping waits for queues to drain */
#define DRAIN_NS (2ull * 1000000000)	/* how long a queue's drain requests may take */
#define MAX_DEVS 8		/* RDMA devices a reactor serves */
#define LISTEN_BACKLOG 128

enum ev_kind { EV_LISTEN_CM, EV_CM, EV_CQ, EV_WAKE, EV_IOCTX };

struct ev {
	enum ev_kind kind;
};

/* What a work request's wr_id points at. */
enum wr_kind { WR_RECV, WR_READ, WR_WRITE, WR_SEND, WR_DRAIN_RECV, WR_DRAIN_SEND };

struct wr_ctx {
	enum wr_kind kind;
};

/* One protection domain per RDMA device, shared by every queue on it. */
struct rdma_dev {
	struct rdma_dev *next;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	unsigned refs;
	int max_rd_atom;	/* RDMA READs a queue pair may have in flight */
};

struct rdma_recv {
	struct wr_ctx ctx;
	uint8_t *buf;		/* SQE, then in-capsule data */
	struct ibv_sge sge;
	struct ibv_recv_wr wr;
};

enum rreq_state { RR_FREE, RR_WAIT_BUF, RR_DATA_IN, RR_EXEC, RR_RESPOND };

struct rdma_req {
	struct nvmf_req req;
	struct wr_ctx read_ctx;
	struct wr_ctx write_ctx;	/* unsignaled: completes only in error */
	struct wr_ctx send_ctx;
	struct rdma_queue *q;
	enum rreq_state state;
	enum gdx_nvme_xfer dir;
	struct gdx_rdma_sgl_info sgl;
	void *mapped;		/* namespace memory, copied through buf */
	void *buf;		/* registered, page aligned, grown on demand */
	uint32_t cap;
	struct ibv_mr *mr;
	struct gdx_nvme_cqe *rsp;	/* in the queue's registered responses */
	struct rdma_req *next_free;
	struct nvmf_buf_wait wait;	/* RR_WAIT_BUF: in the queue's wait list */
};

enum q_state { Q_LIVE, Q_DRAINING, Q_DEAD };

struct rdma_queue {
	struct gdx_nvmf_target *tgt;
	struct rdma_reactor *r;
	struct rdma_queue *next, *prev;
	struct rdma_cm_id *id;
	struct rdma_dev *dev;
	struct ibv_cq *cq;
	struct nvmf_sq sq;
	struct gdx_stats *sq_stats;
	enum q_state state;
	uint64_t ended_ns;
	bool drained_recv, drained_send;
	bool reaped;
	char peer[64];
	uint64_t born_ns;
	uint16_t depth;		/* SQ entries: receives posted, requests */
	uint32_t inline_max;	/* in-capsule data bytes a receive holds */
	uint8_t *recv_mem;
	struct ibv_mr *recv_mr;
	struct rdma_recv *recvs;
	struct gdx_nvme_cqe *rsps;
	struct ibv_mr *rsp_mr;
	struct rdma_req *reqs;
	struct rdma_req *free_reqs;
	unsigned nused;		/* requests not free: data, namespace or response outstanding */
	struct wr_ctx drain_recv, drain_send;
	struct nvmf_bufs bufs;	/* request buffers held, and the commands waiting for them */
	/* the stall timer: READs and SENDs posted and not back, and how many came back */
	unsigned nposted;
	uint64_t ncompleted, tick_completed;
	uint64_t stuck_ns;	/* when a tick first saw work posted and none back; 0: moving */
};

/* A completion channel of one device, on one reactor. */
struct rdma_cc {
	struct ev ev;
	struct ibv_comp_channel *cc;
	struct ibv_context *verbs;
};

/* A connect request on its way from reactor 0 to the queue's reactor. */
struct handoff {
	struct rdma_cm_id *id;
	struct nvmf_port *port;
	struct gdx_rdma_queue_req qr;
	uint8_t initiator_depth, responder_resources;
};

struct rdma_reactor {
	struct rdma_tgt *rt;
	unsigned id;
	pthread_t thread;
	bool started;
	int epfd;
	int wakefd;
	struct ev wake_ev, io_ev, cm_ev;
	struct rdma_event_channel *cm_ch;
	struct rdma_cc ccs[MAX_DEVS];
	unsigned ncc;
	struct nvmf_ioctx *ioctx;
	_Atomic bool stop;
	_Atomic bool aen;
	pthread_mutex_t lock;	/* handoffs */
	struct handoff *handoff;
	unsigned nhandoff, handoff_cap;
	struct rdma_queue *queues;
	bool polling;		/* inside a --poll-us window: completion queues left unarmed */
	struct rdma_queue **reap;
	unsigned nreap, reap_cap;
	struct nvmf_log_limit hold_log;
};

struct rdma_listener {
	struct rdma_cm_id *id;
	struct nvmf_port *port;
};

struct rdma_tgt {
	struct gdx_nvmf_target *t;
	struct rdma_reactor *reactors;
	unsigned nreactors;
	struct ev listen_ev;
	struct rdma_event_channel *listen_ch;	/* on reactor 0 */
	struct rdma_listener listeners[NVMF_MAX_PORTS];
	unsigned nlisteners;
	_Atomic unsigned next_reactor;
	pthread_mutex_t dev_lock;
	struct rdma_dev *devs;
};

static void queue_end(struct rdma_queue *q, const char *why);
static void req_done(struct nvmf_req *nr);

/* ---- devices --------------------------------------------------------------------- */

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
			d->max_rd_atom = ibv_query_device(verbs, &a) ? 1 :
					 GDX_MIN(a.max_qp_rd_atom, a.max_qp_init_rd_atom);
			if (!d->pd) {
				free(d);
				d = NULL;
			} else {
				d->next = rt->devs;
				rt->devs = d;
			}
		}
	}
	if (d)
		d->refs++;
	pthread_mutex_unlock(&rt->dev_lock);
	return d;
}

static void dev_put(struct rdma_tgt *rt, struct rdma_dev *d)
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

/* The reactor's completion channel for a device, made on first use. */
static struct ibv_comp_channel *reactor_cc(struct rdma_reactor *r, struct ibv_context *verbs)
{
	struct epoll_event e = { .events = EPOLLIN };
	struct rdma_cc *c;

	for (unsigned i = 0; i < r->ncc; i++)
		if (r->ccs[i].verbs == verbs)
			return r->ccs[i].cc;
	if (r->ncc == MAX_DEVS)
		return NULL;
	c = &r->ccs[r->ncc];
	c->cc = ibv_create_comp_channel(verbs);
	if (!c->cc)
		return NULL;
	fcntl(c->cc->fd, F_SETFL, fcntl(c->cc->fd, F_GETFL) | O_NONBLOCK);
	c->verbs = verbs;
	c->ev.kind = EV_CQ;
	e.data.ptr = &c->ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->cc->fd, &e)) {
		ibv_destroy_comp_channel(c->cc);
		return NULL;
	}
	r->ncc++;
	return c->cc;
}

/* ---- requests -------------------------------------------------------------------- */

static struct rdma_req *req_get(struct rdma_queue *q)
{
	struct rdma_req *rr = q->free_reqs;

	if (!rr)
		return NULL;
	q->free_reqs = rr->next_free;
	q->nused++;
	rr->state = RR_EXEC;
	rr->mapped = NULL;
	memset(&rr->req.cqe, 0, sizeof(rr->req.cqe));
	rr->req.buf = NULL;
	rr->req.len = 0;
	rr->req.in_capsule = false;
	rr->req.ns = NULL;
	rr->req.sq = &q->sq;
	rr->req.done = req_done;
	return rr;
}

static void reap_later(struct rdma_queue *q)
{
	struct rdma_reactor *r = q->r;

	if (q->reaped)
		return;
	if (r->nreap == r->reap_cap) {
		unsigned cap = r->reap_cap ? 2 * r->reap_cap : 16;
		struct rdma_queue **n = realloc(r->reap, cap * sizeof(*n));

		if (!n)
			return;	/* tried again on the next completion or tick */
		r->reap = n;
		r->reap_cap = cap;
	}
	q->reaped = true;
	r->reap[r->nreap++] = q;
}

/* Frees the queue once nothing of it is left in flight. */
static void queue_maybe_reap(struct rdma_queue *q)
{
	if (q->state != Q_LIVE && q->drained_recv && q->drained_send && !q->nused)
		reap_later(q);
}

static void req_buf_drop(struct rdma_req *rr)
{
	if (!rr->buf)
		return;
	nvmf_bufs_account(&rr->q->bufs, rr->cap, 0);
	ibv_dereg_mr(rr->mr);
	munmap(rr->buf, rr->cap);
	rr->buf = NULL;
	rr->mr = NULL;
	rr->cap = 0;
}

static void req_put(struct rdma_req *rr)
{
	struct rdma_queue *q = rr->q;

	rr->state = RR_FREE;
	rr->next_free = q->free_reqs;
	q->free_reqs = rr;
	q->nused--;
	/* over the target's budget, buffers are not kept for reuse */
	if (nvmf_target_buf_over(q->tgt))
		req_buf_drop(rr);
	queue_maybe_reap(q);
}

/*
 * A registered buffer of at least len bytes, page aligned for O_DIRECT
 * namespaces.  Mapped rather than allocated: a dropped buffer goes back to the
 * kernel at once, so the budget bounds what the process holds (from the heap,
 * freed buffers stayed resident and the peak grew with the churn).
 */
static int req_buf(struct rdma_req *rr, uint32_t len)
{
	if (rr->cap < len) {
		uint32_t cap = GDX_ALIGN_UP(GDX_MAX(len, 4096u), 4096u);
		struct ibv_mr *mr;
		void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			return -ENOMEM;
		mr = ibv_reg_mr(rr->q->dev->pd, p, cap, IBV_ACCESS_LOCAL_WRITE);
		if (!mr) {
			int err = errno ? -errno : -ENOMEM;

			munmap(p, cap);
			return err;
		}
		req_buf_drop(rr);
		rr->buf = p;
		rr->cap = cap;
		rr->mr = mr;
		nvmf_bufs_account(&rr->q->bufs, 0, cap);
	}
	rr->req.buf = rr->buf;
	return 0;
}

/* Frees the buffers free requests keep for reuse. */
static void queue_trim(struct rdma_queue *q)
{
	for (unsigned i = 0; i < q->depth; i++)
		if (q->reqs[i].state == RR_FREE)
			req_buf_drop(&q->reqs[i]);
}

/*
 * Whether rr's command may take a buffer now.  Over a limit, the buffers no
 * command uses go first: those free requests keep, and rr's own (a request
 * that waits holds none).
 */
static bool queue_fits(struct rdma_queue *q, struct rdma_req *rr)
{
	if (nvmf_bufs_fit(&q->bufs))
		return true;
	queue_trim(q);
	req_buf_drop(rr);
	return nvmf_bufs_fit(&q->bufs);
}

/* Over its share of buffers: the command waits, behind any that wait already, with none. */
static void req_wait(struct rdma_queue *q, struct rdma_req *rr)
{
	req_buf_drop(rr);
	rr->state = RR_WAIT_BUF;
	nvmf_bufs_wait(&q->bufs, &rr->wait, &q->r->hold_log);
}

/* Ends the waits of an ended queue: those commands never started. */
static void queue_unwait(struct rdma_queue *q)
{
	struct nvmf_buf_wait *w;

	while ((w = nvmf_bufs_pop(&q->bufs)))
		req_put(GDX_CONTAINER_OF(w, struct rdma_req, wait));
}

static int post_send(struct rdma_queue *q, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(q->id->qp, wr, &bad);

	if (ret)
		queue_end(q, "posting a work request failed");
	return ret;
}

/* Sends the response, behind an RDMA WRITE of the data for a read. */
static void respond(struct rdma_queue *q, struct rdma_req *rr, uint32_t c2h)
{
	struct ibv_sge data = { (uintptr_t)rr->buf, c2h, rr->mr ? rr->mr->lkey : 0 };
	struct ibv_sge rsp = { (uintptr_t)rr->rsp, sizeof(*rr->rsp), q->rsp_mr->lkey };
	struct ibv_send_wr write = { 0 }, send = { 0 };

	memcpy(rr->rsp, &rr->req.cqe, sizeof(*rr->rsp));
	rr->state = RR_RESPOND;
	send.wr_id = (uintptr_t)&rr->send_ctx;
	send.sg_list = &rsp;
	send.num_sge = 1;
	send.send_flags = IBV_SEND_SIGNALED;
	if (rr->sgl.kind == GDX_RDMA_DATA_KEYED && rr->sgl.invalidate) {
		send.opcode = IBV_WR_SEND_WITH_INV;
		send.invalidate_rkey = rr->sgl.key;
	} else {
		send.opcode = IBV_WR_SEND;
	}
	if (c2h) {
		write.wr_id = (uintptr_t)&rr->write_ctx;
		write.opcode = IBV_WR_RDMA_WRITE;
		write.sg_list = &data;
		write.num_sge = 1;
		write.wr.rdma.remote_addr = rr->sgl.addr;
		write.wr.rdma.rkey = rr->sgl.key;
		write.next = &send;
		gdx_counter_add(&q->sq.ctr[SQ_CTR_BYTES_OUT], c2h);
	}
	if (post_send(q, c2h ? &write : &send))
		req_put(rr);
	else
		q->nposted++;
}

static void req_done(struct nvmf_req *nr)
{
	struct rdma_req *rr = GDX_CONTAINER_OF(nr, struct rdma_req, req);
	struct rdma_queue *q = rr->q;
	uint32_t c2h = nr->cqe.status ? 0 : nvmf_req_c2h_len(nr);

	if (q->state != Q_LIVE) {
		req_put(rr);
		return;
	}
	/* the SGL bounds what the host offered; data only ever goes to a keyed block */
	if (rr->sgl.kind != GDX_RDMA_DATA_KEYED)
		c2h = 0;
	c2h = GDX_MIN(c2h, rr->sgl.length);
	if (c2h && rr->mapped)
		memcpy(rr->buf, rr->mapped, c2h);
	respond(q, rr, c2h);
}

/* The command's data is in place: run it. */
static void req_exec(struct rdma_req *rr)
{
	if (rr->mapped && rr->dir == GDX_NVME_XFER_H2C)
		memcpy(rr->mapped, rr->buf, rr->req.len);
	rr->state = RR_EXEC;
	nvmf_req_exec(&rr->req);
}

static void req_fetch(struct rdma_queue *q, struct rdma_req *rr)
{
	struct ibv_sge sge = { (uintptr_t)rr->buf, rr->req.len, rr->mr->lkey };
	struct ibv_send_wr wr = { 0 };

	rr->state = RR_DATA_IN;
	wr.wr_id = (uintptr_t)&rr->read_ctx;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = rr->sgl.addr;
	wr.wr.rdma.rkey = rr->sgl.key;
	gdx_counter_add(&q->sq.ctr[SQ_CTR_BYTES_IN], rr->req.len);
	if (post_send(q, &wr))
		req_put(rr);
	else
		q->nposted++;
}

/* The command's buffer is there: fetch its data or run it. */
static void req_start(struct rdma_queue *q, struct rdma_req *rr)
{
	if (rr->sgl.kind == GDX_RDMA_DATA_KEYED && rr->dir == GDX_NVME_XFER_H2C)
		req_fetch(q, rr);
	else
		req_exec(rr);
}

static int post_recv(struct rdma_queue *q, struct rdma_recv *rv)
{
	struct ibv_recv_wr *bad;

	return ibv_post_recv(q->id->qp, &rv->wr, &bad);
}

static void handle_capsule(struct rdma_queue *q, struct rdma_recv *rv, uint32_t byte_len)
{
	struct rdma_req *rr;
	uint16_t st;

	if (byte_len < sizeof(struct gdx_nvme_sqe)) {
		queue_end(q, "a capsule shorter than a command");
		return;
	}
	rr = req_get(q);
	if (!rr) {
		queue_end(q, "more commands than the queue holds");
		return;
	}
	memcpy(&rr->req.cmd, rv->buf, sizeof(rr->req.cmd));
	st = gdx_rdma_capsule_check(&rr->req.cmd, byte_len, q->inline_max, q->tgt->core.max_io,
				    &rr->sgl);
	rr->req.len = rr->sgl.length;
	rr->req.in_capsule = rr->sgl.kind == GDX_RDMA_DATA_INLINE;
	rr->dir = gdx_nvmf_cmd_xfer(&rr->req.cmd);
	if (!st)
		st = nvmf_req_prep(&rr->req);
	if (!st && rr->req.len) {
		rr->mapped = rr->req.buf;
		if (rr->sgl.kind == GDX_RDMA_DATA_INLINE) {
			if (req_buf(rr, rr->req.len))
				st = GDX_NVME_SC_INTERNAL;
			else
				memcpy(rr->buf, rv->buf + sizeof(struct gdx_nvme_sqe), rr->req.len);
		}
	}
	/* the command is out of the receive: it can take the next one */
	if (post_recv(q, rv)) {
		queue_end(q, "posting a receive failed");
		req_put(rr);
		return;
	}
	if (st) {
		nvmf_req_complete(&rr->req, st);
		return;
	}
	if (rr->req.len && rr->sgl.kind == GDX_RDMA_DATA_KEYED) {
		if (q->bufs.wait_head || !queue_fits(q, rr)) {
			req_wait(q, rr);
			return;
		}
		if (req_buf(rr, rr->req.len)) {
			nvmf_req_complete(&rr->req, GDX_NVME_SC_INTERNAL);
			return;
		}
	}
	req_start(q, rr);
}

/* Buffers went: start the commands that waited for them, in order, while they fit. */
static void queue_unblock(struct rdma_queue *q)
{
	while (q->bufs.wait_head && q->state == Q_LIVE) {
		struct rdma_req *rr = GDX_CONTAINER_OF(q->bufs.wait_head, struct rdma_req, wait);

		if (!queue_fits(q, rr))
			break;
		nvmf_bufs_pop(&q->bufs);
		rr->state = RR_EXEC;
		if (req_buf(rr, rr->req.len))
			nvmf_req_complete(&rr->req, GDX_NVME_SC_INTERNAL);
		else
			req_start(q, rr);
	}
}

/* ---- completions ------------------------------------------------------------------- */

static void handle_wc(struct rdma_queue *q, const struct ibv_wc *wc)
{
	struct wr_ctx *ctx = (struct wr_ctx *)(uintptr_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR && q->state == Q_LIVE) {
		char why[96];

		snprintf(why, sizeof(why), "%s (opcode %d)", ibv_wc_status_str(wc->status),
			 (int)wc->opcode);
		queue_end(q, why);
	}
	switch (ctx->kind) {
	case WR_RECV:
		if (wc->status == IBV_WC_SUCCESS && q->state == Q_LIVE)
			handle_capsule(q, GDX_CONTAINER_OF(ctx, struct rdma_recv, ctx), wc->byte_len);
		break;
	case WR_READ: {
		struct rdma_req *rr = GDX_CONTAINER_OF(ctx, struct rdma_req, read_ctx);

		q->nposted--;
		q->ncompleted++;
		if (wc->status == IBV_WC_SUCCESS && q->state == Q_LIVE)
			req_exec(rr);
		else
			req_put(rr);
		break;
	}
	case WR_WRITE:
		break;	/* a failed WRITE ended the queue above; its SEND comes back flushed */
	case WR_SEND:
		q->nposted--;
		q->ncompleted++;
		req_put(GDX_CONTAINER_OF(ctx, struct rdma_req, send_ctx));
		break;
	case WR_DRAIN_RECV:
		q->drained_recv = true;
		queue_maybe_reap(q);
		break;
	case WR_DRAIN_SEND:
		q->drained_send = true;
		queue_maybe_reap(q);
		break;
	}
}

/* Handles what the queue's completion queue holds; how many completions. */
static unsigned poll_cq(struct rdma_queue *q)
{
	struct ibv_wc wc[32];
	unsigned total = 0;
	int n;

	do {
		n = ibv_poll_cq(q->cq, (int)GDX_ARRAY_SIZE(wc), wc);
		for (int i = 0; i < n; i++)
			handle_wc(q, &wc[i]);
		total += n > 0 ? (unsigned)n : 0;
	} while (n == (int)GDX_ARRAY_SIZE(wc));
	return total;
}

/* Asks for an event at the next completion, then looks once more: none is missed. */
static void arm_cq(struct rdma_queue *q)
{
	if (!q->reaped && !ibv_req_notify_cq(q->cq, 0))
		poll_cq(q);
}

static void cq_events(struct rdma_reactor *r, struct rdma_cc *c)
{
	struct ibv_cq *cq;
	void *ctx;

	while (!ibv_get_cq_event(c->cc, &cq, &ctx)) {
		struct rdma_queue *q = ctx;

		ibv_ack_cq_events(cq, 1);
		if (q->reaped)
			continue;
		poll_cq(q);
		/* a polling reactor looks at every queue each iteration: no event needed */
		if (!r->polling)
			arm_cq(q);
	}
}

/* ---- queues ------------------------------------------------------------------------ */

static void queue_free(struct rdma_queue *q)
{
	struct rdma_reactor *r = q->r;

	if (q->prev)
		q->prev->next = q->next;
	else if (r->queues == q)
		r->queues = q->next;
	if (q->next)
		q->next->prev = q->prev;
	if (q->id && q->id->qp)
		rdma_destroy_qp(q->id);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	for (unsigned i = 0; q->reqs && i < q->depth; i++)
		req_buf_drop(&q->reqs[i]);
	if (q->recv_mr)
		ibv_dereg_mr(q->recv_mr);
	if (q->rsp_mr)
		ibv_dereg_mr(q->rsp_mr);
	free(q->recv_mem);
	free(q->recvs);
	free(q->rsps);
	free(q->reqs);
	gdx_stats_destroy(q->sq_stats);
	dev_put(r->rt, q->dev);
	if (q->id)
		rdma_destroy_id(q->id);
	atomic_fetch_sub(&q->tgt->nconns, 1);
	free(q);
}

/*
 * Ends a queue: the controller forgets it at once; the queue pair goes to
 * the error state and its work requests come back flushed behind two drain
 * requests; the memory goes once they and the namespace's requests are back.
 */
static void queue_end(struct rdma_queue *q, const char *why)
{
	struct ibv_recv_wr rwr = { .wr_id = (uintptr_t)&q->drain_recv }, *rbad;
	struct ibv_send_wr swr = { .wr_id = (uintptr_t)&q->drain_send }, *sbad;

	if (q->state != Q_LIVE)
		return;
	q->state = Q_DRAINING;
	q->ended_ns = gdx_now_ns();
	if (why)
		GDX_INFO(SUBSYS, "%s qid %u: queue ends (%s)", q->peer, q->sq.qid, why);
	nvmf_sq_destroy(&q->sq);
	queue_unwait(q);
	/* held AERs are with no namespace: they end with the queue */
	for (unsigned i = 0; i < q->depth; i++) {
		struct rdma_req *rr = &q->reqs[i];

		if (rr->state == RR_EXEC && rr->req.cmd.opc == GDX_NVME_ADM_ASYNC_EVENT &&
		    q->sq.qid == 0 && !rr->req.ns)
			req_put(rr);
	}
	rdma_disconnect(q->id);
	/* rdma_disconnect left the queue pair alone where it never got connected */
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(q->id->qp, &a, IBV_QP_STATE);
	}
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_recv(q->id->qp, &rwr, &rbad))
		q->drained_recv = true;
	if (ibv_post_send(q->id->qp, &swr, &sbad))
		q->drained_send = true;
	if (q->drained_recv && q->drained_send) {
		/* nothing could be posted: nothing is in flight that the device still owns */
		GDX_WARN(SUBSYS, "%s qid %u: could not post drain requests", q->peer, q->sq.qid);
	}
	queue_maybe_reap(q);
}

static void aen_kick(void *handle);

static void reject(struct rdma_cm_id *id, uint16_t sts)
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

/* Sets up the queue pair for a checked connect request and accepts it. */
static void queue_accept(struct rdma_reactor *r, const struct handoff *h)
{
	static const char *const names[] = { "commands", "errors", "bytes_in", "bytes_out" };
	struct gdx_nvmf_target *t = r->rt->t;
	struct rdma_queue *q = calloc(1, sizeof(*q));
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param p = { 0 };
	struct gdx_rdma_cm_rep rep;
	struct ibv_comp_channel *cc;
	size_t slot;

	if (!q) {
		reject(h->id, GDX_RDMA_CM_NO_RSC);
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
	cc = q->dev ? reactor_cc(r, q->id->verbs) : NULL;
	if (!cc)
		goto no_rsc;
	/* per request: one READ or one WRITE, and the response; a receive each */
	q->cq = ibv_create_cq(q->id->verbs, 3 * q->depth + 2, q, cc, 0);
	if (!q->cq || ibv_req_notify_cq(q->cq, 0))
		goto no_rsc;
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = q->cq;
	qa.recv_cq = q->cq;
	qa.cap.max_send_wr = 2u * q->depth + 1;
	qa.cap.max_recv_wr = q->depth + 1u;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(q->id, q->dev->pd, &qa))
		goto no_rsc;

	slot = sizeof(struct gdx_nvme_sqe) + q->inline_max;
	q->recv_mem = aligned_alloc(4096, GDX_ALIGN_UP(slot * q->depth, 4096u));
	q->recvs = calloc(q->depth, sizeof(*q->recvs));
	q->rsps = calloc(q->depth, sizeof(*q->rsps));
	q->reqs = calloc(q->depth, sizeof(*q->reqs));
	if (!q->recv_mem || !q->recvs || !q->rsps || !q->reqs)
		goto no_rsc;
	q->recv_mr = ibv_reg_mr(q->dev->pd, q->recv_mem, slot * q->depth, IBV_ACCESS_LOCAL_WRITE);
	q->rsp_mr = ibv_reg_mr(q->dev->pd, q->rsps, q->depth * sizeof(*q->rsps), 0);
	if (!q->recv_mr || !q->rsp_mr)
		goto no_rsc;
	for (unsigned i = 0; i < q->depth; i++) {
		struct rdma_recv *rv = &q->recvs[i];
		struct rdma_req *rr = &q->reqs[i];

		rv->ctx.kind = WR_RECV;
		rv->buf = q->recv_mem + i * slot;
		rv->sge = (struct ibv_sge){ (uintptr_t)rv->buf, (uint32_t)slot, q->recv_mr->lkey };
		rv->wr = (struct ibv_recv_wr){ .wr_id = (uintptr_t)&rv->ctx, .sg_list = &rv->sge,
					       .num_sge = 1 };
		if (post_recv(q, rv))
			goto no_rsc;
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
		reap_later(q);
		return;
	}
	GDX_DBG(SUBSYS, "%s: qid %u accepted on reactor %u, %u entries", q->peer, h->qr.qid, r->id,
		q->depth);
	return;
no_rsc:
	GDX_WARN(SUBSYS, "%s qid %u: no resources for the queue (%s)", q->peer, h->qr.qid,
		 strerror(errno));
	reject(q->id, GDX_RDMA_CM_NO_RSC);
	q->state = Q_DEAD;
	q->drained_recv = q->drained_send = true;
	reap_later(q);
}

/* ---- connection manager ---------------------------------------------------------------- */

static void reactor_wake(struct rdma_reactor *r)
{
	uint64_t one = 1;

	if (write(r->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		GDX_WARN(SUBSYS, "rdma reactor %u wake: %s", r->id, strerror(errno));
}

static void aen_kick(void *handle)
{
	struct rdma_queue *q = handle;

	atomic_store(&q->r->aen, true);
	reactor_wake(q->r);
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
		reject(ev->id, sts);
		rdma_ack_cm_event(ev);
		rdma_destroy_id(h.id);
		return;
	}
	h.initiator_depth = cp->initiator_depth;
	h.responder_resources = cp->responder_resources;
	rdma_ack_cm_event(ev);
	/* I/O queue N on reactor (N-1) % reactors, as the TCP transport does */
	to = &rt->reactors[h.qr.qid ? (h.qr.qid - 1u) % rt->nreactors :
				      atomic_fetch_add(&rt->next_reactor, 1) % rt->nreactors];
	if (rdma_migrate_id(h.id, to->cm_ch)) {
		peer_name(h.id, peer, sizeof(peer));
		GDX_WARN(SUBSYS, "%s: cannot move the connection to its reactor: %s", peer,
			 strerror(errno));
		reject(h.id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(h.id);
		return;
	}
	pthread_mutex_lock(&to->lock);
	if (to->nhandoff == to->handoff_cap) {
		unsigned cap = to->handoff_cap ? 2 * to->handoff_cap : 16;
		struct handoff *n = realloc(to->handoff, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&to->lock);
			reject(h.id, GDX_RDMA_CM_NO_RSC);
			rdma_destroy_id(h.id);
			return;
		}
		to->handoff = n;
		to->handoff_cap = cap;
	}
	to->handoff[to->nhandoff++] = h;
	pthread_mutex_unlock(&to->lock);
	reactor_wake(to);
}

static void listen_events(struct rdma_tgt *rt)
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

static void queue_events(struct rdma_reactor *r)
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
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			queue_end(q, "host disconnected");
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			queue_end(q, "device removed");
			break;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			queue_end(q, rdma_event_str(type));
			break;
		default:
			break;
		}
	}
}

static void take_handoffs(struct rdma_reactor *r)
{
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nhandoff; i++)
		queue_accept(r, &r->handoff[i]);
	r->nhandoff = 0;
	pthread_mutex_unlock(&r->lock);
}

static void deliver_aens(struct rdma_reactor *r)
{
	if (!atomic_exchange(&r->aen, false))
		return;
	for (struct rdma_queue *q = r->queues; q; q = q->next)
		if (q->state == Q_LIVE && q->sq.ctrl && q->sq.qid == 0)
			nvmf_ctrl_aen_deliver(&q->sq);
}

/* Whether a namespace or an AER still holds one of the queue's requests. */
static bool queue_held(const struct rdma_queue *q)
{
	for (unsigned i = 0; i < q->depth; i++)
		if (q->reqs[i].state == RR_EXEC)
			return true;
	return false;
}

/*
 * Queues whose drain requests have not come back in time.  Some devices
 * (rdma_rxe of Linux 6.1) do not flush work requests posted once the queue
 * pair is in the error state.  Destroying the queue pair discards what it
 * still has, and its completion queue goes with it, so only requests a
 * namespace holds keep such a queue.
 */
static void reap_overdue(struct rdma_reactor *r, uint64_t now)
{
	for (struct rdma_queue *q = r->queues; q; q = q->next) {
		if (q->state != Q_DRAINING || q->reaped || now - q->ended_ns < DRAIN_NS ||
		    queue_held(q))
			continue;
		GDX_DBG(SUBSYS, "%s qid %u: drain requests not back after %llu ms, freed", q->peer,
			q->sq.qid, DRAIN_NS / 1000000);
		reap_later(q);
	}
}

/*
 * Whether the queue's READs and SENDs have seen no completion for
 * nvmf.target.stall_timeout_ms, as far as ticks a second apart can tell.
 */
static bool queue_stalled(struct rdma_queue *q, uint64_t now)
{
	if (!q->nposted || q->ncompleted != q->tick_completed) {
		q->tick_completed = q->ncompleted;
		q->stuck_ns = 0;
		return false;
	}
	if (!q->stuck_ns)
		q->stuck_ns = now;
	return now - q->stuck_ns >= q->tgt->stall_ns;
}

/*
 * Once a second: stalled queues, keep-alive expiry, queues that never sent
 * Connect, overdue drains; over the target's budget, buffers kept for reuse go.
 */
static void tick(struct rdma_reactor *r)
{
	uint64_t now = gdx_now_ns();
	bool over = nvmf_target_buf_over(r->rt->t);

	reap_overdue(r, now);
	for (struct rdma_queue *q = r->queues; q; q = q->next) {
		if (q->state != Q_LIVE)
			continue;
		if (queue_stalled(q, now)) {
			char why[128];

			snprintf(why, sizeof(why), "%u READ/SEND work requests not completed by the host for %"
				 PRIu64 " ms: nvmf.target.stall_timeout_ms", q->nposted,
				 (now - q->stuck_ns) / 1000000);
			gdx_counter_add(&r->rt->t->ctr[TGT_CTR_STALLS], 1);
			queue_end(q, why);
			continue;
		}
		if (over)
			queue_trim(q);
		if (q->sq.ctrl) {
			nvmf_target_sq_stats(&q->sq, &q->sq_stats);
			if (nvmf_sq_expired(&q->sq, now))
				queue_end(q, "controller failed or keep-alive expired");
		} else if (now - q->born_ns > r->rt->t->handshake_ns) {
			char why[64];

			snprintf(why, sizeof(why), "no Connect within %" PRIu64 " ms",
				 r->rt->t->handshake_ns / 1000000);
			queue_end(q, why);
		}
	}
}

static void reap(struct rdma_reactor *r)
{
	for (unsigned i = 0; i < r->nreap; i++)
		queue_free(r->reap[i]);
	r->nreap = 0;
}

/*
 * Starts what waits for buffers where they fit now: after each iteration for
 * the buffers its completions freed, and after each tick for those other
 * reactors freed meanwhile.
 */
static void unblock_all(struct rdma_reactor *r)
{
	for (struct rdma_queue *q = r->queues; q; q = q->next)
		if (q->bufs.wait_head)
			queue_unblock(q);
}

/* Serves what epoll reports within timeout_ms; how many events there were. */
static int handle_events(struct rdma_reactor *r, int timeout_ms)
{
	struct epoll_event evs[32];
	int n = epoll_wait(r->epfd, evs, (int)GDX_ARRAY_SIZE(evs), timeout_ms);

	for (int i = 0; i < n; i++) {
		struct ev *ev = evs[i].data.ptr;

		switch (ev->kind) {
		case EV_LISTEN_CM:
			listen_events(r->rt);
			break;
		case EV_CM:
			queue_events(r);
			break;
		case EV_CQ:
			cq_events(r, GDX_CONTAINER_OF(ev, struct rdma_cc, ev));
			break;
		case EV_WAKE: {
			uint64_t v;

			if (read(r->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				GDX_WARN(SUBSYS, "rdma wake read: %s", strerror(errno));
			take_handoffs(r);
			deliver_aens(r);
			break;
		}
		case EV_IOCTX:
			nvmf_ioctx_reap(r->ioctx);
			break;
		}
	}
	unblock_all(r);
	if (r->ioctx)
		nvmf_ioctx_flush(r->ioctx);
	reap(r);
	return n;
}

/* Polls every queue's completion queue; whether any had completions. */
static bool poll_queues(struct rdma_reactor *r)
{
	unsigned n = 0;

	for (struct rdma_queue *q = r->queues; q; q = q->next)
		if (!q->reaped)
			n += poll_cq(q);
	return n > 0;
}

/* Ends every queue and waits, bounded, for them to drain; frees what is left. */
static void reactor_drain(struct rdma_reactor *r)
{
	uint64_t deadline = gdx_now_ns() + STOP_DRAIN_MS * 1000000ull;
	struct rdma_tgt *rt = r->rt;

	/* no new queues: reactor 0 owns the listeners */
	if (r->id == 0) {
		epoll_ctl(r->epfd, EPOLL_CTL_DEL, rt->listen_ch->fd, NULL);
		for (unsigned i = 0; i < rt->nlisteners; i++)
			rdma_destroy_id(rt->listeners[i].id);
		rt->nlisteners = 0;
	}
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nhandoff; i++) {
		reject(r->handoff[i].id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(r->handoff[i].id);
	}
	r->nhandoff = 0;
	pthread_mutex_unlock(&r->lock);
	for (struct rdma_queue *q = r->queues; q; q = q->next)
		queue_end(q, "target stopping");
	while (r->queues && gdx_now_ns() < deadline) {
		poll_queues(r);		/* completion queues a polling reactor left unarmed */
		handle_events(r, 10);
		reap_overdue(r, gdx_now_ns());
		reap(r);
	}
	while (r->queues) {
		struct rdma_queue *q = r->queues;

		GDX_WARN(SUBSYS, "%s qid %u: a namespace never completed a request", q->peer,
			 q->sq.qid);
		queue_free(q);
	}
}

/*
 * A reactor sleeps in epoll_wait until a completion channel, the CM or its
 * wake-up fires.  With --poll-us it keeps polling for that long after each
 * event: it reads the completion queues itself and leaves them unarmed, so a
 * command costs no event read, no re-arm and no wake-up (each a system call,
 * or an emulated device's trap); it arms them all again before it sleeps.
 */
static void *reactor_main(void *arg)
{
	struct rdma_reactor *r = arg;
	uint64_t next_tick = gdx_now_ns() + 1000000000ull, last_event = 0;
	uint64_t poll_ns = r->rt->t->poll_ns;

	while (!atomic_load(&r->stop)) {
		uint64_t now = gdx_now_ns();
		int timeout = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000) + 1;

		if (now - last_event < poll_ns) {
			r->polling = true;
			timeout = 0;
			if (poll_queues(r))
				last_event = now;
		} else if (r->polling) {
			r->polling = false;
			for (struct rdma_queue *q = r->queues; q; q = q->next)
				arm_cq(q);
		}
		if (handle_events(r, timeout) > 0)
			last_event = gdx_now_ns();
		if (gdx_now_ns() >= next_tick) {
			tick(r);
			unblock_all(r);
			reap(r);
			next_tick = gdx_now_ns() + 1000000000ull;
		}
	}
	reactor_drain(r);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------------- */

static int epoll_add(int epfd, int fd, struct ev *ev)
{
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = ev };

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

static int reactor_init(struct rdma_tgt *rt, struct rdma_reactor *r, unsigned id)
{
	int ret;

	r->rt = rt;
	r->id = id;
	r->wake_ev.kind = EV_WAKE;
	r->io_ev.kind = EV_IOCTX;
	r->cm_ev.kind = EV_CM;
	pthread_mutex_init(&r->lock, NULL);
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->cm_ch = rdma_create_event_channel();
	if (r->epfd < 0 || r->wakefd < 0 || !r->cm_ch)
		return -errno;
	ret = epoll_add(r->epfd, r->wakefd, &r->wake_ev);
	if (!ret)
		ret = epoll_add(r->epfd, r->cm_ch->fd, &r->cm_ev);
	if (ret)
		return ret;
	if (nvmf_ioctx_create(&r->ioctx)) {
		GDX_WARN(SUBSYS, "rdma reactor %u: no io_uring: file namespaces do synchronous I/O",
			 id);
		r->ioctx = NULL;
		return 0;
	}
	return epoll_add(r->epfd, nvmf_ioctx_fd(r->ioctx), &r->io_ev);
}

static void reactor_fini(struct rdma_reactor *r)
{
	/* connect requests handed over after the reactor stopped */
	for (unsigned i = 0; i < r->nhandoff; i++) {
		reject(r->handoff[i].id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(r->handoff[i].id);
	}
	for (unsigned i = 0; i < r->ncc; i++)
		ibv_destroy_comp_channel(r->ccs[i].cc);
	if (r->cm_ch)
		rdma_destroy_event_channel(r->cm_ch);
	nvmf_ioctx_destroy(r->ioctx);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->wakefd >= 0)
		close(r->wakefd);
	free(r->handoff);
	free(r->reap);
	pthread_mutex_destroy(&r->lock);
}

static int listen_on(struct rdma_tgt *rt, struct nvmf_port *p, int *bound)
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

static void rdma_tgt_free(struct rdma_tgt *rt)
{
	for (unsigned i = 0; i < rt->nlisteners; i++)
		rdma_destroy_id(rt->listeners[i].id);
	for (unsigned i = 0; rt->reactors && i < rt->nreactors; i++)
		reactor_fini(&rt->reactors[i]);
	if (rt->listen_ch)
		rdma_destroy_event_channel(rt->listen_ch);
	free(rt->reactors);
	pthread_mutex_destroy(&rt->dev_lock);
	free(rt);
}

static int nvmf_rdma_start(struct gdx_nvmf_target *t)
{
	struct rdma_tgt *rt;
	int ret;

	if (!nvmf_target_nports(t, GDX_NVMF_TRTYPE_RDMA))
		return 0;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->t = t;
	pthread_mutex_init(&rt->dev_lock, NULL);
	rt->nreactors = t->nreactors ? t->nreactors : 1;
	rt->reactors = calloc(rt->nreactors, sizeof(*rt->reactors));
	rt->listen_ch = rdma_create_event_channel();
	if (!rt->reactors || !rt->listen_ch) {
		ret = rt->reactors ? -errno : -ENOMEM;
		GDX_ERR(SUBSYS, "rdma: %s (are the RDMA modules loaded?)", gdx_strerror(ret));
		goto fail;
	}
	for (unsigned i = 0; i < rt->nreactors; i++)
		rt->reactors[i].epfd = rt->reactors[i].wakefd = -1;
	for (unsigned i = 0; i < rt->nreactors; i++) {
		ret = reactor_init(rt, &rt->reactors[i], i);
		if (ret)
			goto fail;
	}
	rt->listen_ev.kind = EV_LISTEN_CM;
	ret = epoll_add(rt->reactors[0].epfd, rt->listen_ch->fd, &rt->listen_ev);
	if (ret)
		goto fail;
	for (unsigned i = 0; i < t->core.nports; i++) {
		if (t->core.ports[i].trtype != GDX_NVMF_TRTYPE_RDMA)
			continue;
		ret = listen_on(rt, &t->core.ports[i], &t->bound_port[i]);
		if (ret)
			goto fail;
	}
	for (unsigned i = 0; i < rt->nreactors; i++) {
		struct rdma_reactor *r = &rt->reactors[i];
		char name[16];

		snprintf(name, sizeof(name), "gdx-nvmf-rdma%u", i % 100u);
		ret = nvmf_target_reactor_thread(&r->thread, nvmf_target_reactor_cpu(t, i),
						 reactor_main, r, name);
		if (ret) {
			for (unsigned j = 0; j < i; j++) {
				atomic_store(&rt->reactors[j].stop, true);
				reactor_wake(&rt->reactors[j]);
				pthread_join(rt->reactors[j].thread, NULL);
			}
			goto fail;
		}
	}
	t->rdma = rt;
	return 0;
fail:
	rdma_tgt_free(rt);
	return ret;
}

static void nvmf_rdma_stop(struct gdx_nvmf_target *t)
{
	struct rdma_tgt *rt = t->rdma;

	if (!rt)
		return;
	for (unsigned i = 0; i < rt->nreactors; i++) {
		atomic_store(&rt->reactors[i].stop, true);
		reactor_wake(&rt->reactors[i]);
	}
	for (unsigned i = 0; i < rt->nreactors; i++)
		pthread_join(rt->reactors[i].thread, NULL);
	rdma_tgt_free(rt);
	t->rdma = NULL;
}

const struct nvmf_transport_ops nvmf_rdma_ops = {
	.name = "rdma",
	.trtype = GDX_NVMF_TRTYPE_RDMA,
	.start = nvmf_rdma_start,
	.stop = nvmf_rdma_stop,
};
