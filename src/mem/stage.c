/* SPDX-License-Identifier: MIT */
/*
 * Staging through pinned rings (stage.h): the context (agent, fault, halt)
 * and the lane (byte ring, marks, copies, deferred effects).  Positions are
 * ring bytes since the lane opened; a mark is one such position, and the
 * lane maps the agent's or the stream's progress (a done word's seq, an
 * event) onto it through its FIFO of marks.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "mem/stage.h"

#define SUB "stage"
#define MANY_MARKS 256u
#define FIFO_START 64u

struct gdx_stage_ctx {
	struct gdx_device *dev;
	struct gdx_copy_agent *agent;	/* NULL: stream-only */
	pthread_mutex_t lock;		/* the halt */
	int err;			/* sticky fault, atomic */
	unsigned fault_gen;		/* atomic */
	bool halted;			/* atomic: no worker runs any more */
	void (*on_halt)(void *owner, int err);
	void *owner;
};

enum { C_COPIES, C_CALLS, C_RECORDS, C_QUERIES, C_WAITS, C_RING_FULL, C_REDONE, C_HELD };

/* A reservation of a lane with o.pieces; its effect follows it. */
struct gdx_stage_piece {
	uint64_t end;		/* its mark */
	void *p;		/* ready: what to copy, n bytes, to or from devp */
	size_t n;
	void *devp;
	bool ready, effect;
};

void gdx_stage_ctx_opts_init(struct gdx_stage_ctx_opts *o, size_t struct_size)
{
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
	o->lanes = 1;
	o->entries = 256;
}

void gdx_stage_opts_init(struct gdx_stage_opts *o, size_t struct_size)
{
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
	o->chunks = 1;
}

/* ---- context -------------------------------------------------------------- */

int gdx_stage_ctx_open(struct gdx_device *dev, const struct gdx_stage_ctx_opts *o,
		       struct gdx_stage_ctx **out)
{
	struct gdx_stage_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return -ENOMEM;
	ctx->dev = dev;
	pthread_mutex_init(&ctx->lock, NULL);
	if (o) {
		ctx->on_halt = o->on_halt;
		ctx->owner = o->owner;
	}
	if (o && o->agent) {
		struct gdx_copy_agent_opts ao;
		int rc;

		gdx_copy_agent_opts_init(&ao, sizeof(ao));
		ao.rings = o->lanes;
		ao.entries = o->entries;
		ao.workers = o->workers;
		if (o->stop_timeout_ms)
			ao.stop_timeout_ms = o->stop_timeout_ms;
		rc = gdx_copy_agent_start(dev, &ao, &ctx->agent);
		if (rc && o->agent_required) {
			pthread_mutex_destroy(&ctx->lock);
			free(ctx);
			return rc;
		}
		if (rc)
			GDX_WARN(SUB, "no copy agent on %s (%s): copies go through streams",
				 gdx_device_name(dev), gdx_strerror(rc));
		else
			GDX_INFO(SUB, "copy agent on %s: %u rings, %u workers", gdx_device_name(dev),
				 ao.rings, ao.workers ? ao.workers : GDX_MIN(ao.rings, 4u));
	}
	*out = ctx;
	return 0;
}

bool gdx_stage_ctx_has_agent(const struct gdx_stage_ctx *ctx)
{
	return ctx->agent != NULL;
}

struct gdx_device *gdx_stage_ctx_device(const struct gdx_stage_ctx *ctx)
{
	return ctx->dev;
}

int gdx_stage_ctx_status(struct gdx_stage_ctx *ctx)
{
	int err = __atomic_load_n(&ctx->err, __ATOMIC_ACQUIRE), none = 0;

	if (err || !ctx->agent)
		return err;
	err = gdx_copy_agent_status(ctx->agent);
	if (err && __atomic_compare_exchange_n(&ctx->err, &none, err, false, __ATOMIC_ACQ_REL,
					       __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&ctx->fault_gen, 1, __ATOMIC_RELEASE);
	return __atomic_load_n(&ctx->err, __ATOMIC_ACQUIRE);
}

int gdx_stage_ctx_fail(struct gdx_stage_ctx *ctx, int err)
{
	int none = 0;

	if (__atomic_compare_exchange_n(&ctx->err, &none, err, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		__atomic_fetch_add(&ctx->fault_gen, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&ctx->lock);
	if (!__atomic_load_n(&ctx->halted, __ATOMIC_ACQUIRE)) {
		/*
		 * However long it takes: the memory copies in flight may still
		 * use goes back only once no worker runs (the agent said each
		 * timeout).
		 */
		for (unsigned i = 1; ctx->agent && gdx_copy_agent_halt(ctx->agent) == -ETIMEDOUT;
		     i++)
			GDX_ERR(SUB, "%s: copy agent not stopped (%u tries): the memory of its "
				"copies stays held", gdx_device_name(ctx->dev), i);
		__atomic_store_n(&ctx->halted, true, __ATOMIC_RELEASE);
		/* under the lock: a lane that fails its effects does so after it */
		if (ctx->on_halt)
			ctx->on_halt(ctx->owner, __atomic_load_n(&ctx->err, __ATOMIC_ACQUIRE));
	}
	pthread_mutex_unlock(&ctx->lock);
	return __atomic_load_n(&ctx->err, __ATOMIC_ACQUIRE);
}

unsigned gdx_stage_ctx_fault_gen(const struct gdx_stage_ctx *ctx)
{
	return __atomic_load_n(&ctx->fault_gen, __ATOMIC_ACQUIRE);
}

int gdx_stage_ctx_close(struct gdx_stage_ctx *ctx)
{
	int rc = 0;

	if (!ctx)
		return 0;
	if (ctx->agent && gdx_copy_agent_stop(ctx->agent))
		rc = -ETIMEDOUT;
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
	return rc;
}

static bool ctx_halted(const struct gdx_stage_ctx *ctx)
{
	return __atomic_load_n(&ctx->halted, __ATOMIC_ACQUIRE);
}

/* ---- lane: marks ---------------------------------------------------------- */

static void cnt(struct gdx_stage *st, unsigned i)
{
	gdx_counter_add(&st->cnt[i], 1);
}

/* The copies of the ring bytes before pos have landed. */
static void landed(struct gdx_stage *st, uint64_t pos)
{
	if (pos > st->done) {
		__atomic_store_n(&st->done, pos, __ATOMIC_RELEASE);
		if (st->o.dir == GDX_STAGE_H2D)
			st->r.tail = pos;
	}
	while (st->nmarked && st->marks[st->mark0].pos <= st->done) {
		st->mark0 = (st->mark0 + 1) % st->nmarks;
		st->nmarked--;
	}
}

/* Done word: the marks whose seq it has reached have landed; no device call. */
static void learn_word(struct gdx_stage *st)
{
	uint32_t w = __atomic_load_n(st->word, __ATOMIC_ACQUIRE);

	while (st->nmarked && (int32_t)(w - st->marks[st->mark0].seq) >= 0)
		landed(st, st->marks[st->mark0].pos);
}

/*
 * What a waiter asks every 64 spins: 0 (go on), 1 (a stream found idle:
 * every copy landed), or why the wait ends (the abort word, a fault).
 */
static int check(struct gdx_stage *st)
{
	int rc;

	if (st->o.abort && __atomic_load_n(st->o.abort, __ATOMIC_ACQUIRE))
		return GDX_EDISCONNECTED;
	if (st->agent)
		return gdx_stage_ctx_status(st->ctx);
	/* a stream lane's copies do not depend on the context's agent */
	rc = gdx_stream_query(st->stream);
	if (!rc) {
		landed(st, st->enq);
		return 1;
	}
	return rc == -EBUSY ? 0 : rc;
}

static bool aborted(const struct gdx_stage *st, int rc)
{
	return rc == GDX_EDISCONNECTED && st->o.abort && __atomic_load_n(st->o.abort,
									  __ATOMIC_ACQUIRE);
}

/*
 * Waits for the copies before the oldest mark.  A done word is watched
 * rather than the stream waited for, which would wait for every copy.
 */
static int wait_mark(struct gdx_stage *st)
{
	int rc;

	cnt(st, C_WAITS);
	for (unsigned i = 1; st->word; i++) {
		uint64_t pos = st->marks[st->mark0].pos;

		learn_word(st);
		if (st->done >= pos)
			return 0;
		if (!(i % 64)) {
			rc = check(st);
			if (rc)
				return rc > 0 ? 0 : rc;
		}
		sched_yield();
	}
	rc = gdx_event_synchronize(st->marks[st->mark0].ev);
	if (!rc)
		landed(st, st->marks[st->mark0].pos);
	return rc;
}

/* Waits for every copy enqueued. */
static int wait_all(struct gdx_stage *st)
{
	int rc;

	if (st->done >= st->enq)
		return 0;
	if (st->agent) {
		/* each copy posted to an agent has its mark */
		while (st->nmarked) {
			rc = wait_mark(st);
			if (rc)
				return rc;
		}
		return 0;
	}
	cnt(st, C_WAITS);
	rc = gdx_stream_synchronize(st->stream);
	if (!rc)
		landed(st, st->enq);
	return rc;
}

/* The mark m carries a seq of the done word: gdx_stage_watch may wait for it. */
static void publish_seq(struct gdx_stage *st, const struct gdx_stage_mark *m)
{
	__atomic_store_n(&st->wseq, m->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&st->wmark, m->pos, __ATOMIC_RELEASE);
}

/* Records a mark after the copies enqueued so far (stream modes). */
static int place_mark(struct gdx_stage *st)
{
	struct gdx_stage_mark *m;
	int rc;

	if (st->nmarked == st->nmarks && st->word)
		learn_word(st);
	if (st->nmarked == st->nmarks) {
		rc = wait_mark(st);
		if (rc)
			return rc;
	}
	m = &st->marks[(st->mark0 + st->nmarked) % st->nmarks];
	cnt(st, C_RECORDS);
	if (st->word) {
		m->seq = ++st->seq;
		rc = gdx_stream_write_value32(st->stream, st->word, m->seq);
	} else {
		rc = gdx_event_record(m->ev, st->stream);
	}
	if (rc)
		return rc;
	m->pos = st->enq;
	st->nmarked++;
	st->marked = st->enq;
	if (st->word)
		publish_seq(st, m);
	return 0;
}

/*
 * Asks the event marks oldest first, leaving out the newest `fresh` (just
 * recorded behind copies that cannot have run yet); 0 or the device's error.
 */
static int query_marks(struct gdx_stage *st, unsigned fresh)
{
	while (st->nmarked > fresh) {
		int rc;

		cnt(st, C_QUERIES);
		rc = gdx_event_query(st->marks[st->mark0].ev);
		if (rc)
			return rc == -EBUSY ? 0 : rc;
		landed(st, st->marks[st->mark0].pos);
	}
	return 0;
}

/* ---- lane: effects -------------------------------------------------------- */

static uint64_t *fifo_at(const struct gdx_stage *st, unsigned i)
{
	return (uint64_t *)(st->fifo + (size_t)((st->fhead + i) % st->fcap) * st->esz);
}

/* Pops the oldest effect into scratch and runs it. */
static void run_head(struct gdx_stage *st, int err)
{
	memcpy(st->scratch, fifo_at(st, 0), st->esz);
	st->fhead = (st->fhead + 1) % st->fcap;
	st->fn--;
	st->o.run(st->o.owner, st->scratch + sizeof(uint64_t), err);
}

/*
 * Runs the effects whose marks have landed, oldest first; with err, every
 * effect left.  Not again from inside an effect: the outer call goes on.
 */
static void run_effects(struct gdx_stage *st, int err)
{
	bool ran = false;

	if (st->in_run)
		return;
	st->in_run = true;
	while (st->fn && (err || *fifo_at(st, 0) <= st->done)) {
		run_head(st, err);
		ran = true;
	}
	if (ran)
		st->o.run(st->o.owner, NULL, 0);
	st->in_run = false;
}

/* ---- lane: faults --------------------------------------------------------- */

/*
 * The copies cannot land (rc): the lane's policy.  FAIL keeps rc for every
 * later call.  FALLBACK and REDO halt the agent (no worker runs: the ring is
 * the lane's again), fail the effects whose copies did not land or make those
 * copies again, and go on with synchronous copies.  Returns what the call
 * returns: rc, 0, or (REDO) the copies made again.
 */
static int fault(struct gdx_stage *st, int rc)
{
	unsigned n = 0;

	if (aborted(st, rc))
		return rc;
	/* the agent's posts say -ESHUTDOWN once halted: the context's fault is why */
	if (st->agent && __atomic_load_n(&st->ctx->err, __ATOMIC_ACQUIRE))
		rc = __atomic_load_n(&st->ctx->err, __ATOMIC_ACQUIRE);
	if (st->o.fault == GDX_STAGE_FAIL || st->mode == GDX_STAGE_SYNC) {
		if (!st->err)
			st->err = rc;
		return st->err;
	}
	/*
	 * REDO before the halt: the caller's to handle (tcp ends the connection;
	 * its teardown halts the agent).  Nothing changes: a worker may still make
	 * the copies.  Once halted the context is not failed again here: its
	 * owner's on_halt may be running, and the producer may hold a lock that
	 * hook takes (tcp's t->lock).
	 */
	if (st->o.fault == GDX_STAGE_REDO && st->agent && !ctx_halted(st->ctx))
		return rc;
	GDX_WARN(SUB, "%s: copies failed (%s): the lane goes on with synchronous copies",
		 gdx_device_name(st->dev), gdx_strerror(rc));
	if (st->agent) {
		if (st->o.fault != GDX_STAGE_REDO)
			gdx_stage_ctx_fail(st->ctx, rc);
		learn_word(st);
	}
	if (st->o.fault == GDX_STAGE_REDO) {
		for (; st->nmarked; st->mark0 = (st->mark0 + 1) % st->nmarks, st->nmarked--) {
			struct gdx_stage_copy *c = &st->copies[st->mark0];
			int e = gdx_memcpy(st->dev, c->dst, c->src, c->n);

			if (e) {
				st->err = e;
				return e;
			}
			n++;
		}
		gdx_counter_add(&st->cnt[C_REDONE], n);
	} else {
		run_effects(st, 0);
		if (st->o.run)
			run_effects(st, rc);
	}
	st->npend = 0;
	st->pend_bytes = 0;
	st->enq = st->posted;
	landed(st, st->enq);
	st->nmarked = 0;
	st->mode = GDX_STAGE_SYNC;
	if (st->agent)
		st->word = NULL;	/* the agent's */
	st->agent = NULL;
	return (int)n;
}

/*
 * A fault found with a piece in hand (its post, or its reserve waiting for
 * room): as fault(), but FALLBACK fails the piece with the fault once the
 * lane has fallen back, as the effects not landed fail (its caller fails
 * what the piece was for: tcp's receive); the next piece goes synchronously.
 */
static int piece_fault(struct gdx_stage *st, int rc)
{
	bool agent = st->agent != NULL;
	int n = fault(st, rc), why;

	if (n < 0 || st->o.fault != GDX_STAGE_FALLBACK)
		return n;
	why = agent ? __atomic_load_n(&st->ctx->err, __ATOMIC_ACQUIRE) : 0;
	return why ? why : rc;
}

/* The lane's error, GDX_EDISCONNECTED once aborted, else 0. */
static int stopped(const struct gdx_stage *st)
{
	if (st->err)
		return st->err;
	if (st->o.abort && __atomic_load_n(st->o.abort, __ATOMIC_ACQUIRE))
		return GDX_EDISCONNECTED;
	return 0;
}

/* ---- lane: set-up --------------------------------------------------------- */

int gdx_stage_open(struct gdx_stage_ctx *ctx, const struct gdx_stage_opts *o,
		   struct gdx_stage **out)
{
	struct gdx_bounce_pool_opts po;
	struct gdx_stage *st;
	int rc;

	if (!o || o->struct_size < sizeof(o->struct_size) || !o->chunk || !o->chunks ||
	    (o->mode == GDX_STAGE_AGENT && !ctx->agent) ||
	    (o->fault == GDX_STAGE_REDO && o->mode != GDX_STAGE_AGENT &&
	     o->mode != GDX_STAGE_SYNC) || (o->effect_size && !o->run))
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	memcpy(&st->o, o, GDX_MIN(o->struct_size, sizeof(st->o)));
	st->ctx = ctx;
	st->dev = ctx->dev;
	st->mode = o->mode;
	if (st->mode == GDX_STAGE_AGENT || st->mode == GDX_STAGE_SYNC)
		st->o.batch = 1;
	st->o.batch = GDX_MAX(1u, st->o.batch);
	st->o.align = GDX_MAX((size_t)1, st->o.align);

	/* a pool places the ring on the device's NUMA node; the lane takes it whole */
	gdx_bounce_pool_opts_init(&po, sizeof(po));
	po.buf_size = o->chunk;
	po.count = o->chunks;
	rc = gdx_bounce_pool_create(st->dev, &po, &st->pool);
	if (rc)
		goto fail;
	for (; st->ntaken < o->chunks; st->ntaken++) {
		void *b;

		rc = gdx_bounce_get(st->pool, 0, &b);
		if (rc)
			goto fail;
	}
	st->base = gdx_bounce_base(st->pool);
	st->o.chunk = gdx_bounce_buf_size(st->pool);
	st->r.size = st->o.chunk * o->chunks;
	if (!st->o.mark_every)
		st->o.mark_every = st->o.chunk;
	/*
	 * Marks land at least a chunk apart with events; batches, and every copy
	 * with a done word, get one each: enough that small pieces rarely wait
	 * for a free one.
	 */
	st->nmarks = st->o.marks ? st->o.marks :
		     st->o.batch > 1 || st->mode == GDX_STAGE_WORD || st->mode == GDX_STAGE_AGENT ?
		     GDX_MAX(o->chunks + 1, MANY_MARKS) : o->chunks + 1;
	st->marks = calloc(st->nmarks, sizeof(*st->marks));
	if (!st->marks) {
		rc = -ENOMEM;
		goto fail;
	}
	if (st->o.fault == GDX_STAGE_REDO) {
		st->copies = calloc(st->nmarks, sizeof(*st->copies));
		if (!st->copies) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (st->o.batch > 1) {
		st->pend_dst = calloc(st->o.batch, sizeof(*st->pend_dst));
		st->pend_src = calloc(st->o.batch, sizeof(*st->pend_src));
		st->pend_len = calloc(st->o.batch, sizeof(*st->pend_len));
		if (!st->pend_dst || !st->pend_src || !st->pend_len) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (o->effect_size) {
		st->esz = (sizeof(uint64_t) + o->effect_size + 7) & ~(size_t)7;
		st->fcap = FIFO_START;
		st->fifo = malloc(st->fcap * st->esz);
		st->scratch = malloc(st->esz);
		if (!st->fifo || !st->scratch) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (o->pieces) {
		st->psz = (sizeof(struct gdx_stage_piece) + o->effect_size + 7) & ~(size_t)7;
		st->pfifo = malloc(o->pieces * st->psz);
		if (!st->pfifo) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	if (st->mode == GDX_STAGE_AGENT) {
		st->agent = ctx->agent;
		/* an earlier lane's copies on the ring have all landed (drain): adopt its word */
		st->word = (uint32_t *)gdx_copy_agent_done_word(st->agent, o->lane);
		if (!st->word) {
			rc = -EINVAL;
			goto fail;
		}
		st->seq = __atomic_load_n(st->word, __ATOMIC_ACQUIRE);
	} else if (st->mode != GDX_STAGE_SYNC) {
		rc = gdx_stream_create(st->dev, &st->stream);
		if (rc)
			goto fail;
	}
	if (st->mode == GDX_STAGE_WORD) {
		rc = gdx_pinned_alloc(st->dev, sizeof(*st->word), (void **)&st->word);
		if (rc)
			goto fail;
		*st->word = 0;
		rc = gdx_stream_write_value32(st->stream, st->word, 0);
		if (rc == -EOPNOTSUPP) {
			/* a device without stream stores marks with events */
			GDX_INFO(SUB, "%s cannot store words in stream order: events mark the "
				 "copies", gdx_device_name(st->dev));
			gdx_pinned_free(st->dev, st->word);
			st->word = NULL;
			st->mode = GDX_STAGE_EVENTS;
		} else if (rc) {
			goto fail;
		}
	}
	st->wword = st->word;
	if (st->mode == GDX_STAGE_AGENT)
		st->tword = st->word;
	for (unsigned i = 0; st->mode == GDX_STAGE_EVENTS && i < st->nmarks; i++) {
		rc = gdx_event_create(st->dev, 0, &st->marks[i].ev);
		if (rc)
			goto fail;
	}
	*out = st;
	return 0;
fail:
	GDX_ERR(SUB, "staging ring on %s: %s", gdx_device_name(st->dev), gdx_strerror(rc));
	gdx_stage_close(st);
	return rc;
}

void gdx_stage_close(struct gdx_stage *st)
{
	bool busy;

	if (!st)
		return;
	/* copies an agent may still make write into the ring: not given back then */
	busy = st->agent && st->done < st->enq && !ctx_halted(st->ctx);
	if (st->marks)
		for (unsigned i = 0; i < st->nmarks; i++)
			if (st->marks[i].ev)
				gdx_event_destroy(st->marks[i].ev);
	/* destroying the stream waits for its copies */
	if (st->stream)
		gdx_stream_destroy(st->stream);
	if (st->word && st->o.mode == GDX_STAGE_WORD)
		gdx_pinned_free(st->dev, st->word);
	if (busy) {
		GDX_ERR(SUB, "%s: lane closed with copies in flight: its ring stays allocated",
			gdx_device_name(st->dev));
	} else if (st->pool) {
		for (unsigned i = 0; i < st->ntaken; i++)
			gdx_bounce_put(st->pool, (char *)gdx_bounce_base(st->pool) +
						 (size_t)i * gdx_bounce_buf_size(st->pool));
		gdx_bounce_pool_destroy(st->pool);
	}
	free(st->marks);
	free(st->copies);
	free(st->pend_dst);
	free(st->pend_src);
	free(st->pend_len);
	free(st->fifo);
	free(st->scratch);
	free(st->pfifo);
	free(st);
}

/* ---- lane: producer ------------------------------------------------------- */

static struct gdx_stage_piece *piece_at(const struct gdx_stage *st, unsigned i)
{
	return (struct gdx_stage_piece *)(st->pfifo +
					  (size_t)((st->phead + i) % st->o.pieces) * st->psz);
}

int gdx_stage_reserve(struct gdx_stage *st, size_t n, unsigned flags, struct gdx_stage_span *sp)
{
	size_t skip, off, need;
	int rc = stopped(st);

	if (rc)
		return rc;
	if (st->o.pieces && st->pn == st->o.pieces)
		return -EAGAIN;
	n = GDX_MIN(n, st->o.chunk);
	/* D2H: a ring the consumer gave all back starts over at its beginning */
	if (st->o.dir == GDX_STAGE_D2H && st->r.tail == st->r.head && st->r.head % st->r.size) {
		st->r.head += st->r.size - st->r.head % st->r.size;
		st->r.tail = st->r.head;
		landed(st, st->r.head);
	}
	off = gdx_byte_ring_place(&st->r, &n, st->o.align, &skip);
	need = skip + n;
	if (st->r.head + need - st->r.tail > st->r.size) {
		/* with a done word the copies may have landed already: only a real wait counts */
		if (st->word && st->o.dir == GDX_STAGE_H2D)
			learn_word(st);
		if (st->r.head + need - st->r.tail > st->r.size) {
			if (flags & GDX_STAGE_NOWAIT || st->o.dir == GDX_STAGE_D2H)
				return -EAGAIN;
			cnt(st, C_RING_FULL);
		}
	}
	/* with a done word every copy takes a mark: none free is as full (AGENT: no descriptor) */
	if (flags & GDX_STAGE_NOWAIT && st->word && st->nmarked == st->nmarks) {
		learn_word(st);
		if (st->nmarked == st->nmarks)
			return -EAGAIN;
	}
	while (st->r.head + need - st->r.tail > st->r.size) {
		rc = st->nmarked ? wait_mark(st) : wait_all(st);
		if (rc) {
			rc = piece_fault(st, rc);
			if (rc < 0)
				return rc;
		}
	}
	st->resv = st->r.head;
	st->r.head += need;
	sp->p = (char *)st->base + off;
	sp->n = n;
	sp->pos = st->r.head - n;
	sp->end = st->r.head;
	if (st->o.pieces)
		*piece_at(st, st->pn++) = (struct gdx_stage_piece){ .end = sp->end };
	return 0;
}

void gdx_stage_unreserve(struct gdx_stage *st, const struct gdx_stage_span *sp)
{
	if (sp->end != st->r.head)
		return;
	st->r.head = st->resv;
	if (st->o.pieces)
		st->pn--;
}

void gdx_stage_trim(struct gdx_stage *st, struct gdx_stage_span *sp, size_t n)
{
	if (n >= sp->n)
		return;
	sp->n = n;
	if (sp->end != st->r.head)
		return;
	st->r.head = sp->pos + n;
	sp->end = st->r.head;
	if (st->o.pieces)
		piece_at(st, st->pn - 1)->end = sp->end;
}

int gdx_stage_flush(struct gdx_stage *st)
{
	int rc;

	if (!st->npend)
		return 0;
	cnt(st, C_CALLS);
	rc = gdx_memcpy_batch_async(st->dev, st->pend_dst, st->pend_src, st->pend_len, st->npend,
				    st->stream);
	st->npend = 0;
	st->pend_bytes = 0;
	/* a batch that failed may be in part or not at all: enq stays before it */
	if (!rc) {
		st->enq = st->posted;
		if (st->o.enqueued)
			for (unsigned i = 0; i < st->fn; i++)
				if (*fifo_at(st, i) <= st->enq)
					st->o.enqueued(st->o.owner, fifo_at(st, i) + 1);
		rc = place_mark(st);
	}
	return rc ? fault(st, rc) : 0;
}

/* Hands the copy to the agent: a descriptor, and its seq as the mark. */
static int post_agent(struct gdx_stage *st, void *dst, const void *src, size_t n, uint64_t end)
{
	struct gdx_stage_mark *m;
	unsigned idx;
	uint32_t seq;
	int rc;

	if (st->nmarked == st->nmarks)
		learn_word(st);
	if (st->nmarked == st->nmarks) {
		rc = wait_mark(st);
		if (rc)
			return rc;
	}
	/* a ring holds more descriptors than a lane has marks: full only for a moment */
	for (unsigned i = 1; (rc = gdx_copy_agent_post(st->agent, st->o.lane, dst, src, n,
						       &seq)) == -EAGAIN; i++) {
		if (!(i % 64)) {
			rc = check(st);
			if (rc)
				return rc;
		}
		sched_yield();
	}
	if (rc)
		return rc;
	idx = (st->mark0 + st->nmarked) % st->nmarks;
	m = &st->marks[idx];
	if (st->copies)
		st->copies[idx] = (struct gdx_stage_copy){ dst, src, n };
	m->seq = st->seq = seq;
	m->pos = st->enq = st->marked = end;
	st->nmarked++;
	publish_seq(st, m);
	return 0;
}

int gdx_stage_post(struct gdx_stage *st, const struct gdx_stage_span *sp, void *devp)
{
	void *dst = st->o.dir == GDX_STAGE_H2D ? devp : sp->p;
	const void *src = st->o.dir == GDX_STAGE_H2D ? sp->p : devp;
	int rc;

	if (st->err)
		return st->err;
	/* in reservation order: a mark behind the last post's would give back room in use */
	if (sp->end <= st->posted)
		return -EINVAL;
	cnt(st, C_COPIES);
	switch (st->mode) {
	case GDX_STAGE_AGENT:
		rc = post_agent(st, dst, src, sp->n, sp->end);
		if (!rc) {
			__atomic_store_n(&st->posted, sp->end, __ATOMIC_RELAXED);
			return 0;
		}
		/* REDO: the failed post's copy is the lane's to make now */
		rc = piece_fault(st, rc);
		if (rc < 0)
			return rc;
		break;	/* made synchronously below */
	case GDX_STAGE_SYNC:
		break;
	default:
		__atomic_store_n(&st->posted, sp->end, __ATOMIC_RELAXED);
		if (st->o.batch > 1) {
			st->pend_dst[st->npend] = dst;
			st->pend_src[st->npend] = src;
			st->pend_len[st->npend++] = sp->n;
			st->pend_bytes += sp->n;
			/* a full batch, or one holding a chunk, goes out at once */
			if (st->npend == st->o.batch || st->pend_bytes >= st->o.chunk) {
				rc = gdx_stage_flush(st);
				if (!rc && st->word)
					learn_word(st);
				else if (!rc)
					rc = query_marks(st, 1);
				if (rc)
					return piece_fault(st, rc);
				run_effects(st, 0);
			}
		} else {
			cnt(st, C_CALLS);
			rc = gdx_memcpy_async(st->dev, dst, src, sp->n, st->stream);
			if (rc)
				return piece_fault(st, rc);
			st->enq = sp->end;
		}
		/* a done word costs nothing to read: every copy gets its mark */
		if (st->enq - st->marked >= (st->word ? 1 : st->o.mark_every)) {
			rc = place_mark(st);
			if (rc)
				return piece_fault(st, rc);
		}
		return 0;
	}
	cnt(st, C_CALLS);
	rc = gdx_memcpy(st->dev, dst, src, sp->n);
	/*
	 * A lane synchronous from the start has nothing in flight: the failed
	 * copy (a bad device pointer) is this piece's, not the lane's.
	 */
	if (rc && st->o.mode == GDX_STAGE_SYNC)
		return rc;
	if (rc)
		return piece_fault(st, rc);
	__atomic_store_n(&st->posted, sp->end, __ATOMIC_RELAXED);
	st->enq = sp->end;
	landed(st, sp->end);
	return 0;
}

int gdx_stage_progress(struct gdx_stage *st)
{
	int rc = 0;

	if (st->err)
		return st->err;
	if (st->word) {
		learn_word(st);
	} else if (st->mode == GDX_STAGE_EVENTS) {
		/*
		 * The marks oldest first, and once they all landed the stream as a
		 * whole (a query, no event to record).  A stream still busy gets
		 * a mark, so that with copies enqueued back to back the effects
		 * deferred now still run when theirs have landed, not when the
		 * stream first runs dry.
		 */
		rc = query_marks(st, 0);
		if (!rc && !st->nmarked && st->done != st->enq) {
			cnt(st, C_QUERIES);
			rc = gdx_stream_query(st->stream);
			if (rc == -EBUSY)
				rc = place_mark(st);
			else if (!rc)
				landed(st, st->enq);
		}
	}
	if (rc) {
		rc = fault(st, rc);
		if (rc < 0)
			return rc;
	}
	run_effects(st, 0);
	return 0;
}

int gdx_stage_wait(struct gdx_stage *st, uint64_t mark)
{
	unsigned redone = 0;
	int rc;

	if (gdx_stage_landed(st, mark))
		return 0;
	if (st->err)
		return st->err;
	if (mark > st->enq) {
		rc = gdx_stage_flush(st);
		if (rc)
			return rc;
	}
	while (st->done < mark) {
		bool marked = st->nmarked &&
			      st->marks[(st->mark0 + st->nmarked - 1) % st->nmarks].pos >= mark;

		rc = marked ? wait_mark(st) : wait_all(st);
		if (rc) {
			rc = fault(st, rc);
			if (rc < 0)
				return rc;
			redone += (unsigned)rc;
		}
	}
	return (int)redone;
}

/* gdx_stage_watch's loop; seen: seq is the mark's (a ticket), else looked up */
static int watch(const struct gdx_stage *st, uint64_t mark, bool seen, uint32_t seq)
{
	for (unsigned i = 1; !gdx_stage_landed(st, mark); i++) {
		/*
		 * The seq of the last mark at or past this one covers its copies
		 * (a later one's only makes the wait longer); the producer's done
		 * may lag: it learns only when it looks.
		 */
		if (!seen && st->wword && __atomic_load_n(&st->wmark, __ATOMIC_ACQUIRE) >= mark) {
			seq = __atomic_load_n(&st->wseq, __ATOMIC_RELAXED);
			seen = true;
		}
		if (seen && (int32_t)(__atomic_load_n(st->wword, __ATOMIC_ACQUIRE) - seq) >= 0)
			return 0;
		if (!(i % 64)) {
			int rc = gdx_stage_ctx_status(st->ctx);

			if (!rc && st->o.abort && __atomic_load_n(st->o.abort, __ATOMIC_ACQUIRE))
				rc = GDX_EDISCONNECTED;
			/*
			 * A stream lane's copies do not depend on the context: its
			 * stream says whether they failed, or all landed (the mark's
			 * was enqueued before the watch began).
			 */
			if (!rc && st->stream) {
				rc = gdx_stream_query(st->stream);
				if (rc != -EBUSY)
					return rc;
				rc = 0;
			}
			if (rc)
				return rc;
		}
		sched_yield();
	}
	return 0;
}

int gdx_stage_watch(const struct gdx_stage *st, uint64_t mark)
{
	return watch(st, mark, false, 0);
}

int gdx_stage_watch_post(const struct gdx_stage *st, uint64_t mark, uint32_t ticket)
{
	if (gdx_stage_seen(st, mark, ticket))
		return 0;
	return watch(st, mark, st->tword != NULL, ticket);
}

int gdx_stage_wait_idle(struct gdx_stage *st, int (*input)(void *arg), void *arg,
			uint64_t poll_ns)
{
	uint64_t until = 0;
	unsigned spins = 0;
	int rc;

	for (;;) {
		if (input) {
			rc = input(arg);
			if (rc)
				return rc;
		}
		rc = gdx_stage_flush(st);
		if (rc)
			return rc;
		if (!st->fn)
			return 0;
		if (st->err)
			return st->err;
		if (st->mode == GDX_STAGE_SYNC) {
			run_effects(st, 0);
			return 0;
		}
		if (st->word) {
			/* no driver call to read it: poll until they landed, asking now and then */
			if (!spins++)
				cnt(st, C_WAITS);
			learn_word(st);
			run_effects(st, 0);
			if (!st->fn)
				return 0;
			if (!(spins % 64)) {
				rc = check(st);
				if (rc < 0) {
					rc = fault(st, rc);
					if (rc < 0)
						return rc;
				}
				if (rc > 0) {
					run_effects(st, 0);
					return 0;
				}
			}
			sched_yield();
			continue;
		}
		if (!until)
			until = gdx_now_ns() + poll_ns;
		if (poll_ns && gdx_now_ns() < until) {
			rc = gdx_stage_progress(st);
			if (rc)
				return rc;
			if (st->fn) {
				sched_yield();
				continue;
			}
		} else {
			rc = wait_all(st);
			if (rc) {
				rc = fault(st, rc);
				if (rc < 0)
					return rc;
			}
			run_effects(st, 0);
		}
		return 0;
	}
}

int gdx_stage_defer(struct gdx_stage *st, uint64_t mark, const void *effect)
{
	uint64_t *e;

	if (!st->fn && gdx_stage_landed(st, mark)) {
		st->o.run(st->o.owner, (void *)(uintptr_t)effect, 0);
		st->o.run(st->o.owner, NULL, 0);
		return 0;
	}
	if (st->fn == st->fcap) {
		unsigned cap = st->fcap * 2;
		unsigned char *f = malloc((size_t)cap * st->esz);

		if (!f) {
			/* no room to queue it: wait for every copy up to it, then run them all */
			uint64_t last = *fifo_at(st, st->fn - 1);
			int rc = gdx_stage_wait(st, GDX_MAX(mark, last));

			rc = rc < 0 ? rc : 0;
			run_effects(st, rc);
			st->o.run(st->o.owner, (void *)(uintptr_t)effect, rc);
			st->o.run(st->o.owner, NULL, 0);
			return rc;
		}
		for (unsigned i = 0; i < st->fn; i++)
			memcpy(f + (size_t)i * st->esz, fifo_at(st, i), st->esz);
		free(st->fifo);
		st->fifo = f;
		st->fcap = cap;
		st->fhead = 0;
	}
	e = fifo_at(st, st->fn);
	*e = mark;
	memcpy(e + 1, effect, st->o.effect_size);
	st->fn++;
	return 0;
}

void gdx_stage_release(struct gdx_stage *st, uint64_t end)
{
	if (end > st->r.tail)
		st->r.tail = end;
}

uint64_t gdx_stage_first_mark(const struct gdx_stage *st)
{
	return st->fn ? *fifo_at(st, 0) : gdx_stage_mark(st);
}

/* A piece's effect runs with err, behind the effects deferred before it. */
static void piece_fail(struct gdx_stage *st, void *effect, int err)
{
	if (st->fn) {
		/* a mark that never lands: the lane failed, its drain runs it with err */
		gdx_stage_defer(st, UINT64_MAX, effect);
		return;
	}
	st->o.run(st->o.owner, effect, err);
	st->o.run(st->o.owner, NULL, 0);
}

/*
 * Takes the ready pieces at the head out, in reservation order: H2D posts
 * each copy and defers its effect, D2H gives its room back; after a drain
 * they are spent (their effects ran).  0 or the first post's error.
 */
static int pieces_advance(struct gdx_stage *st)
{
	int first = 0;

	while (st->pn && piece_at(st, 0)->ready) {
		struct gdx_stage_piece pc = *piece_at(st, 0);
		/* a reservation made from an effect writes a header only: the effect stays */
		void *effect = piece_at(st, 0) + 1;
		struct gdx_stage_span sp = { .p = pc.p, .n = pc.n, .pos = pc.end - pc.n,
					     .end = pc.end };
		int rc;

		st->phead = (st->phead + 1) % st->o.pieces;
		st->pn--;
		if (st->perr)
			continue;
		st->pready--;
		if (st->o.dir == GDX_STAGE_D2H) {
			gdx_stage_release(st, pc.end);
			continue;
		}
		rc = gdx_stage_post(st, &sp, pc.devp);
		if (!rc && pc.effect)
			rc = gdx_stage_defer(st, pc.end, effect);	/* no memory: ran with rc */
		else if (rc && pc.effect)
			piece_fail(st, effect, rc);
		if (rc && !first)
			first = rc;
	}
	return first;
}

int gdx_stage_ready(struct gdx_stage *st, const struct gdx_stage_span *sp, void *devp,
		    const void *effect)
{
	struct gdx_stage_piece *pc;
	unsigned lo = 0, hi = st->pn;

	if (!st->o.pieces || (effect && (!st->o.effect_size || st->o.dir == GDX_STAGE_D2H)))
		return -EINVAL;
	/* the marks grow with the reservations */
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (piece_at(st, mid)->end < sp->end)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == st->pn || piece_at(st, lo)->end != sp->end || piece_at(st, lo)->ready)
		return -EINVAL;
	pc = piece_at(st, lo);
	pc->ready = true;
	if (st->perr) {
		/* drained: nothing is posted any more, the piece fails now */
		if (effect)
			piece_fail(st, (void *)(uintptr_t)effect, st->perr);
		return pieces_advance(st);
	}
	pc->p = sp->p;
	pc->n = sp->n;
	pc->devp = devp;
	pc->effect = effect != NULL;
	if (effect)
		memcpy(pc + 1, effect, st->o.effect_size);
	st->pready++;
	if (lo) {
		cnt(st, C_HELD);
		return 1;
	}
	return pieces_advance(st);
}

/* The drain's end: the held pieces fail with err, in order, and so will those to come. */
static void pieces_drain(struct gdx_stage *st, int err)
{
	bool ran = false;

	if (!st->o.pieces)
		return;
	st->perr = err ? err : -ECANCELED;
	for (unsigned i = 0; i < st->pn; i++) {
		struct gdx_stage_piece *pc = piece_at(st, i);

		if (pc->ready && pc->effect) {
			pc->effect = false;
			st->o.run(st->o.owner, pc + 1, st->perr);
			ran = true;
		}
	}
	if (ran)
		st->o.run(st->o.owner, NULL, 0);
	st->pready = 0;
	pieces_advance(st);
}

int gdx_stage_halves(struct gdx_stage *st, void *b[2], size_t *bsz)
{
	/* a failed post's room counts: a worker may still make its copy */
	if (st->done < st->r.head && !ctx_halted(st->ctx))
		return -EBUSY;
	st->r.tail = st->r.head;
	b[0] = st->base;
	b[1] = (char *)st->base + st->r.size / 2;
	*bsz = st->r.size / 2;
	return 0;
}

void *gdx_stage_ring(const struct gdx_stage *st, size_t *size)
{
	if (size)
		*size = st->r.size;
	return st->base;
}

int gdx_stage_drain(struct gdx_stage *st, int err)
{
	int rc = st->err;

	if (!rc)
		rc = gdx_stage_flush(st);
	if (!rc)
		rc = st->err ? st->err : wait_all(st);
	if (!rc) {
		run_effects(st, 0);
		pieces_drain(st, err);
		return 0;
	}
	/*
	 * A stream lane failed by a copy it could not enqueue (FAIL) still has
	 * the copies enqueued before it on a working stream: they land, and
	 * their effects run without the error (a file read whose chunks were
	 * all copied completes; only those behind the fault fail).
	 */
	if (rc == st->err && st->stream && !gdx_stream_synchronize(st->stream))
		landed(st, st->enq);
	/* the copies cannot land, or are given up: none may run once the ring goes back */
	if (st->agent) {
		gdx_stage_ctx_fail(st->ctx, aborted(st, rc) ? -ESHUTDOWN : rc);
		learn_word(st);
	}
	run_effects(st, 0);
	if (st->o.run)
		run_effects(st, err);
	pieces_drain(st, err);
	return rc;
}

void gdx_stage_stats(const struct gdx_stage *st, struct gdx_stage_stats *s)
{
	s->copies = gdx_counter_get(&st->cnt[C_COPIES]);
	s->calls = gdx_counter_get(&st->cnt[C_CALLS]);
	s->records = gdx_counter_get(&st->cnt[C_RECORDS]);
	s->queries = gdx_counter_get(&st->cnt[C_QUERIES]);
	s->waits = gdx_counter_get(&st->cnt[C_WAITS]);
	s->ring_full = gdx_counter_get(&st->cnt[C_RING_FULL]);
	s->redone = gdx_counter_get(&st->cnt[C_REDONE]);
	s->held = gdx_counter_get(&st->cnt[C_HELD]);
}
