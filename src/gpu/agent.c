/* SPDX-License-Identifier: MIT */
/*
 * The copy agent's host side (include/gdx/device.h): the shared memory, the
 * posting of descriptors, launches of idle workers, status and stop.  The
 * workers are the device's (agent_launch: a resident block on the cuda
 * device, a stream thread on the emulated one).
 *
 * Ordering on the host: the data the caller put at src, then the descriptor's
 * words, the last with a release store (plugin/device.h: the worker takes a
 * slot once all its words carry the expected seq, then reads the data behind
 * an acquire fence).  A full fence separates the descriptor from the look at
 * the worker's live word: a worker going idle clears live and then looks at
 * its rings' next slots, so either it sees the new descriptor or the post
 * sees live clear and launches it again.  A launch behind a worker that is
 * still ending waits in its stream, so two never run at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"

/* src/gpu/agent.cu declares the same layout with the same checks. */
_Static_assert(sizeof(struct gdx_agent_desc) == 64, "a descriptor is one 64-byte line");
_Static_assert(sizeof(struct gdx_agent_ring) == 64, "a ring's done word has its own line");
_Static_assert(sizeof(struct gdx_agent_worker) == 64, "a worker's words have their own line");
_Static_assert(sizeof(struct gdx_agent_args) == 56 &&
	       offsetof(struct gdx_agent_args, idle_ns) == 32 &&
	       offsetof(struct gdx_agent_args, nrings) == 40, "the kernel's argument layout");

struct gdx_copy_agent {
	struct gdx_device *dev;		/* a reference of its own */
	struct gdx_copy_agent_opts o;
	void *mem;			/* pinned: stop word, workers, rings, descriptors */
	uint32_t *stop;
	struct gdx_agent_worker *workers;
	struct gdx_agent_ring *rings;
	struct gdx_agent_desc *descs;
	uint32_t *posted;		/* per ring: seq of the last descriptor posted */
	struct gdx_stream **streams;	/* one per worker */
	pthread_mutex_t lock;		/* launches */
	bool stopping;
	bool halted;			/* every worker has ended since stopping began */
	int err;			/* sticky: why the agent cannot go on */
	uint64_t next_query_ns;		/* when status may ask the workers' streams again */
	uint64_t launches;
};

GDX_API void gdx_copy_agent_opts_init(struct gdx_copy_agent_opts *o, size_t struct_size)
{
	struct gdx_copy_agent_opts d = {
		.struct_size = sizeof(d),
		.rings = 1,
		.entries = 256,
		.idle_us = 2000,
		.stop_timeout_ms = 2000,
	};

	if (!o || struct_size < sizeof(o->struct_size))
		return;
	d.struct_size = GDX_MIN(struct_size, sizeof(d));
	memcpy(o, &d, d.struct_size);
}

static void agent_free(struct gdx_copy_agent *a)
{
	for (unsigned w = 0; a->streams && w < a->o.workers; w++)
		if (a->streams[w])
			gdx_stream_destroy(a->streams[w]);
	free(a->streams);
	free(a->posted);
	if (a->mem)
		gdx_pinned_free(a->dev, a->mem);
	pthread_mutex_destroy(&a->lock);
	gdx_device_close(a->dev);
	free(a);
}

GDX_API int gdx_copy_agent_start(struct gdx_device *dev, const struct gdx_copy_agent_opts *o,
				 struct gdx_copy_agent **out)
{
	struct gdx_copy_agent_opts opts;
	struct gdx_copy_agent *a;
	size_t off_w, off_r, off_d, size;
	int rc;

	if (!dev || !out)
		return -EINVAL;
	gdx_copy_agent_opts_init(&opts, sizeof(opts));
	if (o) {
		if (o->struct_size < sizeof(o->struct_size))
			return -EINVAL;
		memcpy(&opts, o, GDX_MIN(o->struct_size, sizeof(opts)));
	}
	if (!opts.workers)
		opts.workers = GDX_MIN(opts.rings, 4u);
	/* a worker tracks at most 64 rings (GDX_AGENT_ERR_OWN) */
	if (!opts.rings || opts.rings > 4096 || !opts.workers || opts.workers > opts.rings ||
	    (opts.rings + opts.workers - 1) / opts.workers > 64 || opts.entries < 2 ||
	    opts.entries > (1u << 20) || (opts.entries & (opts.entries - 1)))
		return -EINVAL;
	if (!dev->ops->agent_launch)
		return -EOPNOTSUPP;
	rc = dev->ops->agent_launch(dev->priv, NULL, NULL);
	if (rc)
		return rc;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	atomic_fetch_add(&dev->refs, 1);
	a->dev = dev;
	a->o = opts;
	pthread_mutex_init(&a->lock, NULL);
	off_w = 64;
	off_r = off_w + (size_t)opts.workers * sizeof(struct gdx_agent_worker);
	off_d = off_r + (size_t)opts.rings * sizeof(struct gdx_agent_ring);
	size = off_d + (size_t)opts.rings * opts.entries * sizeof(struct gdx_agent_desc);
	rc = gdx_pinned_alloc(dev, size, &a->mem);
	if (rc)
		goto fail;
	memset(a->mem, 0, size);
	a->stop = a->mem;
	a->workers = (struct gdx_agent_worker *)((char *)a->mem + off_w);
	a->rings = (struct gdx_agent_ring *)((char *)a->mem + off_r);
	a->descs = (struct gdx_agent_desc *)((char *)a->mem + off_d);
	a->streams = calloc(opts.workers, sizeof(*a->streams));
	a->posted = calloc(opts.rings, sizeof(*a->posted));
	if (!a->streams || !a->posted) {
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned w = 0; w < opts.workers; w++) {
		rc = gdx_stream_create(dev, &a->streams[w]);
		if (rc)
			goto fail;
	}
	GDX_DBG("device", "%s: copy agent: %u rings of %u, %u workers", dev->name, opts.rings,
		opts.entries, opts.workers);
	*out = a;
	return 0;
fail:
	GDX_ERR("device", "%s: cannot start a copy agent: %s", dev->name, gdx_strerror(rc));
	agent_free(a);
	return rc;
}

static void set_err(struct gdx_copy_agent *a, int err, const char *why)
{
	int none = 0;

	if (__atomic_compare_exchange_n(&a->err, &none, err, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED) && err != -ESHUTDOWN)
		GDX_ERR("device", "%s: copy agent: %s: %s", a->dev->name, why, gdx_strerror(err));
}

/* A worker's error word is set: the agent's error from now on. */
static int worker_failed(struct gdx_copy_agent *a, unsigned w, uint32_t e)
{
	int none = 0;

	if (__atomic_compare_exchange_n(&a->err, &none, GDX_EDRIVER, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED))
		GDX_ERR("device", "%s: copy agent worker %u gave up: %s", a->dev->name, w,
			e == GDX_AGENT_ERR_OWN ? "too many rings" : "bad copy pointers");
	return __atomic_load_n(&a->err, __ATOMIC_RELAXED);
}

/*
 * Launches worker w unless it runs (or is launched) already; 0, or the
 * agent's error.  A worker sets its error word before it clears live: one
 * found gone after an error is not launched again (it would stop at once,
 * and every post launch it anew).
 */
static int launch(struct gdx_copy_agent *a, unsigned w)
{
	struct gdx_agent_worker *wk = &a->workers[w];
	uint32_t e;

	pthread_mutex_lock(&a->lock);
	if (a->stopping || __atomic_load_n(&a->err, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&wk->live, __ATOMIC_ACQUIRE))
		goto out;
	e = __atomic_load_n(&wk->err, __ATOMIC_RELAXED);
	if (e) {
		worker_failed(a, w, e);
	} else {
		struct gdx_agent_args args = {
			.stop = (uintptr_t)a->stop,
			.workers = (uintptr_t)a->workers,
			.rings = (uintptr_t)a->rings,
			.descs = (uintptr_t)a->descs,
			.idle_ns = (uint64_t)a->o.idle_us * 1000,
			.nrings = a->o.rings,
			.entries = a->o.entries,
			.worker = w,
			.nworkers = a->o.workers,
		};
		int rc;

		/* other posts see it live from here on; the worker sets it too */
		__atomic_store_n(&wk->live, 1, __ATOMIC_RELAXED);
		rc = a->dev->ops->agent_launch(a->dev->priv, a->streams[w]->priv, &args);
		if (rc) {
			__atomic_store_n(&wk->live, 0, __ATOMIC_RELAXED);
			set_err(a, rc, "launch");
		} else {
			a->launches++;
		}
	}
out:
	pthread_mutex_unlock(&a->lock);
	return __atomic_load_n(&a->err, __ATOMIC_RELAXED);
}

GDX_API int gdx_copy_agent_post(struct gdx_copy_agent *a, unsigned ring, void *dst,
				const void *src, size_t len, uint32_t *seq)
{
	struct gdx_agent_ring *r;
	struct gdx_agent_desc *d;
	uint64_t hi;
	unsigned w;
	uint32_t s, e;
	int err;

	/*
	 * A worker counts a copy's 4 KiB units in 32 bits, from the source's
	 * offset in its page (up to 4095) on.
	 */
	if (!a || ring >= a->o.rings || !dst || !src || !len || len > UINT32_MAX - 8191)
		return -EINVAL;
	err = __atomic_load_n(&a->err, __ATOMIC_RELAXED);
	if (err)
		return err;
	w = ring % a->o.workers;
	e = __atomic_load_n(&a->workers[w].err, __ATOMIC_RELAXED);
	if (e)
		return worker_failed(a, w, e);
	r = &a->rings[ring];
	s = a->posted[ring] + 1;	/* this thread is the one that posts to the ring */
	/* the slot's previous descriptor, s - entries, must have been copied */
	if (s - __atomic_load_n(&r->done, __ATOMIC_ACQUIRE) > a->o.entries)
		return -EAGAIN;
	d = &a->descs[(size_t)ring * a->o.entries + (s & (a->o.entries - 1))];
	hi = (uint64_t)s << 32;
	__atomic_store_n(&d->w[0], hi | (uint32_t)(uintptr_t)dst, __ATOMIC_RELAXED);
	__atomic_store_n(&d->w[1], hi | (uint32_t)((uint64_t)(uintptr_t)dst >> 32), __ATOMIC_RELAXED);
	__atomic_store_n(&d->w[2], hi | (uint32_t)(uintptr_t)src, __ATOMIC_RELAXED);
	__atomic_store_n(&d->w[3], hi | (uint32_t)((uint64_t)(uintptr_t)src >> 32), __ATOMIC_RELAXED);
	__atomic_store_n(&d->w[4], hi | (uint32_t)len, __ATOMIC_RELEASE);
	a->posted[ring] = s;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (seq)
		*seq = s;
	/* the descriptor stays posted; a launch that fails fails the agent */
	if (!__atomic_load_n(&a->workers[w].live, __ATOMIC_RELAXED))
		return launch(a, w);
	return 0;
}

GDX_API const uint32_t *gdx_copy_agent_done_word(struct gdx_copy_agent *a, unsigned ring)
{
	return a && ring < a->o.rings ? &a->rings[ring].done : NULL;
}

GDX_API int gdx_copy_agent_status(struct gdx_copy_agent *a)
{
	uint64_t now, due;

	if (!a)
		return -EINVAL;
	for (unsigned w = 0; !__atomic_load_n(&a->err, __ATOMIC_RELAXED) && w < a->o.workers; w++) {
		uint32_t e = __atomic_load_n(&a->workers[w].err, __ATOMIC_RELAXED);

		if (e)
			worker_failed(a, w, e);
	}
	/*
	 * A fault shows only in the workers' streams, and a stream query costs
	 * microseconds once several threads make them at once: the streams are
	 * asked at most once a millisecond, by one caller.
	 */
	now = gdx_now_ns();
	due = __atomic_load_n(&a->next_query_ns, __ATOMIC_RELAXED);
	if (!__atomic_load_n(&a->err, __ATOMIC_RELAXED) && now >= due &&
	    __atomic_compare_exchange_n(&a->next_query_ns, &due, now + 1000000, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
		for (unsigned w = 0; w < a->o.workers; w++) {
			/* a worker that ended is fine (idle); a stream in error is not */
			int rc = gdx_stream_query(a->streams[w]);

			if (rc && rc != -EBUSY) {
				set_err(a, rc, "worker fault");
				break;
			}
		}
	}
	return __atomic_load_n(&a->err, __ATOMIC_RELAXED);
}

GDX_API int gdx_copy_agent_halt(struct gdx_copy_agent *a)
{
	uint64_t deadline;
	int rc = 0;

	if (!a)
		return -EINVAL;
	pthread_mutex_lock(&a->lock);
	a->stopping = true;
	pthread_mutex_unlock(&a->lock);
	if (__atomic_load_n(&a->halted, __ATOMIC_ACQUIRE))
		return 0;
	set_err(a, -ESHUTDOWN, "stopped");
	__atomic_store_n(a->stop, 1, __ATOMIC_RELEASE);
	deadline = gdx_now_ns() + (uint64_t)a->o.stop_timeout_ms * 1000000;
	for (unsigned w = 0; w < a->o.workers; w++) {
		while ((rc = gdx_stream_query(a->streams[w])) == -EBUSY && gdx_now_ns() < deadline)
			usleep(100);
		if (rc == -EBUSY) {
			GDX_ERR("device", "%s: copy agent worker %u did not stop within %u ms",
				a->dev->name, w, a->o.stop_timeout_ms);
			return -ETIMEDOUT;
		}
		if (rc)
			GDX_WARN("device", "%s: copy agent worker %u ended in error: %s",
				 a->dev->name, w, gdx_strerror(rc));
	}
	__atomic_store_n(&a->halted, true, __ATOMIC_RELEASE);
	return 0;
}

GDX_API int gdx_copy_agent_stop(struct gdx_copy_agent *a)
{
	if (!a)
		return 0;
	if (gdx_copy_agent_halt(a)) {
		/* the device may still read and write the rings: leave them be */
		GDX_ERR("device", "%s: copy agent not stopped: its memory stays allocated",
			a->dev->name);
		return -ETIMEDOUT;
	}
	GDX_DBG("device", "%s: copy agent stopped after %llu launches", a->dev->name,
		(unsigned long long)a->launches);
	agent_free(a);
	return 0;
}
