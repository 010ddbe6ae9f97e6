/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_PROTO_RDMA_H
#define GDX_NVMF_PROTO_RDMA_H

/*
 * The NVMe over Fabrics RDMA transport binding: the RDMA CM private data a
 * host and a target exchange to set up one queue pair per NVMe queue, and
 * the keyed SGL data block that tells the target where a command's data is
 * in the host's memory (the target moves it with RDMA READ and WRITE).
 * Capsules are the plain 64-byte SQE (plus in-capsule data) and 16-byte CQE,
 * carried by SEND; there is no ICReq, no digest and no R2T.
 *
 * Wire layouts are little endian, as the rest of src/nvmf/proto assumes.
 */

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvmf/proto/nvme.h"

#define GDX_RDMA_IO_PORT 4420		/* discovery and I/O alike */
#define GDX_RDMA_CM_RECFMT 0		/* record format 1.0 */
#define GDX_RDMA_ADMIN_DEPTH 32		/* what the Linux host asks for its admin queue */
#define GDX_RDMA_MAX_QUEUE_SIZE 128	/* I/O queue entries older Linux hosts cap at */

/* Connect request private data (host -> target), 32 bytes. */
struct gdx_rdma_cm_req {
	uint16_t recfmt;
	uint16_t qid;
	uint16_t hrqsize;	/* the host's receive queue: target-to-host sends */
	uint16_t hsqsize;	/* the host's submission queue size, 0's based */
	uint16_t cntlid;	/* I/O queues, where the host fills it (newer Linux) */
	uint8_t rsvd[22];
};
static_assert(sizeof(struct gdx_rdma_cm_req) == 32, "rdma cm req");

/* Accept private data (target -> host), 32 bytes. */
struct gdx_rdma_cm_rep {
	uint16_t recfmt;
	uint16_t crqsize;	/* the controller's receive queue: capsules it takes */
	uint8_t rsvd[28];
};
static_assert(sizeof(struct gdx_rdma_cm_rep) == 32, "rdma cm rep");

/* Reject private data (target -> host), 4 bytes. */
struct gdx_rdma_cm_rej {
	uint16_t recfmt;
	uint16_t sts;
};
static_assert(sizeof(struct gdx_rdma_cm_rej) == 4, "rdma cm rej");

enum gdx_rdma_cm_status {
	GDX_RDMA_CM_OK = 0,
	GDX_RDMA_CM_INVALID_LEN = 1,
	GDX_RDMA_CM_INVALID_RECFMT = 2,
	GDX_RDMA_CM_INVALID_QID = 3,
	GDX_RDMA_CM_INVALID_HSQSIZE = 4,
	GDX_RDMA_CM_INVALID_HRQSIZE = 5,
	GDX_RDMA_CM_NO_RSC = 6,
	GDX_RDMA_CM_INVALID_IRD = 7,
	GDX_RDMA_CM_INVALID_ORD = 8,
	GDX_RDMA_CM_INVALID_CNTLID = 9,
};
/* "invalid HSQSIZE" and so on; "unknown" for codes the binding does not define. */
const char *gdx_rdma_cm_status_str(uint16_t sts);

/* What a target accepts: the queue limits it checks a request against. */
struct gdx_rdma_cm_limits {
	uint16_t max_qid;	/* highest I/O queue ID */
	uint16_t max_qsize;	/* I/O queue entries (admin: GDX_RDMA_ADMIN_DEPTH) */
};

/* A connect request as the target sees it, checked. */
struct gdx_rdma_queue_req {
	uint16_t qid;
	uint16_t sq_size;	/* entries: hsqsize + 1 */
	uint16_t rq_size;	/* the host's receive queue, entries */
	uint16_t cntlid;	/* 0 where the host left it out */
};

/*
 * Checks a connect request's private data (len bytes at p, which may be
 * NULL) against lim.  GDX_RDMA_CM_OK and *out filled, or the status a
 * reject carries.  An admin queue is bound by GDX_RDMA_ADMIN_DEPTH.
 */
uint16_t gdx_rdma_cm_req_parse(const void *p, size_t len, const struct gdx_rdma_cm_limits *lim,
			       struct gdx_rdma_queue_req *out);
/* The host's request for queue qid of sq_size entries (and as many receives). */
void gdx_rdma_cm_req_init(struct gdx_rdma_cm_req *r, uint16_t qid, uint16_t sq_size,
			  uint16_t cntlid);
void gdx_rdma_cm_rep_init(struct gdx_rdma_cm_rep *r, uint16_t crqsize);
void gdx_rdma_cm_rej_init(struct gdx_rdma_cm_rej *r, uint16_t sts);
/*
 * The host's reading of an accept: GDX_RDMA_CM_OK and the controller's
 * receive queue size, or GDX_RDMA_CM_INVALID_LEN / _RECFMT for one it cannot
 * use.
 */
uint16_t gdx_rdma_cm_rep_parse(const void *p, size_t len, uint16_t *crqsize);
/* A reject's status, or -1 when the private data is not a binding reject. */
int gdx_rdma_cm_rej_parse(const void *p, size_t len);

/* ---- where a command's data is ------------------------------------------------ */

enum gdx_rdma_data {
	GDX_RDMA_DATA_NONE,	/* no data */
	GDX_RDMA_DATA_INLINE,	/* in the capsule, right after the SQE */
	GDX_RDMA_DATA_KEYED,	/* in host memory: RDMA READ or WRITE it */
};

struct gdx_rdma_sgl_info {
	enum gdx_rdma_data kind;
	uint32_t length;
	uint64_t addr;		/* keyed: the host's address */
	uint32_t key;		/* keyed: its remote key */
	bool invalidate;	/* keyed: the host asked for the key to be invalidated */
};

/*
 * Where an SQE's data is, for the RDMA transport: a keyed data block
 * (subtype address or invalidate) of at most 2^24 - 1 bytes, or an offset
 * data block of in-capsule data (ICDOFF 0).  Returns 0 or an NVMe status (no
 * DNR bit added).  The caller checks lengths against its own limits.
 */
uint16_t gdx_rdma_sgl_parse(const struct gdx_nvme_sqe *c, struct gdx_rdma_sgl_info *out);
/*
 * Checks a command capsule as a target receives it: the SQE and capsule_len
 * bytes in all (what followed the SQE is in-capsule data), against the
 * in-capsule data the queue takes (inline_max) and the largest transfer
 * (max_io).  In-capsule data must be there in full and only ever goes to the
 * controller.  0 and *out filled, or an NVMe status with DNR.
 */
uint16_t gdx_rdma_capsule_check(const struct gdx_nvme_sqe *c, uint32_t capsule_len,
				uint32_t inline_max, uint32_t max_io,
				struct gdx_rdma_sgl_info *out);
/* Whether a command moves data to the controller, from it, or neither (fabrics too). */
enum gdx_nvme_xfer gdx_nvmf_cmd_xfer(const struct gdx_nvme_sqe *c);
/* The host's descriptor: a keyed data block for [addr, addr + len) under key. */
void gdx_rdma_sgl_keyed(struct gdx_nvme_sgl *sgl, uint64_t addr, uint32_t len, uint32_t key,
			bool invalidate);
/* The host's descriptor for len bytes of in-capsule data. */
void gdx_rdma_sgl_inline(struct gdx_nvme_sgl *sgl, uint32_t len);

#define GDX_RDMA_KEYED_MAX_LEN 0xffffffu

/* Discovery log entry fields of an RDMA port (TSAS: RC queue pairs, RDMA CM). */
enum {
	GDX_RDMA_QPTYPE_CONNECTED = 1,
	GDX_RDMA_PRTYPE_NOT_SPECIFIED = 1,
	GDX_RDMA_CMS_RDMA_CM = 1,
};
void gdx_rdma_disc_tsas(struct gdx_nvmf_disc_entry *e);

#endif
