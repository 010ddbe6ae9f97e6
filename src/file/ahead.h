/* SPDX-License-Identifier: MIT */
#ifndef GDX_FILE_AHEAD_H
#define GDX_FILE_AHEAD_H

#include <stddef.h>
#include <sys/types.h>

struct gdx_file;
struct gdx_file_driver;

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
int gdx_file_read_ahead(struct gdx_file *f, size_t len, off_t off);
/* Waits until every read ahead on f has finished; returns how many are unclaimed. */
unsigned gdx_file_ahead_wait(struct gdx_file *f);
/*
 * Tests: fn(arg) runs on the worker as each stream-ordered read of the
 * driver's handles starts, already counted in flight; NULL removes it.  Set
 * while no such read is in flight.
 */
void gdx_file_set_read_hook(struct gdx_file_driver *drv, void (*fn)(void *arg), void *arg);

#endif
