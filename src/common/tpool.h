/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_TPOOL_H
#define GDX_COMMON_TPOOL_H

#include <stddef.h>

/* A fixed set of worker threads draining one FIFO of jobs. */
struct gdx_tpool;
typedef void (*gdx_job_fn)(void *arg);

int gdx_tpool_create(unsigned nthreads, const char *name, struct gdx_tpool **out);
/* Runs every queued job, then joins the workers. */
void gdx_tpool_destroy(struct gdx_tpool *tp);
int gdx_tpool_submit(struct gdx_tpool *tp, gdx_job_fn fn, void *arg);
/* Waits until every job submitted so far has returned. */
void gdx_tpool_drain(struct gdx_tpool *tp);
unsigned gdx_tpool_size(const struct gdx_tpool *tp);

#endif
