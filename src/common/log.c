/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

_Atomic int gdx_log_level_cur = GDX_LOG_WARN;
static gdx_log_fn log_cb;
static void *log_cb_arg;
/* Serialises the sink, so a callback sees one message at a time. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set while this thread runs the callback: its own logging goes to stderr. */
static _Thread_local int in_callback;

GDX_API int gdx_log_level_parse(const char *s)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	for (int i = 0; i <= GDX_LOG_TRACE; i++)
		if (!strcasecmp(s, level_names[i]))
			return i;
	if (!strcasecmp(s, "warning"))
		return GDX_LOG_WARN;
	v = strtol(s, &end, 10);
	if (*end || v < GDX_LOG_ERROR || v > GDX_LOG_TRACE)
		return -EINVAL;
	return (int)v;
}

/* The level comes from the environment before main() so early calls honour it. */
__attribute__((constructor)) static void log_init(void)
{
	const char *s = getenv("GDX_LOG_LEVEL");
	int lvl;

	if (!s)
		return;
	lvl = gdx_log_level_parse(s);
	if (lvl >= 0)
		gdx_log_level_cur = lvl;
	else
		fprintf(stderr, "gdx: ignoring GDX_LOG_LEVEL='%s' (want error..trace or 0..4)\n", s);
}

GDX_API void gdx_log_set_level(enum gdx_log_level level)
{
	if ((int)level >= GDX_LOG_ERROR && (int)level <= GDX_LOG_TRACE)
		gdx_log_level_cur = (int)level;
}

GDX_API enum gdx_log_level gdx_log_get_level(void)
{
	return (enum gdx_log_level)gdx_log_level_cur;
}

GDX_API void gdx_log_set_callback(gdx_log_fn fn, void *arg)
{
	/* From inside the callback this would deadlock on log_lock. */
	if (in_callback)
		return;
	pthread_mutex_lock(&log_lock);
	log_cb = fn;
	log_cb_arg = arg;
	pthread_mutex_unlock(&log_lock);
}

void gdx_log_msg(enum gdx_log_level level, const char *subsys, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if ((int)level < GDX_LOG_ERROR || (int)level > GDX_LOG_TRACE)
		level = GDX_LOG_ERROR;
	if (!subsys)
		subsys = "gdx";
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	/* A callback that logs through gdx would re-enter log_lock. */
	if (in_callback) {
		fprintf(stderr, "gdx %s [%s] %s\n", level_names[level], subsys, msg);
		return;
	}
	pthread_mutex_lock(&log_lock);
	if (log_cb) {
		in_callback = 1;
		log_cb(level, subsys, msg, log_cb_arg);
		in_callback = 0;
	} else {
		fprintf(stderr, "gdx %s [%s] %s\n", level_names[level], subsys, msg);
	}
	pthread_mutex_unlock(&log_lock);
}
