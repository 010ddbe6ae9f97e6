/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_LOG_H
#define GDX_COMMON_LOG_H

#include <stdatomic.h>

#include <gdx/gdx.h>

/* Checked once per call site against the current level before formatting. */
void gdx_log_msg(enum gdx_log_level level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
extern _Atomic int gdx_log_level_cur;

#define GDX_LOG(lvl, subsys, ...)                                        \
	do {                                                             \
		if ((int)(lvl) <= atomic_load_explicit(&gdx_log_level_cur, \
						       memory_order_relaxed)) \
			gdx_log_msg((lvl), (subsys), __VA_ARGS__);        \
	} while (0)
#define GDX_ERR(subsys, ...) GDX_LOG(GDX_LOG_ERROR, subsys, __VA_ARGS__)
#define GDX_WARN(subsys, ...) GDX_LOG(GDX_LOG_WARN, subsys, __VA_ARGS__)
#define GDX_INFO(subsys, ...) GDX_LOG(GDX_LOG_INFO, subsys, __VA_ARGS__)
#define GDX_DBG(subsys, ...) GDX_LOG(GDX_LOG_DEBUG, subsys, __VA_ARGS__)
#define GDX_TRACE(subsys, ...) GDX_LOG(GDX_LOG_TRACE, subsys, __VA_ARGS__)

#endif
