/* SPDX-License-Identifier: MIT */
/*
 * The training step with CUDA kernels as compute.  The kernels go on the
 * streams the pipeline hands out (gdx_stream_native gives the CUstream, which
 * the runtime takes as a cudaStream_t); gdx uses the device's primary context,
 * as the runtime does, so both see the same memory.
 *
 * Stage lengths: a one-thread kernel stamps %globaltimer into the slot's mark
 * word when a stage starts, and another spins until the mark plus the target
 * has passed, so a stage lasts max(its work, target) on the GPU's own clock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "train_step.h"

__device__ static unsigned long long globaltimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ static void k_mark(unsigned long long *mark)
{
	*mark = globaltimer();
}

__global__ static void k_pad(const unsigned long long *mark, unsigned long long ns)
{
	unsigned long long until = *mark + ns;

	while (globaltimer() < until)
		;
}

/* The same arithmetic as ts_reference(), one output word per thread. */
__global__ static void k_reduce(const uint32_t *in, uint32_t *out, size_t in_words,
				size_t out_words, uint64_t batch)
{
	size_t k = in_words / out_words;

	for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < out_words;
	     j += (size_t)gridDim.x * blockDim.x) {
		uint32_t acc = (uint32_t)batch;

		for (size_t i = 0; i < k; i++)
			acc += in[j * k + i] * (uint32_t)(i + 1);
		out[j] = acc;
	}
}

static int launched(const char *what)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "train_step: %s: %s\n", what, cudaGetErrorString(e));
	return GDX_EDRIVER;
}

static cudaStream_t cs(struct gdx_stream *st)
{
	return (cudaStream_t)gdx_stream_native(st);
}

static int cuda_slot_init(struct ts_ctx *c, struct ts_slot *s)
{
	struct gdx_device *dev = ts_device(c);

	if (strcmp(gdx_device_kind(dev), "cuda")) {
		fprintf(stderr, "train_step_cuda: needs a CUDA device, not %s "
			"(use train_step for host compute)\n", gdx_device_name(dev));
		return GDX_ENODEVICE;
	}
	if (cudaSetDevice(gdx_device_ordinal(dev)) != cudaSuccess)
		return launched("cudaSetDevice");
	return gdx_device_malloc(dev, TS_NMARKS * sizeof(unsigned long long), &s->priv);
}

static void cuda_slot_fini(struct ts_ctx *c, struct ts_slot *s)
{
	if (s->priv)
		gdx_device_free(ts_device(c), s->priv);
	s->priv = NULL;
}

static int cuda_mark(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, struct gdx_stream *st)
{
	(void)c;
	k_mark<<<1, 1, 0, cs(st)>>>((unsigned long long *)s->priv + m);
	return launched("mark kernel");
}

static int cuda_pad(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, double us,
		    struct gdx_stream *st)
{
	(void)c;
	k_pad<<<1, 1, 0, cs(st)>>>((unsigned long long *)s->priv + m,
				   (unsigned long long)(us * 1e3));
	return launched("pad kernel");
}

static int cuda_compute(struct ts_ctx *c, struct ts_slot *s, uint64_t batch, struct gdx_stream *st)
{
	size_t out_words = ts_out_bytes(c) / 4;
	unsigned threads = 256;
	unsigned blocks = (unsigned)((out_words + threads - 1) / threads);

	if (blocks > 1024)
		blocks = 1024;
	k_reduce<<<blocks, threads, 0, cs(st)>>>((const uint32_t *)s->in, (uint32_t *)s->out,
						 ts_in_bytes(c) / 4, out_words, batch);
	return launched("compute kernel");
}

static const struct ts_provider cuda_provider = {
	"kernel", cuda_slot_init, cuda_slot_fini, cuda_mark, cuda_pad, cuda_compute,
};

int main(int argc, char **argv)
{
	return ts_main(argc, argv, &cuda_provider);
}
