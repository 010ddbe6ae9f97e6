/* SPDX-License-Identifier: MIT */
/*
 * One NVMe/TCP queue: a TCP connection, its command slots, a receiver thread
 * that parses every controller PDU by its lengths and places C2H data straight
 * into the destination (host memory) or through a ring of pinned chunks whose
 * H2D copies overlap the next receive (device memory).  Anything malformed
 * ends the connection with an H2CTermReq; the receiver never writes outside
 * the buffer of the command the data belongs to.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cpus.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/util.h"
#include "gpu/device.h"
#include "common/crc32c.h"
#include "nvmf/host/host.h"

#define SUB "nvmf-host"
#define CID_IDX_BITS 10
#define CID_IDX_MASK ((1u << CID_IDX_BITS) - 1)
#define NH_MAX_DEPTH (1u << CID_IDX_BITS)

/* Set on receiver threads: they never set a queue's device side up. */
static __thread bool in_rx;
/*
 * Set on receiver threads and the control thread: they queue instead of
 * waiting for a free slot (a receiver may be the one that frees them; the
 * control thread must go on timing the queues out).
 */
static __thread bool no_wait;
/* the queue whose receiver runs on this thread */
static __thread struct nh_queue *rx_self;

struct nh_queue *nh_queue_rx_self(void)
{
	return rx_self;
}

void nh_queue_never_wait(void)
{
	no_wait = true;
}

static const char *const cnt_names[] = { "cmds", "bytes_in", "bytes_out", "errors",
					 "queued_full", "timeouts", "h2d_copies", "copy_calls",
					 "event_records", "dev_queries", "dev_waits", "ring_full",
					 "lat_reads", "lat_sent_ns", "lat_data_ns", "lat_post_ns",
					 "lat_land_ns", "lat_queue_ns", "lat_cb_ns", "lat_releases",
					 "bounced", "bounce_held", "cq_polled", "cq_slept" };
_Static_assert(GDX_ARRAY_SIZE(cnt_names) == NH_CNT_CQ_SLEPT + 1, "a name per counter");

/* ---- socket helpers ------------------------------------------------------- */

/*
 * Receives exactly the bytes the iovecs describe (modifies them); SO_RCVTIMEO's
 * timeout (the connect's, on reads of a few bytes) is -ETIMEDOUT.  A large
 * payload is waited for whole, not a segment at a time (gdx_recv_full), but
 * under kTLS.
 */
static int recv_iov_full(struct nh_queue *q, struct iovec *iov, int n)
{
	int rc = gdx_recv_full(q->fd, iov, n, !q->ctrl->p.tls);

	return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

static int recv_full(struct nh_queue *q, void *buf, size_t n)
{
	struct iovec v = { buf, n };

	return recv_iov_full(q, &v, 1);
}

static int tcp_connect(const char *addr, const char *svc, unsigned timeout_ms, int *out)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	int rc, fd = -1, err = -ECONNREFUSED;

	rc = getaddrinfo(addr, svc, &hints, &res);
	if (rc) {
		GDX_ERR(SUB, "cannot resolve %s:%s: %s", addr, svc, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		struct pollfd pfd;
		int one = 1, soerr = 0;
		socklen_t sl = sizeof(soerr);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
			err = -errno;
			goto next;
		}
		pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
		rc = poll(&pfd, 1, (int)timeout_ms);
		if (rc <= 0) {
			err = rc ? -errno : -ETIMEDOUT;
			goto next;
		}
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			err = -soerr;
			goto next;
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		freeaddrinfo(res);
		*out = fd;
		return 0;
next:
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return err;
}

/*
 * TLS 1.3 on a connected queue socket, bounded by the connect timeout; the
 * kernel (kTLS) or a relay thread (tls.h) then holds the record layer and the
 * queue sends and receives on fd as in clear.
 */
static int tls_connect(struct nh_ctrl *c, uint16_t qid, int fd)
{
	struct gdx_tls_psk psk = { .hash = 0 };
	struct gdx_tls_hs *hs = NULL;
	int rc = gdx_tls_nvme_psk(&c->p.tls_key, c->p.tls_identity, c->p.hostnqn, c->p.subnqn,
				  &psk);

	if (!rc)
		rc = gdx_tls_client_start(fd, &psk, &hs);
	if (!rc)
		rc = gdx_tls_run(hs, c->p.connect_timeout_ms);
	if (rc)
		GDX_ERR(SUB, "queue %u: TLS handshake with %s:%s as '%s': %s", qid, c->p.addr,
			c->p.svc, psk.identity, rc == -EKEYREJECTED ? "the PSK was refused" :
			strerror(-rc));
	gdx_tls_free(hs);
	gdx_tls_wipe(&psk, sizeof(psk));
	return rc;
}

static void set_rcvtimeo(int fd, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* ---- memory --------------------------------------------------------------- */

int nh_queue_init_mem(struct nh_queue *q, unsigned depth)
{
	if (!depth || depth > NH_MAX_DEPTH)
		return -EINVAL;
	pthread_mutex_init(&q->lock, NULL);
	pthread_mutex_init(&q->send_lock, NULL);
	pthread_mutex_init(&q->dev_lock, NULL);
	pthread_cond_init(&q->slot_cv, NULL);
	q->depth = depth;
	q->fd = -1;
	q->slots = calloc(depth, sizeof(*q->slots));
	q->free_idx = calloc(depth, sizeof(*q->free_idx));
	if (!q->slots || !q->free_idx)
		return -ENOMEM;
	for (unsigned i = 0; i < depth; i++)
		q->free_idx[i] = (uint16_t)(depth - 1 - i);
	q->nfree = depth;
	q->backlog_tail = &q->backlog;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(q->cnt); i++)
		q->cnt[i].name = cnt_names[i];
	return 0;
}

static void free_dev(struct nh_queue *q)
{
	gdx_stage_close(q->rx_st);
	gdx_stage_close(q->tx_st);
	q->rx_st = q->tx_st = NULL;
	/* submitters read it without dev_lock */
	__atomic_store_n(&q->dev, NULL, __ATOMIC_RELAXED);
}

void nh_queue_free_mem(struct nh_queue *q)
{
	free_dev(q);
	free(q->slots);
	free(q->free_idx);
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->send_lock);
	pthread_mutex_destroy(&q->dev_lock);
	pthread_cond_destroy(&q->slot_cv);
}

static void held_run(void *owner, void *effect, int err);
static void held_enqueued(void *owner, void *effect);

/*
 * The receive lane: nchunks chunks of ring on the controller's staging
 * context for dev, its copies through the agent's ring qid - 1 (I/O queues,
 * where the context has an agent), else the queue's stream with a done word
 * or events; and the one-chunk transmit lane.  q->dev is set last: a
 * submitter that sees it finds the rest in place.
 */
int nh_queue_init_dev(struct nh_queue *q, struct gdx_device *dev)
{
	const struct nh_params *p = &q->ctrl->p;
	struct gdx_stage_ctx *ctx;
	struct gdx_stage_opts o;
	int rc;

	/* a connection opened without opts.dev sets it up here, at its first device I/O */
	rc = nh_ctrl_stage(q->ctrl, dev, dev != p->dev, &ctx);
	if (rc)
		goto fail;
	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = GDX_STAGE_H2D;
	o.mode = q->qid && nh_ctrl_stage_agent(ctx) ? GDX_STAGE_AGENT :
		 p->copy_word ? GDX_STAGE_WORD : GDX_STAGE_EVENTS;
	o.fault = GDX_STAGE_FAIL;
	o.chunk = p->bounce_chunk;
	o.chunks = p->bounce_chunks;
	o.batch = p->copy_batch;
	o.lane = q->qid ? q->qid - 1u : 0;
	o.effect_size = sizeof(struct nh_req *);
	o.run = held_run;
	o.enqueued = p->lat_stats ? held_enqueued : NULL;
	o.owner = q;
	rc = gdx_stage_open(ctx, &o, &q->rx_st);
	if (rc)
		goto fail;
	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = GDX_STAGE_D2H;
	o.mode = GDX_STAGE_SYNC;
	o.chunk = p->bounce_chunk;
	rc = gdx_stage_open(ctx, &o, &q->tx_st);
	if (rc)
		goto fail;
	__atomic_store_n(&q->dev, dev, __ATOMIC_RELEASE);
	return 0;
fail:
	GDX_ERR(SUB, "queue %u: bounce ring on %s: %s", q->qid, gdx_device_name(dev),
		gdx_strerror(rc));
	free_dev(q);
	return rc;
}

/*
 * The device side of a queue whose connection was opened without a device,
 * set up at its first device-memory request, on the submitting thread and
 * outside q->lock: the set-up calls the device (the ring's pinned memory, a
 * stream, events, the copy agent's start, which loads its module), and a
 * stream-ordered submission's worker takes q->lock to send while its stream
 * may hold up such a call (CUDA synchronizes the context in some, as at a
 * module load): under q->lock that is a deadlock.
 */
static int queue_dev_ready(struct nh_queue *q, const void *buf)
{
	struct gdx_device *dev;
	int rc = 0;

	if (__atomic_load_n(&q->dev, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&q->dev_lock);
	if (!q->dev) {
		dev = q->ctrl->p.dev;
		if (!dev) {
			struct gdx_ptr_attrs a;

			dev = gdx_device_of_ptr(buf, &a);
		}
		rc = dev ? nh_queue_init_dev(q, dev) : GDX_EBADPTR;
	}
	pthread_mutex_unlock(&q->dev_lock);
	return rc;
}

/* ---- connection setup ----------------------------------------------------- */

static int icreq(struct nh_queue *q, unsigned timeout_ms)
{
	struct gdx_tcp_params ic = { 0 };
	struct gdx_tcp_icreq req;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;
	union gdx_tcp_pdu rsp;
	struct iovec iov = { &req, sizeof(req) };
	uint8_t dgst;
	int rc;

	/* HPDA 0 (data right after the header, as nvmet requires), MAXR2T 0 */
	gdx_tcp_icreq_init(&req, q->tp.hdgst, q->tp.ddgst, 0);
	dgst = req.dgst;
	set_rcvtimeo(q->fd, timeout_ms);
	rc = gdx_send_full(q->fd, &iov, 1);
	if (!rc)
		rc = recv_full(q, &rsp, sizeof(rsp.ch));
	if (!rc && !gdx_tcp_hdr_len(&rsp.ch, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_IC, &ic, &err)) {
		GDX_ERR(SUB, "queue %u: expected ICResp, got %s: %s", q->qid,
			gdx_tcp_pdu_type_str(rsp.ch.type), err.why);
		return GDX_EPROTO;
	}
	if (!rc)
		rc = recv_full(q, rsp.raw + sizeof(rsp.ch), sizeof(rsp.icresp) - sizeof(rsp.ch));
	set_rcvtimeo(q->fd, 0);
	if (rc) {
		GDX_ERR(SUB, "queue %u: ICReq/ICResp: %s", q->qid, gdx_strerror(rc));
		return rc;
	}
	if (gdx_tcp_pdu_check(&rsp, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_IC, &ic, 0, &info, &err)) {
		GDX_ERR(SUB, "queue %u: ICResp refused: %s", q->qid, err.why);
		return GDX_EPROTO;
	}
	/* like the Linux host: the controller must grant exactly the digests asked for */
	if (rsp.icresp.dgst != dgst) {
		GDX_ERR(SUB, "queue %u: ICResp digests %#x, asked for %#x", q->qid, rsp.icresp.dgst,
			dgst);
		return GDX_EPROTO;
	}
	q->tp.maxh2cdata = rsp.icresp.maxdata;
	q->tp.cpda = 0;
	return 0;
}

int nh_queue_open(struct nh_ctrl *c, uint16_t qid, unsigned depth, struct nh_queue **out)
{
	struct nh_queue *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->ctrl = c;
	q->qid = qid;
	q->rx_cpu = -1;
	q->tp.hdgst = c->p.hdgst;
	q->tp.ddgst = c->p.ddgst;
	q->inline_max = 8192;	/* admin and fabrics commands; I/O queues use IOCCSZ */
	rc = nh_queue_init_mem(q, depth);
	if (rc)
		goto fail;
	if (c->p.rdma) {
		rc = nh_rdma_open(q, c->p.connect_timeout_ms);
		if (rc)
			goto fail;
		*out = q;
		return 0;
	}
	rc = tcp_connect(c->p.addr, c->p.svc, c->p.connect_timeout_ms, &q->fd);
	if (rc) {
		/* the caller says whether this is fatal (first connect) or expected (reconnect) */
		GDX_INFO(SUB, "queue %u: connect to %s:%s: %s", qid, c->p.addr, c->p.svc,
			 gdx_strerror(rc));
		goto fail;
	}
	if (c->p.tls && (rc = tls_connect(c, qid, q->fd)))
		goto fail;
	rc = icreq(q, c->p.connect_timeout_ms);
	if (rc)
		goto fail;
	if (c->p.dev) {
		rc = nh_queue_init_dev(q, c->p.dev);
		if (rc)
			goto fail;
	}
	*out = q;
	return 0;
fail:
	if (q->fd >= 0)
		close(q->fd);
	nh_queue_free_mem(q);
	free(q);
	return rc;
}

/* ---- sending -------------------------------------------------------------- */

/*
 * Sends one PDU whose header (digest included, hl bytes) the proto encoder
 * built, then its data from buf (host memory, or device memory staged
 * through the transmit chunk) and the data digest.  Caller holds send_lock.
 */
static int send_pdu(struct nh_queue *q, union gdx_tcp_pdu *pdu, uint32_t hl, const void *buf,
		    size_t n, enum nh_mem mem)
{
	uint32_t dd = 0;
	struct iovec iov[3];
	int k = 0, rc;

	iov[k++] = (struct iovec){ pdu, hl };
	if (!n)
		return gdx_send_full(q->fd, iov, k);
	if (mem != NH_MEM_DEVICE) {
		iov[k++] = (struct iovec){ (void *)(uintptr_t)buf, n };
		if (q->tp.ddgst) {
			dd = gdx_crc32c(buf, n);
			iov[k++] = (struct iovec){ &dd, sizeof(dd) };
		}
		rc = gdx_send_full(q->fd, iov, k);
	} else {
		rc = gdx_send_full(q->fd, iov, k);
		for (size_t off = 0; !rc && off < n;) {
			struct gdx_stage_span sp;
			struct iovec d;

			/* one chunk at a time, each given back once sent: never full */
			rc = gdx_stage_reserve(q->tx_st, n - off, GDX_STAGE_NOWAIT, &sp);
			if (!rc)
				rc = gdx_stage_post(q->tx_st, &sp, (char *)(uintptr_t)buf + off);
			if (rc)
				break;
			if (q->tp.ddgst)
				dd = gdx_crc32c_update(dd, sp.p, sp.n);
			d = (struct iovec){ sp.p, sp.n };
			rc = gdx_send_full(q->fd, &d, 1);
			gdx_stage_release(q->tx_st, sp.end);
			off += sp.n;
		}
		if (!rc && q->tp.ddgst) {
			struct iovec d = { &dd, sizeof(dd) };

			rc = gdx_send_full(q->fd, &d, 1);
		}
	}
	if (!rc)
		gdx_counter_add(&q->cnt[NH_CNT_OUT], n);
	return rc;
}

void nh_queue_kill(struct nh_queue *q, int err)
{
	pthread_mutex_lock(&q->lock);
	if (q->state == NH_Q_LIVE) {
		q->state = NH_Q_DEAD;
		q->err = err;
	}
	pthread_cond_broadcast(&q->slot_cv);
	pthread_mutex_unlock(&q->lock);
	if (q->fd >= 0)
		shutdown(q->fd, SHUT_RDWR);
	nh_rdma_kill(q);
}

/*
 * Takes a free slot and sends r; with !wait, -EAGAIN when there is none.  A
 * thread that must not wait (no_wait) puts r on the backlog instead, which
 * the receiver sends as slots free up.  -EPIPE once the queue is dead.
 */
static int queue_send(struct nh_queue *q, struct nh_req *r, bool wait)
{
	union gdx_tcp_pdu pdu;
	struct gdx_nvme_sqe sqe;
	struct nh_slot *s;
	bool inl;
	unsigned idx;
	uint32_t hl;
	int rc;

	pthread_mutex_lock(&q->lock);
	while (q->state == NH_Q_LIVE && !q->nfree) {
		if (!wait) {
			pthread_mutex_unlock(&q->lock);
			return -EAGAIN;
		}
		gdx_counter_add(&q->cnt[NH_CNT_FULL], 1);
		if (no_wait) {
			r->next = NULL;
			*q->backlog_tail = r;
			q->backlog_tail = &r->next;
			pthread_mutex_unlock(&q->lock);
			return 0;
		}
		pthread_cond_wait(&q->slot_cv, &q->lock);
	}
	if (q->state != NH_Q_LIVE) {
		pthread_mutex_unlock(&q->lock);
		return -EPIPE;
	}
	idx = q->free_idx[--q->nfree];
	s = &q->slots[idx];
	s->cid = (uint16_t)((((s->cid >> CID_IDX_BITS) + 1) << CID_IDX_BITS) | idx);
	s->req = r;
	s->xfered = 0;
	s->ddgst_err = false;
	s->deadline = gdx_now_ns() + r->timeout_ns;
	r->ring_end = 0;	/* ring positions of an earlier attempt on another queue mean nothing here */
	/* changed under q->lock, read without it to pick a queue and to choose quick ACKs */
	__atomic_store_n(&q->inflight, q->inflight + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&q->lock);

	if (q->rdma) {
		sqe = r->sqe;
		sqe.cid = s->cid;
		r->t_sent = r->t_sub ? gdx_now_ns() : 0;
		r->t_data = r->t_post = 0;
		rc = nh_rdma_send(q, idx, &sqe, r, wait && !no_wait);
		if (!rc) {
			gdx_counter_add(&q->cnt[NH_CNT_CMDS], 1);
			return 0;
		}
		if (rc == -EIO) {
			/* the slot stays taken: tearing the queue down hands r back exactly once */
			GDX_WARN(SUB, "queue %u: send: %s", q->qid, gdx_strerror(rc));
			nh_queue_kill(q, rc);
			return 0;
		}
		/* not sent: the slot goes back */
		pthread_mutex_lock(&q->lock);
		s->req = NULL;
		q->free_idx[q->nfree++] = (uint16_t)idx;
		__atomic_store_n(&q->inflight, q->inflight - 1, __ATOMIC_RELAXED);
		pthread_cond_signal(&q->slot_cv);
		/*
		 * No bounce ring room, and this thread may not wait for it: r
		 * waits in the backlog for a completion to send it, as for a
		 * slot.  Ring room is held only by commands in slots (a read's
		 * until its copy landed), so with none in flight the ring is
		 * empty and r goes again at once.
		 */
		if (rc == -ENOBUFS && wait && q->inflight) {
			r->next = NULL;
			*q->backlog_tail = r;
			q->backlog_tail = &r->next;
			gdx_counter_add(&q->cnt[NH_CNT_FULL], 1);
			pthread_mutex_unlock(&q->lock);
			return 0;
		}
		pthread_mutex_unlock(&q->lock);
		if (rc == -ENOBUFS)
			return wait ? queue_send(q, r, wait) : -EAGAIN;
		/* the buffer cannot be registered or staged: r fails, the queue goes on */
		return rc;
	}
	inl = r->write && r->len && r->len <= q->inline_max;
	sqe = r->sqe;
	sqe.cid = s->cid;
	sqe.flags = GDX_NVME_FLAGS_PSDT_SGL;
	/* SGL1: in-capsule (offset 0) or transport (C2HData / R2T+H2CData) */
	memset(&sqe.dptr, 0, sizeof(sqe.dptr));
	sqe.dptr.length = (uint32_t)r->len;
	sqe.dptr.type = inl ? GDX_NVME_SGL_DATA_BLOCK_OFFSET : GDX_NVME_SGL_TRANSPORT;
	hl = gdx_tcp_cmd_init(&pdu, &sqe, inl ? (uint32_t)r->len : 0, &q->tp);
	gdx_counter_add(&q->cnt[NH_CNT_CMDS], 1);
	pthread_mutex_lock(&q->send_lock);
	/* before the send: the receiver may see the data before send_pdu returns */
	r->t_sent = r->t_sub ? gdx_now_ns() : 0;
	r->t_data = r->t_post = 0;
	rc = send_pdu(q, &pdu, hl, inl ? r->buf : NULL, inl ? r->len : 0, r->mem);
	pthread_mutex_unlock(&q->send_lock);
	if (rc) {
		/* the slot stays taken: tearing the queue down hands r back exactly once */
		GDX_WARN(SUB, "queue %u: send: %s", q->qid, gdx_strerror(rc));
		nh_queue_kill(q, rc);
	}
	return 0;
}

int nh_queue_submit(struct nh_queue *q, struct nh_req *r, bool wait)
{
	int rc;

	/*
	 * A device read's queue has its device side set up by the submitting
	 * thread (queue_dev_ready), never by a receiver, whose callbacks also
	 * submit: the agent's start loads its module, which on CUDA may
	 * synchronise the context while a stream waits for a completion only a
	 * receiver delivers.  A receiver hands such a read to the control thread
	 * (NH_SUBMIT_DEFER).  What sits in the backlog was set up before it was
	 * queued, so sending it later never sets anything up.
	 */
	/* over RDMA the NIC moves device memory itself, or connect set its bounce up */
	if (r->mem == NH_MEM_DEVICE && !q->rdma && !__atomic_load_n(&q->dev, __ATOMIC_ACQUIRE)) {
		if (in_rx)
			return NH_SUBMIT_DEFER;
		rc = queue_dev_ready(q, r->buf);
		if (rc)
			return rc;
	}
	return queue_send(q, r, wait);
}

/* ---- receiving ------------------------------------------------------------ */

/* Tells the controller why the connection ends, with a copy of the offending header. */
static void send_term(struct nh_queue *q, const struct gdx_tcp_err *e, const void *hdr,
		      uint32_t hlen)
{
	uint8_t pdu[GDX_TCP_TERM_HLEN + GDX_TCP_TERM_MAX_DATA];
	struct iovec iov = { pdu, gdx_tcp_term_init(pdu, GDX_TCP_H2C_TERM, e->fes, e->fei, hdr,
						    hlen) };

	pthread_mutex_lock(&q->send_lock);
	gdx_send_full(q->fd, &iov, 1);
	pthread_mutex_unlock(&q->send_lock);
}

static int proto_err(struct gdx_tcp_err *e, uint16_t fes, uint32_t fei, const char *why)
{
	e->fes = fes;
	e->fei = fei;
	e->why = why;
	return GDX_EPROTO;
}

/* Finds the slot a controller PDU names; NULL for an unknown or stale CID. */
struct nh_slot *nh_queue_find_slot(struct nh_queue *q, uint16_t cid)
{
	unsigned idx = cid & CID_IDX_MASK;
	struct nh_slot *s;

	if (idx >= q->depth)
		return NULL;
	s = &q->slots[idx];
	pthread_mutex_lock(&q->lock);
	if (!s->req || s->cid != cid)
		s = NULL;
	pthread_mutex_unlock(&q->lock);
	return s;
}

/*
 * Sums a read's stages (host.h, NH_CNT_LAT_*) once it is about to complete:
 * seen is when the receiver learnt that its data is in place.  Returns the
 * time its callback starts (0: not timed), for lat_done.  Reads resubmitted
 * on another queue after a reconnect carry stamps of both: those out of
 * order are left out.
 */
static uint64_t lat_read(struct nh_queue *q, const struct nh_req *r, uint64_t seen)
{
	uint64_t now, post;

	if (!r->t_sub || r->write || !r->len || !r->t_data || r->t_sent < r->t_sub ||
	    r->t_data < r->t_sent)
		return 0;
	post = r->mem == NH_MEM_DEVICE && r->t_post ? r->t_post : r->t_data;
	now = gdx_now_ns();
	if (post < r->t_data || seen < post || now < seen)
		return 0;
	gdx_counter_add(&q->cnt[NH_CNT_LAT_N], 1);
	gdx_counter_add(&q->cnt[NH_CNT_LAT_SENT], r->t_sent - r->t_sub);
	gdx_counter_add(&q->cnt[NH_CNT_LAT_DATA], r->t_data - r->t_sent);
	gdx_counter_add(&q->cnt[NH_CNT_LAT_POST], post - r->t_data);
	gdx_counter_add(&q->cnt[NH_CNT_LAT_LAND], seen - post);
	gdx_counter_add(&q->cnt[NH_CNT_LAT_QUEUE], now - seen);
	return now;
}

/* The callback of a read lat_read timed (it may be gone) has returned. */
static void lat_done(struct nh_queue *q, uint64_t start)
{
	if (start)
		gdx_counter_add(&q->cnt[NH_CNT_LAT_CB], gdx_now_ns() - start);
}

/*
 * A device read held on the receive lane (effect: the request) whose copies
 * have landed (err 0) or cannot (err); effect NULL: a run of them ended.
 * The reads of one run share the time their landing was seen.
 */
static void held_run(void *owner, void *effect, int err)
{
	struct nh_queue *q = owner;
	struct nh_req *r;
	uint64_t t;

	if (!effect) {
		if (q->lat_timed)
			gdx_counter_add(&q->cnt[NH_CNT_LAT_REL], 1);
		q->lat_seen = 0;
		q->lat_timed = false;
		return;
	}
	memcpy(&r, effect, sizeof(r));
	if (err) {
		nh_req_complete(r, err);
		return;
	}
	if (!q->lat_seen && q->ctrl->p.lat_stats)
		q->lat_seen = gdx_now_ns();
	t = q->lat_seen ? lat_read(q, r, q->lat_seen) : 0;
	q->lat_timed |= t != 0;
	nh_req_complete(r, r->held_result);
	lat_done(q, t);
}

/* A held read's last copies were just enqueued with a batch: stamp it. */
static void held_enqueued(void *owner, void *effect)
{
	struct nh_req *r;

	(void)owner;
	memcpy(&r, effect, sizeof(r));
	if (r->t_sub && !r->t_post)
		r->t_post = gdx_now_ns();
}

/* Sends what receivers queued while this queue was full, as far as slots allow. */
static void drain_backlog(struct nh_queue *q)
{
	for (;;) {
		struct nh_req *r = NULL;
		int rc;

		pthread_mutex_lock(&q->lock);
		if (q->state == NH_Q_LIVE && q->nfree && q->backlog) {
			r = q->backlog;
			q->backlog = r->next;
			if (!q->backlog)
				q->backlog_tail = &q->backlog;
		}
		pthread_mutex_unlock(&q->lock);
		if (!r)
			return;
		rc = queue_send(q, r, false);
		if (!rc)
			continue;
		if (rc != -EAGAIN && rc != -EPIPE) {
			/* r itself cannot go (its buffer cannot be registered): it fails alone */
			nh_req_complete(r, rc);
			continue;
		}
		/* the slot went to another submitter, or the queue died: back to the front */
		pthread_mutex_lock(&q->lock);
		r->next = q->backlog;
		q->backlog = r;
		if (!r->next)
			q->backlog_tail = &r->next;
		pthread_mutex_unlock(&q->lock);
		return;
	}
}

/*
 * Frees the slot and reports the command.  A device read whose last copies may
 * still run is held back (the slot is free: no more bytes come from the
 * socket for it) and reported once they landed, so the receiver goes on with
 * the next PDU while the copies run.
 */
static void complete_slot(struct nh_queue *q, struct nh_slot *s, int result)
{
	struct nh_req *r;
	bool backlog;

	/* the buffer's registration ends before the slot can be taken again */
	if (q->rdma)
		nh_rdma_slot_done(q, (unsigned)(s - q->slots));
	pthread_mutex_lock(&q->lock);
	r = s->req;
	s->req = NULL;
	q->free_idx[q->nfree++] = (uint16_t)(s - q->slots);
	__atomic_store_n(&q->inflight, q->inflight - 1, __ATOMIC_RELAXED);
	/* other queues' receivers add to it */
	backlog = q->backlog != NULL;
	pthread_cond_signal(&q->slot_cv);
	pthread_mutex_unlock(&q->lock);
	if (result)
		gdx_counter_add(&q->cnt[NH_CNT_ERR], 1);
	if (r->mem == NH_MEM_DEVICE && !r->write && q->rx_st &&
	    !gdx_stage_landed(q->rx_st, r->ring_end)) {
		r->held_result = result;
		/* its copies went out with a batch while it waited for its response */
		if (r->t_sub && !r->t_post && r->ring_end <= gdx_stage_enqueued(q->rx_st))
			r->t_post = gdx_now_ns();
		gdx_stage_defer(q->rx_st, r->ring_end, &r);
	} else {
		uint64_t t = r->t_sub ? lat_read(q, r, gdx_now_ns()) : 0;

		if (t)
			gdx_counter_add(&q->cnt[NH_CNT_LAT_REL], 1);
		nh_req_complete(r, result);
		lat_done(q, t);
	}
	if (backlog)
		drain_backlog(q);
}

static int skip_bytes(struct nh_queue *q, size_t n)
{
	uint8_t tmp[256];

	while (n) {
		size_t k = GDX_MIN(n, sizeof(tmp));
		int rc = recv_full(q, tmp, k);

		if (rc)
			return rc;
		n -= k;
	}
	return 0;
}

/*
 * Receives n bytes of a read into device memory through the receive lane:
 * pieces of at most a chunk go into its ring back to back, each one's H2D
 * copy posted as soon as it is in, so small reads share the ring instead of
 * taking a chunk each and large ones overlap receiving with copying.  The
 * copies are not waited for here: the read is held (complete_slot) until
 * they landed.  Reads held so far are checked once per piece, before its
 * copy is added (with a done word and nvmf.host.post_first, after).
 */
static int recv_device(struct nh_queue *q, struct nh_req *r, char *dst, size_t n, uint32_t *crc)
{
	struct gdx_stage *st = q->rx_st;
	enum gdx_stage_mode mode = gdx_stage_mode_of(st);
	bool word = mode == GDX_STAGE_AGENT || mode == GDX_STAGE_WORD;
	bool after = word && q->ctrl->p.post_first;
	/* with events and batches, the held reads are looked at once per batch (the lane) */
	bool before = !after && (word || mode == GDX_STAGE_SYNC || q->ctrl->p.copy_batch <= 1);

	while (n) {
		struct gdx_stage_span sp;
		int rc = gdx_stage_reserve(st, n, 0, &sp);

		if (rc)
			return rc;
		rc = recv_full(q, sp.p, sp.n);
		if (rc)
			return rc;
		if (r->t_sub) {
			r->t_data = gdx_now_ns();
			r->t_post = 0;
		}
		if (q->tp.ddgst)
			*crc = gdx_crc32c_update(*crc, sp.p, sp.n);
		/*
		 * Asked before this copy is added: with events the copy would keep
		 * the stream busy.  With a done word, nvmf.host.post_first looks
		 * after it instead, so that the held reads' callbacks (a
		 * resubmission each, as likely as not) no longer hold it back.
		 */
		if (before && gdx_stage_deferred(st)) {
			rc = gdx_stage_progress(st);
			if (rc)
				return rc;
		}
		r->ring_end = sp.end;
		rc = gdx_stage_post(st, &sp, dst);
		if (rc)
			return rc;
		if (r->t_sub && gdx_stage_enqueued(st) >= r->ring_end)
			r->t_post = gdx_now_ns();
		if (after && gdx_stage_deferred(st)) {
			rc = gdx_stage_progress(st);
			if (rc)
				return rc;
		}
		dst += sp.n;
		n -= sp.n;
	}
	return 0;
}

/*
 * C2HData: the proto validator has checked the lengths against PLEN; here
 * the data must belong to a live read, continue exactly where the previous
 * PDU ended and stay inside the command's buffer.
 */
static int handle_c2h_data(struct nh_queue *q, const union gdx_tcp_pdu *pdu,
			   const struct gdx_tcp_pdu_info *info, struct gdx_tcp_err *e)
{
	const struct gdx_tcp_data *d = &pdu->data;
	struct nh_slot *s = nh_queue_find_slot(q, d->cccid);
	struct nh_req *r;
	uint32_t crc = 0, dd = 0;
	int rc;

	if (!s) {
		GDX_ERR(SUB, "queue %u: C2HData for unknown command id %#x", q->qid, d->cccid);
		return proto_err(e, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_data, cccid),
				 "C2HData for an unknown command");
	}
	r = s->req;
	if (r->write || !r->len) {
		GDX_ERR(SUB, "queue %u: C2HData for cid %#x, which expects no data from the "
			"controller", q->qid, s->cid);
		return proto_err(e, GDX_TCP_FES_PDU_SEQ, 0, "C2HData for a command without C2H data");
	}
	if (d->datao != s->xfered || d->datal > r->len || d->datao > r->len - d->datal) {
		GDX_ERR(SUB, "queue %u: C2HData [%u, +%u) outside cid %#x's %zu bytes (next "
			"expected offset %zu)", q->qid, d->datao, d->datal, s->cid, r->len, s->xfered);
		return proto_err(e, GDX_TCP_FES_DATA_RANGE, offsetof(struct gdx_tcp_data, datao),
				 "C2HData outside the command");
	}
	rc = skip_bytes(q, info->pad_len);
	if (rc)
		return rc;
	if (r->mem == NH_MEM_DEVICE) {
		rc = recv_device(q, r, (char *)r->buf + d->datao, d->datal, &crc);
		if (!rc && info->has_ddgst)
			rc = recv_full(q, &dd, sizeof(dd));
	} else {
		/* straight into the caller's buffer, digest in the same call */
		struct iovec iov[2] = { { (char *)r->buf + d->datao, d->datal },
					{ &dd, sizeof(dd) } };

		rc = recv_iov_full(q, iov, info->has_ddgst ? 2 : 1);
		if (!rc && r->t_sub)
			r->t_data = gdx_now_ns();
		if (!rc && q->tp.ddgst)
			crc = gdx_crc32c((char *)r->buf + d->datao, d->datal);
	}
	if (rc)
		return rc;
	gdx_counter_add(&q->cnt[NH_CNT_IN], d->datal);
	s->xfered += d->datal;
	if (info->has_ddgst) {
		if (dd != crc) {
			/* as the Linux host: this command fails, the connection carries on */
			GDX_ERR(SUB, "queue %u: data digest mismatch on cid %#x", q->qid, s->cid);
			s->ddgst_err = true;
		}
	}
	if (d->ch.flags & GDX_TCP_F_DATA_SUCCESS) {
		if (s->xfered != r->len) {
			GDX_ERR(SUB, "queue %u: SUCCESS after %zu of %zu bytes", q->qid, s->xfered,
				r->len);
			return proto_err(e, GDX_TCP_FES_PDU_SEQ, 0, "SUCCESS before all data");
		}
		r->status = s->ddgst_err ? GDX_NVME_SC_DATA_XFER_ERROR : 0;
		r->dw01 = 0;
		complete_slot(q, s, nh_status_to_err(r->status));
	}
	return 0;
}

static int handle_rsp(struct nh_queue *q, const union gdx_tcp_pdu *pdu, struct gdx_tcp_err *e)
{
	const struct gdx_nvme_cqe *cqe = &pdu->rsp.cqe;
	struct nh_slot *s = nh_queue_find_slot(q, cqe->cid);
	uint16_t st = (uint16_t)(cqe->status >> 1);
	struct nh_req *r;

	if (!s) {
		GDX_ERR(SUB, "queue %u: response for unknown command id %#x", q->qid, cqe->cid);
		return proto_err(e, GDX_TCP_FES_INVALID_HEADER,
				 offsetof(struct gdx_tcp_rsp, cqe) + offsetof(struct gdx_nvme_cqe, cid),
				 "response for an unknown command");
	}
	r = s->req;
	if (!(st & 0x7ff) && !r->write && r->len && s->xfered != r->len) {
		GDX_ERR(SUB, "queue %u: cid %#x succeeded after %zu of %zu data bytes", q->qid,
			s->cid, s->xfered, r->len);
		return proto_err(e, GDX_TCP_FES_PDU_SEQ, 0, "success before all data");
	}
	if (!(st & 0x7ff) && s->ddgst_err)
		st = GDX_NVME_SC_DATA_XFER_ERROR;
	nh_queue_complete_cqe(q, s, st, cqe->result);
	return 0;
}

void nh_queue_complete_cqe(struct nh_queue *q, struct nh_slot *s, uint16_t status,
			   uint64_t result)
{
	struct nh_req *r = s->req;

	r->status = status;
	r->dw01 = result;
	complete_slot(q, s, nh_status_to_err(status));
}

void nh_queue_complete(struct nh_queue *q, struct nh_slot *s, int result)
{
	complete_slot(q, s, result);
}

/* R2T: send the requested range of a write as H2CData PDUs of at most MAXH2CDATA. */
static int handle_r2t(struct nh_queue *q, const union gdx_tcp_pdu *pdu, struct gdx_tcp_err *e)
{
	const struct gdx_tcp_r2t *t = &pdu->r2t;
	struct nh_slot *s = nh_queue_find_slot(q, t->cccid);
	struct nh_req *r;
	int rc = 0;

	if (!s) {
		GDX_ERR(SUB, "queue %u: R2T for unknown command id %#x", q->qid, t->cccid);
		return proto_err(e, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_r2t, cccid),
				 "R2T for an unknown command");
	}
	r = s->req;
	if (!r->write || r->len <= q->inline_max || t->r2to != s->xfered || t->r2tl > r->len ||
	    t->r2to > r->len - t->r2tl) {
		GDX_ERR(SUB, "queue %u: bad R2T for cid %#x: [%u, +%u) of %zu, %zu sent", q->qid,
			s->cid, t->r2to, t->r2tl, r->len, s->xfered);
		return proto_err(e, GDX_TCP_FES_DATA_RANGE, offsetof(struct gdx_tcp_r2t, r2to),
				 "R2T outside the command");
	}
	pthread_mutex_lock(&q->send_lock);
	for (uint32_t done = 0; !rc && done < t->r2tl;) {
		uint32_t n = GDX_MIN(t->r2tl - done, q->tp.maxh2cdata);
		bool last = done + n == t->r2tl;
		union gdx_tcp_pdu h;
		uint32_t hl = gdx_tcp_data_init(&h, GDX_TCP_H2C_DATA, s->cid, t->ttag,
						t->r2to + done, n, last ? GDX_TCP_F_DATA_LAST : 0,
						&q->tp);

		rc = send_pdu(q, &h, hl, (const char *)r->buf + t->r2to + done, n, r->mem);
		done += n;
	}
	pthread_mutex_unlock(&q->send_lock);
	s->xfered = t->r2to + t->r2tl;
	return rc;
}

struct hdr_in {
	struct nh_queue *q;
	void *buf;
	size_t n;
};

/*
 * The header, if the socket has it: 1 (received whole), 0 (nothing there)
 * or the error.  With nothing in flight here (depth 1) no PDU can come: no
 * need to look.
 */
static int hdr_ready(void *arg)
{
	struct hdr_in *h = arg;

	if (!__atomic_load_n(&h->q->inflight, __ATOMIC_RELAXED))
		return 0;
	for (;;) {
		ssize_t r = recv(h->q->fd, h->buf, h->n, MSG_DONTWAIT);
		int rc;

		if (r > 0) {
			rc = (size_t)r == h->n ? 0 :
			     recv_full(h->q, (char *)h->buf + r, h->n - (size_t)r);
			return rc ? rc : 1;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	}
}

/*
 * Receives a PDU header while device reads are held or copies are held back
 * for a batch.  When the socket has something, the same call took the header
 * and they stay so a little longer.  When it has nothing, the copies are
 * enqueued and the reads must complete before the receiver blocks: the lane
 * polls the socket and the copies in turn (a PDU that arrives meanwhile is
 * received at once rather than after a wait for the GPU): with a done word
 * until they landed, with events for up to copy_poll_ns, then it waits.
 */
static int recv_hdr_idle(struct nh_queue *q, void *buf, size_t n)
{
	struct hdr_in h = { q, buf, n };
	int rc = gdx_stage_wait_idle(q->rx_st, hdr_ready, &h, q->ctrl->p.copy_poll_ns);

	if (rc)
		return rc > 0 ? 0 : rc;
	return recv_full(q, buf, n);
}

static int rx_loop(struct nh_queue *q)
{
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err e;
	uint32_t hl = sizeof(pdu.ch);
	int rc, one = 1;

	for (;;) {
		/*
		 * Every controller PDU after ICResp has a 24-byte header, so one
		 * receive takes it whole (with its digest); a shorter PDU is
		 * malformed anyway and shows as such once the CH is checked.
		 */
		size_t hlen = GDX_TCP_TERM_HLEN + (q->tp.hdgst ? GDX_TCP_DGST_LEN : 0);
		/* set up (by a submitter) before any device read was sent */
		struct gdx_stage *st = __atomic_load_n(&q->dev, __ATOMIC_ACQUIRE) ? q->rx_st : NULL;

		rc = st && gdx_stage_busy(st) ? recv_hdr_idle(q, &pdu, hlen) :
		     recv_full(q, &pdu, hlen);
		if (rc)
			return rc;
		/*
		 * At low depth ACK at once: a controller that sends its CapsuleResp
		 * right behind the C2HData without TCP_NODELAY otherwise waits for
		 * our delayed ACK (40 ms).  The kernel leaves quick-ack mode by
		 * itself, so it is set again per PDU.
		 */
		if (__atomic_load_n(&q->inflight, __ATOMIC_RELAXED) <= 2)
			setsockopt(q->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
		hl = gdx_tcp_hdr_len(&pdu.ch, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &q->tp, &e);
		if (!hl) {
			hl = sizeof(pdu.ch);
			goto fatal;
		}
		if (gdx_tcp_pdu_check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &q->tp, 0, &info,
				      &e))
			goto fatal;
		switch (pdu.ch.type) {
		case GDX_TCP_RSP:
			rc = handle_rsp(q, &pdu, &e);
			break;
		case GDX_TCP_C2H_DATA:
			rc = handle_c2h_data(q, &pdu, &info, &e);
			break;
		case GDX_TCP_R2T:
			rc = handle_r2t(q, &pdu, &e);
			break;
		default:	/* C2HTermReq: the controller ends the connection */
			GDX_ERR(SUB, "queue %u: controller ended the connection: C2HTermReq %s "
				"(FEI %#x)", q->qid, gdx_tcp_fes_str(pdu.term.fes),
				gdx_tcp_term_fei(&pdu.term));
			/* with header digests on, 4 bytes of its data came with the header */
			if (info.data_len > (q->tp.hdgst ? GDX_TCP_DGST_LEN : 0u))
				skip_bytes(q, info.data_len - (q->tp.hdgst ? GDX_TCP_DGST_LEN : 0u));
			return GDX_EPROTO;
		}
		if (rc == GDX_EPROTO)
			goto fatal;
		if (rc)
			return rc;
	}
fatal:
	GDX_ERR(SUB, "queue %u: ending the connection: %s (%s, FEI %u)", q->qid, e.why,
		gdx_tcp_fes_str(e.fes), e.fei);
	send_term(q, &e, &pdu, pdu.ch.hlen && pdu.ch.hlen <= hl ? pdu.ch.hlen : sizeof(pdu.ch));
	return GDX_EPROTO;
}

int nh_queue_rx_loop(struct nh_queue *q)
{
	int rc;

	if (q->rdma)
		return nh_rdma_rx_loop(q);
	rc = rx_loop(q);

	/* copies held back for a batch go out now: held reads wait for nothing else */
	if (__atomic_load_n(&q->dev, __ATOMIC_ACQUIRE) && gdx_stage_flush(q->rx_st))
		GDX_WARN(SUB, "queue %u: copies of received data failed to enqueue", q->qid);
	return rc;
}

static void *rx_main(void *arg)
{
	struct nh_queue *q = arg;
	int rc;

	in_rx = true;
	no_wait = true;
	rx_self = q;
	rc = nh_queue_rx_loop(q);

	pthread_mutex_lock(&q->lock);
	if (q->state == NH_Q_LIVE) {
		q->state = NH_Q_DEAD;
		q->err = rc;
		GDX_WARN(SUB, "queue %u to %s:%s lost: %s", q->qid, q->ctrl->p.addr,
			 q->ctrl->p.svc, gdx_strerror(rc));
	}
	pthread_cond_broadcast(&q->slot_cv);
	pthread_mutex_unlock(&q->lock);
	nh_ctrl_queue_died(q->ctrl, q);
	return NULL;
}

/*
 * I/O queue i's receiver runs on the i-th CPU of nvmf.host.cpus, as the Linux
 * host gives each queue its CPU.  Over RDMA the receiver posts the commands
 * its completions send again, and rxe does a send's work, and nvmet-rdma its
 * completion work, on the CPU that posted it: the queues' receivers left to
 * the scheduler follow their wake-ups onto one CPU and take the target's work
 * with them.  The admin queue's receiver runs anywhere.
 */
int nh_queue_start(struct nh_queue *q)
{
	const struct nh_params *p = &q->ctrl->p;
	int cpu = q->qid && p->pin ? gdx_cpus_pick(p->cpus, p->ncpus, q->qid - 1u) : -1;
	char name[16];
	int rc;

	q->rx_cpu = cpu;
	snprintf(name, sizeof(name), "nvmf-rx%u", q->qid);
	rc = gdx_thread_start_on(&q->rx, cpu, rx_main, q, name, SUB);
	if (rc)
		return rc;
	q->rx_started = true;
	return 0;
}

void nh_queue_reap(struct nh_queue *q, nh_reap_fn fn)
{
	int err;

	nh_queue_kill(q, GDX_EDISCONNECTED);
	if (q->rx_started)
		pthread_join(q->rx, NULL);
	q->rx_started = false;
	/*
	 * Held reads got all their data: once the copies landed they are done
	 * (those whose copies cannot land fail with GDX_EDRIVER).  The wait also
	 * keeps copies of this queue from landing in a buffer after its read was
	 * handed back for a retry elsewhere.
	 */
	if (q->rx_st)
		gdx_stage_drain(q->rx_st, GDX_EDRIVER);
	nh_rdma_reap(q);
	err = q->err ? q->err : GDX_EDISCONNECTED;
	while (q->backlog) {
		struct nh_req *r = q->backlog;

		q->backlog = r->next;
		fn(q->ctrl, r, err);
	}
	q->backlog_tail = &q->backlog;
	for (unsigned i = 0; i < q->depth; i++) {
		struct nh_req *r = q->slots[i].req;

		if (!r)
			continue;
		q->slots[i].req = NULL;
		fn(q->ctrl, r, err);
	}
}

void nh_queue_close(struct nh_queue *q, nh_reap_fn fn)
{
	nh_queue_reap(q, fn);
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
	nh_rdma_close(q);
	nh_queue_free_mem(q);
	free(q);
}

int nh_queue_abort_lookup(struct nh_queue *q, const struct gdx_nvmf_io *io, uint16_t *cid)
{
	struct nh_req **pp, *r, *unsent = NULL;
	int found = -ENOENT;

	pthread_mutex_lock(&q->lock);
	/* not sent yet: it simply never will be */
	for (pp = &q->backlog; (r = *pp);) {
		if (r->io == io) {
			*pp = r->next;
			r->next = unsent;
			unsent = r;
			continue;
		}
		pp = &r->next;
	}
	q->backlog_tail = &q->backlog;
	for (r = q->backlog; r; r = r->next)
		q->backlog_tail = &r->next;
	for (unsigned i = 0; i < q->depth; i++) {
		struct nh_req *sr = q->slots[i].req;

		if (sr && sr->io == io && !sr->cancelled) {
			sr->cancelled = true;
			*cid = q->slots[i].cid;
			found = 0;
			break;
		}
	}
	pthread_mutex_unlock(&q->lock);
	while (unsent) {
		r = unsent;
		unsent = r->next;
		r->cancelled = true;
		nh_req_complete(r, -ECANCELED);
		if (found)
			found = -EINPROGRESS;	/* cancelled here, no Abort needed */
	}
	return found;
}

bool nh_queue_check_timeouts(struct nh_queue *q, uint64_t now)
{
	bool kill = false;

	pthread_mutex_lock(&q->lock);
	for (unsigned i = 0; i < q->depth; i++) {
		struct nh_slot *s = &q->slots[i];

		if (!s->req || now < s->deadline)
			continue;
		if (!s->req->timed_out) {
			s->req->timed_out = true;
			gdx_counter_add(&q->cnt[NH_CNT_TMO], 1);
			GDX_WARN(SUB, "queue %u: command %#x (opcode %#x) timed out after %llu ms",
				 q->qid, s->cid, s->req->sqe.opc,
				 (unsigned long long)(s->req->timeout_ns / 1000000));
		}
		/*
		 * The buffer may still be written by the receiver until the slot is
		 * released, so a timed-out command ends by tearing the connection
		 * down; the others in flight are resubmitted after the reconnect.
		 */
		kill = true;
	}
	pthread_mutex_unlock(&q->lock);
	return kill;
}

/* Counter i of q: COPY..RING_FULL are the receive lane's (s). */
static uint64_t counter_of(struct nh_queue *q, const struct gdx_stage_stats *s, unsigned i)
{
	switch (i) {
	case NH_CNT_COPY: return s->copies;
	case NH_CNT_COPY_CALL: return s->calls;
	case NH_CNT_RECORD: return s->records;
	case NH_CNT_QUERY: return s->queries;
	case NH_CNT_WAIT: return s->waits;
	case NH_CNT_RING_FULL: return s->ring_full;
	default: return gdx_counter_get(&q->cnt[i]);
	}
}

int nh_queue_counters_json(struct nh_queue *q, char *buf, size_t len)
{
	struct gdx_stage_stats ss = { 0 };
	int n = snprintf(buf, len, "{\"qid\": %u, \"depth\": %u, \"inflight\": %u", q->qid,
			 q->depth, __atomic_load_n(&q->inflight, __ATOMIC_RELAXED));

	if (__atomic_load_n(&q->dev, __ATOMIC_ACQUIRE))
		gdx_stage_stats(q->rx_st, &ss);
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(q->cnt) && n > 0 && (size_t)n < len; i++)
		n += snprintf(buf + n, len - (size_t)n, ", \"%s\": %llu", q->cnt[i].name,
			      (unsigned long long)counter_of(q, &ss, i));
	if (n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "}");
	return n;
}
