/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_H
#define GDX_NVMF_H

/* NVMe over Fabrics: the gdx target (below) and host (its own section). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <gdx/status.h>
#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== target ================================================================
 * An NVMe over Fabrics target (TCP and RDMA) that the Linux kernel host and
 * nvme-cli use unmodified.
 * Build one from an nvmetcli JSON file and/or the calls below, then start it:
 * it listens on every port, runs one reactor thread per configured core, and
 * serves until stopped.  Namespaces are files, block devices ("/dev/..."),
 * RAM ("ram:64M") or null ("null:1G").
 */

struct gdx_nvmf_target;

struct gdx_nvmf_target_opts {
	size_t size;		/* sizeof(struct gdx_nvmf_target_opts) */
	unsigned reactors;	/* threads serving connections (default 1) */
	uint32_t max_io;	/* largest transfer, bytes (MDTS; default 1 MiB) */
	uint32_t inline_data;	/* in-capsule data on I/O queues (default 16 KiB) */
	uint32_t maxh2cdata;	/* largest H2CData PDU (default 128 KiB) */
	uint16_t max_io_queues;	/* per controller (default 64, at most 128) */
	uint16_t max_qdepth;	/* entries per queue (default 256) */
	/*
	 * Poll mode: after an event a reactor keeps polling its sockets instead
	 * of sleeping, for a window that adapts to the gaps it sees between
	 * events, up to poll_us (0: sleep at once).  A command that arrives
	 * within the window is served without a wake-up of the reactor's core.
	 */
	uint32_t poll_us;
	/*
	 * Pin reactor i to the i-th CPU the process may run on.  I/O queue N is
	 * served by reactor (N-1) % reactors either way; pinned, that is the
	 * CPU a Linux host's queue N belongs to when host and target share a
	 * machine.
	 */
	int pin_cpus;
	/*
	 * Pin reactor i to the i-th CPU of this list ("1", "2,3", "0-3"; reused
	 * round-robin when there are more reactors); overrides pin_cpus.  NULL:
	 * no list.
	 */
	const char *cpus;
	/*
	 * Follow mode: while a reactor's busiest connection keeps at most 2
	 * commands in flight, the reactor runs on the CPU that connection's
	 * packets arrive on (no cross-core wake-up per command, as nvmet-tcp
	 * runs a queue's work on that CPU); deeper, it returns to its CPUs
	 * (cpus / pin_cpus, or any) so that it works beside the host.
	 */
	int follow;
};

GDX_API void gdx_nvmf_target_opts_init(struct gdx_nvmf_target_opts *o, size_t size);
GDX_API int gdx_nvmf_target_create(const struct gdx_nvmf_target_opts *o,
				   struct gdx_nvmf_target **out);
/* Stops it if running, closes every connection and namespace. */
GDX_API void gdx_nvmf_target_destroy(struct gdx_nvmf_target *t);

/*
 * Loads a configuration as `nvmetcli save` writes it: ports (addr.trtype tcp,
 * traddr, trsvcid; subsystems), subsystems (nqn, attr.allow_any_host,
 * attr.serial, attr.model, allowed_hosts, namespaces with device.path,
 * device.nguid, device.uuid and enable), hosts.  Ports other than tcp and
 * rdma are skipped with a warning.  gdx extension: a namespace may carry "block_size" (512 or 4096).
 */
GDX_API int gdx_nvmf_target_load_json(struct gdx_nvmf_target *t, const char *path);

/* Adds a subsystem; allow_any_host admits every host NQN. */
GDX_API int gdx_nvmf_target_add_subsys(struct gdx_nvmf_target *t, const char *nqn,
				       int allow_any_host);
GDX_API int gdx_nvmf_target_allow_host(struct gdx_nvmf_target *t, const char *nqn,
				       const char *hostnqn);
/*
 * DH-HMAC-CHAP in-band authentication of host hostnqn on every subsystem
 * but discovery (docs/security.md), as configfs's hosts/NQN/dhchap_*: key,
 * the host's secret ("DHHC-1:hh:<base64>:", as `nvme gen-dhchap-key` writes
 * it), which the host must prove it holds before any queue serves it;
 * ctrl_key, the controller's, which lets the host ask the controller to
 * prove itself (NULL: unidirectional only); hashes, the HMAC hashes allowed
 * in the order preferred ("hmac(sha256),hmac(sha384)", NULL: sha256, sha384,
 * sha512); dhgroups, the groups likewise ("null,ffdhe2048", NULL: null, then
 * ffdhe2048 ... ffdhe8192).  Applies to controllers created after it;
 * replaces an earlier setting of the host.  -EINVAL for a malformed secret
 * or list (the secret is not logged).
 */
GDX_API int gdx_nvmf_target_set_host_auth(struct gdx_nvmf_target *t, const char *hostnqn,
					  const char *key, const char *ctrl_key,
					  const char *hashes, const char *dhgroups);
/*
 * Host hostnqn's own TLS PSK (docs/security.md): key, a configured PSK in the
 * interchange format ("NVMeTLSkey-1:01:...:" as `nvme gen-tls-key` writes it)
 * or the path of a file holding one.  On every TLS port the host is let in
 * only under identities naming its NQN made from this key (not the port's);
 * as nvmet with `nvme check-tls-key --hostnqn H --insert`.  Replaces an
 * earlier key of the host, for handshakes after it.  -EINVAL for a malformed
 * key (not logged), -EBADMSG for a bad CRC-32.
 */
GDX_API int gdx_nvmf_target_set_host_tls_key(struct gdx_nvmf_target *t, const char *hostnqn,
					     const char *key);
/* Adds namespace nsid (0: the next free one) backed by spec; block_size 512 or 4096. */
GDX_API int gdx_nvmf_target_add_ns(struct gdx_nvmf_target *t, const char *nqn, uint32_t nsid,
				   const char *spec, uint32_t block_size);
/* Adds a TCP port (traddr "0.0.0.0" listens everywhere) and exposes subsystems on it. */
GDX_API int gdx_nvmf_target_add_port(struct gdx_nvmf_target *t, uint16_t portid,
				     const char *traddr, const char *trsvcid);
/*
 * Adds a port of transport trtype: "tcp" (as above) or "rdma" (an rdma_cm
 * listener on traddr, which must belong to an RDMA device, or "0.0.0.0" for
 * every one); -EPROTONOSUPPORT for another.
 */
GDX_API int gdx_nvmf_target_add_port_tr(struct gdx_nvmf_target *t, uint16_t portid,
					const char *trtype, const char *traddr,
					const char *trsvcid);
GDX_API int gdx_nvmf_target_link(struct gdx_nvmf_target *t, uint16_t portid, const char *nqn);
/*
 * TLS 1.3 on TCP port portid, the NVMe/TCP secure channel: PSKs derived from
 * the key of the host the identity names (v0 "NVMe0R01 <hostnqn> <subnqn>" or
 * v1 with the PSK digest; gdx_nvmf_target_set_host_tls_key), else from key, the
 * port's default for hosts without their own: a configured PSK in the
 * interchange format ("NVMeTLSkey-1:01:...:" as `nvme gen-tls-key` writes it)
 * or the path of a file holding one; NULL: none, only hosts with a key of
 * their own get in.  required: a host starting in clear is refused
 * (configfs addr_treq "required"); 0: it may ("not required").  The kernel
 * encrypts the records (kTLS); where it cannot, a relay thread per connection
 * does (knob tls.record; with tls.record=kernel such handshakes fail and say so).
 */
GDX_API int gdx_nvmf_target_port_tls(struct gdx_nvmf_target *t, uint16_t portid, const char *key,
				     int required);

/* Binds every port and starts the reactors; returns once it is listening. */
GDX_API int gdx_nvmf_target_start(struct gdx_nvmf_target *t);
/* Closes the listeners and every connection, joins the reactors. */
GDX_API void gdx_nvmf_target_stop(struct gdx_nvmf_target *t);
/* The TCP port a listener actually bound (for trsvcid "0"); -ENOENT if none. */
GDX_API int gdx_nvmf_target_bound_port(struct gdx_nvmf_target *t, uint16_t portid);

/*
 * Writes the counters as one JSON object: target totals, then per
 * controller, per queue and per namespace, and last "nvmf.target.lat": the
 * reads' stage sums and the reactors' time (knob nvmf.target.lat_stats).
 */
GDX_API int gdx_nvmf_target_stats_json(struct gdx_nvmf_target *t, FILE *f);

/*
 * The same counters in the Prometheus text format (0.0.4): target totals;
 * per namespace (labels subnqn, nsid) reads, writes, bytes, flushes, errors;
 * per controller (subnqn, hostnqn, cntlid) commands, errors, keep-alives,
 * AENs; per queue (the controller's labels and qid) commands, errors, bytes,
 * failed commands by NVMe status (status, name) and a histogram of command
 * latency (gdx_nvmf_queue_command_latency_seconds, kept while a metrics
 * endpoint runs).
 */
GDX_API int gdx_nvmf_target_metrics_text(struct gdx_nvmf_target *t, FILE *f);

/*
 * Serves gdx_nvmf_target_metrics_text over HTTP/1.1 (GET /metrics) on
 * traddr:trsvcid ("0": any free port; gdx_nvmf_metrics_port says which) from
 * a thread of its own, one client at a time, each allowed 2 s to send its
 * request and to take the answer.  Stop it before destroying the target.
 */
struct gdx_nvmf_metrics;
GDX_API int gdx_nvmf_metrics_start(struct gdx_nvmf_target *t, const char *traddr,
				   const char *trsvcid, struct gdx_nvmf_metrics **out);
GDX_API int gdx_nvmf_metrics_port(const struct gdx_nvmf_metrics *m);
GDX_API void gdx_nvmf_metrics_stop(struct gdx_nvmf_metrics *m);

/* ==== end of target ======================================================== */

/* ======================================================================== */
/* ==== host (src/nvmf/host) ============================================== */
/* ======================================================================== */

/*
 * A controller is one admin queue plus N I/O queues, each its own TCP
 * connection.  It keeps itself alive (Keep Alive every KATO/2), notices a lost
 * connection or a restarted target, reconnects with backoff and resubmits the
 * I/O that was in flight; an I/O either completes once with its real status
 * or fails with a clear code (-ETIMEDOUT, -ECANCELED, GDX_EDISCONNECTED,
 * GDX_EPROTO, GDX_E_NVME(status)), never twice and never silently.  A Connect
 * the target refuses returns its status too (GDX_E_NVME(0x182): no such
 * subsystem, GDX_E_NVME(0x184): host not allowed), not an errno.
 */
struct gdx_nvmf_ctrl;

#define GDX_NVMF_DISCOVERY_NQN "nqn.2014-08.org.nvmexpress.discovery"

struct gdx_nvmf_host_opts {
	size_t struct_size;		/* sizeof(struct gdx_nvmf_host_opts) */
	const char *hostnqn;		/* NULL: /etc/nvme/hostnqn, else one made from hostid */
	struct gdx_device *dev;		/* device reads land in / writes come from; may be NULL */
	unsigned nr_io_queues;		/* 0: knob nvmf.host.queues (0 there: CPUs of dev's node) */
	unsigned queue_depth;		/* 0: knob nvmf.host.queue_depth; clamped to MQES/MAXCMD */
	unsigned kato_ms;		/* keep-alive timeout; 0: knob nvmf.host.kato_ms */
	unsigned io_timeout_ms;		/* per command; 0: knob nvmf.host.io_timeout_ms */
	unsigned reconnect_delay_ms;	/* first retry delay, doubled up to 8x; 0: knob */
	unsigned ctrl_loss_tmo_ms;	/* give up reconnecting after this; 0: knob */
	unsigned max_retries;		/* resubmissions of one I/O after connection loss */
	int hdr_digest;			/* -1: knob nvmf.host.hdr_digest */
	int data_digest;		/* -1: knob nvmf.host.data_digest */
	unsigned connect_timeout_ms;	/* TCP connect + ICResp + Connect; 0: knob */
	/*
	 * "tcp" (NULL) or "rdma": NVMe/RDMA, one RC queue pair per queue by
	 * rdma_cm; the controller moves the data by RDMA into and out of the
	 * caller's host, pinned or device buffers (digests do not apply); device
	 * memory the NIC cannot register bounces through registered host memory
	 * (gdx_nvmf_ctrl_stats_json says whether and why).
	 */
	const char *transport;
	/*
	 * DH-HMAC-CHAP in-band authentication (docs/security.md): the host's
	 * secret, "DHHC-1:hh:<base64>:" as `nvme gen-dhchap-key` writes it, used
	 * when the controller asks for authentication; and the controller's, to
	 * make the controller prove itself too (bidirectional; needs the host's).
	 * Copied at connect; NULL: none.
	 */
	const char *dhchap_secret;
	const char *dhchap_ctrl_secret;
	/*
	 * TLS 1.3 (the NVMe/TCP secure channel) with a PSK derived from tls_key: a
	 * configured PSK in the interchange format ("NVMeTLSkey-1:01:...:", as
	 * `nvme gen-tls-key` writes it) or the path of a file holding one; NULL:
	 * clear.  The identity offered is "NVMe0R0h <hostnqn> <subnqn>", the one
	 * the Linux host looks up in its keyring, or with tls_identity_v1 the v1
	 * identity that ends in the PSK's digest.  The kernel encrypts the records
	 * (kTLS): without it the connect fails with -EOPNOTSUPP, never goes on in
	 * clear; a key the target does not hold fails with -EKEYREJECTED.
	 */
	const char *tls_key;
	int tls_identity_v1;
};
GDX_API void gdx_nvmf_host_opts_init(struct gdx_nvmf_host_opts *o, size_t struct_size);

/* ---- discovery ---------------------------------------------------------- */

struct gdx_nvmf_discovery_entry {
	uint8_t trtype;			/* 3 = TCP */
	uint8_t adrfam;			/* 1 = IPv4, 2 = IPv6 */
	uint8_t subtype;		/* 2 = NVM subsystem, 3 = this discovery controller */
	uint8_t treq;
	uint16_t portid;
	uint16_t cntlid;
	uint16_t asqsz;
	uint8_t sectype;
	char trsvcid[33];
	char traddr[257];
	char subnqn[257];
};

struct gdx_nvmf_discovery_log {
	uint64_t genctr;
	uint64_t numrec;
	struct gdx_nvmf_discovery_entry entries[];
};

/* Connects to the discovery controller at addr:svc and reads its log; free with free(). */
GDX_API int gdx_nvmf_discover(const char *addr, const char *svc,
			      const struct gdx_nvmf_host_opts *o, struct gdx_nvmf_discovery_log **out);

/* ---- controllers -------------------------------------------------------- */

GDX_API int gdx_nvmf_connect(const char *addr, const char *svc, const char *subnqn,
			     const struct gdx_nvmf_host_opts *o, struct gdx_nvmf_ctrl **out);
/* Fails what is still pending, shuts the controller down (CC.SHN), closes every queue. */
GDX_API int gdx_nvmf_disconnect(struct gdx_nvmf_ctrl *c);

enum gdx_nvmf_ctrl_state {
	GDX_NVMF_LIVE = 0,
	GDX_NVMF_RECONNECTING = 1,
	GDX_NVMF_FAILED = 2,		/* ctrl_loss_tmo passed or a reconnect was refused (DNR) */
};
GDX_API enum gdx_nvmf_ctrl_state gdx_nvmf_ctrl_state(struct gdx_nvmf_ctrl *c);

struct gdx_nvmf_ctrl_info {
	uint16_t vid;
	uint16_t cntlid;
	char sn[21];
	char mn[41];
	char fr[9];
	char subnqn[257];
	uint32_t ver;			/* VS: major << 16 | minor << 8 | tertiary */
	uint32_t nn;
	uint64_t cap;
	uint32_t max_xfer;		/* largest single command in bytes (MDTS and our cap) */
	uint16_t oncs;
	uint8_t vwc;
	uint16_t kas;
	uint16_t maxcmd;
	uint32_t ioccsz;
	uint32_t sgls;
	unsigned nr_io_queues;		/* what was connected */
	unsigned queue_depth;
	unsigned kato_ms;
	int hdr_digest;
	int data_digest;
	unsigned reconnects;		/* successful reconnects since connect */
};
GDX_API int gdx_nvmf_ctrl_info(struct gdx_nvmf_ctrl *c, struct gdx_nvmf_ctrl_info *info);

/* Raw Identify: cns 1 = controller, 0 = namespace nsid, 2 = active NSIDs after nsid. */
GDX_API int gdx_nvmf_identify(struct gdx_nvmf_ctrl *c, uint8_t cns, uint32_t nsid,
			      void *buf4096);

struct gdx_nvmf_ns_info {
	uint32_t nsid;
	uint64_t nsze;			/* in blocks */
	uint64_t ncap;
	uint64_t nuse;
	uint32_t block_size;
	uint8_t nmic;
	uint8_t nguid[16];
	uint8_t eui64[8];
};
GDX_API int gdx_nvmf_identify_ns(struct gdx_nvmf_ctrl *c, uint32_t nsid,
				 struct gdx_nvmf_ns_info *info);
/* Active NSIDs in increasing order; returns how many were written (at most max). */
GDX_API int gdx_nvmf_ns_list(struct gdx_nvmf_ctrl *c, uint32_t *nsids, unsigned max);

/* ---- I/O ------------------------------------------------------------------ */

enum gdx_nvmf_op {
	GDX_NVMF_OP_READ = 0,
	GDX_NVMF_OP_WRITE = 1,
	GDX_NVMF_OP_FLUSH = 2,
	GDX_NVMF_OP_WRITE_ZEROES = 3,
	GDX_NVMF_OP_DEALLOCATE = 4,
};

/*
 * One I/O.  offset and len are bytes and must be multiples of the namespace's
 * block size; buf may be host, pinned, managed or device memory (over TCP
 * device memory moves through a pinned bounce ring: path "bounce", host memory
 * is received into straight from the socket: path "direct"; over RDMA the NIC
 * registers every kind, device memory included: path "direct", or where it cannot
 * register the device's memory, that bounces: path "bounce").  A request larger than
 * the controller's max_xfer (a bounced one over RDMA: bounce_chunk) is split into
 * several commands spread over the queues.
 */
struct gdx_nvmf_io {
	enum gdx_nvmf_op op;
	uint32_t nsid;
	uint64_t offset;
	uint64_t len;
	void *buf;
	/* results */
	int result;			/* 0, or a negative code */
	uint16_t nvme_status;		/* SCT << 8 | SC of the first failed command, else 0 */
	const char *path;		/* "direct", "bounce" or "none" (no data) */
	uint64_t _priv[2];		/* owned by the library while the I/O is in flight */
};

GDX_API int gdx_nvmf_read(struct gdx_nvmf_ctrl *c, uint32_t nsid, void *buf, uint64_t len,
			  uint64_t offset);
GDX_API int gdx_nvmf_write(struct gdx_nvmf_ctrl *c, uint32_t nsid, const void *buf,
			   uint64_t len, uint64_t offset);
GDX_API int gdx_nvmf_flush(struct gdx_nvmf_ctrl *c, uint32_t nsid);
GDX_API int gdx_nvmf_write_zeroes(struct gdx_nvmf_ctrl *c, uint32_t nsid, uint64_t offset,
				  uint64_t len);
GDX_API int gdx_nvmf_deallocate(struct gdx_nvmf_ctrl *c, uint32_t nsid, uint64_t offset,
				uint64_t len);

/* Submits n I/Os at once and waits for all; returns 0 or the first failure's code. */
GDX_API int gdx_nvmf_submit(struct gdx_nvmf_ctrl *c, struct gdx_nvmf_io *ios, unsigned n);

/*
 * Submits one I/O and returns at once (or with an error, and then cb never
 * runs); cb(io, arg) runs exactly once when it has completed (io->result says
 * how), on a library thread that must not block.  cb may submit again, which
 * keeps a fixed depth in flight; beyond the queues' room commands wait their turn.
 */
typedef void (*gdx_nvmf_io_cb)(struct gdx_nvmf_io *io, void *arg);
GDX_API int gdx_nvmf_submit_cb(struct gdx_nvmf_ctrl *c, struct gdx_nvmf_io *io,
			       gdx_nvmf_io_cb cb, void *arg);

/*
 * Stream-ordered: the I/Os start once the work enqueued on s before this call
 * is done, and work enqueued on s afterwards waits for them.  Results are in
 * ios[] once the stream has passed that point (gdx_stream_synchronize).  The
 * stream waits on a word of pinned memory (gdx_stream_wait_value32), never in
 * a host function.  Device buffers move through pinned staging whose copies
 * run on s itself (len and buf are read at the call).  Synchronize s before
 * disconnecting.
 */
GDX_API int gdx_nvmf_submit_async(struct gdx_nvmf_ctrl *c, struct gdx_nvmf_io *ios, unsigned n,
				  struct gdx_stream *s);

/*
 * Asks the controller to abort an in-flight I/O (NVMe Abort).  0: the
 * abort was sent and the I/O ends with -ECANCELED unless it completed first;
 * -ENOENT: nothing of it is in flight.
 */
GDX_API int gdx_nvmf_abort(struct gdx_nvmf_ctrl *c, struct gdx_nvmf_io *io);

/*
 * Counters of the controller and its queues as one JSON object; over RDMA with
 * a device, rdma_nic, rdma_device_reg (whether the NIC registers its memory)
 * and rdma_why (each way's answer where it does not).
 */
GDX_API int gdx_nvmf_ctrl_stats_json(struct gdx_nvmf_ctrl *c, char *buf, size_t len);

/* ==== end of host ======================================================== */

#ifdef __cplusplus
}
#endif
#endif
