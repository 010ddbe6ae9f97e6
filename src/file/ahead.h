/* SPDX-License-Identifier: MIT */
#ifndef GDX_FILE_AHEAD_H
#define GDX_FILE_AHEAD_H

#include <stddef.h>
#include <sys/types.h>

struct gdx_file;
struct gdx_file_driver;

/*
 * For tests; starting a read ahead is public (gdx_file_read_ahead, gdx/file.h).
 * Waits until every read ahead on f has finished; returns how many are unclaimed.
 */
unsigned gdx_file_ahead_wait(struct gdx_file *f);
/*
 * Tests: fn(arg) runs on the worker as each stream-ordered read of the
 * driver's handles starts, already counted in flight; NULL removes it.  Set
 * while no such read is in flight.
 */
void gdx_file_set_read_hook(struct gdx_file_driver *drv, void (*fn)(void *arg), void *arg);

#endif
