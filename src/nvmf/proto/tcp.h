/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_PROTO_TCP_H
#define GDX_NVMF_PROTO_TCP_H

/*
 * NVMe/TCP PDUs (NVMe/TCP transport 1.0): layouts, encoders, the header
 * validator both ends run on every received PDU, and the digests.
 *
 * A receiver reads the 8-byte common header, asks gdx_tcp_hdr_len() how many
 * header bytes (PSH and header digest) follow, reads them, then calls
 * gdx_tcp_pdu_check(), which validates the whole header against the
 * negotiated parameters and says where the data lies.  Failures carry the
 * fatal error status (FES) and information (FEI) a TermReq must report.
 */

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "nvmf/proto/nvme.h"

#define GDX_TCP_DISC_PORT 8009
#define GDX_TCP_IO_PORT 4420
#define GDX_TCP_MIN_MAXH2CDATA 4096
#define GDX_TCP_DGST_LEN 4
#define GDX_TCP_TERM_HLEN 24
#define GDX_TCP_TERM_MAX_DATA 128	/* copied offending header bytes */

enum gdx_tcp_pdu_type {
	GDX_TCP_ICREQ = 0x00,
	GDX_TCP_ICRESP = 0x01,
	GDX_TCP_H2C_TERM = 0x02,
	GDX_TCP_C2H_TERM = 0x03,
	GDX_TCP_CMD = 0x04,
	GDX_TCP_RSP = 0x05,
	GDX_TCP_H2C_DATA = 0x06,
	GDX_TCP_C2H_DATA = 0x07,
	GDX_TCP_R2T = 0x09,
};

enum gdx_tcp_pdu_flags {
	GDX_TCP_F_HDGST = 1 << 0,
	GDX_TCP_F_DDGST = 1 << 1,
	GDX_TCP_F_DATA_LAST = 1 << 2,
	GDX_TCP_F_DATA_SUCCESS = 1 << 3,
};

/* ICReq/ICResp DGST bits */
#define GDX_TCP_DGST_HDR 1
#define GDX_TCP_DGST_DATA 2

/* Fatal error status of a TermReq */
enum gdx_tcp_fes {
	GDX_TCP_FES_INVALID_HEADER = 1,
	GDX_TCP_FES_PDU_SEQ = 2,
	GDX_TCP_FES_HDGST = 3,
	GDX_TCP_FES_DATA_RANGE = 4,
	GDX_TCP_FES_DATA_LIMIT = 5,
	GDX_TCP_FES_UNSUPPORTED = 6,
};

struct gdx_tcp_ch {
	uint8_t type;
	uint8_t flags;
	uint8_t hlen;
	uint8_t pdo;
	uint32_t plen;
};
static_assert(sizeof(struct gdx_tcp_ch) == 8, "ch");

struct gdx_tcp_icreq {
	struct gdx_tcp_ch ch;
	uint16_t pfv;
	uint8_t hpda;
	uint8_t dgst;
	uint32_t maxr2t;	/* 0's based */
	uint8_t rsvd[112];
};
static_assert(sizeof(struct gdx_tcp_icreq) == 128, "icreq");

struct gdx_tcp_icresp {
	struct gdx_tcp_ch ch;
	uint16_t pfv;
	uint8_t cpda;
	uint8_t dgst;
	uint32_t maxdata;	/* MAXH2CDATA */
	uint8_t rsvd[112];
};
static_assert(sizeof(struct gdx_tcp_icresp) == 128, "icresp");

struct gdx_tcp_term {
	struct gdx_tcp_ch ch;
	uint16_t fes;
	uint16_t feil;		/* FEI is 32 bits at offset 10: use the accessors */
	uint16_t feiu;
	uint8_t rsvd[10];
};
static_assert(sizeof(struct gdx_tcp_term) == 24, "term");

struct gdx_tcp_cmd {
	struct gdx_tcp_ch ch;
	struct gdx_nvme_sqe sqe;
};
static_assert(sizeof(struct gdx_tcp_cmd) == 72, "cmd");

struct gdx_tcp_rsp {
	struct gdx_tcp_ch ch;
	struct gdx_nvme_cqe cqe;
};
static_assert(sizeof(struct gdx_tcp_rsp) == 24, "rsp");

/* H2CData and C2HData (ttag reserved in C2H) */
struct gdx_tcp_data {
	struct gdx_tcp_ch ch;
	uint16_t cccid;
	uint16_t ttag;
	uint32_t datao;
	uint32_t datal;
	uint32_t rsvd;
};
static_assert(sizeof(struct gdx_tcp_data) == 24, "data");

struct gdx_tcp_r2t {
	struct gdx_tcp_ch ch;
	uint16_t cccid;
	uint16_t ttag;
	uint32_t r2to;
	uint32_t r2tl;
	uint32_t rsvd;
};
static_assert(sizeof(struct gdx_tcp_r2t) == 24, "r2t");

/* The largest header a peer can send, digest included (ICReq/ICResp). */
#define GDX_TCP_MAX_HDR 128
/* Room for any post-ICReq header plus its digest. */
#define GDX_TCP_MAX_PDU_HDR (72 + GDX_TCP_DGST_LEN)

union gdx_tcp_pdu {
	struct gdx_tcp_ch ch;
	struct gdx_tcp_icreq icreq;
	struct gdx_tcp_icresp icresp;
	struct gdx_tcp_term term;
	struct gdx_tcp_cmd cmd;
	struct gdx_tcp_rsp rsp;
	struct gdx_tcp_data data;
	struct gdx_tcp_r2t r2t;
	uint8_t raw[GDX_TCP_MAX_HDR + GDX_TCP_DGST_LEN];
};

/* ---- digests --------------------------------------------------------------- */

uint32_t gdx_tcp_hdgst(const void *hdr, size_t hlen);
/* Data digest over a scatter list (each PDU's data has its own digest). */
uint32_t gdx_tcp_ddgst(const struct iovec *iov, int iovcnt);

/* ---- parameters negotiated by ICReq/ICResp ------------------------------- */

struct gdx_tcp_params {
	bool hdgst;
	bool ddgst;
	uint32_t maxh2cdata;	/* data limit of one H2CData PDU */
	uint8_t cpda;		/* alignment (0's based dwords) of data we receive */
};

/* Which end parses: a target receives host PDUs, a host controller PDUs. */
enum gdx_tcp_role {
	GDX_TCP_ROLE_TARGET,
	GDX_TCP_ROLE_HOST,
};

/* Connection phase: before ICReq/ICResp completes only IC PDUs are legal. */
enum gdx_tcp_phase {
	GDX_TCP_PHASE_IC,
	GDX_TCP_PHASE_READY,
};

struct gdx_tcp_pdu_info {
	uint32_t hdr_len;	/* hlen + header digest */
	uint32_t data_off;	/* pdo, or plen when no data */
	uint32_t data_len;	/* data bytes (no padding, no digest) */
	uint32_t pad_len;	/* bytes between header(+digest) and data */
	bool has_hdgst;
	bool has_ddgst;
};

struct gdx_tcp_err {
	uint16_t fes;
	uint32_t fei;		/* byte offset of the offending field in the header */
	const char *why;
};

/*
 * From the 8-byte common header alone: how many header bytes (including any
 * header digest) make up this PDU's header.  Returns 0 and fills *err when the
 * CH already shows the PDU is invalid (unknown type, wrong hlen).
 */
uint32_t gdx_tcp_hdr_len(const struct gdx_tcp_ch *ch, enum gdx_tcp_role role,
			 enum gdx_tcp_phase phase, const struct gdx_tcp_params *p,
			 struct gdx_tcp_err *err);

/*
 * Validates a complete received header (hdr_len bytes from gdx_tcp_hdr_len):
 * type for this role and phase, hlen, pdo, plen, digest flags and the header
 * digest, and the PDU-specific lengths (H2CData DATAL vs PLEN and MAXH2CDATA,
 * ICReq PFV/HPDA...).  Returns 0 and fills *info, or -EPROTO with *err set.
 * max_data bounds the data a CapsuleCmd may carry in-capsule (0 = no data).
 */
int gdx_tcp_pdu_check(const union gdx_tcp_pdu *pdu, enum gdx_tcp_role role,
		      enum gdx_tcp_phase phase, const struct gdx_tcp_params *p,
		      uint32_t max_data, struct gdx_tcp_pdu_info *info, struct gdx_tcp_err *err);

/* ---- encoders --------------------------------------------------------------
 * Each fills a header in place (zeroing reserved bytes) and returns the header
 * length to send, header digest included; PLEN covers the data and its digest.
 */
uint32_t gdx_tcp_icreq_init(struct gdx_tcp_icreq *r, bool hdgst, bool ddgst, uint32_t maxr2t);
uint32_t gdx_tcp_icresp_init(struct gdx_tcp_icresp *r, uint8_t dgst, uint32_t maxh2cdata);
/* CapsuleCmd with data_len bytes of in-capsule data (0 for none). */
uint32_t gdx_tcp_cmd_init(union gdx_tcp_pdu *pdu, const struct gdx_nvme_sqe *sqe,
			  uint32_t data_len, const struct gdx_tcp_params *p);
uint32_t gdx_tcp_rsp_init(union gdx_tcp_pdu *pdu, const struct gdx_nvme_cqe *cqe,
			  const struct gdx_tcp_params *p);
/* C2HData (type GDX_TCP_C2H_DATA) or H2CData; flags: LAST/SUCCESS. */
uint32_t gdx_tcp_data_init(union gdx_tcp_pdu *pdu, uint8_t type, uint16_t cccid, uint16_t ttag,
			   uint32_t datao, uint32_t datal, uint8_t flags,
			   const struct gdx_tcp_params *p);
uint32_t gdx_tcp_r2t_init(union gdx_tcp_pdu *pdu, uint16_t cccid, uint16_t ttag, uint32_t r2to,
			  uint32_t r2tl, const struct gdx_tcp_params *p);
/*
 * H2C/C2H TermReq carrying a copy of the offending header (up to 128 bytes,
 * never a digest).  buf must hold GDX_TCP_TERM_HLEN + 128 bytes; returns the
 * PDU length (= PLEN).
 */
uint32_t gdx_tcp_term_init(void *buf, uint8_t type, uint16_t fes, uint32_t fei,
			   const void *bad_hdr, uint32_t bad_len);

static inline uint32_t gdx_tcp_term_fei(const struct gdx_tcp_term *t)
{
	return t->feil | (uint32_t)t->feiu << 16;
}

const char *gdx_tcp_fes_str(uint16_t fes);
const char *gdx_tcp_pdu_type_str(uint8_t type);

#endif
