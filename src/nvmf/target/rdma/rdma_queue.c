/* SPDX-License-Identifier: MIT */
/*
 * NVMe/RDMA target: a queue's data path.  Requests and their registered
 * buffers (within the target's budget, nvmf_bufs), commands out of receives,
 * data by RDMA READ and WRITE, responses by SEND, completions, and a queue's
 * end: disconnect, drain, free.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/target/rdma/rdma_int.h"

static void req_done(struct nvmf_req *nr);

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

void nvmf_rdma_reap_later(struct rdma_queue *q)
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

void nvmf_rdma_queue_maybe_reap(struct rdma_queue *q)
{
	if (q->state != Q_LIVE && q->drained_recv && q->drained_send && !q->nused &&
	    atomic_load(&q->last_wqe))
		nvmf_rdma_reap_later(q);
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
	nvmf_rdma_queue_maybe_reap(q);
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
void nvmf_rdma_queue_trim(struct rdma_queue *q)
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
	nvmf_rdma_queue_trim(q);
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

/* Queues first..last behind what the pass queued already, in order. */
static void queue_wrs(struct rdma_queue *q, struct ibv_send_wr *first, struct ibv_send_wr *last)
{
	last->next = NULL;
	*q->post_tail = first;
	q->post_tail = &last->next;
	q->nposted++;
}

/* Work requests the device never took: the requests they were for end here. */
static void wrs_drop(struct rdma_queue *q, struct ibv_send_wr *wr)
{
	while (wr) {
		struct wr_ctx *ctx = (struct wr_ctx *)(uintptr_t)wr->wr_id;

		wr = wr->next;
		switch (ctx->kind) {
		case WR_READ:
			q->nposted--;
			req_put(GDX_CONTAINER_OF(ctx, struct rdma_req, read_ctx));
			break;
		case WR_SEND:
			q->nposted--;
			req_put(GDX_CONTAINER_OF(ctx, struct rdma_req, send_ctx));
			break;
		default:
			break;	/* a WRITE: its SEND follows it in the chain */
		}
	}
}

void nvmf_rdma_post_queued(struct rdma_queue *q)
{
	struct ibv_send_wr *wr = q->post_head, *bad = NULL;

	if (!wr)
		return;
	q->post_head = NULL;
	q->post_tail = &q->post_head;
	q->nposts++;
	if (!ibv_post_send(q->id->qp, wr, &bad))
		return;
	/* those ahead of bad are the device's (with no bad, all are: only the doorbell failed) */
	nvmf_rdma_queue_end(q, "posting work requests failed");
	wrs_drop(q, bad);
}

/* Queues the response, behind an RDMA WRITE of the data for a read. */
static void respond(struct rdma_queue *q, struct rdma_req *rr, uint32_t c2h)
{
	struct ibv_send_wr *send = &rr->send_wr, *write = &rr->data_wr;

	memcpy(rr->rsp, &rr->req.cqe, sizeof(*rr->rsp));
	rr->state = RR_RESPOND;
	rr->rsp_sge = (struct ibv_sge){ (uintptr_t)rr->rsp, sizeof(*rr->rsp), q->rsp_mr->lkey };
	*send = (struct ibv_send_wr){ .wr_id = (uintptr_t)&rr->send_ctx, .sg_list = &rr->rsp_sge,
				      .num_sge = 1, .send_flags = IBV_SEND_SIGNALED };
	if (rr->sgl.kind == GDX_RDMA_DATA_KEYED && rr->sgl.invalidate) {
		send->opcode = IBV_WR_SEND_WITH_INV;
		send->invalidate_rkey = rr->sgl.key;
	} else {
		send->opcode = IBV_WR_SEND;
	}
	if (!c2h) {
		queue_wrs(q, send, send);
		return;
	}
	rr->data_sge = (struct ibv_sge){ (uintptr_t)rr->buf, c2h, rr->mr ? rr->mr->lkey : 0 };
	*write = (struct ibv_send_wr){ .wr_id = (uintptr_t)&rr->write_ctx, .next = send,
				       .sg_list = &rr->data_sge, .num_sge = 1,
				       .opcode = IBV_WR_RDMA_WRITE };
	write->wr.rdma.remote_addr = rr->sgl.addr;
	write->wr.rdma.rkey = rr->sgl.key;
	gdx_counter_add(&q->sq.ctr[SQ_CTR_BYTES_OUT], c2h);
	queue_wrs(q, write, send);
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
	struct ibv_send_wr *wr = &rr->data_wr;

	rr->state = RR_DATA_IN;
	rr->data_sge = (struct ibv_sge){ (uintptr_t)rr->buf, rr->req.len, rr->mr->lkey };
	*wr = (struct ibv_send_wr){ .wr_id = (uintptr_t)&rr->read_ctx, .sg_list = &rr->data_sge,
				    .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				    .send_flags = IBV_SEND_SIGNALED };
	wr->wr.rdma.remote_addr = rr->sgl.addr;
	wr->wr.rdma.rkey = rr->sgl.key;
	gdx_counter_add(&q->sq.ctr[SQ_CTR_BYTES_IN], rr->req.len);
	queue_wrs(q, wr, wr);
}

/* The command's buffer is there: fetch its data or run it. */
static void req_start(struct rdma_queue *q, struct rdma_req *rr)
{
	if (rr->sgl.kind == GDX_RDMA_DATA_KEYED && rr->dir == GDX_NVME_XFER_H2C)
		req_fetch(q, rr);
	else
		req_exec(rr);
}

int nvmf_rdma_post_recv(struct rdma_queue *q, struct rdma_recv *rv)
{
	struct ibv_recv_wr *bad;

	if (rv->srq)
		return ibv_post_srq_recv(rv->srq, &rv->wr, &bad);
	return ibv_post_recv(q->id->qp, &rv->wr, &bad);
}

/*
 * A receive of the reactor's shared queue whose capsule this queue does not
 * take (it is ending, or the capsule ended it) goes back for the others; a
 * queue pair's own receive goes with its queue.
 */
static void recv_unused(struct rdma_queue *q, struct rdma_recv *rv)
{
	if (rv->srq && nvmf_rdma_post_recv(q, rv))
		GDX_WARN(SUBSYS, "rdma reactor %u: a receive could not go back to the shared "
			 "receive queue", q->r->id);
}

static void handle_capsule(struct rdma_queue *q, struct rdma_recv *rv, uint32_t byte_len)
{
	struct rdma_req *rr;
	uint16_t st;

	if (byte_len < sizeof(struct gdx_nvme_sqe)) {
		nvmf_rdma_queue_end(q, "a capsule shorter than a command");
		recv_unused(q, rv);
		return;
	}
	q->ncmds++;
	rr = req_get(q);
	if (!rr) {
		nvmf_rdma_queue_end(q, "more commands than the queue holds");
		recv_unused(q, rv);
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
	if (nvmf_rdma_post_recv(q, rv)) {
		nvmf_rdma_queue_end(q, "posting a receive failed");
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
void nvmf_rdma_queue_unblock(struct rdma_queue *q)
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

static void handle_wc(struct rdma_queue *q, const struct ibv_wc *wc)
{
	struct wr_ctx *ctx = (struct wr_ctx *)(uintptr_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR && q->state == Q_LIVE) {
		char why[96];

		snprintf(why, sizeof(why), "%s (opcode %d)", ibv_wc_status_str(wc->status),
			 (int)wc->opcode);
		nvmf_rdma_queue_end(q, why);
	}
	switch (ctx->kind) {
	case WR_RECV: {
		struct rdma_recv *rv = GDX_CONTAINER_OF(ctx, struct rdma_recv, ctx);

		if (wc->status == IBV_WC_SUCCESS && q->state == Q_LIVE)
			handle_capsule(q, rv, wc->byte_len);
		else
			recv_unused(q, rv);
		break;
	}
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
		nvmf_rdma_queue_maybe_reap(q);
		break;
	case WR_DRAIN_SEND:
		q->drained_send = true;
		nvmf_rdma_queue_maybe_reap(q);
		break;
	}
}

/*
 * Handles what the queue's completion queue holds, posting what each batch
 * of completions queued: the device starts on a batch's responses while the
 * next batch is handled.  How many completions.
 */
unsigned nvmf_rdma_poll_cq(struct rdma_queue *q)
{
	struct ibv_wc wc[32];
	unsigned total = 0;
	int n;

	do {
		n = ibv_poll_cq(q->cq, (int)GDX_ARRAY_SIZE(wc), wc);
		for (int i = 0; i < n; i++)
			handle_wc(q, &wc[i]);
		nvmf_rdma_post_queued(q);
		total += n > 0 ? (unsigned)n : 0;
	} while (n == (int)GDX_ARRAY_SIZE(wc));
	return total;
}

/* Asks for an event at the next completion, then looks once more: none is missed. */
void nvmf_rdma_arm_cq(struct rdma_queue *q)
{
	if (!q->reaped && !ibv_req_notify_cq(q->cq, 0))
		nvmf_rdma_poll_cq(q);
}

void nvmf_rdma_cq_events(struct rdma_reactor *r, struct rdma_cc *c)
{
	struct ibv_cq *cq;
	void *ctx;

	while (!ibv_get_cq_event(c->cc, &cq, &ctx)) {
		struct rdma_queue *q = ctx;

		ibv_ack_cq_events(cq, 1);
		if (q->reaped)
			continue;
		nvmf_rdma_poll_cq(q);
		/* a polling reactor looks at every queue each iteration: no event needed */
		if (!r->polling)
			nvmf_rdma_arm_cq(q);
	}
}

/*
 * Receives of the shared queue that the queue pair took and whose completions
 * were not read yet (flushed, or capsules that came as the queue ended) go
 * back before the completion queue goes.  One a device took and never
 * completed is lost to it (rdma_rxe of Linux 6.1 does not flush): the host's
 * SENDs then wait a little longer for a free receive, retried by the NIC.
 */
static void srq_reclaim(struct rdma_queue *q)
{
	struct ibv_wc wc;

	while (ibv_poll_cq(q->cq, 1, &wc) > 0) {
		struct wr_ctx *ctx = (struct wr_ctx *)(uintptr_t)wc.wr_id;

		if (ctx->kind == WR_RECV)
			recv_unused(q, GDX_CONTAINER_OF(ctx, struct rdma_recv, ctx));
	}
}

void nvmf_rdma_queue_free(struct rdma_queue *q)
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
	if (q->srq && q->cq)
		srq_reclaim(q);
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
	nvmf_rdma_dev_put(r->rt, q->dev);
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
void nvmf_rdma_queue_end(struct rdma_queue *q, const char *why)
{
	struct ibv_recv_wr rwr = { .wr_id = (uintptr_t)&q->drain_recv }, *rbad;
	struct ibv_send_wr swr = { .wr_id = (uintptr_t)&q->drain_send }, *sbad;

	if (q->state != Q_LIVE)
		return;
	q->state = Q_DRAINING;
	q->ended_ns = gdx_now_ns();
	if (why)
		GDX_INFO(SUBSYS, "%s qid %u: queue ends (%s): %" PRIu64 " commands, %" PRIu64
			 " send posts", q->peer, q->sq.qid, why, q->ncmds, q->nposts);
	nvmf_sq_destroy(&q->sq);
	queue_unwait(q);
	/* posted now, they would follow the queue pair into the error state, which some
	 * devices never flush: their requests end here instead */
	wrs_drop(q, q->post_head);
	q->post_head = NULL;
	q->post_tail = &q->post_head;
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
	/* a queue pair on the shared receive queue has no receives of its own to drain */
	if (q->srq || ibv_post_recv(q->id->qp, &rwr, &rbad))
		q->drained_recv = true;
	if (ibv_post_send(q->id->qp, &swr, &sbad))
		q->drained_send = true;
	if (q->drained_recv && q->drained_send) {
		/* nothing could be posted: nothing is in flight that the device still owns */
		GDX_WARN(SUBSYS, "%s qid %u: could not post drain requests", q->peer, q->sq.qid);
	}
	nvmf_rdma_queue_maybe_reap(q);
}
