/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_PROTO_NVME_H
#define GDX_NVMF_PROTO_NVME_H

/*
 * NVMe command set and NVMe over Fabrics structures as they appear on the
 * wire, shared by the gdx target and host.  All multi-byte fields are
 * little-endian; gdx builds only on little-endian hosts (asserted below), so
 * the structs are used in place.  Layouts follow the NVMe 1.4 / NVMe-oF 1.1
 * specifications; every struct has its size asserted.
 */

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gdx NVMe-oF codec needs a LE host");

#define GDX_NVME_DISC_NQN "nqn.2014-08.org.nvmexpress.discovery"
#define GDX_NVME_NQN_SIZE 256	/* field size in Connect data / Identify */
#define GDX_NVME_NQN_MAX 223	/* longest valid NQN, without the NUL */
#define GDX_NVME_CNTLID_DYNAMIC 0xffff
#define GDX_NVME_CNTLID_MAX 0xffef
#define GDX_NVME_NSID_ALL 0xffffffffu
#define GDX_NVME_IDENTIFY_SIZE 4096

/* ---- opcodes ------------------------------------------------------------- */

enum gdx_nvme_admin_opc {
	GDX_NVME_ADM_GET_LOG_PAGE = 0x02,
	GDX_NVME_ADM_IDENTIFY = 0x06,
	GDX_NVME_ADM_ABORT = 0x08,
	GDX_NVME_ADM_SET_FEATURES = 0x09,
	GDX_NVME_ADM_GET_FEATURES = 0x0a,
	GDX_NVME_ADM_ASYNC_EVENT = 0x0c,
	GDX_NVME_ADM_KEEP_ALIVE = 0x18,
};

enum gdx_nvme_io_opc {
	GDX_NVME_CMD_FLUSH = 0x00,
	GDX_NVME_CMD_WRITE = 0x01,
	GDX_NVME_CMD_READ = 0x02,
	GDX_NVME_CMD_WRITE_ZEROES = 0x08,
	GDX_NVME_CMD_DSM = 0x09,
};

#define GDX_NVME_OPC_FABRICS 0x7f

enum gdx_nvmf_fctype {
	GDX_NVMF_FCTYPE_PROP_SET = 0x00,
	GDX_NVMF_FCTYPE_CONNECT = 0x01,
	GDX_NVMF_FCTYPE_PROP_GET = 0x04,
	GDX_NVMF_FCTYPE_AUTH_SEND = 0x05,
	GDX_NVMF_FCTYPE_AUTH_RECV = 0x06,
	GDX_NVMF_FCTYPE_DISCONNECT = 0x08,
};

/* Bits 1:0 of an opcode: data direction (0 none, 1 host->ctrl, 2 ctrl->host, 3 both). */
enum gdx_nvme_xfer {
	GDX_NVME_XFER_NONE = 0,
	GDX_NVME_XFER_H2C = 1,
	GDX_NVME_XFER_C2H = 2,
	GDX_NVME_XFER_BIDI = 3,
};

static inline enum gdx_nvme_xfer gdx_nvme_opc_xfer(uint8_t opc)
{
	return (enum gdx_nvme_xfer)(opc & 3);
}

/* ---- SGL descriptor (16 bytes) ------------------------------------------ */

enum gdx_nvme_sgl_type {
	GDX_NVME_SGL_DATA_BLOCK_OFFSET = 0x01,	/* in-capsule data, addr = offset */
	GDX_NVME_SGL_TRANSPORT = 0x5a,		/* TCP: data via R2T/H2C or C2H */
	GDX_NVME_SGL_KEYED = 0x40,		/* RDMA keyed data block */
	GDX_NVME_SGL_KEYED_INV = 0x4f,		/* keyed, invalidate key */
};

struct gdx_nvme_sgl {
	uint64_t addr;
	union {
		struct {
			uint32_t length;
			uint8_t rsvd[3];
			uint8_t type;	/* bits 7:4 type, 3:0 subtype */
		};
		struct {		/* keyed form (RDMA) */
			uint8_t klength[3];
			uint8_t key[4];
			uint8_t ktype;
		};
	};
};
static_assert(sizeof(struct gdx_nvme_sgl) == 16, "sgl");

/* ---- submission queue entry (64 bytes) ----------------------------------- */

#define GDX_NVME_FLAGS_PSDT_SGL 0x40	/* PSDT = 01b: SGL for data, as fabrics require */
#define GDX_NVME_FLAGS_FUSE_MASK 0x03
#define GDX_NVME_FLAGS_PSDT_MASK 0xc0

struct gdx_nvme_sqe {
	uint8_t opc;
	uint8_t flags;
	uint16_t cid;
	union {
		struct {
			uint32_t nsid;
			uint32_t cdw2;
			uint32_t cdw3;
		};
		struct {		/* fabrics commands, opc 0x7f */
			uint8_t fctype;
			uint8_t frsvd[11];
		};
	};
	uint64_t mptr;			/* reserved on fabrics */
	struct gdx_nvme_sgl dptr;
	union {
		struct {
			uint32_t cdw10;
			uint32_t cdw11;
			uint32_t cdw12;
			uint32_t cdw13;
			uint32_t cdw14;
			uint32_t cdw15;
		};
		struct {		/* Connect */
			uint16_t recfmt;
			uint16_t qid;
			uint16_t sqsize;	/* 0's based */
			uint8_t cattr;
			uint8_t rsvd47;
			uint32_t kato;		/* ms */
			uint8_t rsvd52[12];
		} connect;
		struct {		/* Property Get/Set */
			uint8_t attrib;		/* bits 2:0: 0 = 4 bytes, 1 = 8 bytes */
			uint8_t rsvd41[3];
			uint32_t ofst;
			uint64_t value;
			uint8_t rsvd56[8];
		} prop;
		struct {		/* Authentication Send/Receive */
			uint8_t rsvd40;
			uint8_t spsp0;
			uint8_t spsp1;
			uint8_t secp;
			uint32_t len;		/* Send: TL, Receive: AL (bytes) */
			uint8_t rsvd48[16];
		} auth;
	};
};
static_assert(sizeof(struct gdx_nvme_sqe) == 64, "sqe");
static_assert(offsetof(struct gdx_nvme_sqe, dptr) == 24, "sqe dptr");
static_assert(offsetof(struct gdx_nvme_sqe, cdw10) == 40, "sqe cdw10");
static_assert(offsetof(struct gdx_nvme_sqe, connect.qid) == 42, "connect qid");
static_assert(offsetof(struct gdx_nvme_sqe, connect.kato) == 48, "connect kato");
static_assert(offsetof(struct gdx_nvme_sqe, prop.ofst) == 44, "prop ofst");
static_assert(offsetof(struct gdx_nvme_sqe, prop.value) == 48, "prop value");
static_assert(offsetof(struct gdx_nvme_sqe, auth.secp) == 43, "auth secp");
static_assert(offsetof(struct gdx_nvme_sqe, auth.len) == 44, "auth tl/al");

#define GDX_NVMF_CATTR_DISABLE_SQFLOW 0x04

/* Read/Write/Write Zeroes field accessors (SLBA in CDW10-11, NLB 0's based in CDW12). */
static inline uint64_t gdx_nvme_rw_slba(const struct gdx_nvme_sqe *c)
{
	return (uint64_t)c->cdw10 | (uint64_t)c->cdw11 << 32;
}

static inline uint32_t gdx_nvme_rw_nlb(const struct gdx_nvme_sqe *c)
{
	return (c->cdw12 & 0xffff) + 1;
}

#define GDX_NVME_RW_FUA (1u << 30)
#define GDX_NVME_RW_LR (1u << 31)
#define GDX_NVME_WZ_DEAC (1u << 25)
#define GDX_NVME_DSM_AD (1u << 2)

struct gdx_nvme_dsm_range {
	uint32_t cattr;
	uint32_t nlb;		/* not 0's based */
	uint64_t slba;
};
static_assert(sizeof(struct gdx_nvme_dsm_range) == 16, "dsm range");

/* ---- completion queue entry (16 bytes) and status ------------------------ */

struct gdx_nvme_cqe {
	union {
		struct {
			uint32_t dw0;
			uint32_t dw1;
		};
		uint64_t result;
	};
	uint16_t sqhd;
	uint16_t sqid;
	uint16_t cid;
	uint16_t status;	/* wire form: phase in bit 0, status in 15:1 */
};
static_assert(sizeof(struct gdx_nvme_cqe) == 16, "cqe");

/*
 * Status values here are the 15-bit form without the phase bit (as Linux
 * keeps them): SC in 7:0, SCT in 10:8, CRD 12:11, More 13, DNR 14.  On the
 * wire they are shifted left by one.
 */
#define GDX_NVME_SCT_GENERIC 0
#define GDX_NVME_SCT_CMD 1
#define GDX_NVME_SCT_MEDIA 2
#define GDX_NVME_SCT_PATH 3
#define GDX_NVME_ST(sct, sc) ((uint16_t)(((sct) << 8) | (sc)))
#define GDX_NVME_ST_DNR 0x4000
#define GDX_NVME_ST_MORE 0x2000
#define GDX_NVME_ST_SC(st) ((st) & 0xff)
#define GDX_NVME_ST_SCT(st) (((st) >> 8) & 0x7)

enum gdx_nvme_status {
	GDX_NVME_SC_SUCCESS = 0x00,
	GDX_NVME_SC_INVALID_OPCODE = 0x01,
	GDX_NVME_SC_INVALID_FIELD = 0x02,
	GDX_NVME_SC_CMDID_CONFLICT = 0x03,
	GDX_NVME_SC_DATA_XFER_ERROR = 0x04,
	GDX_NVME_SC_ABORT_REQ = 0x07,
	GDX_NVME_SC_INTERNAL = 0x06,
	GDX_NVME_SC_INVALID_NS = 0x0b,
	GDX_NVME_SC_CMD_SEQ_ERROR = 0x0c,
	GDX_NVME_SC_SGL_INVALID_LAST = 0x0d,
	GDX_NVME_SC_SGL_INVALID_COUNT = 0x0e,
	GDX_NVME_SC_SGL_INVALID_DATA = 0x0f,	/* SGL data block length invalid */
	GDX_NVME_SC_SGL_INVALID_TYPE = 0x11,
	GDX_NVME_SC_SGL_INVALID_OFFSET = 0x16,
	GDX_NVME_SC_KA_TIMEOUT_INVALID = 0x1a,
	GDX_NVME_SC_NS_WRITE_PROTECTED = 0x20,
	GDX_NVME_SC_TRANSIENT_TR_ERR = 0x22,
	GDX_NVME_SC_LBA_RANGE = 0x80,
	GDX_NVME_SC_CAP_EXCEEDED = 0x81,
	GDX_NVME_SC_NS_NOT_READY = 0x82,
	/* SCT 1, command specific */
	GDX_NVME_SC_ABORT_LIMIT = GDX_NVME_ST(1, 0x03),
	GDX_NVME_SC_ASYNC_LIMIT = GDX_NVME_ST(1, 0x05),
	GDX_NVME_SC_INVALID_LOG_PAGE = GDX_NVME_ST(1, 0x09),
	GDX_NVME_SC_FEATURE_NOT_SAVEABLE = GDX_NVME_ST(1, 0x0d),
	GDX_NVME_SC_CONNECT_FORMAT = GDX_NVME_ST(1, 0x80),
	GDX_NVME_SC_CONNECT_CTRL_BUSY = GDX_NVME_ST(1, 0x81),
	GDX_NVME_SC_CONNECT_INVALID_PARAM = GDX_NVME_ST(1, 0x82),
	GDX_NVME_SC_CONNECT_RESTART_DISC = GDX_NVME_ST(1, 0x83),
	GDX_NVME_SC_CONNECT_INVALID_HOST = GDX_NVME_ST(1, 0x84),
	GDX_NVME_SC_AUTH_REQUIRED = GDX_NVME_ST(1, 0x91),
	/* SCT 2, media */
	GDX_NVME_SC_WRITE_FAULT = GDX_NVME_ST(2, 0x80),
	GDX_NVME_SC_READ_ERROR = GDX_NVME_ST(2, 0x81),
	GDX_NVME_SC_ACCESS_DENIED = GDX_NVME_ST(2, 0x86),
	/* SCT 3, path */
	GDX_NVME_SC_INTERNAL_PATH = GDX_NVME_ST(3, 0x00),
};

/* Name of a status (without DNR/More), e.g. "LBA Out of Range"; never NULL. */
const char *gdx_nvme_status_str(uint16_t status);
/* The specification's sentence for a status; NULL for one not in the table. */
const char *gdx_nvme_status_what(uint16_t status);

/* Connect Invalid Parameters DW0: byte offset of the bad field, bit 16 = in the data. */
#define GDX_NVMF_IATTR_DATA (1u << 16)

/* ---- Connect data (1024 bytes, in-capsule) ------------------------------ */

struct gdx_nvmf_connect_data {
	uint8_t hostid[16];
	uint16_t cntlid;
	uint8_t rsvd[238];
	char subnqn[GDX_NVME_NQN_SIZE];
	char hostnqn[GDX_NVME_NQN_SIZE];
	uint8_t rsvd2[256];
};
static_assert(sizeof(struct gdx_nvmf_connect_data) == 1024, "connect data");
static_assert(offsetof(struct gdx_nvmf_connect_data, subnqn) == 256, "connect subnqn");

/*
 * Checks that an NQN field holds a NUL-terminated string of 1..223 chars.
 * Returns its length or -EINVAL.
 */
int gdx_nvme_nqn_check(const char *field, size_t field_size);

/* ---- controller properties (registers) ---------------------------------- */

enum gdx_nvme_prop {
	GDX_NVME_REG_CAP = 0x00,
	GDX_NVME_REG_VS = 0x08,
	GDX_NVME_REG_CC = 0x14,
	GDX_NVME_REG_CSTS = 0x1c,
	GDX_NVME_REG_NSSR = 0x20,
};

#define GDX_NVME_CAP_MQES(cap) ((uint32_t)((cap) & 0xffff))
#define GDX_NVME_CAP_CQR (1ull << 16)
#define GDX_NVME_CAP_TO(cap) ((uint32_t)(((cap) >> 24) & 0xff))
#define GDX_NVME_CAP_CSS_NVM (1ull << 37)
#define GDX_NVME_CAP_MPSMIN(cap) ((uint32_t)(((cap) >> 48) & 0xf))
#define GDX_NVME_VS(mjr, mnr, ter) (((uint32_t)(mjr) << 16) | ((mnr) << 8) | (ter))

#define GDX_NVME_CC_EN (1u << 0)
#define GDX_NVME_CC_CSS(cc) (((cc) >> 4) & 0x7)
#define GDX_NVME_CC_MPS(cc) (((cc) >> 7) & 0xf)
#define GDX_NVME_CC_AMS(cc) (((cc) >> 11) & 0x7)
#define GDX_NVME_CC_SHN(cc) (((cc) >> 14) & 0x3)
#define GDX_NVME_CC_IOSQES(cc) (((cc) >> 16) & 0xf)
#define GDX_NVME_CC_IOCQES(cc) (((cc) >> 20) & 0xf)
#define GDX_NVME_CC_SHN_NORMAL 1
#define GDX_NVME_CC_SHN_ABRUPT 2
/* What a host writes to enable a plain NVM controller: IOCQES 4, IOSQES 6. */
#define GDX_NVME_CC_DEFAULT 0x00460000u

#define GDX_NVME_CSTS_RDY (1u << 0)
#define GDX_NVME_CSTS_CFS (1u << 1)
#define GDX_NVME_CSTS_SHST_MASK (3u << 2)
#define GDX_NVME_CSTS_SHST_OCCUR (1u << 2)
#define GDX_NVME_CSTS_SHST_CMPLT (2u << 2)

/* ---- Identify ------------------------------------------------------------ */

enum gdx_nvme_cns {
	GDX_NVME_CNS_NS = 0x00,
	GDX_NVME_CNS_CTRL = 0x01,
	GDX_NVME_CNS_NS_ACTIVE_LIST = 0x02,
	GDX_NVME_CNS_NS_DESC_LIST = 0x03,
	GDX_NVME_CNS_CS_NS = 0x05,
	GDX_NVME_CNS_CS_CTRL = 0x06,
	GDX_NVME_CNS_NS_CS_INDEP = 0x08,
};

struct gdx_nvme_psd {
	uint16_t max_power;
	uint8_t rsvd2;
	uint8_t flags;
	uint32_t entry_lat;
	uint32_t exit_lat;
	uint8_t read_tput, read_lat, write_tput, write_lat;
	uint16_t idle_power;
	uint8_t idle_scale, rsvd19;
	uint16_t active_power;
	uint8_t active_work_scale;
	uint8_t rsvd23[9];
};
static_assert(sizeof(struct gdx_nvme_psd) == 32, "psd");

struct gdx_nvme_id_ctrl {
	uint16_t vid;
	uint16_t ssvid;
	char sn[20];
	char mn[40];
	char fr[8];
	uint8_t rab;
	uint8_t ieee[3];
	uint8_t cmic;
	uint8_t mdts;
	uint16_t cntlid;
	uint32_t ver;
	uint32_t rtd3r;
	uint32_t rtd3e;
	uint32_t oaes;
	uint32_t ctratt;
	uint8_t rsvd100[11];
	uint8_t cntrltype;
	uint8_t fguid[16];
	uint16_t crdt[3];
	uint8_t rsvd134[122];
	uint16_t oacs;
	uint8_t acl;
	uint8_t aerl;
	uint8_t frmw;
	uint8_t lpa;
	uint8_t elpe;
	uint8_t npss;
	uint8_t avscc;
	uint8_t apsta;
	uint16_t wctemp;
	uint16_t cctemp;
	uint16_t mtfa;
	uint32_t hmpre;
	uint32_t hmmin;
	uint8_t tnvmcap[16];
	uint8_t unvmcap[16];
	uint32_t rpmbs;
	uint16_t edstt;
	uint8_t dsto;
	uint8_t fwug;
	uint16_t kas;
	uint16_t hctma;
	uint16_t mntmt;
	uint16_t mxtmt;
	uint32_t sanicap;
	uint32_t hmminds;
	uint16_t hmmaxd;
	uint16_t nvmsetidmax;
	uint16_t endgidmax;
	uint8_t anatt;
	uint8_t anacap;
	uint32_t anagrpmax;
	uint32_t nanagrpid;
	uint8_t rsvd352[160];
	uint8_t sqes;
	uint8_t cqes;
	uint16_t maxcmd;
	uint32_t nn;
	uint16_t oncs;
	uint16_t fuses;
	uint8_t fna;
	uint8_t vwc;
	uint16_t awun;
	uint16_t awupf;
	uint8_t nvscc;
	uint8_t nwpc;
	uint16_t acwu;
	uint8_t rsvd534[2];
	uint32_t sgls;
	uint32_t mnan;
	uint8_t rsvd544[224];
	char subnqn[256];
	uint8_t rsvd1024[768];
	/* fabrics */
	uint32_t ioccsz;
	uint32_t iorcsz;
	uint16_t icdoff;
	uint8_t fcatt;
	uint8_t msdbd;
	uint16_t ofcs;
	uint8_t dctype;
	uint8_t rsvd1807[241];
	struct gdx_nvme_psd psd[32];
	uint8_t vs[1024];
};
static_assert(sizeof(struct gdx_nvme_id_ctrl) == 4096, "id ctrl");
static_assert(offsetof(struct gdx_nvme_id_ctrl, cntrltype) == 111, "cntrltype");
static_assert(offsetof(struct gdx_nvme_id_ctrl, kas) == 320, "kas");
static_assert(offsetof(struct gdx_nvme_id_ctrl, sqes) == 512, "sqes");
static_assert(offsetof(struct gdx_nvme_id_ctrl, sgls) == 536, "sgls");
static_assert(offsetof(struct gdx_nvme_id_ctrl, subnqn) == 768, "subnqn");
static_assert(offsetof(struct gdx_nvme_id_ctrl, ioccsz) == 1792, "ioccsz");
static_assert(offsetof(struct gdx_nvme_id_ctrl, psd) == 2048, "psd");

#define GDX_NVME_CNTRLTYPE_IO 1
#define GDX_NVME_CNTRLTYPE_DISC 2
#define GDX_NVME_ONCS_DSM (1u << 2)
#define GDX_NVME_ONCS_WRITE_ZEROES (1u << 3)
#define GDX_NVME_OAES_NS_ATTR (1u << 8)
#define GDX_NVME_OAES_DISC_CHANGE (1u << 31)
#define GDX_NVME_LPA_EXT (1u << 2)
#define GDX_NVME_SGLS_SUPPORTED 0x1u
#define GDX_NVME_SGLS_KEYED (1u << 2)	/* keyed data blocks: RDMA */
#define GDX_NVME_SGLS_OFFSET (1u << 20)

struct gdx_nvme_lbaf {
	uint16_t ms;
	uint8_t ds;	/* log2 of the LBA size */
	uint8_t rp;
};

struct gdx_nvme_id_ns {
	uint64_t nsze;
	uint64_t ncap;
	uint64_t nuse;
	uint8_t nsfeat;
	uint8_t nlbaf;
	uint8_t flbas;
	uint8_t mc;
	uint8_t dpc;
	uint8_t dps;
	uint8_t nmic;
	uint8_t rescap;
	uint8_t fpi;
	uint8_t dlfeat;
	uint16_t nawun;
	uint16_t nawupf;
	uint16_t nacwu;
	uint16_t nabsn;
	uint16_t nabo;
	uint16_t nabspf;
	uint16_t noiob;
	uint8_t nvmcap[16];
	uint16_t npwg;
	uint16_t npwa;
	uint16_t npdg;
	uint16_t npda;
	uint16_t nows;
	uint8_t rsvd74[18];
	uint32_t anagrpid;
	uint8_t rsvd96[3];
	uint8_t nsattr;
	uint16_t nvmsetid;
	uint16_t endgid;
	uint8_t nguid[16];
	uint8_t eui64[8];
	struct gdx_nvme_lbaf lbaf[64];
	uint8_t vs[3712];
};
static_assert(sizeof(struct gdx_nvme_id_ns) == 4096, "id ns");
static_assert(offsetof(struct gdx_nvme_id_ns, nguid) == 104, "nguid");
static_assert(offsetof(struct gdx_nvme_id_ns, lbaf) == 128, "lbaf");

/* Namespace identification descriptor header (CNS 03h); NID bytes follow. */
struct gdx_nvme_ns_desc {
	uint8_t nidt;
	uint8_t nidl;
	uint16_t rsvd;
};
enum gdx_nvme_nidt {
	GDX_NVME_NIDT_EUI64 = 1,
	GDX_NVME_NIDT_NGUID = 2,
	GDX_NVME_NIDT_UUID = 3,
	GDX_NVME_NIDT_CSI = 4,
};

/* ---- features ------------------------------------------------------------ */

enum gdx_nvme_fid {
	GDX_NVME_FEAT_ARBITRATION = 0x01,
	GDX_NVME_FEAT_POWER_MGMT = 0x02,
	GDX_NVME_FEAT_TEMP_THRESH = 0x04,
	GDX_NVME_FEAT_ERR_RECOVERY = 0x05,
	GDX_NVME_FEAT_VOLATILE_WC = 0x06,
	GDX_NVME_FEAT_NUM_QUEUES = 0x07,
	GDX_NVME_FEAT_IRQ_COALESCE = 0x08,
	GDX_NVME_FEAT_WRITE_ATOMIC = 0x0a,
	GDX_NVME_FEAT_ASYNC_EVENT = 0x0b,
	GDX_NVME_FEAT_KATO = 0x0f,
	GDX_NVME_FEAT_HOST_ID = 0x81,
};

/* ---- asynchronous events ------------------------------------------------- */

#define GDX_NVME_AER_TYPE_NOTICE 2
#define GDX_NVME_AER_NOTICE_NS_CHANGED 0x00
#define GDX_NVME_AER_NOTICE_DISC_CHANGED 0xf0
#define GDX_NVME_AER_RESULT(type, info, lid) \
	((uint32_t)(type) | ((uint32_t)(info) << 8) | ((uint32_t)(lid) << 16))

/* ---- log pages ----------------------------------------------------------- */

enum gdx_nvme_lid {
	GDX_NVME_LOG_ERROR = 0x01,
	GDX_NVME_LOG_SMART = 0x02,
	GDX_NVME_LOG_FW_SLOT = 0x03,
	GDX_NVME_LOG_CHANGED_NS = 0x04,
	GDX_NVME_LOG_CMD_EFFECTS = 0x05,
	GDX_NVME_LOG_DISC = 0x70,
};

/* Get Log Page fields: LID in CDW10 7:0, RAE bit 15, NUMD 0's based dwords over CDW10/11. */
static inline uint8_t gdx_nvme_glp_lid(const struct gdx_nvme_sqe *c)
{
	return c->cdw10 & 0xff;
}

static inline uint64_t gdx_nvme_glp_len(const struct gdx_nvme_sqe *c)
{
	uint32_t numd = (c->cdw10 >> 16) | ((c->cdw11 & 0xffff) << 16);

	return ((uint64_t)numd + 1) * 4;
}

static inline uint64_t gdx_nvme_glp_offset(const struct gdx_nvme_sqe *c)
{
	return (uint64_t)c->cdw12 | (uint64_t)c->cdw13 << 32;
}

#define GDX_NVME_GLP_RAE (1u << 15)

struct gdx_nvme_err_log {
	uint64_t error_count;
	uint16_t sqid;
	uint16_t cmdid;
	uint16_t status_field;	/* wire form (phase bit 0) */
	uint16_t param_error_location;
	uint64_t lba;
	uint32_t nsid;
	uint8_t vs;
	uint8_t trtype;
	uint8_t rsvd30[2];
	uint64_t cs;
	uint16_t trtype_spec_info;
	uint8_t rsvd42[22];
};
static_assert(sizeof(struct gdx_nvme_err_log) == 64, "err log");

struct gdx_nvme_smart_log {
	uint8_t critical_warning;
	uint8_t temperature[2];
	uint8_t avail_spare;
	uint8_t spare_thresh;
	uint8_t percent_used;
	uint8_t endu_grp_crit_warn_sumry;
	uint8_t rsvd7[25];
	uint8_t data_units_read[16];
	uint8_t data_units_written[16];
	uint8_t host_reads[16];
	uint8_t host_writes[16];
	uint8_t ctrl_busy_time[16];
	uint8_t power_cycles[16];
	uint8_t power_on_hours[16];
	uint8_t unsafe_shutdowns[16];
	uint8_t media_errors[16];
	uint8_t num_err_log_entries[16];
	uint32_t warning_temp_time;
	uint32_t critical_comp_time;
	uint16_t temp_sensor[8];
	uint8_t rsvd216[296];
};
static_assert(sizeof(struct gdx_nvme_smart_log) == 512, "smart log");

/* Discovery log page. */
enum gdx_nvmf_trtype {
	GDX_NVMF_TRTYPE_RDMA = 1,
	GDX_NVMF_TRTYPE_FC = 2,
	GDX_NVMF_TRTYPE_TCP = 3,
	GDX_NVMF_TRTYPE_LOOP = 254,
};
enum gdx_nvmf_adrfam {
	GDX_NVMF_ADRFAM_IPV4 = 1,
	GDX_NVMF_ADRFAM_IPV6 = 2,
};
enum gdx_nvmf_subtype {
	GDX_NVMF_SUBTYPE_REFERRAL = 1,
	GDX_NVMF_SUBTYPE_NVME = 2,
	GDX_NVMF_SUBTYPE_CUR_DISC = 3,
};
#define GDX_NVMF_TREQ_NOT_SPECIFIED 0
#define GDX_NVMF_TREQ_REQUIRED 1
#define GDX_NVMF_TREQ_NOT_REQUIRED 2
#define GDX_NVMF_TREQ_SECURE_MASK 3
#define GDX_NVMF_TCP_SECTYPE_NONE 0
#define GDX_NVMF_TCP_SECTYPE_TLS13 2
#define GDX_NVMF_TREQ_DISABLE_SQFLOW 4

struct gdx_nvmf_disc_entry {
	uint8_t trtype;
	uint8_t adrfam;
	uint8_t subtype;
	uint8_t treq;
	uint16_t portid;
	uint16_t cntlid;
	uint16_t asqsz;
	uint16_t eflags;
	uint8_t rsvd12[20];
	char trsvcid[32];
	uint8_t rsvd64[192];
	char subnqn[256];
	char traddr[256];
	union {
		struct {
			uint8_t sectype;
		} tcp;
		struct {
			uint8_t qptype;
			uint8_t prtype;
			uint8_t cms;
			uint8_t rsvd3[5];
			uint16_t pkey;
		} rdma;
		uint8_t tsas[256];
	};
};
static_assert(sizeof(struct gdx_nvmf_disc_entry) == 1024, "disc entry");
static_assert(offsetof(struct gdx_nvmf_disc_entry, traddr) == 512, "disc traddr");

struct gdx_nvmf_disc_hdr {
	uint64_t genctr;
	uint64_t numrec;
	uint16_t recfmt;
	uint8_t rsvd[1006];
};
static_assert(sizeof(struct gdx_nvmf_disc_hdr) == 1024, "disc hdr");

/*
 * Copies a NUL- or space-padded fixed-width string field into dst (size n),
 * trimming trailing spaces and NULs; always NUL-terminates.
 */
void gdx_nvme_field_str(char *dst, size_t n, const char *field, size_t field_size);
/* Fills a fixed-width field with s, space padded (Identify SN/MN/FR style). */
void gdx_nvme_field_pad(char *field, size_t field_size, const char *s);

/* ---- SQE checks shared by target and host ------------------------------- */

/*
 * Where a command's data is, as an SQE's SGL says, for a TCP transport:
 * in-capsule (length bytes follow the SQE in the capsule) or moved by
 * R2T/H2CData/C2HData.  Returns 0 or an NVMe status (no DNR bit added).
 */
struct gdx_nvme_sgl_info {
	uint32_t length;
	bool in_capsule;
};
uint16_t gdx_nvme_sgl_parse(const struct gdx_nvme_sqe *c, struct gdx_nvme_sgl_info *out);

#endif
