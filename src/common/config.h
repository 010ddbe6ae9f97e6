/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_CONFIG_H
#define GDX_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Knob values, resolved on each call (set > env > JSON file > default) so a
 * test can change one between calls.  Unknown names are a programming error:
 * they are logged and abort.  Values are validated when set; a bad value in
 * the environment is logged once and ignored here (gdx_config_check refuses
 * it), a file with one is refused whole.
 * Numbers are decimal or 0x hex, never octal.
 */
int64_t gdx_cfg_int(const char *name);
uint64_t gdx_cfg_size(const char *name);	/* accepts 4k, 1M, 2G suffixes */
bool gdx_cfg_bool(const char *name);
/*
 * Not a copy, but stays valid after the knob changes (replaced values are kept
 * until gdx_config_reset); an environment value, until the variable changes.
 */
const char *gdx_cfg_str(const char *name);

/*
 * Whether the configuration from outside can be used: $GDX_CONFIG loaded, the
 * environment variable of every knob not set by gdx_config_set holds a value
 * it accepts, and GDX_LOG_LEVEL names a level.  0, or GDX_ECONFIG with the
 * first problem in buf, naming the variable or file, the value and what the
 * knob accepts.  Opening a device makes this check: a typo stops the program
 * there rather than being ignored.
 */
int gdx_config_check(char *buf, size_t len);

/*
 * Drops every value set through gdx_config_set and every value from a JSON
 * file, leaving environment and defaults, and frees replaced values: for tests
 * and fuzzers, with no gdx_cfg_str result in use.
 */
void gdx_config_reset(void);

/*
 * Parses "4096", "0x1000", "64k", "1M", "2G" (binary units); -EINVAL on garbage,
 * -ERANGE when the suffix overflows 64 bits.
 */
int gdx_parse_size(const char *s, uint64_t *out);
int gdx_parse_bool(const char *s, bool *out);
/*
 * A device spec, "kind" or "kind:N": the kind's length and the ordinal N
 * (-1 when absent); -EINVAL when N is not a number from 0 to 1024.
 */
int gdx_parse_device_spec(const char *spec, size_t *kind_len, int *ordinal);
/* The other way: "4096", "64k", "1M", with the largest binary unit that divides v. */
void gdx_size_text(uint64_t v, char *buf, size_t len);

#endif
