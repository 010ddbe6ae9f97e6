/* SPDX-License-Identifier: MIT */
/*
 * Thread pool: one mutex-protected FIFO and a fixed set of workers.  Jobs get
 * a sequence number when queued; drain() waits until no job older than its
 * own snapshot is queued or running, so submitters that keep submitting
 * cannot starve it.
 *
 * With a spin time set, a worker that has just finished a job polls the queue
 * for that long before it sleeps: a job queued meanwhile starts in well under
 * a microsecond instead of after a futex wake (tens of microseconds on a
 * virtual machine).  At most max_spin workers spin at a time, and a submit
 * signals a sleeper only for jobs the spinners cannot take.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/tpool.h"
#include "common/util.h"

#define TPOOL_MAX_THREADS 1024

struct job {
	struct job *next;
	gdx_job_fn fn;
	void *arg;
	uint64_t seq;
};

struct worker {
	struct gdx_tpool *tp;
	pthread_t thread;
	unsigned idx;
	uint64_t running;	/* seq of the job being run, or UINT64_MAX */
};

struct gdx_tpool {
	pthread_mutex_t lock;
	pthread_cond_t work;	/* a job was queued, or stop was set */
	pthread_cond_t done;	/* a job returned (only signalled while drainers wait) */
	struct job *head, *tail;
	uint64_t next_seq;
	unsigned drainers;
	unsigned queued;	/* jobs in the FIFO; read without the lock by a spinner */
	unsigned spinning;	/* workers polling the queue, at most max_spin */
	unsigned max_spin;
	uint64_t spin_ns;
	bool stop;
	unsigned nthreads;
	char name[12];
	struct worker workers[];
};

static _Thread_local struct gdx_tpool *current_pool;

/* Caller holds tp->lock.  True when every job with seq < upto has returned. */
static bool done_upto(const struct gdx_tpool *tp, uint64_t upto)
{
	if (tp->head && tp->head->seq < upto)
		return false;
	for (unsigned i = 0; i < tp->nthreads; i++)
		if (tp->workers[i].running < upto)
			return false;
	return true;
}

/*
 * Caller holds tp->lock and has just run a job.  Polls the queue for up to
 * spin_ns without the lock; returns with the lock held again.  A submit made
 * while spinning is set does not signal, so the caller must look at the queue
 * under the lock before it sleeps (it does: the wait loop checks head first).
 */
static void spin_for_work(struct gdx_tpool *tp)
{
	uint64_t spin_ns = tp->spin_ns, until;

	if (!spin_ns || tp->spinning >= tp->max_spin || tp->stop)
		return;
	tp->spinning++;
	pthread_mutex_unlock(&tp->lock);
	until = gdx_now_ns() + spin_ns;
	for (unsigned i = 0;; i++) {
		if (__atomic_load_n(&tp->queued, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&tp->stop, __ATOMIC_RELAXED))
			break;
		if ((i & 63) == 63 && gdx_now_ns() >= until)
			break;
		gdx_cpu_relax();
	}
	pthread_mutex_lock(&tp->lock);
	tp->spinning--;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct gdx_tpool *tp = w->tp;
	char tname[16];

	snprintf(tname, sizeof(tname), "%s-%u", tp->name, w->idx);
	pthread_setname_np(pthread_self(), tname);
	current_pool = tp;

	pthread_mutex_lock(&tp->lock);
	for (;;) {
		struct job *j;

		while (!tp->head && !tp->stop)
			pthread_cond_wait(&tp->work, &tp->lock);
		j = tp->head;
		if (!j)
			break;	/* stopping, and nothing is left to run */
		tp->head = j->next;
		if (!tp->head)
			tp->tail = NULL;
		__atomic_store_n(&tp->queued, tp->queued - 1, __ATOMIC_RELAXED);
		w->running = j->seq;
		pthread_mutex_unlock(&tp->lock);

		j->fn(j->arg);
		free(j);

		pthread_mutex_lock(&tp->lock);
		w->running = UINT64_MAX;
		if (tp->drainers)
			pthread_cond_broadcast(&tp->done);
		if (!tp->head)
			spin_for_work(tp);
	}
	pthread_mutex_unlock(&tp->lock);
	return NULL;
}

int gdx_tpool_create(unsigned nthreads, const char *name, struct gdx_tpool **out)
{
	struct gdx_tpool *tp;
	unsigned i;
	int ret;

	if (!nthreads || nthreads > TPOOL_MAX_THREADS || !out)
		return -EINVAL;
	tp = calloc(1, sizeof(*tp) + nthreads * sizeof(tp->workers[0]));
	if (!tp)
		return -ENOMEM;
	pthread_mutex_init(&tp->lock, NULL);
	pthread_cond_init(&tp->work, NULL);
	pthread_cond_init(&tp->done, NULL);
	/* Thread names are 15 bytes: keep room for "-N". */
	snprintf(tp->name, sizeof(tp->name), "%s", name && *name ? name : "gdx");
	for (i = 0; i < nthreads; i++) {
		struct worker *w = &tp->workers[i];

		w->tp = tp;
		w->idx = i;
		w->running = UINT64_MAX;
		ret = pthread_create(&w->thread, NULL, worker_main, w);
		if (ret) {
			GDX_ERR("tpool", "%s: cannot start worker %u: %s", tp->name, i,
				strerror(ret));
			tp->nthreads = i;
			gdx_tpool_destroy(tp);
			return -ret;
		}
		/* Published only now so done_upto() never reads an unstarted slot. */
		pthread_mutex_lock(&tp->lock);
		tp->nthreads = i + 1;
		pthread_mutex_unlock(&tp->lock);
	}
	*out = tp;
	return 0;
}

void gdx_tpool_destroy(struct gdx_tpool *tp)
{
	if (!tp)
		return;
	if (current_pool == tp) {
		/* Joining itself would deadlock; the caller's bug, so say so loudly. */
		GDX_ERR("tpool", "%s: destroy called from one of its own jobs; ignored", tp->name);
		return;
	}
	pthread_mutex_lock(&tp->lock);
	__atomic_store_n(&tp->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&tp->work);
	pthread_mutex_unlock(&tp->lock);
	/* Workers leave only once the queue is empty, so every queued job runs. */
	for (unsigned i = 0; i < tp->nthreads; i++)
		pthread_join(tp->workers[i].thread, NULL);
	pthread_mutex_destroy(&tp->lock);
	pthread_cond_destroy(&tp->work);
	pthread_cond_destroy(&tp->done);
	free(tp);
}

int gdx_tpool_submit(struct gdx_tpool *tp, gdx_job_fn fn, void *arg)
{
	struct job *j;

	if (!tp || !fn)
		return -EINVAL;
	j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->next = NULL;
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&tp->lock);
	/* During destroy only the pool's own jobs can still reach here; they may queue more. */
	if (tp->stop && current_pool != tp) {
		pthread_mutex_unlock(&tp->lock);
		free(j);
		return -ESHUTDOWN;
	}
	j->seq = tp->next_seq++;
	if (tp->tail)
		tp->tail->next = j;
	else
		tp->head = j;
	tp->tail = j;
	__atomic_store_n(&tp->queued, tp->queued + 1, __ATOMIC_RELEASE);
	/* A spinning worker takes one job without a wake; more need sleepers. */
	if (tp->queued > tp->spinning)
		pthread_cond_signal(&tp->work);
	pthread_mutex_unlock(&tp->lock);
	return 0;
}

void gdx_tpool_set_spin(struct gdx_tpool *tp, unsigned spin_us, unsigned max_spin)
{
	if (!tp)
		return;
	pthread_mutex_lock(&tp->lock);
	tp->spin_ns = (uint64_t)spin_us * 1000u;
	tp->max_spin = max_spin;
	pthread_mutex_unlock(&tp->lock);
}

void gdx_tpool_drain(struct gdx_tpool *tp)
{
	uint64_t upto;

	if (!tp)
		return;
	if (current_pool == tp) {
		GDX_ERR("tpool", "%s: drain called from one of its own jobs; ignored", tp->name);
		return;
	}
	pthread_mutex_lock(&tp->lock);
	upto = tp->next_seq;
	tp->drainers++;
	while (!done_upto(tp, upto))
		pthread_cond_wait(&tp->done, &tp->lock);
	tp->drainers--;
	pthread_mutex_unlock(&tp->lock);
}

unsigned gdx_tpool_size(const struct gdx_tpool *tp)
{
	return tp ? tp->nthreads : 0;
}
