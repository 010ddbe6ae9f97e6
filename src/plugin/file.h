/* SPDX-License-Identifier: MIT */
#ifndef GDX_SRC_PLUGIN_FILE_H
#define GDX_SRC_PLUGIN_FILE_H

/*
 * The storage backend ops table.  The front end (gdx_file_*) checks
 * arguments, learns the memory kind of each buffer, enforces strict mode's
 * contract and keeps the path record; a backend moves bytes.  Backends are
 * tried per handle in registry order (cufile, uring, posix) unless one is
 * named; a backend that refuses a driver or a file says why in `why`, and the
 * front end records it so a fallback is never silent.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <gdx/device.h>
#include <gdx/file.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One I/O as a backend sees it. */
struct gdx_file_io {
	struct gdx_file *file;
	enum gdx_file_op op;
	void *buf;
	size_t size;
	off_t off;
	struct gdx_ptr_attrs attrs;	/* what buf is */
	bool strict;			/* device memory must go direct */
	struct gdx_file_io_info info;	/* the backend fills bytes[] and why */
	ssize_t result;			/* io_many: set before complete() */
	/* Set with a failure that moved no byte (the backend could not start). */
	bool untouched;
	void *cookie;			/* the front end's: the caller's cookie */
	void *owner;			/* the front end's: the batch running it */
};

typedef void (*gdx_file_io_done_fn)(struct gdx_file_io *io, void *arg);
typedef unsigned (*gdx_file_io_more_fn)(void *arg, struct gdx_file_io **ios, unsigned max);

struct gdx_file_backend_ops {
	const char *name;
	/* Per driver; a negative return (with why) leaves the backend out. */
	int (*init)(struct gdx_file_driver *drv, void **priv, char *why, size_t whylen);
	void (*fini)(void *priv);
	/* Per handle; a negative return (with why) moves on to the next backend. */
	int (*open)(void *priv, struct gdx_file *f, void **fpriv, char *why, size_t whylen);
	void (*close)(void *priv, struct gdx_file *f, void *fpriv);
	/* Synchronous: bytes done or a negative code. */
	ssize_t (*io)(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io);
	/*
	 * Optional: runs I/Os concurrently as more() hands them over (up to max at a
	 * time, 0 when none is queued right now), calling done as each finishes;
	 * returns once all it took are done and more() has nothing further.
	 * Without it the front end runs io() on worker threads.
	 */
	void (*io_many)(void *priv, gdx_file_io_more_fn more, gdx_file_io_done_fn done, void *arg);
	/* Optional buffer registration; payload is handed back to deregister. */
	int (*buf_register)(void *priv, void *buf, size_t len, const struct gdx_ptr_attrs *a,
			    void **payload);
	void (*buf_deregister)(void *priv, void *payload);
};

/* What a backend may ask of the front end (internal: backends are built in). */
int gdx_file_fd(const struct gdx_file *f);
unsigned gdx_file_flags(const struct gdx_file *f);
void *gdx_file_backend_priv(const struct gdx_file *f);

#ifdef __cplusplus
}
#endif
#endif
