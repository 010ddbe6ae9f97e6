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
 * The compute stage does all three in one launch (k_compute): each launch
 * costs the producer thread several microseconds on the H200's VM, a share
 * of a 50 us step.
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

/* A slot's device words: the load's mark, and the compute kernel's state. */
struct kslot {
	unsigned long long mark[TS_NMARKS];
	unsigned long long start;	/* earliest block start; ~0 between batches */
	unsigned done;			/* blocks done; 0 between batches */
};

/*
 * The compute stage in one launch: the same arithmetic as ts_reference(),
 * one output word per thread; the last block to finish then spins until
 * `ns` after the earliest block started, and leaves the slot's state as it
 * found it for the slot's next batch (which runs after this kernel, on the
 * same stream).
 */
__global__ static void k_compute(const uint32_t *in, uint32_t *out, size_t in_words,
				 size_t out_words, uint64_t batch, struct kslot *ks,
				 unsigned long long ns)
{
	__shared__ bool last;
	size_t k = in_words / out_words;

	if (threadIdx.x == 0)
		atomicMin(&ks->start, globaltimer());
	for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < out_words;
	     j += (size_t)gridDim.x * blockDim.x) {
		uint32_t acc = (uint32_t)batch;

		for (size_t i = 0; i < k; i++)
			acc += in[j * k + i] * (uint32_t)(i + 1);
		out[j] = acc;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&ks->done, 1u) == gridDim.x - 1;
	}
	__syncthreads();
	if (!last || threadIdx.x)
		return;
	unsigned long long until = atomicAdd(&ks->start, 0ull) + ns;

	while (globaltimer() < until)
		;
	ks->start = ~0ull;
	ks->done = 0;
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
	int ret;

	if (cudaSetDevice(gdx_device_ordinal(dev)) != cudaSuccess)
		return launched("cudaSetDevice");
	ret = gdx_device_malloc(dev, sizeof(struct kslot), &s->priv);
	ret = ret ? ret : gdx_memset(dev, s->priv, 0, sizeof(struct kslot));
	return ret ? ret : gdx_memset(dev, &((struct kslot *)s->priv)->start, 0xff,
				      sizeof(unsigned long long));
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
	k_mark<<<1, 1, 0, cs(st)>>>(&((struct kslot *)s->priv)->mark[m]);
	return launched("mark kernel");
}

static int cuda_pad(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, double us,
		    struct gdx_stream *st)
{
	(void)c;
	k_pad<<<1, 1, 0, cs(st)>>>(&((struct kslot *)s->priv)->mark[m],
				   (unsigned long long)(us * 1e3));
	return launched("pad kernel");
}

static int cuda_compute(struct ts_ctx *c, struct ts_slot *s, uint64_t batch, double us,
			struct gdx_stream *st)
{
	size_t out_words = ts_out_bytes(c) / 4;
	unsigned threads = 256;
	unsigned blocks = (unsigned)((out_words + threads - 1) / threads);

	if (blocks > 1024)
		blocks = 1024;
	k_compute<<<blocks, threads, 0, cs(st)>>>((const uint32_t *)s->in, (uint32_t *)s->out,
						  ts_in_bytes(c) / 4, out_words, batch,
						  (struct kslot *)s->priv,
						  (unsigned long long)(us * 1e3));
	return launched("compute kernel");
}

static const struct ts_provider cuda_provider = {
	"kernel", cuda_slot_init, cuda_slot_fini, cuda_mark, cuda_pad, cuda_compute,
};

int main(int argc, char **argv)
{
	return ts_main(argc, argv, &cuda_provider);
}
