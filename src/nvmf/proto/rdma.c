/* SPDX-License-Identifier: MIT */
/* NVMe/RDMA transport binding: CM private data and keyed SGL descriptors. */
#include <string.h>

#include "nvmf/proto/rdma.h"

const char *gdx_rdma_cm_status_str(uint16_t sts)
{
	static const char *const names[] = {
		[GDX_RDMA_CM_OK] = "accepted",
		[GDX_RDMA_CM_INVALID_LEN] = "invalid private data length",
		[GDX_RDMA_CM_INVALID_RECFMT] = "invalid record format",
		[GDX_RDMA_CM_INVALID_QID] = "invalid queue ID",
		[GDX_RDMA_CM_INVALID_HSQSIZE] = "invalid HSQSIZE",
		[GDX_RDMA_CM_INVALID_HRQSIZE] = "invalid HRQSIZE",
		[GDX_RDMA_CM_NO_RSC] = "no resources",
		[GDX_RDMA_CM_INVALID_IRD] = "invalid IRD",
		[GDX_RDMA_CM_INVALID_ORD] = "invalid ORD",
		[GDX_RDMA_CM_INVALID_CNTLID] = "invalid controller ID",
	};

	return sts < sizeof(names) / sizeof(names[0]) ? names[sts] : "unknown";
}

uint16_t gdx_rdma_cm_req_parse(const void *p, size_t len, const struct gdx_rdma_cm_limits *lim,
			       struct gdx_rdma_queue_req *out)
{
	struct gdx_rdma_cm_req r;
	uint16_t max_size;

	/*
	 * The binding's request is 32 bytes; the CM may hand over more (its
	 * private data area is padded on some fabrics), never less.
	 */
	if (!p || len < sizeof(r))
		return GDX_RDMA_CM_INVALID_LEN;
	memcpy(&r, p, sizeof(r));
	if (r.recfmt != GDX_RDMA_CM_RECFMT)
		return GDX_RDMA_CM_INVALID_RECFMT;
	if (r.qid > lim->max_qid)
		return GDX_RDMA_CM_INVALID_QID;
	max_size = r.qid ? lim->max_qsize : GDX_RDMA_ADMIN_DEPTH;
	/* an NVMe queue holds at least two entries (one always stays empty) */
	if (r.hsqsize < 1 || r.hsqsize >= max_size)
		return GDX_RDMA_CM_INVALID_HSQSIZE;
	if (r.hrqsize < 1)
		return GDX_RDMA_CM_INVALID_HRQSIZE;
	out->qid = r.qid;
	out->sq_size = (uint16_t)(r.hsqsize + 1u);
	out->rq_size = r.hrqsize;
	out->cntlid = r.qid ? r.cntlid : 0;
	return GDX_RDMA_CM_OK;
}

void gdx_rdma_cm_req_init(struct gdx_rdma_cm_req *r, uint16_t qid, uint16_t sq_size,
			  uint16_t cntlid)
{
	memset(r, 0, sizeof(*r));
	r->recfmt = GDX_RDMA_CM_RECFMT;
	r->qid = qid;
	r->hrqsize = sq_size;
	r->hsqsize = (uint16_t)(sq_size - 1u);
	r->cntlid = qid ? cntlid : 0;
}

void gdx_rdma_cm_rep_init(struct gdx_rdma_cm_rep *r, uint16_t crqsize)
{
	memset(r, 0, sizeof(*r));
	r->recfmt = GDX_RDMA_CM_RECFMT;
	r->crqsize = crqsize;
}

void gdx_rdma_cm_rej_init(struct gdx_rdma_cm_rej *r, uint16_t sts)
{
	r->recfmt = GDX_RDMA_CM_RECFMT;
	r->sts = sts;
}

uint16_t gdx_rdma_cm_rep_parse(const void *p, size_t len, uint16_t *crqsize)
{
	struct gdx_rdma_cm_rep r;

	if (!p || len < 4)
		return GDX_RDMA_CM_INVALID_LEN;
	memset(&r, 0, sizeof(r));
	memcpy(&r, p, len < sizeof(r) ? len : sizeof(r));
	if (r.recfmt != GDX_RDMA_CM_RECFMT)
		return GDX_RDMA_CM_INVALID_RECFMT;
	*crqsize = r.crqsize;
	return GDX_RDMA_CM_OK;
}

int gdx_rdma_cm_rej_parse(const void *p, size_t len)
{
	struct gdx_rdma_cm_rej r;

	if (!p || len < sizeof(r))
		return -1;
	memcpy(&r, p, sizeof(r));
	return r.recfmt == GDX_RDMA_CM_RECFMT ? r.sts : -1;
}

uint16_t gdx_rdma_sgl_parse(const struct gdx_nvme_sqe *c, struct gdx_rdma_sgl_info *out)
{
	const struct gdx_nvme_sgl *s = &c->dptr;

	memset(out, 0, sizeof(*out));
	if ((c->flags & GDX_NVME_FLAGS_PSDT_MASK) != GDX_NVME_FLAGS_PSDT_SGL)
		return GDX_NVME_SC_INVALID_FIELD;
	switch (s->ktype) {
	case GDX_NVME_SGL_KEYED:
	case GDX_NVME_SGL_KEYED_INV:
		out->length = (uint32_t)s->klength[0] | (uint32_t)s->klength[1] << 8 |
			      (uint32_t)s->klength[2] << 16;
		if (!out->length)
			return GDX_NVME_SC_SUCCESS;	/* nothing to move */
		out->kind = GDX_RDMA_DATA_KEYED;
		out->addr = s->addr;
		memcpy(&out->key, s->key, sizeof(out->key));
		out->invalidate = s->ktype == GDX_NVME_SGL_KEYED_INV;
		return GDX_NVME_SC_SUCCESS;
	case GDX_NVME_SGL_DATA_BLOCK_OFFSET:
		/* ICDOFF is 0: in-capsule data starts right after the SQE */
		if (s->addr != 0)
			return GDX_NVME_SC_SGL_INVALID_OFFSET;
		out->length = s->length;
		out->kind = s->length ? GDX_RDMA_DATA_INLINE : GDX_RDMA_DATA_NONE;
		return GDX_NVME_SC_SUCCESS;
	default:
		return GDX_NVME_SC_SGL_INVALID_TYPE;
	}
}

enum gdx_nvme_xfer gdx_nvmf_cmd_xfer(const struct gdx_nvme_sqe *c)
{
	/* a fabrics command says its direction in FCTYPE's low bits, as an opcode does */
	return gdx_nvme_opc_xfer(c->opc == GDX_NVME_OPC_FABRICS ? c->fctype : c->opc);
}

uint16_t gdx_rdma_capsule_check(const struct gdx_nvme_sqe *c, uint32_t capsule_len,
				uint32_t inline_max, uint32_t max_io,
				struct gdx_rdma_sgl_info *out)
{
	uint16_t st;

	if (capsule_len < sizeof(*c))
		return GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR;
	st = gdx_rdma_sgl_parse(c, out);
	if (st)
		return st | GDX_NVME_ST_DNR;
	switch (out->kind) {
	case GDX_RDMA_DATA_INLINE:
		if (out->length > inline_max)
			return GDX_NVME_SC_SGL_INVALID_OFFSET | GDX_NVME_ST_DNR;
		if (out->length > capsule_len - sizeof(*c))
			return GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR;
		if (gdx_nvmf_cmd_xfer(c) != GDX_NVME_XFER_H2C)
			return GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR;
		return 0;
	case GDX_RDMA_DATA_KEYED:
		return out->length > max_io ? GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR : 0;
	default:
		return 0;
	}
}

void gdx_rdma_sgl_keyed(struct gdx_nvme_sgl *sgl, uint64_t addr, uint32_t len, uint32_t key,
			bool invalidate)
{
	memset(sgl, 0, sizeof(*sgl));
	sgl->addr = addr;
	sgl->klength[0] = (uint8_t)len;
	sgl->klength[1] = (uint8_t)(len >> 8);
	sgl->klength[2] = (uint8_t)(len >> 16);
	memcpy(sgl->key, &key, sizeof(key));
	sgl->ktype = invalidate ? GDX_NVME_SGL_KEYED_INV : GDX_NVME_SGL_KEYED;
}

void gdx_rdma_sgl_inline(struct gdx_nvme_sgl *sgl, uint32_t len)
{
	memset(sgl, 0, sizeof(*sgl));
	sgl->length = len;
	sgl->type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
}

void gdx_rdma_disc_tsas(struct gdx_nvmf_disc_entry *e)
{
	memset(e->tsas, 0, sizeof(e->tsas));
	e->rdma.qptype = GDX_RDMA_QPTYPE_CONNECTED;
	e->rdma.prtype = GDX_RDMA_PRTYPE_NOT_SPECIFIED;
	e->rdma.cms = GDX_RDMA_CMS_RDMA_CM;
}
