/* SPDX-License-Identifier: MIT */
/*
 * NVMe/TCP target: the send side.  A PDU to send is a tx item on its
 * connection's queue; the queue goes out in one sendmsg() per reactor
 * iteration, large reads out of namespace memory by vmsplice + splice.
 * Responses and C2HData are built here when a request completes, and the
 * TermReq that ends a connection on a fatal error.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "nvmf/target/tcp/tcp_int.h"

/* A timed read's data and response are on the socket. */
static void lat_read_sent(struct tcp_reactor *r, const struct tcp_req *t)
{
	uint64_t now = gdx_now_ns();

	lat_add(r, TGT_LAT_READS, 1);
	lat_add(r, TGT_LAT_PICKUP_NS, t->t_sub > t->t_wake ? t->t_sub - t->t_wake : 0);
	lat_add(r, TGT_LAT_NS_NS, t->t_done - t->t_sub);
	lat_add(r, TGT_LAT_SEND_NS, now > t->t_done ? now - t->t_done : 0);
}

void nvmf_tcp_tx_queue(struct tcp_conn *c, struct tx_item *it)
{
	if (!c->tx_head)
		c->tx_moved_ns = conn_now(c);
	it->next = NULL;
	it->sent = 0;
	*c->tx_tail = it;
	c->tx_tail = &it->next;
	c->pdus_out++;
	mark_dirty(c);
}

void nvmf_tcp_set_epollout(struct tcp_conn *c, bool on)
{
	struct epoll_event e = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = &c->ev };

	if (c->want_out == on || c->local)
		return;
	c->want_out = on;
	epoll_ctl(c->r->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static void tx_item_sent(struct tcp_conn *c, struct tx_item *it)
{
	switch (it->kind) {
	case TX_C2H_FINAL:
	case TX_RSP:
		if (it->req->timed && c->r)
			lat_read_sent(c->r, it->req);
		nvmf_tcp_req_free(it->req);
		break;
	case TX_TERM:
		nvmf_tcp_conn_close(c, NULL);
		break;
	case TX_PLAIN:
		break;
	}
}

/*
 * Moves the head item's data from namespace memory to the socket through a
 * pipe: vmsplice references the pages, splice hands them to TCP, so the data
 * is not copied on the way out (as nvmet sends block-device pages).  Returns
 * 0 when the data is all on the socket, -EAGAIN when the socket is full.
 */
static int splice_data(struct tcp_conn *c, struct tx_item *it)
{
	uint32_t done = it->sent - it->hdr_len;

	if (c->pipe[0] < 0) {
		if (pipe2(c->pipe, O_NONBLOCK | O_CLOEXEC))
			return -errno;
		/* best effort: the default 64 KiB pipe only means more rounds */
		fcntl(c->pipe[1], F_SETPIPE_SZ, PIPE_SIZE);
	}
	while (done < it->data_len) {
		uint32_t in_pipe_end = done + c->piped;
		ssize_t n;

		if (in_pipe_end < it->data_len) {
			struct iovec v = { (char *)it->data + in_pipe_end,
					    it->data_len - in_pipe_end };

			n = vmsplice(c->pipe[1], &v, 1, SPLICE_F_NONBLOCK);
			if (n > 0)
				c->piped += (uint32_t)n;
			else if (n < 0 && errno != EAGAIN)
				return -errno;
		}
		n = splice(c->pipe[0], NULL, c->fd, NULL, c->piped,
			   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		if (n == 0)
			return -EPIPE;
		c->piped -= (uint32_t)n;
		c->tx_moved_ns = conn_now(c);
		it->sent += (uint32_t)n;
		done += (uint32_t)n;
		gdx_counter_add(&c->sq.ctr[SQ_CTR_BYTES_OUT], (uint64_t)n);
	}
	return 0;
}

/* The PDUs counted on the connection go to the target's shared counters. */
void nvmf_tcp_count_pdus(struct tcp_conn *c)
{
	if (c->pdus_in)
		gdx_counter_add(&c->tgt->ctr[TGT_CTR_PDUS_IN], c->pdus_in);
	if (c->pdus_out)
		gdx_counter_add(&c->tgt->ctr[TGT_CTR_PDUS_OUT], c->pdus_out);
	if (c->staged)
		gdx_counter_add(&c->tgt->ctr[TGT_CTR_STAGED], c->staged);
	c->pdus_in = c->pdus_out = 0;
	c->staged = 0;
}

/* Sends as much of the queue as the socket takes. */
void nvmf_tcp_conn_flush(struct tcp_conn *c)
{
	/* counted before any of them can reach the host */
	nvmf_tcp_count_pdus(c);
	while (c->tx_head && !c->dead) {
		struct tx_item *head = c->tx_head;
		struct iovec iov[IOV_BATCH];
		int n = 0, flags = MSG_NOSIGNAL | MSG_DONTWAIT;
		ssize_t sent;

		if (head->splice && head->sent >= head->hdr_len &&
		    head->sent < head->hdr_len + head->data_len) {
			int ret = splice_data(c, head);

			if (ret == -EAGAIN) {
				nvmf_tcp_set_epollout(c, true);
				return;
			}
			if (ret) {
				nvmf_tcp_conn_close(c, strerror(-ret));
				return;
			}
		}
		for (struct tx_item *it = c->tx_head; it && n + 3 <= IOV_BATCH; it = it->next) {
			uint32_t off = it->sent;

			if (off < it->hdr_len) {
				iov[n++] = (struct iovec){ it->hdr + off, it->hdr_len - off };
				off = it->hdr_len;
			}
			off -= it->hdr_len;
			if (it->splice && off < it->data_len) {
				/* the data follows by splice: hold the header back for it */
				flags |= MSG_MORE;
				break;
			}
			if (off < it->data_len) {
				iov[n++] = (struct iovec){ (char *)it->data + off,
							   it->data_len - off };
				off = it->data_len;
			}
			off -= it->data_len;
			if (it->has_ddgst && off < 4)
				iov[n++] = (struct iovec){ (uint8_t *)&it->ddgst + off, 4 - off };
		}
		if (!n) {
			/* only spliced data remained and it is complete: account the item */
			sent = 0;
		} else {
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };

			/* local connections (tests, fuzzing) may write to a pipe or /dev/null */
			sent = c->local ? writev(c->fd, iov, n) : sendmsg(c->fd, &mh, flags);
			if (sent < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK) {
					nvmf_tcp_set_epollout(c, true);
					return;
				}
				nvmf_tcp_conn_close(c, strerror(errno));
				return;
			}
			gdx_counter_add(&c->sq.ctr[SQ_CTR_BYTES_OUT], (uint64_t)sent);
			if (sent)
				c->tx_moved_ns = conn_now(c);
		}
		do {
			struct tx_item *it = c->tx_head;
			uint32_t total = it->hdr_len + it->data_len + (it->has_ddgst ? 4 : 0);
			uint32_t take = (uint32_t)GDX_MIN((uint64_t)sent,
							  (uint64_t)(total - it->sent));

			it->sent += take;
			sent -= take;
			if (it->sent < total)
				break;
			c->tx_head = it->next;
			if (!c->tx_head)
				c->tx_tail = &c->tx_head;
			tx_item_sent(c, it);
			if (c->dead)
				return;
		} while (sent > 0 && c->tx_head);
	}
	nvmf_tcp_set_epollout(c, false);
}

/* Ends the connection with a C2HTermReq carrying FES/FEI and the offending header. */
void nvmf_tcp_conn_fatal(struct tcp_conn *c, const struct gdx_tcp_err *err)
{
	struct tx_item *it = &c->conn_tx;
	uint32_t bad = GDX_MIN(c->hdr_have, (uint32_t)c->hdr.ch.hlen);

	GDX_ERR("nvmf", "%s: protocol error in %s PDU: %s (FES %u %s, FEI %u); closing", c->peer,
		gdx_tcp_pdu_type_str(c->hdr.ch.type), err->why, err->fes,
		gdx_tcp_fes_str(err->fes), err->fei);
	gdx_counter_add(&c->tgt->ctr[TGT_CTR_CONN_ERRORS], 1);
	c->rx = RX_HDR;
	c->rx_len = c->rx_off = 0;
	/* a TermReq may not carry digests: copy at most HLEN bytes */
	memset(it, 0, sizeof(*it));
	it->hdr_len = gdx_tcp_term_init(it->hdr, GDX_TCP_C2H_TERM, err->fes, err->fei, &c->hdr,
					GDX_MIN(bad, (uint32_t)GDX_TCP_TERM_MAX_DATA));
	it->kind = TX_TERM;
	/* nothing else may follow the TermReq: drop what was queued */
	c->tx_head = NULL;
	c->tx_tail = &c->tx_head;
	nvmf_tcp_tx_queue(c, it);
	nvmf_tcp_conn_flush(c);
	if (!c->dead)
		nvmf_tcp_conn_close(c, NULL);
}

static void queue_rsp(struct tcp_conn *c, struct tcp_req *t)
{
	struct tx_item *it = &t->tx_rsp;

	it->hdr_len = gdx_tcp_rsp_init((union gdx_tcp_pdu *)it->hdr, &t->req.cqe, &c->params);
	it->data = NULL;
	it->data_len = 0;
	it->has_ddgst = false;
	it->splice = false;
	it->kind = TX_RSP;
	it->req = t;
	nvmf_tcp_tx_queue(c, it);
}

/*
 * Zeroed pages of this reactor's own (max_io bytes, made on first use) for
 * reads whose data are zeroes: never-written RAM, null.  Their memory is the
 * kernel's one zero page, and lending that to the socket makes every 4 KiB of
 * every read an atomic on its one count, from every reactor and every host
 * receiver freeing the data: the bound of all queues together.  These pages
 * are touched by this reactor and its connections' receivers only.  NULL if
 * they cannot be had: the data is then copied.
 */
static const void *reactor_zeroes(struct tcp_reactor *r)
{
	size_t len = r->tgt->core.max_io;
	void *p;

	if (r->zeroes)
		return r->zeroes;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* 4 KiB pages: a huge page would put them all behind one count again */
	madvise(p, len, MADV_NOHUGEPAGE);
	/* written, so that each is a page of its own and not the zero page */
	memset(p, 0, len);
	r->zeroes = p;
	return p;
}

/*
 * Whether a read's data may leave namespace memory by splice: only namespace
 * memory (a request buffer is reused at once), not into kTLS (spliced pages
 * went 2.8x slower than copies there: docs/measurements/nvmf-target.md), and
 * as nvmf.target.splice says (auto: hosts on other machines only).
 */
static bool splice_allowed(const struct tcp_conn *c, const struct tcp_req *t, uint32_t c2h)
{
	if (c2h < SPLICE_MIN || t->req.buf == t->own_buf || c->local || c->sq.tls_hostnqn)
		return false;
	return c->tgt->splice == TGT_SPLICE_ON ||
	       (c->tgt->splice == TGT_SPLICE_AUTO && !c->same_host);
}

void nvmf_tcp_req_done(struct nvmf_req *nr)
{
	struct tcp_req *t = GDX_CONTAINER_OF(nr, struct tcp_req, req);
	struct tcp_conn *c = t->conn;
	uint32_t c2h = nr->cqe.status ? 0 : nvmf_req_c2h_len(nr);

	if (t->state == REQ_EXEC && c->inflight)
		c->inflight--;
	if (c->dead) {
		nvmf_tcp_req_free(t);
		/* the last one: the reactor frees the connection after this iteration */
		if (!c->inflight)
			mark_dirty(c);
		return;
	}
	t->state = REQ_TX;
	if (t->timed)
		t->t_done = gdx_now_ns();
	if (nr->cmd.opc == GDX_NVME_OPC_FABRICS && nr->cmd.fctype == GDX_NVMF_FCTYPE_CONNECT &&
	    !nr->cqe.status && c->sq.qid && !c->local) {
		struct tcp_reactor *to = &c->tgt->reactors[(c->sq.qid - 1u) % c->tgt->nreactors];

		if (to != c->r)
			c->move_to = to;
	}
	if (c2h) {
		struct tx_item *it = &t->tx_data;
		bool success = c->sq.sqflow_disabled;

		it->hdr_len = gdx_tcp_data_init((union gdx_tcp_pdu *)it->hdr, GDX_TCP_C2H_DATA,
						nr->cmd.cid, 0, 0, c2h,
						GDX_TCP_F_DATA_LAST |
							(success ? GDX_TCP_F_DATA_SUCCESS : 0),
						&c->params);
		it->data = nr->buf;
		it->data_len = c2h;
		it->splice = false;
		if (splice_allowed(c, t, c2h)) {
			switch (nvmf_req_pages(nr, c2h)) {
			case NVMF_PAGES_OWN:
				it->splice = true;
				break;
			case NVMF_PAGES_ZERO:
				it->data = reactor_zeroes(c->r);
				it->splice = it->data != NULL;
				if (!it->data)
					it->data = nr->buf;
				break;
			case NVMF_PAGES_SHARED:
				break;
			}
		}
		it->has_ddgst = c->params.ddgst;
		if (it->has_ddgst) {
			struct iovec v = { nr->buf, c2h };

			it->ddgst = gdx_tcp_ddgst(&v, 1);
		}
		it->kind = success ? TX_C2H_FINAL : TX_PLAIN;
		it->req = t;
		nvmf_tcp_tx_queue(c, it);
		if (success)
			return;
	}
	queue_rsp(c, t);
}
