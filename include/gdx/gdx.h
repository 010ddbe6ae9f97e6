/* SPDX-License-Identifier: MIT */
#ifndef GDX_GDX_H
#define GDX_GDX_H

/* Umbrella header and library-wide services: version, logging, configuration. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>
#include <gdx/device.h>
#include <gdx/mem.h>
#include <gdx/file.h>

#ifdef __cplusplus
extern "C" {
#endif

GDX_API const char *gdx_version(void);

/* ---- logging ---------------------------------------------------------- */

enum gdx_log_level {
	GDX_LOG_ERROR = 0,
	GDX_LOG_WARN = 1,
	GDX_LOG_INFO = 2,
	GDX_LOG_DEBUG = 3,
	GDX_LOG_TRACE = 4,
};

/*
 * The callback receives every message at or above the current level, already
 * formatted, without a trailing newline.  Passing NULL restores the default
 * sink (stderr).  The level starts at $GDX_LOG_LEVEL (a name or a number),
 * else WARN.
 */
typedef void (*gdx_log_fn)(enum gdx_log_level level, const char *subsys,
			   const char *msg, void *arg);
GDX_API void gdx_log_set_callback(gdx_log_fn fn, void *arg);
GDX_API void gdx_log_set_level(enum gdx_log_level level);
GDX_API enum gdx_log_level gdx_log_get_level(void);
/* Parses "error".."trace" or "0".."4"; returns the level or a negative errno. */
GDX_API int gdx_log_level_parse(const char *s);

/* ---- configuration ----------------------------------------------------- */

/*
 * Every tunable has one name ("file.chunk_size"), an environment variable
 * (GDX_FILE_CHUNK_SIZE) and a key in the JSON file ({"file": {"chunk_size": ..}}).
 * Precedence: value set through gdx_config_set > environment > JSON file >
 * built-in default.  The JSON file is $GDX_CONFIG, or one loaded explicitly.
 *
 * Loading a file replaces all values from an earlier file; a file with an
 * unknown key or a bad value is refused whole (GDX_ECONFIG) and changes nothing.
 * Leaves are strings, or integers for int/size knobs, or booleans for bool knobs.
 */
GDX_API int gdx_config_load_file(const char *path);
/* Sets a knob from its text form; validates it like the environment would; NULL unsets. */
GDX_API int gdx_config_set(const char *name, const char *value);
/* Writes the current value's text form into buf; returns its length or -errno. */
GDX_API int gdx_config_get(const char *name, char *buf, size_t len);

struct gdx_config_knob_info {
	const char *name;	/* "file.chunk_size" */
	const char *env;	/* "GDX_FILE_CHUNK_SIZE" */
	const char *type;	/* "int", "size", "bool", "string", "enum" */
	const char *def;	/* default, as text */
	const char *doc;	/* one line */
};
/* Iterates the knob table; returns the number of knobs, fills *info for i < n. */
GDX_API int gdx_config_knob(unsigned i, struct gdx_config_knob_info *info);

#ifdef __cplusplus
}
#endif
#endif
