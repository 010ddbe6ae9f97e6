/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a byte stream parsed as NVMe/TCP PDUs by both roles, the
 * way a connection does (CH, header, validation, skip the data), plus the SQE
 * helpers on every CapsuleCmd found.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nvmf/proto/nvme.h"
#include "nvmf/proto/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_stream(const uint8_t *data, size_t size, enum gdx_tcp_role role,
			 const struct gdx_tcp_params *p)
{
	enum gdx_tcp_phase phase = GDX_TCP_PHASE_IC;
	size_t off = 0;

	while (size - off >= sizeof(struct gdx_tcp_ch)) {
		union gdx_tcp_pdu pdu;
		struct gdx_tcp_pdu_info info;
		struct gdx_tcp_err err;
		uint32_t hl;

		memcpy(&pdu.ch, data + off, sizeof(pdu.ch));
		hl = gdx_tcp_hdr_len(&pdu.ch, role, phase, p, &err);
		if (!hl || hl > sizeof(pdu) || size - off < hl)
			return;
		memcpy(&pdu, data + off, hl);
		if (gdx_tcp_pdu_check(&pdu, role, phase, p, 8192, &info, &err))
			return;
		if (pdu.ch.plen > size - off)
			return;
		if (pdu.ch.type == GDX_TCP_CMD) {
			struct gdx_nvme_sgl_info si;

			gdx_nvme_sgl_parse(&pdu.cmd.sqe, &si);
			(void)gdx_nvme_glp_len(&pdu.cmd.sqe);
			(void)gdx_nvme_status_str((uint16_t)pdu.cmd.sqe.cdw10);
		}
		if (info.data_len) {
			struct iovec iov = { (void *)(data + off + info.data_off), info.data_len };

			(void)gdx_tcp_ddgst(&iov, 1);
		}
		phase = GDX_TCP_PHASE_READY;
		off += pdu.ch.plen;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	static const struct gdx_tcp_params dg = { .hdgst = true, .ddgst = true,
						  .maxh2cdata = 131072 };

	parse_stream(data, size, GDX_TCP_ROLE_TARGET, &plain);
	parse_stream(data, size, GDX_TCP_ROLE_TARGET, &dg);
	parse_stream(data, size, GDX_TCP_ROLE_HOST, &plain);
	parse_stream(data, size, GDX_TCP_ROLE_HOST, &dg);
	return 0;
}
