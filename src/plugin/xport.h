/* SPDX-License-Identifier: MIT */
#ifndef GDX_SRC_PLUGIN_XPORT_H
#define GDX_SRC_PLUGIN_XPORT_H

/*
 * The transport ops table.  The front end (gdx_xport_*) parses addresses,
 * checks arguments, owns completion queues and the registration cache, works
 * out each buffer's memory kind and path, and applies require_direct; a
 * backend moves bytes.  Backends complete requests with gdx_xport_complete()
 * from any thread, exactly once per request (unsignaled successes included:
 * the front end drops those).
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/xport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A local buffer as the front end resolved it. */
struct gdx_xport_buf {
	void *p;
	size_t len;
	enum gdx_mem_kind kind;
	struct gdx_device *dev;		/* owning device for pinned/device memory, else NULL */
	void *reg;			/* the backend's registration covering it (mr_reg) */
	enum gdx_xport_path path;	/* the path the backend said it gives this memory */
};

/* One posted request or receive; the backend owns it until it completes it. */
struct gdx_xport_req {
	uint64_t wr_id;
	enum gdx_xport_op op;
	unsigned flags;			/* GDX_XPORT_UNSIGNALED, GDX_XPORT_FENCE */
	unsigned cqe_flags;		/* backend: GDX_XPORT_CQE_* its completion reports */
	struct gdx_xport_buf buf;
	uint64_t raddr, key;
	uint32_t imm;
	struct gdx_xport_ep *ep;		/* where it completes */
	struct gdx_xport_ep *owner;	/* front end: a hardware SRQ's anchor, else NULL */
	void *fe;			/* front end: the cache entry to release */
	void *be[4];			/* scratch for the backend */
};

/* What a backend learns about memory it registers, and tells back. */
struct gdx_xport_region {
	void *p;
	size_t len;
	enum gdx_mem_kind kind;
	struct gdx_device *dev;
	unsigned access;		/* GDX_XPORT_ACCESS_*; 0: local use only */
	const struct gdx_xport_ep *domain;	/* keys work only for this endpoint's peer */
	/* filled by the backend */
	uint64_t key;
	uint64_t addr;			/* the address the peer names p by */
	enum gdx_xport_path path;
	const char *why;		/* static text */
	void *priv;
};

struct gdx_xport_ops {
	const char *scheme;		/* "tcp" */

	/* hostport is the address after "scheme://"; bound gets the real address. */
	int (*listen)(struct gdx_xport_listener *l, const char *hostport, void **priv,
		      char *bound, size_t bound_len);
	int (*listener_fd)(void *lpriv);
	/* Fills ep's backend state; -ETIMEDOUT after timeout_ms. */
	int (*accept)(void *lpriv, struct gdx_xport_ep *ep, int timeout_ms, void **priv);
	void (*listener_close)(void *lpriv);
	int (*connect)(struct gdx_xport_ep *ep, const char *hostport, void **priv);
	/* Fails every outstanding request with GDX_EDISCONNECTED; idempotent. */
	void (*disconnect)(void *priv);
	/* After disconnect; every request has been completed. */
	void (*destroy)(void *priv);

	int (*mr_reg)(void *priv, struct gdx_xport_region *r);
	void (*mr_dereg)(void *priv, struct gdx_xport_region *r);
	int (*post)(void *priv, struct gdx_xport_req *req);

	/*
	 * Shared receive queues (optional): receives were posted to the endpoint's
	 * SRQ; hand waiting messages to them (gdx_xport_srq_take) and let a stalled
	 * sender go on.
	 */
	void (*srq_kick)(void *priv);
	/*
	 * Shared receive queues in the hardware (optional, with srq_kick): made
	 * on first use through gdx_xport_srq_priv.  anchor is an endpoint of the
	 * queue's own (never connected) that owns the receives handed to the
	 * hardware: gdx_xport_srq_take gives them with their registration made
	 * through anchor (mr_reg on the priv srq_open returns), so they outlive
	 * any member.  The backend sets req->ep to the member a receive arrived
	 * on before completing it.  srq_close: no member is left; drop what is
	 * posted (gdx_xport_req_drop).  srq_free: after the anchor's registrations.
	 */
	int (*srq_open)(struct gdx_xport_ep *anchor, void *arg, unsigned depth, void **priv);
	void (*srq_close)(void *priv);
	void (*srq_free)(void *priv);

	/*
	 * Optional, for backends whose completions must be reaped by polling, or
	 * that leave work for the poster's next look at its CQ (tcp: small
	 * requests held for the next train).  Called by every cq_poll and cq_wait.
	 */
	int (*progress)(void *priv);
	int (*arm)(void *priv);		/* 1: completions ready, 0: armed */
	int (*event_fd)(void *priv);	/* readable once armed and something completed */
	/*
	 * Optional: a caller of gdx_xport_cq_wait is about to sleep in the CQ's
	 * epoll set (sleeping 1), has woken (0), and returns after having slept
	 * (-1), in that thread; or a caller of gdx_xport_cq_poll found the CQ
	 * empty (2).  tcp lets the sleeper, and the poller, read the answers to
	 * its requests and the peer's messages from the socket itself, so its
	 * receive thread need not wake to hand them over.
	 */
	void (*wait)(void *priv, int sleeping);
	/*
	 * Optional, with srq_kick: memory of dev (not pinned host memory) is in
	 * the endpoint's shared receive queue; set up what receiving into it
	 * needs, on this thread (the poster's, or the one that accepts or
	 * connects the endpoint), so that the thread that takes the receive need
	 * not.  Called once per endpoint and device, before the endpoint can take
	 * such a receive (gdx_xport_srq_take holds one back until then).
	 */
	void (*srq_device)(void *priv, struct gdx_device *dev);
};

/* Queues req's completion on its endpoint's CQ; frees nothing the backend owns. */
void gdx_xport_complete(struct gdx_xport_req *req, int status, uint64_t len);
/* The same, for receives carrying immediate data. */
void gdx_xport_complete_imm(struct gdx_xport_req *req, int status, uint64_t len,
			    enum gdx_xport_op op, uint32_t imm);
/*
 * Batches wake-ups for a progress thread: once this thread has called defer,
 * the completions it queues wake a CQ's waiter only at its next flush, once
 * per CQ however many there were.  The thread must flush before it blocks
 * (and before it reports an endpoint flushed).
 */
void gdx_xport_complete_defer(void);
void gdx_xport_complete_flush(void);
/*
 * The oldest receive of ep's shared receive queue, as a request of ep; -EAGAIN
 * when none is waiting.  A receive whose buffer cannot be used completes with
 * the error at once and the next is taken.
 */
int gdx_xport_srq_take(struct gdx_xport_ep *ep, struct gdx_xport_req **out);
/*
 * The backend state of ep's (hardware) shared receive queue, made by
 * ops->srq_open(anchor, arg, depth, &priv) on first use; -EINVAL when the
 * queue serves another backend.
 */
int gdx_xport_srq_priv(struct gdx_xport_ep *ep, void *arg, void **out);
/* Releases a request without a completion (a queue destroyed with it posted). */
void gdx_xport_req_drop(struct gdx_xport_req *req);
/* Receives waiting in ep's shared receive queue. */
unsigned gdx_xport_srq_waiting(const struct gdx_xport_ep *ep);
/* Marks ep disconnected (posts then fail with GDX_EDISCONNECTED). */
void gdx_xport_ep_set_disconnected(struct gdx_xport_ep *ep);
const struct gdx_xport_opts *gdx_xport_ep_opts(const struct gdx_xport_ep *ep);

#ifdef __cplusplus
}
#endif
#endif
