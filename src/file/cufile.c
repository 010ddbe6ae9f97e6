/* SPDX-License-Identifier: MIT */
/*
 * The cufile backend: NVIDIA's libcufile loaded at run time, used only where
 * it accepts the file (nvidia-fs or the kernel's P2PDMA mode present, and the
 * filesystem supported).  The few cuFile types used are declared here, as
 * the library's ABI fixes them, so no vendor header is needed to build.
 * Every refusal is recorded with cuFile's own error number, and the front end
 * moves on to the next backend.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "file/file_int.h"

/* cufile.h ABI: an op error (5000 + n) and a CUresult. */
typedef struct {
	int err;
	int cu_err;
} cufile_error_t;

#define CU_FILE_HANDLE_TYPE_OPAQUE_FD 1

typedef struct {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} cufile_descr_t;

struct cf_api {
	void *lib;
	cufile_error_t (*driver_open)(void);
	cufile_error_t (*driver_close)(void);
	cufile_error_t (*handle_register)(void **fh, cufile_descr_t *d);
	void (*handle_deregister)(void *fh);
	cufile_error_t (*buf_register)(const void *p, size_t len, int flags);
	cufile_error_t (*buf_deregister)(const void *p);
	ssize_t (*read)(void *fh, void *p, size_t size, off_t foff, off_t boff);
	ssize_t (*write)(void *fh, const void *p, size_t size, off_t foff, off_t boff);
};

struct cf_file {
	void *fh;
	int fd_direct;
};

struct cf_reg {
	void *p;
};

static int cf_init(struct gdx_file_driver *drv, void **priv, char *why, size_t whylen)
{
	const char *name = gdx_cfg_str("file.cufile_lib");
	struct gdx_device *dev = gdx_file_driver_device(drv);
	struct cf_api *a;
	cufile_error_t e;

	/* cuFile drives CUDA devices only. */
	if (strcmp(gdx_device_kind(dev), "cuda")) {
		snprintf(why, whylen, "device %s is not a CUDA device", gdx_device_name(dev));
		return -ENODEV;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!a->lib) {
		snprintf(why, whylen, "%s", dlerror());
		free(a);
		return GDX_ENOLIB;
	}
#define SYM(f, s) (*(void **)&a->f = dlsym(a->lib, s))
	SYM(driver_open, "cuFileDriverOpen");
	SYM(driver_close, "cuFileDriverClose_v2");
	if (!a->driver_close)
		SYM(driver_close, "cuFileDriverClose");
	SYM(handle_register, "cuFileHandleRegister");
	SYM(handle_deregister, "cuFileHandleDeregister");
	SYM(buf_register, "cuFileBufRegister");
	SYM(buf_deregister, "cuFileBufDeregister");
	SYM(read, "cuFileRead");
	SYM(write, "cuFileWrite");
#undef SYM
	if (!a->driver_open || !a->driver_close || !a->handle_register || !a->handle_deregister ||
	    !a->read || !a->write) {
		snprintf(why, whylen, "%s lacks the cuFile entry points", name);
		goto fail;
	}
	e = a->driver_open();
	if (e.err) {
		snprintf(why, whylen, "cuFileDriverOpen failed: cuFile error %d (cuda %d)", e.err,
			 e.cu_err);
		goto fail;
	}
	*priv = a;
	return 0;
fail:
	dlclose(a->lib);
	free(a);
	return GDX_ENOLIB;
}

static void cf_fini(void *priv)
{
	struct cf_api *a = priv;

	a->driver_close();
	dlclose(a->lib);
	free(a);
}

static int cf_open(void *priv, struct gdx_file *f, void **fpriv, char *why, size_t whylen)
{
	struct cf_api *a = priv;
	cufile_descr_t d = { .type = CU_FILE_HANDLE_TYPE_OPAQUE_FD };
	struct cf_file *cf;
	cufile_error_t e;
	char path[64];
	int acc = fcntl(gdx_file_fd(f), F_GETFL) & O_ACCMODE;

	if (gdx_file_flags(f) & GDX_FILE_NO_ODIRECT) {
		snprintf(why, whylen, "needs O_DIRECT, which is turned off");
		return -EINVAL;
	}
	cf = calloc(1, sizeof(*cf));
	if (!cf)
		return -ENOMEM;
	/* cuFile wants a descriptor opened with O_DIRECT. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", gdx_file_fd(f));
	cf->fd_direct = open(path, acc | O_DIRECT | O_CLOEXEC);
	if (cf->fd_direct < 0) {
		int err = -errno;

		snprintf(why, whylen, "O_DIRECT open refused: %s", strerror(-err));
		free(cf);
		return err;
	}
	d.handle.fd = cf->fd_direct;
	e = a->handle_register(&cf->fh, &d);
	if (e.err) {
		snprintf(why, whylen, "cuFileHandleRegister failed: cuFile error %d (cuda %d)",
			 e.err, e.cu_err);
		close(cf->fd_direct);
		free(cf);
		return GDX_EDRIVER;
	}
	*fpriv = cf;
	return 0;
}

static void cf_close(void *priv, struct gdx_file *f, void *fpriv)
{
	struct cf_api *a = priv;
	struct cf_file *cf = fpriv;

	(void)f;
	a->handle_deregister(cf->fh);
	close(cf->fd_direct);
	free(cf);
}

static ssize_t cf_io(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io)
{
	struct cf_api *a = priv;
	struct cf_file *cf = fpriv;
	size_t done = 0;

	(void)f;
	/* The front end sends only device memory here. */
	while (done < io->size) {
		ssize_t n = io->op == GDX_FILE_READ ?
			a->read(cf->fh, io->buf, io->size - done, io->off + (off_t)done,
				(off_t)done) :
			a->write(cf->fh, io->buf, io->size - done, io->off + (off_t)done,
				 (off_t)done);

		if (n < 0) {
			/* -1 with errno for system errors, else minus a cuFile error. */
			int err = n == -1 ? -errno : GDX_EDRIVER;

			gdx_file_why(&io->info, "cuFile %s failed: %zd", io->op == GDX_FILE_READ ?
				     "read" : "write", n);
			io->untouched = !done;
			return done ? (ssize_t)done : err;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	io->info.bytes[GDX_FILE_PATH_DIRECT] += done;
	gdx_file_why(&io->info, "cuFile: storage DMA into device memory");
	return (ssize_t)done;
}

static int cf_buf_register(void *priv, void *buf, size_t len, const struct gdx_ptr_attrs *attr,
			   void **payload)
{
	struct cf_api *a = priv;
	struct cf_reg *r;
	cufile_error_t e;

	if (attr->kind != GDX_MEM_DEVICE || !a->buf_register || !a->buf_deregister)
		return -EOPNOTSUPP;
	r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	e = a->buf_register(buf, len, 0);
	if (e.err) {
		free(r);
		return GDX_EDRIVER;
	}
	r->p = buf;
	*payload = r;
	return 0;
}

static void cf_buf_deregister(void *priv, void *payload)
{
	struct cf_api *a = priv;
	struct cf_reg *r = payload;

	a->buf_deregister(r->p);
	free(r);
}

const struct gdx_file_backend_ops gdx_file_cufile_ops = {
	.name = "cufile",
	.init = cf_init,
	.fini = cf_fini,
	.open = cf_open,
	.close = cf_close,
	.io = cf_io,
	.buf_register = cf_buf_register,
	.buf_deregister = cf_buf_deregister,
};
