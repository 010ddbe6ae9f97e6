/* SPDX-License-Identifier: MIT */
/*
 * The gdx_file_* front end: drivers, handles, backend choice, argument checks,
 * memory kinds, strict mode, the path record and synchronous I/O, on the
 * caller's thread.  Backends (cufile, uring, posix) only move bytes; batches
 * (batch.c) and stream-ordered I/O (async.c) are built on top of them and the
 * driver's worker threads, which start here.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/file_int.h"
#include "gpu/device.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef RAMFS_MAGIC
#define RAMFS_MAGIC 0x858458f6
#endif

/* Registry in priority order: the direct path first, the plain syscalls last. */
static const struct gdx_file_backend_ops *const registry[GDX_FILE_BE_COUNT] = {
	[GDX_FILE_BE_CUFILE] = &gdx_file_cufile_ops,
	[GDX_FILE_BE_URING] = &gdx_file_uring_ops,
	[GDX_FILE_BE_POSIX] = &gdx_file_posix_ops,
};

GDX_API const char *gdx_file_path_name(enum gdx_file_path p)
{
	static const char *const names[GDX_FILE_PATH_COUNT] = {
		"none", "direct", "pagecache", "bounce", "host", "posix",
	};

	return (unsigned)p < GDX_FILE_PATH_COUNT ? names[p] : "?";
}

void gdx_file_info_finish(struct gdx_file_io_info *info)
{
	uint64_t best = 0;

	info->path = GDX_FILE_PATH_NONE;
	for (int p = 1; p < GDX_FILE_PATH_COUNT; p++) {
		if (info->bytes[p] > best) {
			best = info->bytes[p];
			info->path = (enum gdx_file_path)p;
		}
	}
}

void gdx_file_why(struct gdx_file_io_info *info, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(info->why, sizeof(info->why), fmt, ap);
	va_end(ap);
}

bool gdx_file_fd_is_memfs(int fd)
{
	struct statfs sf;

	if (fstatfs(fd, &sf))
		return false;
	return (unsigned long)sf.f_type == TMPFS_MAGIC || (unsigned long)sf.f_type == RAMFS_MAGIC;
}

static int backend_index(const char *name)
{
	if (!name || !strcmp(name, "auto"))
		return -1;
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
		if (!strcmp(registry[i]->name, name))
			return i;
	return -EINVAL;
}

/* ---- driver ------------------------------------------------------------ */

GDX_API void gdx_file_driver_opts_init(struct gdx_file_driver_opts *o, size_t struct_size)
{
	if (!o || struct_size < sizeof(size_t))
		return;
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
}

static void reg_release(struct gdx_reg *r, void *arg)
{
	struct gdx_file_driver *drv = arg;
	struct gdx_file_be *be = r->payload ? &drv->be[GDX_FILE_BE_CUFILE] : NULL;

	/* Only the cufile backend keeps a registration of its own. */
	if (be && be->priv && be->ops->buf_deregister)
		be->ops->buf_deregister(be->priv, r->payload);
}

GDX_API int gdx_file_driver_open(struct gdx_device *dev, const struct gdx_file_driver_opts *o,
				 struct gdx_file_driver **out)
{
	struct gdx_file_driver *drv;
	const char *want = NULL;
	int ret, ok = 0;

	if (!out || (o && o->struct_size < sizeof(size_t)))
		return -EINVAL;
	*out = NULL;
	if (o && o->struct_size >= offsetof(struct gdx_file_driver_opts, backend) + sizeof(char *))
		want = o->backend;
	drv = calloc(1, sizeof(*drv));
	if (!drv)
		return -ENOMEM;
	drv->only = backend_index(want);
	if (drv->only == -EINVAL) {
		GDX_ERR("file", "unknown storage backend '%s' (want cufile, uring or posix)", want);
		free(drv);
		return -EINVAL;
	}
	if (dev) {
		atomic_fetch_add(&dev->refs, 1);
		drv->dev = dev;
	} else {
		ret = gdx_device_open(NULL, &drv->dev);
		if (ret) {
			free(drv);
			return ret;
		}
	}
	drv->wq_once = (pthread_once_t)PTHREAD_ONCE_INIT;
	pthread_mutex_init(&drv->gate_lock, NULL);
	pthread_cond_init(&drv->gate_cond, NULL);
	pthread_cond_init(&drv->ahead_cond, NULL);
	{
		static const char *const names[] = {
			"reads", "writes", "errors", "not_direct", "bytes_direct",
			"bytes_pagecache", "bytes_bounce", "bytes_host", "bytes_posix",
			"pc_ranges", "pc_refused", "pc_map_ns", "pc_register_ns",
			"pc_unregister_ns", "copies", "copy_submit_ns", "engine_ns",
			"engine_cpu_ns", "engine_wait_ns", "storage_ios", "storage_depth_sum",
			"engine_active_sum", "preads", "pread_ns", "copies_held",
			"fixed_ios",
		};
		_Static_assert(sizeof(names) / sizeof(names[0]) == GDX_FILE_CTR_COUNT,
			       "a name for every file counter");
		static _Atomic unsigned seq;
		char scope[32];

		for (int i = 0; i < GDX_FILE_CTR_COUNT; i++)
			drv->ctr[i].name = names[i];
		snprintf(scope, sizeof(scope), "file.%u", atomic_fetch_add(&seq, 1));
		/* Statistics are a report, not a function: the driver runs without them. */
		if (gdx_stats_create(scope, drv->ctr, GDX_FILE_CTR_COUNT, &drv->stats))
			drv->stats = NULL;
	}
	atomic_init(&drv->next_id, 1);
	ret = gdx_regcache_create(drv->dev, reg_release, drv, &drv->regs);
	if (ret)
		goto fail;
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++) {
		struct gdx_file_be *be = &drv->be[i];

		be->ops = registry[i];
		if (drv->only >= 0 && drv->only != i) {
			snprintf(be->why, sizeof(be->why), "not asked for");
			continue;
		}
		ret = be->ops->init(drv, &be->priv, be->why, sizeof(be->why));
		if (ret) {
			be->priv = NULL;
			if (!be->why[0])
				snprintf(be->why, sizeof(be->why), "%s", gdx_strerror(ret));
			GDX_INFO("file", "backend %s unavailable: %s", be->ops->name, be->why);
			continue;
		}
		ok++;
	}
	if (!ok) {
		ret = drv->only >= 0 ? GDX_ENOLIB : -ENODEV;
		GDX_ERR("file", "no storage backend could start%s%s", drv->only >= 0 ? ": " : "",
			drv->only >= 0 ? drv->be[drv->only].why : "");
		goto fail;
	}
	*out = drv;
	return 0;
fail:
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
		if (drv->be[i].priv)
			drv->be[i].ops->fini(drv->be[i].priv);
	gdx_regcache_destroy(drv->regs);
	gdx_stats_destroy(drv->stats);
	pthread_mutex_destroy(&drv->gate_lock);
	pthread_cond_destroy(&drv->gate_cond);
	pthread_cond_destroy(&drv->ahead_cond);
	gdx_device_close(drv->dev);
	free(drv);
	return ret;
}

GDX_API void gdx_file_driver_close(struct gdx_file_driver *drv)
{
	if (!drv)
		return;
	if (atomic_load(&drv->handles))
		GDX_WARN("file", "driver closed with %u handles open", atomic_load(&drv->handles));
	gdx_tpool_destroy(drv->wq);
	if (drv->gates)
		gdx_pinned_free(drv->dev, drv->gates);
	free(drv->gate_free);
	gdx_file_stages_free(drv);
	pthread_mutex_destroy(&drv->gate_lock);
	pthread_cond_destroy(&drv->gate_cond);
	pthread_cond_destroy(&drv->ahead_cond);
	/* Registrations go before the backends that made them. */
	gdx_regcache_destroy(drv->regs);
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
		if (drv->be[i].priv)
			drv->be[i].ops->fini(drv->be[i].priv);
	gdx_stats_destroy(drv->stats);
	gdx_device_close(drv->dev);
	free(drv);
}

GDX_API struct gdx_device *gdx_file_driver_device(struct gdx_file_driver *drv)
{
	return drv ? drv->dev : NULL;
}

GDX_API int gdx_file_driver_describe(struct gdx_file_driver *drv, char *buf, size_t len)
{
	size_t n = 0;

	if (!drv || !buf || !len)
		return -EINVAL;
	buf[0] = 0;
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++) {
		struct gdx_file_be *be = &drv->be[i];
		int w = snprintf(buf + n, len - n, "%s%s: %s", i ? "; " : "", be->ops->name,
				 be->priv ? "ready" : be->why);

		if (w < 0 || (size_t)w >= len - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	return (int)n;
}

GDX_API int gdx_file_driver_counter(struct gdx_file_driver *drv, unsigned i, const char **name,
				    uint64_t *value)
{
	if (!drv || !name || !value)
		return -EINVAL;
	if (i >= GDX_FILE_CTR_COUNT)
		return -ENOENT;
	*name = drv->ctr[i].name;
	*value = gdx_counter_get(&drv->ctr[i]);
	return 0;
}

static __thread struct gdx_file_driver *wq_starting;

static void wq_start_once(void)
{
	struct gdx_file_driver *drv = wq_starting;

	drv->wq_err = gdx_tpool_create((unsigned)gdx_cfg_int("file.workers"), "gdx-file",
					 &drv->wq);
	if (!drv->wq_err)
		gdx_tpool_set_spin(drv->wq, (unsigned)gdx_cfg_int("file.spin_us"), 2);
}

void gdx_file_wq_start(struct gdx_file_driver *drv)
{
	wq_starting = drv;
	pthread_once(&drv->wq_once, wq_start_once);
}

/* ---- buffers ----------------------------------------------------------- */

GDX_API int gdx_file_buf_register(struct gdx_file_driver *drv, void *buf, size_t len)
{
	struct gdx_file_be *cf;
	struct gdx_ptr_attrs a;
	struct gdx_reg *r;
	void *payload = NULL;
	int ret;

	if (!drv || !buf || !len)
		return -EINVAL;
	ret = gdx_pointer_query(drv->dev, buf, &a);
	if (ret)
		return ret;
	if (a.kind == GDX_MEM_DEVICE && (uintptr_t)buf + len > (uintptr_t)a.base + a.size)
		return GDX_EBADPTR;
	cf = &drv->be[GDX_FILE_BE_CUFILE];
	if (cf->priv && cf->ops->buf_register) {
		ret = cf->ops->buf_register(cf->priv, buf, len, &a, &payload);
		if (ret)
			GDX_DBG("file", "cufile buffer registration refused: %s", gdx_strerror(ret));
		payload = ret ? NULL : payload;
	}
	ret = gdx_regcache_insert(drv->regs, buf, len, payload, &r);
	if (ret) {
		if (payload)
			cf->ops->buf_deregister(cf->priv, payload);
		return ret;
	}
	gdx_regcache_put(drv->regs, r);
	return 0;
}

GDX_API int gdx_file_buf_deregister(struct gdx_file_driver *drv, void *buf)
{
	if (!drv || !buf)
		return -EINVAL;
	return gdx_regcache_remove(drv->regs, buf);
}

/* ---- handles ----------------------------------------------------------- */

GDX_API void gdx_file_opts_init(struct gdx_file_opts *o, size_t struct_size)
{
	if (!o || struct_size < sizeof(size_t))
		return;
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
	if (struct_size >= offsetof(struct gdx_file_opts, mode) + sizeof(mode_t))
		o->mode = 0644;
}

int gdx_file_fd(const struct gdx_file *f)
{
	return f ? f->fd : -EBADF;
}

unsigned gdx_file_flags(const struct gdx_file *f)
{
	return f ? f->flags : 0;
}

void *gdx_file_backend_priv(const struct gdx_file *f)
{
	return f ? f->fpriv : NULL;
}

/* Copies the fields of a caller's opts that its struct_size covers. */
static int opts_get(const struct gdx_file_opts *o, struct gdx_file_opts *out)
{
	gdx_file_opts_init(out, sizeof(*out));
	if (!o)
		return 0;
	if (o->struct_size < sizeof(size_t))
		return -EINVAL;
	memcpy(out, o, GDX_MIN(o->struct_size, sizeof(*out)));
	out->struct_size = sizeof(*out);
	return 0;
}

/*
 * The buffered twin of an O_DIRECT descriptor (struct gdx_file): a second
 * open keeping the access mode and the flags that change what a write means.
 * Made at open, so every thread (the stream-ordered workers too, which call
 * nothing but pread/pwrite) finds it ready.  A failure (no /proc, a file
 * this process may no longer open, no descriptor left) costs only the
 * unaligned I/O: the rest goes O_DIRECT on the descriptor itself.
 */
static int buffered_open(int fd, int fl)
{
	char path[32];
	int bfd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	bfd = open(path, (fl & (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC | O_NOATIME)) | O_CLOEXEC);
	if (bfd >= 0)
		return bfd;
	bfd = -errno;
	GDX_WARN("file", "O_DIRECT descriptor: a second open of the file without O_DIRECT "
		 "failed (%s); its I/O goes O_DIRECT, unaligned I/O will fail", strerror(-bfd));
	return bfd;
}

int gdx_file_twin_refuse(const struct gdx_file *f, struct gdx_file_io_info *info,
			 const char *what)
{
	gdx_file_why(info, "%s: unaligned offset, size or memory on an O_DIRECT descriptor "
		     "needs a second open of the file without O_DIRECT, which failed at open: %s",
		     what, strerror(-f->buffered_fd));
	return -EINVAL;
}

static int handle_new(struct gdx_file_driver *drv, int fd, bool own, const struct gdx_file_opts *o,
		      struct gdx_file **out)
{
	struct gdx_file *f;
	size_t n = 0;
	int fl, first, last, want, ret = -ENODEV;

	fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->drv = drv;
	f->fd = fd;
	f->own_fd = own;
	f->accmode = fl & O_ACCMODE;
	f->odirect = fl & O_DIRECT;
	f->buffered_fd = f->odirect ? buffered_open(fd, fl) : fd;
	f->flags = o->flags;
	if (!gdx_cfg_bool("file.odirect"))
		f->flags |= GDX_FILE_NO_ODIRECT;
	if (!gdx_cfg_bool("file.pagecache"))
		f->flags |= GDX_FILE_NO_PAGECACHE;
	if (gdx_cfg_bool("require_direct"))
		f->flags |= GDX_FILE_REQUIRE_DIRECT;
	f->id = atomic_fetch_add(&drv->next_id, 1);
	{
		struct stat st;
		uint64_t key = fstat(fd, &st) ? f->id : (uint64_t)st.st_ino * 31u + st.st_dev;

		f->wbucket = (unsigned)(key % GDX_FILE_WBUCKETS);
	}
	pthread_mutex_init(&f->info_lock, NULL);

	want = backend_index(o->backend ? o->backend : gdx_cfg_str("file.backend"));
	if (want == -EINVAL) {
		GDX_ERR("file", "unknown storage backend '%s'", o->backend);
		ret = -EINVAL;
		goto fail;
	}
	first = want >= 0 ? want : 0;
	last = want >= 0 ? want : GDX_FILE_BE_COUNT - 1;
	for (int i = first; i <= last; i++) {
		struct gdx_file_be *be = &drv->be[i];
		char why[160] = "";

		if (!be->priv) {
			snprintf(why, sizeof(why), "%s", be->why);
		} else {
			ret = be->ops->open(be->priv, f, &f->fpriv, why, sizeof(why));
			if (!ret) {
				f->be = be;
				break;
			}
			if (!why[0])
				snprintf(why, sizeof(why), "%s", gdx_strerror(ret));
		}
		n += (size_t)snprintf(f->chosen_why + n, n < sizeof(f->chosen_why) ?
				      sizeof(f->chosen_why) - n : 0, "%s%s: %s",
				      n ? "; " : "", be->ops->name, why);
		n = GDX_MIN(n, sizeof(f->chosen_why));
	}
	if (!f->be) {
		GDX_ERR("file", "no storage backend accepted the file (%s)", f->chosen_why);
		if (ret >= 0)
			ret = -ENODEV;
		goto fail;
	}
	if (!n)
		snprintf(f->chosen_why, sizeof(f->chosen_why), "%s: first choice", f->be->ops->name);
	if (f->be == &drv->be[GDX_FILE_BE_CUFILE]) {
		/* cuFile takes device memory only; host memory needs a second backend. */
		for (int i = GDX_FILE_BE_CUFILE + 1; i < GDX_FILE_BE_COUNT && !f->fb; i++) {
			struct gdx_file_be *be = &drv->be[i];
			char why[160];

			if (be->priv && !be->ops->open(be->priv, f, &f->fb_priv, why, sizeof(why)))
				f->fb = be;
		}
		if (!f->fb) {
			GDX_ERR("file", "no backend for host-memory I/O beside cufile");
			f->be->ops->close(f->be->priv, f, f->fpriv);
			ret = -ENODEV;
			goto fail;
		}
	}
	GDX_DBG("file", "handle %llu on %s (%s)", (unsigned long long)f->id, f->be->ops->name,
		f->chosen_why);
	atomic_fetch_add(&drv->handles, 1);
	*out = f;
	return 0;
fail:
	if (f->buffered_fd >= 0 && f->buffered_fd != fd)
		close(f->buffered_fd);
	pthread_mutex_destroy(&f->info_lock);
	free(f);
	return ret;
}

GDX_API int gdx_file_open(struct gdx_file_driver *drv, const char *path,
			  const struct gdx_file_opts *o, struct gdx_file **out)
{
	struct gdx_file_opts opts;
	int fd, ret;

	if (!drv || !path || !out)
		return -EINVAL;
	*out = NULL;
	ret = opts_get(o, &opts);
	if (ret)
		return ret;
	fd = open(path, opts.oflags | O_CLOEXEC, opts.mode);
	if (fd < 0) {
		ret = -errno;
		GDX_DBG("file", "open %s: %s", path, strerror(-ret));
		return ret;
	}
	ret = handle_new(drv, fd, true, &opts, out);
	if (ret)
		close(fd);
	return ret;
}

GDX_API int gdx_file_open_fd(struct gdx_file_driver *drv, int fd, const struct gdx_file_opts *o,
			     struct gdx_file **out)
{
	struct gdx_file_opts opts;
	int ret;

	if (!drv || fd < 0 || !out)
		return !drv || !out ? -EINVAL : -EBADF;
	*out = NULL;
	ret = opts_get(o, &opts);
	if (ret)
		return ret;
	return handle_new(drv, fd, false, &opts, out);
}

GDX_API int gdx_file_close(struct gdx_file *f)
{
	int ret = 0;

	if (!f)
		return 0;
	gdx_file_ahead_forget(f);
	f->be->ops->close(f->be->priv, f, f->fpriv);
	if (f->fb)
		f->fb->ops->close(f->fb->priv, f, f->fb_priv);
	if (f->buffered_fd >= 0 && f->buffered_fd != f->fd)
		close(f->buffered_fd);
	if (f->own_fd && close(f->fd))
		ret = -errno;
	atomic_fetch_sub(&f->drv->handles, 1);
	pthread_mutex_destroy(&f->info_lock);
	free(f);
	return ret;
}

GDX_API const char *gdx_file_backend_name(const struct gdx_file *f)
{
	return f ? f->be->ops->name : "none";
}

GDX_API int64_t gdx_file_size(struct gdx_file *f)
{
	struct stat st;

	if (!f)
		return -EINVAL;
	if (fstat(f->fd, &st))
		return -errno;
	return st.st_size;
}

GDX_API int gdx_file_info(struct gdx_file *f, struct gdx_file_io_info *info)
{
	if (!f || !info)
		return -EINVAL;
	pthread_mutex_lock(&f->info_lock);
	*info = f->last;
	memcpy(info->bytes, f->bytes, sizeof(info->bytes));
	if (!f->any_io)
		snprintf(info->why, sizeof(info->why), "%s", f->chosen_why);
	pthread_mutex_unlock(&f->info_lock);
	return 0;
}

GDX_API int gdx_file_sync(struct gdx_file *f)
{
	if (!f)
		return -EINVAL;
	return fdatasync(f->fd) ? -errno : 0;
}

/* ---- synchronous I/O ---------------------------------------------------- */

/* Fills io from the caller's arguments; checks what can be checked up front. */
int gdx_file_io_prep(struct gdx_file *f, enum gdx_file_op op, const void *buf, size_t size,
		     off_t off, struct gdx_file_io *io)
{
	struct gdx_reg *r;
	int ret;

	memset(io, 0, sizeof(*io));
	io->file = f;
	io->op = op;
	io->buf = (void *)buf;
	io->size = size;
	io->off = off;
	io->strict = f->flags & GDX_FILE_REQUIRE_DIRECT;
	if (off < 0 || (size && !buf))
		return -EINVAL;
	if (size > (size_t)SSIZE_MAX || (uint64_t)off + size > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (op == GDX_FILE_READ && f->accmode == O_WRONLY)
		return -EBADF;
	if (op == GDX_FILE_WRITE && f->accmode == O_RDONLY)
		return -EBADF;
	if (op == GDX_FILE_WRITE)
		gdx_file_ahead_drop(f, true);
	if (!size)
		return 0;
	if (!gdx_regcache_lookup(f->drv->regs, buf, size, &r)) {
		io->attrs.kind = r->kind;
		io->attrs.device_ordinal = r->device_ordinal;
		io->attrs.buffer_id = r->buffer_id;
		io->attrs.base = (void *)r->start;
		io->attrs.size = r->len;
		gdx_regcache_put(f->drv->regs, r);
		return 0;
	}
	ret = gdx_pointer_query(f->drv->dev, buf, &io->attrs);
	if (ret)
		return ret;
	if (io->attrs.kind == GDX_MEM_DEVICE) {
		if (io->attrs.device_ordinal != gdx_device_ordinal(f->drv->dev))
			return GDX_EBADPTR;
		if ((uintptr_t)buf + size > (uintptr_t)io->attrs.base + io->attrs.size)
			return GDX_EBADPTR;
	}
	return 0;
}

void gdx_file_io_record(struct gdx_file *f, struct gdx_file_io *io)
{
	gdx_file_info_finish(&io->info);
	if (io->attrs.kind == GDX_MEM_DEVICE && io->info.path != GDX_FILE_PATH_DIRECT &&
	    f->be != &f->drv->be[GDX_FILE_BE_CUFILE]) {
		size_t n = strlen(io->info.why);

		/* Why not direct: the backends passed over for this handle. */
		snprintf(io->info.why + n, sizeof(io->info.why) - n, " [not direct: %s]",
			 f->chosen_why);
	}
	gdx_counter_add(&f->drv->ctr[io->op == GDX_FILE_READ ? GDX_FILE_CTR_READS :
				     GDX_FILE_CTR_WRITES], 1);
	if (io->result < 0)
		gdx_counter_add(&f->drv->ctr[io->result == GDX_ENOTDIRECT ? GDX_FILE_CTR_NOTDIRECT :
					     GDX_FILE_CTR_ERRORS], 1);
	for (int p = 1; p < GDX_FILE_PATH_COUNT; p++)
		gdx_counter_add(&f->drv->ctr[GDX_FILE_CTR_BYTES + p - 1], io->info.bytes[p]);
	pthread_mutex_lock(&f->info_lock);
	f->last = io->info;
	for (int p = 0; p < GDX_FILE_PATH_COUNT; p++)
		f->bytes[p] += io->info.bytes[p];
	f->any_io = true;
	pthread_mutex_unlock(&f->info_lock);
}

/* Runs io on the handle's backend (host memory beside cufile: its fallback). */
ssize_t gdx_file_io_exec(struct gdx_file *f, struct gdx_file_io *io)
{
	struct gdx_file_be *px = &f->drv->be[GDX_FILE_BE_POSIX];
	struct gdx_file_be *be = f->be, *next;
	char why[sizeof(io->info.why)];
	void *next_priv;
	ssize_t ret;

	if (f->fb && io->attrs.kind != GDX_MEM_DEVICE)
		return f->fb->ops->io(f->fb->priv, f, f->fb_priv, io);
	ret = be->ops->io(be->priv, f, f->fpriv, io);
	/*
	 * A backend that failed before moving a byte (cuFile refusing the I/O, no
	 * memory to pin for uring) hands it to the next one: cufile's companion,
	 * else posix, which needs nothing per handle.  Strict mode keeps the error.
	 */
	if (ret >= 0 || !io->untouched || io->strict)
		return ret;
	next = f->fb ? f->fb : px;
	next_priv = f->fb ? f->fb_priv : NULL;
	if (next == be || !next->priv)
		return ret;
	memcpy(why, io->info.why, sizeof(why));
	io->untouched = false;
	ret = next->ops->io(next->priv, f, next_priv, io);
	if (ret >= 0) {
		size_t n = strlen(io->info.why);

		snprintf(io->info.why + n, sizeof(io->info.why) - n, " (%s)", why);
	}
	return ret;
}

static ssize_t io_run(struct gdx_file *f, struct gdx_file_io *io)
{
	ssize_t ret = io->result = gdx_file_io_exec(f, io);

	if (ret == GDX_ENOTDIRECT)
		GDX_ERR("file", "strict mode: %s", io->info.why);
	gdx_file_io_record(f, io);
	return ret;
}

static ssize_t rw(struct gdx_file *f, enum gdx_file_op op, const void *buf, size_t size,
		  off_t off, struct gdx_file_io_info *info)
{
	struct gdx_file_io io;
	ssize_t ret;

	if (!f)
		return -EINVAL;
	ret = gdx_file_io_prep(f, op, buf, size, off, &io);
	if (!ret && size)
		ret = io_run(f, &io);
	if (info) {
		gdx_file_info_finish(&io.info);
		*info = io.info;
	}
	return ret;
}

GDX_API ssize_t gdx_file_read(struct gdx_file *f, void *buf, size_t size, off_t off)
{
	return rw(f, GDX_FILE_READ, buf, size, off, NULL);
}

GDX_API ssize_t gdx_file_write(struct gdx_file *f, const void *buf, size_t size, off_t off)
{
	return rw(f, GDX_FILE_WRITE, buf, size, off, NULL);
}

GDX_API ssize_t gdx_file_read_ex(struct gdx_file *f, void *buf, size_t size, off_t off,
				 struct gdx_file_io_info *info)
{
	return rw(f, GDX_FILE_READ, buf, size, off, info);
}

GDX_API ssize_t gdx_file_write_ex(struct gdx_file *f, const void *buf, size_t size, off_t off,
				  struct gdx_file_io_info *info)
{
	return rw(f, GDX_FILE_WRITE, buf, size, off, info);
}
