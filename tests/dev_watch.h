/* SPDX-License-Identifier: MIT */
/*
 * For tests that check which thread sets a device up: wraps a device's
 * set-up ops (pinned_alloc, host_register, pointer_query, stream_create,
 * event_create, and agent_launch without a stream, which starts a copy agent
 * and loads its module) so that each call first runs the test's callback with
 * the op's name; dev_watch_copies adds the copies and the stream waits
 * (memcpy, stream_synchronize).  Include after gpu/device.h; one watch at a
 * time.
 */
#ifndef GDX_TESTS_DEV_WATCH_H
#define GDX_TESTS_DEV_WATCH_H

#include <stdatomic.h>

#include "gpu/device.h"

static const struct gdx_device_ops *dw_real;
static struct gdx_device_ops dw_ops;
static void (*dw_fn)(const char *op);
static atomic_uint dw_agent_starts;	/* agent_launch calls without a stream */

static int dw_pinned_alloc(void *priv, size_t size, void **p)
{
	dw_fn("pinned_alloc");
	return dw_real->pinned_alloc(priv, size, p);
}

static int dw_host_register(void *priv, void *p, size_t size, unsigned flags)
{
	dw_fn("host_register");
	return dw_real->host_register(priv, p, size, flags);
}

static int dw_pointer_query(void *priv, const void *p, struct gdx_ptr_attrs *a)
{
	dw_fn("pointer_query");
	return dw_real->pointer_query(priv, p, a);
}

static int dw_stream_create(void *priv, void *stream, void *native)
{
	dw_fn("stream_create");
	return dw_real->stream_create(priv, stream, native);
}

static int dw_event_create(void *priv, void *event, unsigned flags)
{
	dw_fn("event_create");
	return dw_real->event_create(priv, event, flags);
}

static int dw_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	if (!stream) {
		dw_fn("agent_start");
		atomic_fetch_add(&dw_agent_starts, 1);
	}
	return dw_real->agent_launch(priv, stream, a);
}

static inline int dw_memcpy(void *priv, void *dst, const void *src, size_t n, void *stream)
{
	dw_fn("memcpy");
	return dw_real->memcpy(priv, dst, src, n, stream);
}

static inline int dw_stream_synchronize(void *priv, void *stream)
{
	dw_fn("stream_synchronize");
	return dw_real->stream_synchronize(priv, stream);
}

static void dev_watch_start(struct gdx_device *dev, void (*fn)(const char *op))
{
	dw_real = dev->ops;
	dw_ops = *dw_real;
	dw_ops.pinned_alloc = dw_pinned_alloc;
	dw_ops.host_register = dw_host_register;
	dw_ops.pointer_query = dw_pointer_query;
	dw_ops.stream_create = dw_stream_create;
	dw_ops.event_create = dw_event_create;
	if (dw_real->agent_launch)
		dw_ops.agent_launch = dw_agent_launch;
	dw_fn = fn;
	atomic_store(&dw_agent_starts, 0);
	dev->ops = &dw_ops;
}

/* After dev_watch_start: the copies and stream waits are watched too. */
static inline void dev_watch_copies(void)
{
	dw_ops.memcpy = dw_memcpy;
	dw_ops.stream_synchronize = dw_stream_synchronize;
}

static void dev_watch_stop(struct gdx_device *dev)
{
	dev->ops = dw_real;
}

#endif
