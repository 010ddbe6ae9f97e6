/* SPDX-License-Identifier: MIT */
/*
 * The admin commands a caller issues through the API on a live controller
 * (Identify, the active namespace list) and the discovery log, read over a
 * controller of its own; each goes through the controller like I/O and
 * waits for it on the caller's thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"

static int admin_data(struct nh_ctrl *c, struct nh_req *r, void *buf, size_t len)
{
	r->buf = buf;
	r->len = len;
	r->mem = NH_MEM_HOST;
	r->timeout_ns = (uint64_t)c->p.io_timeout_ms * 1000000;
	return nh_ctrl_exec(c, r);
}

int gdx_nvmf_identify(struct gdx_nvmf_ctrl *ctrl, uint8_t cns, uint32_t nsid, void *buf)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	struct nh_req r;

	if (!c || !buf)
		return -EINVAL;
	nh_req_init(&r, GDX_NVME_ADM_IDENTIFY, nsid, true);
	r.sqe.cdw10 = cns;
	return admin_data(c, &r, buf, GDX_NVME_IDENTIFY_SIZE);
}

int gdx_nvmf_identify_ns(struct gdx_nvmf_ctrl *ctrl, uint32_t nsid, struct gdx_nvmf_ns_info *in)
{
	struct gdx_nvme_id_ns id;
	const struct gdx_nvme_lbaf *f;
	unsigned lbaf;
	int rc;

	if (!in || !nsid || nsid == GDX_NVME_NSID_ALL)
		return -EINVAL;
	rc = gdx_nvmf_identify(ctrl, GDX_NVME_CNS_NS, nsid, &id);
	if (rc)
		return rc;
	memset(in, 0, sizeof(*in));
	in->nsid = nsid;
	in->nsze = id.nsze;
	in->ncap = id.ncap;
	in->nuse = id.nuse;
	in->nmic = id.nmic;
	if (!in->ncap)
		return -ENOENT;	/* inactive NSID: all zeroes */
	lbaf = (id.flbas & 0xf) | ((id.flbas >> 5) & 3) << 4;
	f = &id.lbaf[lbaf];
	if (f->ds < 9 || f->ds > 16 || f->ms) {
		GDX_ERR(SUB, "namespace %u: LBA format %u (lbads %u, metadata %u) not supported",
			nsid, lbaf, f->ds, f->ms);
		return -EOPNOTSUPP;
	}
	in->block_size = 1u << f->ds;
	memcpy(in->nguid, id.nguid, sizeof(in->nguid));
	memcpy(in->eui64, id.eui64, sizeof(in->eui64));
	return 0;
}

int gdx_nvmf_ns_list(struct gdx_nvmf_ctrl *ctrl, uint32_t *nsids, unsigned max)
{
	uint32_t id[GDX_NVME_IDENTIFY_SIZE / 4];
	uint32_t after = 0;
	unsigned n = 0;

	if (!nsids && max)
		return -EINVAL;
	for (;;) {
		int rc = gdx_nvmf_identify(ctrl, GDX_NVME_CNS_NS_ACTIVE_LIST, after, id);
		unsigned i;

		if (rc)
			return rc;
		for (i = 0; i < 1024; i++) {
			uint32_t v = id[i];

			if (!v || v <= after)
				break;
			if (n < max)
				nsids[n] = v;
			n++;
			after = v;
		}
		if (i < 1024)
			break;
	}
	return (int)GDX_MIN(n, max);
}

static int get_log(struct nh_ctrl *c, uint8_t lid, uint64_t off, void *buf, uint32_t len)
{
	struct nh_req r;
	uint32_t numd = len / 4 - 1;

	nh_req_init(&r, GDX_NVME_ADM_GET_LOG_PAGE, 0, true);
	r.sqe.cdw10 = lid | (numd & 0xffff) << 16;
	r.sqe.cdw11 = numd >> 16;
	r.sqe.cdw12 = (uint32_t)off;
	r.sqe.cdw13 = (uint32_t)(off >> 32);
	return admin_data(c, &r, buf, len);
}

int gdx_nvmf_discover(const char *addr, const char *svc, const struct gdx_nvmf_host_opts *o,
		      struct gdx_nvmf_discovery_log **out)
{
	struct gdx_nvmf_discovery_log *log = NULL;
	struct gdx_nvmf_disc_entry *page = NULL;
	struct gdx_nvmf_disc_hdr hdr;
	struct nh_ctrl *c;
	uint64_t numrec, genctr;
	int rc, tries = 0;

	if (!out)
		return -EINVAL;
	rc = nh_ctrl_create(addr, svc, GDX_NVME_DISC_NQN, o, &c);
	if (rc)
		return rc;
again:
	rc = get_log(c, GDX_NVME_LOG_DISC, 0, &hdr, sizeof(hdr));
	if (rc)
		goto out;
	genctr = hdr.genctr;
	numrec = hdr.numrec;
	if (numrec > 4096) {
		GDX_ERR(SUB, "discovery log claims %llu records", (unsigned long long)numrec);
		rc = GDX_EPROTO;
		goto out;
	}
	free(page);
	free(log);
	page = calloc(numrec ? numrec : 1, sizeof(*page));
	log = calloc(1, sizeof(*log) + numrec * sizeof(log->entries[0]));
	if (!page || !log) {
		rc = -ENOMEM;
		goto out;
	}
	/* in 4 KiB pieces like nvme-cli, then the header again to catch a change */
	for (uint64_t done = 0; done < numrec * sizeof(*page);) {
		uint32_t n = (uint32_t)GDX_MIN(numrec * sizeof(*page) - done, 4096ull);

		rc = get_log(c, GDX_NVME_LOG_DISC, sizeof(hdr) + done, (char *)page + done, n);
		if (rc)
			goto out;
		done += n;
	}
	rc = get_log(c, GDX_NVME_LOG_DISC, 0, &hdr, sizeof(hdr));
	if (rc)
		goto out;
	if (hdr.genctr != genctr && ++tries < 10)
		goto again;
	log->genctr = genctr;
	log->numrec = numrec;
	for (uint64_t i = 0; i < numrec; i++) {
		const struct gdx_nvmf_disc_entry *e = &page[i];
		struct gdx_nvmf_discovery_entry *d = &log->entries[i];

		d->trtype = e->trtype;
		d->adrfam = e->adrfam;
		d->subtype = e->subtype;
		d->treq = e->treq;
		d->portid = e->portid;
		d->cntlid = e->cntlid;
		d->asqsz = e->asqsz;
		d->sectype = e->tcp.sectype;
		gdx_nvme_field_str(d->trsvcid, sizeof(d->trsvcid), e->trsvcid, sizeof(e->trsvcid));
		gdx_nvme_field_str(d->traddr, sizeof(d->traddr), e->traddr, sizeof(e->traddr));
		gdx_nvme_field_str(d->subnqn, sizeof(d->subnqn), e->subnqn, sizeof(e->subnqn));
	}
	*out = log;
	log = NULL;
out:
	free(page);
	free(log);
	nh_ctrl_destroy(c);
	return rc;
}
