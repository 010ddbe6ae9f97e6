/* SPDX-License-Identifier: MIT */
/*
 * The host controller's life: connect, the control thread, disconnect.  The
 * control thread sends Keep Alive, expires commands, and when a queue dies
 * tears the whole association down (as the Linux host does: a new admin
 * Connect gets a fresh controller) and reconnects with backoff, resubmitting
 * what was in flight.  The controller keeps its staging contexts, one per
 * device, across reconnects.  Building an association is assoc.c's, the
 * requests' way in is submit.c's, the parameters are params.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"
#define TICK_MS 50

/* One tick from now, as the CLOCK_REALTIME deadline pthread_cond_timedwait wants. */
void nh_tick_deadline(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += TICK_MS * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* ---- recovery and the control thread --------------------------------------- */

/*
 * The live association is broken: the control thread is to tear it down and
 * build a new one.  Only while it is live: a request during a recovery, or
 * from a queue that was never published or already torn down, is about an
 * association that is going or gone, and would tear down the next one.
 * Caller holds c->lock.
 */
void nh_ctrl_ask_recovery(struct nh_ctrl *c)
{
	if (c->state != GDX_NVMF_LIVE || c->recovering)
		return;
	c->need_recovery = true;
	pthread_cond_broadcast(&c->cv);
}

void nh_ctrl_queue_died(struct nh_ctrl *c, struct nh_queue *q)
{
	pthread_mutex_lock(&c->lock);
	if (c->admin == q || (q->qid && q->qid <= c->nioq && c->ioq[q->qid - 1] == q))
		nh_ctrl_ask_recovery(c);
	pthread_mutex_unlock(&c->lock);
}

static void teardown(struct nh_ctrl *c)
{
	struct nh_queue *admin, **ioq;
	unsigned nio;

	pthread_mutex_lock(&c->lock);
	c->recovering = true;
	admin = c->admin;
	ioq = c->ioq;
	nio = c->nioq;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_kill(ioq[i], GDX_EDISCONNECTED);
	if (admin)
		nh_queue_kill(admin, GDX_EDISCONNECTED);
	pthread_mutex_lock(&c->lock);
	while (c->users)
		pthread_cond_wait(&c->cv, &c->lock);
	c->admin = NULL;
	c->ioq = NULL;
	c->nioq = 0;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_close(ioq[i], nh_ctrl_requeue_or_fail);
	free(ioq);
	if (admin)
		nh_queue_close(admin, nh_ctrl_requeue_or_fail);
	pthread_mutex_lock(&c->lock);
	c->ka_inflight = false;
	pthread_mutex_unlock(&c->lock);
}

/* Detaches the whole pending list, so that it is walked without the lock. */
static struct nh_req *take_pending(struct nh_ctrl *c)
{
	struct nh_req *r;

	pthread_mutex_lock(&c->lock);
	r = c->pending;
	c->pending = NULL;
	c->pending_tail = &c->pending;
	pthread_mutex_unlock(&c->lock);
	return r;
}

static void fail_pending(struct nh_ctrl *c, int err)
{
	struct nh_req *r = take_pending(c);

	while (r) {
		struct nh_req *next = r->next;

		nh_req_complete(r, err);
		r = next;
	}
}

/* retry: after a reconnect (counted), else receivers' device reads (NH_SUBMIT_DEFER). */
static void resubmit_pending(struct nh_ctrl *c, bool retry)
{
	struct nh_req *r = take_pending(c);

	while (r) {
		struct nh_req *next = r->next;

		if (retry)
			gdx_counter_add(&c->retries, 1);
		nh_ctrl_submit(c, r);
		r = next;
	}
}

static void ka_done(struct nh_req *r)
{
	struct nh_ctrl *c = r->arg;

	pthread_mutex_lock(&c->lock);
	c->ka_inflight = false;
	if (r->result && c->state == GDX_NVMF_LIVE && !c->recovering) {
		GDX_WARN(SUB, "keep alive to %s failed: %s", c->p.subnqn, gdx_strerror(r->result));
		nh_ctrl_ask_recovery(c);
	}
	pthread_mutex_unlock(&c->lock);
	free(r);
}

static void send_keep_alive(struct nh_ctrl *c)
{
	struct nh_req *r = malloc(sizeof(*r));

	if (!r)
		return;
	nh_req_init(r, GDX_NVME_ADM_KEEP_ALIVE, 0, true);
	r->no_retry = true;
	r->timeout_ns = (uint64_t)c->p.kato_ms * 1000000;
	r->done = ka_done;
	r->arg = c;
	c->ka_inflight = true;
	nh_ctrl_submit(c, r);
}

static void check_timeouts(struct nh_ctrl *c)
{
	uint64_t now = gdx_now_ns();
	bool kill = false;

	pthread_mutex_lock(&c->lock);
	if (c->state != GDX_NVMF_LIVE || c->recovering || !c->admin) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* the control thread is the only one that frees queues, so they stay valid here */
	pthread_mutex_unlock(&c->lock);
	kill = nh_queue_check_timeouts(c->admin, now);
	for (unsigned i = 0; i < c->nioq; i++)
		kill |= nh_queue_check_timeouts(c->ioq[i], now);
	if (kill) {
		pthread_mutex_lock(&c->lock);
		nh_ctrl_ask_recovery(c);
		pthread_mutex_unlock(&c->lock);
	}
}

static unsigned backoff_ms(struct nh_ctrl *c)
{
	unsigned shift = GDX_MIN(c->backoff, 3u);

	return c->p.reconnect_delay_ms << shift;
}

static void recover(struct nh_ctrl *c)
{
	uint64_t now = gdx_now_ns();

	GDX_WARN(SUB, "controller %u of %s at %s:%s: connection lost, reconnecting", c->cntlid,
		 c->p.subnqn, c->p.addr, c->p.svc);
	pthread_mutex_lock(&c->lock);
	/* no new request from here on: the state is no longer live */
	c->need_recovery = false;
	c->state = GDX_NVMF_RECONNECTING;
	c->loss_since = now;
	c->backoff = 0;
	pthread_mutex_unlock(&c->lock);
	teardown(c);
	pthread_mutex_lock(&c->lock);
	c->next_attempt = gdx_now_ns() + (uint64_t)backoff_ms(c) * 1000000;
	pthread_mutex_unlock(&c->lock);
}

static void try_reconnect(struct nh_ctrl *c)
{
	uint64_t now;
	int rc;

	c->connect_dnr = false;
	rc = nh_ctrl_setup(c);
	now = gdx_now_ns();

	pthread_mutex_lock(&c->lock);
	if (!rc) {
		c->info.reconnects++;
		c->next_ka = now + (uint64_t)c->p.kato_ms * 500000;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
		GDX_WARN(SUB, "reconnected to %s at %s:%s as controller %u", c->p.subnqn,
			 c->p.addr, c->p.svc, c->cntlid);
		resubmit_pending(c, true);
		return;
	}
	c->backoff++;
	if (c->connect_dnr || rc == -EACCES ||
	    now - c->loss_since >= (uint64_t)c->p.ctrl_loss_tmo_ms * 1000000) {
		c->state = GDX_NVMF_FAILED;
		c->fail_err = GDX_EDISCONNECTED;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
		GDX_ERR(SUB, "giving up on %s at %s:%s after %llu ms (ctrl_loss_tmo_ms %u): %s; "
			"pending I/O fails", c->p.subnqn, c->p.addr, c->p.svc,
			(unsigned long long)((now - c->loss_since) / 1000000), c->p.ctrl_loss_tmo_ms,
			gdx_strerror(rc));
		fail_pending(c, GDX_EDISCONNECTED);
		return;
	}
	/* the last try falls on the deadline, not up to a backoff step past it */
	c->next_attempt = GDX_MIN(now + (uint64_t)backoff_ms(c) * 1000000,
				  c->loss_since + (uint64_t)c->p.ctrl_loss_tmo_ms * 1000000);
	pthread_mutex_unlock(&c->lock);
	GDX_INFO(SUB, "reconnect to %s:%s failed (%s); next try in %llu ms", c->p.addr, c->p.svc,
		 gdx_strerror(rc), (unsigned long long)((c->next_attempt - now) / 1000000));
}

static void *ctrl_main(void *arg)
{
	struct nh_ctrl *c = arg;

	nh_queue_never_wait();
	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		struct timespec ts;
		uint64_t now;

		nh_tick_deadline(&ts);
		if (!((c->need_recovery || c->resubmit) && c->state == GDX_NVMF_LIVE))
			pthread_cond_timedwait(&c->cv, &c->lock, &ts);
		if (c->stopping)
			break;
		now = gdx_now_ns();
		if (c->state == GDX_NVMF_LIVE && c->need_recovery) {
			pthread_mutex_unlock(&c->lock);
			recover(c);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state == GDX_NVMF_LIVE && c->resubmit) {
			c->resubmit = false;
			pthread_mutex_unlock(&c->lock);
			resubmit_pending(c, false);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state == GDX_NVMF_RECONNECTING && now >= c->next_attempt) {
			pthread_mutex_unlock(&c->lock);
			try_reconnect(c);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state != GDX_NVMF_LIVE)
			continue;
		pthread_mutex_unlock(&c->lock);
		check_timeouts(c);
		pthread_mutex_lock(&c->lock);
		if (c->state == GDX_NVMF_LIVE && c->p.kato_ms && !c->p.discovery &&
		    !c->ka_inflight && now >= c->next_ka) {
			c->next_ka = now + (uint64_t)c->p.kato_ms * 500000;
			pthread_mutex_unlock(&c->lock);
			send_keep_alive(c);
			pthread_mutex_lock(&c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- public entry points ------------------------------------------------------ */

/* Descriptors per agent ring: at least a queue's marks (mem/stage.c), a power of two. */
#define NH_AGENT_ENTRIES 256u

struct nh_stage {
	struct gdx_stage_ctx *ctx;
	struct nh_stage *next;
};

int nh_ctrl_stage(struct nh_ctrl *c, struct gdx_device *dev, bool late,
		  struct gdx_stage_ctx **out)
{
	struct gdx_stage_ctx_opts o;
	struct nh_stage *s;
	int rc = 0;

	pthread_mutex_lock(&c->stage_lock);
	for (s = c->stages; s && gdx_stage_ctx_device(s->ctx) != dev; s = s->next)
		;
	if (s)
		goto out;
	s = calloc(1, sizeof(*s));
	if (!s) {
		rc = -ENOMEM;
		goto out;
	}
	gdx_stage_ctx_opts_init(&o, sizeof(o));
	/* one agent per controller: its rings' sources are pinned memory of its own device */
	if (!c->agent_tried && c->p.copy_agent && c->p.nr_io_queues) {
		c->agent_tried = true;
		o.agent = true;
		/* one that cannot start leaves the queues on streams (WORD): slower, not broken */
		o.agent_required = false;
		o.lanes = c->p.nr_io_queues;
		o.workers = GDX_MIN(c->p.copy_agent, o.lanes);
		o.entries = NH_AGENT_ENTRIES;
		while (o.entries < c->p.bounce_chunks + 1)
			o.entries *= 2;
		/* a worker serves 64 rings at most */
		o.workers = GDX_MAX(o.workers, (o.lanes + 63) / 64);
	}
	rc = gdx_stage_ctx_open(dev, &o, &s->ctx);
	if (rc) {
		free(s);
		goto out;
	}
	s->next = c->stages;
	c->stages = s;
	if (late) {
		/* decision D1 (issue 18): set up on the posting thread, never a receiver */
		if (!gdx_counter_get(&c->stage_late_opens))
			GDX_INFO(SUB, "%s: device memory of %s, not named at connect: staging "
				 "set up at its first I/O", c->p.subnqn, gdx_device_name(dev));
		gdx_counter_add(&c->stage_late_opens, 1);
	}
out:
	*out = s ? s->ctx : NULL;
	pthread_mutex_unlock(&c->stage_lock);
	return rc;
}

bool nh_ctrl_stage_agent(struct gdx_stage_ctx *ctx)
{
	return gdx_stage_ctx_has_agent(ctx) && !gdx_stage_ctx_status(ctx);
}

static void ctrl_free(struct nh_ctrl *c)
{
	/* the queues are closed: every copy they posted has landed or failed */
	while (c->stages) {
		struct nh_stage *s = c->stages;

		c->stages = s->next;
		if (gdx_stage_ctx_close(s->ctx))
			GDX_ERR(SUB, "the copy agent did not stop");
		free(s);
	}
	pthread_mutex_destroy(&c->stage_lock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->alock);
	pthread_cond_destroy(&c->acv);
	nvmf_auth_wipe(c, sizeof(*c));
	free(c);
}

int nh_ctrl_create(const char *addr, const char *svc, const char *subnqn,
		   const struct gdx_nvmf_host_opts *o, struct nh_ctrl **out)
{
	struct nh_ctrl *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->alock, NULL);
	pthread_cond_init(&c->acv, NULL);
	pthread_mutex_init(&c->stage_lock, NULL);
	c->pending_tail = &c->pending;
	c->retries.name = "resubmitted";
	c->stage_late_opens.name = "stage_late_opens";
	rc = nh_params_parse(&c->p, addr, svc, subnqn, o);
	/* the device named at connect: its staging (and copy agent) before any I/O */
	if (!rc && c->p.dev) {
		struct gdx_stage_ctx *ctx;

		rc = nh_ctrl_stage(c, c->p.dev, false, &ctx);
	}
	if (!rc)
		rc = nh_ctrl_setup(c);
	if (rc) {
		GDX_ERR(SUB, "cannot connect to %s at %s:%s: %s", subnqn, addr, svc, gdx_strerror(rc));
		ctrl_free(c);
		return rc;
	}
	GDX_INFO(SUB, "connected to %s at %s:%s: controller %u, %u I/O queues of depth %u%s%s",
		 subnqn, addr, svc, c->cntlid, c->nioq, c->info.queue_depth,
		 c->p.hdgst ? ", header digest" : "", c->p.ddgst ? ", data digest" : "");
	*out = c;
	return 0;
}

void nh_ctrl_destroy(struct nh_ctrl *c)
{
	struct nh_queue **ioq;
	unsigned nio;

	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	c->fail_err = GDX_EDISCONNECTED;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	/* new submissions now fail at once; wake the ones blocked in an I/O queue */
	pthread_mutex_lock(&c->lock);
	ioq = c->ioq;
	nio = c->nioq;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_kill(ioq[i], GDX_EDISCONNECTED);
	pthread_mutex_lock(&c->lock);
	while (c->users)
		pthread_cond_wait(&c->cv, &c->lock);
	c->ioq = NULL;
	c->nioq = 0;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_close(ioq[i], nh_ctrl_requeue_or_fail);
	free(ioq);
	fail_pending(c, GDX_EDISCONNECTED);
	if (c->admin) {
		nh_ctrl_shutdown(c);
		nh_queue_close(c->admin, nh_ctrl_requeue_or_fail);
		c->admin = NULL;
	}
	nh_async_stop(c);
	ctrl_free(c);
}

int gdx_nvmf_connect(const char *addr, const char *svc, const char *subnqn,
		     const struct gdx_nvmf_host_opts *o, struct gdx_nvmf_ctrl **out)
{
	struct nh_ctrl *c;
	int rc;

	if (!out)
		return -EINVAL;
	rc = nh_ctrl_create(addr, svc, subnqn, o, &c);
	if (rc)
		return rc;
	c->next_ka = gdx_now_ns() + (uint64_t)c->p.kato_ms * 500000;
	rc = pthread_create(&c->thread, NULL, ctrl_main, c);
	if (rc) {
		nh_ctrl_destroy(c);
		return -rc;
	}
	c->thread_started = true;
	*out = (struct gdx_nvmf_ctrl *)c;
	return 0;
}

int gdx_nvmf_disconnect(struct gdx_nvmf_ctrl *ctrl)
{
	if (!ctrl)
		return -EINVAL;
	nh_ctrl_destroy((struct nh_ctrl *)ctrl);
	return 0;
}

enum gdx_nvmf_ctrl_state gdx_nvmf_ctrl_state(struct gdx_nvmf_ctrl *ctrl)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	enum gdx_nvmf_ctrl_state s;

	pthread_mutex_lock(&c->lock);
	s = c->state;
	pthread_mutex_unlock(&c->lock);
	return s;
}

int gdx_nvmf_ctrl_info(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_ctrl_info *info)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;

	if (!c || !info)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	*info = c->info;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int gdx_nvmf_ctrl_stats_json(struct gdx_nvmf_ctrl *ctrl, char *buf, size_t len)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	char rdma[1024] = "";
	int n;

	if (!c || !buf || !len)
		return -EINVAL;
	/*
	 * Over RDMA with a device: whether the NIC registers its memory (path
	 * direct) or not and why (path bounce, or refused with require_direct),
	 * as the first I/O queue's probe found.  why is errno text: escaped.
	 */
	pthread_mutex_lock(&c->stage_lock);
	if (c->p.rdma && c->p.dev && c->rdma_probed[0]) {
		json_object *why = json_object_new_string(c->rdma_why);

		snprintf(rdma, sizeof(rdma), "\"rdma_nic\": \"%s\", \"rdma_device_reg\": %s, "
			 "\"rdma_why\": %s, ", c->rdma_probed,
			 c->rdma_nodirect ? "false" : "true",
			 why ? json_object_to_json_string_ext(why, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE)
			     : "\"\"");
		json_object_put(why);
	}
	pthread_mutex_unlock(&c->stage_lock);
	pthread_mutex_lock(&c->lock);
	n = snprintf(buf, len, "{\"subnqn\": \"%s\", \"cntlid\": %u, \"state\": \"%s\", "
		     "\"reconnects\": %u, \"resubmitted\": %llu, \"stage_late_opens\": %llu, "
		     "%s\"queues\": [", c->p.subnqn,
		     c->cntlid, c->state == GDX_NVMF_LIVE ? "live" :
		     c->state == GDX_NVMF_RECONNECTING ? "reconnecting" : "failed",
		     c->info.reconnects, (unsigned long long)gdx_counter_get(&c->retries),
		     (unsigned long long)gdx_counter_get(&c->stage_late_opens), rdma);
	for (unsigned i = 0; c->admin && i <= c->nioq && n > 0 && (size_t)n < len; i++) {
		struct nh_queue *q = i ? c->ioq[i - 1] : c->admin;

		if (i)
			n += snprintf(buf + n, len - (size_t)n, ", ");
		if ((size_t)n < len)
			n += nh_queue_counters_json(q, buf + n, len - (size_t)n);
	}
	if (n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "]}");
	pthread_mutex_unlock(&c->lock);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}
