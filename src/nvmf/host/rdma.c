/* SPDX-License-Identifier: MIT */
/*
 * The NVMe/RDMA side of a host queue (the NVMe-oF RDMA transport binding).
 *
 * queue.c keeps what is transport-free (slots, CIDs, the backlog, timeouts,
 * completion and reaping); this file replaces the TCP socket with an RC queue
 * pair set up by rdma_cm, whose connect request carries the queue's QID and
 * sizes.  A command goes out as a SEND of its 64-byte SQE from a registered
 * slot; its data is described by a keyed SGL over the caller's buffer, so
 * the controller moves the data itself (RDMA WRITE into a read's buffer, RDMA
 * READ from a write's) and, but for a page of host memory (below), no byte
 * passes through this process.  Responses come back as RECVs of 16-byte
 * CQEs.
 *
 * Pinned and device allocations, whose lifetime gdx knows, are registered
 * whole once and kept in the queue's registration cache (dropped when gdx
 * frees them, or when the allocation at the address is a new one); plain
 * host memory, which may be unmapped behind gdx's back, is registered for the
 * command and deregistered when it completes (or copied, at most a page).  A cached registration lets
 * the controller reach the whole allocation for as long as it lives, not
 * only a command's bytes while it runs: nvmf.host.rdma_regcache=0 trades the
 * speed back for the narrower exposure.
 *
 * Device memory is registered with the NIC, so the controller's RDMA WRITE
 * lands in it with no copy (path "direct"): a dma-buf of it where the device
 * exports one and the NIC takes it, else the device's peer-memory address
 * (nvidia_peermem; the emulated device's copy-engine view).  The keyed SGL
 * names the device address either way (the MR's iova).
 *
 * Where neither works (rdma_rxe, no peermem, nvmf.host.rdma_device_reg=off),
 * found at connect by registering a probe allocation of the device named in
 * the options, device memory bounces through registered host memory (path
 * "bounce", the reason logged once; require_direct refuses it in io.c): each
 * I/O queue opens two stage lanes (mem/stage.h) on the controller's staging
 * context, whose pinned rings are registered with the PD once.  A read
 * reserves its bytes in the H2D lane's ring at submit and names them in its
 * keyed SGL; the controller's RDMA WRITE lands there, and once the response
 * is in, the ring's H2D copy into the device is posted and the command
 * completes when it has landed.  A write reserves in the D2H lane's ring,
 * copies the device bytes into it before the command goes out (the
 * controller's RDMA READ, or the capsule, takes them from there) and gives
 * the room back with its response.  See struct bounce for the one catch: a
 * lane's room comes back in the order it was reserved, responses do not.
 *
 * A write of at most a page (and within the controller's IOCCSZ) travels in
 * the command capsule, as the Linux host sends it: the SEND carries the SQE
 * and the data, so the controller needs no RDMA READ and answers a round trip
 * sooner.  Host and pinned data is copied into the slot's page of a
 * registered area; device data is gathered by the NIC from its registration.
 * A read of at most a page of plain host memory lands in that page and is
 * copied out with its response: cheaper than registering the caller's page
 * for the command and deregistering it after.
 *
 * Keys are never handed to the controller to invalidate (plain keyed data
 * blocks, subtype 0): a memory region from ibv_reg_mr cannot be invalidated
 * remotely; a one-shot one is deregistered here once the command is done.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "mem/regcache.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/rdma.h"

#define SUB "nvmf-host"

/* Bytes of device memory the probe at connect registers. */
#define PROBE_LEN 65536u

/* Which ways the NIC may reach device memory (nvmf.host.rdma_device_reg). */
enum dev_reg { DREG_AUTO, DREG_DMABUF, DREG_PEER, DREG_OFF };

/* The registration of a command's data: a cache reference, or its own MR; or a bounce. */
struct data_reg {
	struct gdx_reg *ref;
	struct ibv_mr *mr;
	bool page;		/* a read landing in the slot's page, copied out with its response */
	struct bounce *b;	/* the lane its bytes are reserved in, NULL: none */
	struct gdx_stage_span sp;	/* ... its reservation */
	void *devp;		/* ... the command's device memory */
	bool answered;		/* ... its response came (a read's slot is held until done) */
};

/*
 * One direction of the bounce: a stage lane whose ring is registered once.
 *
 * A lane gives its ring back in the order the room was reserved, which is
 * submission order, while the controller answers in any order: each answer
 * makes its piece ready (gdx_stage_ready), and the lane posts a read's copy,
 * or releases a write's room, only once every earlier piece is ready.  A
 * read answered ahead of an earlier one is held there (its slot stays
 * taken) and completes once its copy, posted in turn, has landed; a write
 * completes at once, its room held.
 *
 * lock serialises the lane (submitters reserve, the receiver makes pieces
 * ready and learns what landed); a write's copy into its piece runs outside
 * it.  Effects run under it only on the receiver, and only collect
 * (bounce_ran): callbacks, which may submit again, run after it is dropped.
 * room wakes submitters that wait for ring room.
 */
struct bounce {
	struct gdx_stage *st;
	struct ibv_mr *mr;
	pthread_mutex_t lock;
	pthread_cond_t room;
};

/* A bounced command ready to complete: its data is where the caller wants it (or err). */
struct bounce_done {
	unsigned idx;
	uint16_t status;
	uint64_t result;
	int err;
};

/* A cache entry's payload: an allocation registered whole. */
struct cached_mr {
	struct ibv_mr *mr;
	uint64_t buffer_id;	/* of the allocation it was made for */
};

struct nh_rdma {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int killfd;			/* written by nh_rdma_kill: the receiver stops waiting */
	unsigned nrecv;			/* receives posted, one CQE each */
	struct gdx_nvme_cqe *rsps;	/* nrecv receive buffers */
	struct ibv_mr *rsp_mr;
	struct gdx_nvme_sqe *cmds;	/* one per slot */
	struct ibv_mr *cmd_mr;
	struct data_reg *data;		/* the data of the command in each slot */
	uint8_t *inl;			/* I/O queues: a page per slot (INLINE_MAX), or NULL */
	struct ibv_mr *inl_mr;
	struct gdx_regcache *rc;	/* pinned and device allocations; NULL: all one-shot */
	enum dev_reg dreg;
	_Atomic bool dev_told;		/* the way device memory is reached was logged */
	_Atomic bool dev_failed;	/* a registration of device memory failed, logged */
	/* device memory the NIC cannot register: reads and writes bounce (NULL st: not) */
	struct bounce rd, wr;
	_Atomic bool dead;		/* killed: waits for ring room end */
	struct bounce_done *done;	/* the receiver's: bounced commands to complete */
	unsigned ndone;
	/*
	 * Each slot's send, built in place.  The commands the receiver submits
	 * from its completion callbacks are chained and posted together at the
	 * end of the pass (flush_sends): on rdma_rxe every ibv_post_send rings
	 * its doorbell with a system call, a trap under a TCG guest.
	 */
	struct ibv_send_wr *wrs;
	struct ibv_sge *sges;		/* 2 per slot: the SQE and in-capsule data */
	struct ibv_send_wr *chain, **chain_tail;
	struct ibv_recv_wr *rwrs;	/* one per receive buffer, re-posted as a chain */
	struct ibv_sge *rsges;
	bool armed;			/* the receiver asked for the CQ's next event */
	bool evented;			/* armed, then found completions: their event needs no sleep */
	/* nvmf.host.rdma_poll_us: the receiver's poll window, adapted (gdx_poll_adapt) */
	uint64_t poll_ns;
	uint64_t idle_since;		/* when it last found the CQ empty, armed */
};

/*
 * In-capsule data per write, at most: a page, what nvmet-rdma takes by
 * default; larger writes are read by the controller.
 */
#define INLINE_MAX 4096u

/* wr_id of sends: the slot index; receives: this bit and the buffer index. */
#define WR_RECV (1ull << 32)

static int wait_cm(struct nh_rdma *t, enum rdma_cm_event_type want, unsigned timeout_ms,
		   int *rej)
{
	struct pollfd p = { .fd = t->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int rc;

	rc = poll(&p, 1, (int)timeout_ms);
	if (rc <= 0)
		return rc ? -errno : -ETIMEDOUT;
	if (rdma_get_cm_event(t->ch, &ev))
		return -errno;
	rc = ev->event == want ? 0 : -ECONNREFUSED;
	if (ev->event == RDMA_CM_EVENT_REJECTED && rej)
		*rej = gdx_rdma_cm_rej_parse(ev->param.conn.private_data,
					     ev->param.conn.private_data_len);
	if (rc)
		GDX_INFO(SUB, "rdma: %s where %s was awaited (status %d)", rdma_event_str(ev->event),
			 rdma_event_str(want), ev->status);
	rdma_ack_cm_event(ev);
	return rc;
}

/*
 * Posts the sends the receiver chained in its pass, with one doorbell.  A
 * failed post ends the queue: the commands in the chain keep their slots,
 * and tearing the queue down hands them back as it does those in flight.
 */
static int flush_sends(struct nh_queue *q)
{
	struct nh_rdma *t = q->rdma;
	struct ibv_send_wr *head = t->chain, *bad;

	if (!head)
		return 0;
	t->chain = NULL;
	t->chain_tail = &t->chain;
	if (!ibv_post_send(t->id->qp, head, &bad))
		return 0;
	GDX_WARN(SUB, "queue %u: send: %s", q->qid, strerror(errno));
	return GDX_EDISCONNECTED;
}

static void cached_release(struct gdx_reg *g, void *arg)
{
	struct cached_mr *c = g->payload;

	(void)arg;
	ibv_dereg_mr(c->mr);
	free(c);
}

static void data_put(struct nh_rdma *t, struct data_reg *d)
{
	if (d->ref)
		gdx_regcache_put(t->rc, d->ref);
	if (d->mr)
		ibv_dereg_mr(d->mr);
	/* a bounce's room went back in order with its response (bounce_answer) */
	*d = (struct data_reg){ 0 };
}

/* After the lane's drain (or before anything was posted): the ring's MR, then the ring. */
static void bounce_free(struct bounce *b)
{
	if (b->mr)
		ibv_dereg_mr(b->mr);
	gdx_stage_close(b->st);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->room);
}

static void rdma_free(struct nh_rdma *t, unsigned depth)
{
	if (!t)
		return;
	for (unsigned i = 0; t->data && i < depth; i++)
		data_put(t, &t->data[i]);
	bounce_free(&t->rd);
	bounce_free(&t->wr);
	free(t->done);
	/* its entries' MRs go before their PD */
	if (t->rc)
		gdx_regcache_destroy(t->rc);
	if (t->id && t->id->qp)
		rdma_destroy_qp(t->id);
	if (t->cq)
		ibv_destroy_cq(t->cq);
	if (t->cc)
		ibv_destroy_comp_channel(t->cc);
	if (t->rsp_mr)
		ibv_dereg_mr(t->rsp_mr);
	if (t->cmd_mr)
		ibv_dereg_mr(t->cmd_mr);
	if (t->inl_mr)
		ibv_dereg_mr(t->inl_mr);
	if (t->pd)
		ibv_dealloc_pd(t->pd);
	if (t->id)
		rdma_destroy_id(t->id);
	if (t->ch)
		rdma_destroy_event_channel(t->ch);
	if (t->killfd >= 0)
		close(t->killfd);
	free(t->rsps);
	free(t->cmds);
	free(t->data);
	free(t->wrs);
	free(t->sges);
	free(t->rwrs);
	free(t->rsges);
	free(t->inl);
	free(t);
}

static int bounce_setup(struct nh_queue *q, struct nh_rdma *t);

/* The admin queue's is 0; I/O queue i's is i mod the device's count. */
static int comp_vector(const struct nh_queue *q, const struct ibv_context *ctx)
{
	if (!q->qid || ctx->num_comp_vectors <= 1)
		return 0;
	return (int)((q->qid - 1u) % (unsigned)ctx->num_comp_vectors);
}

int nh_rdma_open(struct nh_queue *q, unsigned timeout_ms)
{
	struct nh_params *p = &q->ctrl->p;
	struct nh_rdma *t = calloc(1, sizeof(*t));
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param cp = { 0 };
	struct gdx_rdma_cm_req req;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int rc, rej = -1;

	if (!t)
		return -ENOMEM;
	t->killfd = -1;
	t->nrecv = q->depth + 1;
	pthread_mutex_init(&t->rd.lock, NULL);
	pthread_mutex_init(&t->wr.lock, NULL);
	pthread_cond_init(&t->rd.room, NULL);
	pthread_cond_init(&t->wr.room, NULL);
	t->ch = rdma_create_event_channel();
	if (!t->ch || rdma_create_id(t->ch, &t->id, q, RDMA_PS_TCP)) {
		rc = errno ? -errno : -ENODEV;
		GDX_ERR(SUB, "queue %u: rdma_cm: %s (are the RDMA modules loaded?)", q->qid,
			gdx_strerror(rc));
		goto fail;
	}
	rc = getaddrinfo(p->addr, p->svc, &hints, &ai);
	if (rc) {
		GDX_ERR(SUB, "queue %u: address %s:%s: %s", q->qid, p->addr, p->svc,
			gai_strerror(rc));
		rc = -EHOSTUNREACH;
		goto fail;
	}
	if (rdma_resolve_addr(t->id, NULL, ai->ai_addr, (int)timeout_ms)) {
		rc = -errno;
		goto fail;
	}
	rc = wait_cm(t, RDMA_CM_EVENT_ADDR_RESOLVED, timeout_ms, NULL);
	if (!rc && rdma_resolve_route(t->id, (int)timeout_ms))
		rc = -errno;
	if (!rc)
		rc = wait_cm(t, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout_ms, NULL);
	if (rc) {
		GDX_INFO(SUB, "queue %u: no RDMA route to %s:%s: %s", q->qid, p->addr, p->svc,
			 gdx_strerror(rc));
		rc = -EHOSTUNREACH;
		goto fail;
	}
	t->pd = ibv_alloc_pd(t->id->verbs);
	t->cc = t->pd ? ibv_create_comp_channel(t->id->verbs) : NULL;
	/*
	 * a send and a receive per entry, the spare receive, and sends not yet
	 * polled; I/O queue i's completions on vector i, as the Linux host's
	 */
	t->cq = t->cc ? ibv_create_cq(t->id->verbs, (int)(3 * q->depth + 2), q, t->cc,
				      comp_vector(q, t->id->verbs)) : NULL;
	t->rsps = calloc(t->nrecv, sizeof(*t->rsps));
	t->cmds = calloc(q->depth, sizeof(*t->cmds));
	t->data = calloc(q->depth, sizeof(*t->data));
	t->wrs = calloc(q->depth, sizeof(*t->wrs));
	t->sges = calloc(2 * (size_t)q->depth, sizeof(*t->sges));
	t->rwrs = calloc(t->nrecv, sizeof(*t->rwrs));
	t->rsges = calloc(t->nrecv, sizeof(*t->rsges));
	t->chain_tail = &t->chain;
	t->killfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!t->cq || !t->rsps || !t->cmds || !t->data || !t->wrs || !t->sges || !t->rwrs ||
	    !t->rsges || t->killfd < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	if (gdx_cfg_bool("nvmf.host.rdma_regcache")) {
		rc = gdx_regcache_create(NULL, cached_release, NULL, &t->rc);
		if (rc)
			goto fail;
	}
	{
		static const char *const dreg[] = { "auto", "dmabuf", "peer", "off" };
		const char *v = gdx_cfg_str("nvmf.host.rdma_device_reg");

		for (unsigned i = 0; i < GDX_ARRAY_SIZE(dreg); i++)
			if (!strcmp(v, dreg[i]))
				t->dreg = (enum dev_reg)i;
	}
	fcntl(t->cc->fd, F_SETFL, fcntl(t->cc->fd, F_GETFL) | O_NONBLOCK);
	fcntl(t->ch->fd, F_SETFL, fcntl(t->ch->fd, F_GETFL) | O_NONBLOCK);
	t->rsp_mr = ibv_reg_mr(t->pd, t->rsps, t->nrecv * sizeof(*t->rsps), IBV_ACCESS_LOCAL_WRITE);
	t->cmd_mr = ibv_reg_mr(t->pd, t->cmds, q->depth * sizeof(*t->cmds), 0);
	if (!t->rsp_mr || !t->cmd_mr) {
		rc = -errno;
		goto fail;
	}
	/* the admin queue's writes (Connect's data among them) are few: they stay keyed */
	if (q->qid) {
		t->inl = aligned_alloc(INLINE_MAX, (size_t)q->depth * INLINE_MAX);
		t->inl_mr = t->inl ? ibv_reg_mr(t->pd, t->inl, (size_t)q->depth * INLINE_MAX,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
		if (!t->inl_mr) {
			rc = t->inl ? -errno : -ENOMEM;
			goto fail;
		}
	}
	if (q->qid && p->dev) {
		rc = bounce_setup(q, t);
		if (rc)
			goto fail;
	}
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = qa.recv_cq = t->cq;
	qa.cap.max_send_wr = 2 * q->depth + 1;
	qa.cap.max_recv_wr = t->nrecv;
	qa.cap.max_send_sge = 2;	/* the SQE and in-capsule data */
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(t->id, t->pd, &qa)) {
		rc = -errno;
		goto fail;
	}
	for (unsigned i = 0; i < t->nrecv; i++) {
		t->rsges[i] = (struct ibv_sge){ (uintptr_t)&t->rsps[i], sizeof(t->rsps[i]),
						t->rsp_mr->lkey };
		t->rwrs[i] = (struct ibv_recv_wr){ .wr_id = WR_RECV | i, .sg_list = &t->rsges[i],
						   .num_sge = 1,
						   .next = i + 1 < t->nrecv ? &t->rwrs[i + 1] : NULL };
	}
	{
		struct ibv_recv_wr *bad;

		if (ibv_post_recv(t->id->qp, t->rwrs, &bad)) {
			rc = -EIO;
			goto fail;
		}
	}
	/* the queue's Connect says sqsize = depth (0's based): the same entries here */
	gdx_rdma_cm_req_init(&req, q->qid, (uint16_t)(q->depth + 1), 0);
	cp.private_data = &req;
	cp.private_data_len = sizeof(req);
	{
		struct ibv_device_attr a;

		/*
		 * The controller takes a write's data with RDMA READs: as many at
		 * once as there can be commands, within what the device serves.
		 * The Linux host offers the device's limit; a lower one holds the
		 * controller's READs back behind each other (rxe allows 128).
		 */
		cp.responder_resources = (uint8_t)(ibv_query_device(t->id->verbs, &a) ? 1 :
			GDX_MIN(GDX_MIN(a.max_qp_rd_atom, (int)q->depth), UINT8_MAX));
	}
	cp.initiator_depth = 0;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(t->id, &cp)) {
		rc = -errno;
		goto fail;
	}
	/* the event channel is non-blocking now: wait_cm polls it */
	rc = wait_cm(t, RDMA_CM_EVENT_ESTABLISHED, timeout_ms, &rej);
	if (rc) {
		if (rej > 0)
			GDX_ERR(SUB, "queue %u: %s:%s rejected the connection: %s", q->qid, p->addr,
				p->svc, gdx_rdma_cm_status_str((uint16_t)rej));
		goto fail;
	}
	freeaddrinfo(ai);
	{
		struct ibv_qp_attr got;
		struct ibv_qp_init_attr init;

		/* what the connection settled on, where the wire is in question */
		if (!ibv_query_qp(t->id->qp, &got, IBV_QP_PATH_MTU | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_TIMEOUT, &init))
			GDX_DBG(SUB, "queue %u: %u entries, %u RDMA READs at once offered (the QP "
				"serves %u), path MTU %d, ACK timeout %u", q->qid, q->depth,
				cp.responder_resources, got.max_dest_rd_atomic,
				128 << got.path_mtu, got.timeout);
	}
	q->rdma = t;
	return 0;
fail:
	if (ai)
		freeaddrinfo(ai);
	rdma_free(t, q->depth);
	return rc;
}

/*
 * Registers device memory [p, p+len) with the NIC at iova p, trying each way
 * nvmf.host.rdma_device_reg allows in turn: a dma-buf of it, then its
 * peer-memory address.  NULL with why saying what each way answered.
 */
static struct ibv_mr *reg_device(struct nh_rdma *t, struct gdx_device *dev, void *p,
				 size_t len, int acc, const char **how, char *why, size_t whylen)
{
	struct ibv_mr *mr;
	int n = 0, rc;

	if (t->dreg == DREG_OFF) {
		snprintf(why, whylen, "nvmf.host.rdma_device_reg is off");
		return NULL;
	}
	if (t->dreg != DREG_PEER) {
		uint64_t off;
		int fd;

		rc = gdx_device_export_dmabuf(dev, p, len, &fd, &off);
		if (rc) {
			n = snprintf(why, whylen, "dma-buf: the device exports none: %s",
				     gdx_strerror(rc));
		} else {
			mr = ibv_reg_dmabuf_mr(t->pd, off, len, (uintptr_t)p, fd, acc);
			rc = mr ? 0 : errno ? -errno : -EOPNOTSUPP;
			/* the MR holds its own reference to the buffer */
			close(fd);
			if (mr) {
				*how = "a dma-buf";
				return mr;
			}
			n = snprintf(why, whylen, "dma-buf: the NIC does not register it: %s",
				     gdx_strerror(rc));
		}
	}
	if (t->dreg != DREG_DMABUF) {
		void *va;

		rc = gdx_device_nic_addr(dev, p, len, &va);
		if (!rc) {
			mr = ibv_reg_mr_iova(t->pd, va, len, (uintptr_t)p, acc);
			if (mr) {
				*how = "peer memory";
				return mr;
			}
			rc = errno ? -errno : -EOPNOTSUPP;
		}
		snprintf(why + n, whylen - (size_t)n, "%speer memory: %s", n ? "; " : "",
			 gdx_strerror(rc));
	}
	return NULL;
}

/*
 * Whether the NIC registers the memory of dev, tried on a probe allocation;
 * where it cannot, why.  At connect: it calls the device.
 */
static bool probe_direct(struct nh_rdma *t, struct gdx_device *dev, char *why, size_t whylen)
{
	const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	const char *how;
	struct ibv_mr *mr;
	void *p;
	int rc;

	if (t->dreg == DREG_OFF)
		return reg_device(t, dev, NULL, 0, all, &how, why, whylen) != NULL;
	rc = gdx_device_malloc(dev, PROBE_LEN, &p);
	if (rc) {
		snprintf(why, whylen, "no device memory to try it on: %s", gdx_strerror(rc));
		return false;
	}
	mr = reg_device(t, dev, p, PROBE_LEN, all, &how, why, whylen);
	if (mr)
		ibv_dereg_mr(mr);
	gdx_device_free(dev, p);
	return mr != NULL;
}

/*
 * A read's copy has landed (err 0) or cannot (err): collected for
 * bounce_finish, which completes it once the lane's lock is dropped.
 */
static void bounce_ran(void *owner, void *effect, int err)
{
	struct nh_rdma *t = ((struct nh_queue *)owner)->rdma;
	struct bounce_done *d;

	if (!effect)
		return;
	d = &t->done[t->ndone++];
	memcpy(d, effect, sizeof(*d));
	d->err = err;
}

/* A lane of dir on ctx, its ring registered with the PD for the controller's RDMA. */
static int bounce_open(struct nh_queue *q, struct nh_rdma *t, struct gdx_stage_ctx *ctx,
		       enum gdx_stage_dir dir, struct bounce *b)
{
	const struct nh_params *p = &q->ctrl->p;
	struct gdx_stage_opts o;
	size_t size;
	void *ring;
	int rc;

	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.fault = GDX_STAGE_FAIL;
	o.chunk = p->bounce_chunk;
	/*
	 * A command is one piece of at most a chunk, placed whole: a ring of two
	 * chunks or more never shortens it (gdx_byte_ring_place).  Pieces are
	 * multiples of the block size, so they stay aligned without padding.
	 */
	o.chunks = GDX_MAX(2u, p->bounce_chunks);
	o.pieces = q->depth;	/* a slot holds at most one */
	if (dir == GDX_STAGE_H2D) {
		o.mode = nh_ctrl_stage_agent(ctx) ? GDX_STAGE_AGENT :
			 p->copy_word ? GDX_STAGE_WORD : GDX_STAGE_EVENTS;
		o.lane = q->qid - 1u;
		o.effect_size = sizeof(struct bounce_done);
		o.run = bounce_ran;
		o.owner = q;
	} else {
		/*
		 * A ring only: each submitter copies into its own piece before its
		 * command goes out, outside the lane's lock (nh_rdma_send)
		 */
		o.mode = GDX_STAGE_SYNC;
	}
	rc = gdx_stage_open(ctx, &o, &b->st);
	if (rc)
		return rc;
	ring = gdx_stage_ring(b->st, &size);
	b->mr = ibv_reg_mr(t->pd, ring, size, dir == GDX_STAGE_H2D ?
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE :
			   IBV_ACCESS_REMOTE_READ);
	return b->mr ? 0 : errno ? -errno : -ENOMEM;
}

/*
 * An I/O queue of a controller given a device: where the NIC cannot register
 * its memory, the bounce lanes (with require_direct, none: io.c refuses such
 * I/O naming why).  The controller keeps why and the largest bounced command
 * for io.c, and says it once.
 */
static int bounce_setup(struct nh_queue *q, struct nh_rdma *t)
{
	struct nh_ctrl *c = q->ctrl;
	const char *nic = ibv_get_device_name(t->id->verbs->device);
	struct gdx_stage_ctx *ctx;
	uint32_t max = 0;
	char why[200];
	bool direct, known;
	int rc = 0;

	/* the probe allocates device memory: once per controller and NIC */
	pthread_mutex_lock(&c->stage_lock);
	known = nic && !strcmp(c->rdma_probed, nic);
	direct = !c->rdma_nodirect;
	snprintf(why, sizeof(why), "%s", c->rdma_why);
	pthread_mutex_unlock(&c->stage_lock);
	if (!known) {
		direct = probe_direct(t, c->p.dev, why, sizeof(why));
		GDX_INFO(SUB, "queue %u: probed whether %s registers the memory of %s: %s", q->qid,
			 nic ? nic : "the NIC", gdx_device_name(c->p.dev), direct ? "it does" : why);
	}

	if (!direct && !c->p.require_direct) {
		rc = nh_ctrl_stage(c, c->p.dev, false, &ctx);
		if (!rc)
			rc = bounce_open(q, t, ctx, GDX_STAGE_H2D, &t->rd);
		if (!rc)
			rc = bounce_open(q, t, ctx, GDX_STAGE_D2H, &t->wr);
		t->done = rc ? NULL : calloc(q->depth, sizeof(*t->done));
		if (!rc && !t->done)
			rc = -ENOMEM;
		if (rc) {
			GDX_ERR(SUB, "queue %u: bounce rings on %s: %s", q->qid,
				gdx_device_name(c->p.dev), gdx_strerror(rc));
			return rc;
		}
		max = (uint32_t)GDX_MIN(t->rd.st->o.chunk, (size_t)UINT32_MAX);
	}
	pthread_mutex_lock(&c->stage_lock);
	if (!direct && !c->rdma_bounce_said)
		GDX_WARN(SUB, "%s: the NIC cannot register the memory of %s (%s): %s", c->p.subnqn,
			 gdx_device_name(c->p.dev), why, c->p.require_direct ?
			 "device memory I/O is refused (require_direct is set)" :
			 "device memory bounces through registered host memory: path bounce");
	c->rdma_bounce_said |= !direct;
	snprintf(c->rdma_why, sizeof(c->rdma_why), "%s", direct ? "" : why);
	snprintf(c->rdma_probed, sizeof(c->rdma_probed), "%s", nic ? nic : "");
	__atomic_store_n(&c->rdma_bounce_max, max, __ATOMIC_RELAXED);
	__atomic_store_n(&c->rdma_nodirect, !direct, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->stage_lock);
	return 0;
}

/*
 * Registers [p, p+len) of memory of kind a->kind; device memory through
 * reg_device, which says how.  The error is logged here.
 */
static int reg(struct nh_queue *q, struct gdx_device *dev, const struct gdx_ptr_attrs *a,
	       void *p, size_t len, int acc, struct ibv_mr **out)
{
	struct nh_rdma *t = q->rdma;
	const char *how = NULL;
	char why[200];
	int err;

	if (a->kind != GDX_MEM_DEVICE) {
		*out = ibv_reg_mr(t->pd, p, len, acc);
		if (*out)
			return 0;
		err = errno && errno != EIO ? -errno : -ENOMEM;
		GDX_ERR(SUB, "queue %u: registering %zu bytes at %p for RDMA: %s%s", q->qid, len, p,
			strerror(-err),
			err == -ENOMEM ? " (RLIMIT_MEMLOCK, ulimit -l, bounds what can be pinned)" : "");
		return err;
	}
	*out = reg_device(t, dev, p, len, acc, &how, why, sizeof(why));
	if (*out) {
		if (!atomic_exchange(&t->dev_told, true))
			GDX_INFO(SUB, "queue %u: the NIC reaches device memory through %s: path direct",
				 q->qid, how);
		return 0;
	}
	/*
	 * The rest of an I/O fails the same way: said once per queue.  A queue
	 * bounces only where its connect found the device's memory out of the
	 * NIC's reach, on the device named then.
	 */
	if (!atomic_exchange(&t->dev_failed, true))
		GDX_ERR(SUB, "queue %u: the NIC cannot register device memory at %p (%s); %s",
			q->qid, p, why,
			q->ctrl->p.require_direct ? "require_direct is set" :
			!q->ctrl->p.dev ? "a bounce through host memory needs the device named "
					  "at connect" :
			"the NIC registered that device's memory at connect, so this queue has "
			"no bounce ring");
	return GDX_ENOTDIRECT;
}

/*
 * The registration covering r's buffer, and the address the keyed SGL
 * names: the cache's for a pinned or device allocation (registered whole on
 * its first use, for either direction), a one-shot for plain host memory or
 * where the cache cannot hold it.  A read of at most a page of plain host
 * memory lands in the slot's page instead.
 */
static int data_get(struct nh_queue *q, struct nh_req *r, struct data_reg *d,
		    struct ibv_mr **mr, uint64_t *addr)
{
	struct nh_rdma *t = q->rdma;
	const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct gdx_ptr_attrs a;
	struct gdx_device *dev = gdx_device_of_ptr(r->buf, &a);
	struct cached_mr *c;
	struct gdx_reg *g;
	int rc;

	if (!dev)
		a.kind = GDX_MEM_HOST;
	*addr = (uintptr_t)r->buf;
	/*
	 * Registering a page and deregistering it again costs two system
	 * calls and a pin; copying it out of a page registered for good costs
	 * a memcpy.  Its response copies it (handle_wc).
	 */
	if (a.kind == GDX_MEM_HOST && t->inl && !r->write && r->len <= INLINE_MAX) {
		d->page = true;
		*mr = t->inl_mr;
		*addr = (uintptr_t)(t->inl + (size_t)(d - t->data) * INLINE_MAX);
		return 0;
	}
	if (t->rc && a.kind != GDX_MEM_HOST && a.base && a.size) {
		if (!gdx_regcache_lookup(t->rc, r->buf, r->len, &g)) {
			c = g->payload;
			if (c->buffer_id == a.buffer_id) {
				d->ref = g;
				*mr = c->mr;
				return 0;
			}
			/* freed behind gdx's back and allocated again at the address */
			gdx_regcache_remove(t->rc, (void *)g->start);
			gdx_regcache_put(t->rc, g);
		}
		c = malloc(sizeof(*c));
		if (!c)
			return -ENOMEM;
		c->buffer_id = a.buffer_id;
		rc = reg(q, dev, &a, a.base, a.size, all, &c->mr);
		if (rc) {
			free(c);
			return rc;
		}
		rc = gdx_regcache_insert(t->rc, a.base, a.size, c, &g);
		if (!rc) {
			d->ref = g;
			*mr = c->mr;
			return 0;
		}
		/* another sender cached it first, or it overlaps an older entry: one-shot */
		ibv_dereg_mr(c->mr);
		free(c);
	}
	rc = reg(q, dev, &a, r->buf, r->len,
		 r->write ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		 &d->mr);
	if (!rc)
		*mr = d->mr;
	return rc;
}

/*
 * A write in slot idx whose copy out of the device failed: never sent, it
 * fails now; its room, reserved in turn, goes back in turn.
 */
static void bounce_fail(struct nh_queue *q, unsigned idx, int err)
{
	struct nh_rdma *t = q->rdma;
	struct data_reg *d = &t->data[idx];
	struct bounce *b = d->b;

	pthread_mutex_lock(&b->lock);
	d->answered = true;
	gdx_stage_ready(b->st, &d->sp, NULL, NULL);
	pthread_cond_broadcast(&b->room);
	pthread_mutex_unlock(&b->lock);
	nh_queue_complete(q, &q->slots[idx], err);
}

/*
 * Reserves r's bytes in lane b for slot idx, behind every earlier
 * reservation.  Waits for room where the caller may, else -ENOBUFS; -EIO
 * once the queue is killed.
 */
static int bounce_reserve(struct nh_queue *q, struct bounce *b, unsigned idx, struct nh_req *r,
			  bool wait, struct gdx_stage_span *sp)
{
	struct nh_rdma *t = q->rdma;
	int rc;

	pthread_mutex_lock(&b->lock);
	while ((rc = gdx_stage_reserve(b->st, r->len, GDX_STAGE_NOWAIT, sp)) == -EAGAIN && wait &&
	       !atomic_load(&t->dead))
		pthread_cond_wait(&b->room, &b->lock);
	if (rc == -EAGAIN)
		rc = atomic_load(&t->dead) ? -EIO : -ENOBUFS;
	if (!rc)
		t->data[idx] = (struct data_reg){ .b = b, .sp = *sp, .devp = r->buf };
	pthread_mutex_unlock(&b->lock);
	return rc;
}

/*
 * 0; -EIO when the send cannot be posted (the queue must end); -ENOBUFS when
 * a bounce finds no ring room and !wait (nothing was sent); another negative
 * code when r's buffer cannot be registered or staged (r fails, the queue
 * goes on).
 */
int nh_rdma_send(struct nh_queue *q, unsigned idx, const struct gdx_nvme_sqe *sqe,
		 struct nh_req *r, bool wait)
{
	struct nh_rdma *t = q->rdma;
	struct gdx_nvme_sqe *c = &t->cmds[idx];
	struct ibv_sge *sge = &t->sges[2 * idx];
	struct ibv_send_wr *wr = &t->wrs[idx], *bad;
	struct data_reg *d = &t->data[idx];
	struct ibv_mr *mr = NULL;
	bool inl;
	int rc;

	*c = *sqe;
	c->flags = GDX_NVME_FLAGS_PSDT_SGL;
	sge[0] = (struct ibv_sge){ (uintptr_t)c, sizeof(*c), t->cmd_mr->lkey };
	*wr = (struct ibv_send_wr){ .wr_id = idx, .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	inl = t->inl && r->write && c->opc != GDX_NVME_OPC_FABRICS &&
	      r->len <= GDX_MIN(q->inline_max, INLINE_MAX);
	if (!r->len) {
		gdx_rdma_sgl_keyed(&c->dptr, 0, 0, 0, false);
	} else if (r->len > GDX_RDMA_KEYED_MAX_LEN) {
		return -EMSGSIZE;
	} else if (r->mem == NH_MEM_DEVICE && t->rd.st) {
		struct bounce *b = r->write ? &t->wr : &t->rd;
		struct gdx_stage_span sp;

		/* io.c splits bounced I/O at the chunk: a bigger command was built before */
		if (r->len > b->st->o.chunk) {
			GDX_ERR(SUB, "queue %u: a bounced command of %zu bytes, more than the "
				"ring's chunk (%zu, nvmf.host.bounce_chunk)", q->qid, r->len,
				b->st->o.chunk);
			return -EMSGSIZE;
		}
		rc = bounce_reserve(q, b, idx, r, wait, &sp);
		if (rc)
			return rc;
		gdx_counter_add(&q->cnt[NH_CNT_BOUNCED], 1);
		/*
		 * A write's bytes, out of the device into its own piece: outside
		 * the lane's lock, so that other submitters reserve and copy
		 * meanwhile; the room still goes back in reservation order.
		 */
		if (r->write) {
			rc = gdx_memcpy(q->ctrl->p.dev, sp.p, r->buf, r->len);
			if (rc) {
				bounce_fail(q, idx, rc);
				return 0;
			}
		}
		if (inl) {
			sge[1] = (struct ibv_sge){ (uintptr_t)sp.p, (uint32_t)r->len, b->mr->lkey };
			wr->num_sge = 2;
			gdx_rdma_sgl_inline(&c->dptr, (uint32_t)r->len);
		} else {
			gdx_rdma_sgl_keyed(&c->dptr, (uintptr_t)sp.p, (uint32_t)r->len, b->mr->rkey,
					   false);
		}
	} else if (inl) {
		uint8_t *page = t->inl + (size_t)idx * INLINE_MAX;

		if (r->mem == NH_MEM_DEVICE) {
			uint64_t addr;

			/* the NIC gathers it: the CPU does not read device memory */
			rc = data_get(q, r, d, &mr, &addr);
			if (rc)
				return rc;
			sge[1] = (struct ibv_sge){ (uintptr_t)r->buf, (uint32_t)r->len, mr->lkey };
		} else {
			memcpy(page, r->buf, r->len);
			sge[1] = (struct ibv_sge){ (uintptr_t)page, (uint32_t)r->len, t->inl_mr->lkey };
		}
		wr->num_sge = 2;
		gdx_rdma_sgl_inline(&c->dptr, (uint32_t)r->len);
	} else {
		uint64_t addr;

		rc = data_get(q, r, d, &mr, &addr);
		if (rc)
			return rc;
		gdx_rdma_sgl_keyed(&c->dptr, addr, (uint32_t)r->len, mr->rkey, false);
	}
	gdx_counter_add(&q->cnt[r->write ? NH_CNT_OUT : NH_CNT_IN], r->len);
	/* the receiver's own, from its completion callbacks: posted together after its pass */
	if (nh_queue_rx_self() == q) {
		*t->chain_tail = wr;
		t->chain_tail = &wr->next;
		return 0;
	}
	if (ibv_post_send(t->id->qp, wr, &bad)) {
		data_put(t, d);
		return -EIO;
	}
	return 0;
}

void nh_rdma_slot_done(struct nh_queue *q, unsigned idx)
{
	struct nh_rdma *t = q->rdma;

	if (t)
		data_put(t, &t->data[idx]);
}

void nh_rdma_kill(struct nh_queue *q)
{
	struct nh_rdma *t = q->rdma;
	uint64_t one = 1;

	if (!t)
		return;
	rdma_disconnect(t->id);
	if (write(t->killfd, &one, sizeof(one)) < 0)
		GDX_DBG(SUB, "queue %u: kill: %s", q->qid, strerror(errno));
	/* submitters waiting for ring room give up (under the lock: none misses it) */
	atomic_store(&t->dead, true);
	for (struct bounce *b = &t->rd; b <= &t->wr; b++) {
		pthread_mutex_lock(&b->lock);
		pthread_cond_broadcast(&b->room);
		pthread_mutex_unlock(&b->lock);
	}
}

/*
 * The response to a bounced command in slot idx: its piece is ready.  A
 * read's copy into the device is posted once every earlier piece's was
 * (gdx_stage_ready), its completion deferred on it; a failed read is copied
 * too (its buffer holds undefined bytes, as after a failed DMA), its room
 * coming back with its own mark.  A write is ready at once, its room going
 * back in turn.  0, or the lane's error (the queue ends).
 */
static int bounce_answer(struct nh_queue *q, unsigned idx, uint16_t status, uint64_t result)
{
	struct nh_rdma *t = q->rdma;
	struct data_reg *d = &t->data[idx];
	struct bounce *b = d->b;
	struct bounce_done done = { .idx = idx, .status = status, .result = result };
	int rc;

	pthread_mutex_lock(&b->lock);
	/* a read's slot is still taken while held or copied: a second response finds it */
	if (d->answered) {
		pthread_mutex_unlock(&b->lock);
		GDX_ERR(SUB, "queue %u: a second response for command id %#x", q->qid,
			q->slots[idx].cid);
		return GDX_EPROTO;
	}
	d->answered = true;
	if (b == &t->wr) {
		rc = gdx_stage_ready(b->st, &d->sp, NULL, NULL);
		t->done[t->ndone++] = done;
	} else {
		rc = gdx_stage_ready(b->st, &d->sp, d->devp, &done);
	}
	if (rc == 1)
		gdx_counter_add(&q->cnt[NH_CNT_HELD], 1);
	pthread_mutex_unlock(&b->lock);
	return rc < 0 ? rc : 0;
}

/*
 * Completes the bounced commands whose data is in place (t->done), outside
 * the lanes' locks: their callbacks may submit again.  Their room is back:
 * submitters waiting for it try again.
 */
static void bounce_finish(struct nh_queue *q)
{
	struct nh_rdma *t = q->rdma;

	if (!t->ndone)
		return;
	for (struct bounce *b = &t->rd; b <= &t->wr; b++) {
		pthread_mutex_lock(&b->lock);
		pthread_cond_broadcast(&b->room);
		pthread_mutex_unlock(&b->lock);
	}
	for (unsigned i = 0; i < t->ndone; i++) {
		const struct bounce_done *d = &t->done[i];

		if (d->err)
			nh_queue_complete(q, &q->slots[d->idx], d->err);
		else
			nh_queue_complete_cqe(q, &q->slots[d->idx], d->status, d->result);
	}
	t->ndone = 0;
}

void nh_rdma_reap(struct nh_queue *q)
{
	struct nh_rdma *t = q->rdma;

	if (!t || !t->rd.st)
		return;
	/* the copies posted land (or fail) and their reads complete; the rest go back */
	pthread_mutex_lock(&t->rd.lock);
	gdx_stage_drain(t->rd.st, GDX_EDRIVER);
	pthread_mutex_unlock(&t->rd.lock);
	bounce_finish(q);
}

/*
 * One work completion, a response's copied out to cqe; 0 to go on, or why
 * the queue ends.
 */
static int handle_wc(struct nh_queue *q, const struct ibv_wc *wc, const struct gdx_nvme_cqe *cqe)
{
	struct nh_rdma *t = q->rdma;
	struct nh_slot *s;

	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			GDX_WARN(SUB, "queue %u: %s", q->qid, ibv_wc_status_str(wc->status));
		return GDX_EDISCONNECTED;
	}
	if (!(wc->wr_id & WR_RECV))
		return 0;
	if (wc->byte_len < sizeof(*cqe)) {
		GDX_ERR(SUB, "queue %u: a response of %u bytes", q->qid, wc->byte_len);
		return GDX_EPROTO;
	}
	s = nh_queue_find_slot(q, cqe->cid);
	if (!s) {
		GDX_ERR(SUB, "queue %u: response for unknown command id %#x", q->qid, cqe->cid);
		return GDX_EPROTO;
	}
	if (t->data[s - q->slots].b)
		return bounce_answer(q, (unsigned)(s - q->slots), (uint16_t)(cqe->status >> 1),
				     cqe->result);
	/* a failed read's bytes are undefined, as after a failed DMA: copied all the same */
	if (t->data[s - q->slots].page)
		memcpy(s->req->buf, t->inl + (size_t)(s - q->slots) * INLINE_MAX, s->req->len);
	nh_queue_complete_cqe(q, s, (uint16_t)(cqe->status >> 1), cqe->result);
	return 0;
}

/*
 * Handles what the CQ holds, 16 completions at a time, and posts the sends
 * their callbacks made after each 16; *found: how many there were.
 */
static int poll_cq(struct nh_queue *q, unsigned *found)
{
	struct nh_rdma *t = q->rdma;
	struct ibv_wc wc[16];
	struct gdx_nvme_cqe cqe[16];
	int n, rc = 0;

	*found = 0;
	do {
		struct ibv_recv_wr *head = NULL, **tail = &head, *bad;

		n = ibv_poll_cq(t->cq, (int)GDX_ARRAY_SIZE(wc), wc);
		if (n < 0)
			return GDX_EDISCONNECTED;
		*found += (unsigned)n;
		/*
		 * The responses are copied out and their buffers posted again, in
		 * one chain, before any command completes: there is a receive for
		 * every command its callback sends.
		 */
		for (int i = 0; i < n; i++) {
			unsigned k = (unsigned)(wc[i].wr_id & 0xffffffffu);

			if (wc[i].status != IBV_WC_SUCCESS || !(wc[i].wr_id & WR_RECV))
				continue;
			cqe[i] = t->rsps[k];
			*tail = &t->rwrs[k];
			tail = &t->rwrs[k].next;
		}
		*tail = NULL;
		if (head && ibv_post_recv(t->id->qp, head, &bad))
			return GDX_EDISCONNECTED;
		for (int i = 0; i < n && !rc; i++)
			rc = handle_wc(q, &wc[i], &cqe[i]);
		bounce_finish(q);
		if (!rc)
			rc = flush_sends(q);
	} while (!rc && n == (int)GDX_ARRAY_SIZE(wc));
	return rc;
}

/*
 * Polls the CQ until the clock reaches until, read once in 16 polls (a
 * system call where the clock source is emulated), before the receiver
 * sleeps: a sleeping receiver is woken per completion, and on a virtual
 * machine whose idle vCPUs halt that wake-up costs more than the command
 * (128 KiB reads over rxe in the TCG guest: the guest idle 9-11 ms per read;
 * polling 2 ms: 1 ms, and 3x the reads).  *found as poll_cq's.
 */
static int poll_cq_until(struct nh_queue *q, uint64_t until, unsigned *found)
{
	int rc;

	*found = 0;
	for (unsigned i = 1; !atomic_load(&q->rdma->dead); i++) {
		rc = poll_cq(q, found);
		if (rc || *found)
			return rc;
		gdx_cpu_relax();
		if (!(i % 16) && gdx_now_ns() >= until)
			break;
	}
	return 0;
}

/* gdx_stage_wait_idle's input: 1 when the receiver has something to handle. */
static int rx_ready(void *arg)
{
	struct pollfd *p = arg;
	int n = poll(p, 3, 0);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	return n > 0;
}

int nh_rdma_rx_loop(struct nh_queue *q)
{
	struct nh_rdma *t = q->rdma;
	struct pollfd p[3] = {
		{ .fd = t->cc->fd, .events = POLLIN },
		{ .fd = t->ch->fd, .events = POLLIN },
		{ .fd = t->killfd, .events = POLLIN },
	};

	for (;;) {
		struct ibv_cq *cq;
		unsigned found;
		void *ctx;
		int rc;

		if (atomic_load(&t->dead))
			return GDX_EDISCONNECTED;
		rc = poll_cq(q, &found);
		if (rc)
			return rc;
		/*
		 * Completions came: the CQ is looked at again before the receiver
		 * asks for its next event (a system call on rxe) and sleeps.  Once
		 * asked, it is looked at once more, for a completion that came
		 * before the asking and raised no event.
		 */
		if (found) {
			t->evented |= t->armed;
			/* and the bounced reads whose copies landed meanwhile complete */
			if (t->rd.st && gdx_stage_busy(t->rd.st)) {
				pthread_mutex_lock(&t->rd.lock);
				rc = gdx_stage_progress(t->rd.st);
				pthread_mutex_unlock(&t->rd.lock);
				bounce_finish(q);
				if (!rc)
					rc = flush_sends(q);
				if (rc)
					return rc;
			}
			continue;
		}
		if (!t->armed) {
			if (ibv_req_notify_cq(t->cq, 0))
				return GDX_EDISCONNECTED;
			t->armed = true;
			continue;
		}
		/*
		 * Completions found while armed raised the CQ's event: taken here
		 * without a sleep, or, not delivered yet, by the sleep below at
		 * once; polling for it would spin a window for nothing.
		 */
		if (t->evented && !ibv_get_cq_event(t->cc, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			t->armed = false;
			t->evented = false;
			continue;
		}
		/*
		 * Bounced reads whose copies are in flight complete once those
		 * land, which the lane's wait below sees and a CQ poll does not.
		 */
		bool copying = t->rd.st && gdx_stage_busy(t->rd.st);

		/*
		 * Armed, then polled: a completion the polling finds has raised an
		 * event too (taken above); one that comes after the polling gave up
		 * wakes the receiver.  The window starts at 0, so a queue whose
		 * completions come further apart than the cap never spins; the
		 * first sleep shorter than the cap sizes it.
		 */
		if (q->ctrl->p.rdma_poll_ns) {
			t->idle_since = gdx_now_ns();
			if (t->poll_ns && !t->evented && !copying) {
				rc = poll_cq_until(q, t->idle_since + t->poll_ns, &found);
				if (rc)
					return rc;
				if (found) {
					gdx_counter_add(&q->cnt[NH_CNT_CQ_POLLED], 1);
					t->evented = true;
					continue;
				}
			}
		}
		/*
		 * Bounced reads wait for their copies: the lane polls them and the
		 * queue's descriptors in turn, and the receiver blocks only once
		 * they landed (or something came in).
		 */
		if (copying) {
			pthread_mutex_lock(&t->rd.lock);
			rc = gdx_stage_wait_idle(t->rd.st, rx_ready, p, q->ctrl->p.copy_poll_ns);
			pthread_mutex_unlock(&t->rd.lock);
			bounce_finish(q);
			if (rc >= 0)
				rc = flush_sends(q);
			if (rc < 0)
				return rc;
		}
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		/*
		 * A sleep's length, from the CQ found empty to the event, sizes the
		 * next window; a completion caught polling leaves it as it is.
		 */
		if (q->ctrl->p.rdma_poll_ns && (p[0].revents & POLLIN) && !t->evented)
			t->poll_ns = gdx_poll_adapt(t->poll_ns, gdx_now_ns() - t->idle_since,
						    q->ctrl->p.rdma_poll_ns);
		if (p[2].revents)
			return GDX_EDISCONNECTED;
		if (p[1].revents) {
			struct rdma_cm_event *ev;

			while (!rdma_get_cm_event(t->ch, &ev)) {
				enum rdma_cm_event_type type = ev->event;

				rdma_ack_cm_event(ev);
				if (type == RDMA_CM_EVENT_DISCONNECTED ||
				    type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
					GDX_INFO(SUB, "queue %u: %s", q->qid, rdma_event_str(type));
					return GDX_EDISCONNECTED;
				}
			}
		}
		/* the CQ raises one event per asking */
		if ((p[0].revents & POLLIN) && !ibv_get_cq_event(t->cc, &cq, &ctx)) {
			ibv_ack_cq_events(cq, 1);
			if (!t->evented)
				gdx_counter_add(&q->cnt[NH_CNT_CQ_SLEPT], 1);
			t->armed = false;
			t->evented = false;
		}
	}
}

void nh_rdma_close(struct nh_queue *q)
{
	if (q->rdma)
		GDX_DBG(SUB, "queue %u: completions found %llu times polling the CQ, %llu times "
			"after a sleep; poll window %llu us", q->qid,
			(unsigned long long)gdx_counter_get(&q->cnt[NH_CNT_CQ_POLLED]),
			(unsigned long long)gdx_counter_get(&q->cnt[NH_CNT_CQ_SLEPT]),
			(unsigned long long)(q->rdma->poll_ns / 1000));
	if (q->rdma && q->rdma->rd.st)
		GDX_INFO(SUB, "queue %u: %llu commands bounced, %llu of them answered before an "
			 "earlier one", q->qid,
			 (unsigned long long)gdx_counter_get(&q->cnt[NH_CNT_BOUNCED]),
			 (unsigned long long)gdx_counter_get(&q->cnt[NH_CNT_HELD]));
	rdma_free(q->rdma, q->depth);
	q->rdma = NULL;
}
