/* SPDX-License-Identifier: MIT */
#ifndef GDX_FILE_INT_H
#define GDX_FILE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include <gdx/file.h>
#include "plugin/file.h"

#include "common/stats.h"
#include "common/tpool.h"
#include "mem/regcache.h"

/* Alignment O_DIRECT is given everywhere: covers 512- and 4096-byte devices. */
#define GDX_FILE_DIO_ALIGN 4096u

enum {
	GDX_FILE_CTR_READS, GDX_FILE_CTR_WRITES, GDX_FILE_CTR_ERRORS, GDX_FILE_CTR_NOTDIRECT,
	GDX_FILE_CTR_BYTES,	/* one per path from here, path order */
	/*
	 * Where the uring backend's time goes, so one run on a machine says
	 * which step bounds it: page-cache ranges registered (and refused), the
	 * nanoseconds spent mapping, registering and unregistering them, device
	 * copies enqueued and the time spent enqueueing them, the engine
	 * loops' wall, CPU and blocked time, and storage I/Os completed with the
	 * sums, at each, of the storage I/Os in flight (their mean queue depth)
	 * and of the requests the engine held (the rest of a batch's depth was
	 * with the caller or queued for the engine); chunks read whose copy
	 * waited for an earlier chunk's read (a lane posts in order); storage
	 * I/Os into the lanes' rings as io_uring fixed buffers.
	 */
	GDX_FILE_CTR_PC_RANGES = GDX_FILE_CTR_BYTES + GDX_FILE_PATH_COUNT - 1,
	GDX_FILE_CTR_PC_REFUSED, GDX_FILE_CTR_PC_MAP_NS, GDX_FILE_CTR_PC_REG_NS,
	GDX_FILE_CTR_PC_UNREG_NS, GDX_FILE_CTR_COPIES, GDX_FILE_CTR_COPY_NS,
	GDX_FILE_CTR_ENGINE_NS, GDX_FILE_CTR_ENGINE_CPU_NS, GDX_FILE_CTR_ENGINE_WAIT_NS,
	GDX_FILE_CTR_KIOS, GDX_FILE_CTR_KIO_DEPTH, GDX_FILE_CTR_KIO_ACTIVE,
	GDX_FILE_CTR_PREADS, GDX_FILE_CTR_PREAD_NS, GDX_FILE_CTR_HELD, GDX_FILE_CTR_FIXED,
	GDX_FILE_CTR_COUNT,
};

enum { GDX_FILE_BE_CUFILE, GDX_FILE_BE_URING, GDX_FILE_BE_POSIX, GDX_FILE_BE_COUNT };

struct gdx_file_be {
	const struct gdx_file_backend_ops *ops;
	void *priv;		/* NULL: not initialised (see why) */
	char why[160];
};

#define GDX_FILE_WBUCKETS 64u

struct gdx_file_driver {
	struct gdx_device *dev;
	struct gdx_file_be be[GDX_FILE_BE_COUNT];
	int only;		/* index of the one backend asked for, or -1 */
	struct gdx_regcache *regs;
	struct gdx_tpool *wq;
	pthread_once_t wq_once;
	int wq_err;
	/*
	 * Stream-ordered I/O: the stream waits on one word of this pinned page
	 * until the worker that did the I/O stores the word's next value.
	 */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	uint32_t *gates;
	unsigned *gate_free;
	unsigned ngate_free;
	struct async_stage *stages;	/* all pinned staging, under gate_lock */
	/*
	 * Stream-ordered writes not yet done, by a hash of the file's inode: an
	 * early read of a file with one pending runs in stream order instead.
	 */
	_Atomic unsigned writes_pending[GDX_FILE_WBUCKETS];
	/* Reads started ahead (gdx_file_read_ahead), under gate_lock. */
	struct async_ahead *ahead;
	unsigned nahead;
	pthread_cond_t ahead_cond;	/* an entry's read finished */
	_Atomic unsigned handles;
	_Atomic uint64_t next_id;
	/* Tests: runs on the worker as each stream-ordered read starts (ahead.h). */
	void (*read_hook)(void *arg);
	void *read_hook_arg;
	/* Reported by gdx_stats_dump_json under "file.N". */
	struct gdx_counter ctr[GDX_FILE_CTR_COUNT];
	struct gdx_stats *stats;
};

struct gdx_file {
	struct gdx_file_driver *drv;
	struct gdx_file_be *be;
	void *fpriv;
	/* Behind a direct-only backend (cufile): the one host memory goes through. */
	struct gdx_file_be *fb;
	void *fb_priv;
	int fd;
	bool own_fd;
	/*
	 * The handle's descriptor without O_DIRECT: fd itself, or, where fd
	 * has O_DIRECT (which refuses unaligned offsets, sizes and buffers
	 * with EINVAL), a second open of the file without it, its buffered
	 * twin (a dup would share the flag), made at open and closed with the
	 * handle; -errno where that open failed.  What buffered I/O goes
	 * through: stream-ordered I/O, and the unaligned I/O of the backends.
	 * Without it (gdx_file_no_twin) I/O that O_DIRECT takes goes on fd,
	 * also with O_DIRECT turned off, and the rest fails with EINVAL.
	 */
	int buffered_fd;
	bool odirect;		/* fd had O_DIRECT when the handle opened */
	int accmode;		/* O_RDONLY, O_WRONLY or O_RDWR */
	unsigned flags;
	uint64_t id;		/* unique per handle, never reused */
	unsigned wbucket;	/* the file's writes_pending counter */
	char chosen_why[256];	/* why this backend (and why not the ones before it) */
	pthread_mutex_t info_lock;
	struct gdx_file_io_info last;
	uint64_t bytes[GDX_FILE_PATH_COUNT];
	bool any_io;
	/* Its reads on the workers (gdx_file_async_stats), under info_lock. */
	struct gdx_file_async_stats astats;
	unsigned ainflight;
	unsigned aqueued;	/* reads submitted to the workers, not yet started */
	uint64_t abusy_since;
};

extern const struct gdx_file_backend_ops gdx_file_cufile_ops;
extern const struct gdx_file_backend_ops gdx_file_uring_ops;
extern const struct gdx_file_backend_ops gdx_file_posix_ops;

/* Sets info->path to the path with the most bytes. */
void gdx_file_info_finish(struct gdx_file_io_info *info);
/* printf into info->why (overwrites). */
void gdx_file_why(struct gdx_file_io_info *info, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Whether memory, offset and size all suit O_DIRECT (NULL memory: not the caller's). */
static inline bool gdx_file_dio_aligned(const void *mem, off_t off, size_t size)
{
	return !(((uintptr_t)mem | (uint64_t)off | size) & (GDX_FILE_DIO_ALIGN - 1));
}

/* The handle's descriptor has O_DIRECT and its buffered twin could not be opened. */
static inline bool gdx_file_no_twin(const struct gdx_file *f)
{
	return f->odirect && f->buffered_fd < 0;
}

/*
 * Records why an I/O fails that needs the buffered twin of such a handle,
 * and returns its error, -EINVAL (what the descriptor itself says).
 */
int gdx_file_twin_refuse(const struct gdx_file *f, struct gdx_file_io_info *info,
			 const char *what);

/* True for tmpfs/ramfs: everything is page cache, O_DIRECT buys nothing. */
bool gdx_file_fd_is_memfs(int fd);

/* file.c: the driver's worker threads, started at the first call that needs them. */
void gdx_file_wq_start(struct gdx_file_driver *drv);
/* Fills io from the caller's arguments; checks what can be checked up front. */
int gdx_file_io_prep(struct gdx_file *f, enum gdx_file_op op, const void *buf, size_t size,
		     off_t off, struct gdx_file_io *io);
/* Runs io on the handle's backend (host memory beside cufile: its fallback). */
ssize_t gdx_file_io_exec(struct gdx_file *f, struct gdx_file_io *io);
/* Counts io's result and bytes in the driver and the handle's path record. */
void gdx_file_io_record(struct gdx_file *f, struct gdx_file_io *io);

/* async.c: pinned staging freed at driver close (no stage in use then). */
void gdx_file_stages_free(struct gdx_file_driver *drv);
/* Reads ahead made stale by a write to f's file (any_handle), or f's own as it closes. */
void gdx_file_ahead_drop(struct gdx_file *f, bool any_handle);
/* Handle close: waits for the handle's reads ahead, then drops them. */
void gdx_file_ahead_forget(struct gdx_file *f);

#endif
