/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_TEST_H
#define GDX_TESTS_TEST_H

/* cmocka with the includes it needs, and helpers shared by the tests. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* A connected TCP pair on loopback, both ends blocking: fd[0] connected to fd[1]. */
static inline void t_tcp_pair(int fd[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	fd[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd[0] >= 0);
	assert_int_equal(connect(fd[0], (struct sockaddr *)&a, sizeof(a)), 0);
	fd[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(fd[1] >= 0);
	close(l);
}

#endif
