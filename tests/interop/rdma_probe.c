/* SPDX-License-Identifier: MIT */
/*
 * A raw NVMe/RDMA host for the target's bad-input cases, run inside the
 * guest over rdma_rxe (t_rdma_kernel_host.sh): connect requests with bad
 * private data must be rejected with the binding's status; a short capsule,
 * a key the target never saw, and in-capsule data the capsule does not hold
 * must end that queue or fail that command with the right status, while a
 * well-formed Connect afterwards still succeeds.
 *   rdma_probe ADDR PORT SUBNQN
 * Prints one line per case and exits 1 if any failed.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "nvmf/proto/rdma.h"

#define TIMEOUT_MS 20000
#define DISCONNECT_MS 60000

struct conn {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	bool own_qp;		/* created here, not by rdma_cm: the RTU waits for rdma_establish */
	uint8_t *buf;		/* [0, 4096): receive, [4096, 8192): send, [8192, ..): data */
};

static const char *g_addr, *g_port, *g_nqn;
static int fails;

static void result(const char *what, int ok, const char *detail)
{
	printf("  %s: %s%s%s\n", ok ? "ok" : "FAILED", what, detail ? " - " : "", detail ? detail : "");
	fails += !ok;
}

static struct rdma_cm_event *wait_event(struct conn *c)
{
	struct rdma_cm_event *ev = NULL;

	if (rdma_get_cm_event(c->ch, &ev))
		return NULL;
	return ev;
}

static void conn_free(struct conn *c)
{
	if (c->own_qp && c->qp)
		ibv_destroy_qp(c->qp);
	else if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	free(c->buf);
	memset(c, 0, sizeof(*c));
}

/* Moves a queue pair of our own to state s, with the attributes the CM has for it. */
static int qp_to(struct conn *c, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	int mask;

	return rdma_init_qp_attr(c->id, &a, &mask) || ibv_modify_qp(c->qp, &a, mask) ? -1 : 0;
}

/*
 * Connects with the given private data.  Returns 0 once established (with
 * late_rtu, once the target's reply came: the queue pair is ready and the
 * RTU is not sent until rdma_establish), the reject's status (> 0) when
 * rejected, -1 on another failure.
 */
static int conn_open_rtu(struct conn *c, const void *pd, size_t pd_len, bool late_rtu)
{
	struct rdma_conn_param p = { .private_data = pd, .private_data_len = (uint8_t)pd_len,
				     .responder_resources = 4, .initiator_depth = 4,
				     .retry_count = 7, .rnr_retry_count = 7 };
	struct ibv_qp_init_attr qa = { 0 };
	struct addrinfo *ai;
	struct rdma_cm_event *ev;
	int ret = -1;

	memset(c, 0, sizeof(*c));
	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP) ||
	    getaddrinfo(g_addr, g_port, NULL, &ai))
		return -1;
	if (rdma_resolve_addr(c->id, NULL, ai->ai_addr, TIMEOUT_MS)) {
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	ev = wait_event(c);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		return -1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(c->id, TIMEOUT_MS))
		return -1;
	ev = wait_event(c);
	if (!ev || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return -1;
	rdma_ack_cm_event(ev);
	c->pd = ibv_alloc_pd(c->id->verbs);
	c->cq = c->pd ? ibv_create_cq(c->id->verbs, 64, NULL, NULL, 0) : NULL;
	c->buf = calloc(1, 3 * 4096);
	c->mr = c->cq && c->buf ? ibv_reg_mr(c->pd, c->buf, 3 * 4096,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!c->mr)
		return -1;
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = qa.recv_cq = c->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (late_rtu) {
		qa.qp_context = c;
		c->qp = ibv_create_qp(c->pd, &qa);
		c->own_qp = true;
		p.qp_num = c->qp ? c->qp->qp_num : 0;
		if (!c->qp || qp_to(c, IBV_QPS_INIT))
			return -1;
	} else {
		if (rdma_create_qp(c->id, c->pd, &qa))
			return -1;
		c->qp = c->id->qp;
	}
	{
		struct ibv_sge sge = { (uintptr_t)c->buf, 4096, c->mr->lkey };
		struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(c->qp, &wr, &bad))
			return -1;
	}
	if (rdma_connect(c->id, &p))
		return -1;
	ev = wait_event(c);
	if (!ev)
		return -1;
	if (ev->event == (late_rtu ? RDMA_CM_EVENT_CONNECT_RESPONSE : RDMA_CM_EVENT_ESTABLISHED))
		ret = late_rtu && (qp_to(c, IBV_QPS_RTR) || qp_to(c, IBV_QPS_RTS)) ? -1 : 0;
	else if (ev->event == RDMA_CM_EVENT_REJECTED)
		ret = gdx_rdma_cm_rej_parse(ev->param.conn.private_data,
					    ev->param.conn.private_data_len);
	rdma_ack_cm_event(ev);
	return ret;
}

static int conn_open(struct conn *c, const void *pd, size_t pd_len)
{
	return conn_open_rtu(c, pd, pd_len, false);
}

/* Sends len bytes of the send area as one capsule. */
static int send_capsule(struct conn *c, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)c->buf + 4096, len, c->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	return ibv_post_send(c->qp, &wr, &bad);
}

/*
 * Waits for the response capsule: its status field (>= 0), or -1 when the
 * queue ended (a flushed or failed completion, or nothing within the timeout).
 */
static int wait_response(struct conn *c)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(c->cq, 1, &wc);

		if (n < 0)
			return -1;
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				return -1;
			if (wc.opcode == IBV_WC_RECV) {
				struct gdx_nvme_cqe cqe;

				memcpy(&cqe, c->buf, sizeof(cqe));
				return cqe.status >> 1;
			}
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > TIMEOUT_MS)
			return -1;
	}
}

/*
 * Whether the target ended the connection: a DISCONNECTED event comes within
 * DISCONNECT_MS (the CM's DREQ is slow in a loaded TCG guest).
 */
static int wait_disconnect(struct conn *c)
{
	struct pollfd pfd = { .fd = c->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = poll(&pfd, 1, DISCONNECT_MS) == 1 ? wait_event(c) : NULL;
	int ok = ev && ev->event == RDMA_CM_EVENT_DISCONNECTED;

	if (!ok)
		printf("  (%s%s)\n", ev ? "CM event " : "no CM event in 60 s",
		       ev ? rdma_event_str(ev->event) : "");

	if (ev)
		rdma_ack_cm_event(ev);
	return ok;
}

/* An admin-queue Connect whose data sits in the data area, described as sgl says. */
static void connect_cmd(struct conn *c, int keyed, uint32_t key, uint32_t inline_len)
{
	struct gdx_nvme_sqe *sqe = (struct gdx_nvme_sqe *)(c->buf + 4096);
	struct gdx_nvmf_connect_data *d = (struct gdx_nvmf_connect_data *)(c->buf + 8192);

	memset(c->buf + 4096, 0, 2 * 4096);
	sqe->opc = GDX_NVME_OPC_FABRICS;
	sqe->flags = GDX_NVME_FLAGS_PSDT_SGL;
	sqe->cid = 1;
	sqe->fctype = GDX_NVMF_FCTYPE_CONNECT;
	sqe->connect.sqsize = 31;
	sqe->connect.kato = 30000;
	d->cntlid = GDX_NVME_CNTLID_DYNAMIC;
	snprintf(d->subnqn, sizeof(d->subnqn), "%s", g_nqn);
	snprintf(d->hostnqn, sizeof(d->hostnqn), "nqn.2014-08.org.nvmexpress:uuid:probe");
	d->hostid[0] = 1;
	if (keyed)
		gdx_rdma_sgl_keyed(&sqe->dptr, (uintptr_t)d, sizeof(*d), key, false);
	else
		gdx_rdma_sgl_inline(&sqe->dptr, inline_len);
}

int main(int argc, char **argv)
{
	struct gdx_rdma_cm_req req;
	struct conn c;
	char detail[64];
	int r;

	if (argc != 4) {
		fprintf(stderr, "usage: rdma_probe ADDR PORT SUBNQN\n");
		return 2;
	}
	g_addr = argv[1];
	g_port = argv[2];
	g_nqn = argv[3];

	gdx_rdma_cm_req_init(&req, 0, 32, 0);
	req.recfmt = 1;
	r = conn_open(&c, &req, sizeof(req));
	snprintf(detail, sizeof(detail), "got %d", r);
	result("a bad record format is rejected with status 2", r == GDX_RDMA_CM_INVALID_RECFMT, detail);
	conn_free(&c);

	gdx_rdma_cm_req_init(&req, 1000, 32, 0);
	r = conn_open(&c, &req, sizeof(req));
	snprintf(detail, sizeof(detail), "got %d", r);
	result("a queue ID past the limit is rejected with status 3", r == GDX_RDMA_CM_INVALID_QID, detail);
	conn_free(&c);

	gdx_rdma_cm_req_init(&req, 0, 64, 0);
	r = conn_open(&c, &req, sizeof(req));
	snprintf(detail, sizeof(detail), "got %d", r);
	result("an admin queue of 64 entries is rejected with status 4",
	       r == GDX_RDMA_CM_INVALID_HSQSIZE, detail);
	conn_free(&c);

	/*
	 * Short private data (reject status 1) cannot be sent over RoCE: the CM
	 * pads a request's private data to its fixed size.  test_nvmf_rdma has it.
	 */
	gdx_rdma_cm_req_init(&req, 0, 32, 0);
	r = conn_open(&c, &req, sizeof(req));
	if (r == 0) {
		memset(c.buf + 4096, 0xab, 32);
		send_capsule(&c, 32);
		result("a capsule shorter than a command ends the queue", wait_disconnect(&c), NULL);
	} else {
		result("connect", 0, "refused");
	}
	conn_free(&c);

	r = conn_open(&c, &req, sizeof(req));
	if (r == 0) {
		connect_cmd(&c, 1, c.mr->rkey ^ 0x5a5a5a00u, 0);
		send_capsule(&c, 64);
		r = wait_response(&c);
		result("a key the target never saw ends the queue", r < 0 && wait_disconnect(&c),
		       NULL);
	} else {
		result("connect", 0, "refused");
	}
	conn_free(&c);

	/*
	 * The same before the host's RTU: the target's CM has the connection
	 * not established yet when the capsule ends the queue, and a disconnect
	 * then sends nothing.  The host sends its RTU once the queue ended and
	 * must be disconnected then, not rejected when the queue is freed.
	 */
	r = conn_open_rtu(&c, &req, sizeof(req), true);
	if (r == 0) {
		connect_cmd(&c, 1, c.mr->rkey ^ 0x5a5a5a00u, 0);
		send_capsule(&c, 64);
		r = wait_response(&c);
		result("a key the target never saw ends the queue before the RTU", r < 0, NULL);
		rdma_establish(c.id);
		result("  and the host is disconnected once its RTU came", wait_disconnect(&c), NULL);
	} else {
		result("connect", 0, "refused");
	}
	conn_free(&c);

	r = conn_open(&c, &req, sizeof(req));
	if (r == 0) {
		connect_cmd(&c, 0, 0, 1024);
		send_capsule(&c, 64 + 512);	/* the SGL says 1024 in the capsule, 512 came */
		r = wait_response(&c);
		snprintf(detail, sizeof(detail), "status 0x%x", r);
		result("in-capsule data past the capsule fails with SGL Data Block Length Invalid",
		       r == (GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR), detail);
		{
			struct ibv_sge sge = { (uintptr_t)c.buf, 4096, c.mr->lkey };
			struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

			ibv_post_recv(c.qp, &wr, &bad);
		}
		connect_cmd(&c, 1, c.mr->rkey, 0);
		send_capsule(&c, 64);
		r = wait_response(&c);
		snprintf(detail, sizeof(detail), "status 0x%x", r);
		result("then a well-formed Connect on the same queue succeeds", r == 0, detail);
		rdma_disconnect(c.id);
	} else {
		result("connect", 0, "refused");
	}
	conn_free(&c);

	/*
	 * A host that posts no receive: the response to its Keep Alive finds
	 * none, and receiver-not-ready is retried without end (RNR retry 7).  The
	 * target's stall timeout (the guest script sets 2 s) ends the queue.
	 */
	r = conn_open(&c, &req, sizeof(req));
	if (r == 0) {
		struct gdx_nvme_sqe *sqe = (struct gdx_nvme_sqe *)(c.buf + 4096);
		struct timespec t0, t1;

		connect_cmd(&c, 1, c.mr->rkey, 0);
		send_capsule(&c, 64);
		r = wait_response(&c);
		memset(sqe, 0, sizeof(*sqe));
		sqe->opc = GDX_NVME_ADM_KEEP_ALIVE;
		sqe->cid = 2;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		send_capsule(&c, 64);
		r = r == 0 && wait_disconnect(&c);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		snprintf(detail, sizeof(detail), "after %ld ms",
			 (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
		result("a host that posts no receive for its response is ended by the stall timeout",
		       r, detail);
	} else {
		result("connect", 0, "refused");
	}
	conn_free(&c);
	return fails ? 1 : 0;
}
