/* SPDX-License-Identifier: MIT */
#ifndef GDX_XPORT_INTERNAL_H
#define GDX_XPORT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "plugin/xport.h"

#include "mem/regcache.h"

struct gdx_xport_mr;

struct gdx_xport_ep {
	const struct gdx_xport_ops *ops;
	void *priv;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *cq_next;	/* the CQ's list of endpoints */
	struct gdx_regcache *rc;
	struct gdx_xport_opts opts;
	int require_direct;
	_Atomic int connected;
	_Atomic long inflight;		/* requests posted and not yet completed */
	_Atomic unsigned sq_used, rq_used;	/* against opts.sq_depth / rq_depth */
	pthread_mutex_t lock;		/* mrs, inflight wait */
	pthread_cond_t idle;
	struct gdx_xport_mr *mrs;	/* live explicit registrations */
	struct gdx_xport_srq *srq;	/* opts.srq, once joined */
	struct gdx_xport_ep *srq_next;
	_Atomic int srq_ready;		/* joined, set up for the queue's devices (srq_device) */
};

struct gdx_xport_listener {
	const struct gdx_xport_ops *ops;
	void *priv;
	struct gdx_xport_opts opts;
	char addr[128];
};

extern const struct gdx_xport_ops gdx_xport_loop_ops;
extern const struct gdx_xport_ops gdx_xport_tcp_ops;
extern const struct gdx_xport_ops gdx_xport_verbs_ops;

/*
 * Key table for backends that serve one-sided access in software (tcp, loop):
 * a process-wide table of registered regions, looked up by key with bounds
 * and access checked.  A successful lookup holds the region until put.
 */
struct gdx_xport_rkey;
int gdx_xport_rkey_add(const struct gdx_xport_region *r, uint64_t *key);
/* Waits until no lookup holds the region, then forgets the key. */
void gdx_xport_rkey_del(uint64_t key);
/*
 * -> 0 with *out filled, or GDX_EREMOTE (unknown key, another endpoint's key,
 * out of bounds, no access).  domain: the endpoint whose peer asks.
 */
int gdx_xport_rkey_get(const struct gdx_xport_ep *domain, uint64_t key, uint64_t addr,
		       uint64_t len, unsigned access, struct gdx_xport_rkey **out, void **p,
		       struct gdx_xport_region *r);
void gdx_xport_rkey_put(struct gdx_xport_rkey *k);

/* Internal request flag: a receive taken from a shared receive queue. */
#define F_SRQ 0x100u

/* xport.c */
int gdx_xport_ep_alloc(const struct gdx_xport_ops *ops, const struct gdx_xport_opts *o,
		       struct gdx_xport_cq *cq, struct gdx_xport_ep **out);
void gdx_xport_ep_free(struct gdx_xport_ep *ep);
/* Finds the memory behind req's buffer: kind, registration, path; applies require_direct. */
int gdx_xport_req_resolve(struct gdx_xport_req *req, void *buf, size_t len);

/* cq.c: a completion queued on cq (-ENOMEM: lost, and logged); waiters woken as armed. */
int gdx_xport_cq_push(struct gdx_xport_cq *cq, const struct gdx_xport_cqe *e);
/* cq.c: completions queued on cq and not polled yet. */
size_t gdx_xport_cq_count(struct gdx_xport_cq *cq);
/* An endpoint joins or leaves the CQ's progress and its epoll set. */
int gdx_xport_cq_attach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep);
void gdx_xport_cq_detach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep);

/* srq.c: a member joins (set up for the queue's devices) or leaves ep->opts.srq. */
int gdx_xport_srq_join(struct gdx_xport_ep *ep);
void gdx_xport_srq_leave(struct gdx_xport_ep *ep);
/* A receive taken from q completed: room for another post. */
void gdx_xport_srq_done(struct gdx_xport_srq *q);

/* Parses "host:port" (host may be [v6]); port may be 0. */
int gdx_xport_split_hostport(const char *hp, char *host, size_t hlen, char *port, size_t plen);

struct addrinfo;
/*
 * Resolves "host:port" ("*" = any address) to stream-socket addresses of the given
 * family (AF_UNSPEC for any); passive asks for addresses to bind to.  Free *res
 * with freeaddrinfo().
 */
int gdx_xport_resolve(const char *hostport, int family, int passive, struct addrinfo **res);

#endif
