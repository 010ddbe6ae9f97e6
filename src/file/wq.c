/* SPDX-License-Identifier: MIT */
/*
 * Worker threads for the file layer: batch I/O and stream-ordered I/O run
 * here so the caller's thread (or the device's host-function thread) only
 * hands work over.  Jobs run in submission order per worker pick-up.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file/file_int.h"

struct job {
	gdx_file_job_fn fn;
	void *arg;
	struct job *next;
};

struct gdx_file_wq {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head, *tail;
	bool stop;
	unsigned n;
	pthread_t thr[];
};

static void *worker(void *arg)
{
	struct gdx_file_wq *wq = arg;

	pthread_mutex_lock(&wq->lock);
	for (;;) {
		struct job *j;

		while (!wq->head && !wq->stop)
			pthread_cond_wait(&wq->cond, &wq->lock);
		if (!wq->head)
			break;
		j = wq->head;
		wq->head = j->next;
		if (!wq->head)
			wq->tail = NULL;
		pthread_mutex_unlock(&wq->lock);
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&wq->lock);
	}
	pthread_mutex_unlock(&wq->lock);
	return NULL;
}

int gdx_file_wq_create(unsigned nthreads, const char *name, struct gdx_file_wq **out)
{
	struct gdx_file_wq *wq = calloc(1, sizeof(*wq) + nthreads * sizeof(pthread_t));
	int ret = 0;

	if (!wq)
		return -ENOMEM;
	pthread_mutex_init(&wq->lock, NULL);
	pthread_cond_init(&wq->cond, NULL);
	for (; wq->n < nthreads; wq->n++) {
		char tn[16];

		ret = -pthread_create(&wq->thr[wq->n], NULL, worker, wq);
		if (ret)
			break;
		snprintf(tn, sizeof(tn), "%s%u", name, wq->n);
		pthread_setname_np(wq->thr[wq->n], tn);
	}
	if (ret) {
		gdx_file_wq_destroy(wq);
		return ret;
	}
	*out = wq;
	return 0;
}

void gdx_file_wq_destroy(struct gdx_file_wq *wq)
{
	if (!wq)
		return;
	pthread_mutex_lock(&wq->lock);
	wq->stop = true;
	pthread_cond_broadcast(&wq->cond);
	pthread_mutex_unlock(&wq->lock);
	for (unsigned i = 0; i < wq->n; i++)
		pthread_join(wq->thr[i], NULL);
	pthread_mutex_destroy(&wq->lock);
	pthread_cond_destroy(&wq->cond);
	free(wq);
}

int gdx_file_wq_submit(struct gdx_file_wq *wq, gdx_file_job_fn fn, void *arg)
{
	struct job *j = malloc(sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->fn = fn;
	j->arg = arg;
	j->next = NULL;
	pthread_mutex_lock(&wq->lock);
	if (wq->tail)
		wq->tail->next = j;
	else
		wq->head = j;
	wq->tail = j;
	pthread_cond_signal(&wq->cond);
	pthread_mutex_unlock(&wq->lock);
	return 0;
}
