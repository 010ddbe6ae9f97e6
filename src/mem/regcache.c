/* SPDX-License-Identifier: MIT */
/*
 * Registration cache: a sorted array of non-overlapping ranges, searched by
 * binary search.  Inserts are O(n) memmoves, which is fine: registrations are
 * rare and lookups are per I/O.
 *
 * Release callbacks never run under a cache lock: a backend's release may well
 * call back into gdx (gdx_host_unregister, which notifies every cache), so
 * dropped entries are collected under the locks and released after.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "gpu/device.h"
#include "mem/regcache.h"

struct entry {
	struct gdx_reg reg;
	int refs;	/* the cache's own reference counts as one */
	struct gdx_regcache *rc;
	struct entry *next_dead;
};

struct gdx_regcache {
	struct gdx_device *dev;
	gdx_reg_release_fn release;
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t idle;	/* busy dropped to 0 */
	unsigned busy;		/* entries gdx_mem_notify_release is releasing */
	struct entry **v;	/* sorted by start */
	size_t n, cap;
	struct gdx_regcache *next;	/* all caches, for gdx_mem_notify_release */
};

static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gdx_regcache *caches;

int gdx_regcache_create(struct gdx_device *dev, gdx_reg_release_fn release, void *arg,
			struct gdx_regcache **out)
{
	struct gdx_regcache *rc = calloc(1, sizeof(*rc));

	if (!rc)
		return -ENOMEM;
	rc->dev = dev;
	rc->release = release;
	rc->arg = arg;
	pthread_mutex_init(&rc->lock, NULL);
	pthread_cond_init(&rc->idle, NULL);
	pthread_mutex_lock(&caches_lock);
	rc->next = caches;
	caches = rc;
	pthread_mutex_unlock(&caches_lock);
	*out = rc;
	return 0;
}

/* Caller holds rc->lock; an entry whose last reference goes is queued on *dead. */
static void unref(struct entry *e, struct entry **dead)
{
	if (--e->refs == 0) {
		e->next_dead = *dead;
		*dead = e;
	}
}

/* Caller holds no lock. */
static void release_dead(struct gdx_regcache *rc, struct entry *dead)
{
	while (dead) {
		struct entry *next = dead->next_dead;

		if (rc->release)
			rc->release(&dead->reg, rc->arg);
		free(dead);
		dead = next;
	}
}

/* Index of the last entry whose start <= addr, or -1.  Caller holds the lock. */
static long floor_idx(struct gdx_regcache *rc, uintptr_t addr)
{
	long lo = 0, hi = (long)rc->n - 1, ans = -1;

	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;

		if (rc->v[mid]->reg.start <= addr) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
}

static void remove_at(struct gdx_regcache *rc, size_t i, struct entry **dead)
{
	struct entry *e = rc->v[i];

	memmove(&rc->v[i], &rc->v[i + 1], (rc->n - i - 1) * sizeof(rc->v[0]));
	rc->n--;
	unref(e, dead);
}

void gdx_regcache_destroy(struct gdx_regcache *rc)
{
	struct gdx_regcache **pp;
	struct entry *dead = NULL;

	if (!rc)
		return;
	pthread_mutex_lock(&caches_lock);
	for (pp = &caches; *pp; pp = &(*pp)->next) {
		if (*pp == rc) {
			*pp = rc->next;
			break;
		}
	}
	pthread_mutex_unlock(&caches_lock);
	pthread_mutex_lock(&rc->lock);
	while (rc->n)
		remove_at(rc, rc->n - 1, &dead);
	/* A concurrent gdx_mem_notify_release may still be releasing our entries. */
	while (rc->busy)
		pthread_cond_wait(&rc->idle, &rc->lock);
	pthread_mutex_unlock(&rc->lock);
	release_dead(rc, dead);
	pthread_mutex_destroy(&rc->lock);
	pthread_cond_destroy(&rc->idle);
	free(rc->v);
	free(rc);
}

static void describe(struct gdx_regcache *rc, const void *p, struct gdx_ptr_attrs *a)
{
	memset(a, 0, sizeof(*a));
	a->kind = GDX_MEM_HOST;
	a->device_ordinal = -1;
	if (rc->dev)
		gdx_pointer_query(rc->dev, p, a);
}

int gdx_regcache_insert(struct gdx_regcache *rc, const void *p, size_t len, void *payload,
			struct gdx_reg **out)
{
	uintptr_t start = (uintptr_t)p;
	struct gdx_ptr_attrs a;
	struct entry *e;
	long i;
	int ret = 0;

	if (!rc || !p || !len || start + len < start)
		return -EINVAL;
	describe(rc, p, &a);
	/*
	 * Staleness is judged by the allocation holding p; a range running past
	 * its end would also cover memory whose lifetime nobody tracks.
	 */
	if (a.size && start + len > (uintptr_t)a.base + a.size)
		return GDX_EBADPTR;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->reg = (struct gdx_reg){ .start = start, .len = len, .kind = a.kind,
				   .device_ordinal = a.device_ordinal,
				   .buffer_id = a.buffer_id, .payload = payload };
	e->refs = out ? 2 : 1;
	e->rc = rc;

	pthread_mutex_lock(&rc->lock);
	i = floor_idx(rc, start);
	if ((i >= 0 && rc->v[i]->reg.start + rc->v[i]->reg.len > start) ||
	    ((size_t)(i + 1) < rc->n && rc->v[i + 1]->reg.start < start + len)) {
		ret = -EEXIST;
		goto out;
	}
	if (rc->n == rc->cap) {
		size_t cap = rc->cap ? rc->cap * 2 : 16;
		struct entry **v = realloc(rc->v, cap * sizeof(*v));

		if (!v) {
			ret = -ENOMEM;
			goto out;
		}
		rc->v = v;
		rc->cap = cap;
	}
	memmove(&rc->v[i + 2], &rc->v[i + 1], (rc->n - (size_t)(i + 1)) * sizeof(rc->v[0]));
	rc->v[i + 1] = e;
	rc->n++;
	if (out)
		*out = &e->reg;
	e = NULL;
out:
	pthread_mutex_unlock(&rc->lock);
	free(e);
	return ret;
}

int gdx_regcache_lookup(struct gdx_regcache *rc, const void *p, size_t len, struct gdx_reg **out)
{
	uintptr_t start = (uintptr_t)p;
	struct entry *e, *dead = NULL;
	uint64_t id;
	long i;

	if (!rc || !p || !len || start + len < start || !out)
		return -EINVAL;
	pthread_mutex_lock(&rc->lock);
	i = floor_idx(rc, start);
	if (i < 0 || rc->v[i]->reg.start + rc->v[i]->reg.len < start + len) {
		pthread_mutex_unlock(&rc->lock);
		return -ENOENT;
	}
	e = rc->v[i];
	e->refs++;
	id = e->reg.buffer_id;
	pthread_mutex_unlock(&rc->lock);

	/*
	 * Device memory freed behind gdx's back (cuMemFree by the application) and
	 * re-allocated at the same address has a new buffer id: drop the entry.
	 */
	if (id) {
		struct gdx_ptr_attrs a;

		describe(rc, p, &a);
		if (a.buffer_id != id) {
			pthread_mutex_lock(&rc->lock);
			i = floor_idx(rc, start);
			if (i >= 0 && rc->v[i] == e)
				remove_at(rc, (size_t)i, &dead);
			unref(e, &dead);
			pthread_mutex_unlock(&rc->lock);
			release_dead(rc, dead);
			return -ENOENT;
		}
	}
	*out = &e->reg;
	return 0;
}

void gdx_regcache_put(struct gdx_regcache *rc, struct gdx_reg *r)
{
	struct entry *dead = NULL;

	if (!rc || !r)
		return;
	pthread_mutex_lock(&rc->lock);
	unref(GDX_CONTAINER_OF(r, struct entry, reg), &dead);
	pthread_mutex_unlock(&rc->lock);
	release_dead(rc, dead);
}

int gdx_regcache_remove(struct gdx_regcache *rc, const void *p)
{
	struct entry *dead = NULL;
	long i;
	int ret = -ENOENT;

	if (!rc)
		return -EINVAL;
	pthread_mutex_lock(&rc->lock);
	i = floor_idx(rc, (uintptr_t)p);
	if (i >= 0 && rc->v[i]->reg.start == (uintptr_t)p) {
		remove_at(rc, (size_t)i, &dead);
		ret = 0;
	}
	pthread_mutex_unlock(&rc->lock);
	release_dead(rc, dead);
	return ret;
}

size_t gdx_regcache_count(struct gdx_regcache *rc)
{
	size_t n;

	if (!rc)
		return 0;
	pthread_mutex_lock(&rc->lock);
	n = rc->n;
	pthread_mutex_unlock(&rc->lock);
	return n;
}

void gdx_mem_notify_release(const void *p, size_t len)
{
	uintptr_t start = (uintptr_t)p, end = start + len;
	struct entry *dead = NULL;

	if (!len)
		return;
	if (end < start)
		end = UINTPTR_MAX;
	pthread_mutex_lock(&caches_lock);
	for (struct gdx_regcache *rc = caches; rc; rc = rc->next) {
		long i;

		pthread_mutex_lock(&rc->lock);
		/* Entries do not overlap, so the ones hit are contiguous from here. */
		i = floor_idx(rc, start);
		if (i < 0 || rc->v[i]->reg.start + rc->v[i]->reg.len <= start)
			i++;
		while ((size_t)i < rc->n && rc->v[i]->reg.start < end) {
			struct entry *e = rc->v[i];

			remove_at(rc, (size_t)i, &dead);
			/* Keeps rc alive (destroy waits) until we have released e. */
			if (dead == e)
				rc->busy++;
		}
		pthread_mutex_unlock(&rc->lock);
	}
	pthread_mutex_unlock(&caches_lock);

	while (dead) {
		struct entry *next = dead->next_dead;
		struct gdx_regcache *rc = dead->rc;

		dead->next_dead = NULL;
		release_dead(rc, dead);
		pthread_mutex_lock(&rc->lock);
		if (--rc->busy == 0)
			pthread_cond_broadcast(&rc->idle);
		pthread_mutex_unlock(&rc->lock);
		dead = next;
	}
}
