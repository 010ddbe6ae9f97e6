/* SPDX-License-Identifier: MIT */
/*
 * The gather kernel behind gdx_memcpy_batch_async on the cuda device: one
 * launch copies many small pieces from pinned host memory (device-addressable
 * under UVA) into device memory, instead of one copy-engine DMA per piece,
 * each of which costs the stream about 25 us on an H200 whatever its size.
 *
 * Kept for reference and for regenerating src/gpu/gather_ptx.h with
 * `scripts/gen_ptx.sh gather`: gdx needs no CUDA compiler at build or run time;
 * the driver JIT-compiles the committed PTX for whatever GPU it runs on.
 *
 * Block (x, y) copies bytes [y * GATHER_SPAN, (y + 1) * GATHER_SPAN) of piece
 * x.  The descriptors travel in the launch's parameters (the driver copies
 * them at launch), so nothing has to outlive the call that enqueues them.
 * The layout must match struct gather_args in src/gpu/cuda.c.
 */
#include <stdint.h>

#define GATHER_MAX 64		/* pieces per launch */
#define GATHER_SPAN 8192	/* bytes per block: two 16-byte loads per thread */
#define GATHER_THREADS 256

struct gather_piece {
	uint64_t dst, src, len;
};

struct gather_args {
	uint32_t n;
	struct gather_piece p[GATHER_MAX];
};

extern "C" __global__ void __launch_bounds__(GATHER_THREADS) gdx_gather(const struct gather_args a)
{
	const struct gather_piece *pc = &a.p[blockIdx.x];
	uint64_t start = (uint64_t)blockIdx.y * GATHER_SPAN, end, i;
	char *dst = (char *)pc->dst;
	const char *src = (const char *)pc->src;

	if (blockIdx.x >= a.n || start >= pc->len)
		return;
	end = start + GATHER_SPAN < pc->len ? start + GATHER_SPAN : pc->len;
	if (!((pc->dst | pc->src) & 15)) {
		/* both loads issued before either store: two PCIe reads in flight per thread */
		uint64_t vend = start + ((end - start) & ~(uint64_t)15);
		bool h0, h1;
		uint4 v0, v1;

		i = start + threadIdx.x * 16;
		h0 = i < vend;
		h1 = i + GATHER_SPAN / 2 < vend;
		if (h0)
			v0 = *(const uint4 *)(src + i);
		if (h1)
			v1 = *(const uint4 *)(src + i + GATHER_SPAN / 2);
		if (h0)
			*(uint4 *)(dst + i) = v0;
		if (h1)
			*(uint4 *)(dst + i + GATHER_SPAN / 2) = v1;
		start = vend;
	}
	/* the unaligned rest (a tail under 16 bytes, or a piece not 16-aligned) byte by byte */
	for (i = start + threadIdx.x; i < end; i += blockDim.x)
		dst[i] = src[i];
}
