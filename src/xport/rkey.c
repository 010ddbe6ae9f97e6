/* SPDX-License-Identifier: MIT */
/*
 * Keys for regions served in software (tcp, loop).  A key is a slot index in
 * the low 32 bits and a random tag in the high 32, so a stale or guessed key
 * misses instead of reaching whatever took the slot over.  A key works only
 * for the peer of the endpoint it was registered on, as an rkey works only on
 * the queue pairs of its protection domain.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "xport/xport.h"

struct gdx_xport_rkey {
	struct gdx_xport_region r;
	uint32_t tag;		/* 0: slot free */
	int refs;
	int dying;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;
static struct gdx_xport_rkey **slots;
static uint32_t nslots;

static uint32_t new_tag(void)
{
	uint32_t t = 0;

	while (!t)
		if (getrandom(&t, sizeof(t), 0) != sizeof(t))
			t = (uint32_t)rand();
	return t;
}

int gdx_xport_rkey_add(const struct gdx_xport_region *r, uint64_t *key)
{
	struct gdx_xport_rkey *k = calloc(1, sizeof(*k));
	uint32_t i;

	if (!k)
		return -ENOMEM;
	k->r = *r;
	k->tag = new_tag();
	pthread_mutex_lock(&lock);
	for (i = 0; i < nslots && slots[i]; i++)
		;
	if (i == nslots) {
		uint32_t n = nslots ? nslots * 2 : 64;
		struct gdx_xport_rkey **v = realloc(slots, n * sizeof(*v));

		if (!v) {
			pthread_mutex_unlock(&lock);
			free(k);
			return -ENOMEM;
		}
		memset(v + nslots, 0, (n - nslots) * sizeof(*v));
		slots = v;
		nslots = n;
	}
	slots[i] = k;
	pthread_mutex_unlock(&lock);
	*key = (uint64_t)k->tag << 32 | i;
	return 0;
}

void gdx_xport_rkey_del(uint64_t key)
{
	uint32_t i = (uint32_t)key;
	struct gdx_xport_rkey *k;

	pthread_mutex_lock(&lock);
	if (i >= nslots || !(k = slots[i]) || k->tag != key >> 32) {
		pthread_mutex_unlock(&lock);
		return;
	}
	k->dying = 1;
	while (k->refs)
		pthread_cond_wait(&released, &lock);
	slots[i] = NULL;
	pthread_mutex_unlock(&lock);
	free(k);
}

int gdx_xport_rkey_get(const struct gdx_xport_ep *domain, uint64_t key, uint64_t addr,
		       uint64_t len, unsigned access, struct gdx_xport_rkey **out, void **p,
		       struct gdx_xport_region *r)
{
	uint32_t i = (uint32_t)key;
	struct gdx_xport_rkey *k;
	uint64_t base;

	pthread_mutex_lock(&lock);
	if (i >= nslots || !(k = slots[i]) || k->tag != key >> 32 || k->dying ||
	    k->r.domain != domain || (k->r.access & access) != access) {
		pthread_mutex_unlock(&lock);
		return GDX_EREMOTE;
	}
	base = k->r.addr;
	if (addr < base || len > k->r.len || addr - base > k->r.len - len) {
		pthread_mutex_unlock(&lock);
		return GDX_EREMOTE;
	}
	k->refs++;
	pthread_mutex_unlock(&lock);
	*out = k;
	*p = (char *)k->r.p + (addr - base);
	if (r)
		*r = k->r;
	return 0;
}

void gdx_xport_rkey_put(struct gdx_xport_rkey *k)
{
	pthread_mutex_lock(&lock);
	if (--k->refs == 0 && k->dying)
		pthread_cond_broadcast(&released);
	pthread_mutex_unlock(&lock);
}
