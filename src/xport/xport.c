/* SPDX-License-Identifier: MIT */
/*
 * Transport front end: address parsing and backend choice, completion queues,
 * endpoint life cycle, the registration cache, buffer resolution (memory kind,
 * path, require_direct) and argument checks.  Backends only move bytes.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "xport/xport.h"

#define SUBSYS "xport"

/* Internal request flag: a receive taken from a shared receive queue. */
#define F_SRQ 0x100u

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

/* ---- completion queues ------------------------------------------------ */

struct gdx_xport_cq {
	pthread_mutex_t lock;		/* ring */
	struct gdx_xport_cqe *ring;
	size_t cap, head, count;
	int efd;			/* readable once signaled, until the ring is emptied */
	int armed;			/* a waiter sleeps on efd: the next completion signals */
	int signaled;			/* a signal is due or written, and not read yet */
	int stale;			/* the ring was emptied before that signal's write landed */
	int sleepers;			/* threads in cq_wait's epoll_wait */
	int ext_armed;			/* armed through gdx_xport_cq_arm by the user */
	int epfd;			/* efd + each polled endpoint's event fd */
	pthread_mutex_t eps_lock;	/* eps; held across backend progress */
	struct gdx_xport_ep *eps;
	int neps;
};

GDX_API int gdx_xport_cq_create(struct gdx_xport_cq **out)
{
	struct gdx_xport_cq *cq;
	struct epoll_event ev = { .events = EPOLLIN };

	if (!out)
		return -EINVAL;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	cq->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (cq->efd < 0 || cq->epfd < 0 || epoll_ctl(cq->epfd, EPOLL_CTL_ADD, cq->efd, &ev)) {
		int err = -errno;

		if (cq->efd >= 0)
			close(cq->efd);
		if (cq->epfd >= 0)
			close(cq->epfd);
		free(cq);
		return err;
	}
	pthread_mutex_init(&cq->lock, NULL);
	pthread_mutex_init(&cq->eps_lock, NULL);
	*out = cq;
	return 0;
}

GDX_API int gdx_xport_cq_destroy(struct gdx_xport_cq *cq)
{
	if (!cq)
		return 0;
	pthread_mutex_lock(&cq->eps_lock);
	if (cq->neps) {
		pthread_mutex_unlock(&cq->eps_lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&cq->eps_lock);
	close(cq->efd);
	close(cq->epfd);
	pthread_mutex_destroy(&cq->lock);
	pthread_mutex_destroy(&cq->eps_lock);
	free(cq->ring);
	free(cq);
	return 0;
}

/*
 * Wake-ups are paid only by waiters: a completion writes the eventfd only when
 * a waiter armed the CQ (gdx_xport_cq_arm, which cq_wait calls before it
 * sleeps), so a caller that polls gets its completions without a syscall on
 * either side.  A progress thread completing a burst defers even that to the
 * end of the burst (gdx_xport_complete_defer/flush): one wake per burst.
 */
#define DEFER_MAX 4

static _Thread_local struct {
	int on;
	unsigned n;
	struct gdx_xport_cq *cq[DEFER_MAX];
} defer;

/* Lock held: 1 when the caller is to write the eventfd (cq_signal), after unlocking. */
static int cq_signal_due(struct gdx_xport_cq *cq)
{
	if (cq->signaled)
		return 0;
	cq->signaled = 1;
	return 1;
}

/*
 * Writes the eventfd outside the lock, so the waiter it wakes does not block on
 * the lock at once.  A poller may have emptied the ring before the write landed
 * (its read found nothing): then the write is stale and is read back here.
 */
static void cq_signal(struct gdx_xport_cq *cq)
{
	uint64_t v = 1;

	if (write(cq->efd, &v, sizeof(v)) < 0)
		GDX_DBG(SUBSYS, "eventfd write: %s", strerror(errno));
	pthread_mutex_lock(&cq->lock);
	if (cq->stale) {
		cq->stale = 0;
		/* Signaled again since: the write stands for that signal too. */
		if (!cq->signaled) {
			if (read(cq->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				GDX_DBG(SUBSYS, "eventfd read: %s", strerror(errno));
			/* The waiter this was for may still sleep: the next completion wakes it. */
			cq->armed = 1;
		}
	}
	pthread_mutex_unlock(&cq->lock);
}

/* Leaves cq's signal to this thread's next flush; 0 when the thread does not defer. */
static int defer_add(struct gdx_xport_cq *cq)
{
	if (!defer.on)
		return 0;
	for (unsigned i = 0; i < defer.n; i++)
		if (defer.cq[i] == cq)
			return 1;
	if (defer.n == DEFER_MAX)
		return 0;
	defer.cq[defer.n++] = cq;
	return 1;
}

static int cq_push(struct gdx_xport_cq *cq, const struct gdx_xport_cqe *e)
{
	int wake = 0;

	pthread_mutex_lock(&cq->lock);
	if (cq->count == cq->cap) {
		size_t cap = cq->cap ? cq->cap * 2 : 256;
		struct gdx_xport_cqe *r = malloc(cap * sizeof(*r));

		if (!r) {
			pthread_mutex_unlock(&cq->lock);
			GDX_ERR(SUBSYS, "out of memory queueing a completion (wr_id %llu lost)",
				(unsigned long long)e->wr_id);
			return -ENOMEM;
		}
		for (size_t i = 0; i < cq->count; i++)
			r[i] = cq->ring[(cq->head + i) % cq->cap];
		free(cq->ring);
		cq->ring = r;
		cq->cap = cap;
		cq->head = 0;
	}
	cq->ring[(cq->head + cq->count) % cq->cap] = *e;
	cq->count++;
	if (cq->armed) {
		cq->armed = 0;
		if (!defer_add(cq))
			wake = cq_signal_due(cq);
	}
	pthread_mutex_unlock(&cq->lock);
	if (wake)
		cq_signal(cq);
	return 0;
}

void gdx_xport_complete_defer(void)
{
	defer.on = 1;
}

void gdx_xport_complete_flush(void)
{
	for (unsigned i = 0; i < defer.n; i++) {
		struct gdx_xport_cq *cq = defer.cq[i];
		int wake;

		pthread_mutex_lock(&cq->lock);
		/*
		 * A poller may have taken them meanwhile: then nobody needs waking yet,
		 * but the waiter that armed may still sleep, for the next one.
		 */
		wake = cq->count && cq_signal_due(cq);
		if (!cq->count)
			cq->armed = 1;
		pthread_mutex_unlock(&cq->lock);
		if (wake)
			cq_signal(cq);
	}
	defer.n = 0;
}

static void cq_progress(struct gdx_xport_cq *cq)
{
	pthread_mutex_lock(&cq->eps_lock);
	for (struct gdx_xport_ep *ep = cq->eps; ep; ep = ep->cq_next)
		if (ep->ops->progress)
			ep->ops->progress(ep->priv);
	pthread_mutex_unlock(&cq->eps_lock);
}

static void cq_sleep(struct gdx_xport_cq *cq, int sleeping)
{
	pthread_mutex_lock(&cq->eps_lock);
	for (struct gdx_xport_ep *ep = cq->eps; ep; ep = ep->cq_next)
		if (ep->ops->wait)
			ep->ops->wait(ep->priv, sleeping);
	pthread_mutex_unlock(&cq->eps_lock);
}

static size_t cq_pending(struct gdx_xport_cq *cq)
{
	size_t n;

	pthread_mutex_lock(&cq->lock);
	n = cq->count;
	pthread_mutex_unlock(&cq->lock);
	return n;
}

GDX_API int gdx_xport_cq_poll(struct gdx_xport_cq *cq, struct gdx_xport_cqe *cqe, unsigned n)
{
	unsigned got = 0;

	if (!cq || (!cqe && n))
		return -EINVAL;
	cq_progress(cq);
	pthread_mutex_lock(&cq->lock);
	while (got < n && cq->count) {
		cqe[got++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
	}
	if (!cq->count && cq->signaled) {
		uint64_t v;

		/* Nothing left: the eventfd stops being readable. */
		if (read(cq->efd, &v, sizeof(v)) < 0) {
			if (errno != EAGAIN)
				GDX_DBG(SUBSYS, "eventfd read: %s", strerror(errno));
			/* The signal's write has not landed yet: its writer reads it back. */
			cq->stale = 1;
		}
		cq->signaled = 0;
		/*
		 * A waiter woken by that signal may not have seen it before it was
		 * read here, and sleeps on: the next completion must wake it.
		 */
		if (cq->sleepers || cq->ext_armed)
			cq->armed = 1;
	}
	pthread_mutex_unlock(&cq->lock);
	return (int)got;
}

GDX_API int gdx_xport_cq_fd(struct gdx_xport_cq *cq)
{
	return cq ? cq->epfd : -EINVAL;
}

/* ext: the user arms (for its own epoll); else cq_wait, counted as a sleeper when 0. */
static int cq_arm(struct gdx_xport_cq *cq, int ext)
{
	int ready = 0;

	pthread_mutex_lock(&cq->eps_lock);
	for (struct gdx_xport_ep *ep = cq->eps; ep; ep = ep->cq_next)
		if (ep->ops->arm && ep->ops->arm(ep->priv) > 0)
			ready = 1;
	pthread_mutex_unlock(&cq->eps_lock);
	/* Completions that arrived before arming are reaped here, not waited for. */
	cq_progress(cq);
	pthread_mutex_lock(&cq->lock);
	if (cq->count)
		ready = 1;
	else if (!ready)
		cq->armed = 1;
	if (ext)
		cq->ext_armed = 1;
	else if (!ready)
		cq->sleepers++;
	pthread_mutex_unlock(&cq->lock);
	return ready;
}

GDX_API int gdx_xport_cq_arm(struct gdx_xport_cq *cq)
{
	return cq ? cq_arm(cq, 1) : -EINVAL;
}

GDX_API int gdx_xport_cq_wait(struct gdx_xport_cq *cq, int timeout_ms)
{
	uint64_t deadline = timeout_ms >= 0 ? gdx_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;

	if (!cq)
		return -EINVAL;
	for (;;) {
		struct epoll_event ev[8];
		int left = -1, r;

		cq_progress(cq);
		if (cq_pending(cq))
			return 1;
		if (timeout_ms >= 0) {
			uint64_t now = gdx_now_ns();

			if (now >= deadline)
				return 0;
			left = (int)((deadline - now + 999999) / 1000000);
		}
		/* Armed and counted a sleeper in one step: a poller's drain then re-arms for us. */
		r = cq_arm(cq, 0);
		if (r)
			return r < 0 ? r : 1;
		cq_sleep(cq, 1);
		r = epoll_wait(cq->epfd, ev, 8, left);
		if (r < 0)
			r = -errno;
		pthread_mutex_lock(&cq->lock);
		/* Awake: what completes now (maybe read by this thread itself) need not signal it. */
		if (cq->sleepers == 1 && !cq->ext_armed)
			cq->armed = 0;
		pthread_mutex_unlock(&cq->lock);
		cq_sleep(cq, 0);
		pthread_mutex_lock(&cq->lock);
		cq->sleepers--;
		pthread_mutex_unlock(&cq->lock);
		if (r < 0 && r != -EINTR)
			return r;
	}
}

static int cq_attach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep)
{
	int fd = ep->ops->event_fd ? ep->ops->event_fd(ep->priv) : -1;

	if (fd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = ep };

		if (epoll_ctl(cq->epfd, EPOLL_CTL_ADD, fd, &ev))
			return -errno;
	}
	pthread_mutex_lock(&cq->eps_lock);
	ep->cq_next = cq->eps;
	cq->eps = ep;
	cq->neps++;
	pthread_mutex_unlock(&cq->eps_lock);
	return 0;
}

static void cq_detach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep)
{
	int fd = ep->ops->event_fd ? ep->ops->event_fd(ep->priv) : -1;

	if (fd >= 0)
		epoll_ctl(cq->epfd, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_lock(&cq->eps_lock);
	for (struct gdx_xport_ep **pp = &cq->eps; *pp; pp = &(*pp)->cq_next) {
		if (*pp == ep) {
			*pp = ep->cq_next;
			cq->neps--;
			break;
		}
	}
	pthread_mutex_unlock(&cq->eps_lock);
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

static int ep_alloc(const struct gdx_xport_ops *ops, const struct gdx_xport_opts *o,
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

static void ep_free(struct gdx_xport_ep *ep)
{
	gdx_regcache_destroy(ep->rc);
	pthread_mutex_destroy(&ep->lock);
	pthread_cond_destroy(&ep->idle);
	free(ep);
}

static int srq_join(struct gdx_xport_ep *ep);
static void srq_leave(struct gdx_xport_ep *ep);

static int ep_start(struct gdx_xport_ep *ep, struct gdx_xport_ep **out)
{
	int ret = ep->opts.srq ? srq_join(ep) : 0;

	if (!ret) {
		ret = cq_attach(ep->cq, ep);
		if (ret)
			srq_leave(ep);
	}

	if (ret) {
		ep->ops->disconnect(ep->priv);
		ep->ops->destroy(ep->priv);
		ep_free(ep);
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
	ret = ep_alloc(l->ops, &l->opts, cq, &ep);
	if (ret)
		return ret;
	ret = l->ops->accept(l->priv, ep, timeout_ms, &ep->priv);
	if (ret) {
		ep_free(ep);
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
	ret = ep_alloc(ops, o, cq, &ep);
	if (ret)
		return ret;
	ret = tls_check(ops, &ep->opts);
	if (!ret)
		ret = ops->connect(ep, rest, &ep->priv);
	ep->opts.tls_key = ep->opts.tls_identity = NULL;
	if (ret) {
		GDX_ERR(SUBSYS, "connect to %s: %s", addr, gdx_strerror(ret));
		ep_free(ep);
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
	srq_leave(ep);
	cq_detach(ep->cq, ep);
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

static void srq_done(struct gdx_xport_srq *q);

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
		srq_done(own->opts.srq);
	else
		atomic_fetch_sub(req->op == GDX_XPORT_OP_RECV ? &ep->rq_used : &ep->sq_used, 1);
	if (report && (status || !(req->flags & GDX_XPORT_UNSIGNALED)))
		cq_push(ep->cq, &e);
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
static int req_resolve(struct gdx_xport_req *req, void *buf, size_t len)
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
	ret = req_resolve(req, buf, len);
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

/* ---- shared receive queues ------------------------------------------------------ */

struct srq_ent {
	void *buf;
	size_t len;
	uint64_t wr_id;
	struct gdx_device *dev;		/* memory of a device, not host memory: else NULL */
	struct srq_ent *next;
};

struct srq_dev {
	struct gdx_device *dev;
	struct srq_dev *next;
};

struct gdx_xport_srq {
	pthread_mutex_t lock;		/* the queue */
	struct srq_ent *head, *tail;
	unsigned depth, count;		/* count: waiting here, not yet taken */
	unsigned outstanding;		/* posted and not completed: against depth */
	pthread_mutex_t eps_lock;	/* eps, anchor, devs; held while kicking them */
	struct gdx_xport_ep *eps;
	/*
	 * Devices whose memory was posted: every member has been set up for each
	 * (ops->srq_device), on the poster's or the joiner's thread.
	 */
	struct srq_dev *devs;
	const struct gdx_xport_ops *ops;
	int neps;
	/*
	 * Backends whose queue is in the hardware (ops->srq_open): an endpoint of
	 * the queue's own, never connected, that owns the receives handed to the
	 * hardware and their registrations, so they outlive any member.
	 */
	struct gdx_xport_ep *anchor;
};

GDX_API int gdx_xport_srq_create(unsigned depth, struct gdx_xport_srq **out)
{
	struct gdx_xport_srq *q;

	if (!depth || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->depth = depth;
	pthread_mutex_init(&q->lock, NULL);
	pthread_mutex_init(&q->eps_lock, NULL);
	*out = q;
	return 0;
}

GDX_API int gdx_xport_srq_destroy(struct gdx_xport_srq *q)
{
	struct srq_ent *e;

	if (!q)
		return 0;
	pthread_mutex_lock(&q->eps_lock);
	if (q->neps) {
		pthread_mutex_unlock(&q->eps_lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&q->eps_lock);
	if (q->anchor) {
		struct gdx_xport_ep *a = q->anchor;

		/* The hardware queue goes first, then the registrations, then the domain. */
		a->ops->srq_close(a->priv);
		gdx_regcache_destroy(a->rc);
		a->rc = NULL;
		a->ops->srq_free(a->priv);
		ep_free(a);
	}
	while ((e = q->head)) {
		q->head = e->next;
		free(e);
	}
	while (q->devs) {
		struct srq_dev *d = q->devs;

		q->devs = d->next;
		free(d);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->eps_lock);
	free(q);
	return 0;
}

/*
 * Device memory of dev is posted: each member is set up for it now, on this
 * thread, and each endpoint that joins later when it joins (srq_join), never
 * by the thread that takes the receive (tcp's receive thread must not load
 * the copy agent's module: on CUDA that may synchronise the context while a
 * stream waits for a completion only that thread delivers).  Before the entry
 * is queued, so no member can take it unprepared.
 */
static int srq_device(struct gdx_xport_srq *q, struct gdx_device *dev)
{
	struct srq_dev *d;
	int ret = 0;

	pthread_mutex_lock(&q->eps_lock);
	for (d = q->devs; d && d->dev != dev; d = d->next)
		;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (d) {
			d->dev = dev;
			d->next = q->devs;
			q->devs = d;
			for (struct gdx_xport_ep *ep = q->eps; ep; ep = ep->srq_next)
				if (ep->ops->srq_device)
					ep->ops->srq_device(ep->priv, dev);
		} else {
			ret = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&q->eps_lock);
	return ret;
}

GDX_API int gdx_xport_srq_post_recv(struct gdx_xport_srq *q, void *buf, size_t len,
				    uint64_t wr_id)
{
	struct gdx_ptr_attrs a;
	struct gdx_device *dev;
	struct srq_ent *e;
	int ret;

	if (!q || (!buf && len))
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	*e = (struct srq_ent){ .buf = buf, .len = len, .wr_id = wr_id };
	dev = len ? gdx_device_of_ptr(buf, &a) : NULL;
	if (dev && a.kind != GDX_MEM_PINNED) {
		ret = srq_device(q, dev);
		if (ret) {
			free(e);
			return ret;
		}
		e->dev = dev;
	}
	pthread_mutex_lock(&q->lock);
	if (q->outstanding >= q->depth) {
		pthread_mutex_unlock(&q->lock);
		free(e);
		return -EAGAIN;
	}
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	q->count++;
	q->outstanding++;
	pthread_mutex_unlock(&q->lock);
	/* Messages may be waiting on some endpoint for exactly this. */
	pthread_mutex_lock(&q->eps_lock);
	for (struct gdx_xport_ep *ep = q->eps; ep; ep = ep->srq_next)
		ep->ops->srq_kick(ep->priv);
	pthread_mutex_unlock(&q->eps_lock);
	return 0;
}

/*
 * A message may arrive before its endpoint has joined (opts.srq is set from
 * the start): device memory at the head waits until it has, and has been set
 * up for it (srq_join); until then the message waits as one no receive took.
 */
static int srq_withheld(const struct gdx_xport_ep *ep, const struct srq_ent *e)
{
	return e && e->dev && ep->ops->srq_device && !atomic_load(&ep->srq_ready);
}

unsigned gdx_xport_srq_waiting(const struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = srq_withheld(ep, q->head) ? 0 : q->count;
	pthread_mutex_unlock(&q->lock);
	return n;
}

static void srq_done(struct gdx_xport_srq *q)
{
	pthread_mutex_lock(&q->lock);
	q->outstanding--;
	pthread_mutex_unlock(&q->lock);
}

int gdx_xport_srq_take(struct gdx_xport_ep *ep, struct gdx_xport_req **out)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	/* A hardware queue's receives belong to its anchor; errors show on ep. */
	struct gdx_xport_ep *own = q->anchor ? q->anchor : ep;

	for (;;) {
		struct gdx_xport_req *req;
		struct srq_ent *e;
		int ret;

		pthread_mutex_lock(&q->lock);
		e = srq_withheld(ep, q->head) ? NULL : q->head;
		if (e) {
			q->head = e->next;
			if (!q->head)
				q->tail = NULL;
			q->count--;
		}
		pthread_mutex_unlock(&q->lock);
		if (!e)
			return -EAGAIN;
		req = calloc(1, sizeof(*req));
		if (!req) {
			GDX_ERR(SUBSYS, "out of memory: shared receive %llu dropped",
				(unsigned long long)e->wr_id);
			free(e);
			srq_done(q);
			continue;
		}
		*req = (struct gdx_xport_req){ .wr_id = e->wr_id, .op = GDX_XPORT_OP_RECV,
					       .flags = F_SRQ, .ep = own,
					       .owner = q->anchor };
		atomic_fetch_add(&own->inflight, 1);
		ret = req_resolve(req, e->buf, e->len);
		req->ep = ep;
		free(e);
		if (!ret) {
			*out = req;
			return 0;
		}
		req->buf.len = 0;
		gdx_xport_complete(req, ret, 0);
	}
}

int gdx_xport_srq_priv(struct gdx_xport_ep *ep, void *arg, void **out)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	struct gdx_xport_ep *a;
	int ret = 0;

	pthread_mutex_lock(&q->eps_lock);
	if (q->ops && q->ops != ep->ops) {
		GDX_ERR(SUBSYS, "a shared receive queue serves one backend (%s), not %s",
			q->ops->scheme, ep->ops->scheme);
		ret = -EINVAL;
	} else if (!q->anchor) {
		ret = ep_alloc(ep->ops, &ep->opts, NULL, &a);
		if (!ret) {
			ret = ep->ops->srq_open(a, arg, q->depth, &a->priv);
			if (ret)
				ep_free(a);
		}
		if (!ret) {
			q->ops = ep->ops;
			q->anchor = a;
		}
	}
	if (!ret)
		*out = q->anchor->priv;
	pthread_mutex_unlock(&q->eps_lock);
	return ret;
}

static int srq_join(struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->opts.srq;

	pthread_mutex_lock(&q->eps_lock);
	if (q->ops && q->ops != ep->ops) {
		pthread_mutex_unlock(&q->eps_lock);
		GDX_ERR(SUBSYS, "a shared receive queue serves one backend (%s), not %s",
			q->ops->scheme, ep->ops->scheme);
		return -EINVAL;
	}
	q->ops = ep->ops;
	ep->srq = q;
	ep->srq_next = q->eps;
	q->eps = ep;
	q->neps++;
	if (ep->ops->srq_device) {
		for (struct srq_dev *d = q->devs; d; d = d->next)
			ep->ops->srq_device(ep->priv, d->dev);
		atomic_store(&ep->srq_ready, 1);
	}
	/* Receives posted while no member could take them. */
	ep->ops->srq_kick(ep->priv);
	pthread_mutex_unlock(&q->eps_lock);
	return 0;
}

static void srq_leave(struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->srq;

	if (!q)
		return;
	pthread_mutex_lock(&q->eps_lock);
	for (struct gdx_xport_ep **pp = &q->eps; *pp; pp = &(*pp)->srq_next) {
		if (*pp == ep) {
			*pp = ep->srq_next;
			q->neps--;
			break;
		}
	}
	pthread_mutex_unlock(&q->eps_lock);
}
