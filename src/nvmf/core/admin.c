/* SPDX-License-Identifier: MIT */
/*
 * Admin commands the Linux host and nvme-cli issue: Identify CNS 0/1/2/3,
 * Get Log Page (error, SMART, firmware slot, changed namespaces, command
 * effects, discovery), Get/Set Features, Keep Alive, AER, Abort.  The values
 * follow docs/nvmf-target.md (what the host checks, and why).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/internal.h"
#include "nvmf/proto/rdma.h"

#define DNR GDX_NVME_ST_DNR

static uint8_t mdts_of(uint32_t max_io)
{
	uint8_t m = 0;

	while ((4096u << (m + 1)) <= max_io)
		m++;
	return m;
}

static void id_ctrl(struct nvmf_ctrl *c, struct gdx_nvme_id_ctrl *id)
{
	struct nvmf_tgt *t = c->tgt;
	struct nvmf_subsys *s = c->subsys;

	memset(id, 0, sizeof(*id));
	id->vid = 0;
	gdx_nvme_field_pad(id->sn, sizeof(id->sn), s->serial);
	gdx_nvme_field_pad(id->mn, sizeof(id->mn), s->model);
	gdx_nvme_field_pad(id->fr, sizeof(id->fr), GDX_NVMF_FW_REV);
	id->rab = 6;
	id->cmic = s->discovery ? 0 : 0x02;	/* several controllers; no ANA */
	id->mdts = mdts_of(t->max_io);
	id->cntlid = c->cntlid;
	id->ver = NVMF_VS;
	id->ctratt = 0x01 | 0x40;	/* 128-bit host ID, traffic-based keep-alive */
	id->cntrltype = s->discovery ? GDX_NVME_CNTRLTYPE_DISC : GDX_NVME_CNTRLTYPE_IO;
	id->acl = 3;
	id->aerl = NVMF_AERL - 1;
	id->frmw = 0x03;
	id->lpa = s->discovery ? GDX_NVME_LPA_EXT : (0x02 | GDX_NVME_LPA_EXT);
	id->elpe = NVMF_ERR_LOG_ENTRIES - 1;
	id->kas = NVMF_KAS;
	id->sqes = 0x66;
	id->cqes = 0x44;
	id->maxcmd = t->max_qdepth;
	id->sgls = GDX_NVME_SGLS_SUPPORTED | GDX_NVME_SGLS_OFFSET;
	if (c->trtype == GDX_NVMF_TRTYPE_RDMA)
		id->sgls |= GDX_NVME_SGLS_KEYED;	/* the RDMA binding requires it */
	snprintf(id->subnqn, sizeof(id->subnqn), "%s", s->nqn);
	id->msdbd = 1;
	id->psd[0].max_power = 0x9c4;
	if (s->discovery) {
		id->oaes = GDX_NVME_OAES_DISC_CHANGE;
		return;
	}
	id->oaes = GDX_NVME_OAES_NS_ATTR;
	id->nn = NVMF_MAX_NS;
	id->oncs = GDX_NVME_ONCS_DSM | GDX_NVME_ONCS_WRITE_ZEROES;
	id->vwc = 1;
	id->ioccsz = (64 + t->inline_data) / 16;
	id->iorcsz = 1;
	id->icdoff = 0;
	id->fcatt = 0;	/* dynamic controller model */
}

static void id_ns(struct nvmf_ns *ns, struct gdx_nvme_id_ns *id)
{
	memset(id, 0, sizeof(*id));
	if (!ns)
		return;	/* inactive NSID: zeroes, success */
	id->nsze = id->ncap = id->nuse = ns->nsze;
	id->nlbaf = 0;
	id->flbas = 0;
	id->nmic = 1;
	id->dlfeat = 0x09;	/* deallocated blocks read as zeroes; DEAC honoured */
	id->lbaf[0].ds = (uint8_t)ns->lba_shift;
	memcpy(id->nguid, ns->nguid, 16);
	memcpy(id->eui64, ns->eui64, 8);
}

static size_t ns_descs(struct nvmf_ns *ns, uint8_t *buf)
{
	size_t off = 0;
	struct gdx_nvme_ns_desc d = { 0 };
	static const uint8_t csi_nvm = 0;

#define ADD(type, ptr, n)                                                                \
	do {                                                                             \
		d.nidt = (type);                                                        \
		d.nidl = (n);                                                           \
		memcpy(buf + off, &d, sizeof(d));                                       \
		memcpy(buf + off + sizeof(d), (ptr), (n));                              \
		off += sizeof(d) + (n);                                                 \
	} while (0)
	ADD(GDX_NVME_NIDT_EUI64, ns->eui64, 8);
	ADD(GDX_NVME_NIDT_NGUID, ns->nguid, 16);
	ADD(GDX_NVME_NIDT_UUID, ns->uuid, 16);
	ADD(GDX_NVME_NIDT_CSI, &csi_nvm, 1);
#undef ADD
	return off;
}

static struct nvmf_ns *find_ns(struct nvmf_subsys *s, uint32_t nsid)
{
	if (nsid == 0 || nsid > s->max_nsid)
		return NULL;
	return s->ns[nsid - 1];
}

static void copy_out(struct nvmf_req *req, const void *src, size_t n)
{
	memset(req->buf, 0, req->len);
	memcpy(req->buf, src, GDX_MIN(n, (size_t)req->len));
}

static uint16_t identify(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	struct nvmf_subsys *s = c->subsys;
	uint8_t cns = req->cmd.cdw10 & 0xff;
	uint32_t nsid = req->cmd.nsid;
	uint8_t *buf = calloc(1, GDX_NVME_IDENTIFY_SIZE);
	uint16_t st = 0;

	if (!buf)
		return GDX_NVME_SC_INTERNAL;
	if (s->discovery && cns != GDX_NVME_CNS_CTRL) {
		st = GDX_NVME_SC_INVALID_FIELD | DNR;
		goto out;
	}
	switch (cns) {
	case GDX_NVME_CNS_CTRL:
		id_ctrl(c, (struct gdx_nvme_id_ctrl *)buf);
		break;
	case GDX_NVME_CNS_NS:
		if (nsid == 0 || nsid == GDX_NVME_NSID_ALL || nsid > NVMF_MAX_NS) {
			st = GDX_NVME_SC_INVALID_NS | DNR;
			break;
		}
		id_ns(find_ns(s, nsid), (struct gdx_nvme_id_ns *)buf);
		break;
	case GDX_NVME_CNS_NS_ACTIVE_LIST: {
		uint32_t *list = (uint32_t *)buf;
		unsigned n = 0;

		if (nsid >= 0xfffffffe) {
			st = GDX_NVME_SC_INVALID_NS | DNR;
			break;
		}
		for (uint32_t i = nsid + 1; i <= s->max_nsid && n < 1024; i++)
			if (s->ns[i - 1])
				list[n++] = i;
		break;
	}
	case GDX_NVME_CNS_NS_DESC_LIST: {
		struct nvmf_ns *ns = find_ns(s, nsid);

		if (!ns) {
			st = GDX_NVME_SC_INVALID_NS | DNR;
			break;
		}
		ns_descs(ns, buf);
		break;
	}
	default:
		st = GDX_NVME_SC_INVALID_FIELD | DNR;
	}
	if (!st)
		copy_out(req, buf, GDX_NVME_IDENTIFY_SIZE);
out:
	free(buf);
	return st;
}

static void u128_set(uint8_t *f, uint64_t v)
{
	memset(f, 0, 16);
	memcpy(f, &v, sizeof(v));
}

static void smart(struct nvmf_ctrl *c, uint32_t nsid, struct gdx_nvme_smart_log *l)
{
	struct nvmf_subsys *s = c->subsys;
	uint64_t rb = 0, wb = 0, r = 0, w = 0, e = 0;

	memset(l, 0, sizeof(*l));
	for (uint32_t i = 1; i <= s->max_nsid; i++) {
		struct nvmf_ns *ns = s->ns[i - 1];

		if (!ns || (nsid != GDX_NVME_NSID_ALL && nsid != 0 && nsid != i))
			continue;
		r += gdx_counter_get(&ns->ctr[NS_CTR_READS]);
		w += gdx_counter_get(&ns->ctr[NS_CTR_WRITES]);
		rb += gdx_counter_get(&ns->ctr[NS_CTR_READ_BYTES]);
		wb += gdx_counter_get(&ns->ctr[NS_CTR_WRITE_BYTES]);
		e += gdx_counter_get(&ns->ctr[NS_CTR_ERRORS]);
	}
	/* 313 K: a plausible temperature; the spare capacity is full */
	l->temperature[0] = 313 & 0xff;
	l->temperature[1] = 313 >> 8;
	l->avail_spare = 100;
	l->spare_thresh = 10;
	/* data units are thousands of 512-byte units, rounded up */
	u128_set(l->data_units_read, (rb / 512 + 999) / 1000);
	u128_set(l->data_units_written, (wb / 512 + 999) / 1000);
	u128_set(l->host_reads, r);
	u128_set(l->host_writes, w);
	u128_set(l->media_errors, e);
	pthread_mutex_lock(&c->lock);
	u128_set(l->num_err_log_entries, c->err_count);
	pthread_mutex_unlock(&c->lock);
	u128_set(l->power_cycles, 1);
}

static uint16_t disc_log(struct nvmf_req *req, uint8_t **page, size_t *size)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_ctrl *c = sq->ctrl;
	struct nvmf_tgt *t = c->tgt;
	unsigned n = 0;
	struct gdx_nvmf_disc_hdr *h;

	pthread_mutex_lock(&t->lock);
	for (unsigned p = 0; p < t->nports; p++)
		for (unsigned i = 0; i < t->ports[p].nsubsys; i++)
			n += nvmf_host_allowed(t->ports[p].subsys[i], c->hostnqn);
	*size = sizeof(*h) + (size_t)n * sizeof(struct gdx_nvmf_disc_entry);
	*page = calloc(1, *size);
	if (!*page) {
		pthread_mutex_unlock(&t->lock);
		return GDX_NVME_SC_INTERNAL;
	}
	h = (struct gdx_nvmf_disc_hdr *)*page;
	h->genctr = t->disc_genctr;
	h->numrec = n;
	n = 0;
	for (unsigned p = 0; p < t->nports; p++) {
		struct nvmf_port *port = &t->ports[p];

		for (unsigned i = 0; i < port->nsubsys; i++) {
			struct nvmf_subsys *s = port->subsys[i];
			struct gdx_nvmf_disc_entry *e;

			if (!nvmf_host_allowed(s, c->hostnqn))
				continue;
			e = (struct gdx_nvmf_disc_entry *)(*page + sizeof(*h)) + n++;
			e->trtype = port->trtype;
			e->adrfam = port->adrfam;
			e->subtype = GDX_NVMF_SUBTYPE_NVME;
			e->treq = (port->sectype ? port->treq : GDX_NVMF_TREQ_NOT_SPECIFIED) |
				  GDX_NVMF_TREQ_DISABLE_SQFLOW;
			e->portid = port->portid;
			e->cntlid = GDX_NVME_CNTLID_DYNAMIC;
			e->asqsz = 32;
			snprintf(e->trsvcid, sizeof(e->trsvcid), "%s", port->trsvcid);
			snprintf(e->subnqn, sizeof(e->subnqn), "%s", s->nqn);
			nvmf_disc_traddr(port, sq, e->traddr, sizeof(e->traddr));
			if (port->trtype == GDX_NVMF_TRTYPE_RDMA)
				gdx_rdma_disc_tsas(e);
			else
				e->tcp.sectype = port->sectype;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

static uint16_t get_log_page(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	uint8_t lid = gdx_nvme_glp_lid(&req->cmd);
	uint64_t off = gdx_nvme_glp_offset(&req->cmd);
	bool rae = req->cmd.cdw10 & GDX_NVME_GLP_RAE;
	uint8_t *page = NULL;
	size_t size = 0;
	uint16_t st = 0;

	if (gdx_nvme_glp_len(&req->cmd) != req->len)
		return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
	if (off % 4)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	if (c->subsys->discovery != (lid == GDX_NVME_LOG_DISC))
		return GDX_NVME_SC_INVALID_LOG_PAGE | DNR;

	switch (lid) {
	case GDX_NVME_LOG_ERROR: {
		struct gdx_nvme_err_log *l;

		size = sizeof(*l) * NVMF_ERR_LOG_ENTRIES;
		page = calloc(1, size);
		if (!page)
			return GDX_NVME_SC_INTERNAL;
		l = (struct gdx_nvme_err_log *)page;
		pthread_mutex_lock(&c->lock);
		/* newest first */
		for (uint64_t i = 0; i < NVMF_ERR_LOG_ENTRIES && i < c->err_count; i++)
			l[i] = c->errlog[(c->err_count - 1 - i) % NVMF_ERR_LOG_ENTRIES];
		pthread_mutex_unlock(&c->lock);
		break;
	}
	case GDX_NVME_LOG_SMART:
		size = sizeof(struct gdx_nvme_smart_log);
		page = calloc(1, size);
		if (!page)
			return GDX_NVME_SC_INTERNAL;
		smart(c, req->cmd.nsid, (struct gdx_nvme_smart_log *)page);
		break;
	case GDX_NVME_LOG_FW_SLOT:
		size = 512;
		page = calloc(1, size);
		if (!page)
			return GDX_NVME_SC_INTERNAL;
		page[0] = 1;	/* active slot 1 */
		gdx_nvme_field_pad((char *)page + 8, 8, GDX_NVMF_FW_REV);
		break;
	case GDX_NVME_LOG_CHANGED_NS: {
		uint32_t *l;

		size = 4096;
		page = calloc(1, size);
		if (!page)
			return GDX_NVME_SC_INTERNAL;
		l = (uint32_t *)page;
		pthread_mutex_lock(&c->lock);
		if (c->changed_overflow)
			l[0] = 0xffffffff;
		else
			memcpy(l, c->changed_ns, c->nchanged * sizeof(uint32_t));
		if (!rae) {
			c->nchanged = 0;
			c->changed_overflow = false;
			c->aen_masked &= ~AEN_NS_CHANGED;
		}
		pthread_mutex_unlock(&c->lock);
		break;
	}
	case GDX_NVME_LOG_CMD_EFFECTS: {
		uint32_t *l;
		static const uint8_t adm[] = { GDX_NVME_ADM_GET_LOG_PAGE, GDX_NVME_ADM_IDENTIFY,
					       GDX_NVME_ADM_ABORT, GDX_NVME_ADM_SET_FEATURES,
					       GDX_NVME_ADM_GET_FEATURES, GDX_NVME_ADM_ASYNC_EVENT,
					       GDX_NVME_ADM_KEEP_ALIVE };
		static const uint8_t io[] = { GDX_NVME_CMD_FLUSH, GDX_NVME_CMD_WRITE,
					      GDX_NVME_CMD_READ, GDX_NVME_CMD_WRITE_ZEROES,
					      GDX_NVME_CMD_DSM };

		size = 4096;
		page = calloc(1, size);
		if (!page)
			return GDX_NVME_SC_INTERNAL;
		l = (uint32_t *)page;
		for (size_t i = 0; i < sizeof(adm); i++)
			l[adm[i]] = 1;
		for (size_t i = 0; i < sizeof(io); i++)
			/* supported; writes change the logical block content (LBCC) */
			l[256 + io[i]] = 1 | (io[i] != GDX_NVME_CMD_READ ? 2 : 0);
		break;
	}
	case GDX_NVME_LOG_DISC:
		st = disc_log(req, &page, &size);
		if (st)
			return st;
		if (!rae) {
			pthread_mutex_lock(&c->lock);
			c->aen_masked &= ~AEN_DISC_CHANGED;
			pthread_mutex_unlock(&c->lock);
		}
		break;
	default:
		return GDX_NVME_SC_INVALID_LOG_PAGE | DNR;
	}
	if (off > size) {
		st = GDX_NVME_SC_INVALID_FIELD | DNR;
	} else {
		memset(req->buf, 0, req->len);
		memcpy(req->buf, page + off, GDX_MIN(size - off, (size_t)req->len));
	}
	free(page);
	return st;
}

static uint16_t get_features(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	uint8_t fid = req->cmd.cdw10 & 0xff;
	uint8_t sel = (req->cmd.cdw10 >> 8) & 7;

	if (sel == 3) {		/* supported capabilities: nothing saveable or per-ns */
		req->cqe.dw0 = 0;
		return 0;
	}
	if (c->subsys->discovery && fid != GDX_NVME_FEAT_KATO && fid != GDX_NVME_FEAT_ASYNC_EVENT)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	switch (fid) {
	case GDX_NVME_FEAT_NUM_QUEUES: {
		uint32_t n = (c->nr_io_queues ? c->nr_io_queues : c->tgt->max_io_queues) - 1u;

		req->cqe.dw0 = n | n << 16;
		return 0;
	}
	case GDX_NVME_FEAT_KATO:
		req->cqe.dw0 = c->kato_ms;
		return 0;
	case GDX_NVME_FEAT_ASYNC_EVENT:
		req->cqe.dw0 = c->aen_cfg;
		return 0;
	case GDX_NVME_FEAT_VOLATILE_WC:
		req->cqe.dw0 = 1;
		return 0;
	case GDX_NVME_FEAT_ARBITRATION:
	case GDX_NVME_FEAT_POWER_MGMT:
	case GDX_NVME_FEAT_ERR_RECOVERY:
	case GDX_NVME_FEAT_IRQ_COALESCE:
	case GDX_NVME_FEAT_WRITE_ATOMIC:
		req->cqe.dw0 = 0;
		return 0;
	case GDX_NVME_FEAT_TEMP_THRESH:
		req->cqe.dw0 = 358;	/* 85 C over-temperature threshold */
		return 0;
	case GDX_NVME_FEAT_HOST_ID:
		if (!(req->cmd.cdw11 & 1))
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		if (req->len < 16)
			return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
		copy_out(req, c->hostid, sizeof(c->hostid));
		return 0;
	default:
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	}
}

static uint16_t set_features(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	uint8_t fid = req->cmd.cdw10 & 0xff;
	uint32_t v = req->cmd.cdw11;

	if (req->cmd.cdw10 & (1u << 31))
		return GDX_NVME_SC_FEATURE_NOT_SAVEABLE | DNR;
	if (c->subsys->discovery && fid != GDX_NVME_FEAT_KATO && fid != GDX_NVME_FEAT_ASYNC_EVENT)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	switch (fid) {
	case GDX_NVME_FEAT_NUM_QUEUES: {
		uint32_t nsq = (v & 0xffff) + 1, ncq = (v >> 16) + 1, n;

		if ((v & 0xffff) == 0xffff || (v >> 16) == 0xffff)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		n = GDX_MIN(GDX_MIN(nsq, ncq), (uint32_t)c->tgt->max_io_queues);
		pthread_mutex_lock(&c->lock);
		c->nr_io_queues = (uint16_t)n;
		pthread_mutex_unlock(&c->lock);
		req->cqe.dw0 = (n - 1) | (n - 1) << 16;
		return 0;
	}
	case GDX_NVME_FEAT_KATO:
		pthread_mutex_lock(&c->lock);
		nvmf_ctrl_set_kato(c, v);
		pthread_mutex_unlock(&c->lock);
		return 0;
	case GDX_NVME_FEAT_ASYNC_EVENT: {
		uint32_t ok = c->subsys->discovery ? GDX_NVME_OAES_DISC_CHANGE :
						     (GDX_NVME_OAES_NS_ATTR | 0xff);

		if (v & ~ok)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		pthread_mutex_lock(&c->lock);
		c->aen_cfg = v;
		pthread_mutex_unlock(&c->lock);
		req->cqe.dw0 = v;
		return 0;
	}
	case GDX_NVME_FEAT_HOST_ID:
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	default:
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	}
}

static uint16_t aer(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;

	pthread_mutex_lock(&c->lock);
	if (c->naer >= NVMF_AERL) {
		pthread_mutex_unlock(&c->lock);
		return GDX_NVME_SC_ASYNC_LIMIT | DNR;
	}
	c->aer_reqs[c->naer++] = req;
	pthread_mutex_unlock(&c->lock);
	nvmf_ctrl_aen_deliver(req->sq);
	return NVMF_ST_PENDING;
}

uint16_t nvmf_admin_prep(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	uint8_t opc = req->cmd.opc;
	bool disc = c->subsys->discovery;

	switch (opc) {
	case GDX_NVME_ADM_IDENTIFY:
	case GDX_NVME_ADM_GET_LOG_PAGE:
	case GDX_NVME_ADM_GET_FEATURES:
	case GDX_NVME_ADM_SET_FEATURES:
	case GDX_NVME_ADM_KEEP_ALIVE:
	case GDX_NVME_ADM_ASYNC_EVENT:
		break;
	case GDX_NVME_ADM_ABORT:
		if (disc)
			return GDX_NVME_SC_INVALID_OPCODE | DNR;
		break;
	default:
		return GDX_NVME_SC_INVALID_OPCODE | DNR;
	}
	if (!nvmf_ctrl_is_ready(c))
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	if (gdx_nvme_opc_xfer(opc) == GDX_NVME_XFER_C2H && req->in_capsule && req->len)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	if (req->len > c->tgt->max_io)
		return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
	if ((opc == GDX_NVME_ADM_IDENTIFY || opc == GDX_NVME_ADM_GET_LOG_PAGE) && !req->len)
		return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
	return 0;
}

uint16_t nvmf_admin_exec(struct nvmf_req *req)
{
	struct nvmf_ctrl *c = req->sq->ctrl;

	switch (req->cmd.opc) {
	case GDX_NVME_ADM_IDENTIFY:
		return identify(req);
	case GDX_NVME_ADM_GET_LOG_PAGE:
		return get_log_page(req);
	case GDX_NVME_ADM_GET_FEATURES:
		return get_features(req);
	case GDX_NVME_ADM_SET_FEATURES:
		return set_features(req);
	case GDX_NVME_ADM_KEEP_ALIVE:
		return nvmf_ctrl_keep_alive(c);
	case GDX_NVME_ADM_ASYNC_EVENT:
		return aer(req);
	case GDX_NVME_ADM_ABORT:
		/* commands complete in order of their data: nothing is abortable */
		req->cqe.dw0 = 1;
		return 0;
	}
	return GDX_NVME_SC_INVALID_OPCODE | DNR;
}
