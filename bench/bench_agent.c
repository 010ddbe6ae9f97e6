/* SPDX-License-Identifier: MIT */
/*
 * Copy agent bandwidth (include/gdx/device.h) by copy size and direction,
 * against the device's own copies of the same size in the same run (a stream,
 * gdx_memcpy_async back to back, then one synchronisation: the copy engine on
 * cuda).  Each copy may be split into pieces on W rings, one worker each, so
 * that W blocks share it.
 *
 *   bench_agent [--sizes 64k,256k,1M,4M] [--workers 1,2,4] [--mib 256] [--lat]
 *               [--offset P,D]
 *
 * --lat: the time one lone copy takes instead, from its post until the CPU
 * sees its done word (the next posted only then), medians and 99th
 * percentiles of LAT_N, against a synchronous copy of the same size on a
 * stream (gdx_memcpy_async + gdx_stream_synchronize), and a 16-byte copy
 * beside them: the agent's poll, fence and done word alone.
 *
 * --offset P,D: every copy starts P bytes into its pinned slot and D bytes
 * into its device slot (0-63), as a copy into a tensor's slice at an odd
 * offset does; the stream copies beside take the same offsets.
 *
 * GDX_DEVICE picks the device (cuda on a GPU machine).
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gdx/gdx.h>

#include "common/util.h"
#include "sort.h"

#define MAX_W 8
#define BUF (64u << 20)	/* per side: copies walk through it */
#define SLACK 64	/* past BUF, room for --offset */

static int parse_size(const char *s, size_t *v)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	default: break;
	}
	if (end == s || *end || !n)
		return -EINVAL;
	*v = (size_t)n;
	return 0;
}

/* --offset P,D: two byte offsets, each below SLACK. */
static int parse_offsets(const char *s, unsigned *p, unsigned *d)
{
	int end = -1;

	if (sscanf(s, "%u,%u%n", p, d, &end) != 2 || end < 0 || s[end] || *p >= SLACK ||
	    *d >= SLACK)
		return -EINVAL;
	return 0;
}

static int wait_done(struct gdx_copy_agent *a, unsigned ring, uint32_t seq)
{
	const uint32_t *w = gdx_copy_agent_done_word(a, ring);

	for (unsigned i = 1; (int32_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - seq) < 0; i++) {
		int rc;

		if (!(i % 256) && (rc = gdx_copy_agent_status(a)))
			return rc;
		sched_yield();
	}
	return 0;
}

/*
 * GB/s of total bytes copied by the agent in copies of size bytes, each
 * split over w rings; at most 8 copies in flight per ring.
 */
static double agent_gbps(struct gdx_copy_agent *a, unsigned w, char *dst, const char *src,
			 size_t size, size_t total)
{
	uint32_t seq[MAX_W][16] = { { 0 } };
	size_t piece = (size / w + 15) / 16 * 16, n = total / size, slots = BUF / size;
	uint64_t t0 = gdx_now_ns();

	for (size_t i = 0; i < n; i++) {
		size_t off = (i % slots) * size;

		for (unsigned r = 0; r < w; r++) {
			size_t po = (size_t)r * piece, pl;
			int rc;

			if (po >= size)
				break;
			pl = GDX_MIN(piece, size - po);
			/* the slot's copy of 8 copies ago must be done before its seq is reused */
			if (i >= 8 && (rc = wait_done(a, r, seq[r][(i - 8) % 16])))
				return -rc;
			while ((rc = gdx_copy_agent_post(a, r, dst + off + po, src + off + po, pl,
							 &seq[r][i % 16])) == -EAGAIN)
				sched_yield();
			if (rc)
				return -rc;
		}
	}
	for (unsigned r = 0; r < w; r++) {
		size_t last = n - 1;

		if ((size_t)r * piece < size && wait_done(a, r, seq[r][last % 16]))
			return -1;
	}
	return (double)(n * size) / (double)(gdx_now_ns() - t0);
}

#define LAT_N 2000

/* Median and 99th percentile of v[0..LAT_N) in p[0..1] (sorts v). */
static void lat_summary(double *v, double p[2])
{
	bench_sort(v, LAT_N);
	p[0] = v[LAT_N / 2];
	p[1] = v[LAT_N * 99 / 100];
}

/* Lone copies through the agent (ring 0): each posted once the last landed. */
static int agent_lat(struct gdx_copy_agent *a, char *dst, const char *src, size_t size, double p[2])
{
	double v[LAT_N];

	for (unsigned i = 0; i < LAT_N; i++) {
		uint64_t t0 = gdx_now_ns();
		uint32_t seq;
		int rc;

		while ((rc = gdx_copy_agent_post(a, 0, dst, src, size, &seq)) == -EAGAIN)
			sched_yield();
		if (rc || (rc = wait_done(a, 0, seq)))
			return rc;
		v[i] = (double)(gdx_now_ns() - t0) / 1e3;
	}
	lat_summary(v, p);
	return 0;
}

static int stream_lat(struct gdx_device *dev, struct gdx_stream *s, char *dst, const char *src,
		      size_t size, double p[2])
{
	double v[LAT_N];

	for (unsigned i = 0; i < LAT_N; i++) {
		uint64_t t0 = gdx_now_ns();
		int rc = gdx_memcpy_async(dev, dst, src, size, s);

		if (rc || (rc = gdx_stream_synchronize(s)))
			return rc;
		v[i] = (double)(gdx_now_ns() - t0) / 1e3;
	}
	lat_summary(v, p);
	return 0;
}

/* --lat: one line per size and direction, the 16-byte copy first. */
static int lat_report(struct gdx_device *dev, struct gdx_stream *s, char *pin, char *dmem,
		      const char *sizes)
{
	struct gdx_copy_agent_opts o;
	struct gdx_copy_agent *a;
	char list[256];
	int rc;

	gdx_copy_agent_opts_init(&o, sizeof(o));
	o.rings = 1;
	o.workers = 1;
	o.entries = 64;
	if ((rc = gdx_copy_agent_start(dev, &o, &a))) {
		fprintf(stderr, "bench_agent: agent: %s\n", gdx_strerror(rc));
		return rc;
	}
	printf("%s: a lone copy's time, post to done word seen (us), against a synchronous "
	       "stream copy\n", gdx_device_name(dev));
	printf("%-4s %6s %10s %10s %10s %10s %6s\n", "dir", "size", "agent p50", "p99",
	       "stream p50", "p99", "ratio");
	snprintf(list, sizeof(list), "16,%s", sizes);
	for (char *save = NULL, *st = strtok_r(list, ",", &save); st && !rc;
	     st = strtok_r(NULL, ",", &save)) {
		size_t size;

		if (parse_size(st, &size) || size > BUF) {
			fprintf(stderr, "bench_agent: bad size %s\n", st);
			rc = -EINVAL;
			break;
		}
		for (int d = 0; d < 2 && !rc; d++) {
			char *dst = d ? pin : dmem, *src = d ? dmem : pin;
			double ag[2], ce[2];

			/* an untimed pass first: the worker's launch, page tables */
			rc = agent_lat(a, dst, src, size, ag);
			if (!rc)
				rc = agent_lat(a, dst, src, size, ag);
			if (!rc)
				rc = stream_lat(dev, s, dst, src, size, ce);
			if (!rc)
				printf("%-4s %6s %10.2f %10.2f %10.2f %10.2f %6.2f\n", d ? "d2h" : "h2d",
				       st, ag[0], ag[1], ce[0], ce[1], ce[0] / ag[0]);
		}
	}
	if (rc)
		fprintf(stderr, "bench_agent: %s\n", gdx_strerror(rc));
	else
		printf("ratio: stream / agent at the median (above 1.00 = the agent lands sooner)\n");
	gdx_copy_agent_stop(a);
	return rc;
}

static double stream_gbps(struct gdx_device *dev, struct gdx_stream *s, char *dst, const char *src,
			  size_t size, size_t total)
{
	size_t n = total / size, slots = BUF / size;
	uint64_t t0 = gdx_now_ns();

	for (size_t i = 0; i < n; i++)
		if (gdx_memcpy_async(dev, dst + (i % slots) * size, src + (i % slots) * size, size,
				     s))
			return -1;
	if (gdx_stream_synchronize(s))
		return -1;
	return (double)(n * size) / (double)(gdx_now_ns() - t0);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "sizes", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "mib", required_argument, NULL, 'm' },
		{ "lat", no_argument, NULL, 'l' },
		{ "offset", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	char sizes_arg[256] = "64k,256k,1M,4M", workers_arg[64] = "1,2,4";
	size_t total = 256u << 20;
	struct gdx_device *dev;
	struct gdx_stream *s;
	char *pin, *dmem;
	unsigned po = 0, dof = 0;
	int c, rc = 0;
	bool lat = false;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': snprintf(sizes_arg, sizeof(sizes_arg), "%s", optarg); break;
		case 'w': snprintf(workers_arg, sizeof(workers_arg), "%s", optarg); break;
		case 'm': total = strtoull(optarg, NULL, 10) << 20; break;
		case 'l': lat = true; break;
		case 'o':
			if (!parse_offsets(optarg, &po, &dof))
				break;
			fprintf(stderr, "bench_agent: --offset P,D: bytes into the pinned and the "
				"device slot, each 0 to %d\n", SLACK - 1);
			return 2;
		default:
			fprintf(stderr, "usage: %s [--sizes LIST] [--workers LIST] [--mib N] [--lat] "
				"[--offset P,D]\n", argv[0]);
			return 2;
		}
	}
	if (gdx_device_open(NULL, &dev) || gdx_stream_create(dev, &s) ||
	    gdx_pinned_alloc(dev, BUF + SLACK, (void **)&pin) ||
	    gdx_device_malloc(dev, BUF + SLACK, (void **)&dmem)) {
		fprintf(stderr, "bench_agent: no device\n");
		return 1;
	}
	memset(pin, 1, BUF + SLACK);
	if (gdx_memset(dev, dmem, 2, BUF + SLACK))
		return 1;
	if (po || dof)
		printf("copies start %u bytes into their pinned slots, %u into their device slots\n",
		       po, dof);
	if (lat) {
		rc = lat_report(dev, s, pin + po, dmem + dof, sizes_arg);
		goto out;
	}
	printf("%s: copy agent GB/s against the device's stream copies of the same size\n",
	       gdx_device_name(dev));
	printf("%-4s %6s %3s %10s %10s %6s\n", "dir", "size", "W", "agent", "stream", "ratio");
	for (char *wt = strtok(workers_arg, ","); wt; wt = strtok(NULL, ",")) {
		unsigned w = (unsigned)atoi(wt);
		struct gdx_copy_agent_opts o;
		struct gdx_copy_agent *a;
		char list[256];

		if (!w || w > MAX_W) {
			fprintf(stderr, "bench_agent: workers 1 to %d\n", MAX_W);
			return 2;
		}
		gdx_copy_agent_opts_init(&o, sizeof(o));
		o.rings = w;
		o.workers = w;
		o.entries = 64;
		if ((rc = gdx_copy_agent_start(dev, &o, &a))) {
			fprintf(stderr, "bench_agent: agent: %s\n", gdx_strerror(rc));
			return 1;
		}
		snprintf(list, sizeof(list), "%s", sizes_arg);
		for (char *save = NULL, *st = strtok_r(list, ",", &save); st;
		     st = strtok_r(NULL, ",", &save)) {
			size_t size;

			if (parse_size(st, &size) || size > BUF) {
				fprintf(stderr, "bench_agent: bad size %s\n", st);
				return 2;
			}
			for (int d = 0; d < 2; d++) {
				char *dst = d ? pin + po : dmem + dof, *src = d ? dmem + dof : pin + po;
				double ag, ce;

				/* an untimed pass first: launches, page tables */
				agent_gbps(a, w, dst, src, size, GDX_MIN(total, (size_t)BUF));
				ag = agent_gbps(a, w, dst, src, size, total);
				ce = stream_gbps(dev, s, dst, src, size, total);
				printf("%-4s %6s %3u %10.2f %10.2f %6.2f\n", d ? "d2h" : "h2d", st, w,
				       ag, ce, ag / ce);
			}
		}
		gdx_copy_agent_stop(a);
	}
	printf("ratio: agent / stream (1.00 = as fast as the device's copy engine)\n");
out:
	gdx_device_free(dev, dmem);
	gdx_pinned_free(dev, pin);
	gdx_stream_destroy(s);
	gdx_device_close(dev);
	return rc ? 1 : 0;
}
