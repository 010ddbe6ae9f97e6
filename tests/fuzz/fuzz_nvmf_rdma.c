/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the NVMe/RDMA binding's parsers on what a peer controls,
 * the CM private data of a connect request, accept and reject (at every
 * length), and each 64-byte command that follows, as the target checks a
 * capsule and its SGL; what they accept must be self-consistent.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvmf/proto/rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct gdx_rdma_cm_limits lim = { .max_qid = 64, .max_qsize = 128 };
	size_t pd = size < 64 ? size : 64, off = pd;
	struct gdx_rdma_queue_req q;
	uint16_t crq;

	/* the private data as a request, an accept and a reject, cut at every length */
	for (size_t n = 0; n <= pd; n++) {
		/* a copy of exactly n bytes, so a read past them is caught */
		uint8_t *p = n ? malloc(n) : NULL;

		if (n && !p)
			return 0;
		if (n)
			memcpy(p, data, n);
		if (gdx_rdma_cm_req_parse(p, n, &lim, &q) == GDX_RDMA_CM_OK) {
			if (q.qid > lim.max_qid || q.sq_size < 2 || !q.rq_size ||
			    q.sq_size > (q.qid ? lim.max_qsize : GDX_RDMA_ADMIN_DEPTH) || n < 32)
				abort();
		}
		(void)gdx_rdma_cm_rep_parse(p, n, &crq);
		(void)gdx_rdma_cm_rej_parse(p, n);
		free(p);
	}
	for (; size - off >= sizeof(struct gdx_nvme_sqe); off += sizeof(struct gdx_nvme_sqe)) {
		struct gdx_nvme_sqe c;
		struct gdx_rdma_sgl_info si;
		/* the capsule as a receive holds it: this SQE and what follows, up to 8 KiB */
		uint32_t clen = (uint32_t)(size - off < 64 + 8192 ? size - off : 64 + 8192);

		memcpy(&c, data + off, sizeof(c));
		if (!gdx_rdma_capsule_check(&c, clen, 4096, 1u << 20, &si) &&
		    ((si.kind == GDX_RDMA_DATA_INLINE && (si.length > 4096 || si.length > clen - 64)) ||
		     (si.kind == GDX_RDMA_DATA_KEYED && si.length > (1u << 20))))
			abort();
		if (gdx_rdma_sgl_parse(&c, &si))
			continue;
		if (si.length > GDX_RDMA_KEYED_MAX_LEN && si.kind == GDX_RDMA_DATA_KEYED)
			abort();
		if ((si.kind == GDX_RDMA_DATA_NONE) != (si.length == 0))
			abort();
		(void)gdx_rdma_cm_status_str((uint16_t)c.cdw10);
	}
	return 0;
}
