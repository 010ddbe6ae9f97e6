/* SPDX-License-Identifier: MIT */
/*
 * Benchmarks of the common layer, each against a ceiling measured in the same run:
 *   crc32c    ISA-L CRC32C over a cache-resident and a memory-resident buffer,
 *             against a plain read of the same buffer (the most any digest can do)
 *   bounce    get+put pairs on a bounce pool, against the uncontended mutex
 *             lock/unlock pairs each of them must take
 *   tpool     jobs through a 1-worker pool, against a bare condvar handoff
 * Usage: bench_common [crc32c|bounce|tpool]...   (GDX_DEVICE picks the pool's device)
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gdx/gdx.h>

#include "ceiling.h"
#include "common/crc32c.h"
#include "common/tpool.h"
#include "common/util.h"

static double secs_since(uint64_t t0)
{
	return (double)(gdx_now_ns() - t0) / 1e9;
}

static unsigned invalid;	/* results above their ceilings */

static void report(const char *what, double v, const char *unit, double ceiling)
{
	bool bad = bench_invalid(v / ceiling);

	printf("%-28s %10.2f %-8s ceiling %10.2f  ratio %.2f%s%s\n", what, v, unit, ceiling,
	       v / ceiling, bad ? "  " : "", bad ? BENCH_INVALID : "");
	invalid += bad;
}

/*
 * XORs the buffer into four accumulators with the widest loads the CPU has
 * (ISA-L's CRC kernels use them too), no dependency chain between loads: the
 * buffer's read bandwidth.
 */
typedef uint64_t v8u64 __attribute__((vector_size(64)));

__attribute__((target_clones("avx512f", "avx2", "default")))
static uint64_t read_all(const uint64_t *p, size_t words)
{
	const v8u64 *v = (const v8u64 *)(const void *)p;
	v8u64 a = { 0 }, b = a, c = a, d = a;

	for (size_t i = 0; i + 4 <= words / 8; i += 4) {
		a ^= v[i];
		b ^= v[i + 1];
		c ^= v[i + 2];
		d ^= v[i + 3];
	}
	a ^= b ^ c ^ d;
	return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

static void bench_crc(size_t size, const char *label)
{
	uint64_t *buf = aligned_alloc(4096, size), t0, sink = 0;
	size_t total = (size_t)8 << 30, reps = total / size;
	double crc_gbs, rd_gbs;
	char what[64];

	if (!buf)
		return;
	memset(buf, 0x5a, size);
	t0 = gdx_now_ns();
	for (size_t r = 0; r < reps; r++)
		sink += read_all(buf, size / 8) + r;
	rd_gbs = (double)(reps * size) / secs_since(t0) / 1e9;
	t0 = gdx_now_ns();
	for (size_t r = 0; r < reps; r++)
		sink += gdx_crc32c(buf, size);
	crc_gbs = (double)(reps * size) / secs_since(t0) / 1e9;
	snprintf(what, sizeof(what), "crc32c %s", label);
	report(what, crc_gbs, "GB/s", rd_gbs);
	if (sink == 42)
		puts("");
	free(buf);
}

static void bench_bounce(void)
{
	struct gdx_bounce_pool *pool;
	struct gdx_device *dev;
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	const long n = 20000000;
	double pool_rate, mutex_rate;
	uint64_t t0;
	void *b;
	int ret;

	ret = gdx_device_open(NULL, &dev);
	if (ret) {
		printf("bounce: no device (%s)\n", gdx_strerror(ret));
		return;
	}
	ret = gdx_bounce_pool_create(dev, NULL, &pool);
	if (ret) {
		printf("bounce: pool: %s\n", gdx_strerror(ret));
		gdx_device_close(dev);
		return;
	}
	t0 = gdx_now_ns();
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&m);
		pthread_mutex_unlock(&m);
		pthread_mutex_lock(&m);
		pthread_mutex_unlock(&m);
	}
	mutex_rate = (double)n / secs_since(t0) / 1e6;
	t0 = gdx_now_ns();
	for (long i = 0; i < n; i++) {
		gdx_bounce_get(pool, 0, &b);
		gdx_bounce_put(pool, b);
	}
	pool_rate = (double)n / secs_since(t0) / 1e6;
	report("bounce get+put", pool_rate, "M/s", mutex_rate);
	gdx_bounce_pool_destroy(pool);
	gdx_device_close(dev);
}

struct handoff {
	pthread_mutex_t m;
	pthread_cond_t c;
	long posted, taken;
	bool stop;
};

static void *handoff_worker(void *arg)
{
	struct handoff *h = arg;

	pthread_mutex_lock(&h->m);
	for (;;) {
		while (h->taken == h->posted && !h->stop)
			pthread_cond_wait(&h->c, &h->m);
		if (h->taken == h->posted)
			break;
		h->taken++;
	}
	pthread_mutex_unlock(&h->m);
	return NULL;
}

static void nop(void *arg)
{
	(void)arg;
}

static void bench_tpool(void)
{
	struct handoff h = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false };
	struct gdx_tpool *tp;
	const long n = 2000000;
	double pool_rate, bare_rate;
	pthread_t th;
	uint64_t t0;

	pthread_create(&th, NULL, handoff_worker, &h);
	t0 = gdx_now_ns();
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&h.m);
		h.posted++;
		pthread_cond_signal(&h.c);
		pthread_mutex_unlock(&h.m);
	}
	pthread_mutex_lock(&h.m);
	h.stop = true;
	pthread_cond_signal(&h.c);
	pthread_mutex_unlock(&h.m);
	pthread_join(th, NULL);
	bare_rate = (double)n / secs_since(t0) / 1e6;

	if (gdx_tpool_create(1, "bench", &tp))
		return;
	t0 = gdx_now_ns();
	for (long i = 0; i < n; i++)
		gdx_tpool_submit(tp, nop, NULL);
	gdx_tpool_drain(tp);
	pool_rate = (double)n / secs_since(t0) / 1e6;
	gdx_tpool_destroy(tp);
	report("tpool submit+run (1 worker)", pool_rate, "M jobs/s", bare_rate);
}

int main(int argc, char **argv)
{
	static const char *const all[] = { "crc32c", "bounce", "tpool" };
	const char *const *what = argc > 1 ? (const char *const *)argv + 1 : all;
	int n = argc > 1 ? argc - 1 : (int)GDX_ARRAY_SIZE(all);

	for (int i = 0; i < n; i++) {
		if (!strcmp(what[i], "crc32c")) {
			bench_crc(256 << 10, "256 KiB (cache)");
			bench_crc(256 << 20, "256 MiB (memory)");
		} else if (!strcmp(what[i], "bounce")) {
			bench_bounce();
		} else if (!strcmp(what[i], "tpool")) {
			bench_tpool();
		} else {
			fprintf(stderr, "usage: %s [crc32c|bounce|tpool]...\n", argv[0]);
			return 2;
		}
	}
	if (invalid)
		fprintf(stderr, "%s: %u result%s above %s ceiling: the run is invalid\n", argv[0],
			invalid, invalid == 1 ? "" : "s", invalid == 1 ? "its" : "their");
	return 0;
}
