/* SPDX-License-Identifier: MIT */
/* NVM command set: Read, Write, Flush, Write Zeroes, Dataset Management. */
#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/internal.h"

#define DNR GDX_NVME_ST_DNR

static uint16_t check_range(const struct nvmf_ns *ns, uint64_t slba, uint64_t nlb)
{
	if (slba >= ns->nsze || nlb > ns->nsze - slba)
		return GDX_NVME_SC_LBA_RANGE | DNR;
	return 0;
}

uint16_t nvmf_io_prep(struct nvmf_req *req)
{
	struct nvmf_subsys *s = req->sq->ctrl->subsys;
	const struct gdx_nvme_sqe *cmd = &req->cmd;
	uint32_t nsid = cmd->nsid;
	struct nvmf_ns *ns;
	uint16_t st;

	switch (cmd->opc) {
	case GDX_NVME_CMD_READ:
	case GDX_NVME_CMD_WRITE:
	case GDX_NVME_CMD_FLUSH:
	case GDX_NVME_CMD_WRITE_ZEROES:
	case GDX_NVME_CMD_DSM:
		break;
	default:
		return GDX_NVME_SC_INVALID_OPCODE | DNR;
	}
	if (nsid == 0 || nsid > s->max_nsid || !(ns = s->ns[nsid - 1]))
		return GDX_NVME_SC_INVALID_NS | DNR;
	if (!ns->enabled)
		return GDX_NVME_SC_NS_NOT_READY;
	req->ns = ns;
	if (req->in_capsule && cmd->opc != GDX_NVME_CMD_WRITE && cmd->opc != GDX_NVME_CMD_DSM)
		return GDX_NVME_SC_INVALID_FIELD | DNR;

	switch (cmd->opc) {
	case GDX_NVME_CMD_READ:
	case GDX_NVME_CMD_WRITE: {
		uint64_t slba = gdx_nvme_rw_slba(cmd), nlb = gdx_nvme_rw_nlb(cmd);
		uint64_t len = nlb << ns->lba_shift;

		st = check_range(ns, slba, nlb);
		if (st)
			return st;
		if (len > req->sq->tgt->max_io)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		if (len != req->len)
			return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
		req->io_off = slba << ns->lba_shift;
		if (ns->ops->map)
			req->buf = ns->ops->map(ns, req->io_off, len,
						cmd->opc == GDX_NVME_CMD_WRITE);
		return 0;
	}
	case GDX_NVME_CMD_WRITE_ZEROES: {
		uint64_t slba = gdx_nvme_rw_slba(cmd), nlb = gdx_nvme_rw_nlb(cmd);

		if (req->len)
			return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
		st = check_range(ns, slba, nlb);
		if (st)
			return st;
		req->io_off = slba << ns->lba_shift;
		return 0;
	}
	case GDX_NVME_CMD_DSM: {
		uint32_t nr = (cmd->cdw10 & 0xff) + 1;

		/* Linux sends a full 4 KiB range buffer whatever NR says */
		if (req->len < nr * sizeof(struct gdx_nvme_dsm_range) || req->len > 4096)
			return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
		return 0;
	}
	default:	/* flush */
		if (req->len)
			return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
		return 0;
	}
}

void nvmf_io_exec(struct nvmf_req *req)
{
	struct nvmf_ns *ns = req->ns;

	if (req->cmd.opc == GDX_NVME_CMD_DSM) {
		const struct gdx_nvme_dsm_range *r = req->buf;
		uint32_t nr = (req->cmd.cdw10 & 0xff) + 1;

		for (uint32_t i = 0; i < nr; i++) {
			uint16_t st = check_range(ns, r[i].slba, r[i].nlb);

			if (st) {
				nvmf_req_complete(req, st);
				return;
			}
		}
		/* IDR/IDW hints alone are a successful no-op */
		if (!(req->cmd.cdw11 & GDX_NVME_DSM_AD)) {
			nvmf_req_complete(req, 0);
			return;
		}
	}
	ns->ops->submit(ns, req);
}

/* Backends call this when an I/O finishes: errno-style result to NVMe status. */
void nvmf_io_done(struct nvmf_req *req, int res)
{
	struct nvmf_ns *ns = req->ns;
	uint16_t st = 0;

	if (res < 0) {
		gdx_counter_add(&ns->ctr[NS_CTR_ERRORS], 1);
		GDX_WARN("nvmf", "namespace %u (%s): opcode 0x%02x at byte %llu failed: %s",
			 ns->nsid, ns->spec, req->cmd.opc, (unsigned long long)req->io_off,
			 strerror(-res));
		switch (req->cmd.opc) {
		case GDX_NVME_CMD_READ:
			st = GDX_NVME_SC_READ_ERROR;
			break;
		case GDX_NVME_CMD_WRITE:
		case GDX_NVME_CMD_WRITE_ZEROES:
			st = res == -ENOSPC ? (GDX_NVME_SC_CAP_EXCEEDED | DNR) :
			     res == -EROFS || res == -EPERM || res == -EACCES ?
						   (GDX_NVME_SC_NS_WRITE_PROTECTED | DNR) :
						   GDX_NVME_SC_WRITE_FAULT;
			break;
		default:
			st = GDX_NVME_SC_INTERNAL;
		}
	} else {
		switch (req->cmd.opc) {
		case GDX_NVME_CMD_READ:
			gdx_counter_add(&ns->ctr[NS_CTR_READS], 1);
			gdx_counter_add(&ns->ctr[NS_CTR_READ_BYTES], req->len);
			break;
		case GDX_NVME_CMD_WRITE:
			gdx_counter_add(&ns->ctr[NS_CTR_WRITES], 1);
			gdx_counter_add(&ns->ctr[NS_CTR_WRITE_BYTES], req->len);
			break;
		case GDX_NVME_CMD_FLUSH:
			gdx_counter_add(&ns->ctr[NS_CTR_FLUSHES], 1);
			break;
		}
	}
	nvmf_req_complete(req, st);
}
