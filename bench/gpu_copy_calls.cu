// SPDX-License-Identifier: MIT
//
// What handing the copy engine many small host -> device copies costs
// (docs/measurements/nvmf-speed.md, session 11): 16384 copies of one piece size
// from pinned host memory into device memory, made by 1-16 threads each on a
// stream of its own, one cudaMemcpyAsync per copy or cudaMemcpyBatchAsync of 8
// or 32 per call; GB/s and CPU microseconds per copy, beside the ceiling of the
// same run (one 256 MiB copy) and their ratio.
// Not part of gdx's build (it needs nvcc; gdx does not):
//   nvcc -O2 -arch=sm_90 -o gpu_copy_calls bench/gpu_copy_calls.cu && ./gpu_copy_calls [KiB]
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <pthread.h>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

static const size_t BUF = 256ull << 20;
static const int COPIES = 16384;
static char *host, *dev;
static size_t piece = 128 << 10;

static double now(void)
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

struct worker {
	int id, threads, batch;
	cudaStream_t s;
	double cpu;
};

static void *run_worker(void *p)
{
	worker *w = (worker *)p;
	size_t slots = BUF / piece, zero = 0;
	void *d[32];
	const void *src[32];
	size_t n[32];
	cudaMemcpyAttributes at = {};
	double t0 = now();

	at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	at.srcLocHint.type = cudaMemLocationTypeHost;
	at.dstLocHint.type = cudaMemLocationTypeDevice;
	for (int i = 0; i < COPIES / w->threads; i += w->batch) {
		for (int j = 0; j < w->batch; j++) {
			size_t k = ((size_t)(i + j) * w->threads + w->id) % slots;
			d[j] = dev + k * piece;
			src[j] = host + (k * 7 % slots) * piece;	/* not the same order as dst */
			n[j] = piece;
		}
		if (w->batch == 1)
			CK(cudaMemcpyAsync(d[0], src[0], piece, cudaMemcpyHostToDevice, w->s));
		else
			CK(cudaMemcpyBatchAsync(d, src, n, w->batch, &at, &zero, 1, w->s));
	}
	w->cpu = now() - t0;
	CK(cudaStreamSynchronize(w->s));
	return NULL;
}

static void config(int threads, int batch, double ceiling)
{
	pthread_t th[16];
	worker w[16];
	double cpu = 0, t0;

	for (int i = 0; i < threads; i++) {
		w[i] = worker{ i, threads, batch, 0, 0 };
		CK(cudaStreamCreateWithFlags(&w[i].s, cudaStreamNonBlocking));
	}
	CK(cudaDeviceSynchronize());
	t0 = now();
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, run_worker, &w[i]);
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		cpu += w[i].cpu;
	}
	double gbs = (double)COPIES * piece / (now() - t0) / 1e9;
	printf("%7d %6d %9.1f %9.1f %6.2f %9.2f\n", threads, batch, gbs, ceiling, gbs / ceiling,
	       cpu * 1e6 / COPIES);
	for (int i = 0; i < threads; i++)
		CK(cudaStreamDestroy(w[i].s));
}

int main(int argc, char **argv)
{
	static const int cfg[][2] = { {1, 1}, {1, 8}, {1, 32}, {2, 1}, {4, 1}, {8, 1},
				      {4, 8}, {8, 4}, {8, 8}, {8, 32}, {16, 8} };
	double t0, ceiling;

	if (argc > 1)
		piece = (size_t)atoi(argv[1]) << 10;
	if (!piece || piece > BUF) {
		fprintf(stderr, "usage: %s [piece KiB, 1 to %zu]\n", argv[0], BUF >> 10);
		return 2;
	}
	CK(cudaSetDevice(0));
	CK(cudaMallocHost((void **)&host, BUF));
	CK(cudaMalloc((void **)&dev, BUF));
	CK(cudaMemcpy(dev, host, BUF, cudaMemcpyHostToDevice));
	t0 = now();
	CK(cudaMemcpy(dev, host, BUF, cudaMemcpyHostToDevice));
	ceiling = BUF / (now() - t0) / 1e9;
	printf("%d copies of %zu KiB, pinned -> device; ceiling: one 256 MiB copy\n", COPIES,
	       piece >> 10);
	printf("threads  batch      GB/s   ceiling  ratio  CPU us/copy\n");
	for (const auto &c : cfg)
		config(c[0], c[1], ceiling);
	return 0;
}
