/* SPDX-License-Identifier: MIT */
/*
 * NVMe/TCP target: the receive side.  Bytes are read into a staging buffer
 * and parsed by length (PDUs split or coalesced arbitrarily are normal);
 * once a PDU's data is due and nothing else is staged, recv() goes straight
 * into the command's I/O buffer.  Commands get a request slot and, where
 * they need one, a buffer; writes ask for their data with R2T and take it
 * in H2CData.  Back-pressure: past its share of request buffers a
 * connection's commands wait, in order, until buffers are freed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/sock.h"
#include "nvmf/target/tcp/tcp_int.h"

void nvmf_tcp_req_free(struct tcp_req *t)
{
	struct tcp_conn *c = t->conn;

	t->state = REQ_FREE;
	t->next_free = c->free_reqs;
	c->free_reqs = t;
	c->nused--;
	/* over the target's budget, buffers are not kept for reuse */
	if (t->own_buf && nvmf_target_buf_over(c->tgt))
		nvmf_tcp_req_buf_drop(t);
	/* waiting commands may go now: the reactor looks after this pass */
	if (c->bufs.wait_head)
		mark_dirty(c);
}

static void fatal(struct tcp_conn *c, uint16_t fes, uint32_t fei, const char *why)
{
	struct gdx_tcp_err e = { .fes = fes, .fei = fei, .why = why };

	nvmf_tcp_conn_fatal(c, &e);
}

static struct tcp_req *req_get(struct tcp_conn *c)
{
	unsigned limit = c->sq.ctrl ? GDX_MIN(2u * c->sq.size, (unsigned)MAX_SLOTS) :
				      PRE_CONNECT_SLOTS;
	struct tcp_req *t = c->free_reqs;

	if (c->nused >= limit)
		return NULL;
	if (t) {
		c->free_reqs = t->next_free;
	} else {
		if (c->nslots == MAX_SLOTS)
			return NULL;
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->conn = c;
		t->ttag = (uint16_t)c->nslots;
		c->slots[c->nslots++] = t;
	}
	c->nused++;
	t->timed = false;
	t->status = 0;
	t->ddgst_err = false;
	t->h2c_done = 0;
	t->req.buf = NULL;
	t->req.sq = &c->sq;
	t->req.done = nvmf_tcp_req_done;
	t->req.ns = NULL;
	t->req.t_start = 0;
	return t;
}

void nvmf_tcp_req_buf_drop(struct tcp_req *t)
{
	nvmf_bufs_account(&t->conn->bufs, t->own_cap, 0);
	free(t->own_buf);
	t->own_buf = NULL;
	t->own_cap = 0;
}

/* A buffer of len bytes owned by the request, page aligned for O_DIRECT. */
static int req_buf(struct tcp_req *t, uint32_t len)
{
	if (t->own_cap < len) {
		uint32_t cap = GDX_ALIGN_UP(GDX_MAX(len, 4096u), 4096u);
		void *p = NULL;

		if (posix_memalign(&p, 4096, cap))
			return -ENOMEM;
		nvmf_tcp_req_buf_drop(t);
		t->own_buf = p;
		t->own_cap = cap;
		nvmf_bufs_account(&t->conn->bufs, 0, cap);
	}
	t->req.buf = t->own_buf;
	return 0;
}

/* Frees the buffers free slots keep for reuse. */
void nvmf_tcp_conn_trim(struct tcp_conn *c)
{
	for (unsigned i = 0; i < c->nslots; i++)
		if (c->slots[i]->state == REQ_FREE && c->slots[i]->own_buf)
			nvmf_tcp_req_buf_drop(c->slots[i]);
}

/*
 * Whether t's command may take a buffer now.  Over a limit, the buffers no
 * command uses go first: those free slots keep, and t's own (a command that
 * waits holds none).
 */
static bool conn_fits(struct tcp_conn *c, struct tcp_req *t)
{
	if (nvmf_bufs_fit(&c->bufs))
		return true;
	nvmf_tcp_conn_trim(c);
	if (t->own_buf)
		nvmf_tcp_req_buf_drop(t);
	return nvmf_bufs_fit(&c->bufs);
}

static void req_exec(struct tcp_conn *c, struct tcp_req *t)
{
	t->state = REQ_EXEC;
	c->inflight++;
	if (c->r && c->tgt->lat_stats && c->sq.qid && t->req.cmd.opc == GDX_NVME_CMD_READ) {
		t->timed = true;
		t->t_wake = c->r->wake_ns;
		t->t_sub = gdx_now_ns();
	}
	nvmf_req_exec(&t->req);
}

/* Fails a command before it ran (no data moves). */
static void req_fail(struct tcp_conn *c, struct tcp_req *t, uint16_t st)
{
	t->state = REQ_EXEC;
	c->inflight++;
	nvmf_req_complete(&t->req, st);
}

static bool needs_h2c(const struct tcp_req *t)
{
	uint8_t opc = t->req.cmd.opc;

	return t->req.len && !t->req.in_capsule && opc != GDX_NVME_OPC_FABRICS &&
	       gdx_nvme_opc_xfer(opc) == GDX_NVME_XFER_H2C;
}

/* Over its share of buffers: the command waits, behind any that wait already, with none. */
static void cmd_wait(struct tcp_conn *c, struct tcp_req *t)
{
	if (t->own_buf)
		nvmf_tcp_req_buf_drop(t);
	t->state = REQ_WAIT_BUF;
	nvmf_bufs_wait(&c->bufs, &t->wait, c->r ? &c->r->hold_log : NULL);
}

static void cmd_start(struct tcp_conn *c, struct tcp_req *t)
{
	if (needs_h2c(t)) {
		struct tx_item *it = &t->tx_data;

		/* one R2T for the whole transfer; the host splits it by MAXH2CDATA */
		t->state = REQ_R2T;
		if (!c->nr2t++)
			c->rx_moved_ns = conn_now(c);
		it->hdr_len = gdx_tcp_r2t_init((union gdx_tcp_pdu *)it->hdr, t->req.cmd.cid,
					       t->ttag, 0, t->req.len, &c->params);
		it->data = NULL;
		it->data_len = 0;
		it->has_ddgst = false;
		it->splice = false;
		it->kind = TX_PLAIN;
		it->req = t;
		nvmf_tcp_tx_queue(c, it);
		return;
	}
	req_exec(c, t);
}

/* The command and any in-capsule data are here: run it, or ask for its data. */
static void cmd_ready(struct tcp_conn *c, struct tcp_req *t)
{
	if (t->ddgst_err)
		t->status = GDX_NVME_SC_TRANSIENT_TR_ERR;
	if (t->status) {
		req_fail(c, t, t->status);
		return;
	}
	if (!t->req.buf && t->req.len) {
		if (c->bufs.wait_head || !conn_fits(c, t)) {
			cmd_wait(c, t);
			return;
		}
		if (req_buf(t, t->req.len)) {
			req_fail(c, t, GDX_NVME_SC_INTERNAL);
			return;
		}
	}
	cmd_start(c, t);
}

/* Buffers went: start the commands that waited for them, in order, while they fit. */
void nvmf_tcp_conn_unblock(struct tcp_conn *c)
{
	while (c->bufs.wait_head && !c->dead) {
		struct tcp_req *t = GDX_CONTAINER_OF(c->bufs.wait_head, struct tcp_req, wait);

		if (!conn_fits(c, t))
			break;
		nvmf_bufs_pop(&c->bufs);
		if (req_buf(t, t->req.len))
			req_fail(c, t, GDX_NVME_SC_INTERNAL);
		else
			cmd_start(c, t);
	}
}

void nvmf_tcp_rx_expect_hdr(struct tcp_conn *c)
{
	c->rx = RX_HDR;
	c->hdr_have = 0;
	c->hdr_need = sizeof(struct gdx_tcp_ch);
	c->rx_req = NULL;
}

/* The PDU's data goes to dst (NULL: discarded). */
static void rx_expect_data(struct tcp_conn *c, uint8_t *dst)
{
	c->data_dst = dst;
	c->data_left = c->info.data_len;
	c->rx_big = c->info.data_len >= GDX_RX_BIG;
	c->pad_left = c->info.pad_len;
	c->crc = 0;
	c->ddgst_have = 0;
	c->rx = c->pad_left ? RX_PAD : c->data_left ? RX_DATA : RX_DDGST;
}

static void handle_cmd(struct tcp_conn *c)
{
	struct tcp_req *t = req_get(c);
	struct gdx_nvme_sgl_info sgl;
	uint16_t st;

	if (!t) {
		fatal(c, GDX_TCP_FES_PDU_SEQ, 0, "more commands than the queue holds");
		return;
	}
	c->rx_req = t;
	c->win_cmds++;
	if (c->r)
		c->r->iter_cmds++;
	c->win_depth = GDX_MAX(c->win_depth, c->nused);
	t->state = REQ_RX_CAPSULE;
	t->req.cmd = c->hdr.cmd.sqe;
	st = gdx_nvme_sgl_parse(&t->req.cmd, &sgl);
	t->req.len = sgl.length;
	t->req.in_capsule = sgl.in_capsule;
	if (st) {
		st |= GDX_NVME_ST_DNR;
	} else if (sgl.in_capsule) {
		uint32_t limit = c->sq.qid == 0 || t->req.cmd.opc == GDX_NVME_OPC_FABRICS ?
					 ADMIN_INLINE :
					 c->tgt->core.inline_data;

		if (sgl.length > limit)
			st = GDX_NVME_SC_SGL_INVALID_OFFSET | GDX_NVME_ST_DNR;
		else if (sgl.length != c->info.data_len)
			st = GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR;
	} else if (c->info.data_len) {
		st = GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR;
	} else if (sgl.length && t->req.cmd.opc == GDX_NVME_OPC_FABRICS &&
		   t->req.cmd.fctype != GDX_NVMF_FCTYPE_AUTH_RECV) {
		/* Connect's and Authentication Send's data come in the capsule: no R2T */
		st = GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR;
	} else if (sgl.length > c->tgt->core.max_io) {
		st = GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR;
	}
	if (!st)
		st = nvmf_req_prep(&t->req);
	t->status = st;
	if (!c->info.data_len) {
		nvmf_tcp_rx_expect_hdr(c);
		cmd_ready(c, t);
		return;
	}
	/* in-capsule data: consume it even when the command already failed */
	if (!st && !t->req.buf && req_buf(t, t->req.len))
		t->status = GDX_NVME_SC_INTERNAL;
	rx_expect_data(c, t->status ? NULL : t->req.buf);
}

static void handle_h2c(struct tcp_conn *c)
{
	const struct gdx_tcp_data *d = &c->hdr.data;
	struct tcp_req *t = d->ttag < c->nslots ? c->slots[d->ttag] : NULL;

	if (!t || t->state != REQ_R2T)
		return fatal(c, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_data, ttag),
			     "H2CData without an R2T");
	if (d->cccid != t->req.cmd.cid)
		return fatal(c, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_data, cccid),
			     "H2CData CCCID does not match its R2T");
	if (d->datao != t->h2c_done)
		return fatal(c, GDX_TCP_FES_DATA_RANGE, offsetof(struct gdx_tcp_data, datao),
			     "H2CData out of order");
	if ((uint64_t)d->datao + d->datal > t->req.len)
		return fatal(c, GDX_TCP_FES_DATA_RANGE, offsetof(struct gdx_tcp_data, datal),
			     "H2CData beyond the command's data");
	c->rx_req = t;
	rx_expect_data(c, (uint8_t *)t->req.buf + d->datao);
}

static void handle_term(struct tcp_conn *c)
{
	GDX_ERR("nvmf", "%s: host terminated the connection: FES %u (%s)", c->peer,
		c->hdr.term.fes, gdx_tcp_fes_str(c->hdr.term.fes));
	gdx_counter_add(&c->tgt->ctr[TGT_CTR_CONN_ERRORS], 1);
	nvmf_tcp_conn_close(c, NULL);
}

static void handle_hdr(struct tcp_conn *c)
{
	struct gdx_tcp_err err;
	uint32_t max_data = c->sq.qid == 0 ? ADMIN_INLINE : GDX_MAX(c->tgt->core.inline_data,
								     (uint32_t)ADMIN_INLINE);

	c->pdus_in++;
	if (gdx_tcp_pdu_check(&c->hdr, GDX_TCP_ROLE_TARGET, c->phase, &c->params, max_data,
			      &c->info, &err))
		return nvmf_tcp_conn_fatal(c, &err);
	switch (c->hdr.ch.type) {
	case GDX_TCP_ICREQ:
		return nvmf_tcp_handle_icreq(c);
	case GDX_TCP_CMD:
		return handle_cmd(c);
	case GDX_TCP_H2C_DATA:
		return handle_h2c(c);
	case GDX_TCP_H2C_TERM:
		return handle_term(c);
	}
}

/* All of a PDU's data (and digest) arrived. */
static void data_done(struct tcp_conn *c)
{
	struct tcp_req *t = c->rx_req;
	bool bad = false;

	if (c->info.has_ddgst) {
		uint32_t got;

		memcpy(&got, c->ddgst, 4);
		bad = got != c->crc;
		if (bad)
			GDX_WARN("nvmf", "%s: data digest mismatch (cid %u)", c->peer,
				 t ? t->req.cmd.cid : 0);
	}
	gdx_counter_add(&c->sq.ctr[SQ_CTR_BYTES_IN], c->info.data_len);
	nvmf_tcp_rx_expect_hdr(c);
	if (!t)
		return;
	if (c->hdr.ch.type == GDX_TCP_CMD) {
		t->ddgst_err = bad;
		cmd_ready(c, t);
		return;
	}
	/* H2CData */
	t->ddgst_err |= bad;
	t->h2c_done += c->hdr.data.datal;
	if (t->h2c_done == t->req.len) {
		c->nr2t--;
		if (t->ddgst_err)
			req_fail(c, t, GDX_NVME_SC_TRANSIENT_TR_ERR);
		else
			req_exec(c, t);
	}
}

static void data_bytes(struct tcp_conn *c, const uint8_t *p, uint32_t n)
{
	if (c->data_dst) {
		if (p != c->data_dst) {
			memcpy(c->data_dst, p, n);
			c->staged += n;
		}
		c->data_dst += n;
	}
	if (c->info.has_ddgst)
		c->crc = gdx_crc32c_update(c->crc, p, n);
	c->data_left -= n;
	if (c->nr2t)
		c->rx_moved_ns = conn_now(c);
	if (!c->data_left) {
		if (c->info.has_ddgst)
			c->rx = RX_DDGST;
		else
			data_done(c);
	}
}

/* Parses staged bytes; returns 0, or -1 once the connection is gone. */
int nvmf_tcp_rx_consume(struct tcp_conn *c, const uint8_t *buf, uint32_t len)
{
	uint32_t off = 0;

	while (off < len && !c->dead) {
		uint32_t avail = len - off, n;

		switch (c->rx) {
		case RX_HDR:
			n = GDX_MIN(avail, c->hdr_need - c->hdr_have);
			memcpy(c->hdr.raw + c->hdr_have, buf + off, n);
			c->hdr_have += n;
			off += n;
			if (c->hdr_have < c->hdr_need)
				break;
			if (c->hdr_need == sizeof(struct gdx_tcp_ch)) {
				struct gdx_tcp_err err;
				uint32_t hl = gdx_tcp_hdr_len(&c->hdr.ch, GDX_TCP_ROLE_TARGET,
							      c->phase, &c->params, &err);

				if (!hl) {
					nvmf_tcp_conn_fatal(c, &err);
					return -1;
				}
				c->hdr_need = hl;
				if (hl > c->hdr_have)
					break;
			}
			handle_hdr(c);
			break;
		case RX_PAD:
			n = GDX_MIN(avail, c->pad_left);
			c->pad_left -= n;
			off += n;
			if (!c->pad_left)
				c->rx = c->data_left ? RX_DATA : RX_DDGST;
			break;
		case RX_DATA:
			n = GDX_MIN(avail, c->data_left);
			data_bytes(c, buf + off, n);
			off += n;
			break;
		case RX_DDGST:
			n = GDX_MIN(avail, 4 - c->ddgst_have);
			memcpy(c->ddgst + c->ddgst_have, buf + off, n);
			c->ddgst_have += n;
			off += n;
			if (c->ddgst_have == 4)
				data_done(c);
			break;
		}
	}
	return c->dead ? -1 : 0;
}

void nvmf_tcp_conn_read(struct tcp_conn *c)
{
	for (int rounds = 0; rounds < 16 && !c->dead; rounds++) {
		ssize_t n;

		if (c->rx == RX_DATA && c->data_dst && c->data_left >= DIRECT_RECV_MIN) {
			/* straight into the I/O buffer */
			n = recv(c->fd, c->data_dst, c->data_left, MSG_DONTWAIT);
			if (n > 0) {
				data_bytes(c, c->data_dst, (uint32_t)n);
				continue;
			}
		} else {
			size_t want = gdx_rx_ask(c->rx_big, RXBUF_SIZE, 0);

			n = recv(c->fd, c->rxbuf, want, MSG_DONTWAIT);
			if (n > 0) {
				if (nvmf_tcp_rx_consume(c, c->rxbuf, (uint32_t)n))
					return;
				/* drained: epoll says when more comes, no EAGAIN round trip */
				if ((size_t)n < want)
					return;
				continue;
			}
		}
		if (n == 0) {
			nvmf_tcp_conn_close(c, "closed by peer");
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			nvmf_tcp_conn_close(c, strerror(errno));
		return;
	}
}
