/* SPDX-License-Identifier: MIT */
/*
 * The pipeline engine.  Three kinds of thread touch a batch ("job"):
 *
 *   the producer  admits it (gdx_pipeline_submit), enqueues its leading run
 *                 of device stages, and later harvests it: waits for it to
 *                 leave the last stage, runs the device stages' checks and
 *                 collects their timings;
 *   host stage k  takes it from its queue once stage k-1 is done, runs the
 *                 callback, then enqueues the following run of device stages;
 *   the device    runs the enqueued work, ordered by stream waits on events.
 *
 * A job is handled by one CPU thread at a time and handed on through a
 * queue or the `released` flag, so its fields need no lock of their own.
 * Each stream receives its batches from exactly one thread (the producer or
 * the host stage before it), which keeps every stream in batch order.
 *
 * Jobs live in a ring of R = S + ahead entries.  An entry's events are
 * re-recorded only when the entry is reused, which the producer does only
 * after harvesting the batch that last used it; so a wait on an entry's
 * event always refers to the batch it was enqueued for.
 *
 * A slot comes back to a device first stage without any CPU thread on the
 * way: after a device last stage through an event wait, after a tail of host
 * stages through a stream wait on a pinned counter of released batches that
 * the last stage's thread stores (see released_word_safe).  The producer
 * then runs S + ahead batches ahead and its wake-ups stay off the step.  Every
 * thread that waits (for a job in its queue, an event, a released batch)
 * first polls for spin_ns: on a virtual machine a sleeping thread takes tens
 * of microseconds to wake, which a 50 us step cannot absorb.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gdx/pipeline.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"

#define NSTAGE GDX_PIPELINE_MAX_STAGES
#define SPIN_US_MAX 100000

struct job;

/*
 * A wait of a CPU thread for a device stage's work: its end event, and the
 * stage's done word where its stream stores one (word NULL otherwise).
 * other: the stage is another batch's, whose ring entry may be reused and
 * its event re-recorded for a later batch before the wait ends.
 */
struct dev_wait {
	struct gdx_event *ev;	/* NULL: nothing to wait for */
	const uint32_t *word;
	uint32_t value;
	bool other;
};

/*
 * What stage k's callbacks see of a job.  One per stage, filled at admission
 * and never changed while the batch is in flight, so a host function a stage
 * enqueued may still read it (gdx_pipeline_job_fail) after the CPU has moved
 * the batch on to later stages.
 */
struct job_view {
	struct gdx_pipeline_job pub;
	struct job *j;
};

struct job {
	struct gdx_pipeline_job pub;	/* the batch; .stage unused */
	struct job_view view[NSTAGE];
	struct gdx_event *start[NSTAGE];	/* timing only */
	struct gdx_event *end[NSTAGE];		/* device stages: work done */
	uint64_t t0[NSTAGE], t1[NSTAGE];	/* host stages: host clock */
	bool recorded[NSTAGE];	/* end[k] recorded for this batch */
	bool wrote[NSTAGE];	/* done_words[k] is to reach batch + 1 after end[k] */
	bool ran[NSTAGE];	/* stage k's work was run or enqueued */
	unsigned err_mask;	/* stages whose failure was counted */
	unsigned checked;	/* device checks done for stages < checked */
	struct dev_wait wait;	/* what the next host stage waits for */
	void *scratch[NSTAGE];
	/* Past the last stage (see advance); set under p->lock, polled without it. */
	bool released;
};

struct gdx_pipeline;

struct stage {
	struct gdx_pipeline *p;
	unsigned idx;
	char name[32];
	struct gdx_stage_desc d;
	struct gdx_stream *stream;
	bool own_stream;
	/* host stages */
	pthread_t thread;
	bool thread_up;
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct job **q;
	unsigned qhead, qcount;	/* qlock; qcount and quit also polled without it */
	bool quit;
	/* p->lock */
	uint64_t batches, skipped, errors, timed, total_ns, min_ns, max_ns, wait_ns;
	_Atomic uint64_t calls;	/* host stages: device calls on the thread */
};

struct gdx_pipeline {
	struct gdx_device *dev;
	unsigned nslots, nring, nstages;
	uint64_t warmup;
	int warmup_opt;
	unsigned time_every;	/* opts.timing */
	size_t slot_bytes;
	void *slot_buf[GDX_PIPELINE_MAX_SLOTS];
	void *slot_user[GDX_PIPELINE_MAX_SLOTS];
	struct stage stages[NSTAGE];
	struct job *jobs;
	bool started;
	uint64_t spin_ns;
	uint64_t poll_ns;	/* least time between two queries of a device event */
	/*
	 * Pinned: batches that have left a host last stage (low 32 bits), for
	 * a device first stage's stream to wait on; NULL in other shapes.
	 */
	uint32_t *released_word;
	/*
	 * Pinned, where the device can store to it: word k counts the batches
	 * whose device stage k is done, for a device stage followed by a host
	 * stage or last; its stream stores batch + 1 after the stage's work, so
	 * the thread waiting for it polls memory instead of querying the event.
	 */
	uint32_t *done_words;
	_Atomic uint64_t long_waits;

	/* producer side */
	pthread_mutex_t submit_lock;
	uint64_t submitted, harvested;

	pthread_mutex_t lock;
	pthread_cond_t cond;	/* a job released, stop, failure */
	atomic_bool failed;
	/* Batches from this one on are skipped: the earliest batch that failed. */
	_Atomic uint64_t skip_from;
	bool stopping;
	struct gdx_pipeline_error error;
	struct gdx_event *ref;	/* device clock origin */
	uint64_t ref_host_ns;	/* host clock origin */
	bool have_first;
	double t_first, t_last;	/* ns since the origins */
	uint64_t b_first, steady_n;	/* batches from b_first to the one done at t_last */
	unsigned inflight_max;
	uint64_t producer_wait_ns;
	_Atomic uint64_t producer_calls, producer_poll_calls;
	_Atomic uint64_t nowait_query_ns;	/* last event query of a NOWAIT harvest */
};

static bool is_dev(const struct gdx_pipeline *p, unsigned k)
{
	return p->stages[k].d.kind == GDX_STAGE_DEVICE;
}

/* Whether batch b's device stages are timed with events. */
static bool timed_batch(const struct gdx_pipeline *p, uint64_t b)
{
	return p->time_every && b % p->time_every == 0;
}

/* After a failure, batches before the failed one still finish; the rest are skipped. */
static bool skipped(struct gdx_pipeline *p, const struct job *j)
{
	return atomic_load(&p->failed) && j->pub.batch >= atomic_load(&p->skip_from);
}

/* ---- waiting ---------------------------------------------------------------- */

/*
 * Polls ready(arg) for up to p->spin_ns, at most once per gap_ns; true once
 * it holds.  A gap keeps a thread polling a device event from calling into
 * the driver back to back, where it competes for the driver's locks with the
 * producer's enqueues.
 */
static bool spin_for(struct gdx_pipeline *p, bool (*ready)(void *), void *arg, uint64_t gap_ns)
{
	uint64_t now, until, next;

	if (ready(arg))
		return true;
	if (!p->spin_ns)
		return false;
	now = gdx_now_ns();
	until = now + p->spin_ns;
	next = now + gap_ns;
	for (;;) {
		gdx_cpu_relax();
		now = gdx_now_ns();
		if (now >= next) {
			if (ready(arg))
				return true;
			next = now + gap_ns;
		}
		if (now >= until)
			return false;
	}
}

static bool job_released(void *arg)
{
	return __atomic_load_n(&((struct job *)arg)->released, __ATOMIC_ACQUIRE);
}

/* Waits (p->lock held on return) until j is released, or only polls with nowait. */
static void wait_released_locked(struct gdx_pipeline *p, struct job *j, bool nowait)
{
	if (!nowait && !spin_for(p, job_released, j, 0))
		atomic_fetch_add(&p->long_waits, 1);
	pthread_mutex_lock(&p->lock);
	while (!j->released && !nowait)
		pthread_cond_wait(&p->cond, &p->lock);
}

struct ev_poll {
	struct gdx_event *e;
	int ret;
};

static bool event_done(void *arg)
{
	struct ev_poll *ep = arg;

	ep->ret = gdx_event_query(ep->e);
	return ep->ret != -EBUSY;
}

struct word_poll {
	const uint32_t *w;
	uint32_t v;
};

static bool word_reached(void *arg)
{
	struct word_poll *wp = arg;

	return (int32_t)(__atomic_load_n(wp->w, __ATOMIC_ACQUIRE) - wp->v) >= 0;
}

/* Sleep between two looks at a done word once the spin time is over. */
#define WORD_SLEEP_NS 20000
/* A NOWAIT harvest whose done word has not moved asks the stream for an error this often. */
#define NOWAIT_QUERY_NS 100000

/* What waiting for device stage k of job j takes; on the thread that enqueued it. */
static struct dev_wait stage_wait(struct gdx_pipeline *p, struct job *j, unsigned k, bool other)
{
	struct dev_wait w = { NULL, NULL, 0, other };

	if (!is_dev(p, k) || !j->recorded[k])
		return w;
	w.ev = j->end[k];
	if (j->wrote[k]) {
		w.word = &p->done_words[k];
		w.value = (uint32_t)(j->pub.batch + 1);
	}
	return w;
}

/*
 * Waits for w: polls the done word (no call into the driver), else the
 * event (a query per poll_ns), for the spin time; then gdx_event_synchronize.
 * The word names the batch, so a wait for another batch's stage (a host
 * first stage's, for the slot's previous batch) never asks the event whether
 * it is done, which may by then stand for a later batch that waits for this
 * one: only whether the stream failed, sleeping between looks at the word.
 */
static int wait_dev(struct gdx_pipeline *p, const struct dev_wait *w)
{
	struct word_poll wp = { w->word, w->value };
	struct ev_poll ep = { w->ev, 0 };
	int ret;

	if (w->word ? spin_for(p, word_reached, &wp, 0) :
	    spin_for(p, event_done, &ep, p->poll_ns))
		return w->word ? 0 : ep.ret;
	atomic_fetch_add(&p->long_waits, 1);
	if (!w->other || !w->word)
		return gdx_event_synchronize(w->ev);
	for (;;) {
		if (word_reached(&wp))
			return 0;
		ret = gdx_event_query(w->ev);
		if (ret && ret != -EBUSY)
			return ret;
		nanosleep(&(struct timespec){ .tv_nsec = WORD_SLEEP_NS }, NULL);
	}
}

void gdx_stage_desc_init(struct gdx_stage_desc *d, size_t struct_size)
{
	memset(d, 0, struct_size);
	if (struct_size >= sizeof(*d))
		d->struct_size = sizeof(*d);
	else
		d->struct_size = struct_size;
}

void gdx_pipeline_opts_init(struct gdx_pipeline_opts *o, size_t struct_size)
{
	struct gdx_pipeline_opts def = {
		.struct_size = sizeof(def),
		.nslots = 3,
		.ahead = (unsigned)-1,
		.timing = 1,
		.warmup = -1,
		.spin_us = -1,
	};

	memcpy(o, &def, GDX_MIN(struct_size, sizeof(def)));
	o->struct_size = GDX_MIN(struct_size, sizeof(def));
}

/* ---- failures -------------------------------------------------------------- */

static void fail_locked(struct gdx_pipeline *p, int stage, unsigned slot, uint64_t batch,
			int err, const char *cause)
{
	struct gdx_pipeline_error *e = &p->error;

	if (batch < atomic_load(&p->skip_from))
		atomic_store(&p->skip_from, batch);
	if (e->err)
		return;
	e->err = err < 0 ? err : -EIO;
	e->stage = stage;
	e->slot = (int)slot;
	e->batch = batch;
	snprintf(e->stage_name, sizeof(e->stage_name), "%s",
		 stage >= 0 ? p->stages[stage].name : "engine");
	snprintf(e->cause, sizeof(e->cause), "%s", cause && *cause ? cause : gdx_strerror(err));
	atomic_store(&p->failed, true);
	pthread_cond_broadcast(&p->cond);
	GDX_ERR("pipeline", "stage %d (%s), slot %u, batch %llu: %s: %s", stage, e->stage_name,
		slot, (unsigned long long)batch, e->cause, gdx_strerror(e->err));
}

/* Counts stage k's failure once per batch and keeps the first cause overall. */
static void fail_job(struct gdx_pipeline *p, struct job *j, unsigned k, int err,
		     const char *cause)
{
	pthread_mutex_lock(&p->lock);
	if (!(j->err_mask & (1u << k))) {
		j->err_mask |= 1u << k;
		p->stages[k].errors++;
	}
	fail_locked(p, (int)k, j->pub.slot, j->pub.batch, err, cause);
	pthread_mutex_unlock(&p->lock);
}

int gdx_pipeline_job_fail(const struct gdx_pipeline_job *job, int err, const char *fmt, ...)
{
	struct job *j = GDX_CONTAINER_OF(job, struct job_view, pub)->j;
	char cause[sizeof(((struct gdx_pipeline_error *)0)->cause)] = "";
	va_list ap;

	if (err >= 0)
		err = -EIO;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(cause, sizeof(cause), fmt, ap);
		va_end(ap);
	}
	fail_job(job->pipe, j, job->stage, err, cause);
	return err;
}

int gdx_pipeline_error(struct gdx_pipeline *p, struct gdx_pipeline_error *e)
{
	pthread_mutex_lock(&p->lock);
	*e = p->error;
	pthread_mutex_unlock(&p->lock);
	return e->err;
}

const char *gdx_pipeline_strerror(struct gdx_pipeline *p, char *buf, size_t len)
{
	struct gdx_pipeline_error e;

	if (!len)
		return buf;
	buf[0] = '\0';
	if (gdx_pipeline_error(p, &e))
		snprintf(buf, len, "stage %d (%s), slot %d, batch %llu: %s: %s", e.stage,
			 e.stage_name, e.slot, (unsigned long long)e.batch, e.cause,
			 gdx_strerror(e.err));
	return buf;
}

/* ---- moving a job through the stages ---------------------------------------- */

static void queue_push(struct stage *st, struct job *j)
{
	pthread_mutex_lock(&st->qlock);
	st->q[(st->qhead + st->qcount) % st->p->nring] = j;
	__atomic_store_n(&st->qcount, st->qcount + 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&st->qcond);
	pthread_mutex_unlock(&st->qlock);
}

/*
 * Starts stage k and the device stages after it, up to the next host stage,
 * which gets the job through its queue.  prev is the slot's previous batch,
 * whose last stage stage 0 must wait for, or NULL; unused for k > 0.
 */
static void advance(struct gdx_pipeline *p, struct job *j, unsigned k, struct job *prev)
{
	for (; k < p->nstages; k++) {
		struct stage *st = &p->stages[k];
		/* Stage k waits for stage k - 1, or stage 0 for the slot's previous batch. */
		struct dev_wait w = { NULL, NULL, 0, false };
		int ret;

		if (k > 0)
			w = stage_wait(p, j, k - 1, false);
		else if (prev)
			w = stage_wait(p, prev, p->nstages - 1, true);
		if (!is_dev(p, k)) {
			j->wait = w;
			queue_push(st, j);
			return;
		}
		if (skipped(p, j))
			continue;
		ret = w.ev ? gdx_stream_wait_event(st->stream, w.ev) : 0;
		/* The slot's previous batch must have left the host last stage. */
		if (!ret && k == 0 && p->released_word && j->pub.batch >= p->nslots)
			ret = gdx_stream_wait_value32(st->stream, p->released_word,
						      (uint32_t)(j->pub.batch - p->nslots + 1));
		if (!ret && timed_batch(p, j->pub.batch))
			ret = gdx_event_record(j->start[k], st->stream);
		if (ret) {
			fail_job(p, j, k, ret, "cannot enqueue on the stage's stream");
			continue;
		}
		j->ran[k] = true;
		ret = st->d.enqueue(&j->view[k].pub, st->stream, st->d.arg);
		if (ret) {
			fail_job(p, j, k, ret, NULL);
			continue;
		}
		ret = gdx_event_record(j->end[k], st->stream);
		if (ret) {
			fail_job(p, j, k, ret, "cannot record the stage's event");
			continue;
		}
		j->recorded[k] = true;
		/* Best effort: without the word, the waiter polls the event. */
		if (p->done_words && (k == p->nstages - 1 || !is_dev(p, k + 1)))
			j->wrote[k] = !gdx_stream_write_value32(st->stream, &p->done_words[k],
								(uint32_t)(j->pub.batch + 1));
	}
	/*
	 * A device last stage has been enqueued, which is all the next batch in
	 * this slot needs: it waits on end[] on the device.  A host last stage
	 * has finished; it sees the batches in order, so the counter only grows.
	 */
	if (p->released_word)
		__atomic_store_n(p->released_word, (uint32_t)(j->pub.batch + 1), __ATOMIC_RELEASE);
	pthread_mutex_lock(&p->lock);
	__atomic_store_n(&j->released, true, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* Runs the check callbacks of the device stages before `upto` whose work ran. */
static void run_checks(struct gdx_pipeline *p, struct job *j, unsigned upto)
{
	for (unsigned k = j->checked; k < upto; k++) {
		struct stage *st = &p->stages[k];
		int ret;

		/* A batch after a failed one is discarded, its outcome unjudged. */
		if (!is_dev(p, k) || !j->recorded[k] || !st->d.check || skipped(p, j))
			continue;
		ret = st->d.check(&j->view[k].pub, st->d.arg);
		if (ret < 0)
			fail_job(p, j, k, ret, NULL);
	}
	if (upto > j->checked)
		j->checked = upto;
}

static bool queue_ready(void *arg)
{
	struct stage *st = arg;

	return __atomic_load_n(&st->qcount, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&st->quit, __ATOMIC_ACQUIRE);
}

/*
 * Whether batch b has been submitted.  A host stage waiting for a batch that
 * has not is idle (it waits for the application, or for the end): that
 * wait is no long wait, or long_waits would count every pause between runs
 * and say nothing of the waits the spin time is for.
 */
static bool submitted(struct gdx_pipeline *p, uint64_t b)
{
	bool ret;

	pthread_mutex_lock(&p->lock);
	ret = p->submitted > b;
	pthread_mutex_unlock(&p->lock);
	return ret;
}

static void *host_stage_main(void *arg)
{
	struct stage *st = arg;
	struct gdx_pipeline *p = st->p;
	unsigned k = st->idx;
	uint64_t next = 0;	/* the batch it gets next: they come in order */

	for (;;) {
		struct job *j;
		uint64_t t, calls;
		int ret;

		if (!spin_for(p, queue_ready, st, 0) && submitted(p, next))
			atomic_fetch_add(&p->long_waits, 1);
		pthread_mutex_lock(&st->qlock);
		while (!st->qcount && !st->quit)
			pthread_cond_wait(&st->qcond, &st->qlock);
		if (!st->qcount) {
			pthread_mutex_unlock(&st->qlock);
			break;
		}
		j = st->q[st->qhead];
		st->qhead = (st->qhead + 1) % p->nring;
		__atomic_store_n(&st->qcount, st->qcount - 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&st->qlock);
		next = j->pub.batch + 1;

		calls = gdx_device_calls();
		t = gdx_now_ns();
		if (j->wait.ev) {
			ret = wait_dev(p, &j->wait);
			if (ret)
				fail_job(p, j, k, ret, "waiting for the previous stage failed");
		}
		run_checks(p, j, k);
		j->t0[k] = gdx_now_ns();
		pthread_mutex_lock(&p->lock);
		st->wait_ns += j->t0[k] - t;
		pthread_mutex_unlock(&p->lock);
		if (!skipped(p, j)) {
			j->ran[k] = true;
			ret = st->d.run(&j->view[k].pub, st->d.arg);
			j->t1[k] = gdx_now_ns();
			if (ret < 0)
				fail_job(p, j, k, ret, NULL);
		}
		advance(p, j, k + 1, NULL);
		atomic_fetch_add_explicit(&st->calls, gdx_device_calls() - calls,
					  memory_order_relaxed);
	}
	return NULL;
}

/* ---- set-up ------------------------------------------------------------------ */

int gdx_pipeline_create(struct gdx_device *dev, const struct gdx_pipeline_opts *o,
			struct gdx_pipeline **out)
{
	struct gdx_pipeline_opts opts;
	struct gdx_pipeline *p;
	int ret = 0;

	if (!dev || !out)
		return -EINVAL;
	gdx_pipeline_opts_init(&opts, sizeof(opts));
	if (o) {
		if (o->struct_size < offsetof(struct gdx_pipeline_opts, nslots) + sizeof(o->nslots))
			return -EINVAL;
		memcpy(&opts, o, GDX_MIN(o->struct_size, sizeof(opts)));
	}
	if (opts.nslots < 1 || opts.nslots > GDX_PIPELINE_MAX_SLOTS || opts.warmup < -1 ||
	    opts.timing < 0)
		return -EINVAL;
	if (opts.ahead == (unsigned)-1)
		opts.ahead = opts.nslots;
	if (opts.ahead > 4 * GDX_PIPELINE_MAX_SLOTS)
		return -EINVAL;
	if (opts.spin_us < -1 || opts.spin_us > SPIN_US_MAX)
		return -EINVAL;
	if (opts.spin_us == -1)
		opts.spin_us = (int)gdx_cfg_int("pipeline.spin_us");

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->dev = dev;
	p->nslots = opts.nslots;
	p->nring = opts.nslots + opts.ahead;
	p->time_every = (unsigned)opts.timing;
	p->warmup_opt = opts.warmup;
	p->slot_bytes = opts.slot_bytes;
	p->spin_ns = (uint64_t)opts.spin_us * 1000;
	p->poll_ns = (uint64_t)gdx_cfg_int("pipeline.poll_ns");
	pthread_mutex_init(&p->submit_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->error.stage = -1;
	p->error.slot = -1;
	atomic_store(&p->skip_from, UINT64_MAX);
	for (unsigned i = 0; i < p->nslots && p->slot_bytes; i++) {
		ret = gdx_device_malloc(dev, p->slot_bytes, &p->slot_buf[i]);
		if (ret) {
			GDX_ERR("pipeline", "slot %u: cannot allocate %zu bytes of device memory: %s",
				i, p->slot_bytes, gdx_strerror(ret));
			gdx_pipeline_destroy(p);
			return ret;
		}
	}
	*out = p;
	return 0;
}

int gdx_pipeline_add_stage(struct gdx_pipeline *p, const struct gdx_stage_desc *d)
{
	struct stage *st;

	if (!p || !d || d->struct_size < offsetof(struct gdx_stage_desc, stream))
		return -EINVAL;
	if (p->started || p->nstages == NSTAGE)
		return p->started ? -EBUSY : -ENOSPC;
	if ((d->kind == GDX_STAGE_DEVICE && !d->enqueue) || (d->kind == GDX_STAGE_HOST && !d->run) ||
	    (d->kind != GDX_STAGE_DEVICE && d->kind != GDX_STAGE_HOST))
		return -EINVAL;
	st = &p->stages[p->nstages];
	memset(st, 0, sizeof(*st));
	memcpy(&st->d, d, GDX_MIN(d->struct_size, sizeof(st->d)));
	st->p = p;
	st->idx = p->nstages;
	snprintf(st->name, sizeof(st->name), "%s", d->name ? d->name : "stage");
	st->min_ns = UINT64_MAX;
	return (int)p->nstages++;
}

/*
 * Whether a device first stage may wait for a host last stage on a pinned
 * word.  That order is invisible to the device, which may serialise streams
 * that share a hardware queue in the order their work was enqueued; so every
 * piece of device work the release depends on must be enqueued before the
 * wait.  It is when the host stages form the tail: the producer enqueues all
 * device work, batch by batch.  A device stage after a host stage would be
 * enqueued by that stage's thread, possibly after the wait, and could end up
 * queued behind it: those shapes keep the slot on the producer.
 */
static bool released_word_safe(const struct gdx_pipeline *p)
{
	bool host_seen = false;

	if (!is_dev(p, 0) || is_dev(p, p->nstages - 1))
		return false;
	for (unsigned k = 0; k < p->nstages; k++) {
		if (!is_dev(p, k))
			host_seen = true;
		else if (host_seen)
			return false;
	}
	return true;
}

static int start(struct gdx_pipeline *p)
{
	unsigned flags = p->time_every ? GDX_EVENT_TIMING : 0;
	int ret, first_dev = -1;

	if (!p->nstages)
		return -EINVAL;
	p->warmup = p->warmup_opt < 0 ? p->nstages : (uint64_t)p->warmup_opt;
	p->jobs = calloc(p->nring, sizeof(*p->jobs));
	if (!p->jobs)
		return -ENOMEM;
	for (unsigned k = 0; k < p->nstages; k++) {
		struct stage *st = &p->stages[k];

		if (is_dev(p, k)) {
			if (first_dev < 0)
				first_dev = (int)k;
			if (st->d.stream) {
				st->stream = st->d.stream;
			} else {
				ret = gdx_stream_create(p->dev, &st->stream);
				if (ret)
					return ret;
				st->own_stream = true;
			}
		}
		for (unsigned e = 0; e < p->nring && st->d.scratch_size; e++) {
			p->jobs[e].scratch[k] = calloc(1, st->d.scratch_size);
			if (!p->jobs[e].scratch[k])
				return -ENOMEM;
		}
		for (unsigned e = 0; e < p->nring && is_dev(p, k); e++) {
			struct job *j = &p->jobs[e];

			ret = gdx_event_create(p->dev, flags, &j->end[k]);
			if (!ret && p->time_every)
				ret = gdx_event_create(p->dev, flags, &j->start[k]);
			if (ret)
				return ret;
		}
	}
	for (unsigned k = 0; k < p->nstages && !p->done_words; k++) {
		if (!is_dev(p, k) || (k + 1 < p->nstages && is_dev(p, k + 1)))
			continue;
		ret = gdx_pinned_alloc(p->dev, NSTAGE * sizeof(*p->done_words),
				       (void **)&p->done_words);
		if (ret)
			return ret;
		memset(p->done_words, 0, NSTAGE * sizeof(*p->done_words));
	}
	if (released_word_safe(p)) {
		ret = gdx_pinned_alloc(p->dev, sizeof(*p->released_word),
				       (void **)&p->released_word);
		if (ret)
			return ret;
		*p->released_word = 0;
	}
	for (unsigned k = 0; k < p->nstages; k++) {
		struct stage *st = &p->stages[k];

		if (is_dev(p, k))
			continue;
		st->q = calloc(p->nring, sizeof(*st->q));
		if (!st->q)
			return -ENOMEM;
		pthread_mutex_init(&st->qlock, NULL);
		pthread_cond_init(&st->qcond, NULL);
		ret = -pthread_create(&st->thread, NULL, host_stage_main, st);
		if (ret)
			return ret;
		st->thread_up = true;
	}
	if (first_dev >= 0 && p->time_every) {
		ret = gdx_event_create(p->dev, flags, &p->ref);
		if (!ret)
			ret = gdx_event_record(p->ref, p->stages[first_dev].stream);
		if (ret)
			return ret;
	}
	p->ref_host_ns = gdx_now_ns();
	p->started = true;
	return 0;
}

/* ---- producer ------------------------------------------------------------------ */

static double ms_to_ns(float ms)
{
	return (double)ms * 1e6;
}

/* Stage times of a harvested job, and its completion time for the step figure. */
static void collect(struct gdx_pipeline *p, struct job *j)
{
	uint64_t ns[NSTAGE] = { 0 };
	bool timed[NSTAGE] = { false };
	unsigned last = p->nstages - 1;
	bool complete = true;
	double t_done = -1;
	float ms;

	for (unsigned k = 0; k < p->nstages; k++)
		complete = complete && j->ran[k] && !(j->err_mask & (1u << k));
	for (unsigned k = 0; k < p->nstages; k++) {
		if (!j->ran[k])
			continue;
		if (!is_dev(p, k)) {
			if (j->t1[k] >= j->t0[k]) {
				ns[k] = j->t1[k] - j->t0[k];
				timed[k] = true;
			}
			continue;
		}
		if (!timed_batch(p, j->pub.batch) || !j->recorded[k])
			continue;
		/*
		 * A batch that went through every stage is done everywhere (each
		 * stage waited for the one before); after a failure, device work
		 * before a skipped stage may still be running.
		 */
		if ((complete || gdx_event_synchronize(j->end[k]) == 0) &&
		    gdx_event_elapsed_ms(j->start[k], j->end[k], &ms) == 0 && ms >= 0) {
			ns[k] = (uint64_t)ms_to_ns(ms);
			timed[k] = true;
		}
	}
	if (complete && is_dev(p, last) && p->ref && j->recorded[last] &&
	    timed_batch(p, j->pub.batch) && gdx_event_elapsed_ms(p->ref, j->end[last], &ms) == 0)
		t_done = ms_to_ns(ms);
	else if (complete && !is_dev(p, last))
		t_done = (double)(j->t1[last] - p->ref_host_ns);

	pthread_mutex_lock(&p->lock);
	for (unsigned k = 0; k < p->nstages; k++) {
		struct stage *st = &p->stages[k];

		if (!j->ran[k]) {
			st->skipped++;
			continue;
		}
		st->batches++;
		if (!timed[k] || j->pub.batch < p->warmup)
			continue;
		st->timed++;
		st->total_ns += ns[k];
		st->min_ns = GDX_MIN(st->min_ns, ns[k]);
		st->max_ns = GDX_MAX(st->max_ns, ns[k]);
	}
	if (t_done >= 0 && j->pub.batch >= p->warmup) {
		if (!p->have_first) {
			p->have_first = true;
			p->t_first = t_done;
			p->b_first = j->pub.batch;
		} else {
			p->t_last = t_done;
			p->steady_n = j->pub.batch - p->b_first;
		}
	}
	p->harvested++;
	pthread_mutex_unlock(&p->lock);
}

/*
 * Waits until job j has left the last stage.  A device last stage: released
 * means enqueued, so wait for its event too.
 */
static int wait_done(struct gdx_pipeline *p, struct job *j, bool nowait)
{
	unsigned last = p->nstages - 1;
	struct dev_wait w;
	int ret;

	wait_released_locked(p, j, nowait);
	ret = j->released ? 0 : -EAGAIN;
	pthread_mutex_unlock(&p->lock);
	if (ret || !is_dev(p, last) || !j->recorded[last])
		return ret;
	w = stage_wait(p, j, last, false);
	if (nowait && w.word) {
		struct word_poll wp = { w.word, w.value };
		uint64_t now, asked;

		if (word_reached(&wp))
			return 0;
		/*
		 * A failed stream never stores the word: a caller that only ever
		 * polls must still see the error, so its event is asked too, at
		 * most once per NOWAIT_QUERY_NS (a driver call per poll is what
		 * the word saves).
		 */
		now = gdx_now_ns();
		asked = atomic_load_explicit(&p->nowait_query_ns, memory_order_relaxed);
		if (now - asked < NOWAIT_QUERY_NS)
			return -EAGAIN;
		atomic_store_explicit(&p->nowait_query_ns, now, memory_order_relaxed);
	}
	if (nowait) {
		ret = gdx_event_query(j->end[last]);
		return ret == -EBUSY ? -EAGAIN : ret;
	}
	ret = wait_dev(p, &w);
	if (ret)
		fail_job(p, j, last, ret, "waiting for the last stage failed");
	return 0;
}

/* waited: where to add the time spent waiting for the batch (not its harvest), or NULL. */
static int harvest_one(struct gdx_pipeline *p, bool nowait, uint64_t *waited)
{
	struct job *j = &p->jobs[p->harvested % p->nring];
	uint64_t t = waited ? gdx_now_ns() : 0, calls = gdx_device_calls();
	int ret = wait_done(p, j, nowait);

	if (waited) {
		*waited += gdx_now_ns() - t;
		atomic_fetch_add_explicit(&p->producer_poll_calls, gdx_device_calls() - calls,
					  memory_order_relaxed);
	}
	if (ret)
		return ret;
	run_checks(p, j, p->nstages);
	collect(p, j);
	return 0;
}

static int pipeline_status(struct gdx_pipeline *p)
{
	int ret = 0;

	pthread_mutex_lock(&p->lock);
	if (p->error.err)
		ret = p->error.err;
	else if (p->stopping)
		ret = -ECANCELED;
	pthread_mutex_unlock(&p->lock);
	return ret;
}

static int submit_locked(struct gdx_pipeline *p, void *arg, unsigned flags)
{
	bool nowait = flags & GDX_PIPELINE_NOWAIT;
	uint64_t b = p->submitted, waited = 0;
	struct job *j, *prev = NULL;
	int ret;

	ret = pipeline_status(p);
	if (ret)
		return ret;
	if (!p->started) {
		ret = start(p);
		if (ret) {
			pthread_mutex_lock(&p->lock);
			fail_locked(p, -1, 0, 0, ret, "cannot set up streams, events and threads");
			pthread_mutex_unlock(&p->lock);
			return ret;
		}
	}
	/* Back-pressure: the ring entry must be free, i.e. batch b - R harvested. */
	while (p->harvested + p->nring <= b) {
		ret = harvest_one(p, nowait, nowait ? NULL : &waited);
		if (ret)
			return ret;
	}
	/*
	 * The slot's previous batch must be past its last stage (see advance),
	 * unless a device first stage waits for that on the released word.
	 */
	if (b >= p->nslots && !p->released_word) {
		uint64_t t = gdx_now_ns();

		prev = &p->jobs[(b - p->nslots) % p->nring];
		wait_released_locked(p, prev, nowait);
		ret = prev->released ? 0 : -EAGAIN;
		pthread_mutex_unlock(&p->lock);
		if (!nowait)
			waited += gdx_now_ns() - t;
		if (ret)
			return ret;
	}
	ret = pipeline_status(p);
	if (ret)
		return ret;

	/* Collect what is already done, so the figures and in-flight count stay current. */
	while (p->harvested < b && harvest_one(p, true, NULL) == 0)
		;

	j = &p->jobs[b % p->nring];
	memset(j->recorded, 0, sizeof(j->recorded));
	memset(j->ran, 0, sizeof(j->ran));
	j->err_mask = 0;
	j->checked = 0;
	memset(j->wrote, 0, sizeof(j->wrote));
	j->wait.ev = NULL;
	j->released = false;
	j->pub = (struct gdx_pipeline_job){
		.pipe = p,
		.batch = b,
		.slot = (unsigned)(b % p->nslots),
		.buf = p->slot_buf[b % p->nslots],
		.buf_size = p->slot_bytes,
		.slot_user = p->slot_user[b % p->nslots],
		.batch_arg = arg,
	};
	for (unsigned k = 0; k < p->nstages; k++) {
		j->view[k].pub = j->pub;
		j->view[k].pub.stage = k;
		j->view[k].pub.scratch = j->scratch[k];
		j->view[k].j = j;
	}
	pthread_mutex_lock(&p->lock);
	p->submitted++;
	p->producer_wait_ns += waited;
	p->inflight_max = GDX_MAX(p->inflight_max, (unsigned)(p->submitted - p->harvested));
	pthread_mutex_unlock(&p->lock);
	advance(p, j, 0, prev);
	return 0;
}

int gdx_pipeline_submit(struct gdx_pipeline *p, void *batch_arg, unsigned flags)
{
	uint64_t calls;
	int ret;

	if (!p || (flags & ~GDX_PIPELINE_NOWAIT))
		return -EINVAL;
	pthread_mutex_lock(&p->submit_lock);
	calls = gdx_device_calls();
	ret = submit_locked(p, batch_arg, flags);
	atomic_fetch_add_explicit(&p->producer_calls, gdx_device_calls() - calls,
				  memory_order_relaxed);
	pthread_mutex_unlock(&p->submit_lock);
	return ret;
}

int gdx_pipeline_drain(struct gdx_pipeline *p)
{
	int ret = 0;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->submit_lock);
	while (p->harvested < p->submitted)
		harvest_one(p, false, NULL);
	/*
	 * After a failure, stages may have been skipped while earlier device
	 * work of the same batch still runs: wait for all of it.
	 */
	for (unsigned k = 0; k < p->nstages && p->started; k++) {
		if (p->stages[k].stream) {
			int r = gdx_stream_synchronize(p->stages[k].stream);

			ret = ret ? ret : r;
		}
	}
	pthread_mutex_unlock(&p->submit_lock);
	pthread_mutex_lock(&p->lock);
	if (p->error.err)
		ret = p->error.err;
	pthread_mutex_unlock(&p->lock);
	return ret;
}

void gdx_pipeline_stop(struct gdx_pipeline *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

int gdx_pipeline_run(struct gdx_pipeline *p, uint64_t n)
{
	int ret = 0, r;

	for (uint64_t i = 0; i < n && !ret; i++)
		ret = gdx_pipeline_submit(p, NULL, 0);
	r = gdx_pipeline_drain(p);
	if (ret == -ECANCELED)
		ret = 0;	/* stopped on purpose */
	return ret ? ret : r;
}

void gdx_pipeline_destroy(struct gdx_pipeline *p)
{
	if (!p)
		return;
	gdx_pipeline_stop(p);
	gdx_pipeline_drain(p);
	for (unsigned k = 0; k < p->nstages; k++) {
		struct stage *st = &p->stages[k];

		if (st->thread_up) {
			pthread_mutex_lock(&st->qlock);
			__atomic_store_n(&st->quit, true, __ATOMIC_RELEASE);
			pthread_cond_signal(&st->qcond);
			pthread_mutex_unlock(&st->qlock);
			pthread_join(st->thread, NULL);
		}
		if (st->q) {
			pthread_mutex_destroy(&st->qlock);
			pthread_cond_destroy(&st->qcond);
			free(st->q);
		}
		for (unsigned e = 0; p->jobs && e < p->nring; e++) {
			if (p->jobs[e].start[k])
				gdx_event_destroy(p->jobs[e].start[k]);
			if (p->jobs[e].end[k])
				gdx_event_destroy(p->jobs[e].end[k]);
			free(p->jobs[e].scratch[k]);
		}
		if (st->own_stream)
			gdx_stream_destroy(st->stream);
		if (st->d.fini)
			st->d.fini(st->d.arg);
	}
	if (p->ref)
		gdx_event_destroy(p->ref);
	if (p->released_word)
		gdx_pinned_free(p->dev, p->released_word);
	if (p->done_words)
		gdx_pinned_free(p->dev, p->done_words);
	for (unsigned i = 0; i < p->nslots; i++) {
		if (p->slot_buf[i])
			gdx_device_free(p->dev, p->slot_buf[i]);
	}
	free(p->jobs);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->submit_lock);
	free(p);
}

/* ---- accessors and figures ----------------------------------------------------- */

unsigned gdx_pipeline_nslots(const struct gdx_pipeline *p)
{
	return p->nslots;
}

unsigned gdx_pipeline_nstages(const struct gdx_pipeline *p)
{
	return p->nstages;
}

struct gdx_device *gdx_pipeline_device(const struct gdx_pipeline *p)
{
	return p->dev;
}

struct gdx_stream *gdx_pipeline_stage_stream(struct gdx_pipeline *p, unsigned stage)
{
	if (!p || stage >= p->nstages)
		return NULL;
	return p->stages[stage].stream;
}

int gdx_pipeline_slot_buf(const struct gdx_pipeline *p, unsigned slot, void **buf, size_t *size)
{
	if (!p || slot >= p->nslots)
		return -EINVAL;
	if (buf)
		*buf = p->slot_buf[slot];
	if (size)
		*size = p->slot_bytes;
	return 0;
}

int gdx_pipeline_set_slot_user(struct gdx_pipeline *p, unsigned slot, void *user)
{
	if (!p || slot >= p->nslots)
		return -EINVAL;
	if (p->started)
		return -EBUSY;
	p->slot_user[slot] = user;
	return 0;
}

int gdx_pipeline_stage_stats(struct gdx_pipeline *p, unsigned stage,
			     struct gdx_pipeline_stage_stats *out)
{
	struct gdx_pipeline_stage_stats s = { .struct_size = sizeof(s) };
	struct stage *st;

	if (!p || !out || stage >= p->nstages || out->struct_size < offsetof(struct gdx_pipeline_stage_stats, mean_ns))
		return -EINVAL;
	st = &p->stages[stage];
	pthread_mutex_lock(&p->lock);
	snprintf(s.name, sizeof(s.name), "%s", st->name);
	s.kind = st->d.kind;
	s.batches = st->batches;
	s.skipped = st->skipped;
	s.errors = st->errors;
	s.timed = st->timed;
	s.total_ns = st->total_ns;
	s.min_ns = st->timed ? st->min_ns : 0;
	s.max_ns = st->max_ns;
	s.mean_ns = st->timed ? st->total_ns / st->timed : 0;
	s.wait_ns = st->wait_ns;
	s.calls = atomic_load(&st->calls);
	pthread_mutex_unlock(&p->lock);
	s.struct_size = GDX_MIN(out->struct_size, sizeof(s));
	memcpy(out, &s, s.struct_size);
	return 0;
}

int gdx_pipeline_stats(struct gdx_pipeline *p, struct gdx_pipeline_stats *out)
{
	struct gdx_pipeline_stats s = { .struct_size = sizeof(s) };

	if (!p || !out || out->struct_size < offsetof(struct gdx_pipeline_stats, step_ns))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	s.submitted = p->submitted;
	s.completed = p->harvested;
	s.inflight_max = p->inflight_max;
	s.producer_wait_ns = p->producer_wait_ns;
	s.long_waits = atomic_load(&p->long_waits);
	s.producer_calls = atomic_load(&p->producer_calls);
	s.producer_poll_calls = atomic_load(&p->producer_poll_calls);
	if (p->steady_n)
		s.step_ns = (uint64_t)((p->t_last - p->t_first) / (double)p->steady_n);
	for (unsigned k = 0; k < p->nstages; k++) {
		const struct stage *st = &p->stages[k];
		uint64_t mean = st->timed ? st->total_ns / st->timed : 0;

		s.serial_ns += mean;
		s.max_stage_ns = GDX_MAX(s.max_stage_ns, mean);
	}
	pthread_mutex_unlock(&p->lock);
	if (s.max_stage_ns && s.step_ns)
		s.overlap = (double)s.step_ns / (double)s.max_stage_ns;
	if (s.step_ns)
		s.speedup = (double)s.serial_ns / (double)s.step_ns;
	s.struct_size = GDX_MIN(out->struct_size, sizeof(s));
	memcpy(out, &s, s.struct_size);
	return 0;
}
