/* SPDX-License-Identifier: MIT */
/*
 * The gdx_file_* front end: drivers, handles, backend choice, argument checks,
 * memory kinds, strict mode and the path record.  Backends (cufile, uring,
 * posix) only move bytes; batch and stream-ordered I/O are built here on top
 * of them and the driver's worker threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/ahead.h"
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
			"engine_active_sum", "preads", "pread_ns",
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

static void stages_free(struct gdx_file_driver *drv);

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
	stages_free(drv);
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

static void wq_start(struct gdx_file_driver *drv);
static void ahead_forget(struct gdx_file *f);
static void ahead_drop(struct gdx_file *f, bool any_handle);
static __thread struct gdx_file_driver *wq_starting;

static void wq_start_once(void)
{
	struct gdx_file_driver *drv = wq_starting;

	drv->wq_err = gdx_tpool_create((unsigned)gdx_cfg_int("file.workers"), "gdx-file",
					 &drv->wq);
	if (!drv->wq_err)
		gdx_tpool_set_spin(drv->wq, (unsigned)gdx_cfg_int("file.spin_us"), 2);
}

static void wq_start(struct gdx_file_driver *drv)
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
	ahead_forget(f);
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
static int io_prep(struct gdx_file *f, enum gdx_file_op op, const void *buf, size_t size,
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
		ahead_drop(f, true);
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

static void io_record(struct gdx_file *f, struct gdx_file_io *io)
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
static ssize_t io_exec(struct gdx_file *f, struct gdx_file_io *io)
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
	ssize_t ret = io->result = io_exec(f, io);

	if (ret == GDX_ENOTDIRECT)
		GDX_ERR("file", "strict mode: %s", io->info.why);
	io_record(f, io);
	return ret;
}

static ssize_t rw(struct gdx_file *f, enum gdx_file_op op, const void *buf, size_t size,
		  off_t off, struct gdx_file_io_info *info)
{
	struct gdx_file_io io;
	ssize_t ret;

	if (!f)
		return -EINVAL;
	ret = io_prep(f, op, buf, size, off, &io);
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

/* ---- batch ------------------------------------------------------------- */

/*
 * I/Os on a backend with io_many (uring) queue up for one runner per backend
 * and batch, which keeps a single engine busy for as long as I/Os keep coming,
 * so the batch's depth is what is in flight.  Other backends run each I/O as
 * a job on the driver's workers.
 */
struct batch_queue {
	struct gdx_file_io **q;		/* ring of max entries */
	unsigned head, count;
	bool running;
};

struct gdx_file_batch {
	struct gdx_file_driver *drv;
	unsigned max;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned outstanding;		/* submitted, not yet reaped */
	struct gdx_file_batch_event *cq;	/* completed, ring of max entries */
	unsigned cq_head, cq_count;
	unsigned runners;		/* jobs that still touch the batch */
	struct batch_queue bq[GDX_FILE_BE_COUNT];
};

struct batch_runner {
	struct gdx_file_batch *b;
	int be;
};

static void batch_complete(struct gdx_file_io *io, struct gdx_file_batch *b)
{
	struct gdx_file_batch_event *ev;

	if (io->file)
		io_record(io->file, io);
	else
		gdx_file_info_finish(&io->info);
	pthread_mutex_lock(&b->lock);
	ev = &b->cq[(b->cq_head + b->cq_count) % b->max];
	b->cq_count++;
	ev->cookie = io->cookie;
	ev->result = io->result;
	ev->info = io->info;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	free(io);
}

static void runner_done(struct gdx_file_io *io, void *arg)
{
	batch_complete(io, ((struct batch_runner *)arg)->b);
}

static unsigned runner_more(void *arg, struct gdx_file_io **ios, unsigned max)
{
	struct batch_runner *rn = arg;
	struct batch_queue *q = &rn->b->bq[rn->be];
	unsigned n = 0;

	pthread_mutex_lock(&rn->b->lock);
	while (n < max && q->count) {
		ios[n++] = q->q[q->head];
		q->head = (q->head + 1) % rn->b->max;
		q->count--;
	}
	pthread_mutex_unlock(&rn->b->lock);
	return n;
}

static void runner_job(void *arg)
{
	struct batch_runner *rn = arg;
	struct gdx_file_batch *b = rn->b;
	struct gdx_file_be *be = &b->drv->be[rn->be];
	bool again;

	do {
		be->ops->io_many(be->priv, runner_more, runner_done, rn);
		pthread_mutex_lock(&b->lock);
		/* Whatever arrived after the engine's last look is still ours. */
		again = b->bq[rn->be].count > 0;
		if (!again) {
			b->bq[rn->be].running = false;
			b->runners--;
			pthread_cond_broadcast(&b->cond);
		}
		pthread_mutex_unlock(&b->lock);
	} while (again);
	free(rn);
}

static void single_job(void *arg)
{
	struct gdx_file_io *io = arg;
	struct gdx_file_batch *b = io->owner;

	io->result = io_exec(io->file, io);
	batch_complete(io, b);
	pthread_mutex_lock(&b->lock);
	b->runners--;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

GDX_API int gdx_file_batch_create(struct gdx_file_driver *drv, unsigned max_ios,
				  struct gdx_file_batch **out)
{
	struct gdx_file_batch *b;

	if (!drv || !out || !max_ios || max_ios > 65536)
		return -EINVAL;
	wq_start(drv);
	if (drv->wq_err)
		return drv->wq_err;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cq = calloc(max_ios, sizeof(*b->cq));
	for (int i = 0; i < GDX_FILE_BE_COUNT && b->cq; i++) {
		b->bq[i].q = calloc(max_ios, sizeof(*b->bq[i].q));
		if (!b->bq[i].q) {
			free(b->cq);
			b->cq = NULL;
		}
	}
	if (!b->cq) {
		for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
			free(b->bq[i].q);
		free(b);
		return -ENOMEM;
	}
	b->drv = drv;
	b->max = max_ios;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	*out = b;
	return 0;
}

GDX_API void gdx_file_batch_destroy(struct gdx_file_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	while (b->cq_count < b->outstanding || b->runners)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	for (int i = 0; i < GDX_FILE_BE_COUNT; i++)
		free(b->bq[i].q);
	free(b->cq);
	free(b);
}

/* Hands one prepared I/O to its backend's runner, or to a worker of its own. */
static int batch_queue_io(struct gdx_file_batch *b, struct gdx_file_io *io)
{
	struct gdx_file *f = io->file;
	struct gdx_file_be *be = f->fb && io->attrs.kind != GDX_MEM_DEVICE ? f->fb : f->be;
	int idx = (int)(be - b->drv->be), ret = 0;
	struct batch_queue *q = &b->bq[idx];
	struct batch_runner *rn = NULL;

	if (!be->ops->io_many) {
		io->owner = b;
		pthread_mutex_lock(&b->lock);
		b->runners++;
		pthread_mutex_unlock(&b->lock);
		ret = gdx_tpool_submit(b->drv->wq, single_job, io);
		if (ret) {
			pthread_mutex_lock(&b->lock);
			b->runners--;
			pthread_mutex_unlock(&b->lock);
		}
		return ret;
	}
	pthread_mutex_lock(&b->lock);
	q->q[(q->head + q->count) % b->max] = io;
	q->count++;
	if (!q->running) {
		rn = malloc(sizeof(*rn));
		if (rn) {
			rn->b = b;
			rn->be = idx;
			q->running = true;
			b->runners++;
		} else {
			q->count--;
			ret = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&b->lock);
	if (rn && (ret = gdx_tpool_submit(b->drv->wq, runner_job, rn))) {
		pthread_mutex_lock(&b->lock);
		q->running = false;
		b->runners--;
		/* Fails every I/O queued so far that no runner will take. */
		while (q->count) {
			struct gdx_file_io *x = q->q[q->head];

			q->head = (q->head + 1) % b->max;
			q->count--;
			if (x != io) {
				pthread_mutex_unlock(&b->lock);
				x->result = ret;
				batch_complete(x, b);
				pthread_mutex_lock(&b->lock);
			}
		}
		pthread_mutex_unlock(&b->lock);
		free(rn);
	}
	return ret;
}

GDX_API int gdx_file_batch_submit(struct gdx_file_batch *b, const struct gdx_file_batch_io *ios,
				  unsigned n)
{
	if (!b || (!ios && n))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (!ios[i].file || ios[i].file->drv != b->drv ||
		    (ios[i].op != GDX_FILE_READ && ios[i].op != GDX_FILE_WRITE))
			return -EINVAL;
	pthread_mutex_lock(&b->lock);
	if (b->outstanding + n > b->max) {
		pthread_mutex_unlock(&b->lock);
		return -EAGAIN;
	}
	b->outstanding += n;
	pthread_mutex_unlock(&b->lock);
	for (unsigned i = 0; i < n; i++) {
		struct gdx_file_io *io = malloc(sizeof(*io));
		int ret;

		if (!io) {
			/* Still completes, with its error, like any failed I/O. */
			pthread_mutex_lock(&b->lock);
			b->cq[(b->cq_head + b->cq_count) % b->max] = (struct gdx_file_batch_event){
				.cookie = ios[i].cookie, .result = -ENOMEM };
			b->cq_count++;
			pthread_cond_broadcast(&b->cond);
			pthread_mutex_unlock(&b->lock);
			continue;
		}
		ret = io_prep(ios[i].file, ios[i].op, ios[i].buf, ios[i].size, ios[i].off, io);
		io->cookie = ios[i].cookie;
		if (!ret && ios[i].size)
			ret = batch_queue_io(b, io);
		if (ret || !ios[i].size) {
			/* Fails (or finishes) at once, but still through the completion queue. */
			io->result = ret;
			batch_complete(io, b);
		}
	}
	return 0;
}

GDX_API int gdx_file_batch_wait(struct gdx_file_batch *b, unsigned min_nr,
				struct gdx_file_batch_event *ev, unsigned max, int timeout_ms)
{
	struct timespec deadline;
	bool timed_out = false;
	unsigned got = 0;

	if (!b || (!ev && max) || min_nr > max)
		return -EINVAL;
	if (timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&b->lock);
	if (min_nr > b->outstanding) {
		pthread_mutex_unlock(&b->lock);
		return -EINVAL;
	}
	for (;;) {
		while (got < max && b->cq_count) {
			ev[got++] = b->cq[b->cq_head];
			b->cq_head = (b->cq_head + 1) % b->max;
			b->cq_count--;
			b->outstanding--;
		}
		if (got >= min_nr || timeout_ms == 0 || timed_out)
			break;
		if (timeout_ms < 0)
			pthread_cond_wait(&b->cond, &b->lock);
		else if (pthread_cond_timedwait(&b->cond, &b->lock, &deadline) == ETIMEDOUT)
			timed_out = true;
	}
	pthread_mutex_unlock(&b->lock);
	return (int)got;
}

/* ---- stream-ordered I/O ------------------------------------------------ */

#define GATE_COUNT 1024u	/* stream-ordered I/Os in flight per driver */

/*
 * Pinned staging for device buffers.  A read's staging is free again once the
 * event recorded after the stream's copy out of it has completed, which the
 * next submission asks on its own thread: nothing on the stream after the
 * copy has to run on the host.
 */
struct async_stage {
	struct async_stage *next;
	struct gdx_file_driver *drv;
	struct gdx_event *ev;		/* recorded after the stream's copy out of it */
	bool busy;			/* held by an I/O */
	bool copying;			/* ev recorded, not yet seen complete */
	size_t cap;
	void *p;
};

struct async_op {
	struct gdx_file *f;
	enum gdx_file_op op;
	void *buf;			/* the caller's, or the staging */
	size_t max;			/* *size at submission */
	const size_t *size;
	const off_t *off;
	ssize_t *done;
	struct async_stage *wstage;	/* a write's staging, freed by the worker */
	bool early;			/* size and offset taken at submission */
	size_t n;
	off_t o;
	struct async_ahead *ahead;	/* a read ahead: the result goes there */
	enum gdx_mem_kind kind;		/* of buf, known at submission */
	unsigned gate;
	uint32_t gate_value;
};

/*
 * A read started ahead of its stream-ordered read (gdx_file_read_ahead): an
 * early read of the same range on the same handle claims it, and its stream
 * only waits for the gate and copies the staging.  On the driver's list until
 * claimed; dropped when the handle writes (stale) or closes.
 */
#define AHEAD_MAX 16u

struct async_ahead {
	struct async_ahead *next;
	struct gdx_file *f;
	off_t off;
	size_t len;
	struct async_stage *st;
	unsigned gate;
	uint32_t gate_value;
	ssize_t result;
	ssize_t *done;		/* the claimant's, when claimed before the read finished */
	bool finished, claimed, stale;
};

/* Driver close: the caller has synchronized its streams, no stage is in use. */
static void stages_free(struct gdx_file_driver *drv)
{
	struct async_stage *st;

	while ((st = drv->stages)) {
		drv->stages = st->next;
		gdx_event_destroy(st->ev);
		gdx_pinned_free(drv->dev, st->p);
		free(st);
	}
}

/*
 * Smallest idle stage that holds n bytes, else a new one.  On the caller's
 * thread, which may ask the device whether a stage's copy has completed.
 */
static int stage_get(struct gdx_file_driver *drv, size_t n, struct async_stage **out)
{
	struct async_stage *st, *best = NULL;
	int ret;

	pthread_mutex_lock(&drv->gate_lock);
	for (st = drv->stages; st; st = st->next) {
		if (st->busy || st->cap < n || (best && st->cap >= best->cap))
			continue;
		/* A failed query means the stream failed: nothing reads the stage any more. */
		if (st->copying && gdx_event_query(st->ev) == -EBUSY)
			continue;
		st->copying = false;
		best = st;
	}
	if (best) {
		best->busy = true;
		pthread_mutex_unlock(&drv->gate_lock);
		*out = best;
		return 0;
	}
	pthread_mutex_unlock(&drv->gate_lock);
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->drv = drv;
	st->cap = (n + 65535) & ~(size_t)65535;
	ret = gdx_event_create(drv->dev, 0, &st->ev);
	if (!ret) {
		ret = gdx_pinned_alloc(drv->dev, st->cap, &st->p);
		if (ret)
			gdx_event_destroy(st->ev);
	}
	if (ret) {
		free(st);
		return ret;
	}
	st->busy = true;
	pthread_mutex_lock(&drv->gate_lock);
	st->next = drv->stages;
	drv->stages = st;
	pthread_mutex_unlock(&drv->gate_lock);
	*out = st;
	return 0;
}

/* Plain CPU work: safe on a worker. */
static void stage_put(struct async_stage *st)
{
	struct gdx_file_driver *drv = st->drv;

	pthread_mutex_lock(&drv->gate_lock);
	st->busy = false;
	pthread_mutex_unlock(&drv->gate_lock);
}

/*
 * A read's stage is free once the stream's copy out of it is done.  If the
 * event cannot be recorded the stage stays busy until the driver closes: a
 * worker may still write it, the stream may still read it.  The stage goes to
 * the end of the list, so the list holds pending copies oldest first and
 * stage_get's first query is about the copy most likely done: each query is a
 * call into the driver on the submitting thread.
 */
static int stage_put_after(struct async_stage *st, struct gdx_stream *s)
{
	struct gdx_file_driver *drv = st->drv;
	struct async_stage **pp = &drv->stages;
	int ret = gdx_event_record(st->ev, s);

	if (ret)
		return ret;
	pthread_mutex_lock(&drv->gate_lock);
	st->copying = true;
	st->busy = false;
	while (*pp != st)
		pp = &(*pp)->next;
	*pp = st->next;
	while (*pp)
		pp = &(*pp)->next;
	*pp = st;
	st->next = NULL;
	pthread_mutex_unlock(&drv->gate_lock);
	return 0;
}

static int gates_ready(struct gdx_file_driver *drv)
{
	int ret = 0;

	pthread_mutex_lock(&drv->gate_lock);
	if (!drv->gates) {
		ret = gdx_pinned_alloc(drv->dev, GATE_COUNT * sizeof(uint32_t), (void **)&drv->gates);
		drv->gate_free = ret ? NULL : calloc(GATE_COUNT, sizeof(unsigned));
		if (!ret && !drv->gate_free) {
			gdx_pinned_free(drv->dev, drv->gates);
			ret = -ENOMEM;
		}
		if (ret) {
			drv->gates = NULL;
		} else {
			for (unsigned i = 0; i < GATE_COUNT; i++) {
				drv->gates[i] = 0;
				drv->gate_free[i] = GATE_COUNT - 1 - i;
			}
			drv->ngate_free = GATE_COUNT;
		}
	}
	pthread_mutex_unlock(&drv->gate_lock);
	return ret;
}

/* The worker pool and the gate table that every stream-ordered call needs. */
static int async_ready(struct gdx_file_driver *drv)
{
	wq_start(drv);
	return drv->wq_err ? drv->wq_err : gates_ready(drv);
}

/* Takes a free gate; a full table waits for a worker to give one back. */
static unsigned gate_get(struct gdx_file_driver *drv)
{
	unsigned g;

	pthread_mutex_lock(&drv->gate_lock);
	while (!drv->ngate_free)
		pthread_cond_wait(&drv->gate_cond, &drv->gate_lock);
	g = drv->gate_free[--drv->ngate_free];
	pthread_mutex_unlock(&drv->gate_lock);
	return g;
}

/* Releases the waiting stream, then returns the gate: its word only grows. */
static void gate_open(struct gdx_file_driver *drv, unsigned g, uint32_t value)
{
	__atomic_store_n(&drv->gates[g], value, __ATOMIC_RELEASE);
	pthread_mutex_lock(&drv->gate_lock);
	drv->gate_free[drv->ngate_free++] = g;
	pthread_cond_signal(&drv->gate_cond);
	pthread_mutex_unlock(&drv->gate_lock);
}

/*
 * The I/O is over (done or failed): what the worker or the host function owned
 * goes back.  drv is passed in: once an early read's *done is stored its caller
 * may close the handle, so a->f must not be read here for reads.
 */
static void async_finish(struct async_op *a, struct gdx_file_driver *drv)
{
	if (a->wstage)
		stage_put(a->wstage);
	if (a->op == GDX_FILE_WRITE)
		atomic_fetch_sub(&drv->writes_pending[a->f->wbucket], 1);
	gate_open(drv, a->gate, a->gate_value);
	free(a);
}

/* Caller holds gate_lock. */
static void ahead_unlink(struct gdx_file_driver *drv, struct async_ahead *e)
{
	struct async_ahead **pp = &drv->ahead;

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	__atomic_store_n(&drv->nahead, drv->nahead - 1, __ATOMIC_RELAXED);
}

/* On the worker, before the gate opens: the claimant's *done, or the entry waits. */
static void ahead_finish(struct gdx_file_driver *drv, struct async_ahead *e, ssize_t ret)
{
	bool gone = false;

	pthread_mutex_lock(&drv->gate_lock);
	e->result = ret;
	e->finished = true;
	if (e->claimed) {
		__atomic_store_n(e->done, ret, __ATOMIC_RELEASE);
		gone = true;
	} else if (e->stale) {
		ahead_unlink(drv, e);
		e->st->busy = false;
		gone = true;
	}
	pthread_cond_broadcast(&drv->ahead_cond);
	pthread_mutex_unlock(&drv->gate_lock);
	if (gone)
		free(e);
}

/*
 * What was read ahead of f may be old.  any_handle: a write to the file, which
 * makes old what any handle of it read ahead (same wbucket; a collision only
 * costs a read ahead); else f's own, as it closes.
 */
static void ahead_drop(struct gdx_file *f, bool any_handle)
{
	struct gdx_file_driver *drv = f->drv;
	struct async_ahead *e, *next, *dead = NULL;

	if (!__atomic_load_n(&drv->nahead, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e; e = next) {
		next = e->next;
		if (any_handle ? e->f->wbucket != f->wbucket : e->f != f)
			continue;
		e->stale = true;
		if (e->finished) {
			ahead_unlink(drv, e);
			e->st->busy = false;
			e->next = dead;
			dead = e;
		}
	}
	pthread_mutex_unlock(&drv->gate_lock);
	for (; dead; dead = next) {
		next = dead->next;
		free(dead);
	}
}

/* Handle close: waits for the handle's reads ahead, then drops them. */
static void ahead_forget(struct gdx_file *f)
{
	struct gdx_file_driver *drv = f->drv;

	for (;;) {
		bool pending = false;

		ahead_drop(f, false);
		pthread_mutex_lock(&drv->gate_lock);
		for (struct async_ahead *e = drv->ahead; e; e = e->next)
			pending |= e->f == f;
		if (pending)
			pthread_cond_wait(&drv->ahead_cond, &drv->gate_lock);
		pthread_mutex_unlock(&drv->gate_lock);
		if (!pending)
			return;
	}
}

/*
 * Takes the read ahead of [off, off + len) on f, if there is one: its stage
 * and gate become the caller's, and *done is written now or by the worker.
 */
static bool ahead_claim(struct gdx_file *f, off_t off, size_t len, ssize_t *done,
			struct async_stage **st, unsigned *gate, uint32_t *value)
{
	struct gdx_file_driver *drv = f->drv;
	struct async_ahead *e;
	bool finished = false;

	if (!__atomic_load_n(&drv->nahead, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e; e = e->next)
		if (e->f == f && e->off == off && e->len == len && !e->stale)
			break;
	if (e) {
		ahead_unlink(drv, e);
		finished = e->finished;
		e->claimed = true;
		e->done = done;
		*st = e->st;
		*gate = e->gate;
		*value = e->gate_value;
		if (finished)
			__atomic_store_n(done, e->result, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&drv->gate_lock);
	if (finished)
		free(e);
	if (e) {
		pthread_mutex_lock(&f->info_lock);
		f->astats.early++;
		f->astats.ahead_hits++;
		f->astats.ahead_late += !finished;
		pthread_mutex_unlock(&f->info_lock);
	}
	return e != NULL;
}

/* A stream-ordered read starts on a worker: counted in flight, then the test hook. */
static uint64_t read_begin(struct gdx_file *f)
{
	struct gdx_file_async_stats *st = &f->astats;
	uint64_t now = gdx_now_ns();
	void (*hook)(void *) = f->drv->read_hook;

	pthread_mutex_lock(&f->info_lock);
	f->aqueued--;
	if (!f->ainflight++)
		f->abusy_since = now;
	st->max_inflight = GDX_MAX(st->max_inflight, f->ainflight);
	pthread_mutex_unlock(&f->info_lock);
	if (hook)
		hook(f->drv->read_hook_arg);
	return now;
}

static void read_end(struct gdx_file *f, uint64_t t0)
{
	struct gdx_file_async_stats *st = &f->astats;
	uint64_t now = gdx_now_ns();

	pthread_mutex_lock(&f->info_lock);
	st->reads++;
	st->read_ns += now - t0;
	st->max_read_ns = GDX_MAX(st->max_read_ns, now - t0);
	if (!--f->ainflight)
		st->busy_ns += now - f->abusy_since;
	pthread_mutex_unlock(&f->info_lock);
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

GDX_API int gdx_file_async_stats(struct gdx_file *f, struct gdx_file_async_stats *st,
				 unsigned flags)
{
	struct gdx_file_async_stats cur;
	uint64_t now = gdx_now_ns();

	if (!f || !st || st->struct_size < sizeof(size_t) || (flags & ~GDX_FILE_STATS_RESET))
		return -EINVAL;
	pthread_mutex_lock(&f->info_lock);
	cur = f->astats;
	cur.inflight = f->ainflight;
	cur.queued = f->aqueued;
	if (f->ainflight)	/* the busy time so far, as if the reads in flight ended now */
		cur.busy_ns += now - f->abusy_since;
	if (flags & GDX_FILE_STATS_RESET) {
		memset(&f->astats, 0, sizeof(f->astats));
		f->astats.max_inflight = f->ainflight;
		f->abusy_since = now;
	}
	pthread_mutex_unlock(&f->info_lock);
	cur.struct_size = GDX_MIN(st->struct_size, sizeof(cur));
	memcpy(st, &cur, cur.struct_size);
	return 0;
}

void gdx_file_set_read_hook(struct gdx_file_driver *drv, void (*fn)(void *arg), void *arg)
{
	drv->read_hook_arg = arg;
	drv->read_hook = fn;
}

/*
 * A stream-ordered I/O on a file worker, always into or out of host memory
 * (pinned staging, or the caller's host buffer).  A stream may already be
 * stopped on the I/O's gate, and a call into the device driver here can wait
 * for that stream: CUDA synchronizes the context inside calls such as the
 * first launch of a kernel (lazy module loading), holding the driver's lock,
 * and cuMemHostRegister, cuStreamCreate or a pointer query on the worker then
 * waits for the lock while the context waits for the gate (on the H200 the
 * uring backend setting up an I/O context for a worker's first read did this,
 * and the pipeline hung at its first batch).  So the worker calls nothing of
 * the device: not the pointer query (the submitting thread knew the kind), not
 * the backends (they set up pinned bounce buffers, streams and events on first
 * use), only pread/pwrite on the handle's descriptor, or on its buffered
 * twin where that one has O_DIRECT.  Should the twin be missing, aligned I/O
 * goes O_DIRECT on the descriptor itself.
 */
static ssize_t rw_gated(struct gdx_file *f, enum gdx_file_op op, void *buf, size_t size,
			off_t off, enum gdx_mem_kind kind)
{
	bool rd = op == GDX_FILE_READ, dio = gdx_file_no_twin(f);
	int fd = dio ? f->fd : f->buffered_fd;
	char twin[128] = "";
	struct gdx_file_io io;
	size_t done = 0;
	ssize_t ret = 0;

	if (off < 0 || (size && !buf) || size > (size_t)SSIZE_MAX ||
	    (uint64_t)off + size > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (rd ? f->accmode == O_WRONLY : f->accmode == O_RDONLY)
		return -EBADF;
	if (!rd)
		ahead_drop(f, true);
	memset(&io, 0, sizeof(io));
	io.file = f;
	io.op = op;
	io.buf = buf;
	io.size = size;
	io.off = off;
	io.attrs.kind = kind;
	io.attrs.device_ordinal = -1;
	if (dio && !gdx_file_dio_aligned(buf, off, size)) {
		io.result = gdx_file_twin_refuse(f, &io.info, rd ? "stream-ordered read" :
						 "stream-ordered write");
		GDX_ERR("file", "%s", io.info.why);
		io_record(f, &io);
		return io.result;
	}
	while (done < size) {
		char *p = (char *)buf + done;
		ssize_t n = rd ? pread(fd, p, size - done, off + (off_t)done) :
				 pwrite(fd, p, size - done, off + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : rd ? 0 : -EIO;
			break;
		}
		done += (size_t)n;
		/* A short O_DIRECT read that stops off the alignment is end of file. */
		if (dio && rd && !GDX_IS_ALIGNED(done, (size_t)GDX_FILE_DIO_ALIGN))
			break;
	}
	io.result = ret ? ret : (ssize_t)done;
	io.info.bytes[GDX_FILE_PATH_HOST] = done;
	if (dio)
		snprintf(twin, sizeof(twin), ", O_DIRECT on the descriptor itself (its second "
			 "open without O_DIRECT failed: %s)", strerror(-f->buffered_fd));
	else if (fd != f->fd)
		snprintf(twin, sizeof(twin), " through a second open without O_DIRECT");
	gdx_file_why(&io.info, "stream-ordered %s on a file worker%s, %s memory (no device call "
		     "before the stream's gate opens)", rd ? "pread" : "pwrite", twin,
		     gdx_mem_kind_name(kind));
	io_record(f, &io);
	return io.result;
}

/*
 * The worker touches only host memory (the caller's, or pinned staging): the
 * stream's copies to and from device memory are its own, enqueued at
 * submission, so nothing the gate releases depends on another stream, nor,
 * through rw_gated, on the device.
 */
static void async_job(void *arg)
{
	struct async_op *a = arg;
	struct gdx_file_driver *drv = a->f->drv;
	size_t n = a->early ? a->n : *a->size;
	off_t off = a->early ? a->o : *a->off;
	bool rd = a->op == GDX_FILE_READ;
	uint64_t t0 = rd ? read_begin(a->f) : 0;
	ssize_t ret = n > a->max ? -EINVAL : rw_gated(a->f, a->op, a->buf, n, off, a->kind);

	if (rd)
		read_end(a->f, t0);
	if (a->ahead)
		ahead_finish(drv, a->ahead, ret);
	else	/* an early read's caller may look at *done before its stream gets there */
		__atomic_store_n(a->done, ret, __ATOMIC_RELEASE);
	async_finish(a, drv);
}

/* Hands a to a worker; a read counts as queued until a worker starts it. */
static int async_submit(struct async_op *a)
{
	struct gdx_file *f = a->f;
	bool rd = a->op == GDX_FILE_READ;
	int ret;

	if (rd) {
		pthread_mutex_lock(&f->info_lock);
		f->aqueued++;
		pthread_mutex_unlock(&f->info_lock);
	}
	ret = gdx_tpool_submit(f->drv->wq, async_job, a);
	if (ret && rd) {
		pthread_mutex_lock(&f->info_lock);
		f->aqueued--;
		pthread_mutex_unlock(&f->info_lock);
	}
	return ret;
}

/*
 * Runs in stream order on the device's host-function thread, which must not
 * call the device runtime nor wait for anything that does (CUDA runs host
 * functions of all streams on one thread).  It only hands the I/O to a
 * worker; the stream itself waits on the gate word the worker opens once the
 * I/O is done.  Size and offset are read by the worker, after the stream got
 * here.
 */
static void async_host_fn(void *arg)
{
	struct async_op *a = arg;
	int ret = async_submit(a);

	if (ret) {
		*a->done = ret;
		async_finish(a, a->f->drv);
	}
}

/*
 * Device buffers go through pinned staging of *size (the maximum) bytes:
 * a write copies buf to it on the stream before the I/O, a read copies it to
 * buf on the stream after the gate, also for an early read.
 */
static int rw_async(struct gdx_file *f, enum gdx_file_op op, const void *buf, const size_t *size,
		    const off_t *off, ssize_t *done, struct gdx_stream *s, unsigned flags)
{
	struct gdx_file_driver *drv;
	struct async_stage *st = NULL;
	struct gdx_ptr_attrs attrs = { .kind = GDX_MEM_HOST };
	struct async_op *a;
	bool early = false;
	uint32_t value;
	unsigned gate;
	size_t max;
	int ret;

	if (!f || !size || !off || !done || !s || (flags & ~GDX_FILE_ASYNC_EARLY))
		return -EINVAL;
	drv = f->drv;
	if (gdx_stream_device(s) != drv->dev)
		return -EINVAL;
	max = *size;
	if (max > (size_t)SSIZE_MAX || (max && !buf))
		return -EINVAL;
	ret = async_ready(drv);
	if (ret)
		return ret;
	if (max) {
		ret = gdx_pointer_query(drv->dev, buf, &attrs);
		if (ret)
			return ret;
		/*
		 * Early only into device memory, whose copy from staging the stream
		 * runs in its order (a copy between two host buffers returns only
		 * once done: it would wait for the stream at submission), and never
		 * past a stream-ordered write to the file that has not run yet.
		 */
		early = (flags & GDX_FILE_ASYNC_EARLY) && op == GDX_FILE_READ &&
			attrs.kind == GDX_MEM_DEVICE &&
			!atomic_load(&drv->writes_pending[f->wbucket]);
		if (early && ahead_claim(f, *off, max, done, &st, &gate, &value))
			goto wait;
		if (early) {
			pthread_mutex_lock(&f->info_lock);
			f->astats.early++;
			pthread_mutex_unlock(&f->info_lock);
		}
		if (attrs.kind == GDX_MEM_DEVICE || attrs.kind == GDX_MEM_MANAGED) {
			ret = stage_get(drv, max, &st);
			if (ret)
				return ret;
		}
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		ret = -ENOMEM;
		goto fail_stage;
	}
	*a = (struct async_op){ .f = f, .op = op, .buf = st ? st->p : (void *)buf, .max = max,
				.size = size, .off = off, .done = done,
				.wstage = op == GDX_FILE_WRITE ? st : NULL,
				.early = early, .n = max, .o = *off,
				.kind = st ? GDX_MEM_PINNED : attrs.kind };
	if (op == GDX_FILE_WRITE)
		atomic_fetch_add(&drv->writes_pending[f->wbucket], 1);
	if (st && op == GDX_FILE_WRITE) {
		ret = gdx_memcpy_async(drv->dev, st->p, buf, max, s);
		if (ret)
			goto fail_op;
	}
	a->gate = gate_get(drv);
	gate = a->gate;
	value = a->gate_value = drv->gates[gate] + 1;
	ret = early ? async_submit(a) :
		gdx_stream_launch_host_func(s, async_host_fn, a);
	if (ret) {
		gate_open(drv, gate, value);
		goto fail_op;
	}
	/*
	 * The worker or the host function now owns a (and a write's stage).
	 * Should the wait fail to enqueue, the stream runs ahead of the I/O:
	 * report it, the caller must synchronize; a read's stage is then left
	 * to the worker's writes, so it stays busy.
	 */
wait:
	ret = gdx_stream_wait_value32(s, &drv->gates[gate], value);
	if (ret || !st || op != GDX_FILE_READ)
		return ret;
	ret = gdx_memcpy_async(drv->dev, (void *)buf, st->p, max, s);
	return ret ? ret : stage_put_after(st, s);

fail_op:
	if (op == GDX_FILE_WRITE)
		atomic_fetch_sub(&drv->writes_pending[f->wbucket], 1);
	free(a);
fail_stage:
	if (st)
		stage_put(st);
	return ret;
}

GDX_API int gdx_file_read_ahead(struct gdx_file *f, size_t len, off_t off)
{
	struct gdx_file_driver *drv;
	struct async_stage *st;
	struct async_ahead *e;
	struct async_op *a;
	bool dup = false, full;
	int ret;

	if (!f || !len || off < 0 || len > (size_t)SSIZE_MAX || f->accmode == O_WRONLY)
		return -EINVAL;
	drv = f->drv;
	if (gdx_file_no_twin(f) && !gdx_file_dio_aligned(NULL, off, len)) {
		struct gdx_file_io_info info;

		/* The early read that would have claimed it fails, and logs, the same way. */
		gdx_file_twin_refuse(f, &info, "read ahead");
		GDX_DBG("file", "%s", info.why);
		return -EINVAL;
	}
	ret = async_ready(drv);
	if (ret)
		return ret;
	if (atomic_load(&drv->writes_pending[f->wbucket]))
		return -EBUSY;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e && !dup; e = e->next)
		dup = e->f == f && e->off == off && e->len == len && !e->stale;
	full = drv->nahead >= AHEAD_MAX;
	pthread_mutex_unlock(&drv->gate_lock);
	if (dup)
		return 0;
	if (full)
		return -EBUSY;
	ret = stage_get(drv, len, &st);
	if (ret)
		return ret;
	a = calloc(1, sizeof(*a));
	e = calloc(1, sizeof(*e));
	if (!a || !e) {
		free(a);
		free(e);
		stage_put(st);
		return -ENOMEM;
	}
	*e = (struct async_ahead){ .f = f, .off = off, .len = len, .st = st };
	*a = (struct async_op){ .f = f, .op = GDX_FILE_READ, .buf = st->p, .max = len,
				.early = true, .n = len, .o = off, .ahead = e,
				.kind = GDX_MEM_PINNED };
	a->gate = e->gate = gate_get(drv);
	a->gate_value = e->gate_value = drv->gates[e->gate] + 1;
	pthread_mutex_lock(&drv->gate_lock);
	e->next = drv->ahead;
	drv->ahead = e;
	__atomic_store_n(&drv->nahead, drv->nahead + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&drv->gate_lock);
	ret = async_submit(a);
	if (ret) {
		pthread_mutex_lock(&drv->gate_lock);
		ahead_unlink(drv, e);
		pthread_mutex_unlock(&drv->gate_lock);
		gate_open(drv, a->gate, a->gate_value);
		stage_put(st);
		free(e);
		free(a);
	}
	return ret;
}

unsigned gdx_file_ahead_wait(struct gdx_file *f)
{
	struct gdx_file_driver *drv = f->drv;
	unsigned held;
	bool pending;

	pthread_mutex_lock(&drv->gate_lock);
	do {
		held = 0;
		pending = false;
		for (struct async_ahead *e = drv->ahead; e; e = e->next) {
			held += e->f == f;
			pending |= e->f == f && !e->finished;
		}
		if (pending)
			pthread_cond_wait(&drv->ahead_cond, &drv->gate_lock);
	} while (pending);
	pthread_mutex_unlock(&drv->gate_lock);
	return held;
}

GDX_API int gdx_file_read_async(struct gdx_file *f, void *buf, const size_t *size,
				const off_t *off, ssize_t *done, struct gdx_stream *s)
{
	return rw_async(f, GDX_FILE_READ, buf, size, off, done, s, 0);
}

GDX_API int gdx_file_read_async_ex(struct gdx_file *f, void *buf, const size_t *size,
				   const off_t *off, ssize_t *done, struct gdx_stream *s,
				   unsigned flags)
{
	return rw_async(f, GDX_FILE_READ, buf, size, off, done, s, flags);
}

GDX_API int gdx_file_write_async(struct gdx_file *f, const void *buf, const size_t *size,
				 const off_t *off, ssize_t *done, struct gdx_stream *s)
{
	return rw_async(f, GDX_FILE_WRITE, buf, size, off, done, s, 0);
}
