/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_FILE_SUITE_H
#define GDX_TESTS_FILE_SUITE_H

/*
 * What test_file's files share: the device, the driver and the test file on
 * disk and on tmpfs, and the helpers that open and read it.  test_file.c
 * defines them, sets them up and runs the cases, which live by theme in
 * file_suite_*.c.
 */
#include <stddef.h>

#include <gdx/gdx.h>

#define FSIZE ((8u << 20) + 12345u)

extern struct gdx_device *dev;
extern struct gdx_file_driver *drv;
extern unsigned char *ref;		/* the file's contents */
extern char disk_path[512], shm_path[512];

int count_fds(void);
int open_odirect_or_skip(unsigned char *pat, unsigned char *back);
struct gdx_file *open_path(const char *path, int oflags, unsigned flags, const char *be);
void check_dev_read(struct gdx_file *f, void *d, unsigned char *host, size_t off, size_t n,
		    struct gdx_file_io_info *info);

/* file_suite_io.c */
void reads_uring_disk(void **state);
void reads_uring_tmpfs(void **state);
void reads_posix(void **state);
void path_reporting(void **state);
void register_refused(void **state);
void strict_mode(void **state);
void writes(void **state);
void sparse_4g(void **state);
void read_only(void **state);
void many_threads(void **state);
void batch(void **state);

/* file_suite_stream.c */
void stream_ordered(void **state);
void stream_ordered_early(void **state);
void read_ahead(void **state);
void stream_ordered_odirect(void **state);
void read_ahead_concurrent(void **state);

/* file_suite_odirect.c */
void sync_odirect(void **state);
void odirect_write_order(void **state);
void odirect_no_twin(void **state);

/* file_suite_driver.c */
void errors(void **state);
int enospc_teardown(void **state);
void enospc(void **state);
void buf_register(void **state);
void driver_choice(void **state);
void context_failure(void **state);
void no_leaks(void **state);
void driver_counters(void **state);
void split_pieces_on_grid(void **state);
void fixed_bufs_over_1g(void **state);

#endif
