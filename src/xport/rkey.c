/* SPDX-License-Identifier: MIT */
/*
 * Keys for regions served in software (tcp, loop).  A key is 64 random bits
 * from getrandom() and nothing else: it names no slot, so a peer that guesses
 * has one chance in 2^64 per try for each live region, and a key, once its
 * region is gone, stays unknown (a new region draws a new key; the chance that
 * the draw repeats an old one is that of a guess).  A key works only for the
 * peer of the endpoint it was registered on, as an rkey works only on the
 * queue pairs of its protection domain.
 *
 * The table is open addressing with linear probing, indexed by the key's low
 * bits (uniform, since the key is random), at most half full, and removal
 * shifts the rest of a probe run back instead of leaving tombstones.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "xport/xport.h"

struct gdx_xport_rkey {
	struct gdx_xport_region r;
	uint64_t key;		/* never 0 */
	int refs;
	int dying;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;
static struct gdx_xport_rkey **tab;
static size_t cap;	/* 0 or a power of two */
static size_t used;

static struct gdx_xport_rkey *lookup(uint64_t key, size_t *at)
{
	size_t i;

	if (!cap)
		return NULL;
	for (i = key & (cap - 1); tab[i]; i = (i + 1) & (cap - 1))
		if (tab[i]->key == key) {
			*at = i;
			return tab[i];
		}
	return NULL;
}

static size_t free_slot(struct gdx_xport_rkey **t, size_t n, uint64_t key)
{
	size_t i;

	for (i = key & (n - 1); t[i]; i = (i + 1) & (n - 1))
		;
	return i;
}

static int grow(void)
{
	size_t n = cap ? cap * 2 : 64, i;
	struct gdx_xport_rkey **t = calloc(n, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (i = 0; i < cap; i++)
		if (tab[i])
			t[free_slot(t, n, tab[i]->key)] = tab[i];
	free(tab);
	tab = t;
	cap = n;
	return 0;
}

static void remove_at(size_t i)
{
	size_t mask = cap - 1, j = i;

	tab[i] = NULL;
	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (!tab[j])
			return;
		/* an entry moves into the hole if the hole is on its probe path */
		home = tab[j]->key & mask;
		if (((i - home) & mask) < ((j - home) & mask)) {
			tab[i] = tab[j];
			tab[j] = NULL;
			i = j;
		}
	}
}

static int draw(uint64_t *key)
{
	ssize_t n;

	do
		n = getrandom(key, sizeof(*key), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == sizeof(*key) ? 0 : -EIO;
}

int gdx_xport_rkey_add(const struct gdx_xport_region *r, uint64_t *key)
{
	struct gdx_xport_rkey *k = calloc(1, sizeof(*k));
	size_t at;
	int ret;

	if (!k)
		return -ENOMEM;
	k->r = *r;
	for (;;) {
		ret = draw(&k->key);
		if (ret) {
			free(k);
			return ret;
		}
		if (!k->key)
			continue;
		pthread_mutex_lock(&lock);
		if ((used + 1) * 2 > cap && (ret = grow())) {
			pthread_mutex_unlock(&lock);
			free(k);
			return ret;
		}
		if (!lookup(k->key, &at))
			break;
		pthread_mutex_unlock(&lock);
	}
	tab[free_slot(tab, cap, k->key)] = k;
	used++;
	pthread_mutex_unlock(&lock);
	*key = k->key;
	return 0;
}

void gdx_xport_rkey_del(uint64_t key)
{
	struct gdx_xport_rkey *k;
	size_t at;

	pthread_mutex_lock(&lock);
	if (!(k = lookup(key, &at))) {
		pthread_mutex_unlock(&lock);
		return;
	}
	k->dying = 1;
	while (k->refs)
		pthread_cond_wait(&released, &lock);
	/* the table may have grown or shifted while we waited */
	lookup(key, &at);
	remove_at(at);
	used--;
	pthread_mutex_unlock(&lock);
	free(k);
}

int gdx_xport_rkey_get(const struct gdx_xport_ep *domain, uint64_t key, uint64_t addr,
		       uint64_t len, unsigned access, struct gdx_xport_rkey **out, void **p,
		       struct gdx_xport_region *r)
{
	struct gdx_xport_rkey *k;
	uint64_t base;
	size_t at;

	pthread_mutex_lock(&lock);
	k = lookup(key, &at);
	if (!k || k->dying || k->r.domain != domain || (k->r.access & access) != access) {
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
