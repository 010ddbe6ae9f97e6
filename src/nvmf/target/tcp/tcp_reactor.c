/* SPDX-License-Identifier: MIT */
/*
 * NVMe/TCP target: the reactors.  One thread per configured core, each with
 * an epoll set, an eventfd to be woken and an io_uring (nvmf_ioctx); its
 * loop polls, then sleeps, dispatches events, runs the once-a-second timers
 * (stalled sends and data, keep-alive, handshake time, buffer trimming),
 * flushes the connections an iteration touched and, in follow mode, moves
 * itself to the CPU its traffic comes from.  Starting and stopping the
 * transport, its listeners.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "nvmf/target/tcp/tcp_int.h"
#include "nvmf/target/transport.h"

void nvmf_tcp_reactor_wake(struct tcp_reactor *r)
{
	uint64_t one = 1;

	if (write(r->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		GDX_WARN("nvmf", "reactor %u wake: %s", r->id, strerror(errno));
}

void nvmf_tcp_aen_kick(void *handle)
{
	struct tcp_conn *c = handle;

	atomic_store(&c->r->aen, true);
	nvmf_tcp_reactor_wake(c->r);
}

static void deliver_aens(struct tcp_reactor *r)
{
	if (!atomic_exchange(&r->aen, false))
		return;
	for (struct tcp_conn *c = r->conns; c; c = c->next)
		if (!c->dead && c->sq.ctrl && c->sq.qid == 0)
			nvmf_ctrl_aen_deliver(&c->sq);
}

/*
 * Once a second: queues the host takes no data from (nvmf.target.stall_timeout_ms),
 * keep-alive expiry, connections that never connected
 * (nvmf.target.handshake_timeout_ms).
 */
static void tick(struct tcp_reactor *r)
{
	uint64_t now = gdx_now_ns();

	for (struct tcp_conn *c = r->conns, *n; c; c = n) {
		n = c->next;
		if (c->dead)
			continue;
		if ((c->tx_head && now - c->tx_moved_ns > r->tgt->stall_ns) ||
		    (c->nr2t && now - c->rx_moved_ns > r->tgt->stall_ns)) {
			char why[112];

			snprintf(why, sizeof(why), "no data %s for %" PRIu64
				 " ms: nvmf.target.stall_timeout_ms",
				 c->tx_head && now - c->tx_moved_ns > r->tgt->stall_ns ?
					 "taken" : "sent for an R2T",
				 r->tgt->stall_ns / 1000000);
			gdx_counter_add(&r->tgt->ctr[TGT_CTR_STALLS], 1);
			nvmf_tcp_conn_close(c, why);
			continue;
		}
		/* over the target's budget: buffers kept for reuse go; a connection held
		 * for it looks again (others' buffers may have gone meanwhile) */
		if (nvmf_target_buf_over(r->tgt))
			nvmf_tcp_conn_trim(c);
		if (c->bufs.wait_head)
			mark_dirty(c);
		if (c->sq.ctrl) {
			nvmf_target_sq_stats(&c->sq, &c->sq_stats);
			if (nvmf_sq_expired(&c->sq, now))
				nvmf_tcp_conn_close(c, "controller failed or keep-alive expired");
		} else if (now - c->born_ns > r->tgt->handshake_ns) {
			char why[80];

			snprintf(why, sizeof(why), "no %sICReq and Connect within %" PRIu64 " ms",
				 c->tls || c->tls_peek ? "TLS handshake, " : "",
				 r->tgt->handshake_ns / 1000000);
			nvmf_tcp_conn_close(c, why);
		}
	}
}

static void flush_dirty(struct tcp_reactor *r)
{
	while (r->dirty) {
		struct tcp_conn *c = r->dirty;

		r->dirty = c->dirty_next;
		c->dirty = false;
		if (!c->dead)
			nvmf_tcp_conn_flush(c);
		if (!c->dead && c->bufs.wait_head)
			nvmf_tcp_conn_unblock(c);
		if (c->dirty)
			continue;	/* closed or more to send: back on the list */
		if (c->dead)
			nvmf_tcp_conn_reap(c);
		else if (c->move_to && !c->tx_head && !c->inflight)
			nvmf_tcp_conn_move(c);
	}
}

/* Moves reactor r onto CPU want, or home (-1); depth: what it saw, for the log. */
static void go(struct tcp_reactor *r, int want, unsigned depth)
{
	cpu_set_t set;

	if (want == r->at)
		return;
	if (want >= 0) {
		CPU_ZERO(&set);
		CPU_SET(want, &set);
	} else {
		set = r->home;
	}
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
		GDX_DBG("nvmf", "reactor %u: cannot move to CPU %d", r->id, want);
		return;
	}
	GDX_DBG("nvmf", "reactor %u: %s %d (depth %u)", r->id,
		want >= 0 ? "follows to CPU" : "home from", want >= 0 ? want : r->at, depth);
	r->at = want;
	/* counted across the host's CPU changes: a reactor hopping between them probes too */
	if (want < 0)
		r->followed = 0;
}

/*
 * Follow mode.  While its busiest connection keeps at most SHALLOW_DEPTH
 * commands in flight (for FOLLOW_AFTER busy periods in a row), a reactor
 * runs on the CPU that connection's packets arrive on (where a host on this
 * machine submits, or where the NIC's receive queue is served): the round
 * trip then needs no wake-up of another core, which is also where nvmet-tcp
 * runs a queue's work.  Deeper queues send it home (--cpus, or the CPUs it
 * may run on), so that target and host work proceed in parallel; so does an
 * idle period, which ends the run.
 *
 * On its host's CPU a reactor may not see the host's depth at all: the two
 * take turns, each command answered before the next is sent, so a host
 * that queues 32 looks as shallow as one that keeps one, and the reactor
 * would stay.  Every PROBE_EVERY periods it follows, it spends one at home,
 * where host and target run side by side and a deep queue shows.
 */
static void place(struct tcp_reactor *r)
{
	struct tcp_conn *busiest = NULL;
	unsigned depth = 0;
	int want = -1, cpu = -1;
	socklen_t sl = sizeof(cpu);

	for (struct tcp_conn *c = r->conns; c; c = c->next) {
		if (!c->dead && c->win_cmds && (!busiest || c->win_cmds > busiest->win_cmds))
			busiest = c;
		depth = GDX_MAX(depth, c->win_depth);
		c->win_cmds = c->win_depth = 0;
	}
	if (!busiest) {
		r->shallow = 0;
		go(r, -1, 0);
		return;
	}
	if (getsockopt(busiest->fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &sl) || cpu < 0 ||
	    cpu >= CPU_SETSIZE)
		cpu = -1;
	/* home is the host's CPU too (a one-CPU machine): spinning there starves it */
	r->shares_home = cpu >= 0 && CPU_COUNT(&r->home) == 1 && CPU_ISSET(cpu, &r->home);
	/*
	 * A target faster than its host sees few commands in flight even when
	 * the host queues many, now and then none: follow only after a run of
	 * shallow periods, go home at the first deep one.
	 */
	r->shallow = depth > SHALLOW_DEPTH ? 0 : GDX_MIN(r->shallow + 1, (unsigned)FOLLOW_AFTER);
	if (r->shallow >= FOLLOW_AFTER)
		want = cpu;
	if (want >= 0 && r->at >= 0 && ++r->followed >= PROBE_EVERY)
		want = -1;	/* the probe: one period at home */
	go(r, want, depth);
}

static void *reactor_main(void *arg)
{
	struct tcp_reactor *r = arg;
	/* one clock read per iteration (two after a sleep when polling): on
	 * some machines it is a system call */
	uint64_t now = gdx_now_ns(), next_tick = now + 1000000000ull, last_event = 0, window = 0;
	uint64_t prev;
	uint64_t next_place = 0, cap = r->tgt->poll_ns;
	bool lat = r->tgt->lat_stats;

	r->at = -1;
	pthread_getaffinity_np(pthread_self(), sizeof(r->home), &r->home);
	while (!atomic_load(&r->stop)) {
		struct epoll_event evs[64];
		uint64_t wake_at = r->accept_resume_ns ? GDX_MIN(next_tick, r->accept_resume_ns) :
							 next_tick;
		int timeout = now >= wake_at ? 0 : (int)((wake_at - now) / 1000000) + 1;
		int n;

		/* a reactor sharing its CPU with the host never spins */
		if (r->at < 0 && !r->shares_home && now - last_event < window)
			timeout = 0;
		n = epoll_wait(r->epfd, evs, 64, timeout);
		r->wake_ns = timeout && (cap || lat) ? gdx_now_ns() : now;
		/* gaps count from the end of the last busy iteration; an event caught
		 * while polling leaves the window as it is */
		if (cap && timeout) {
			uint64_t gap = r->wake_ns - last_event;

			if (n > 0)
				window = gdx_poll_adapt(window, gap, cap);
			else if (gap > cap)
				window /= 2;
		}

		for (int i = 0; i < n; i++) {
			struct ev *ev = evs[i].data.ptr;

			switch (ev->kind) {
			case EV_LISTEN:
				nvmf_tcp_accept(r, GDX_CONTAINER_OF(ev, struct listener, ev));
				break;
			case EV_WAKE: {
				uint64_t v;

				if (read(r->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					GDX_WARN("nvmf", "wake read: %s", strerror(errno));
				nvmf_tcp_take_handoffs(r);
				deliver_aens(r);
				break;
			}
			case EV_IOCTX:
				nvmf_ioctx_reap(r->ioctx);
				break;
			case EV_CONN: {
				struct tcp_conn *c = GDX_CONTAINER_OF(ev, struct tcp_conn, ev);

				if (c->dead)
					break;
				if (evs[i].events & (EPOLLERR | EPOLLHUP) &&
				    !(evs[i].events & EPOLLIN)) {
					nvmf_tcp_conn_close(c, "socket error");
					break;
				}
				if (c->tls_peek || c->tls) {
					nvmf_tcp_conn_tls(c);
					break;
				}
				if (evs[i].events & EPOLLOUT)
					mark_dirty(c);
				if (evs[i].events & EPOLLIN) {
					nvmf_tcp_conn_read(c);
					nvmf_tcp_count_pdus(c);
				}
				break;
			}
			}
		}
		nvmf_ioctx_flush(r->ioctx);
		flush_dirty(r);
		prev = now;
		now = gdx_now_ns();
		if (n > 0)
			last_event = now;
		if (lat) {
			if (timeout) {
				lat_add(r, TGT_LAT_SLEEPS, 1);
				lat_add(r, TGT_LAT_SLEEP_NS, r->wake_ns - prev);
			}
			if (n > 0) {
				lat_add(r, TGT_LAT_WAKES, 1);
				lat_add(r, TGT_LAT_WAKE_CMDS, r->iter_cmds);
				lat_add(r, TGT_LAT_BUSY_NS, now - r->wake_ns);
			} else if (!timeout) {
				lat_add(r, TGT_LAT_POLL_NS, now - prev);
			}
		}
		r->iter_cmds = 0;
		if (r->tgt->follow && now >= next_place) {
			place(r);
			next_place = now + PLACE_NS;
		}
		if (r->accept_resume_ns && now >= r->accept_resume_ns)
			nvmf_tcp_accept_resume(r);
		if (now >= next_tick) {
			tick(r);
			flush_dirty(r);
			next_tick = now + 1000000000ull;
		}
	}
	return NULL;
}

static int listen_on(struct nvmf_port *p, int *bound)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, one = 1, ret;

	ret = getaddrinfo(p->traddr, p->trsvcid, &hints, &ai);
	if (ret) {
		GDX_ERR("nvmf", "port %u: bad address %s:%s: %s", p->portid, p->traddr, p->trsvcid,
			gai_strerror(ret));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		freeaddrinfo(ai);
		return ret;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
		ret = -errno;
		GDX_ERR("nvmf", "port %u: cannot listen on %s:%s: %s", p->portid, p->traddr,
			p->trsvcid, strerror(errno));
		close(fd);
		freeaddrinfo(ai);
		return ret;
	}
	freeaddrinfo(ai);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*bound = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
						 ((struct sockaddr_in6 *)&ss)->sin6_port);
	if (!strcmp(p->trsvcid, "0"))
		snprintf(p->trsvcid, sizeof(p->trsvcid), "%d", *bound);
	GDX_INFO("nvmf", "port %u listening on %s%s%s:%d", p->portid, p->adrfam ==
		 GDX_NVMF_ADRFAM_IPV6 ? "[" : "", p->traddr, p->adrfam == GDX_NVMF_ADRFAM_IPV6 ?
		 "]" : "", *bound);
	return fd;
}

static int reactor_init(struct gdx_nvmf_target *t, struct tcp_reactor *r, unsigned id)
{
	struct epoll_event e = { .events = EPOLLIN };
	int ret;

	r->tgt = t;
	r->id = id;
	r->reserve_fd = -1;
	r->wake_ev.kind = EV_WAKE;
	r->io_ev.kind = EV_IOCTX;
	pthread_mutex_init(&r->lock, NULL);
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->epfd < 0 || r->wakefd < 0)
		return -errno;
	e.data.ptr = &r->wake_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &e))
		return -errno;
	ret = nvmf_ioctx_create(&r->ioctx);
	if (ret) {
		GDX_WARN("nvmf", "reactor %u: no io_uring (%s): file namespaces do synchronous I/O",
			 id, gdx_strerror(ret));
		r->ioctx = NULL;
		return 0;
	}
	e.data.ptr = &r->io_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, nvmf_ioctx_fd(r->ioctx), &e))
		return -errno;
	return 0;
}

static void reactor_fini(struct tcp_reactor *r)
{
	for (unsigned i = 0; i < r->nhandoff; i++) {
		if (r->handoff[i].conn)
			nvmf_tcp_conn_link(r, r->handoff[i].conn);
		else
			close(r->handoff[i].fd);
	}
	r->nhandoff = 0;
	for (struct tcp_conn *c = r->conns; c; c = c->next)
		nvmf_tcp_conn_close(c, "target stopping");
	flush_dirty(r);
	/* connections whose requests a backend still holds: wait up to 5 s */
	for (int i = 0; r->conns && r->ioctx && i < 5000; i++) {
		usleep(1000);
		nvmf_ioctx_reap(r->ioctx);
		flush_dirty(r);
	}
	for (struct tcp_conn *c = r->conns; c; c = c->next) {
		GDX_WARN("nvmf", "%s: %u requests never completed", c->peer, c->inflight);
		c->inflight = 0;
		mark_dirty(c);
	}
	flush_dirty(r);
	free(r->handoff);
	/* pages still lent to sockets stay until the kernel drops them */
	if (r->zeroes)
		munmap(r->zeroes, r->tgt->core.max_io);
	if (r->reserve_fd >= 0)
		close(r->reserve_fd);
	nvmf_ioctx_destroy(r->ioctx);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->wakefd >= 0)
		close(r->wakefd);
	pthread_mutex_destroy(&r->lock);
}

/* reactors_lock held. */
static void lat_sum_locked(struct gdx_nvmf_target *t, uint64_t *out)
{
	for (unsigned k = 0; k < TGT_LAT_NR; k++) {
		out[k] = atomic_load_explicit(&t->lat_done.v[k], memory_order_relaxed);
		for (unsigned i = 0; t->reactors && i < t->nreactors; i++)
			out[k] += atomic_load_explicit(&t->reactors[i].lat.v[k],
						       memory_order_relaxed);
	}
}

/* Frees the reactors (threads joined), keeping their sums. */
static void reactors_free(struct gdx_nvmf_target *t)
{
	uint64_t v[TGT_LAT_NR];

	pthread_mutex_lock(&t->reactors_lock);
	lat_sum_locked(t, v);
	for (unsigned k = 0; k < TGT_LAT_NR; k++)
		atomic_store_explicit(&t->lat_done.v[k], v[k], memory_order_relaxed);
	free(t->reactors);
	t->reactors = NULL;
	pthread_mutex_unlock(&t->reactors_lock);
}

static int nvmf_tcp_start(struct gdx_nvmf_target *t)
{
	struct tcp_reactor *r0;
	int ret;

	if (!nvmf_target_nports(t, GDX_NVMF_TRTYPE_TCP))
		return 0;
	r0 = calloc(t->nreactors, sizeof(*t->reactors));
	if (!r0)
		return -ENOMEM;
	pthread_mutex_lock(&t->reactors_lock);
	t->reactors = r0;
	pthread_mutex_unlock(&t->reactors_lock);
	for (unsigned i = 0; i < t->nreactors; i++) {
		t->reactors[i].cpu = nvmf_target_reactor_cpu(t, i);
		t->reactors[i].epfd = t->reactors[i].wakefd = -1;
		ret = reactor_init(t, &t->reactors[i], i);
		if (ret)
			goto fail;
	}
	for (unsigned i = 0; i < t->core.nports; i++) {
		struct listener *l = &r0->listeners[r0->nlisteners];
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &l->ev };
		int fd;

		if (t->core.ports[i].trtype != GDX_NVMF_TRTYPE_TCP)
			continue;
		fd = listen_on(&t->core.ports[i], &t->bound_port[i]);
		if (fd < 0) {
			ret = fd;
			goto fail;
		}
		l->ev.kind = EV_LISTEN;
		l->fd = fd;
		l->port = &t->core.ports[i];
		r0->nlisteners++;
		if (epoll_ctl(r0->epfd, EPOLL_CTL_ADD, fd, &e)) {
			ret = -errno;
			goto fail;
		}
	}
	r0->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (r0->reserve_fd < 0) {
		ret = -errno;
		goto fail;
	}
	for (unsigned i = 0; i < t->nreactors; i++) {
		struct tcp_reactor *r = &t->reactors[i];
		char name[16];

		snprintf(name, sizeof(name), "gdx-nvmf-%u", i % 256u); /* reactors <= 256 */
		ret = gdx_thread_start_on(&r->thread, r->cpu, reactor_main, r, name, "nvmf");
		if (ret) {
			for (unsigned j = 0; j < i; j++) {
				atomic_store(&t->reactors[j].stop, true);
				nvmf_tcp_reactor_wake(&t->reactors[j]);
				pthread_join(t->reactors[j].thread, NULL);
			}
			goto fail;
		}
	}
	return 0;
fail:
	for (unsigned i = 0; i < r0->nlisteners; i++)
		close(r0->listeners[i].fd);
	r0->nlisteners = 0;
	for (unsigned i = 0; i < t->nreactors; i++)
		reactor_fini(&t->reactors[i]);
	reactors_free(t);
	return ret;
}

static void nvmf_tcp_stop(struct gdx_nvmf_target *t)
{
	if (!t->reactors)
		return;
	for (unsigned i = 0; i < t->nreactors; i++) {
		atomic_store(&t->reactors[i].stop, true);
		nvmf_tcp_reactor_wake(&t->reactors[i]);
	}
	for (unsigned i = 0; i < t->nreactors; i++)
		pthread_join(t->reactors[i].thread, NULL);
	for (unsigned i = 0; i < t->reactors[0].nlisteners; i++)
		close(t->reactors[0].listeners[i].fd);
	for (unsigned i = 0; i < t->nreactors; i++)
		reactor_fini(&t->reactors[i]);
	reactors_free(t);
}

const struct nvmf_transport_ops nvmf_tcp_ops = {
	.name = "tcp",
	.trtype = GDX_NVMF_TRTYPE_TCP,
	.start = nvmf_tcp_start,
	.stop = nvmf_tcp_stop,
};

void nvmf_tcp_lat_sum(struct gdx_nvmf_target *t, uint64_t *out)
{
	pthread_mutex_lock(&t->reactors_lock);
	lat_sum_locked(t, out);
	pthread_mutex_unlock(&t->reactors_lock);
}
