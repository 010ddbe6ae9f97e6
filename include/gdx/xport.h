/* SPDX-License-Identifier: MIT */
#ifndef GDX_XPORT_H
#define GDX_XPORT_H

/*
 * Transport with RDMA semantics: endpoints connected by address string, send
 * and receive with posted receive buffers, one-sided RDMA read and write (with
 * immediate data) against regions the peer registered, and completion queues.
 *
 *   rdma://host:port   verbs (rdma-core), RC queue pairs set up through rdma_cm
 *   tcp://host:port    the same semantics over a TCP socket; the peer's progress
 *                      engine serves one-sided reads and writes
 *   loop://name        in-process, for tests
 *
 * Buffers may be any memory kind (host, pinned, device).  A buffer passed to a
 * post call is found in the endpoint's registration cache, or registered on
 * the fly and cached; gdx_xport_mr_reg registers a region explicitly and hands
 * back the key the peer uses for one-sided access.  Every completion says
 * which path the data took (direct into the target memory, through a pinned
 * bounce buffer, or emulated in-process); with require_direct set, a transfer
 * that would not be direct fails with GDX_ENOTDIRECT.
 *
 * Ordering (docs/xport.md has the full rules): requests posted on one endpoint
 * execute at the peer in post order and complete locally in post order;
 * receives are consumed in post order; data written before a send or a write
 * with immediate is visible at the peer when that message's receive completes.
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>
#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdx_xport_listener;
struct gdx_xport_ep;
struct gdx_xport_cq;
struct gdx_xport_mr;
struct gdx_xport_srq;

struct gdx_xport_opts {
	size_t struct_size;	/* sizeof(struct gdx_xport_opts) */
	unsigned sq_depth;	/* outstanding send-side requests; default 256 */
	unsigned rq_depth;	/* outstanding receives; default 256 */
	int require_direct;	/* 1, 0, or -1: the require_direct knob (default) */
	int timeout_ms;		/* connect/accept handshake; default 10000 */
	/*
	 * tcp and loop: bytes of sends that arrived before a receive was posted
	 * that the receiver keeps in memory; beyond it the sender stalls until a
	 * receive is posted (as an RC queue pair retries on receiver-not-ready).
	 */
	size_t max_unexpected;	/* default 64 MiB */
	/*
	 * The GPU the endpoint mostly moves data for: verbs binds to the RDMA NIC
	 * nearest it on PCIe when the address leaves the choice open.  NULL: none.
	 */
	struct gdx_device *dev;
	/*
	 * Take receives from this shared receive queue instead of the endpoint's
	 * own (gdx_xport_post_recv then fails with -EINVAL).  NULL: none.
	 */
	struct gdx_xport_srq *srq;
	/*
	 * tcp: TLS 1.3 with a pre-shared key on the connection, before anything
	 * else crosses it; the record layer is the kernel's (kTLS), or where the
	 * kernel has none a relay thread's (knob tls.record; with tls.record=kernel
	 * listen accepts nothing and connect fails with -EOPNOTSUPP), never clear
	 * text.  tls_key is a key in
	 * the NVMe interchange format ("NVMeTLSkey-1:0H:<base64>:", as
	 * `nvme gen-tls-key` writes it) or the path of a file holding one.  Both
	 * sides derive the PSK from it and tls_identity (HKDF, the label
	 * "gdx-xport": one key yields a PSK per identity); a listener refuses any
	 * other identity and any other key.  tls_identity: printable ASCII,
	 * NULL: "gdx".  Both strings are read during gdx_xport_listen and
	 * gdx_xport_connect only.  Other backends fail with -EOPNOTSUPP when set.
	 */
	const char *tls_key;
	const char *tls_identity;
};
GDX_API void gdx_xport_opts_init(struct gdx_xport_opts *o, size_t struct_size);

/* ---- completion queues ------------------------------------------------ */

enum gdx_xport_op {
	GDX_XPORT_OP_SEND = 1,
	GDX_XPORT_OP_RECV,		/* a send arrived into a posted receive */
	GDX_XPORT_OP_READ,
	GDX_XPORT_OP_WRITE,
	GDX_XPORT_OP_WRITE_IMM,
	GDX_XPORT_OP_RECV_WRITE_IMM,	/* a write with immediate consumed a receive */
};
GDX_API const char *gdx_xport_op_name(enum gdx_xport_op op);

enum gdx_xport_path {
	GDX_XPORT_PATH_NONE = 0,	/* no local data (zero length, or failed early) */
	GDX_XPORT_PATH_DIRECT,		/* placed straight into / sent straight from the buffer */
	GDX_XPORT_PATH_BOUNCE,		/* staged through pinned host memory and a device copy */
	GDX_XPORT_PATH_EMULATED,	/* the in-process loop backend copied it */
};
GDX_API const char *gdx_xport_path_name(enum gdx_xport_path path);

#define GDX_XPORT_CQE_IMM 0x1u	/* imm holds immediate data */
/*
 * A receive's message arrived before any receive was posted for it (tcp, loop):
 * it waited in a host buffer of the backend and was copied again into this one
 * (path: bounce).  Posting receives ahead of the peer's sends avoids that copy,
 * which into device memory is a synchronous one.
 */
#define GDX_XPORT_CQE_UNEXPECTED 0x2u

struct gdx_xport_cqe {
	uint64_t wr_id;			/* as posted */
	struct gdx_xport_ep *ep;
	int status;			/* 0, or a negative code (GDX_EREMOTE, GDX_EDISCONNECTED, ...) */
	enum gdx_xport_op op;
	enum gdx_xport_path path;	/* of the local buffer */
	unsigned flags;			/* GDX_XPORT_CQE_* */
	uint32_t imm;
	uint64_t len;			/* bytes received (receives) or moved */
};

GDX_API int gdx_xport_cq_create(struct gdx_xport_cq **out);
/* -EBUSY while endpoints still use it. */
GDX_API int gdx_xport_cq_destroy(struct gdx_xport_cq *cq);
/* Takes up to n completions; returns how many (0 when none) or a negative code. */
GDX_API int gdx_xport_cq_poll(struct gdx_xport_cq *cq, struct gdx_xport_cqe *cqe, unsigned n);
/* Blocks until a completion is ready (1), the timeout passes (0), or an error. -1: forever. */
GDX_API int gdx_xport_cq_wait(struct gdx_xport_cq *cq, int timeout_ms);
/*
 * A file descriptor for epoll/poll, readable when gdx_xport_cq_poll may return
 * completions.  Before waiting on it, call gdx_xport_cq_arm: it returns 1 when
 * completions are already waiting (poll instead of sleeping), 0 once armed.
 */
GDX_API int gdx_xport_cq_fd(struct gdx_xport_cq *cq);
GDX_API int gdx_xport_cq_arm(struct gdx_xport_cq *cq);

/* ---- connections ------------------------------------------------------ */

/*
 * addr: "tcp://127.0.0.1:0", "rdma://10.0.2.15:7471", "loop://name".  Port 0
 * picks a free port; gdx_xport_listener_addr tells which.
 */
GDX_API int gdx_xport_listen(const char *addr, const struct gdx_xport_opts *o,
			     struct gdx_xport_listener **out);
GDX_API const char *gdx_xport_listener_addr(const struct gdx_xport_listener *l);
/*
 * Readable when gdx_xport_accept has something to do: a connection waiting,
 * or (tcp) bytes of a handshake under way, which may not be whole yet.
 */
GDX_API int gdx_xport_listener_fd(const struct gdx_xport_listener *l);
/*
 * Accepts one connection; -ETIMEDOUT after timeout_ms (-1: forever).  The
 * handshakes of connections that come meanwhile run side by side (tcp): a
 * peer that connects and says nothing costs no other peer any time, and is
 * dropped after opts.timeout_ms; one that fails its handshake is dropped
 * and the accept goes on.
 */
GDX_API int gdx_xport_accept(struct gdx_xport_listener *l, struct gdx_xport_cq *cq,
			     int timeout_ms, struct gdx_xport_ep **out);
GDX_API void gdx_xport_listener_close(struct gdx_xport_listener *l);

/* Completions of the endpoint's requests and receives go to cq. */
GDX_API int gdx_xport_connect(const char *addr, const struct gdx_xport_opts *o,
			      struct gdx_xport_cq *cq, struct gdx_xport_ep **out);
/*
 * Closes the connection; every request and receive still posted completes with
 * GDX_EDISCONNECTED, and later posts fail with it.  The peer sees the same.
 */
GDX_API int gdx_xport_disconnect(struct gdx_xport_ep *ep);
/* Disconnects if needed and frees the endpoint once its completions are queued. */
GDX_API void gdx_xport_ep_destroy(struct gdx_xport_ep *ep);
GDX_API const char *gdx_xport_ep_backend(const struct gdx_xport_ep *ep);	/* "tcp" */
/* 1 while connected, 0 once disconnected by either side. */
GDX_API int gdx_xport_ep_connected(const struct gdx_xport_ep *ep);

/* ---- memory ------------------------------------------------------------ */

#define GDX_XPORT_ACCESS_REMOTE_READ 0x1u
#define GDX_XPORT_ACCESS_REMOTE_WRITE 0x2u

/*
 * Registers [p, p+len) of any memory kind on the endpoint's domain and
 * returns a handle whose key and address the peer passes to read/write.
 * Registrations live in the endpoint's registration cache; registering a
 * range already covered reuses the entry.  Device memory without a direct
 * path on verbs (no dma-buf, no nvidia_peermem) cannot be exposed for
 * one-sided access: -EOPNOTSUPP.
 */
GDX_API int gdx_xport_mr_reg(struct gdx_xport_ep *ep, void *p, size_t len, unsigned access,
			     struct gdx_xport_mr **out);
GDX_API uint64_t gdx_xport_mr_key(const struct gdx_xport_mr *mr);
/* The remote address of p as the peer names it. */
GDX_API uint64_t gdx_xport_mr_addr(const struct gdx_xport_mr *mr);
/* The path transfers into/out of this region take, and why. */
GDX_API enum gdx_xport_path gdx_xport_mr_path(const struct gdx_xport_mr *mr, const char **why);
/* The key stops working once in-flight requests that use it finish. */
GDX_API int gdx_xport_mr_dereg(struct gdx_xport_mr *mr);

/* ---- shared receive queues --------------------------------------------- */

/*
 * Receives posted once and consumed by messages arriving on any endpoint that
 * joined the queue (opts.srq): a server with many connections keeps one pool
 * of receive buffers instead of one per connection.  A receive completes on the
 * CQ of the endpoint its message arrived on (cqe.ep says which).  All endpoints
 * of a queue use one backend (on verbs, one device; they then share one
 * protection domain, so their keys work for each other's peers).  Receives
 * stay queued when an endpoint disconnects.
 */
GDX_API int gdx_xport_srq_create(unsigned depth, struct gdx_xport_srq **out);
/* -EAGAIN while depth receives are posted and not completed. */
GDX_API int gdx_xport_srq_post_recv(struct gdx_xport_srq *srq, void *buf, size_t len,
				    uint64_t wr_id);
/* -EBUSY while endpoints use it; receives still queued are dropped. */
GDX_API int gdx_xport_srq_destroy(struct gdx_xport_srq *srq);

/* ---- requests ---------------------------------------------------------- */

/* No completion on success (errors still complete); the verbs idea of selective signalling. */
#define GDX_XPORT_UNSIGNALED 0x1u
/* Do not start this request before every earlier read on the endpoint has completed. */
#define GDX_XPORT_FENCE 0x2u

/*
 * Posts fail with -EAGAIN while sq_depth requests (or rq_depth receives) are
 * outstanding, and with GDX_EDISCONNECTED once the connection is gone.
 */
GDX_API int gdx_xport_post_send(struct gdx_xport_ep *ep, const void *buf, size_t len,
				uint64_t wr_id, unsigned flags);
GDX_API int gdx_xport_post_recv(struct gdx_xport_ep *ep, void *buf, size_t len, uint64_t wr_id);
GDX_API int gdx_xport_post_read(struct gdx_xport_ep *ep, void *buf, size_t len,
				uint64_t raddr, uint64_t key, uint64_t wr_id, unsigned flags);
GDX_API int gdx_xport_post_write(struct gdx_xport_ep *ep, const void *buf, size_t len,
				 uint64_t raddr, uint64_t key, uint64_t wr_id, unsigned flags);
/* The peer's oldest posted receive completes with op RECV_WRITE_IMM, len and imm. */
GDX_API int gdx_xport_post_write_imm(struct gdx_xport_ep *ep, const void *buf, size_t len,
				     uint64_t raddr, uint64_t key, uint32_t imm,
				     uint64_t wr_id, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
