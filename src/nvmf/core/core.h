/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_CORE_CORE_H
#define GDX_NVMF_CORE_CORE_H

/*
 * Transport-independent NVMe-oF target: subsystems, namespaces, ports,
 * controllers, the admin/fabrics/NVM command sets and the discovery service.
 * A transport (target/tcp/, target/rdma/) owns queues and requests; it hands each command
 * with its data buffer to nvmf_req_exec() and gets the completion back through
 * req->done, possibly later (file I/O, AER).
 *
 * Locking: tgt->lock guards the subsystem/port/host lists and controller
 * creation and lookup.  A controller's mutable state (CC, features, AEN
 * bookkeeping) is touched under ctrl->lock; I/O queues only read CSTS and the
 * namespace table, whose entries never move once added.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/stats.h"
#include "common/tls.h"
#include "nvmf/auth/auth.h"
#include "nvmf/proto/nvme.h"

#define NVMF_MAX_NS 1024
#define NVMF_MAX_PORTS 16
#define NVMF_MAX_SUBSYS 64
#define NVMF_MAX_HOSTS 64
#define NVMF_AERL 4		/* outstanding AERs per controller */
#define NVMF_KAS 10		/* keep-alive granularity, 100 ms units */
#define NVMF_DISC_KATO_MS 120000
#define NVMF_ERR_LOG_ENTRIES 64
#define NVMF_MAX_IO_QUEUES 128
#define NVMF_VS GDX_NVME_VS(1, 3, 0)	/* 1.3: CNS 03h, no CSI, no CNS 08h */

struct nvmf_ns;
struct nvmf_ctrl;
struct nvmf_req;
struct nvmf_ioctx;

/* ---- namespace backends --------------------------------------------------- */

enum nvmf_ns_pages {
	/*
	 * Pages every read may share, e.g. the kernel's one zero page behind
	 * never-written RAM: each lent page is an atomic on that page's count,
	 * from every reactor and every receiver freeing the data, so they are
	 * copied.
	 */
	NVMF_PAGES_SHARED,
	NVMF_PAGES_OWN,		/* pages of their own: may be lent */
	NVMF_PAGES_ZERO,	/* the bytes read as zeroes: lend zeroed pages of your own */
};

struct nvmf_ns_ops {
	const char *name;
	/* Open the backing store named by spec; sets ns->size (bytes). */
	int (*open)(struct nvmf_ns *ns, const char *spec);
	void (*close)(struct nvmf_ns *ns);
	/*
	 * Optional: the namespace's bytes [off, off+len) are addressable memory
	 * (RAM), so data moves to and from the socket with no bounce buffer.
	 */
	void *(*map)(struct nvmf_ns *ns, uint64_t off, uint64_t len, bool write);
	/*
	 * Optional, with map: what the mapped bytes [off, off+len) of a read
	 * are, for the transport to choose between lending pages to the kernel
	 * (splice) and copying.  Absent: NVMF_PAGES_SHARED.
	 */
	enum nvmf_ns_pages (*pages)(struct nvmf_ns *ns, uint64_t off, uint64_t len);
	/*
	 * Starts the I/O command in req (read, write, flush, write zeroes,
	 * deallocate, already validated) and calls nvmf_io_done() when it
	 * finishes, possibly before returning.
	 */
	void (*submit)(struct nvmf_ns *ns, struct nvmf_req *req);
};

struct nvmf_ns {
	uint32_t nsid;
	bool enabled;
	uint32_t lba_shift;
	uint64_t size;		/* bytes */
	uint64_t nsze;		/* blocks */
	uint8_t nguid[16];
	uint8_t uuid[16];
	uint8_t eui64[8];
	char spec[256];
	const struct nvmf_ns_ops *ops;
	void *priv;
	struct gdx_counter ctr[6];	/* read/write ops and bytes, flush, errors */
	struct gdx_stats *stats;
};

enum { NS_CTR_READS, NS_CTR_WRITES, NS_CTR_READ_BYTES, NS_CTR_WRITE_BYTES, NS_CTR_FLUSHES,
       NS_CTR_ERRORS };

/* Backend completion: res is 0 or a negative errno, mapped to an NVMe status. */
void nvmf_io_done(struct nvmf_req *req, int res);

/* Picks the backend from spec: "ram:SIZE", "null:SIZE", else a file or block device. */
const struct nvmf_ns_ops *nvmf_ns_backend(const char *spec);
extern const struct nvmf_ns_ops nvmf_ns_ram_ops, nvmf_ns_null_ops, nvmf_ns_file_ops;

/*
 * Per-reactor I/O context backends may use (the file backend keeps an
 * io_uring here); the transport polls nvmf_ioctx_fd() and calls
 * nvmf_ioctx_reap() when it is readable.
 */
int nvmf_ioctx_create(struct nvmf_ioctx **out);
void nvmf_ioctx_destroy(struct nvmf_ioctx *ctx);
int nvmf_ioctx_fd(struct nvmf_ioctx *ctx);
void nvmf_ioctx_reap(struct nvmf_ioctx *ctx);
/* Submits queued SQEs; the transport calls it once per loop iteration. */
void nvmf_ioctx_flush(struct nvmf_ioctx *ctx);

/* ---- subsystems, hosts, ports --------------------------------------------- */

struct nvmf_subsys {
	char nqn[GDX_NVME_NQN_SIZE];
	bool discovery;
	char serial[21];
	char model[41];
	bool allow_any_host;
	unsigned nhosts;
	char *hosts[NVMF_MAX_HOSTS];
	/* indexed by nsid - 1; published atomically, entries never move */
	_Atomic(struct nvmf_ns *) ns[NVMF_MAX_NS];
	_Atomic uint32_t max_nsid;
	uint16_t next_cntlid;
	uint32_t ctrl_count;
};

struct nvmf_port {
	uint16_t portid;
	uint8_t trtype;		/* GDX_NVMF_TRTYPE_TCP or _RDMA */
	uint8_t adrfam;
	char traddr[64];
	char trsvcid[32];
	unsigned nsubsys;
	struct nvmf_subsys *subsys[NVMF_MAX_SUBSYS];
	/*
	 * TCP secure channel (addr_tsas, addr_treq): TLS 1.3 with PSKs made from
	 * a host's own key (nvmf_tgt.hpsk), else from tls_key (len 0: none)
	 */
	uint8_t sectype;	/* GDX_NVMF_TCP_SECTYPE_NONE or _TLS13 */
	uint8_t treq;		/* GDX_NVMF_TREQ_REQUIRED or _NOT_REQUIRED with TLS */
	struct gdx_tls_key tls_key;
};

/* A host's own configured TLS PSK (its host entry's tls_key), in place of any port's. */
struct nvmf_host_psk {
	char nqn[GDX_NVME_NQN_SIZE];
	struct gdx_tls_key key;
};

/*
 * A host's DH-HMAC-CHAP settings (configfs's hosts/NQN/dhchap_*): the host
 * must prove it holds key; with a ctrl_key the host may ask the controller
 * to prove it holds that one (bidirectional).  hashes and dhs: allowed, in
 * the order the controller prefers them.
 */
struct nvmf_host_auth {
	char nqn[GDX_NVME_NQN_SIZE];
	bool has_ctrl_key;
	struct nvmf_auth_key key, ctrl_key;
	uint8_t hashes[NVMF_AUTH_NHASH], dhs[NVMF_AUTH_NDH];
	unsigned nhash, ndh;
};

struct nvmf_tgt {
	pthread_mutex_t lock;
	struct nvmf_subsys disc;
	unsigned nhauth;
	struct nvmf_host_auth *hauth[NVMF_MAX_HOSTS];
	unsigned nhpsk;
	struct nvmf_host_psk *hpsk[NVMF_MAX_HOSTS];
	unsigned nsubsys;
	struct nvmf_subsys *subsys[NVMF_MAX_SUBSYS];
	unsigned nports;
	struct nvmf_port ports[NVMF_MAX_PORTS];
	uint64_t disc_genctr;
	struct nvmf_ctrl *ctrls;	/* list of live controllers */
	uint16_t next_cntlid;
	/* transport limits advertised in Identify */
	uint32_t max_io;		/* bytes: MDTS */
	uint32_t inline_data;		/* I/O queue in-capsule data, bytes */
	uint16_t max_io_queues;
	uint16_t max_qdepth;
	_Atomic bool timed;		/* time commands (struct nvmf_timing) */
	uint64_t auth_tmo_ns;		/* each DH-HMAC-CHAP transaction (nvmf.target.auth_timeout_ms) */
};

int nvmf_tgt_init(struct nvmf_tgt *t);
void nvmf_tgt_fini(struct nvmf_tgt *t);
struct nvmf_subsys *nvmf_subsys_find(struct nvmf_tgt *t, const char *nqn);
int nvmf_subsys_add(struct nvmf_tgt *t, const char *nqn, struct nvmf_subsys **out);
int nvmf_subsys_add_host(struct nvmf_subsys *s, const char *hostnqn);
int nvmf_subsys_add_ns(struct nvmf_tgt *t, struct nvmf_subsys *s, uint32_t nsid,
		       const char *spec, uint32_t block_size, const uint8_t *nguid,
		       const uint8_t *uuid);
bool nvmf_host_allowed(const struct nvmf_subsys *s, const char *hostnqn);
/* Sets (replaces) the authentication of host a->nqn; the target keeps a copy. */
int nvmf_tgt_set_host_auth(struct nvmf_tgt *t, const struct nvmf_host_auth *a);
/* Sets (replaces) host nqn's own TLS PSK; the target keeps a copy. */
int nvmf_tgt_set_host_psk(struct nvmf_tgt *t, const char *nqn, const struct gdx_tls_key *k);
/*
 * The TLS PSK for an identity a host offered on TLS port p: made from the key
 * of the host its identity names, or p's for a host without one; the
 * identity's NQNs go to hostnqn and subnqn (GDX_NVME_NQN_SIZE each).
 * -ENOKEY if it is not an NVMe retained-PSK identity, that host has no key
 * (and p none), or the key's hash or (v1) digest is not the identity's.
 */
int nvmf_tls_psk_find(struct nvmf_tgt *t, const struct nvmf_port *p, const char *identity,
		      struct gdx_tls_psk *out, char *hostnqn, char *subnqn);
int nvmf_port_add(struct nvmf_tgt *t, uint16_t portid, uint8_t trtype, const char *traddr,
		  const char *trsvcid, struct nvmf_port **out);
int nvmf_port_link(struct nvmf_tgt *t, struct nvmf_port *p, struct nvmf_subsys *s);
struct nvmf_port *nvmf_port_find(struct nvmf_tgt *t, uint16_t portid);

/* ---- controllers and queues ------------------------------------------------ */

/*
 * A queue's command latencies (prep to completion) and its failed commands by
 * status; latencies only while nvmf_tgt.timed is set (a Prometheus endpoint
 * runs).  target/metrics.c fills (nvmf_sq_account) and reads them.
 */
#define NVMF_LAT_BUCKETS 16
#define NVMF_STATUS_SLOTS 15
struct nvmf_timing {
	struct gdx_counter lat[NVMF_LAT_BUCKETS + 1];	/* the last: above every bound */
	struct gdx_counter lat_sum_ns;
	_Atomic uint16_t status[NVMF_STATUS_SLOTS];	/* claimed in order; 0: free */
	struct gdx_counter failed[NVMF_STATUS_SLOTS + 1];	/* the last: other statuses */
};

/* The core's view of one submission queue; the transport embeds it. */
struct nvmf_sq {
	struct nvmf_tgt *tgt;
	struct nvmf_ioctx *ioctx;	/* the reactor's, for backends */
	struct nvmf_ctrl *ctrl;	/* NULL until Connect succeeds */
	struct nvmf_port *port;
	uint16_t qid;
	uint16_t size;		/* entries */
	uint16_t head;
	bool sqflow_disabled;
	struct sockaddr_storage local;	/* for discovery TRADDR when bound to "any" */
	/* over TLS: the NQNs the host's PSK identity named (Connect must name the same); NULL: clear */
	const char *tls_hostnqn, *tls_subnqn;
	void *handle;			/* transport queue, for aen_kick */
	/* the transport's: called with handle, on an admin queue, when an AEN is pending */
	void (*aen_kick)(void *handle);
	struct gdx_counter ctr[4];	/* commands, errors, bytes in, bytes out */
	struct nvmf_timing timing;
	struct nvmf_auth_sq *auth;	/* DH-HMAC-CHAP state; NULL: not required */
};
enum { SQ_CTR_CMDS, SQ_CTR_ERRORS, SQ_CTR_BYTES_IN, SQ_CTR_BYTES_OUT };

struct nvmf_ctrl {
	struct nvmf_ctrl *next;
	struct nvmf_tgt *tgt;
	struct nvmf_subsys *subsys;
	uint16_t cntlid;
	uint8_t trtype;				/* of the port its admin queue came in on */
	char hostnqn[GDX_NVME_NQN_SIZE];
	uint8_t hostid[16];
	atomic_int refs;
	pthread_mutex_t lock;
	_Atomic uint32_t cc;			/* written under lock, read anywhere */
	_Atomic uint32_t csts;
	_Atomic uint32_t kato_ms;
	_Atomic uint64_t ka_deadline_ns;	/* 0: no keep-alive */
	_Atomic bool ka_traffic;		/* a command since the last expiry check */
	_Atomic bool fatal;
	_Atomic uint16_t nr_io_queues;
	struct nvmf_sq *sqs[NVMF_MAX_IO_QUEUES + 1];	/* connected queues, under tgt->lock */
	struct nvmf_sq *admin;			/* under ctrl->lock */
	uint32_t aen_cfg;
	uint32_t aen_pending;			/* AER results waiting for an AER */
	uint32_t aen_masked;			/* sent, until the host reads the log */
	struct nvmf_req *aer_reqs[NVMF_AERL];	/* held on the admin queue */
	unsigned naer;
	uint32_t changed_ns[1024];
	unsigned nchanged;
	bool changed_overflow;
	uint64_t err_count;
	struct gdx_nvme_err_log errlog[NVMF_ERR_LOG_ENTRIES];
	struct gdx_counter ctr[4];		/* commands, errors, keep-alives, aens */
	struct gdx_stats *stats;
	struct nvmf_host_auth *auth;		/* the host's, copied at Connect; NULL: none */
};
enum { CTRL_CTR_CMDS, CTRL_CTR_ERRORS, CTRL_CTR_KA, CTRL_CTR_AENS };

/* A command in flight. */
struct nvmf_req {
	struct gdx_nvme_sqe cmd;
	struct gdx_nvme_cqe cqe;
	struct nvmf_sq *sq;
	void *buf;		/* data: filled by the transport (H2C) or by exec (C2H) */
	uint32_t len;		/* transfer length from the SGL */
	bool in_capsule;
	struct nvmf_ns *ns;
	void (*done)(struct nvmf_req *req);
	/* backend scratch */
	int res;
	uint64_t io_off;
	uint64_t t_start;	/* ns at prep while nvmf_tgt.timed, else 0 */
};

/*
 * Validates a command before its data moves (so a write that will fail gets
 * no R2T): opcode, queue state, namespace, LBA range, SGL length.  Returns 0
 * or an NVMe status with DNR where it applies.  For Read/Write on a backend
 * with map(), sets req->buf to the namespace memory.
 */
uint16_t nvmf_req_prep(struct nvmf_req *req);
/* Runs a prepared command; req->done is called (maybe before this returns). */
void nvmf_req_exec(struct nvmf_req *req);
/* Completes with the given status (adds the error log entry for failures). */
void nvmf_req_complete(struct nvmf_req *req, uint16_t status);
/* Bytes of C2H data a successful completion carries (0 for none). */
uint32_t nvmf_req_c2h_len(const struct nvmf_req *req);

/* What len bytes of a read's mapped data are (enum nvmf_ns_pages). */
static inline enum nvmf_ns_pages nvmf_req_pages(const struct nvmf_req *req, uint32_t len)
{
	const struct nvmf_ns *ns = req->ns;

	return ns && ns->ops->pages ? ns->ops->pages(req->ns, req->io_off, len) :
				      NVMF_PAGES_SHARED;
}

/* Counts a completion in sq->timing: its latency if timed, its status if it failed. */
void nvmf_sq_account(struct nvmf_sq *sq, const struct nvmf_req *req, uint16_t status);
/* Drops a queue from its controller (socket gone); frees the ctrl on the last one. */
void nvmf_sq_destroy(struct nvmf_sq *sq);
/* Called by the transport on its timer tick: true if the controller's KATO expired. */
bool nvmf_ctrl_ka_expired(struct nvmf_ctrl *c, uint64_t now_ns);
/*
 * The same for a connected queue, which also fails its controller when the
 * queue's authentication ran out of time (nvmf_tgt.auth_tmo_ns).
 */
bool nvmf_sq_expired(struct nvmf_sq *sq, uint64_t now_ns);
/* Completes pending AERs; the transport calls it on the admin queue's thread after aen_kick. */
void nvmf_ctrl_aen_deliver(struct nvmf_sq *admin);
/* Records a namespace change and queues the AEN for every controller of s. */
void nvmf_subsys_ns_changed(struct nvmf_tgt *t, struct nvmf_subsys *s, uint32_t nsid);

#endif
