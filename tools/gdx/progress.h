/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOOL_PROGRESS_H
#define GDX_TOOL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * One progress line on stderr, redrawn in place ("\r"): a bar, the share
 * done, MiB so far and the rate since t0 (gdx_now_ns()).  Drawn at most every
 * 100 ms (*last_draw keeps the time) unless final, which ends the line.  The
 * caller decides whether to draw at all (a terminal, not quiet).
 */
void tool_progress_draw(uint64_t done, uint64_t total, uint64_t t0, uint64_t *last_draw,
			bool final);

#endif
