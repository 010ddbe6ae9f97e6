/* SPDX-License-Identifier: MIT */
/*
 * Device front end: parses device specs, keeps one shared object per opened
 * (kind, ordinal), checks arguments and dispatches to the backend's ops.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "mem/regcache.h"

static const struct gdx_device_ops *const backends[] = {
	&gdx_cuda_ops,
	&gdx_emulated_ops,
};

_Thread_local uint64_t gdx_dev_calls_tls;

#define MAX_OPEN 64
/*
 * Opening and closing write the table; pointer lookups, which every I/O on a
 * bare pointer makes from any thread, only read it and run their driver
 * queries side by side.  Writers go first, so a stream of lookups cannot keep
 * an open or a close waiting.
 */
static pthread_rwlock_t open_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static struct gdx_device *open_devs[MAX_OPEN];

/*
 * Device allocations made through gdx_device_malloc[_async] and not freed yet,
 * each with what the backend said of it when it was made: gdx_device_of_ptr
 * answers for a pointer inside one without a driver call.  A driver pointer
 * query per I/O is what reads of small blocks into device memory cannot
 * afford (on cuda it costs microseconds once several threads make them).
 * Only allocations made here are kept, because only their frees are seen
 * here; the table is bounded (others, and those that do not fit, are queried
 * as before).  Under open_lock, as the table of devices.
 */
#define MAX_KNOWN 128
static struct known {
	uintptr_t base, end;
	struct gdx_device *dev;
	struct gdx_ptr_attrs a;
} known[MAX_KNOWN];
static unsigned nknown;

static void known_add(struct gdx_device *dev, void *p, size_t size)
{
	struct gdx_ptr_attrs a = { .device_ordinal = -1 };

	/* what the query says of the allocation's start holds for every byte of it */
	if (dev->ops->pointer_query(dev->priv, p, &a) || a.kind != GDX_MEM_DEVICE ||
	    a.base != p || a.size < size)
		return;
	pthread_rwlock_wrlock(&open_lock);
	if (nknown < MAX_KNOWN)
		known[nknown++] = (struct known){ (uintptr_t)p, (uintptr_t)p + a.size, dev, a };
	pthread_rwlock_unlock(&open_lock);
}

/* Drops the allocation at p (or every one of dev's when p is NULL); open_lock held. */
static void known_drop_locked(struct gdx_device *dev, const void *p)
{
	for (unsigned i = 0; i < nknown;) {
		if (known[i].dev == dev && (!p || known[i].base == (uintptr_t)p))
			known[i] = known[--nknown];
		else
			i++;
	}
}

static void known_drop(struct gdx_device *dev, const void *p)
{
	pthread_rwlock_wrlock(&open_lock);
	known_drop_locked(dev, p);
	pthread_rwlock_unlock(&open_lock);
}

static const struct gdx_device_ops *find_backend(const char *kind, size_t len)
{
	for (size_t i = 0; i < GDX_ARRAY_SIZE(backends); i++)
		if (strlen(backends[i]->kind) == len && !strncmp(backends[i]->kind, kind, len))
			return backends[i];
	return NULL;
}

GDX_API int gdx_device_count(const char *kind)
{
	const struct gdx_device_ops *ops;

	if (!kind)
		return -EINVAL;
	ops = find_backend(kind, strlen(kind));
	if (!ops)
		return -EINVAL;
	return ops->count();
}

/* "kind" or "kind:N" -> backend and ordinal (-1 when N is absent). */
static int parse_spec(const char *spec, const struct gdx_device_ops **ops, int *ordinal)
{
	size_t klen;

	if (gdx_parse_device_spec(spec, &klen, ordinal))
		return -EINVAL;
	if (klen == 4 && !strncmp(spec, "auto", 4)) {
		*ops = NULL;
		return 0;
	}
	*ops = find_backend(spec, klen);
	return *ops ? 0 : -EINVAL;
}

static int open_one(const struct gdx_device_ops *ops, int ordinal, struct gdx_device **out)
{
	struct gdx_device *dev = NULL;
	int free_slot = -1, ret;

	pthread_rwlock_wrlock(&open_lock);
	for (int i = 0; i < MAX_OPEN; i++) {
		struct gdx_device *d = open_devs[i];

		if (!d) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (d->ops == ops && d->ordinal == ordinal) {
			atomic_fetch_add(&d->refs, 1);
			*out = d;
			pthread_rwlock_unlock(&open_lock);
			return 0;
		}
	}
	ret = -EMFILE;
	if (free_slot < 0)
		goto out;
	ret = ops->count();
	if (ret < 0 || ordinal >= ret) {
		if (ops == &gdx_cuda_ops)
			GDX_ERR("device", "cannot open cuda:%d: %s; set GDX_DEVICE=emulated to run "
				"on the emulated device", ordinal,
				ret > 0 ? "no such device" : gdx_cuda_load_error());
		else if (ret >= 0)
			GDX_ERR("device", "cannot open %s:%d: no such device (%d %s device%s; "
				"GDX_EMULATED_DEVICES sets how many)", ops->kind, ordinal, ret,
				ops->kind, ret == 1 ? "" : "s");
		else
			GDX_ERR("device", "cannot open %s:%d: %s", ops->kind, ordinal,
				gdx_strerror(ret));
		if (ret >= 0)
			ret = GDX_ENODEVICE;
		goto out;
	}
	ret = -ENOMEM;
	dev = calloc(1, sizeof(*dev));
	if (!dev)
		goto out;
	dev->ops = ops;
	dev->ordinal = ordinal;
	atomic_init(&dev->refs, 1);
	snprintf(dev->name, sizeof(dev->name), "%s:%d", ops->kind, ordinal);
	ret = ops->open(ordinal, &dev->priv);
	if (ret) {
		free(dev);
		goto out;
	}
	open_devs[free_slot] = dev;
	*out = dev;
	GDX_INFO("device", "opened %s", dev->name);
out:
	pthread_rwlock_unlock(&open_lock);
	return ret;
}

GDX_API int gdx_device_open(const char *spec, struct gdx_device **out)
{
	const struct gdx_device_ops *ops;
	char why[640];
	int ordinal, ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = gdx_config_check(why, sizeof(why));
	if (ret) {
		GDX_ERR("config", "%s", why);
		return ret;
	}
	if (!spec || !*spec)
		spec = gdx_cfg_str("device");
	ret = parse_spec(spec, &ops, &ordinal);
	if (ret) {
		GDX_ERR("device", "bad device spec '%s' (want auto, cuda[:N] or emulated[:N])", spec);
		return ret;
	}
	if (ops)
		return open_one(ops, ordinal < 0 ? 0 : ordinal, out);

	/* auto: a real device only; the emulated one must be asked for by name. */
	ret = gdx_cuda_ops.count();
	if (ret > 0)
		return open_one(&gdx_cuda_ops, ordinal < 0 ? 0 : ordinal, out);
	GDX_ERR("device", "no GPU found (cuda: %s); set GDX_DEVICE=emulated or open "
		"\"emulated\" to run on the emulated device", gdx_cuda_load_error());
	return GDX_ENODEVICE;
}

GDX_API void gdx_device_close(struct gdx_device *dev)
{
	if (!dev)
		return;
	pthread_rwlock_wrlock(&open_lock);
	if (atomic_fetch_sub(&dev->refs, 1) == 1) {
		for (int i = 0; i < MAX_OPEN; i++)
			if (open_devs[i] == dev)
				open_devs[i] = NULL;
		known_drop_locked(dev, NULL);
		dev->ops->close(dev->priv);
		free(dev);
	}
	pthread_rwlock_unlock(&open_lock);
}

struct gdx_device *gdx_device_of_ptr(const void *p, struct gdx_ptr_attrs *a)
{
	struct gdx_device *found = NULL;

	pthread_rwlock_rdlock(&open_lock);
	for (unsigned i = 0; i < nknown; i++) {
		if ((uintptr_t)p >= known[i].base && (uintptr_t)p < known[i].end) {
			*a = known[i].a;
			pthread_rwlock_unlock(&open_lock);
			return known[i].dev;
		}
	}
	for (int i = 0; i < MAX_OPEN && !found; i++) {
		struct gdx_device *d = open_devs[i];

		if (!d)
			continue;
		/* Backends fill what they know; nothing may leak over from the last one. */
		memset(a, 0, sizeof(*a));
		a->device_ordinal = -1;
		if (!d->ops->pointer_query(d->priv, p, a) &&
		    a->kind != GDX_MEM_HOST && a->kind != GDX_MEM_UNKNOWN &&
		    (a->device_ordinal == d->ordinal || a->kind == GDX_MEM_PINNED))
			found = d;
	}
	pthread_rwlock_unlock(&open_lock);
	if (!found) {
		memset(a, 0, sizeof(*a));
		a->kind = GDX_MEM_HOST;
		a->device_ordinal = -1;
	}
	return found;
}

GDX_API const char *gdx_device_kind(const struct gdx_device *dev)
{
	return dev ? dev->ops->kind : "none";
}

GDX_API int gdx_device_ordinal(const struct gdx_device *dev)
{
	return dev ? dev->ordinal : -1;
}

GDX_API const char *gdx_device_name(const struct gdx_device *dev)
{
	return dev ? dev->name : "none";
}

GDX_API int gdx_device_props(const struct gdx_device *dev, struct gdx_device_props *p)
{
	if (!dev || !p)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->numa_node = -1;
	return dev->ops->props(dev->priv, p);
}

GDX_API const char *gdx_mem_kind_name(enum gdx_mem_kind kind)
{
	switch (kind) {
	case GDX_MEM_HOST: return "host";
	case GDX_MEM_PINNED: return "pinned";
	case GDX_MEM_DEVICE: return "device";
	case GDX_MEM_MANAGED: return "managed";
	default: return "unknown";
	}
}

/* ---- memory ----------------------------------------------------------- */

GDX_API int gdx_device_malloc(struct gdx_device *dev, size_t size, void **dptr)
{
	int ret;

	if (!dev || !dptr || !size)
		return -EINVAL;
	ret = dev->ops->malloc(dev->priv, size, dptr);
	if (!ret)
		known_add(dev, *dptr, size);
	return ret;
}

/*
 * Drops registrations of the allocation at p from every cache first.  Only an
 * allocation's start can be freed: a pointer inside one is refused by the
 * backend, and must not cost a live allocation its cached registrations.
 */
static void release_ranges(struct gdx_device *dev, const void *p)
{
	struct gdx_ptr_attrs a = { .device_ordinal = -1 };

	if (!dev->ops->pointer_query(dev->priv, p, &a) && a.size && a.base == p)
		gdx_mem_notify_release(a.base, a.size);
}

GDX_API int gdx_device_free(struct gdx_device *dev, void *dptr)
{
	if (!dev)
		return -EINVAL;
	if (!dptr)
		return 0;
	known_drop(dev, dptr);
	release_ranges(dev, dptr);
	return dev->ops->free(dev->priv, dptr);
}

GDX_API int gdx_device_malloc_async(struct gdx_device *dev, size_t size, void **dptr,
				    struct gdx_stream *s)
{
	int ret;

	if (!dev || !dptr || !size || !s || s->dev != dev)
		return -EINVAL;
	ret = dev->ops->malloc_async(dev->priv, size, dptr, s->priv);
	if (!ret)
		known_add(dev, *dptr, size);
	return ret;
}

GDX_API int gdx_device_free_async(struct gdx_device *dev, void *dptr, struct gdx_stream *s)
{
	if (!dev || !s || s->dev != dev)
		return -EINVAL;
	if (!dptr)
		return 0;
	known_drop(dev, dptr);
	release_ranges(dev, dptr);
	return dev->ops->free_async(dev->priv, dptr, s->priv);
}

GDX_API int gdx_pinned_alloc(struct gdx_device *dev, size_t size, void **p)
{
	if (!dev || !p || !size)
		return -EINVAL;
	return dev->ops->pinned_alloc(dev->priv, size, p);
}

GDX_API int gdx_pinned_free(struct gdx_device *dev, void *p)
{
	if (!dev)
		return -EINVAL;
	if (!p)
		return 0;
	release_ranges(dev, p);
	return dev->ops->pinned_free(dev->priv, p);
}

GDX_API int gdx_host_register(struct gdx_device *dev, void *p, size_t size, unsigned flags)
{
	if (!dev || !p || !size || (flags & ~GDX_HOST_REGISTER_READONLY))
		return -EINVAL;
	return dev->ops->host_register(dev->priv, p, size, flags);
}

GDX_API int gdx_host_unregister(struct gdx_device *dev, void *p)
{
	if (!dev || !p)
		return -EINVAL;
	release_ranges(dev, p);
	return dev->ops->host_unregister(dev->priv, p);
}

GDX_API int gdx_pointer_query(struct gdx_device *dev, const void *p, struct gdx_ptr_attrs *a)
{
	if (!dev || !a)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->device_ordinal = -1;
	if (!p) {
		a->kind = GDX_MEM_UNKNOWN;
		return -EINVAL;
	}
	return dev->ops->pointer_query(dev->priv, p, a);
}

GDX_API int gdx_device_export_dmabuf(struct gdx_device *dev, void *dptr, size_t size,
				     int *fd, uint64_t *offset)
{
	if (!dev || !dptr || !size || !fd || !offset)
		return -EINVAL;
	if (!dev->ops->export_dmabuf)
		return -EOPNOTSUPP;
	return dev->ops->export_dmabuf(dev->priv, dptr, size, fd, offset);
}

int gdx_device_nic_addr(struct gdx_device *dev, void *dptr, size_t size, void **va)
{
	if (!dev || !dptr || !size || !va)
		return -EINVAL;
	if (!dev->ops->nic_addr)
		return -EOPNOTSUPP;
	return dev->ops->nic_addr(dev->priv, dptr, size, va);
}

/* ---- copies ------------------------------------------------------------ */

GDX_API int gdx_memcpy(struct gdx_device *dev, void *dst, const void *src, size_t n)
{
	if (!dev || ((!dst || !src) && n))
		return -EINVAL;
	if (!n)
		return 0;
	return dev->ops->memcpy(dev->priv, dst, src, n, NULL);
}

GDX_API int gdx_memcpy_async(struct gdx_device *dev, void *dst, const void *src, size_t n,
			     struct gdx_stream *s)
{
	if (!dev || !s || s->dev != dev || ((!dst || !src) && n))
		return -EINVAL;
	if (!n)
		return 0;
	return dev->ops->memcpy(dev->priv, dst, src, n, s->priv);
}

GDX_API int gdx_memcpy_batch_async(struct gdx_device *dev, void *const *dsts,
				   const void *const *srcs, const size_t *sizes, size_t n,
				   struct gdx_stream *s)
{
	bool whole = n > 1 && dev && dev->ops->memcpy_batch;
	int ret;

	if (!dev || !s || s->dev != dev || (n && (!dsts || !srcs || !sizes)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if ((!dsts[i] || !srcs[i]) && sizes[i])
			return -EINVAL;
		whole = whole && sizes[i];
	}
	if (whole)
		return dev->ops->memcpy_batch(dev->priv, dsts, srcs, sizes, n, s->priv);
	for (size_t i = 0; i < n; i++) {
		if (!sizes[i])
			continue;
		ret = dev->ops->memcpy(dev->priv, dsts[i], srcs[i], sizes[i], s->priv);
		if (ret)
			return ret;
	}
	return 0;
}

GDX_API int gdx_memset(struct gdx_device *dev, void *dst, int v, size_t n)
{
	if (!dev || (!dst && n))
		return -EINVAL;
	if (!n)
		return 0;
	return dev->ops->memset(dev->priv, dst, v, n, NULL);
}

GDX_API int gdx_memset_async(struct gdx_device *dev, void *dst, int v, size_t n,
			     struct gdx_stream *s)
{
	if (!dev || !s || s->dev != dev || (!dst && n))
		return -EINVAL;
	if (!n)
		return 0;
	return dev->ops->memset(dev->priv, dst, v, n, s->priv);
}

/* ---- streams and events ------------------------------------------------ */

static int stream_new(struct gdx_device *dev, void *native, struct gdx_stream **out)
{
	struct gdx_stream *s;
	int ret;

	if (!dev || !out)
		return -EINVAL;
	s = calloc(1, sizeof(*s) + dev->ops->stream_priv_size);
	if (!s)
		return -ENOMEM;
	s->dev = dev;
	ret = dev->ops->stream_create(dev->priv, s->priv, native);
	if (ret) {
		free(s);
		return ret;
	}
	atomic_fetch_add(&dev->refs, 1);
	*out = s;
	return 0;
}

GDX_API int gdx_stream_create(struct gdx_device *dev, struct gdx_stream **s)
{
	return stream_new(dev, NULL, s);
}

GDX_API int gdx_stream_wrap(struct gdx_device *dev, void *native, struct gdx_stream **s)
{
	if (!native)
		return -EINVAL;
	return stream_new(dev, native, s);
}

GDX_API int gdx_stream_destroy(struct gdx_stream *s)
{
	struct gdx_device *dev;
	int ret;

	if (!s)
		return 0;
	dev = s->dev;
	ret = dev->ops->stream_destroy(dev->priv, s->priv);
	free(s);
	gdx_device_close(dev);
	return ret;
}

GDX_API int gdx_stream_synchronize(struct gdx_stream *s)
{
	if (!s)
		return -EINVAL;
	return s->dev->ops->stream_synchronize(s->dev->priv, s->priv);
}

GDX_API int gdx_stream_query(struct gdx_stream *s)
{
	if (!s)
		return -EINVAL;
	return s->dev->ops->stream_query(s->dev->priv, s->priv);
}

GDX_API void *gdx_stream_native(struct gdx_stream *s)
{
	return s ? s->dev->ops->stream_native(s->dev->priv, s->priv) : NULL;
}

GDX_API struct gdx_device *gdx_stream_device(struct gdx_stream *s)
{
	return s ? s->dev : NULL;
}

GDX_API int gdx_stream_launch_host_func(struct gdx_stream *s, gdx_host_fn fn, void *arg)
{
	if (!s || !fn)
		return -EINVAL;
	return s->dev->ops->launch_host_func(s->dev->priv, s->priv, fn, arg);
}

GDX_API int gdx_stream_wait_event(struct gdx_stream *s, struct gdx_event *e)
{
	if (!s || !e || s->dev != e->dev)
		return -EINVAL;
	return s->dev->ops->stream_wait_event(s->dev->priv, s->priv, e->priv);
}

/* The backend refuses a word outside pinned memory: it knows which it can skip asking about. */
GDX_API int gdx_stream_wait_value32(struct gdx_stream *s, const uint32_t *addr, uint32_t value)
{
	if (!s || !addr || ((uintptr_t)addr & 3))
		return -EINVAL;
	return s->dev->ops->stream_wait_value32(s->dev->priv, s->priv, addr, value);
}

GDX_API int gdx_stream_write_value32(struct gdx_stream *s, uint32_t *addr, uint32_t value)
{
	if (!s || !addr || ((uintptr_t)addr & 3))
		return -EINVAL;
	if (!s->dev->ops->stream_write_value32)
		return -EOPNOTSUPP;
	return s->dev->ops->stream_write_value32(s->dev->priv, s->priv, addr, value);
}

GDX_API int gdx_event_create(struct gdx_device *dev, unsigned flags, struct gdx_event **out)
{
	struct gdx_event *e;
	int ret;

	if (!dev || !out || (flags & ~GDX_EVENT_TIMING))
		return -EINVAL;
	e = calloc(1, sizeof(*e) + dev->ops->event_priv_size);
	if (!e)
		return -ENOMEM;
	e->dev = dev;
	e->flags = flags;
	ret = dev->ops->event_create(dev->priv, e->priv, flags);
	if (ret) {
		free(e);
		return ret;
	}
	atomic_fetch_add(&dev->refs, 1);
	*out = e;
	return 0;
}

GDX_API int gdx_event_destroy(struct gdx_event *e)
{
	struct gdx_device *dev;
	int ret;

	if (!e)
		return 0;
	dev = e->dev;
	ret = dev->ops->event_destroy(dev->priv, e->priv);
	free(e);
	gdx_device_close(dev);
	return ret;
}

GDX_API int gdx_event_record(struct gdx_event *e, struct gdx_stream *s)
{
	if (!e || !s || e->dev != s->dev)
		return -EINVAL;
	return e->dev->ops->event_record(e->dev->priv, e->priv, s->priv);
}

GDX_API int gdx_event_synchronize(struct gdx_event *e)
{
	if (!e)
		return -EINVAL;
	return e->dev->ops->event_synchronize(e->dev->priv, e->priv);
}

GDX_API int gdx_event_query(struct gdx_event *e)
{
	if (!e)
		return -EINVAL;
	return e->dev->ops->event_query(e->dev->priv, e->priv);
}

GDX_API int gdx_event_elapsed_ms(struct gdx_event *start, struct gdx_event *end, float *ms)
{
	if (!start || !end || !ms || start->dev != end->dev)
		return -EINVAL;
	if (!(start->flags & end->flags & GDX_EVENT_TIMING))
		return -EINVAL;
	return start->dev->ops->event_elapsed_ms(start->dev->priv, start->priv, end->priv, ms);
}
