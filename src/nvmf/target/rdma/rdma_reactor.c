/* SPDX-License-Identifier: MIT */
/*
 * NVMe/RDMA target: the reactors.  The loop (events, adaptive polling, what
 * waits for buffers at the end of an iteration), the once-a-second timers
 * (stalls, keep-alive, Connect, overdue drains), and the transport's start
 * and stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "nvmf/target/rdma/rdma_int.h"
#include "nvmf/target/transport.h"

static void deliver_aens(struct rdma_reactor *r)
{
	if (!atomic_exchange(&r->aen, false))
		return;
	for (struct rdma_queue *q = r->queues; q; q = q->next)
		if (q->state == Q_LIVE && q->sq.ctrl && q->sq.qid == 0)
			nvmf_ctrl_aen_deliver(&q->sq);
}

/* Whether a namespace or an AER still holds one of the queue's requests. */
static bool queue_held(const struct rdma_queue *q)
{
	for (unsigned i = 0; i < q->depth; i++)
		if (q->reqs[i].state == RR_EXEC)
			return true;
	return false;
}

/*
 * Queues the device has not given back in time.  Some devices (rdma_rxe of
 * Linux 6.1) do not flush work requests posted once the queue pair is in the
 * error state, nor say when a queue pair on a shared receive queue took its
 * last receive.  Destroying the queue pair discards what it still has, and
 * its completion queue goes with it, so only requests a namespace holds keep
 * such a queue.  A receive it took and never completed is lost to the shared
 * queue.
 */
static void reap_overdue(struct rdma_reactor *r, uint64_t now)
{
	struct rdma_tgt *rt = r->rt;

	for (struct rdma_queue *q = r->queues; q; q = q->next) {
		if (q->state != Q_DRAINING || q->reaped || now - q->ended_ns < DRAIN_NS ||
		    queue_held(q))
			continue;
		GDX_DBG(SUBSYS, "%s qid %u: not given back by the device after %llu ms (drained: "
			"recv %d send %d; last WQE reached %d), freed", q->peer, q->sq.qid,
			DRAIN_NS / 1000000, q->drained_recv, q->drained_send,
			atomic_load(&q->last_wqe));
		if (!atomic_load(&q->last_wqe)) {
			gdx_counter_add(&rt->t->ctr[TGT_CTR_NO_LAST_WQE], 1);
			if (!atomic_exchange(&rt->no_last_wqe_logged, true))
				GDX_INFO(SUBSYS, "rdma: the device sent no Last WQE Reached for a queue "
					 "pair on a shared receive queue within %llu ms of its end: "
					 "destroyed without (counted in nvmf.target "
					 "rdma_no_last_wqe; logged once)", DRAIN_NS / 1000000);
		}
		nvmf_rdma_reap_later(q);
	}
}

/*
 * Whether the queue's READs and SENDs have seen no completion for
 * nvmf.target.stall_timeout_ms, as far as ticks a second apart can tell.
 */
static bool queue_stalled(struct rdma_queue *q, uint64_t now)
{
	if (!q->nposted || q->ncompleted != q->tick_completed) {
		q->tick_completed = q->ncompleted;
		q->stuck_ns = 0;
		return false;
	}
	if (!q->stuck_ns)
		q->stuck_ns = now;
	return now - q->stuck_ns >= q->tgt->stall_ns;
}

/*
 * Once a second: stalled queues, keep-alive expiry, queues that never sent
 * Connect, overdue drains; over the target's budget, buffers kept for reuse go.
 */
static void tick(struct rdma_reactor *r)
{
	uint64_t now = gdx_now_ns();
	bool over = nvmf_target_buf_over(r->rt->t);

	reap_overdue(r, now);
	for (struct rdma_queue *q = r->queues; q; q = q->next) {
		if (q->state != Q_LIVE)
			continue;
		if (queue_stalled(q, now)) {
			char why[128];

			snprintf(why, sizeof(why), "%u READ/SEND work requests not completed by the host for %"
				 PRIu64 " ms: nvmf.target.stall_timeout_ms", q->nposted,
				 (now - q->stuck_ns) / 1000000);
			gdx_counter_add(&r->rt->t->ctr[TGT_CTR_STALLS], 1);
			nvmf_rdma_queue_end(q, why);
			continue;
		}
		if (over)
			nvmf_rdma_queue_trim(q);
		if (q->sq.ctrl) {
			nvmf_target_sq_stats(&q->sq, &q->sq_stats);
			if (nvmf_sq_expired(&q->sq, now))
				nvmf_rdma_queue_end(q, "controller failed or keep-alive expired");
		} else if (now - q->born_ns > r->rt->t->handshake_ns) {
			char why[64];

			snprintf(why, sizeof(why), "no Connect within %" PRIu64 " ms",
				 r->rt->t->handshake_ns / 1000000);
			nvmf_rdma_queue_end(q, why);
		}
	}
}

static void reap(struct rdma_reactor *r)
{
	for (unsigned i = 0; i < r->nreap; i++)
		nvmf_rdma_queue_free(r->reap[i]);
	r->nreap = 0;
}

/*
 * Starts what waits for buffers where they fit now: after each iteration for
 * the buffers its completions freed, and after each tick for those other
 * reactors freed meanwhile.  Then posts what the iteration queued outside a
 * completion queue's poll (those started here, file I/O and AERs completed).
 */
static void unblock_all(struct rdma_reactor *r)
{
	for (struct rdma_queue *q = r->queues; q; q = q->next) {
		if (q->bufs.wait_head)
			nvmf_rdma_queue_unblock(q);
		nvmf_rdma_post_queued(q);
	}
}

/* What every iteration ends with: commands waiting for buffers, file I/O, freed queues. */
static void iteration_end(struct rdma_reactor *r)
{
	unblock_all(r);
	if (r->ioctx)
		nvmf_ioctx_flush(r->ioctx);
	reap(r);
}

/* Serves what epoll reports within timeout_ms; how many events there were. */
static int handle_events(struct rdma_reactor *r, int timeout_ms)
{
	struct epoll_event evs[32];
	int n = epoll_wait(r->epfd, evs, (int)GDX_ARRAY_SIZE(evs), timeout_ms);

	r->nwaits++;
	for (int i = 0; i < n; i++) {
		struct ev *ev = evs[i].data.ptr;

		switch (ev->kind) {
		case EV_LISTEN_CM:
			nvmf_rdma_listen_events(r->rt);
			break;
		case EV_CM:
			nvmf_rdma_queue_events(r);
			break;
		case EV_CQ:
			nvmf_rdma_cq_events(r, GDX_CONTAINER_OF(ev, struct rdma_cc, ev));
			break;
		case EV_WAKE: {
			uint64_t v;

			if (read(r->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				GDX_WARN(SUBSYS, "rdma wake read: %s", strerror(errno));
			nvmf_rdma_take_handoffs(r);
			deliver_aens(r);
			/* Last WQE Reached for one of them, maybe */
			for (struct rdma_queue *q = r->queues; q; q = q->next)
				nvmf_rdma_queue_maybe_reap(q);
			break;
		}
		case EV_ASYNC:
			nvmf_rdma_async_events(r->rt, GDX_CONTAINER_OF(ev, struct rdma_async, ev));
			break;
		case EV_IOCTX:
			nvmf_ioctx_reap(r->ioctx);
			break;
		}
	}
	iteration_end(r);
	return n;
}

/* Polls every queue's completion queue; whether any had completions. */
static bool poll_queues(struct rdma_reactor *r)
{
	unsigned n = 0;

	for (struct rdma_queue *q = r->queues; q; q = q->next)
		if (!q->reaped)
			n += nvmf_rdma_poll_cq(q);
	return n > 0;
}

/* Ends every queue and waits, bounded, for them to drain; frees what is left. */
static void reactor_drain(struct rdma_reactor *r)
{
	uint64_t deadline = gdx_now_ns() + STOP_DRAIN_MS * 1000000ull;
	struct rdma_tgt *rt = r->rt;

	/* no new queues: reactor 0 owns the listeners */
	if (r->id == 0) {
		epoll_ctl(r->epfd, EPOLL_CTL_DEL, rt->listen_ch->fd, NULL);
		for (unsigned i = 0; i < rt->nlisteners; i++)
			rdma_destroy_id(rt->listeners[i].id);
		rt->nlisteners = 0;
	}
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nhandoff; i++) {
		nvmf_rdma_reject(r->handoff[i].id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(r->handoff[i].id);
	}
	r->nhandoff = 0;
	pthread_mutex_unlock(&r->lock);
	for (struct rdma_queue *q = r->queues; q; q = q->next)
		nvmf_rdma_queue_end(q, "target stopping");
	while (r->queues && gdx_now_ns() < deadline) {
		poll_queues(r);		/* completion queues a polling reactor left unarmed */
		handle_events(r, 10);
		reap_overdue(r, gdx_now_ns());
		reap(r);
	}
	while (r->queues) {
		struct rdma_queue *q = r->queues;

		GDX_WARN(SUBSYS, "%s qid %u: a namespace never completed a request", q->peer,
			 q->sq.qid);
		nvmf_rdma_queue_free(q);
	}
}

static uint64_t reactor_clock(struct rdma_reactor *r)
{
	r->nclock++;
	return gdx_now_ns();
}

/*
 * A reactor sleeps in epoll_wait until a completion channel, the CM or its
 * wake-up fires.  With --poll-us it keeps polling for that long after each
 * event: it reads the completion queues itself and leaves them unarmed, so a
 * command costs no event read, no re-arm and no wake-up (each a system call,
 * or an emulated device's trap); it arms them all again before it sleeps.
 *
 * While it polls, it looks at the clock and at epoll (CM events, wake-ups,
 * file I/O) once every POLL_CHECK polls, not at each: where the clock source
 * is not one the vDSO reads (an HPET, as in a TCG guest) a clock read is a
 * system call and an emulated device access, and those two calls were 8 of
 * the 9 system calls a polling reactor made per command at depth 32 over
 * rdma_rxe.  A poll of an idle completion queue is a read of memory, so the
 * window runs over by at most POLL_CHECK - 1 of them.
 */
static void *reactor_main(void *arg)
{
	struct rdma_reactor *r = arg;
	uint64_t now = reactor_clock(r), next_tick = now + 1000000000ull, last_event = 0;
	uint64_t poll_ns = r->rt->t->poll_ns;
	unsigned polls = 0;
	bool busy = false;	/* completions or events since the last look at the clock */

	while (!atomic_load(&r->stop)) {
		int timeout = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000) + 1;

		if (now - last_event < poll_ns) {
			r->polling = true;
			r->npolls++;
			busy |= poll_queues(r);
			if (++polls < POLL_CHECK) {
				iteration_end(r);
				continue;
			}
			polls = 0;
			timeout = 0;
		} else if (r->polling) {
			r->polling = false;
			for (struct rdma_queue *q = r->queues; q; q = q->next)
				nvmf_rdma_arm_cq(q);
		}
		busy |= handle_events(r, timeout) > 0;
		now = reactor_clock(r);
		if (busy)
			last_event = now;
		busy = false;
		if (now >= next_tick) {
			tick(r);
			unblock_all(r);
			reap(r);
			next_tick = now + 1000000000ull;
		}
	}
	GDX_INFO(SUBSYS, "rdma reactor %u: %" PRIu64 " polls of its completion queues, %" PRIu64
		 " clock reads, %" PRIu64 " event waits", r->id, r->npolls, r->nclock, r->nwaits);
	reactor_drain(r);
	return NULL;
}

static int epoll_add(int epfd, int fd, struct ev *ev)
{
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = ev };

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

static int reactor_init(struct rdma_tgt *rt, struct rdma_reactor *r, unsigned id)
{
	int ret;

	r->rt = rt;
	r->id = id;
	r->wake_ev.kind = EV_WAKE;
	r->io_ev.kind = EV_IOCTX;
	r->cm_ev.kind = EV_CM;
	pthread_mutex_init(&r->lock, NULL);
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	r->cm_ch = rdma_create_event_channel();
	if (r->epfd < 0 || r->wakefd < 0 || !r->cm_ch)
		return -errno;
	ret = epoll_add(r->epfd, r->wakefd, &r->wake_ev);
	if (!ret)
		ret = epoll_add(r->epfd, r->cm_ch->fd, &r->cm_ev);
	if (ret)
		return ret;
	if (nvmf_ioctx_create(&r->ioctx)) {
		GDX_WARN(SUBSYS, "rdma reactor %u: no io_uring: file namespaces do synchronous I/O",
			 id);
		r->ioctx = NULL;
		return 0;
	}
	return epoll_add(r->epfd, nvmf_ioctx_fd(r->ioctx), &r->io_ev);
}

static void reactor_fini(struct rdma_reactor *r)
{
	/* connect requests handed over after the reactor stopped */
	for (unsigned i = 0; i < r->nhandoff; i++) {
		nvmf_rdma_reject(r->handoff[i].id, GDX_RDMA_CM_NO_RSC);
		rdma_destroy_id(r->handoff[i].id);
	}
	/* every queue pair is gone: nothing takes from the shared receive queues */
	for (unsigned i = 0; i < r->ncc; i++) {
		nvmf_rdma_srq_destroy(r->rt, &r->ccs[i]);
		ibv_destroy_comp_channel(r->ccs[i].cc);
	}
	if (r->cm_ch)
		rdma_destroy_event_channel(r->cm_ch);
	nvmf_ioctx_destroy(r->ioctx);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->wakefd >= 0)
		close(r->wakefd);
	free(r->handoff);
	free(r->reap);
	pthread_mutex_destroy(&r->lock);
}

static void rdma_tgt_free(struct rdma_tgt *rt)
{
	for (unsigned i = 0; i < rt->nlisteners; i++)
		rdma_destroy_id(rt->listeners[i].id);
	for (unsigned i = 0; rt->reactors && i < rt->nreactors; i++)
		reactor_fini(&rt->reactors[i]);
	if (rt->listen_ch)
		rdma_destroy_event_channel(rt->listen_ch);
	free(rt->reactors);
	pthread_mutex_destroy(&rt->dev_lock);
	free(rt);
}

static int nvmf_rdma_start(struct gdx_nvmf_target *t)
{
	struct rdma_tgt *rt;
	int ret;

	if (!nvmf_target_nports(t, GDX_NVMF_TRTYPE_RDMA))
		return 0;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->t = t;
	pthread_mutex_init(&rt->dev_lock, NULL);
	rt->nreactors = t->nreactors ? t->nreactors : 1;
	rt->reactors = calloc(rt->nreactors, sizeof(*rt->reactors));
	rt->listen_ch = rdma_create_event_channel();
	if (!rt->reactors || !rt->listen_ch) {
		ret = rt->reactors ? -errno : -ENOMEM;
		GDX_ERR(SUBSYS, "rdma: %s (are the RDMA modules loaded?)", gdx_strerror(ret));
		goto fail;
	}
	for (unsigned i = 0; i < rt->nreactors; i++)
		rt->reactors[i].epfd = rt->reactors[i].wakefd = -1;
	for (unsigned i = 0; i < rt->nreactors; i++) {
		ret = reactor_init(rt, &rt->reactors[i], i);
		if (ret)
			goto fail;
	}
	rt->listen_ev.kind = EV_LISTEN_CM;
	ret = epoll_add(rt->reactors[0].epfd, rt->listen_ch->fd, &rt->listen_ev);
	if (ret)
		goto fail;
	for (unsigned i = 0; i < t->core.nports; i++) {
		if (t->core.ports[i].trtype != GDX_NVMF_TRTYPE_RDMA)
			continue;
		ret = nvmf_rdma_listen_on(rt, &t->core.ports[i], &t->bound_port[i]);
		if (ret)
			goto fail;
	}
	for (unsigned i = 0; i < rt->nreactors; i++) {
		struct rdma_reactor *r = &rt->reactors[i];
		char name[16];

		snprintf(name, sizeof(name), "gdx-nvmf-rdma%u", i % 100u);
		ret = gdx_thread_start_on(&r->thread, nvmf_target_reactor_cpu(t, i), reactor_main,
					  r, name, "nvmf");
		if (ret) {
			for (unsigned j = 0; j < i; j++) {
				atomic_store(&rt->reactors[j].stop, true);
				nvmf_rdma_reactor_wake(&rt->reactors[j]);
				pthread_join(rt->reactors[j].thread, NULL);
			}
			goto fail;
		}
	}
	t->rdma = rt;
	return 0;
fail:
	rdma_tgt_free(rt);
	return ret;
}

static void nvmf_rdma_stop(struct gdx_nvmf_target *t)
{
	struct rdma_tgt *rt = t->rdma;

	if (!rt)
		return;
	for (unsigned i = 0; i < rt->nreactors; i++) {
		atomic_store(&rt->reactors[i].stop, true);
		nvmf_rdma_reactor_wake(&rt->reactors[i]);
	}
	for (unsigned i = 0; i < rt->nreactors; i++)
		pthread_join(rt->reactors[i].thread, NULL);
	rdma_tgt_free(rt);
	t->rdma = NULL;
}

const struct nvmf_transport_ops nvmf_rdma_ops = {
	.name = "rdma",
	.trtype = GDX_NVMF_TRTYPE_RDMA,
	.start = nvmf_rdma_start,
	.stop = nvmf_rdma_stop,
};
