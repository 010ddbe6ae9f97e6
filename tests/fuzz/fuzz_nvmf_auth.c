/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: DH-HMAC-CHAP messages.  The input is a sequence of
 * records, each an op byte, a 16-bit little-endian length and that many
 * bytes: op even = Authentication Send of the bytes to the controller's
 * state machine (core/auth.c) on a queue that requires authentication, op
 * odd = Authentication Receive with that length as AL.  Every Send's bytes
 * also go through the parser and, when they parse, a rebuild that must
 * parse to the same message.  The host (ffdhe2048 allowed) holds a
 * controller key too, so bidirectional paths are reachable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvmf/auth/auth.h"
#include "nvmf/core/core.h"
#include "nvmf/core/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "DHHC-1:01:3ju8QJG7RJmn4XfbBT8bWRGDQ1k/wnPNutMfaYVfhpXjMm6V:"
#define CKEY "DHHC-1:00:Bm3372cHbvuR5Wh/wsgy5yJMcg0Wt1SJcHFrUQ4S6Nd366lv:"

static void done(struct nvmf_req *req)
{
	(void)req;
}

static void round_trip(const uint8_t *buf, size_t len)
{
	struct nvmf_auth_msg m, again;
	uint8_t out[NVMF_AUTH_MSG_MAX];
	int n;

	if (nvmf_auth_msg_parse(buf, len, &m))
		return;
	n = nvmf_auth_msg_build(&m, out, sizeof(out));
	if (n < 0)
		return;		/* a parsed Challenge may hold more DH bytes than we build */
	if (nvmf_auth_msg_parse(out, (size_t)n, &again) || again.type != m.type ||
	    again.id != m.id || again.tid != m.tid)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nvmf_tgt tgt;
	struct nvmf_subsys s;
	struct nvmf_ctrl *c = calloc(1, sizeof(*c));
	struct nvmf_sq sq;
	struct nvmf_host_auth *a = calloc(1, sizeof(*a));
	size_t off = 0;

	if (!c || !a)
		abort();
	memset(&tgt, 0, sizeof(tgt));
	memset(&s, 0, sizeof(s));
	memset(&sq, 0, sizeof(sq));
	strcpy(s.nqn, "nqn.2024-01.io.gdx:fuzz");
	strcpy(c->hostnqn, "nqn.2024-01.io.gdx:fuzz-host");
	strcpy(a->nqn, c->hostnqn);
	if (nvmf_auth_key_parse(KEY, &a->key) || nvmf_auth_key_parse(CKEY, &a->ctrl_key))
		abort();
	a->has_ctrl_key = true;
	a->hashes[0] = NVMF_AUTH_SHA256;
	a->hashes[1] = NVMF_AUTH_SHA512;
	a->nhash = 2;
	a->dhs[0] = NVMF_AUTH_DH_NULL;
	a->dhs[1] = NVMF_AUTH_FFDHE2048;
	a->ndh = 2;
	c->tgt = &tgt;
	c->subsys = &s;
	c->auth = a;
	sq.tgt = &tgt;
	sq.ctrl = c;
	if (nvmf_auth_sq_start(&sq))
		abort();
	while (size - off >= 3) {
		uint8_t op = data[off];
		uint32_t len = (uint32_t)(data[off + 1] | data[off + 2] << 8);
		struct nvmf_req req;

		off += 3;
		memset(&req, 0, sizeof(req));
		req.sq = &sq;
		req.done = done;
		req.cmd.opc = GDX_NVME_OPC_FABRICS;
		req.cmd.auth.secp = NVMF_AUTH_SECP;
		req.cmd.auth.spsp0 = NVMF_AUTH_SPSP0;
		req.cmd.auth.spsp1 = NVMF_AUTH_SPSP1;
		req.cmd.auth.len = len;
		req.len = len;
		if (!(op & 1)) {
			if (len > size - off)
				len = req.len = req.cmd.auth.len = (uint32_t)(size - off);
			/* a copy of exactly len bytes: ASan sees a read past the message */
			req.buf = malloc(len ? len : 1);
			if (!req.buf)
				abort();
			memcpy(req.buf, data + off, len);
			off += len;
			round_trip(req.buf, len);
			req.cmd.fctype = GDX_NVMF_FCTYPE_AUTH_SEND;
			nvmf_auth_send(&req);
		} else {
			len %= 4097;
			req.len = req.cmd.auth.len = len;
			req.buf = malloc(len ? len : 1);
			if (!req.buf)
				abort();
			req.cmd.fctype = GDX_NVMF_FCTYPE_AUTH_RECV;
			nvmf_auth_recv(&req);
		}
		free(req.buf);
	}
	nvmf_auth_sq_free(&sq);
	nvmf_host_auth_free(a);
	free(c);
	return 0;
}
