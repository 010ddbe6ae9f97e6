/* SPDX-License-Identifier: MIT */
/*
 * Batches (gdx_file_batch_*): I/Os submitted together and reaped from a
 * completion ring, run on the driver's worker threads, so that a batch's
 * depth is what the backends have in flight.  Each I/O is prepared, run and
 * recorded as a synchronous one is (file.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "file/file_int.h"

/* ---- batch ------------------------------------------------------------- */

/*
 * I/Os on a backend with io_many (uring) queue up for one runner per backend
 * and batch, which keeps a single engine busy for as long as I/Os keep coming,
 * so the batch's depth is what is in flight.  Other backends run each I/O as
 * a job on the driver's workers.
 */
struct batch_queue {
	struct gdx_file_io **q;		/* ring of max entries */
	unsigned head, count;
	bool running;
};

struct gdx_file_batch {
	struct gdx_file_driver *drv;
	unsigned max;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned outstanding;		/* submitted, not yet reaped */
	struct gdx_file_batch_event *cq;	/* completed, ring of max entries */
	unsigned cq_head, cq_count;
	unsigned runners;		/* jobs that still touch the batch */
	struct batch_queue bq[GDX_FILE_BE_COUNT];
};

struct batch_runner {
	struct gdx_file_batch *b;
	int be;
};

static void batch_complete(struct gdx_file_io *io, struct gdx_file_batch *b)
{
	struct gdx_file_batch_event *ev;

	if (io->file)
		gdx_file_io_record(io->file, io);
	else
		gdx_file_info_finish(&io->info);
	pthread_mutex_lock(&b->lock);
	ev = &b->cq[(b->cq_head + b->cq_count) % b->max];
	b->cq_count++;
	ev->cookie = io->cookie;
	ev->result = io->result;
	ev->info = io->info;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	free(io);
}

static void runner_done(struct gdx_file_io *io, void *arg)
{
	batch_complete(io, ((struct batch_runner *)arg)->b);
}

static unsigned runner_more(void *arg, struct gdx_file_io **ios, unsigned max)
{
	struct batch_runner *rn = arg;
	struct batch_queue *q = &rn->b->bq[rn->be];
	unsigned n = 0;

	pthread_mutex_lock(&rn->b->lock);
	while (n < max && q->count) {
		ios[n++] = q->q[q->head];
		q->head = (q->head + 1) % rn->b->max;
		q->count--;
	}
	pthread_mutex_unlock(&rn->b->lock);
	return n;
}

static void runner_job(void *arg)
{
	struct batch_runner *rn = arg;
	struct gdx_file_batch *b = rn->b;
	struct gdx_file_be *be = &b->drv->be[rn->be];
	bool again;

	do {
		be->ops->io_many(be->priv, runner_more, runner_done, rn);
		pthread_mutex_lock(&b->lock);
		/* Whatever arrived after the engine's last look is still ours. */
		again = b->bq[rn->be].count > 0;
		if (!again) {
			b->bq[rn->be].running = false;
			b->runners--;
			pthread_cond_broadcast(&b->cond);
		}
		pthread_mutex_unlock(&b->lock);
	} while (again);
	free(rn);
}

static void single_job(void *arg)
{
	struct gdx_file_io *io = arg;
	struct gdx_file_batch *b = io->owner;

	io->result = gdx_file_io_exec(io->file, io);
	batch_complete(io, b);
	pthread_mutex_lock(&b->lock);
	b->runners--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

GDX_API int gdx_file_batch_create(struct gdx_file_driver *drv, unsigned max_ios,
				  struct gdx_file_batch **out)
{
	struct gdx_file_batch *b;

	if (!drv || !out || !max_ios || max_ios > 65536)
		return -EINVAL;
	gdx_file_wq_start(drv);
	if (drv->wq_err)
		return drv->wq_err;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cq = calloc(max_ios, sizeof(*b->cq));
	for (int i = 0; i < GDX_FILE_BE_COUNT && b->cq; i++) {
		b->bq[i].q = calloc(max_ios, sizeof(*b->bq[i].q));
		if (!b->bq[i].q) {
			free(b->cq);
			b->cq = NULL;
		}
	}
	if (!b->cq) {
		for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
			free(b->bq[i].q);
		free(b);
		return -ENOMEM;
	}
	b->drv = drv;
	b->max = max_ios;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	*out = b;
	return 0;
}

GDX_API void gdx_file_batch_destroy(struct gdx_file_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	while (b->cq_count < b->outstanding || b->runners)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
		free(b->bq[i].q);
	free(b->cq);
	free(b);
}

/* The backend an I/O runs on: a file's fallback takes its host-memory I/O. */
static int batch_be(const struct gdx_file_batch *b, const struct gdx_file_io *io)
{
	const struct gdx_file *f = io->file;
	const struct gdx_file_be *be = f->fb && io->attrs.kind != GDX_MEM_DEVICE ? f->fb : f->be;

	return (int)(be - b->drv->be);
}

/* Runs one I/O as a job of its own (backends without io_many). */
static void single_start(struct gdx_file_batch *b, struct gdx_file_io *io)
{
	int ret;

	io->owner = b;
	pthread_mutex_lock(&b->lock);
	b->runners++;
	pthread_mutex_unlock(&b->lock);
	ret = gdx_tpool_submit(b->drv->wq, single_job, io);
	if (ret) {
		pthread_mutex_lock(&b->lock);
		b->runners--;
		pthread_mutex_unlock(&b->lock);
		io->result = ret;
		batch_complete(io, b);
	}
}

/* Starts the runner of backend idx, marked running; without one, fails what it holds. */
static void runner_start(struct gdx_file_batch *b, int idx)
{
	struct batch_runner *rn = malloc(sizeof(*rn));
	struct batch_queue *q = &b->bq[idx];
	int ret = -ENOMEM;

	if (rn) {
		rn->b = b;
		rn->be = idx;
		ret = gdx_tpool_submit(b->drv->wq, runner_job, rn);
		if (!ret)
			return;
		free(rn);
	}
	pthread_mutex_lock(&b->lock);
	while (q->count) {
		struct gdx_file_io *x = q->q[q->head];

		q->head = (q->head + 1) % b->max;
		q->count--;
		pthread_mutex_unlock(&b->lock);
		x->result = ret;
		batch_complete(x, b);
		pthread_mutex_lock(&b->lock);
	}
	q->running = false;
	b->runners--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

/*
 * Hands prepared I/Os to their backends: those on a backend with io_many go
 * to its queue all under one hold of the lock, so that an engine takes a
 * submission whole rather than in pieces while it is still being queued (an
 * engine whose context broke takes no more, and what it left queued waits
 * for it to end: behind a slow read, for as long as that read).
 */
static void batch_queue(struct gdx_file_batch *b, struct gdx_file_io **v, unsigned n)
{
	bool start[GDX_FILE_BE_COUNT] = { false };

	pthread_mutex_lock(&b->lock);
	for (unsigned i = 0; i < n; i++) {
		int idx;
		struct batch_queue *q;

		if (!v[i])
			continue;
		idx = batch_be(b, v[i]);
		if (!b->drv->be[idx].ops->io_many)
			continue;
		q = &b->bq[idx];
		q->q[(q->head + q->count) % b->max] = v[i];
		q->count++;
		v[i] = NULL;
		if (!q->running) {
			q->running = true;
			b->runners++;
			start[idx] = true;
		}
	}
	pthread_mutex_unlock(&b->lock);
	for (int idx = 0; idx < GDX_FILE_BE_COUNT; idx++)
		if (start[idx])
			runner_start(b, idx);
	for (unsigned i = 0; i < n; i++)
		if (v[i])
			single_start(b, v[i]);
}

GDX_API int gdx_file_batch_submit(struct gdx_file_batch *b, const struct gdx_file_batch_io *ios,
				  unsigned n)
{
	struct gdx_file_io **v;

	if (!b || (!ios && n))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!ios[i].file || ios[i].file->drv != b->drv ||
		    (ios[i].op != GDX_FILE_READ && ios[i].op != GDX_FILE_WRITE))
			return -EINVAL;
	if (!n)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&b->lock);
	if (b->outstanding + n > b->max) {
		pthread_mutex_unlock(&b->lock);
		free(v);
		return -EAGAIN;
	}
	b->outstanding += n;
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < n; i++) {
		struct gdx_file_io *io = malloc(sizeof(*io));
		int ret;

		v[i] = NULL;
		if (!io) {
			/* Still completes, with its error, like any failed I/O. */
			pthread_mutex_lock(&b->lock);
			b->cq[(b->cq_head + b->cq_count) % b->max] = (struct gdx_file_batch_event){
				.cookie = ios[i].cookie, .result = -ENOMEM };
			b->cq_count++;
			pthread_cond_broadcast(&b->cond);
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		ret = gdx_file_io_prep(ios[i].file, ios[i].op, ios[i].buf, ios[i].size, ios[i].off,
				       io);
		io->cookie = ios[i].cookie;
		if (ret || !ios[i].size) {
			/* Fails (or finishes) at once, but still through the completion queue. */
			io->result = ret;
			batch_complete(io, b);
			continue;
		}
		v[i] = io;
	}
	batch_queue(b, v, n);
	free(v);
	return 0;
}

GDX_API int gdx_file_batch_wait(struct gdx_file_batch *b, unsigned min_nr,
				struct gdx_file_batch_event *ev, unsigned max, int timeout_ms)
{
	struct timespec deadline;
	bool timed_out = false;
	unsigned got = 0;

	if (!b || (!ev && max) || min_nr > max)
		return -EINVAL;
	if (timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&b->lock);
	if (min_nr > b->outstanding) {
		pthread_mutex_unlock(&b->lock);
		return -EINVAL;
	}
	for (;;) {
		while (got < max && b->cq_count) {
			ev[got++] = b->cq[b->cq_head];
			b->cq_head = (b->cq_head + 1) % b->max;
			b->cq_count--;
			b->outstanding--;
		}
		if (got >= min_nr || timeout_ms == 0 || timed_out)
			break;
		if (timeout_ms < 0)
			pthread_cond_wait(&b->cond, &b->lock);
		else if (pthread_cond_timedwait(&b->cond, &b->lock, &deadline) == ETIMEDOUT)
			timed_out = true;
	}
	pthread_mutex_unlock(&b->lock);
	return (int)got;
}
