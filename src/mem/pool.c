/* SPDX-License-Identifier: MIT */
/*
 * Pinned bounce-buffer pools.  One anonymous mapping, aligned to 2 MiB when it
 * is at least that big so transparent huge pages can back it, bound to a NUMA
 * node before its first touch, prefaulted, then page-locked through the pool's
 * device.  Buffers are handed out from a LIFO stack of indices (the most
 * recently used buffer is the one most likely still in cache) under a mutex;
 * an uncontended mutex costs no system call.  A per-buffer in-use byte lets put()
 * refuse a double put or a pointer that is not one of the pool's buffers
 * instead of corrupting the free list.
 */
#include <errno.h>
#include <limits.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gdx/mem.h>

#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"

#define HUGE_ALIGN (2u << 20)

struct gdx_bounce_pool {
	struct gdx_device *dev;
	unsigned char *base;
	size_t buf_size;
	size_t len;		/* count * buf_size */
	void *map;		/* the mapping (base is inside it) */
	size_t map_len;
	unsigned count;
	int numa_node;
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* a buffer came back */
	unsigned waiters;
	unsigned nfree;
	unsigned *free_stack;
	unsigned char *in_use;
};

GDX_API void gdx_bounce_pool_opts_init(struct gdx_bounce_pool_opts *o, size_t struct_size)
{
	struct gdx_bounce_pool_opts d = {
		.struct_size = sizeof(d),
		.buf_size = 1u << 20,
		.count = 16,
		.numa_node = -1,
	};

	if (!o || struct_size < sizeof(o->struct_size))
		return;
	/* An older caller's smaller struct gets the fields it knows about. */
	d.struct_size = GDX_MIN(struct_size, sizeof(d));
	memcpy(o, &d, d.struct_size);
}

/*
 * Binds [p, p+len) to node before anything touches it.  Returns 0, or a
 * negative errno when the node does not exist or binding is impossible.
 */
static int bind_to_node(void *p, size_t len, int node)
{
	struct bitmask *mask;
	int ret;

	if (numa_available() < 0)
		return -EOPNOTSUPP;
	if (node > numa_max_node())
		return -EINVAL;
	mask = numa_allocate_nodemask();
	if (!mask)
		return -ENOMEM;
	numa_bitmask_setbit(mask, (unsigned)node);
	/* libnuma passes size + 1: the kernel drops the last bit of maxnode. */
	ret = mbind(p, len, MPOL_BIND, mask->maskp, mask->size + 1, 0) ? -errno : 0;
	numa_free_nodemask(mask);
	return ret;
}

/* The node the page at p sits on, or -1. */
static int node_of(void *p)
{
	int status = -1;

	if (numa_available() < 0 || numa_move_pages(0, 1, &p, NULL, &status, 0))
		return -1;
	return status;
}

static int map_region(struct gdx_bounce_pool *pool)
{
	size_t align = pool->len >= HUGE_ALIGN ? HUGE_ALIGN : 0;
	unsigned char *m, *b;

	pool->map_len = pool->len + align;
	if (pool->map_len < pool->len)
		return -EOVERFLOW;
	m = mmap(NULL, pool->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	b = align ? (unsigned char *)GDX_ALIGN_UP((uintptr_t)m, align) : m;
	/* Give back the slack either side so only the pool itself stays mapped. */
	if (b > m)
		munmap(m, (size_t)(b - m));
	if (m + pool->map_len > b + pool->len)
		munmap(b + pool->len, (size_t)(m + pool->map_len - (b + pool->len)));
	pool->map = b;
	pool->map_len = pool->len;
	pool->base = b;
	if (align)
		madvise(b, pool->len, MADV_HUGEPAGE);	/* a hint: THP may be off */
	return 0;
}

static int place(struct gdx_bounce_pool *pool, int want, bool explicit)
{
	int ret;

	pool->numa_node = -1;
	if (want < 0)
		return 0;
	ret = bind_to_node(pool->base, pool->len, want);
	if (ret) {
		if (explicit) {
			GDX_ERR("mem", "bounce pool: cannot bind to NUMA node %d: %s", want,
				gdx_strerror(ret));
			return ret;
		}
		/* The device's node is a preference; an unplaced pool still works. */
		GDX_WARN("mem", "bounce pool: cannot bind to the device's NUMA node %d (%s); "
			 "leaving placement to the kernel", want, gdx_strerror(ret));
		return 0;
	}
	pool->numa_node = want;
	return 0;
}

GDX_API int gdx_bounce_pool_create(struct gdx_device *dev, const struct gdx_bounce_pool_opts *o,
				   struct gdx_bounce_pool **out)
{
	struct gdx_bounce_pool_opts opts;
	struct gdx_device_props props;
	struct gdx_bounce_pool *pool;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	int want, ret, got;

	if (!dev || !out)
		return -EINVAL;
	gdx_bounce_pool_opts_init(&opts, sizeof(opts));
	if (o) {
		if (o->struct_size < sizeof(o->struct_size))
			return -EINVAL;
		memcpy(&opts, o, GDX_MIN(o->struct_size, sizeof(opts)));
	}
	if (!opts.buf_size || !opts.count || opts.numa_node < -1)
		return -EINVAL;
	if (opts.buf_size > SIZE_MAX - pg || GDX_ALIGN_UP(opts.buf_size, pg) > SIZE_MAX / opts.count)
		return -EOVERFLOW;

	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->buf_size = GDX_ALIGN_UP(opts.buf_size, pg);
	pool->count = opts.count;
	pool->len = pool->buf_size * pool->count;
	pool->free_stack = malloc(opts.count * sizeof(*pool->free_stack));
	pool->in_use = calloc(opts.count, 1);
	if (!pool->free_stack || !pool->in_use) {
		ret = -ENOMEM;
		goto fail;
	}
	ret = map_region(pool);
	if (ret)
		goto fail;

	want = opts.numa_node;
	if (want < 0) {
		ret = gdx_device_props(dev, &props);
		if (ret)
			goto fail;
		want = props.numa_node;
	}
	ret = place(pool, want, opts.numa_node >= 0);
	if (ret)
		goto fail;
	/* Fault every page in now, on the bound node, not on the first I/O. */
	memset(pool->base, 0, pool->len);
	got = pool->numa_node >= 0 ? node_of(pool->base) : -1;
	if (got >= 0 && got != pool->numa_node)
		GDX_WARN("mem", "bounce pool: asked for NUMA node %d, memory is on %d",
			 pool->numa_node, got);

	ret = gdx_host_register(dev, pool->base, pool->len, 0);
	if (ret) {
		GDX_ERR("mem", "bounce pool: page-locking %zu bytes on %s failed: %s "
			"(check the memlock limit)", pool->len, gdx_device_name(dev),
			gdx_strerror(ret));
		goto fail;
	}
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->cond, NULL);
	/* Stack top is the end: the first get returns buffer 0. */
	for (unsigned i = 0; i < pool->count; i++)
		pool->free_stack[i] = pool->count - 1 - i;
	pool->nfree = pool->count;
	atomic_fetch_add(&dev->refs, 1);
	pool->dev = dev;
	GDX_DBG("mem", "bounce pool: %u x %zu bytes at %p, node %d, on %s", pool->count,
		pool->buf_size, (void *)pool->base, pool->numa_node, gdx_device_name(dev));
	*out = pool;
	return 0;

fail:
	if (pool->map)
		munmap(pool->map, pool->map_len);
	free(pool->free_stack);
	free(pool->in_use);
	free(pool);
	return ret;
}

GDX_API void gdx_bounce_pool_destroy(struct gdx_bounce_pool *pool)
{
	int ret;

	if (!pool)
		return;
	pthread_mutex_lock(&pool->lock);
	if (pool->nfree != pool->count)
		GDX_ERR("mem", "bounce pool %p destroyed with %u of %u buffers still out",
			(void *)pool->base, pool->count - pool->nfree, pool->count);
	pthread_mutex_unlock(&pool->lock);
	ret = gdx_host_unregister(pool->dev, pool->base);
	if (ret)
		GDX_WARN("mem", "bounce pool: unregistering failed: %s", gdx_strerror(ret));
	munmap(pool->map, pool->map_len);
	gdx_device_close(pool->dev);
	pthread_mutex_destroy(&pool->lock);
	pthread_cond_destroy(&pool->cond);
	free(pool->free_stack);
	free(pool->in_use);
	free(pool);
}

GDX_API int gdx_bounce_get(struct gdx_bounce_pool *pool, int wait, void **buf)
{
	unsigned i;

	if (!pool || !buf)
		return -EINVAL;
	pthread_mutex_lock(&pool->lock);
	while (!pool->nfree) {
		if (!wait) {
			pthread_mutex_unlock(&pool->lock);
			return -EAGAIN;
		}
		pool->waiters++;
		pthread_cond_wait(&pool->cond, &pool->lock);
		pool->waiters--;
	}
	i = pool->free_stack[--pool->nfree];
	pool->in_use[i] = 1;
	pthread_mutex_unlock(&pool->lock);
	*buf = pool->base + (size_t)i * pool->buf_size;
	return 0;
}

GDX_API void gdx_bounce_put(struct gdx_bounce_pool *pool, void *buf)
{
	uintptr_t off;
	unsigned i;

	if (!pool || !buf)
		return;
	off = (uintptr_t)buf - (uintptr_t)pool->base;
	if ((uintptr_t)buf < (uintptr_t)pool->base || off >= pool->len || off % pool->buf_size) {
		GDX_ERR("mem", "bounce pool %p: put of %p, which is not one of its buffers; ignored",
			(void *)pool->base, buf);
		return;
	}
	i = (unsigned)(off / pool->buf_size);
	pthread_mutex_lock(&pool->lock);
	if (!pool->in_use[i]) {
		pthread_mutex_unlock(&pool->lock);
		GDX_ERR("mem", "bounce pool %p: buffer %u put twice; ignored", (void *)pool->base, i);
		return;
	}
	pool->in_use[i] = 0;
	pool->free_stack[pool->nfree++] = i;
	if (pool->waiters)
		pthread_cond_signal(&pool->cond);
	pthread_mutex_unlock(&pool->lock);
}

GDX_API size_t gdx_bounce_buf_size(const struct gdx_bounce_pool *pool)
{
	return pool ? pool->buf_size : 0;
}

GDX_API unsigned gdx_bounce_count(const struct gdx_bounce_pool *pool)
{
	return pool ? pool->count : 0;
}

GDX_API unsigned gdx_bounce_index(const struct gdx_bounce_pool *pool, const void *buf)
{
	uintptr_t off;

	if (!pool || (uintptr_t)buf < (uintptr_t)pool->base)
		return UINT_MAX;
	off = (uintptr_t)buf - (uintptr_t)pool->base;
	return off < pool->len ? (unsigned)(off / pool->buf_size) : UINT_MAX;
}

GDX_API void *gdx_bounce_base(const struct gdx_bounce_pool *pool)
{
	return pool ? pool->base : NULL;
}

GDX_API int gdx_bounce_numa_node(const struct gdx_bounce_pool *pool)
{
	return pool ? pool->numa_node : -1;
}
