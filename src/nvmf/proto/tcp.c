/* SPDX-License-Identifier: MIT */
/*
 * NVMe/TCP PDU validation and encoding.  The checks mirror what the Linux
 * host and nvmet enforce (see docs/nvmf-target.md): a PDU that fails one is
 * fatal to its connection, and the error says which FES/FEI to report.
 */
#include <errno.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/util.h"
#include "nvmf/proto/tcp.h"

uint32_t gdx_tcp_hdgst(const void *hdr, size_t hlen)
{
	return gdx_crc32c(hdr, hlen);
}

uint32_t gdx_tcp_ddgst(const struct iovec *iov, int iovcnt)
{
	uint32_t crc = 0;

	for (int i = 0; i < iovcnt; i++)
		crc = gdx_crc32c_update(crc, iov[i].iov_base, iov[i].iov_len);
	return crc;
}

static bool type_has_hdgst(uint8_t type)
{
	switch (type) {
	case GDX_TCP_CMD:
	case GDX_TCP_RSP:
	case GDX_TCP_H2C_DATA:
	case GDX_TCP_C2H_DATA:
	case GDX_TCP_R2T:
		return true;
	default:
		return false;
	}
}

static uint8_t expected_hlen(uint8_t type)
{
	switch (type) {
	case GDX_TCP_ICREQ:
	case GDX_TCP_ICRESP:
		return 128;
	case GDX_TCP_CMD:
		return sizeof(struct gdx_tcp_cmd);
	default:
		return 24;
	}
}

static bool type_legal(uint8_t type, enum gdx_tcp_role role)
{
	if (role == GDX_TCP_ROLE_TARGET)
		return type == GDX_TCP_ICREQ || type == GDX_TCP_H2C_TERM || type == GDX_TCP_CMD ||
		       type == GDX_TCP_H2C_DATA;
	return type == GDX_TCP_ICRESP || type == GDX_TCP_C2H_TERM || type == GDX_TCP_RSP ||
	       type == GDX_TCP_C2H_DATA || type == GDX_TCP_R2T;
}

static int fail(struct gdx_tcp_err *err, uint16_t fes, uint32_t fei, const char *why)
{
	err->fes = fes;
	err->fei = fei;
	err->why = why;
	return -EPROTO;
}

uint32_t gdx_tcp_hdr_len(const struct gdx_tcp_ch *ch, enum gdx_tcp_role role,
			 enum gdx_tcp_phase phase, const struct gdx_tcp_params *p,
			 struct gdx_tcp_err *err)
{
	bool ic = ch->type == GDX_TCP_ICREQ || ch->type == GDX_TCP_ICRESP;

	if (!type_legal(ch->type, role)) {
		fail(err, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_ch, type),
		     "unexpected PDU type");
		return 0;
	}
	if (ic != (phase == GDX_TCP_PHASE_IC)) {
		fail(err, GDX_TCP_FES_PDU_SEQ, offsetof(struct gdx_tcp_ch, type),
		     ic ? "second connection initialization" :
			  "PDU before connection initialization");
		return 0;
	}
	if (ch->hlen != expected_hlen(ch->type)) {
		fail(err, GDX_TCP_FES_INVALID_HEADER, offsetof(struct gdx_tcp_ch, hlen),
		     "wrong header length");
		return 0;
	}
	return ch->hlen + (p->hdgst && type_has_hdgst(ch->type) ? GDX_TCP_DGST_LEN : 0);
}

/* Data layout of a PDU that may carry data: pdo, alignment, digest, plen. */
static int check_data_layout(const struct gdx_tcp_ch *ch, const struct gdx_tcp_params *p,
			     struct gdx_tcp_pdu_info *info, struct gdx_tcp_err *err)
{
	uint32_t dg = info->has_ddgst ? GDX_TCP_DGST_LEN : 0;

	if (ch->plen == info->hdr_len) {
		/* no data: pdo is 0 (or names the end of the header, tolerated) */
		if (ch->pdo != 0 && ch->pdo != info->hdr_len)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 3, "PDO set without data");
		if (ch->flags & GDX_TCP_F_DDGST)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 1,
				    "data digest flag without data");
		info->has_ddgst = false;
		info->data_off = ch->plen;
		return 0;
	}
	if (ch->plen < info->hdr_len)
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "PLEN shorter than the header");
	if (ch->pdo < info->hdr_len || ch->pdo >= ch->plen)
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 3, "PDO outside the PDU");
	if (ch->pdo % ((p->cpda + 1u) * 4))
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 3, "PDO not aligned to CPDA");
	if (p->ddgst && !(ch->flags & GDX_TCP_F_DDGST))
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 1, "data digest flag missing");
	if ((uint64_t)ch->pdo + dg >= ch->plen)
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "PLEN leaves no data");
	info->data_off = ch->pdo;
	info->pad_len = ch->pdo - info->hdr_len;
	info->data_len = ch->plen - ch->pdo - dg;
	return 0;
}

int gdx_tcp_pdu_check(const union gdx_tcp_pdu *pdu, enum gdx_tcp_role role,
		      enum gdx_tcp_phase phase, const struct gdx_tcp_params *p,
		      uint32_t max_data, struct gdx_tcp_pdu_info *info, struct gdx_tcp_err *err)
{
	const struct gdx_tcp_ch *ch = &pdu->ch;
	int ret;

	memset(info, 0, sizeof(*info));
	info->hdr_len = gdx_tcp_hdr_len(ch, role, phase, p, err);
	if (!info->hdr_len)
		return -EPROTO;
	info->data_off = ch->plen;

	if (type_has_hdgst(ch->type)) {
		if (!!(ch->flags & GDX_TCP_F_HDGST) != p->hdgst)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 1,
				    p->hdgst ? "header digest flag missing" :
					       "header digest flag not negotiated");
		if ((ch->flags & GDX_TCP_F_DDGST) && !p->ddgst)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 1,
				    "data digest flag not negotiated");
		if (p->hdgst) {
			uint32_t want = gdx_tcp_hdgst(pdu, ch->hlen), got;

			memcpy(&got, pdu->raw + ch->hlen, sizeof(got));
			if (want != got)
				return fail(err, GDX_TCP_FES_HDGST, ch->hlen,
					    "header digest mismatch");
			info->has_hdgst = true;
		}
		info->has_ddgst = p->ddgst;
	} else if (ch->flags & (GDX_TCP_F_HDGST | GDX_TCP_F_DDGST)) {
		return fail(err, GDX_TCP_FES_INVALID_HEADER, 1,
			    "digest flag on a PDU without digests");
	}

	switch (ch->type) {
	case GDX_TCP_ICREQ:
		if (ch->plen != sizeof(struct gdx_tcp_icreq))
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "ICReq PLEN is not 128");
		if (ch->pdo)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 3, "ICReq PDO is not 0");
		if (pdu->icreq.pfv != 0)
			return fail(err, GDX_TCP_FES_UNSUPPORTED, 8,
				    "unsupported PDU format version");
		/* Data goes right after the header: no host alignment is honoured. */
		if (pdu->icreq.hpda != 0)
			return fail(err, GDX_TCP_FES_UNSUPPORTED, 10, "HPDA other than 0");
		return 0;
	case GDX_TCP_ICRESP:
		if (ch->plen != sizeof(struct gdx_tcp_icresp))
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "ICResp PLEN is not 128");
		if (pdu->icresp.pfv != 0)
			return fail(err, GDX_TCP_FES_UNSUPPORTED, 8,
				    "unsupported PDU format version");
		if (pdu->icresp.cpda != 0)
			return fail(err, GDX_TCP_FES_UNSUPPORTED, 10, "CPDA other than 0");
		if (pdu->icresp.maxdata < GDX_TCP_MIN_MAXH2CDATA || pdu->icresp.maxdata % 4)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 12, "bad MAXH2CDATA");
		return 0;
	case GDX_TCP_H2C_TERM:
	case GDX_TCP_C2H_TERM:
		if (ch->plen < GDX_TCP_TERM_HLEN ||
		    ch->plen > GDX_TCP_TERM_HLEN + GDX_TCP_TERM_MAX_DATA)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 4,
				    "TermReq PLEN out of range");
		info->data_off = GDX_TCP_TERM_HLEN;
		info->data_len = ch->plen - GDX_TCP_TERM_HLEN;
		return 0;
	case GDX_TCP_CMD:
		ret = check_data_layout(ch, p, info, err);
		if (ret)
			return ret;
		if (info->data_len > max_data)
			return fail(err, GDX_TCP_FES_DATA_LIMIT, 4,
				    "in-capsule data over the limit");
		return 0;
	case GDX_TCP_RSP:
	case GDX_TCP_R2T:
		if (ch->pdo)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 3,
				    "PDO set on a PDU without data");
		if (ch->plen != info->hdr_len)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "PLEN does not match HLEN");
		info->has_ddgst = false;
		if (ch->type == GDX_TCP_R2T && pdu->r2t.r2tl == 0)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 16, "R2T of zero length");
		return 0;
	case GDX_TCP_H2C_DATA:
	case GDX_TCP_C2H_DATA:
		if (ch->plen == info->hdr_len)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 4, "data PDU without data");
		ret = check_data_layout(ch, p, info, err);
		if (ret)
			return ret;
		if (pdu->data.datal != info->data_len)
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 16,
				    "DATAL does not match PLEN");
		if (ch->type == GDX_TCP_H2C_DATA && pdu->data.datal > p->maxh2cdata)
			return fail(err, GDX_TCP_FES_DATA_LIMIT, 16, "H2CData over MAXH2CDATA");
		if (ch->type == GDX_TCP_C2H_DATA && (ch->flags & GDX_TCP_F_DATA_SUCCESS) &&
		    !(ch->flags & GDX_TCP_F_DATA_LAST))
			return fail(err, GDX_TCP_FES_INVALID_HEADER, 1, "SUCCESS without LAST_PDU");
		return 0;
	}
	return fail(err, GDX_TCP_FES_INVALID_HEADER, 0, "unexpected PDU type");
}

static void ch_init(struct gdx_tcp_ch *ch, uint8_t type, uint8_t hlen)
{
	ch->type = type;
	ch->flags = 0;
	ch->hlen = hlen;
	ch->pdo = 0;
	ch->plen = hlen;
}

/*
 * Adds the header digest (if negotiated) and data layout; returns header bytes
 * to send.  Not inlined: GCC's overflow check otherwise sizes the digest's
 * destination by the member the caller filled, not by the union.
 */
__attribute__((noinline)) static uint32_t finish(union gdx_tcp_pdu *pdu, uint32_t data_len,
						 const struct gdx_tcp_params *p)
{
	struct gdx_tcp_ch *ch = &pdu->ch;
	uint32_t hl = ch->hlen;

	if (p->hdgst) {
		ch->flags |= GDX_TCP_F_HDGST;
		hl += GDX_TCP_DGST_LEN;
	}
	if (data_len) {
		ch->pdo = (uint8_t)hl;
		ch->plen = hl + data_len;
		if (p->ddgst) {
			ch->flags |= GDX_TCP_F_DDGST;
			ch->plen += GDX_TCP_DGST_LEN;
		}
	} else {
		ch->plen = hl;
	}
	if (p->hdgst) {
		uint32_t d = gdx_tcp_hdgst(ch, ch->hlen);

		memcpy(pdu->raw + ch->hlen, &d, sizeof(d));
	}
	return hl;
}

uint32_t gdx_tcp_icreq_init(struct gdx_tcp_icreq *r, bool hdgst, bool ddgst, uint32_t maxr2t)
{
	memset(r, 0, sizeof(*r));
	ch_init(&r->ch, GDX_TCP_ICREQ, sizeof(*r));
	r->dgst = (hdgst ? GDX_TCP_DGST_HDR : 0) | (ddgst ? GDX_TCP_DGST_DATA : 0);
	r->maxr2t = maxr2t;
	return sizeof(*r);
}

uint32_t gdx_tcp_icresp_init(struct gdx_tcp_icresp *r, uint8_t dgst, uint32_t maxh2cdata)
{
	memset(r, 0, sizeof(*r));
	ch_init(&r->ch, GDX_TCP_ICRESP, sizeof(*r));
	r->dgst = dgst & (GDX_TCP_DGST_HDR | GDX_TCP_DGST_DATA);
	r->maxdata = maxh2cdata;
	return sizeof(*r);
}

uint32_t gdx_tcp_cmd_init(union gdx_tcp_pdu *pdu, const struct gdx_nvme_sqe *sqe,
			  uint32_t data_len, const struct gdx_tcp_params *p)
{
	struct gdx_tcp_cmd *c = &pdu->cmd;

	ch_init(&c->ch, GDX_TCP_CMD, sizeof(*c));
	c->sqe = *sqe;
	return finish(pdu, data_len, p);
}

uint32_t gdx_tcp_rsp_init(union gdx_tcp_pdu *pdu, const struct gdx_nvme_cqe *cqe,
			  const struct gdx_tcp_params *p)
{
	struct gdx_tcp_rsp *r = &pdu->rsp;

	ch_init(&r->ch, GDX_TCP_RSP, sizeof(*r));
	r->cqe = *cqe;
	return finish(pdu, 0, p);
}

uint32_t gdx_tcp_data_init(union gdx_tcp_pdu *pdu, uint8_t type, uint16_t cccid, uint16_t ttag,
			   uint32_t datao, uint32_t datal, uint8_t flags,
			   const struct gdx_tcp_params *p)
{
	struct gdx_tcp_data *d = &pdu->data;

	ch_init(&d->ch, type, sizeof(*d));
	d->ch.flags = flags & (GDX_TCP_F_DATA_LAST | GDX_TCP_F_DATA_SUCCESS);
	d->cccid = cccid;
	d->ttag = type == GDX_TCP_H2C_DATA ? ttag : 0;
	d->datao = datao;
	d->datal = datal;
	d->rsvd = 0;
	return finish(pdu, datal, p);
}

uint32_t gdx_tcp_r2t_init(union gdx_tcp_pdu *pdu, uint16_t cccid, uint16_t ttag, uint32_t r2to,
			  uint32_t r2tl, const struct gdx_tcp_params *p)
{
	struct gdx_tcp_r2t *r = &pdu->r2t;

	ch_init(&r->ch, GDX_TCP_R2T, sizeof(*r));
	r->cccid = cccid;
	r->ttag = ttag;
	r->r2to = r2to;
	r->r2tl = r2tl;
	r->rsvd = 0;
	return finish(pdu, 0, p);
}

uint32_t gdx_tcp_term_init(void *buf, uint8_t type, uint16_t fes, uint32_t fei,
			   const void *bad_hdr, uint32_t bad_len)
{
	struct gdx_tcp_term *t = buf;

	bad_len = GDX_MIN(bad_len, (uint32_t)GDX_TCP_TERM_MAX_DATA);
	memset(t, 0, sizeof(*t));
	ch_init(&t->ch, type, GDX_TCP_TERM_HLEN);
	t->fes = fes;
	t->feil = (uint16_t)fei;
	t->feiu = (uint16_t)(fei >> 16);
	if (bad_len)
		memcpy((uint8_t *)buf + GDX_TCP_TERM_HLEN, bad_hdr, bad_len);
	t->ch.plen = GDX_TCP_TERM_HLEN + bad_len;
	return t->ch.plen;
}

const char *gdx_tcp_fes_str(uint16_t fes)
{
	switch (fes) {
	case GDX_TCP_FES_INVALID_HEADER: return "invalid PDU header field";
	case GDX_TCP_FES_PDU_SEQ: return "PDU sequence error";
	case GDX_TCP_FES_HDGST: return "header digest error";
	case GDX_TCP_FES_DATA_RANGE: return "data transfer out of range";
	case GDX_TCP_FES_DATA_LIMIT: return "data transfer limit exceeded";
	case GDX_TCP_FES_UNSUPPORTED: return "unsupported parameter";
	}
	return "unknown fatal error";
}

const char *gdx_tcp_pdu_type_str(uint8_t type)
{
	switch (type) {
	case GDX_TCP_ICREQ: return "ICReq";
	case GDX_TCP_ICRESP: return "ICResp";
	case GDX_TCP_H2C_TERM: return "H2CTermReq";
	case GDX_TCP_C2H_TERM: return "C2HTermReq";
	case GDX_TCP_CMD: return "CapsuleCmd";
	case GDX_TCP_RSP: return "CapsuleResp";
	case GDX_TCP_H2C_DATA: return "H2CData";
	case GDX_TCP_C2H_DATA: return "C2HData";
	case GDX_TCP_R2T: return "R2T";
	}
	return "unknown";
}
