/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_MEMSPEC_H
#define GDX_BENCH_MEMSPEC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Most bytes a +OFF suffix may put a benchmark's buffers into their allocation. */
#define BENCH_MEM_OFF_MAX 4095

/*
 * A memory kind with an optional +OFF suffix (gpu:0+2: buffers 2 bytes into
 * their allocation, as a tensor's slice starts): the kind's length in *klen
 * and OFF in *off (0 without a suffix).  -1 for a suffix that is not a
 * decimal from 0 to BENCH_MEM_OFF_MAX.
 */
static inline int bench_mem_offset(const char *spec, size_t *klen, size_t *off)
{
	const char *plus = strchr(spec, '+');
	char *end;
	unsigned long v;

	*klen = plus ? (size_t)(plus - spec) : strlen(spec);
	*off = 0;
	if (!plus)
		return 0;
	if (plus[1] < '0' || plus[1] > '9')
		return -1;
	v = strtoul(plus + 1, &end, 10);
	if (*end || v > BENCH_MEM_OFF_MAX)
		return -1;
	*off = v;
	return 0;
}

#endif
