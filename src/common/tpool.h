/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_TPOOL_H
#define GDX_COMMON_TPOOL_H

#include <stddef.h>

/*
 * A fixed set of worker threads draining one FIFO of jobs.  Jobs start in
 * submission order; with more than one worker they may finish in any order.
 */
struct gdx_tpool;
typedef void (*gdx_job_fn)(void *arg);

/* nthreads 1..1024; name prefixes the worker thread names ("name-0"). */
int gdx_tpool_create(unsigned nthreads, const char *name, struct gdx_tpool **out);
/*
 * Runs every queued job (including jobs those jobs submit), then joins the
 * workers.  Other threads must have stopped submitting: a submit racing with
 * destroy returns -ESHUTDOWN at best.  Not callable from a job of the pool.
 */
void gdx_tpool_destroy(struct gdx_tpool *tp);
/* 0, -EINVAL, -ENOMEM, or -ESHUTDOWN once destroy has begun. */
int gdx_tpool_submit(struct gdx_tpool *tp, gdx_job_fn fn, void *arg);
/*
 * Waits until every job submitted before the call has returned; jobs
 * submitted meanwhile do not hold it up.  Not callable from a job of the pool
 * (it would wait for itself): that is logged and returns at once.
 */
void gdx_tpool_drain(struct gdx_tpool *tp);
unsigned gdx_tpool_size(const struct gdx_tpool *tp);
/*
 * A worker that finishes a job polls the queue for spin_us before it sleeps,
 * up to max_spin workers at a time (spin_us 0, the default, never polls).
 * Trades that much CPU after each job for a start without a thread wake-up;
 * two spinners keep one job running while the next is already picked up.
 */
void gdx_tpool_set_spin(struct gdx_tpool *tp, unsigned spin_us, unsigned max_spin);

#endif
