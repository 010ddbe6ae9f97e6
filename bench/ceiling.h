/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_CEILING_H
#define GDX_BENCH_CEILING_H

#include <stdbool.h>

/*
 * Every benchmark prints its result beside a ceiling measured in the same run,
 * and the ratio of the two (1.00: at the ceiling).  A result above its ceiling
 * means the ceiling was not the limit it stands for (measured too short,
 * disturbed, or down another path): the comparison is void, and the run says
 * so on that line (and "valid": false in JSON) and once more on stderr at the
 * end, instead of printing a ratio above 1 as if it meant something.  The
 * exit status stays 0: the figures were measured, only their judge failed.
 */
#define BENCH_INVALID "INVALID: above its ceiling, which was not measured right"

/*
 * ratio: the result as a fraction of its ceiling (latency: ceiling / result).
 * Above it as the ratio prints (two decimals: 1.01 and up); a result within
 * rounding of its ceiling is at it, and its line must not say 1.00 and void.
 */
static inline bool bench_invalid(double ratio)
{
	return ratio >= 1.005;
}

#endif
