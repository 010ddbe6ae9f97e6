/* SPDX-License-Identifier: MIT */
/*
 * Transport front end, on the application's threads: address parsing and
 * backend choice, endpoint life cycle, the registration cache, buffer
 * resolution (memory kind, path, require_direct), argument checks and posting;
 * a request's completion, on whichever thread the backend completes it.
 * Backends only move bytes.  Completion queues are cq.c's, shared receive
 * queues srq.c's.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "xport/xport.h"

#define SUBSYS "xport"

static const struct gdx_xport_ops *const backends[] = {
	&gdx_xport_verbs_ops,
	&gdx_xport_tcp_ops,
	&gdx_xport_loop_ops,
};

GDX_API void gdx_xport_opts_init(struct gdx_xport_opts *o, size_t struct_size)
{
	struct gdx_xport_opts d = {
		.struct_size = sizeof(d),
		.sq_depth = 256,
		.rq_depth = 256,
		.require_direct = -1,
		.timeout_ms = 10000,
		.max_unexpected = 64u << 20,
	};

	if (!o)
		return;
	memset(o, 0, struct_size);
	memcpy(o, &d, GDX_MIN(struct_size, sizeof(d)));
	o->struct_size = struct_size;
}

static void opts_resolve(const struct gdx_xport_opts *in, struct gdx_xport_opts *out)
{
	gdx_xport_opts_init(out, sizeof(*out));
	if (in)
		memcpy(out, in, GDX_MIN(in->struct_size, sizeof(*out)));
	out->struct_size = sizeof(*out);
	if (!out->sq_depth)
		out->sq_depth = 256;
	if (!out->rq_depth)
		out->rq_depth = 256;
	if (out->require_direct < 0)
		out->require_direct = gdx_cfg_bool("require_direct");
	if (!out->timeout_ms)
		out->timeout_ms = 10000;
}

GDX_API const char *gdx_xport_op_name(enum gdx_xport_op op)
{
	switch (op) {
	case GDX_XPORT_OP_SEND: return "send";
	case GDX_XPORT_OP_RECV: return "recv";
	case GDX_XPORT_OP_READ: return "read";
	case GDX_XPORT_OP_WRITE: return "write";
	case GDX_XPORT_OP_WRITE_IMM: return "write_imm";
	case GDX_XPORT_OP_RECV_WRITE_IMM: return "recv_write_imm";
	}
	return "?";
}

GDX_API const char *gdx_xport_path_name(enum gdx_xport_path path)
{
	switch (path) {
	case GDX_XPORT_PATH_NONE: return "none";
	case GDX_XPORT_PATH_DIRECT: return "direct";
	case GDX_XPORT_PATH_BOUNCE: return "bounce";
	case GDX_XPORT_PATH_EMULATED: return "emulated";
	}
	return "?";
}

/* ---- registrations ------------------------------------------------------ */

/* The payload of a registration cache entry. */
struct xreg {
	struct gdx_xport_region r;
	struct gdx_xport_ep *ep;
	int users;		/* explicit handles (gdx_xport_mr) sharing it; under ep->lock */
	int cached;		/* lives in the cache (else a one-shot for one request) */
};

struct gdx_xport_mr {
	struct gdx_xport_ep *ep;
	struct xreg *x;
	struct gdx_reg *ref;	/* the cache reference, or NULL for a one-shot */
	void *p;
	struct gdx_xport_mr *next;
};

static void reg_release(struct gdx_reg *r, void *arg)
{
	struct xreg *x = r->payload;

	(void)arg;
	x->ep->ops->mr_dereg(x->ep->priv, &x->r);
	free(x);
}

/*
 * Works out what p is and which range to register for it: a device or pinned
 * allocation whole (so later buffers inside it hit the same entry), host
 * memory by the pages the buffer touches.
 */
static void classify(struct gdx_xport_ep *ep, void *p, size_t len, struct gdx_xport_region *r,
		     int whole)
{
	struct gdx_ptr_attrs a;
	struct gdx_device *dev = gdx_device_of_ptr(p, &a);
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	(void)ep;
	memset(r, 0, sizeof(*r));
	r->p = p;
	r->len = len;
	r->kind = GDX_MEM_HOST;
	if (dev) {
		r->kind = a.kind;
		r->dev = dev;
		if (whole && a.size && a.base) {
			r->p = a.base;
			r->len = a.size;
		}
		return;
	}
	if (whole) {
		uintptr_t s = GDX_ALIGN_DOWN((uintptr_t)p, pg);
		uintptr_t e = GDX_ALIGN_UP((uintptr_t)p + len, pg);

		r->p = (void *)s;
		r->len = e - s;
	}
}

static int xreg_new(struct gdx_xport_ep *ep, const struct gdx_xport_region *tmpl,
		    struct xreg **out)
{
	struct xreg *x = calloc(1, sizeof(*x));
	int ret;

	if (!x)
		return -ENOMEM;
	x->r = *tmpl;
	x->ep = ep;
	ret = ep->ops->mr_reg(ep->priv, &x->r);
	if (ret) {
		free(x);
		return ret;
	}
	GDX_DBG(SUBSYS, "%s: registered %p+%zu (%s) access 0x%x: path %s (%s)", ep->ops->scheme,
		x->r.p, x->r.len, gdx_mem_kind_name(x->r.kind), x->r.access,
		gdx_xport_path_name(x->r.path), x->r.why ? x->r.why : "");
	*out = x;
	return 0;
}

/*
 * Finds or makes a registration covering [p, p+len) with at least access.
 * Returns the cache reference in *ref (NULL for a one-shot the caller frees
 * through oneshot_free).
 */
static int reg_get(struct gdx_xport_ep *ep, void *p, size_t len, unsigned access,
		   struct xreg **out, struct gdx_reg **ref)
{
	struct gdx_xport_region tmpl;
	struct gdx_reg *g;
	struct xreg *x;
	int ret;

	/*
	 * The kind is asked for every time: host memory is cached by address
	 * only, and an address freed by the application can come back as device
	 * memory.  An entry whose kind no longer matches is stale.
	 */
	/* A key must not reach past what the user exposed: remote regions are exact. */
	classify(ep, p, len, &tmpl, !access);
	tmpl.domain = ep;
	if (!gdx_regcache_lookup(ep->rc, p, len, &g)) {
		x = g->payload;
		if ((x->r.access & access) == access && x->r.kind == tmpl.kind) {
			*out = x;
			*ref = g;
			return 0;
		}
		/* Stale, or needs more access than the cached entry has: replace it. */
		if (x->r.kind == tmpl.kind)
			access |= x->r.access;
		gdx_regcache_remove(ep->rc, (void *)g->start);
		gdx_regcache_put(ep->rc, g);
	}
	tmpl.access = access;
	ret = xreg_new(ep, &tmpl, &x);
	if (ret)
		return ret;
	x->cached = 1;
	ret = gdx_regcache_insert(ep->rc, x->r.p, x->r.len, x, &g);
	if (ret == -EEXIST) {
		/* Straddles entries already cached: register exactly this buffer, uncached. */
		ep->ops->mr_dereg(ep->priv, &x->r);
		free(x);
		classify(ep, p, len, &tmpl, 0);
		tmpl.domain = ep;
		tmpl.access = access;
		ret = xreg_new(ep, &tmpl, &x);
		if (ret)
			return ret;
		*out = x;
		*ref = NULL;
		return 0;
	}
	if (ret) {
		ep->ops->mr_dereg(ep->priv, &x->r);
		free(x);
		return ret;
	}
	*out = x;
	*ref = g;
	return 0;
}

static void reg_put(struct gdx_xport_ep *ep, struct xreg *x, struct gdx_reg *ref)
{
	if (ref) {
		gdx_regcache_put(ep->rc, ref);
	} else {
		ep->ops->mr_dereg(ep->priv, &x->r);
		free(x);
	}
}

GDX_API int gdx_xport_mr_reg(struct gdx_xport_ep *ep, void *p, size_t len, unsigned access,
			     struct gdx_xport_mr **out)
{
	struct gdx_xport_mr *mr;
	int ret;

	if (!ep || !p || !len || !out ||
	    (access & ~(GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE)))
		return -EINVAL;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	ret = reg_get(ep, p, len, access, &mr->x, &mr->ref);
	if (ret) {
		free(mr);
		return ret;
	}
	if (ep->require_direct && mr->x->r.path != GDX_XPORT_PATH_DIRECT) {
		GDX_ERR(SUBSYS, "%s: %p+%zu would take the %s path (%s) and require_direct is set",
			ep->ops->scheme, p, len, gdx_xport_path_name(mr->x->r.path),
			mr->x->r.why ? mr->x->r.why : "");
		reg_put(ep, mr->x, mr->ref);
		free(mr);
		return GDX_ENOTDIRECT;
	}
	mr->ep = ep;
	mr->p = p;
	pthread_mutex_lock(&ep->lock);
	mr->x->users++;
	mr->next = ep->mrs;
	ep->mrs = mr;
	pthread_mutex_unlock(&ep->lock);
	*out = mr;
	return 0;
}

GDX_API uint64_t gdx_xport_mr_key(const struct gdx_xport_mr *mr)
{
	return mr ? mr->x->r.key : 0;
}

GDX_API uint64_t gdx_xport_mr_addr(const struct gdx_xport_mr *mr)
{
	return mr ? mr->x->r.addr + (uint64_t)((char *)mr->p - (char *)mr->x->r.p) : 0;
}

GDX_API enum gdx_xport_path gdx_xport_mr_path(const struct gdx_xport_mr *mr, const char **why)
{
	if (why)
		*why = mr && mr->x->r.why ? mr->x->r.why : "";
	return mr ? mr->x->r.path : GDX_XPORT_PATH_NONE;
}

static void mr_free_locked(struct gdx_xport_ep *ep, struct gdx_xport_mr *mr)
{
	struct xreg *x = mr->x;
	int last;

	for (struct gdx_xport_mr **pp = &ep->mrs; *pp; pp = &(*pp)->next) {
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	}
	last = --x->users == 0;
	/*
	 * A key handed to the peer must stop working when its last handle goes:
	 * take a remotely accessible entry out of the cache (in-flight requests
	 * keep it alive until they complete).
	 */
	if (last && x->r.access && mr->ref) {
		struct gdx_reg *g;

		if (!gdx_regcache_lookup(ep->rc, (void *)mr->ref->start, 1, &g)) {
			if (g->payload == x)
				gdx_regcache_remove(ep->rc, (void *)g->start);
			gdx_regcache_put(ep->rc, g);
		}
	}
	reg_put(ep, x, mr->ref);
	free(mr);
}

GDX_API int gdx_xport_mr_dereg(struct gdx_xport_mr *mr)
{
	struct gdx_xport_ep *ep;

	if (!mr)
		return -EINVAL;
	ep = mr->ep;
	pthread_mutex_lock(&ep->lock);
	mr_free_locked(ep, mr);
	pthread_mutex_unlock(&ep->lock);
	return 0;
}

/* ---- endpoints ----------------------------------------------------------- */

static const struct gdx_xport_ops *find_backend(const char *addr, const char **rest)
{
	const char *sep = addr ? strstr(addr, "://") : NULL;

	if (!sep)
		return NULL;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(backends); i++) {
		size_t n = strlen(backends[i]->scheme);

		if ((size_t)(sep - addr) == n && !strncmp(addr, backends[i]->scheme, n)) {
			*rest = sep + 3;
			return backends[i];
		}
	}
	return NULL;
}

int gdx_xport_split_hostport(const char *hp, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon, *h = hp;
	size_t n;

	if (!hp || !*hp)
		return -EINVAL;
	if (*hp == '[') {
		const char *end = strchr(hp, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = hp + 1;
		n = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(hp, ':');
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - hp);
	}
	if (!n || n >= hlen || !colon[1] || strlen(colon + 1) >= plen)
		return -EINVAL;
	for (const char *c = colon + 1; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	if (atol(colon + 1) > 65535)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = 0;
	strcpy(port, colon + 1);
	return 0;
}

int gdx_xport_resolve(const char *hostport, int family, int passive, struct addrinfo **res)
{
	char host[256], port[8];
	struct addrinfo hints = { .ai_family = family, .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 };
	int r = gdx_xport_split_hostport(hostport, host, sizeof(host), port, sizeof(port));

	if (r)
		return r;
	r = getaddrinfo(!strcmp(host, "*") ? NULL : host, port, &hints, res);
	if (r) {
		GDX_ERR(SUBSYS, "%s: %s", hostport, gai_strerror(r));
		return -EHOSTUNREACH;
	}
	return 0;
}

int gdx_xport_ep_alloc(const struct gdx_xport_ops *ops, const struct gdx_xport_opts *o,
		       struct gdx_xport_cq *cq, struct gdx_xport_ep **out)
{
	struct gdx_xport_ep *ep = calloc(1, sizeof(*ep));
	int ret;

	if (!ep)
		return -ENOMEM;
	ep->ops = ops;
	ep->cq = cq;
	opts_resolve(o, &ep->opts);
	if (ep->opts.srq && !ops->srq_kick) {
		GDX_ERR(SUBSYS, "%s: no shared receive queues on this backend yet", ops->scheme);
		free(ep);
		return -EOPNOTSUPP;
	}
	ep->require_direct = ep->opts.require_direct;
	pthread_mutex_init(&ep->lock, NULL);
	pthread_cond_init(&ep->idle, NULL);
	ret = gdx_regcache_create(NULL, reg_release, ep, &ep->rc);
	if (ret) {
		free(ep);
		return ret;
	}
	*out = ep;
	return 0;
}

void gdx_xport_ep_free(struct gdx_xport_ep *ep)
{
	gdx_regcache_destroy(ep->rc);
	pthread_mutex_destroy(&ep->lock);
	pthread_cond_destroy(&ep->idle);
	free(ep);
}

static int ep_start(struct gdx_xport_ep *ep, struct gdx_xport_ep **out)
{
	int ret = ep->opts.srq ? gdx_xport_srq_join(ep) : 0;

	if (!ret) {
		ret = gdx_xport_cq_attach(ep->cq, ep);
		if (ret)
			gdx_xport_srq_leave(ep);
	}

	if (ret) {
		ep->ops->disconnect(ep->priv);
		ep->ops->destroy(ep->priv);
		gdx_xport_ep_free(ep);
		return ret;
	}
	atomic_store(&ep->connected, 1);
	*out = ep;
	return 0;
}

/* A TLS option only the tcp backend implements: never ignored where it is set. */
static int tls_check(const struct gdx_xport_ops *ops, const struct gdx_xport_opts *o)
{
	if ((o->tls_key || o->tls_identity) && ops != &gdx_xport_tcp_ops) {
		GDX_ERR(SUBSYS, "%s://: no TLS (opts.tls_key is tcp:// only)", ops->scheme);
		return -EOPNOTSUPP;
	}
	if (o->tls_identity && !o->tls_key) {
		GDX_ERR(SUBSYS, "opts.tls_identity without opts.tls_key");
		return -EINVAL;
	}
	return 0;
}

GDX_API int gdx_xport_listen(const char *addr, const struct gdx_xport_opts *o,
			     struct gdx_xport_listener **out)
{
	struct gdx_xport_listener *l;
	const char *rest;
	const struct gdx_xport_ops *ops = find_backend(addr, &rest);
	int ret;

	if (!out)
		return -EINVAL;
	if (!ops) {
		GDX_ERR(SUBSYS, "'%s': not a transport address (rdma://, tcp://, loop://)",
			addr ? addr : "(null)");
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->ops = ops;
	opts_resolve(o, &l->opts);
	ret = tls_check(ops, &l->opts);
	if (!ret) {
		ret = snprintf(l->addr, sizeof(l->addr), "%s://", ops->scheme);
		ret = ops->listen(l, rest, &l->priv, l->addr + ret,
				  sizeof(l->addr) - (size_t)ret);
	}
	/* read during the call only: the caller's strings need not outlive it */
	l->opts.tls_key = l->opts.tls_identity = NULL;
	if (ret) {
		GDX_ERR(SUBSYS, "listen on %s: %s", addr, gdx_strerror(ret));
		free(l);
		return ret;
	}
	*out = l;
	return 0;
}

GDX_API const char *gdx_xport_listener_addr(const struct gdx_xport_listener *l)
{
	return l ? l->addr : "";
}

GDX_API int gdx_xport_listener_fd(const struct gdx_xport_listener *l)
{
	return l ? l->ops->listener_fd(l->priv) : -EINVAL;
}

GDX_API int gdx_xport_accept(struct gdx_xport_listener *l, struct gdx_xport_cq *cq,
			     int timeout_ms, struct gdx_xport_ep **out)
{
	struct gdx_xport_ep *ep;
	int ret;

	if (!l || !cq || !out)
		return -EINVAL;
	ret = gdx_xport_ep_alloc(l->ops, &l->opts, cq, &ep);
	if (ret)
		return ret;
	ret = l->ops->accept(l->priv, ep, timeout_ms, &ep->priv);
	if (ret) {
		gdx_xport_ep_free(ep);
		return ret;
	}
	return ep_start(ep, out);
}

GDX_API void gdx_xport_listener_close(struct gdx_xport_listener *l)
{
	if (!l)
		return;
	l->ops->listener_close(l->priv);
	free(l);
}

GDX_API int gdx_xport_connect(const char *addr, const struct gdx_xport_opts *o,
			      struct gdx_xport_cq *cq, struct gdx_xport_ep **out)
{
	const char *rest;
	const struct gdx_xport_ops *ops = find_backend(addr, &rest);
	struct gdx_xport_ep *ep;
	int ret;

	if (!cq || !out)
		return -EINVAL;
	if (!ops) {
		GDX_ERR(SUBSYS, "'%s': not a transport address (rdma://, tcp://, loop://)",
			addr ? addr : "(null)");
		return -EINVAL;
	}
	ret = gdx_xport_ep_alloc(ops, o, cq, &ep);
	if (ret)
		return ret;
	ret = tls_check(ops, &ep->opts);
	if (!ret)
		ret = ops->connect(ep, rest, &ep->priv);
	ep->opts.tls_key = ep->opts.tls_identity = NULL;
	if (ret) {
		GDX_ERR(SUBSYS, "connect to %s: %s", addr, gdx_strerror(ret));
		gdx_xport_ep_free(ep);
		return ret;
	}
	return ep_start(ep, out);
}

void gdx_xport_ep_set_disconnected(struct gdx_xport_ep *ep)
{
	atomic_store(&ep->connected, 0);
}

const struct gdx_xport_opts *gdx_xport_ep_opts(const struct gdx_xport_ep *ep)
{
	return &ep->opts;
}

GDX_API int gdx_xport_disconnect(struct gdx_xport_ep *ep)
{
	if (!ep)
		return -EINVAL;
	atomic_store(&ep->connected, 0);
	ep->ops->disconnect(ep->priv);
	return 0;
}

GDX_API void gdx_xport_ep_destroy(struct gdx_xport_ep *ep)
{
	if (!ep)
		return;
	gdx_xport_disconnect(ep);
	/* Flushed completions of a polled backend are reaped by progress. */
	pthread_mutex_lock(&ep->lock);
	while (atomic_load(&ep->inflight) > 0) {
		pthread_mutex_unlock(&ep->lock);
		if (ep->ops->progress)
			ep->ops->progress(ep->priv);
		pthread_mutex_lock(&ep->lock);
		if (atomic_load(&ep->inflight) > 0) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 10 * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&ep->idle, &ep->lock, &ts);
		}
	}
	while (ep->mrs)
		mr_free_locked(ep, ep->mrs);
	pthread_mutex_unlock(&ep->lock);
	gdx_xport_srq_leave(ep);
	gdx_xport_cq_detach(ep->cq, ep);
	/* Registrations go before the backend state they were made on. */
	gdx_regcache_destroy(ep->rc);
	ep->rc = NULL;
	ep->ops->destroy(ep->priv);
	pthread_mutex_destroy(&ep->lock);
	pthread_cond_destroy(&ep->idle);
	free(ep);
}

GDX_API const char *gdx_xport_ep_backend(const struct gdx_xport_ep *ep)
{
	return ep ? ep->ops->scheme : "none";
}

GDX_API int gdx_xport_ep_connected(const struct gdx_xport_ep *ep)
{
	return ep ? atomic_load(&ep->connected) : 0;
}

/* ---- requests -------------------------------------------------------------- */

/* report: queue a completion (else the request is dropped silently). */
static void req_done(struct gdx_xport_req *req, int report, int status, uint64_t len,
		     enum gdx_xport_op op, unsigned flags, uint32_t imm)
{
	/* ep: where it completes; own: whose registration and counters it used. */
	struct gdx_xport_ep *ep = req->ep, *own = req->owner ? req->owner : ep;
	struct gdx_xport_cqe e = {
		.wr_id = req->wr_id, .ep = ep, .status = status, .op = op,
		.path = req->buf.len ? req->buf.path : GDX_XPORT_PATH_NONE,
		.flags = flags | req->cqe_flags, .imm = imm, .len = len,
	};
	struct xreg *x = req->fe;

	if (x)
		reg_put(own, x, req->be[3]);
	/* Room in the queue before the completion is seen: the poller may post at once. */
	if (req->flags & F_SRQ)
		gdx_xport_srq_done(own->opts.srq);
	else
		atomic_fetch_sub(req->op == GDX_XPORT_OP_RECV ? &ep->rq_used : &ep->sq_used, 1);
	if (report && (status || !(req->flags & GDX_XPORT_UNSIGNALED)))
		gdx_xport_cq_push(ep->cq, &e);
	free(req);
	if (atomic_fetch_sub(&own->inflight, 1) == 1) {
		pthread_mutex_lock(&own->lock);
		pthread_cond_broadcast(&own->idle);
		pthread_mutex_unlock(&own->lock);
	}
}

void gdx_xport_complete(struct gdx_xport_req *req, int status, uint64_t len)
{
	req_done(req, 1, status, len, req->op, 0, 0);
}

void gdx_xport_req_drop(struct gdx_xport_req *req)
{
	req_done(req, 0, 0, 0, req->op, 0, 0);
}

void gdx_xport_complete_imm(struct gdx_xport_req *req, int status, uint64_t len,
			    enum gdx_xport_op op, uint32_t imm)
{
	req_done(req, 1, status, len, op, GDX_XPORT_CQE_IMM, imm);
}

/* Finds the memory behind req's buffer: kind, registration, path; applies require_direct. */
int gdx_xport_req_resolve(struct gdx_xport_req *req, void *buf, size_t len)
{
	struct gdx_xport_ep *ep = req->ep;
	struct gdx_reg *ref;
	struct xreg *x;
	int ret;

	req->buf.p = buf;
	req->buf.len = len;
	req->buf.kind = GDX_MEM_HOST;
	if (!len)
		return 0;
	ret = reg_get(ep, buf, len, 0, &x, &ref);
	if (ret)
		return ret;
	if (ep->require_direct && x->r.path != GDX_XPORT_PATH_DIRECT) {
		GDX_ERR(SUBSYS, "%s %s of %zu bytes at %p would take the %s path (%s) and "
			"require_direct is set", ep->ops->scheme, gdx_xport_op_name(req->op), len,
			buf, gdx_xport_path_name(x->r.path), x->r.why ? x->r.why : "");
		reg_put(ep, x, ref);
		return GDX_ENOTDIRECT;
	}
	req->fe = x;
	req->be[3] = ref;
	req->buf.kind = x->r.kind;
	req->buf.dev = x->r.dev;
	req->buf.reg = x->r.priv;
	req->buf.path = x->r.path;
	return 0;
}

static int post(struct gdx_xport_ep *ep, enum gdx_xport_op op, void *buf, size_t len,
		uint64_t raddr, uint64_t key, uint32_t imm, uint64_t wr_id, unsigned flags)
{
	struct gdx_xport_req *req;
	_Atomic unsigned *used;
	int ret;

	if (!ep || (!buf && len) || (flags & ~(GDX_XPORT_UNSIGNALED | GDX_XPORT_FENCE)))
		return -EINVAL;
	if (op == GDX_XPORT_OP_RECV && (flags || ep->opts.srq))
		return -EINVAL;
	if (!atomic_load(&ep->connected))
		return GDX_EDISCONNECTED;
	used = op == GDX_XPORT_OP_RECV ? &ep->rq_used : &ep->sq_used;
	if (atomic_fetch_add(used, 1) >= (op == GDX_XPORT_OP_RECV ? ep->opts.rq_depth
								     : ep->opts.sq_depth)) {
		atomic_fetch_sub(used, 1);
		return -EAGAIN;
	}
	req = calloc(1, sizeof(*req));
	if (!req) {
		atomic_fetch_sub(used, 1);
		return -ENOMEM;
	}
	*req = (struct gdx_xport_req){ .wr_id = wr_id, .op = op, .flags = flags, .raddr = raddr,
				       .key = key, .imm = imm, .ep = ep };
	ret = gdx_xport_req_resolve(req, buf, len);
	if (ret) {
		free(req);
		atomic_fetch_sub(used, 1);
		return ret;
	}
	atomic_fetch_add(&ep->inflight, 1);
	ret = ep->ops->post(ep->priv, req);
	if (ret) {
		/* Not accepted: no completion will come. */
		if (req->fe)
			reg_put(ep, req->fe, req->be[3]);
		free(req);
		atomic_fetch_sub(used, 1);
		if (atomic_fetch_sub(&ep->inflight, 1) == 1) {
			pthread_mutex_lock(&ep->lock);
			pthread_cond_broadcast(&ep->idle);
			pthread_mutex_unlock(&ep->lock);
		}
	}
	return ret;
}

GDX_API int gdx_xport_post_send(struct gdx_xport_ep *ep, const void *buf, size_t len,
				uint64_t wr_id, unsigned flags)
{
	return post(ep, GDX_XPORT_OP_SEND, (void *)buf, len, 0, 0, 0, wr_id, flags);
}

GDX_API int gdx_xport_post_recv(struct gdx_xport_ep *ep, void *buf, size_t len, uint64_t wr_id)
{
	return post(ep, GDX_XPORT_OP_RECV, buf, len, 0, 0, 0, wr_id, 0);
}

GDX_API int gdx_xport_post_read(struct gdx_xport_ep *ep, void *buf, size_t len,
				uint64_t raddr, uint64_t key, uint64_t wr_id, unsigned flags)
{
	return post(ep, GDX_XPORT_OP_READ, buf, len, raddr, key, 0, wr_id, flags);
}

GDX_API int gdx_xport_post_write(struct gdx_xport_ep *ep, const void *buf, size_t len,
				 uint64_t raddr, uint64_t key, uint64_t wr_id, unsigned flags)
{
	return post(ep, GDX_XPORT_OP_WRITE, (void *)buf, len, raddr, key, 0, wr_id, flags);
}

GDX_API int gdx_xport_post_write_imm(struct gdx_xport_ep *ep, const void *buf, size_t len,
				     uint64_t raddr, uint64_t key, uint32_t imm,
				     uint64_t wr_id, unsigned flags)
{
	return post(ep, GDX_XPORT_OP_WRITE_IMM, (void *)buf, len, raddr, key, imm, wr_id, flags);
}
