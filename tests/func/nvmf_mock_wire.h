/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_NVMF_MOCK_WIRE_H
#define GDX_TESTS_NVMF_MOCK_WIRE_H

/*
 * Byte-level NVMe/TCP helpers for the mock controller.  Deliberately separate
 * from src/nvmf/proto: the mock encodes PDUs by offsets so that a codec bug
 * shared by host and proto cannot hide itself.
 */
#include <stdint.h>
#include <string.h>

#include "common/crc32c.h"

enum {
	NH_PDU_ICREQ = 0x00,
	NH_PDU_ICRESP = 0x01,
	NH_PDU_H2C_TERM = 0x02,
	NH_PDU_C2H_TERM = 0x03,
	NH_PDU_CMD = 0x04,
	NH_PDU_RSP = 0x05,
	NH_PDU_H2C_DATA = 0x06,
	NH_PDU_C2H_DATA = 0x07,
	NH_PDU_R2T = 0x09,
};

enum {
	NH_F_HDGST = 0x01,
	NH_F_DDGST = 0x02,
	NH_F_LAST = 0x04,
	NH_F_SUCCESS = 0x08,
};

/* TermReq fatal error status values. */
enum {
	NH_FES_HDR_FIELD = 1,
	NH_FES_SEQ = 2,
	NH_FES_HDGST = 3,
	NH_FES_RANGE = 4,
	NH_FES_LIMIT = 5,
	NH_FES_PARAM = 6,
};

#define NH_CH_LEN 8
#define NH_IC_LEN 128
#define NH_CMD_HLEN 72
#define NH_RSP_HLEN 24
#define NH_DATA_HLEN 24
#define NH_R2T_HLEN 24
#define NH_TERM_HLEN 24
#define NH_TERM_MAX_PLEN 152
#define NH_MIN_MAXH2CDATA 4096

/* NVMe opcodes (admin, I/O and fabrics). */
enum {
	NH_ADM_GET_LOG = 0x02,
	NH_ADM_IDENTIFY = 0x06,
	NH_ADM_ABORT = 0x08,
	NH_ADM_SET_FEAT = 0x09,
	NH_ADM_KEEP_ALIVE = 0x18,
	NH_IO_FLUSH = 0x00,
	NH_IO_WRITE = 0x01,
	NH_IO_READ = 0x02,
	NH_IO_WRITE_ZEROES = 0x08,
	NH_IO_DSM = 0x09,
	NH_FABRICS = 0x7f,
};

enum {
	NH_FCT_PROP_SET = 0x00,
	NH_FCT_CONNECT = 0x01,
	NH_FCT_PROP_GET = 0x04,
};

#define NH_SGL_INLINE 0x01	/* data block, offset: in-capsule */
#define NH_SGL_TRANSPORT 0x5a	/* transport data block: C2HData or R2T/H2CData */
#define NH_PSDT_SGL 0x40

/* Status: SCT << 8 | SC, as the CQE's bits 11:1 give it. */
#define NH_SC_ABORT_REQ 0x007
#define NH_SC_DATA_XFER 0x004
#define NH_SC_DNR 0x4000

static inline uint16_t nh_get16(const void *p)
{
	const uint8_t *b = p;

	return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t nh_get32(const void *p)
{
	const uint8_t *b = p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t nh_get64(const void *p)
{
	return nh_get32(p) | (uint64_t)nh_get32((const uint8_t *)p + 4) << 32;
}

static inline void nh_put16(void *p, uint16_t v)
{
	uint8_t *b = p;

	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static inline void nh_put32(void *p, uint32_t v)
{
	uint8_t *b = p;

	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static inline void nh_put64(void *p, uint64_t v)
{
	nh_put32(p, (uint32_t)v);
	nh_put32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

static inline void nh_put_ch(void *p, uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo,
			     uint32_t plen)
{
	uint8_t *b = p;

	b[0] = type;
	b[1] = flags;
	b[2] = hlen;
	b[3] = pdo;
	nh_put32(b + 4, plen);
}

static inline uint32_t nh_crc32c(const void *buf, size_t len)
{
	return gdx_crc32c(buf, len);
}

#endif
