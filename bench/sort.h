/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_SORT_H
#define GDX_BENCH_SORT_H

#include <stddef.h>
#include <stdlib.h>

/* Sorts n figures ascending, for medians and percentiles. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static inline void bench_sort(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), bench_cmp_double);
}

#endif
