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
	int numa_node;		/* -1: the node nearest the device (default) */
};
GDX_API void gdx_bounce_pool_opts_init(struct gdx_bounce_pool_opts *o, size_t struct_size);

GDX_API int gdx_bounce_pool_create(struct gdx_device *dev, const struct gdx_bounce_pool_opts *o,
				   struct gdx_bounce_pool **out);
/* Every buffer must have been put back. */
GDX_API void gdx_bounce_pool_destroy(struct gdx_bounce_pool *pool);
/* Takes a free buffer; blocks while none is free if wait, else -EAGAIN. */
GDX_API int gdx_bounce_get(struct gdx_bounce_pool *pool, int wait, void **buf);
GDX_API void gdx_bounce_put(struct gdx_bounce_pool *pool, void *buf);
GDX_API size_t gdx_bounce_buf_size(const struct gdx_bounce_pool *pool);
GDX_API unsigned gdx_bounce_count(const struct gdx_bounce_pool *pool);
/* Index of buf in the pool (0..count-1): buffers are base + index * buf_size. */
GDX_API unsigned gdx_bounce_index(const struct gdx_bounce_pool *pool, const void *buf);
GDX_API void *gdx_bounce_base(const struct gdx_bounce_pool *pool);
/* The NUMA node the memory was placed on, or -1. */
GDX_API int gdx_bounce_numa_node(const struct gdx_bounce_pool *pool);

#ifdef __cplusplus
}
#endif
#endif
