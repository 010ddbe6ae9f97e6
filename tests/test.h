/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_TEST_H
#define GDX_TESTS_TEST_H

/* cmocka with the includes it needs, and helpers shared by the tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#define T_EXIT_SKIP 77

/* Deterministic pseudo-random bytes (xorshift64*), so failures reproduce. */
static inline uint64_t t_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static inline void t_fill(void *buf, size_t n, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t s = seed | 1;

	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(t_rand(&s) >> 56);
}

#endif
