/* SPDX-License-Identifier: MIT */
#ifndef GDX_FILE_H
#define GDX_FILE_H

/*
 * Files to and from any memory: the GPUDirect Storage path with a fallback
 * that runs at hardware speed where the direct path is missing.
 *
 * A driver binds a device and the storage backends; a handle binds one open
 * file to the first backend (in priority order, or the one asked for) that
 * accepts it.  Reads and writes take device, pinned or plain host memory at
 * any offset and size; nothing has to be aligned.  Each returns the bytes done
 * or a negative code, and a read at end of file comes back short like pread.
 *
 * Every I/O records the path its bytes took and why:
 *   direct     storage DMA straight into device memory (cuFile)
 *   pagecache  the device copies straight out of the page cache (mapped and
 *              registered for the duration of the copy)
 *   bounce     staged through pinned bounce buffers (io_uring, O_DIRECT where
 *              the filesystem allows)
 *   host       no device involved: the kernel moved the bytes to or from the
 *              caller's host memory itself
 *   posix      pread/pwrite on worker threads (staged for device memory)
 * Strict mode (GDX_FILE_REQUIRE_DIRECT, or the require_direct knob) fails an
 * I/O on device memory with GDX_ENOTDIRECT instead of taking any path but
 * direct; host memory is unaffected.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <gdx/status.h>
#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdx_file_driver;
struct gdx_file;
struct gdx_file_batch;

enum gdx_file_path {
	GDX_FILE_PATH_NONE = 0,
	GDX_FILE_PATH_DIRECT,
	GDX_FILE_PATH_PAGECACHE,
	GDX_FILE_PATH_BOUNCE,
	GDX_FILE_PATH_HOST,
	GDX_FILE_PATH_POSIX,
	GDX_FILE_PATH_COUNT,
};
GDX_API const char *gdx_file_path_name(enum gdx_file_path p);

/* What one I/O (or, summed, one handle) did. */
struct gdx_file_io_info {
	enum gdx_file_path path;	/* the path that carried the most bytes */
	uint64_t bytes[GDX_FILE_PATH_COUNT];
	/* why that path, in words; room for a split I/O whose pieces each say theirs */
	char why[512];
};

/* ---- driver ------------------------------------------------------------ */

struct gdx_file_driver_opts {
	size_t struct_size;	/* sizeof(struct gdx_file_driver_opts) */
	/* NULL: every backend in priority order, else "cufile", "uring" or "posix". */
	const char *backend;
};
GDX_API void gdx_file_driver_opts_init(struct gdx_file_driver_opts *o, size_t struct_size);

/*
 * dev: the device whose memory I/O goes to (a reference is taken); NULL
 * opens the default device.  o may be NULL.
 */
GDX_API int gdx_file_driver_open(struct gdx_device *dev, const struct gdx_file_driver_opts *o,
				 struct gdx_file_driver **out);
/* Every handle and batch must have been closed. */
GDX_API void gdx_file_driver_close(struct gdx_file_driver *drv);
GDX_API struct gdx_device *gdx_file_driver_device(struct gdx_file_driver *drv);
/* Backends that initialised, comma separated, and why each other one did not. */
GDX_API int gdx_file_driver_describe(struct gdx_file_driver *drv, char *buf, size_t len);

/*
 * Registers a buffer for repeated I/O: its kind is looked up once, and a
 * backend that can register memory (cuFile) does so.  Optional: unregistered
 * buffers work as well.  Freeing the memory through gdx drops the entry.
 */
GDX_API int gdx_file_buf_register(struct gdx_file_driver *drv, void *buf, size_t len);
GDX_API int gdx_file_buf_deregister(struct gdx_file_driver *drv, void *buf);

/* ---- handles ----------------------------------------------------------- */

#define GDX_FILE_REQUIRE_DIRECT	0x1u	/* strict mode for this handle */
#define GDX_FILE_NO_ODIRECT	0x2u	/* never open the file with O_DIRECT */
#define GDX_FILE_NO_PAGECACHE	0x4u	/* never register page-cache pages with the device */

struct gdx_file_opts {
	size_t struct_size;	/* sizeof(struct gdx_file_opts) */
	int oflags;		/* gdx_file_open: open(2) flags; default O_RDONLY */
	mode_t mode;		/* with O_CREAT; default 0644 */
	unsigned flags;		/* GDX_FILE_* */
	/* NULL: the driver's choice (knob file.backend, else by priority). */
	const char *backend;
};
GDX_API void gdx_file_opts_init(struct gdx_file_opts *o, size_t struct_size);

GDX_API int gdx_file_open(struct gdx_file_driver *drv, const char *path,
			  const struct gdx_file_opts *o, struct gdx_file **out);
/* Uses fd as it is (its access mode decides what is allowed); never closes it. */
GDX_API int gdx_file_open_fd(struct gdx_file_driver *drv, int fd, const struct gdx_file_opts *o,
			     struct gdx_file **out);
/* No I/O may be in flight on the handle. */
GDX_API int gdx_file_close(struct gdx_file *f);
GDX_API const char *gdx_file_backend_name(const struct gdx_file *f);
/* Current file size (fstat). */
GDX_API int64_t gdx_file_size(struct gdx_file *f);

/*
 * The handle's record: path chosen for the last I/O and why, bytes per path
 * since open, and in why (when no I/O ran yet) why this backend was chosen.
 */
GDX_API int gdx_file_info(struct gdx_file *f, struct gdx_file_io_info *info);

/* ---- synchronous I/O ---------------------------------------------------- */

GDX_API ssize_t gdx_file_read(struct gdx_file *f, void *buf, size_t size, off_t off);
GDX_API ssize_t gdx_file_write(struct gdx_file *f, const void *buf, size_t size, off_t off);
/* Same, also filling *info (may be NULL) with this I/O's path. */
GDX_API ssize_t gdx_file_read_ex(struct gdx_file *f, void *buf, size_t size, off_t off,
				 struct gdx_file_io_info *info);
GDX_API ssize_t gdx_file_write_ex(struct gdx_file *f, const void *buf, size_t size, off_t off,
				  struct gdx_file_io_info *info);
/* fdatasync(2) of the handle's file. */
GDX_API int gdx_file_sync(struct gdx_file *f);

/* ---- batch ------------------------------------------------------------- */

enum gdx_file_op { GDX_FILE_READ = 0, GDX_FILE_WRITE = 1 };

struct gdx_file_batch_io {
	struct gdx_file *file;
	enum gdx_file_op op;
	void *buf;
	size_t size;
	off_t off;
	void *cookie;		/* returned with the completion */
};

struct gdx_file_batch_event {
	void *cookie;
	ssize_t result;		/* bytes or a negative code */
	struct gdx_file_io_info info;
};

/* max_ios: how many I/Os may be outstanding at once. */
GDX_API int gdx_file_batch_create(struct gdx_file_driver *drv, unsigned max_ios,
				  struct gdx_file_batch **out);
/* Waits for outstanding I/O, then frees the batch. */
GDX_API void gdx_file_batch_destroy(struct gdx_file_batch *b);
/*
 * Queues n I/Os and starts them, handed to the backends together; -EAGAIN if
 * they would exceed max_ios, -ENOMEM (none queued) without memory to track them.
 */
GDX_API int gdx_file_batch_submit(struct gdx_file_batch *b, const struct gdx_file_batch_io *ios,
				  unsigned n);
/*
 * Reaps completions into ev[0..max): waits until at least min_nr are there or
 * timeout_ms passes (-1: no limit; 0 with min_nr 0: a poll).  Returns the
 * number reaped.
 */
GDX_API int gdx_file_batch_wait(struct gdx_file_batch *b, unsigned min_nr,
				struct gdx_file_batch_event *ev, unsigned max, int timeout_ms);

/* ---- stream-ordered I/O ------------------------------------------------ */

/*
 * Runs the I/O in order on stream s, like cuFileReadAsync: it starts after the
 * work enqueued before it and later work waits for it.  *size at the call is
 * the I/O's maximum size (as cuFile's size_p); *size and *off are read again
 * when the I/O runs, and *done is written then (bytes, or a negative code;
 * -EINVAL for a *size above the maximum); all three must stay valid until it
 * has run.  A read into device memory copies the maximum into buf from pinned
 * staging: bytes of buf between *done and the maximum are undefined after it.
 */
GDX_API int gdx_file_read_async(struct gdx_file *f, void *buf, const size_t *size,
				const off_t *off, ssize_t *done, struct gdx_stream *s);
GDX_API int gdx_file_write_async(struct gdx_file *f, const void *buf, const size_t *size,
				 const off_t *off, ssize_t *done, struct gdx_stream *s);

/*
 * Early: the storage read starts at the call, on a worker, into pinned
 * staging; the stream still copies the data into buf in stream order (after
 * the work enqueued before it, and before later work).  *size (the exact size)
 * and *off are read at the call, and *done is written when the storage read
 * finishes, possibly before the stream gets there (final once it has).  The
 * read sees the file as it is at the call, not when the stream reaches it:
 * use it for files nothing writes while the read is in flight (a data set).
 * It never overtakes a stream-ordered write to the same file issued before
 * it (while one is pending the read runs in stream order).  Device memory
 * only: into host memory the read runs in stream order (with CUDA a copy
 * between two host buffers returns only once it is done, which would wait for
 * the stream at the call).
 */
#define GDX_FILE_ASYNC_EARLY	0x1u

/* gdx_file_read_async() with flags (GDX_FILE_ASYNC_*); -EINVAL for unknown flags. */
GDX_API int gdx_file_read_async_ex(struct gdx_file *f, void *buf, const size_t *size,
				   const off_t *off, ssize_t *done, struct gdx_stream *s,
				   unsigned flags);

/*
 * Starts reading [off, off + len) of f into pinned staging on a driver
 * worker, for a later gdx_file_read_async_ex(GDX_FILE_ASYNC_EARLY) of exactly
 * that range on f, into device memory, to take over: its stream then only
 * waits for the read to be done and copies.  The data is the file as it is
 * now; a write to the file through any handle of f's driver drops what was
 * read ahead, and so does closing f.
 * 0 (also when that range is already being read ahead), -EBUSY while a
 * stream-ordered write to the file is pending or 16 reads ahead are
 * unclaimed, or another negative code.
 */
GDX_API int gdx_file_read_ahead(struct gdx_file *f, size_t len, off_t off);

/*
 * How the handle's stream-ordered reads ran on the driver's workers (plain,
 * early and read ahead): the storage read each one paid, off the stream when
 * early or ahead, and how far they overlapped.  busy_ns / reads is the time
 * per read the workers delivered; below read_ns / reads when reads overlap,
 * and it bounds the step of a loop that needs one read per step.
 */
struct gdx_file_async_stats {
	size_t struct_size;	/* sizeof(struct gdx_file_async_stats) */
	uint64_t reads;		/* finished on a worker */
	uint64_t read_ns;	/* their summed time on the workers */
	uint64_t max_read_ns;
	uint64_t busy_ns;	/* wall time with at least one of them in flight */
	unsigned max_inflight;	/* most of them in flight at once */
	uint64_t early;		/* GDX_FILE_ASYNC_EARLY reads submitted */
	uint64_t ahead_hits;	/* of those, taking over a read ahead of their range */
	uint64_t ahead_late;	/* of the hits, read ahead not yet finished at submission */
	/* Now (not reset): what a stream waiting for a read may be held up by. */
	unsigned inflight;	/* reads running on a worker */
	unsigned queued;	/* handed to the workers, not yet started on one */
};
/* Zero the figures after reading them (reads in flight stay counted as such). */
#define GDX_FILE_STATS_RESET	0x1u
GDX_API int gdx_file_async_stats(struct gdx_file *f, struct gdx_file_async_stats *st,
				 unsigned flags);

/*
 * The driver's counters, for tools and benchmarks: the i-th one's name and
 * value (counted since the driver was opened; also in gdx's statistics under
 * the scope file.N).  0, or -ENOENT past the last one.
 */
GDX_API int gdx_file_driver_counter(struct gdx_file_driver *drv, unsigned i, const char **name,
				    uint64_t *value);

#ifdef __cplusplus
}
#endif
#endif
