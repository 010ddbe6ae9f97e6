/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOOL_ARGS_H
#define GDX_TOOL_ARGS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Option values of every gdx command, through one parser: a bad value is
 * refused with one line that names the option, the value and what it takes,
 *   gdx cp: --piece '0': want a size from 1 to 1T (bytes, or with k, M, G or T)
 * and the caller exits 2.  prog is the command's argv[0], "gdx cp" (main()
 * and gdx bench set it, so getopt's own messages carry it too).
 */
int arg_size(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
	     uint64_t *out);
/* A decimal count from min to max. */
int arg_count(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
	      uint64_t *out);
/* Seconds, a decimal fraction above 0 and at most max. */
int arg_secs(const char *prog, const char *opt, const char *s, double max, double *out);
/* One of "a|b|c": its index. */
int arg_choice(const char *prog, const char *opt, const char *s, const char *choices);
/* "gpu:N": N. */
int arg_gpu(const char *prog, const char *opt, const char *s, int *ordinal);
/*
 * A DH-HMAC-CHAP secret: the value itself when it starts "DHHC-1:", else the
 * name of a file holding it (as `nvme gen-dhchap-key` prints it), which
 * keeps it off the command line.  Into out (n bytes); the secret is never
 * printed, only the option and the file.
 */
int arg_secret(const char *prog, const char *opt, const char *s, char *out, size_t n);
/* After a usage error: the pointer to --help; returns the exit code, 2. */
int arg_usage_error(const char *prog);

#endif
