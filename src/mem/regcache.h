/* SPDX-License-Identifier: MIT */
#ifndef GDX_MEM_REGCACHE_H
#define GDX_MEM_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <gdx/device.h>

/*
 * Registration cache: a backend (io_uring fixed buffers, ibv_mr, cuFile buffer
 * registration, a transport key) registers a range once and finds it again on
 * every I/O in O(log n).  Entries hold the allocation's buffer_id; a lookup
 * that finds the allocation behind the range gone or replaced (freed and
 * re-allocated at the same address) drops the entry instead of returning it.
 * gdx's own free paths (gdx_device_free, gdx_pinned_free, gdx_host_unregister)
 * invalidate every cache at once through gdx_mem_notify_release.  Plain host
 * memory has no allocation id: an entry for it lives until removed or notified.
 */
struct gdx_regcache;

struct gdx_reg {
	uintptr_t start;
	size_t len;
	enum gdx_mem_kind kind;
	int device_ordinal;
	uint64_t buffer_id;
	void *payload;		/* the backend's registration */
};

/*
 * Called once per entry when it is dropped and no lookup holds it any more.
 * It runs with no cache lock held, so it may call back into gdx (even
 * gdx_host_unregister, which notifies every cache).
 */
typedef void (*gdx_reg_release_fn)(struct gdx_reg *r, void *arg);

int gdx_regcache_create(struct gdx_device *dev, gdx_reg_release_fn release, void *arg,
			struct gdx_regcache **out);
/* Releases every entry; every reference from lookup/insert must have been put. */
void gdx_regcache_destroy(struct gdx_regcache *rc);
/*
 * -EEXIST if the range overlaps an entry; GDX_EBADPTR if it runs past the end
 * of the device or pinned allocation holding p.  On success *out (if not NULL)
 * holds a reference.
 */
int gdx_regcache_insert(struct gdx_regcache *rc, const void *p, size_t len, void *payload,
			struct gdx_reg **out);
/* Finds the entry covering [p, p+len); -ENOENT if none (or it was stale), -EINVAL for len 0. */
int gdx_regcache_lookup(struct gdx_regcache *rc, const void *p, size_t len,
			struct gdx_reg **out);
void gdx_regcache_put(struct gdx_regcache *rc, struct gdx_reg *r);
/* Drops the entry starting at p; -ENOENT if there is none. */
int gdx_regcache_remove(struct gdx_regcache *rc, const void *p);
size_t gdx_regcache_count(struct gdx_regcache *rc);

/* Drops, in every cache, each entry overlapping [p, p+len). */
void gdx_mem_notify_release(const void *p, size_t len);

#endif
