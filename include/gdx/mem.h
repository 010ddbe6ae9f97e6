/* SPDX-License-Identifier: MIT */
#ifndef GDX_MEM_H
#define GDX_MEM_H

/*
 * Pinned bounce-buffer pools: fixed-size page-aligned buffers in page-locked
 * host memory, placed on the NUMA node nearest a device, handed out and taken
 * back without system calls.  The whole pool is one contiguous range, so an
 * I/O engine can register it once (io_uring fixed buffers, an ibv_mr).
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>
#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdx_bounce_pool;

struct gdx_bounce_pool_opts {
	size_t struct_size;	/* sizeof(struct gdx_bounce_pool_opts) */
	size_t buf_size;	/* rounded up to the page size; default 1 MiB */
	unsigned count;		/* default 16 */
	/*
	 * -1 (default): the device's node (gdx_device_props), if it has one;
	 * binding there is best effort.  A node given here must exist and bind.
	 */
	int numa_node;
};
GDX_API void gdx_bounce_pool_opts_init(struct gdx_bounce_pool_opts *o, size_t struct_size);

/*
 * o may be NULL for the defaults.  The pool holds a reference on dev and
 * page-locks its memory there (gdx_host_register).  -EINVAL for a zero size or
 * count or a node that does not exist, -EOVERFLOW when count * buf_size does
 * not fit, -EOPNOTSUPP for a node on a kernel without NUMA.
 */
GDX_API int gdx_bounce_pool_create(struct gdx_device *dev, const struct gdx_bounce_pool_opts *o,
				   struct gdx_bounce_pool **out);
/* Every buffer must have been put back (an error is logged if not). */
GDX_API void gdx_bounce_pool_destroy(struct gdx_bounce_pool *pool);
/* Takes a free buffer; blocks while none is free if wait, else -EAGAIN. */
GDX_API int gdx_bounce_get(struct gdx_bounce_pool *pool, int wait, void **buf);
/*
 * buf must be a buffer's start as get handed it out.  Anything else, or a
 * buffer already put back, is logged as an error and ignored.
 */
GDX_API void gdx_bounce_put(struct gdx_bounce_pool *pool, void *buf);
GDX_API size_t gdx_bounce_buf_size(const struct gdx_bounce_pool *pool);
GDX_API unsigned gdx_bounce_count(const struct gdx_bounce_pool *pool);
/*
 * Index (0..count-1) of the buffer holding buf, which may point inside it;
 * buffers are base + index * buf_size.  UINT_MAX if buf is outside the pool.
 */
GDX_API unsigned gdx_bounce_index(const struct gdx_bounce_pool *pool, const void *buf);
GDX_API void *gdx_bounce_base(const struct gdx_bounce_pool *pool);
/* The NUMA node the memory was placed on, or -1. */
GDX_API int gdx_bounce_numa_node(const struct gdx_bounce_pool *pool);

#ifdef __cplusplus
}
#endif
#endif
