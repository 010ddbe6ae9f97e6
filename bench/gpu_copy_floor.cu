// SPDX-License-Identifier: MIT
//
// The floor under the copy agent (docs/nvmf-host.md, "the floor of a GPU-side
// copy"): what a copy made on the GPU after the data reached pinned host memory
// costs at the least, measured on the GPU machine beside the agent's figures.
// Prints: a dependent load of pinned host memory from the GPU; a store plus a
// system- and a GPU-scope fence; a CPU <-> GPU ping-pong through pinned words
// (the CPU stores a seq, one warp polls it and stores it back), without and with
// the warp copying 4 KiB from pinned to device memory before answering.
// Not part of gdx's build (it needs nvcc; gdx does not):
//   nvcc -O2 -arch=sm_90 -o gpu_copy_floor bench/gpu_copy_floor.cu && ./gpu_copy_floor
#include <cstdio>
#include <cstdint>
#include <ctime>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__device__ __forceinline__ uint64_t gt() { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ uint32_t ldr(const uint32_t *p) { uint32_t v; asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void str(uint32_t *p, uint32_t v) { asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void strel(uint32_t *p, uint32_t v) { asm volatile("st.relaxed.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
// chain of dependent loads over host memory; fences
__global__ void k_micro(uint32_t *h, uint32_t *d, uint64_t *out) {
	uint64_t t0 = gt(); uint32_t idx = 0;
	for (int i = 0; i < 1000; i++) idx = ldr(h + (idx & 1023));
	uint64_t t1 = gt();
	for (int i = 0; i < 1000; i++) { d[i & 1023] = i + idx; asm volatile("fence.sc.sys;" ::: "memory"); }
	uint64_t t2 = gt();
	for (int i = 0; i < 1000; i++) { d[i & 1023] = i; asm volatile("fence.acq_rel.sys;" ::: "memory"); }
	uint64_t t3 = gt();
	for (int i = 0; i < 1000; i++) { d[i & 1023] = i; __threadfence(); }
	uint64_t t4 = gt();
	out[0] = t1 - t0; out[1] = t2 - t1; out[2] = t3 - t2; out[3] = t4 - t3; out[4] = idx;
}
// ping-pong: host writes seq to req, GPU (warp) polls, optionally copies 4 KiB pinned->device, fences, stores resp
__global__ void k_pong(volatile uint32_t *req, uint32_t *resp, const uint4 *src, uint4 *dst, int n, int copy, int mode) {
	unsigned lane = threadIdx.x;
	for (uint32_t s = 1; s <= (uint32_t)n; s++) {
		if (lane == 0) while (ldr((const uint32_t *)req) != s) __nanosleep(100);
		__syncwarp();
		if (copy) {
			asm volatile("fence.acq_rel.sys;" ::: "memory");
			uint4 v[8];
			for (int j = 0; j < 8; j++) v[j] = __ldcv(src + j * 32 + lane);
			for (int j = 0; j < 8; j++) dst[j * 32 + lane] = v[j];
			if (mode == 0) __threadfence_system(); else __threadfence();
			__syncwarp();
		}
		if (lane == 0) { if (mode == 0) str(resp, s); else strel(resp, s); }
	}
}
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main() {
	uint32_t *h, *d, *req, *resp; uint64_t *out; uint4 *src, *dst;
	CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped)); for (int i = 0; i < 1024; i++) h[i] = (i * 7 + 3) & 1023;
	CK(cudaMalloc(&d, 4096)); CK(cudaHostAlloc(&out, 64, cudaHostAllocMapped));
	k_micro<<<1, 1>>>(h, d, out); CK(cudaDeviceSynchronize());
	k_micro<<<1, 1>>>(h, d, out); CK(cudaDeviceSynchronize());
	printf("floor: dependent ld.relaxed.sys of pinned host memory %.2f us; store+fence.sc.sys %.3f us; store+fence.acq_rel.sys %.3f us; store+fence.gpu %.3f us\n",
	       out[0] / 1000.0 / 1000, out[1] / 1000.0 / 1000, out[2] / 1000.0 / 1000, out[3] / 1000.0 / 1000);
	CK(cudaHostAlloc(&req, 4096, cudaHostAllocMapped)); resp = req + 16; CK(cudaHostAlloc(&src, 4096, cudaHostAllocMapped)); CK(cudaMalloc(&dst, 4096));
	cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int mode = 0; mode < 2; mode++) for (int copy = 0; copy < 2; copy++) {
		const int n = 20000; *(volatile uint32_t *)req = 0; *(volatile uint32_t *)resp = 0;
		k_pong<<<1, 32, 0, st>>>(req, resp, src, dst, n, copy, mode);
		double lat[n]; 
		for (int s = 1; s <= n; s++) {
			double t0 = now(); __atomic_store_n(req, (uint32_t)s, __ATOMIC_RELEASE);
			while (__atomic_load_n((volatile uint32_t *)resp, __ATOMIC_ACQUIRE) != (uint32_t)s) ;
			lat[s - 1] = now() - t0;
		}
		CK(cudaStreamSynchronize(st));
		// median
		for (int i = 1; i < n; i++) { double v = lat[i]; int j = i - 1; while (j >= 0 && lat[j] > v) { lat[j + 1] = lat[j]; j--; } lat[j + 1] = v; }
		printf("floor: ping-pong %s, %s: median %.2f us, p10 %.2f, p90 %.2f\n", copy ? "with 4 KiB copy" : "no copy",
		       mode ? "fence.gpu + relaxed store" : "fence.sys + release store", lat[n / 2] / 1e3, lat[n / 10] / 1e3, lat[n * 9 / 10] / 1e3);
	}
	return 0;
}
