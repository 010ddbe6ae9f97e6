/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_MEET_H
#define GDX_TESTS_MEET_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

/*
 * A file read hook that holds each read until `want` reads have started: it
 * returns only if that many run at once (on as many workers), else it gives
 * up after 10 s and says so.
 */
struct meet {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned in, want;
	bool met, gave_up;
};

static inline void meet_hook(void *arg)
{
	struct meet *m = arg;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&m->lock);
	if (++m->in >= m->want) {
		m->met = true;
		pthread_cond_broadcast(&m->cond);
	}
	while (!m->met && !m->gave_up)
		m->gave_up = pthread_cond_timedwait(&m->cond, &m->lock, &ts) == ETIMEDOUT;
	pthread_mutex_unlock(&m->lock);
}

#endif
