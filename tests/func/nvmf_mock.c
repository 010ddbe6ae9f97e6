/* SPDX-License-Identifier: MIT */
/* The scripted NVMe/TCP controller of nvmf_mock.h: one thread per connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nvmf_mock_wire.h"
#include "nvmf_mock.h"

#define MAX_CONNS 256
#define GDX_MOCK_DISC "nqn.2014-08.org.nvmexpress.discovery"
#define MAX_PEND 1024

struct pend_write {
	bool used;
	uint16_t cid;
	uint64_t slba;
	uint32_t len, got;
};

struct conn {
	struct mock *m;
	int fd;
	pthread_t t;
	bool live;
	uint16_t qid;
	bool hdgst, ddgst;
	bool discovery;
	uint32_t cc, csts;
	pthread_mutex_t send_lock;
	struct pend_write pw[MAX_PEND];
	bool done;		/* the thread has ended; the accept loop reaps it */
};

struct mock {
	struct mock_opts o;
	uint8_t *ram;
	int lfd;
	uint16_t port;
	pthread_t accept_t;
	bool accepting;
	pthread_mutex_t lock;
	struct conn *conns[MAX_CONNS];
	uint16_t next_cntlid;
	enum mock_fault fault;
	unsigned fault_skip;
	struct mock_stats st;
	/* a hung command, for Abort */
	struct conn *hung_conn;
	uint16_t hung_cid;
};

void mock_opts_default(struct mock_opts *o)
{
	*o = (struct mock_opts){ .block_size = 512, .nblocks = 8192, .mdts = 0,
				 .inline_size = 8192, .maxh2cdata = 32768, .mqes = 127 };
}

uint8_t *mock_ram(struct mock *m)
{
	return m->ram;
}

void mock_inject(struct mock *m, enum mock_fault f, unsigned skip)
{
	pthread_mutex_lock(&m->lock);
	m->fault = f;
	m->fault_skip = skip;
	pthread_mutex_unlock(&m->lock);
}

void mock_stats(struct mock *m, struct mock_stats *s)
{
	pthread_mutex_lock(&m->lock);
	*s = m->st;
	pthread_mutex_unlock(&m->lock);
}

/* Takes the armed fault if this I/O command is the one it should hit. */
static enum mock_fault take_fault(struct mock *m, bool for_write)
{
	enum mock_fault f = MF_NONE;

	pthread_mutex_lock(&m->lock);
	m->st.io_cmds++;
	if (m->fault != MF_NONE && (m->fault == MF_R2T_BEYOND) == for_write) {
		if (m->fault_skip)
			m->fault_skip--;
		else {
			f = m->fault;
			m->fault = MF_NONE;
		}
	}
	pthread_mutex_unlock(&m->lock);
	return f;
}

static int rd(int fd, void *b, size_t n)
{
	char *p = b;

	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int wr(struct conn *c, const void *b, size_t n)
{
	const char *p = b;

	while (n) {
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);

		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Header (+HDGST) then optional data (+DDGST), as one locked write. */
static int send_pdu(struct conn *c, uint8_t *h, unsigned hlen, const void *data, size_t n,
		    bool bad_ddgst)
{
	uint8_t d[4];
	int rc;

	pthread_mutex_lock(&c->send_lock);
	rc = wr(c, h, hlen);
	if (!rc && c->hdgst) {
		nh_put32(d, nh_crc32c(h, hlen));
		rc = wr(c, d, 4);
	}
	if (!rc && n) {
		rc = wr(c, data, n);
		if (!rc && c->ddgst) {
			nh_put32(d, nh_crc32c(data, n) ^ (bad_ddgst ? 1u : 0u));
			rc = wr(c, d, 4);
		}
	}
	pthread_mutex_unlock(&c->send_lock);
	return rc;
}

static uint8_t hflag(struct conn *c)
{
	return c->hdgst ? NH_F_HDGST : 0;
}

static int send_rsp(struct conn *c, uint16_t cid, uint16_t status, uint64_t result,
		    enum mock_fault f)
{
	uint8_t h[24] = { 0 };

	nh_put_ch(h, NH_PDU_RSP, hflag(c), 24, 0, 24 + (c->hdgst ? 4 : 0));
	if (f == MF_BAD_PLEN)
		nh_put32(h + 4, 100);
	nh_put64(h + 8, result);
	nh_put16(h + 18, c->qid);
	nh_put16(h + 20, f == MF_UNKNOWN_CID ? (uint16_t)(cid ^ 0x5555) : cid);
	nh_put16(h + 22, (uint16_t)(status << 1));
	return send_pdu(c, h, 24, NULL, 0, false);
}

static int send_c2h(struct conn *c, uint16_t cid, const uint8_t *data, uint32_t len,
		    enum mock_fault f)
{
	uint32_t chunk = c->m->o.c2h_chunk ? c->m->o.c2h_chunk : len;
	bool success = c->m->o.c2h_success || f == MF_SUCCESS_NO_LAST;

	for (uint32_t off = 0; off < len;) {
		uint32_t n = len - off < chunk ? len - off : chunk;
		bool last = off + n == len;
		uint8_t h[32] = { 0 };
		unsigned hlen = f == MF_BAD_HLEN ? 32 : 24;
		uint32_t datal = f == MF_C2H_BEYOND ? n + c->m->o.block_size : n;
		uint32_t datao = f == MF_C2H_GAP ? off + c->m->o.block_size : off;
		uint8_t fl = (uint8_t)(hflag(c) | (c->ddgst ? NH_F_DDGST : 0));
		uint8_t *extra = NULL;
		int rc;

		if (last && f != MF_SUCCESS_NO_LAST)
			fl |= NH_F_LAST;
		if (last && success)
			fl |= NH_F_SUCCESS;
		nh_put_ch(h, NH_PDU_C2H_DATA, fl, (uint8_t)hlen,
			  (uint8_t)(hlen + (c->hdgst ? 4 : 0)),
			  hlen + (c->hdgst ? 4 : 0) + datal + (c->ddgst ? 4 : 0));
		nh_put16(h + 8, cid);
		nh_put32(h + 12, datao);
		nh_put32(h + 16, datal);
		if (datal != n) {
			extra = calloc(1, datal);
			memcpy(extra, data + off, n);
		}
		rc = send_pdu(c, h, hlen, extra ? extra : data + off, datal, f == MF_BAD_DDGST);
		free(extra);
		if (rc)
			return rc;
		off += n;
	}
	return success && f != MF_SUCCESS_NO_LAST ? 1 : 0;
}

static void fill_id_ctrl(struct conn *c, uint8_t *id, uint16_t cntlid)
{
	struct mock *m = c->m;

	memset(id, 0, 4096);
	nh_put16(id, 0x1d1d);
	memcpy(id + 4, "MOCK0001            ", 20);
	memcpy(id + 24, "gdx test mock                           ", 40);
	memcpy(id + 64, "1.0     ", 8);
	id[77] = m->o.mdts;
	nh_put16(id + 78, cntlid);
	nh_put32(id + 80, 0x00010300);
	id[111] = c->discovery ? 2 : 1;
	nh_put16(id + 320, 10);
	id[512] = 0x66;
	id[513] = 0x44;
	nh_put16(id + 514, (uint16_t)(m->o.mqes + 1));
	nh_put32(id + 516, 1);
	nh_put16(id + 520, 0x0c);
	id[525] = 1;
	nh_put32(id + 536, 0x00100001);
	snprintf((char *)id + 768, 256, "%s", c->discovery ? GDX_MOCK_DISC : MOCK_NQN);
	nh_put32(id + 1792, (64 + m->o.inline_size) / 16);
	nh_put32(id + 1796, 1);
}

static void fill_id_ns(struct mock *m, uint32_t nsid, uint8_t *id)
{
	memset(id, 0, 4096);
	if (nsid != 1)
		return;
	nh_put64(id, m->o.nblocks);
	nh_put64(id + 8, m->o.nblocks);
	nh_put64(id + 16, m->o.nblocks);
	id[30] = 1;
	id[128 + 2] = m->o.block_size == 4096 ? 12 : 9;
	memset(id + 104, 0xab, 16);
}

static void fill_disc(struct mock *m, uint8_t *page, size_t len)
{
	memset(page, 0, len);
	nh_put64(page, 7);
	nh_put64(page + 8, 1);
	if (len < 2048)
		return;
	page[1024] = 3;
	page[1025] = 1;
	page[1026] = 2;
	nh_put16(page + 1024 + 6, 0xffff);
	nh_put16(page + 1024 + 8, 32);
	snprintf((char *)page + 1024 + 32, 32, "%u", m->port);
	snprintf((char *)page + 1024 + 256, 256, "%s", MOCK_NQN);
	snprintf((char *)page + 1024 + 512, 256, "127.0.0.1");
}

static bool in_range(struct mock *m, uint64_t slba, uint64_t nlb)
{
	return slba < m->o.nblocks && nlb <= m->o.nblocks - slba;
}

static int handle_io(struct conn *c, const uint8_t *sqe, const uint8_t *inl, uint32_t inl_len)
{
	struct mock *m = c->m;
	uint16_t cid = nh_get16(sqe + 2);
	uint64_t slba = nh_get64(sqe + 40);
	uint64_t nlb = (uint64_t)nh_get16(sqe + 48) + 1;
	uint32_t bs = m->o.block_size, len = nh_get32(sqe + 32);
	enum mock_fault f;

	if (nh_get32(sqe + 4) != 1)
		return send_rsp(c, cid, 0x0b | NH_SC_DNR, 0, MF_NONE);
	switch (sqe[0]) {
	case NH_IO_READ:
		f = take_fault(m, false);
		if (!in_range(m, slba, nlb))
			return send_rsp(c, cid, 0x80 | NH_SC_DNR, 0, MF_NONE);
		if (len != nlb * bs)
			return send_rsp(c, cid, 0x0f | NH_SC_DNR, 0, MF_NONE);
		if (f == MF_DROP)
			return -2;
		if (f == MF_HANG) {
			pthread_mutex_lock(&m->lock);
			m->hung_conn = c;
			m->hung_cid = cid;
			pthread_mutex_unlock(&m->lock);
			return 0;
		}
		if (f == MF_BAD_TYPE) {
			uint8_t h[24] = { 0 };

			nh_put_ch(h, 0x08, hflag(c), 24, 0, 24 + (c->hdgst ? 4 : 0));
			return send_pdu(c, h, 24, NULL, 0, false);
		}
		{
			int rc = send_c2h(c, cid, m->ram + slba * bs, (uint32_t)(nlb * bs), f);

			if (rc)
				return rc < 0 ? rc : 0;
		}
		return send_rsp(c, cid, 0, 0, f);
	case NH_IO_WRITE:
		f = take_fault(m, true);
		if (!in_range(m, slba, nlb))
			return send_rsp(c, cid, 0x80 | NH_SC_DNR, 0, MF_NONE);
		if (len != nlb * bs)
			return send_rsp(c, cid, 0x0f | NH_SC_DNR, 0, MF_NONE);
		if (sqe[39] == NH_SGL_INLINE) {
			memcpy(m->ram + slba * bs, inl, inl_len);
			return send_rsp(c, cid, 0, 0, MF_NONE);
		}
		for (unsigned t = 0; t < MAX_PEND; t++) {
			struct pend_write *p = &c->pw[t];
			uint8_t h[24] = { 0 };

			if (p->used)
				continue;
			*p = (struct pend_write){ true, cid, slba, len, 0 };
			nh_put_ch(h, NH_PDU_R2T, hflag(c), 24, 0, 24 + (c->hdgst ? 4 : 0));
			nh_put16(h + 8, cid);
			nh_put16(h + 10, (uint16_t)t);
			nh_put32(h + 16, f == MF_R2T_BEYOND ? len + bs : len);
			return send_pdu(c, h, 24, NULL, 0, false);
		}
		return send_rsp(c, cid, 0x06, 0, MF_NONE);
	case NH_IO_FLUSH:
		return send_rsp(c, cid, 0, 0, MF_NONE);
	case NH_IO_WRITE_ZEROES:
		if (!in_range(m, slba, nlb))
			return send_rsp(c, cid, 0x80 | NH_SC_DNR, 0, MF_NONE);
		memset(m->ram + slba * bs, 0, nlb * bs);
		return send_rsp(c, cid, 0, 0, MF_NONE);
	case NH_IO_DSM: {
		unsigned nr = (nh_get32(sqe + 40) & 0xff) + 1;

		if (!inl || inl_len < nr * 16)
			return send_rsp(c, cid, 0x0f | NH_SC_DNR, 0, MF_NONE);
		for (unsigned i = 0; i < nr; i++) {
			uint64_t s = nh_get64(inl + 16 * i + 8), n = nh_get32(inl + 16 * i + 4);

			if (!in_range(m, s, n))
				return send_rsp(c, cid, 0x80 | NH_SC_DNR, 0, MF_NONE);
			memset(m->ram + s * bs, 0, n * bs);
		}
		return send_rsp(c, cid, 0, 0, MF_NONE);
	}
	default:
		return send_rsp(c, cid, 0x01 | NH_SC_DNR, 0, MF_NONE);
	}
}

static int handle_admin(struct conn *c, const uint8_t *sqe)
{
	struct mock *m = c->m;
	uint16_t cid = nh_get16(sqe + 2);
	uint8_t buf[4096];

	switch (sqe[0]) {
	case NH_ADM_IDENTIFY:
		if (sqe[40] == 1)
			fill_id_ctrl(c, buf, m->next_cntlid);
		else if (sqe[40] == 0)
			fill_id_ns(m, nh_get32(sqe + 4), buf);
		else if (sqe[40] == 2) {
			memset(buf, 0, sizeof(buf));
			if (nh_get32(sqe + 4) < 1)
				nh_put32(buf, 1);
		} else
			return send_rsp(c, cid, 0x02 | NH_SC_DNR, 0, MF_NONE);
		return send_c2h(c, cid, buf, 4096, MF_NONE) ? 0 : send_rsp(c, cid, 0, 0, MF_NONE);
	case NH_ADM_SET_FEAT: {
		unsigned want = (nh_get32(sqe + 44) & 0xffff) + 1, n = want < 8 ? want : 8;

		if (sqe[40] != 7)
			return send_rsp(c, cid, 0x02 | NH_SC_DNR, 0, MF_NONE);
		return send_rsp(c, cid, 0, (n - 1) | (n - 1) << 16, MF_NONE);
	}
	case NH_ADM_GET_LOG: {
		uint32_t len = ((nh_get16(sqe + 42) | (uint32_t)nh_get16(sqe + 44) << 16) + 1) * 4;
		uint64_t off = nh_get64(sqe + 48);
		uint8_t page[2048];

		if (sqe[40] != 0x70 || len > 4096 || off + len > sizeof(page))
			return send_rsp(c, cid, 0x02 | NH_SC_DNR, 0, MF_NONE);
		fill_disc(m, page, sizeof(page));
		return send_c2h(c, cid, page + off, len, MF_NONE) ? 0
			: send_rsp(c, cid, 0, 0, MF_NONE);
	}
	case NH_ADM_KEEP_ALIVE: {
		bool hang;

		pthread_mutex_lock(&m->lock);
		m->st.keep_alives++;
		hang = m->fault == MF_KA_HANG;
		if (hang)
			m->fault = MF_NONE;
		pthread_mutex_unlock(&m->lock);
		return hang ? 0 : send_rsp(c, cid, 0, 0, MF_NONE);
	}
	case NH_ADM_ABORT: {
		uint16_t acid = (uint16_t)(nh_get32(sqe + 40) >> 16);
		struct conn *hc = NULL;

		pthread_mutex_lock(&m->lock);
		if (m->hung_conn && m->hung_cid == acid) {
			hc = m->hung_conn;
			m->hung_conn = NULL;
			m->st.aborts++;
		}
		pthread_mutex_unlock(&m->lock);
		if (hc)
			send_rsp(hc, acid, NH_SC_ABORT_REQ, 0, MF_NONE);
		return send_rsp(c, cid, 0, hc ? 0 : 1, MF_NONE);
	}
	default:
		return send_rsp(c, cid, 0x01 | NH_SC_DNR, 0, MF_NONE);
	}
}

static int handle_fabrics(struct conn *c, const uint8_t *sqe, const uint8_t *data)
{
	struct mock *m = c->m;
	uint16_t cid = nh_get16(sqe + 2);

	switch (sqe[4]) {
	case NH_FCT_CONNECT: {
		uint16_t cntlid;

		if (!data)
			return send_rsp(c, cid, 0x102 | NH_SC_DNR, 0, MF_NONE);
		c->qid = nh_get16(sqe + 42);
		c->discovery = !strcmp((const char *)data + 256, GDX_MOCK_DISC);
		if (!c->discovery && strcmp((const char *)data + 256, MOCK_NQN))
			return send_rsp(c, cid, 0x182 | NH_SC_DNR, 0x10100, MF_NONE);
		if (nh_get16(sqe + 44) > m->o.mqes)
			return send_rsp(c, cid, 0x182 | NH_SC_DNR, 44, MF_NONE);
		if (sqe[46] & 4) {
			if (m->o.refuse_sqflow)
				return send_rsp(c, cid, 0x02 | NH_SC_DNR, 0, MF_NONE);
			pthread_mutex_lock(&m->lock);
			m->st.sqflow_off++;
			pthread_mutex_unlock(&m->lock);
		}
		pthread_mutex_lock(&m->lock);
		if (!c->qid) {
			m->next_cntlid++;
			m->st.connects++;
		} else {
			m->st.io_connects++;
		}
		cntlid = m->next_cntlid;
		pthread_mutex_unlock(&m->lock);
		return send_rsp(c, cid, 0, cntlid, MF_NONE);
	}
	case NH_FCT_PROP_GET: {
		uint32_t ofst = nh_get32(sqe + 44);
		uint64_t v = ofst == 0 ? (uint64_t)m->o.mqes | 1ull << 16 | 2ull << 24 | 1ull << 37
			   : ofst == 8 ? 0x00010300 : ofst == 0x14 ? c->cc : ofst == 0x1c ? c->csts : 0;

		return send_rsp(c, cid, 0, v, MF_NONE);
	}
	case NH_FCT_PROP_SET: {
		uint32_t v = (uint32_t)nh_get64(sqe + 48);

		c->cc = v;
		c->csts = (v & 1) | (((v >> 14) & 3) ? 2u << 2 : 0);
		if ((v >> 14) & 3) {
			pthread_mutex_lock(&m->lock);
			m->st.shutdowns++;
			pthread_mutex_unlock(&m->lock);
		}
		return send_rsp(c, cid, 0, 0, MF_NONE);
	}
	default:
		return send_rsp(c, cid, 0x01 | NH_SC_DNR, 0, MF_NONE);
	}
}

static int handle_h2c(struct conn *c, const uint8_t *h)
{
	struct mock *m = c->m;
	uint16_t ttag = nh_get16(h + 10);
	uint32_t off = nh_get32(h + 12), n = nh_get32(h + 16);
	struct pend_write *p;
	uint8_t *tmp;
	int rc;

	if (ttag >= MAX_PEND || !c->pw[ttag].used)
		return -1;
	p = &c->pw[ttag];
	if (off != p->got || n > p->len - p->got)
		return -1;
	tmp = malloc(n + 4);
	rc = rd(c->fd, tmp, n + (c->ddgst ? 4 : 0));
	if (!rc && c->ddgst && nh_get32(tmp + n) != nh_crc32c(tmp, n))
		rc = -1;
	if (!rc)
		memcpy(m->ram + p->slba * m->o.block_size + off, tmp, n);
	free(tmp);
	if (rc)
		return rc;
	p->got += n;
	if (p->got == p->len) {
		p->used = false;
		return send_rsp(c, p->cid, 0, 0, MF_NONE);
	}
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct mock *m = c->m;
	uint8_t h[128];

	for (;;) {
		uint32_t plen;
		unsigned hlen, hd;

		if (rd(c->fd, h, 8))
			break;
		hlen = h[2];
		plen = nh_get32(h + 4);
		if (hlen < 8 || hlen > sizeof(h) || plen < hlen)
			break;
		if (rd(c->fd, h + 8, hlen - 8))
			break;
		if (h[0] == NH_PDU_ICREQ) {
			uint8_t r[128] = { 0 };

			c->hdgst = h[11] & 1;
			c->ddgst = h[11] & 2;
			nh_put_ch(r, NH_PDU_ICRESP, 0, 128, 0, 128);
			r[11] = h[11];
			nh_put32(r + 12, m->o.maxh2cdata);
			if (wr(c, r, 128))
				break;
			continue;
		}
		if (h[0] == NH_PDU_H2C_TERM) {
			pthread_mutex_lock(&m->lock);
			m->st.term_reqs++;
			m->st.last_fes = nh_get16(h + 8);
			pthread_mutex_unlock(&m->lock);
			goto out;
		}
		hd = c->hdgst ? 4 : 0;
		if (hd) {
			uint8_t d[4];

			if (rd(c->fd, d, 4) || nh_get32(d) != nh_crc32c(h, hlen))
				break;
		}
		if (h[0] == NH_PDU_H2C_DATA) {
			if (handle_h2c(c, h))
				break;
			continue;
		}
		if (h[0] != NH_PDU_CMD)
			break;
		{
			uint32_t dlen = plen - hlen - hd;
			uint8_t *data = NULL;
			int rc;

			if (dlen) {
				dlen -= c->ddgst ? 4 : 0;
				data = malloc(dlen + 4);
				if (rd(c->fd, data, dlen + (c->ddgst ? 4 : 0))) {
					free(data);
					break;
				}
				if (c->ddgst && nh_get32(data + dlen) != nh_crc32c(data, dlen)) {
					free(data);
					break;
				}
			}
			if (h[8] == NH_FABRICS)
				rc = handle_fabrics(c, h + 8, data);
			else if (!c->qid)
				rc = handle_admin(c, h + 8);
			else
				rc = handle_io(c, h + 8, data, dlen);
			free(data);
			if (rc == -2)
				goto out;	/* a deliberate drop */
			if (rc)
				break;
		}
	}
	/*
	 * A host that ends the connection sends its H2CTermReq before the reset
	 * that may have broken our last send: it is still in the receive queue.
	 */
	for (;;) {
		uint32_t plen;

		if (rd(c->fd, h, 8))
			break;
		plen = nh_get32(h + 4);
		if (h[0] == NH_PDU_H2C_TERM && !rd(c->fd, h + 8, 16)) {
			pthread_mutex_lock(&m->lock);
			m->st.term_reqs++;
			m->st.last_fes = nh_get16(h + 8);
			pthread_mutex_unlock(&m->lock);
			break;
		}
		for (uint32_t k = 8; k < plen; k++)
			if (rd(c->fd, h, 1))
				goto out;
	}
out:
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_lock(&m->lock);
	c->done = true;
	if (m->hung_conn == c)
		m->hung_conn = NULL;
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

static void free_conn(struct conn *c)
{
	pthread_join(c->t, NULL);
	close(c->fd);
	pthread_mutex_destroy(&c->send_lock);
	free(c);
}

static void *accept_main(void *arg)
{
	struct mock *m = arg;

	for (;;) {
		int fd = accept(m->lfd, NULL, NULL), one = 1;
		struct conn *c;
		unsigned i;

		if (fd < 0)
			break;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = calloc(1, sizeof(*c));
		c->m = m;
		c->fd = fd;
		pthread_mutex_init(&c->send_lock, NULL);
		pthread_mutex_lock(&m->lock);
		for (i = 0; i < MAX_CONNS; i++) {
			if (m->conns[i] && m->conns[i]->done) {
				struct conn *old = m->conns[i];

				m->conns[i] = NULL;
				pthread_mutex_unlock(&m->lock);
				free_conn(old);
				pthread_mutex_lock(&m->lock);
			}
		}
		for (i = 0; i < MAX_CONNS && m->conns[i]; i++)
			;
		if (i == MAX_CONNS) {
			pthread_mutex_unlock(&m->lock);
			close(fd);
			free(c);
			continue;
		}
		m->conns[i] = c;
		pthread_mutex_unlock(&m->lock);
		pthread_create(&c->t, NULL, conn_main, c);
	}
	return NULL;
}

struct mock *mock_create(const struct mock_opts *o)
{
	struct mock *m = calloc(1, sizeof(*m));

	m->o = *o;
	m->ram = calloc(o->nblocks, o->block_size);
	m->lfd = -1;
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

int mock_listen(struct mock *m, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	socklen_t al = sizeof(a);
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(m->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(m->lfd, 64)) {
		int e = -errno;

		close(m->lfd);
		m->lfd = -1;
		return e;
	}
	getsockname(m->lfd, (struct sockaddr *)&a, &al);
	m->port = ntohs(a.sin_port);
	pthread_create(&m->accept_t, NULL, accept_main, m);
	m->accepting = true;
	return m->port;
}

void mock_stop(struct mock *m)
{
	if (m->accepting) {
		shutdown(m->lfd, SHUT_RDWR);
		pthread_join(m->accept_t, NULL);
		close(m->lfd);
		m->lfd = -1;
		m->accepting = false;
	}
	for (unsigned i = 0; i < MAX_CONNS; i++) {
		struct conn *c;

		pthread_mutex_lock(&m->lock);
		c = m->conns[i];
		m->conns[i] = NULL;
		if (m->hung_conn == c)
			m->hung_conn = NULL;
		pthread_mutex_unlock(&m->lock);
		if (!c)
			continue;
		shutdown(c->fd, SHUT_RDWR);
		free_conn(c);
	}
}

void mock_destroy(struct mock *m)
{
	mock_stop(m);
	pthread_mutex_destroy(&m->lock);
	free(m->ram);
	free(m);
}
