/* SPDX-License-Identifier: MIT */
/*
 * Completion queues: a ring that the backends' threads push completions to
 * (gdx_xport_complete, through xport.c) and the application's threads poll or
 * wait on, driving the endpoints' progress and arming their event fds; the
 * eventfd is written only when a waiter armed it.  cq->lock guards the ring
 * and the signal state, cq->eps_lock the list of endpoints.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/xport.h"

#define SUBSYS "xport"

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

int gdx_xport_cq_push(struct gdx_xport_cq *cq, const struct gdx_xport_cqe *e)
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

/*
 * A poll found nothing: the backends read for the poller (tcp), as for a
 * sleeper that woke.  Not on a CQ of more than POLL_READ_EPS endpoints: a
 * spinning caller would make a read of each per poll, where their receive
 * threads read in parallel.  Whether it asked them.
 */
#define POLL_READ_EPS 4

static bool cq_poll_read(struct gdx_xport_cq *cq)
{
	bool few;

	pthread_mutex_lock(&cq->eps_lock);
	few = cq->neps <= POLL_READ_EPS;
	pthread_mutex_unlock(&cq->eps_lock);
	if (few)
		cq_sleep(cq, 2);
	return few;
}

static size_t cq_pending(struct gdx_xport_cq *cq)
{
	size_t n;

	pthread_mutex_lock(&cq->lock);
	n = cq->count;
	pthread_mutex_unlock(&cq->lock);
	return n;
}

size_t gdx_xport_cq_count(struct gdx_xport_cq *cq)
{
	return cq_pending(cq);
}

/* Moves up to n completions into cqe. */
static unsigned cq_take(struct gdx_xport_cq *cq, struct gdx_xport_cqe *cqe, unsigned n)
{
	unsigned got = 0;

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
	return got;
}

GDX_API int gdx_xport_cq_poll(struct gdx_xport_cq *cq, struct gdx_xport_cqe *cqe, unsigned n)
{
	unsigned got;

	if (!cq || (!cqe && n))
		return -EINVAL;
	cq_progress(cq);
	got = cq_take(cq, cqe, n);
	if (!got && n && cq_poll_read(cq))
		got = cq_take(cq, cqe, n);
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
	int slept = 0, ret;

	if (!cq)
		return -EINVAL;
	for (;;) {
		struct epoll_event ev[8];
		int left = -1, r;

		cq_progress(cq);
		if (cq_pending(cq)) {
			ret = 1;
			break;
		}
		if (timeout_ms >= 0) {
			uint64_t now = gdx_now_ns();

			if (now >= deadline) {
				ret = 0;
				break;
			}
			left = (int)((deadline - now + 999999) / 1000000);
		}
		/* Armed and counted a sleeper in one step: a poller's drain then re-arms for us. */
		r = cq_arm(cq, 0);
		if (r) {
			ret = r < 0 ? r : 1;
			break;
		}
		cq_sleep(cq, 1);
		slept = 1;
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
		if (r < 0 && r != -EINTR) {
			ret = r;
			break;
		}
	}
	/* What a sleeper kept between its sleeps (tcp: an endpoint's socket) goes back. */
	if (slept)
		cq_sleep(cq, -1);
	return ret;
}

int gdx_xport_cq_attach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep)
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

void gdx_xport_cq_detach(struct gdx_xport_cq *cq, struct gdx_xport_ep *ep)
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
