// SPDX-License-Identifier: MIT
//
// What bounds the copy agent at 128 KiB pieces (docs/measurements/nvmf-speed.md,
// session 13): GPU-side copies of pinned host memory into device memory, piece
// by piece, measured with and without what a round of the agent adds (a poll of
// a host word before each round, a system-scope fence and a done-word store after
// it), by two ways of reading host memory from the SMs: the agent's loads (warps
// of 16-byte loads, 4 KiB a warp in flight) and Hopper's bulk copies
// (cp.async.bulk through shared memory, one thread issuing, 128 KiB in flight a
// block), and the copy engine beside them; each alone and while CPU threads copy
// host memory (as loopback TCP does under the NVMe/TCP benchmark).  Rows "wsp"
// (session 14): the same loads with each warp taking whole pieces and fencing
// only its own, so that a fence does not drain the block's copies.
// Not part of gdx's build (it needs nvcc; gdx does not):
//   nvcc -O2 -arch=sm_90 -o gpu_agent_copy bench/gpu_agent_copy.cu -lpthread && ./gpu_agent_copy
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static const size_t HBUF = 64u << 20, DBUF = 64u << 20, TOTAL = 512u << 20;
enum { F_FENCE = 1, F_POLL = 2 };

__device__ __forceinline__ uint32_t ld_sys(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void st_rel(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

// One warp copies 4 KiB as the agent does: eight 16-byte loads a lane in flight, then the stores.
__device__ __forceinline__ void copy_unit(const char *src, char *dst, unsigned lane)
{
	uint4 v[8];
#pragma unroll
	for (int j = 0; j < 8; j++)
		v[j] = __ldcv((const uint4 *)src + j * 32 + lane);
#pragma unroll
	for (int j = 0; j < 8; j++)
		((uint4 *)dst)[j * 32 + lane] = v[j];
}

// the agent's copy: pieces of `piece` bytes, block b takes pieces b, b + grid, ...;
// a round is `per_round` pieces, then (flags) a fence and a done store, and a poll
// of a host word (warp 0, the others waiting) before the next
__global__ void k_lsu(const char *src, char *dst, size_t piece, size_t npieces, int per_round,
		      int flags, uint32_t *done, const uint32_t *host_word)
{
	unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
	unsigned units = (unsigned)(piece / 4096);
	uint32_t round = 0;

	for (size_t p0 = blockIdx.x * (size_t)per_round; p0 < npieces;
	     p0 += (size_t)gridDim.x * per_round) {
		if (flags & F_POLL) {
			if (warp == 0 && lane == 0)
				round += ld_sys(host_word);
			__syncthreads();
		}
		size_t np = npieces - p0 < (size_t)per_round ? npieces - p0 : (size_t)per_round;
		for (unsigned u = warp; u < np * units; u += nwarps) {
			size_t p = p0 + u / units;
			size_t off = (p * piece) % HBUF + (size_t)(u % units) * 4096;
			size_t doff = (p * piece) % DBUF + (size_t)(u % units) * 4096;
			copy_unit(src + off, dst + doff, lane);
		}
		if (flags & F_FENCE) {
			__threadfence_system();
			__syncthreads();
			if (threadIdx.x == 0)
				st_rel(&done[blockIdx.x * 16], ++round);
		}
	}
}

// Warps on their own: warp w of block b takes pieces b * nwarps + w, then every
// grid's worth of warps further; each warp copies its piece, fences its own
// stores and stores its done word, and (flags) polls a host word before the
// next, with no block-wide barrier: one warp's fence waits for that warp's
// copies only, while the block's other warps keep their loads in flight.
__global__ void k_wsp(const char *src, char *dst, size_t piece, size_t npieces, int flags,
		      uint32_t *done, const uint32_t *host_word)
{
	unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
	unsigned units = (unsigned)(piece / 4096);
	size_t gw = (size_t)blockIdx.x * nwarps + warp, step = (size_t)gridDim.x * nwarps;
	uint32_t round = 0;

	for (size_t p = gw; p < npieces; p += step) {
		if (flags & F_POLL) {
			uint32_t v = lane == 0 ? ld_sys(host_word) : 0;

			round += __shfl_sync(0xffffffffu, v, 0);
		}
		for (unsigned u = 0; u < units; u++) {
			size_t off = (p * piece) % HBUF + (size_t)u * 4096;
			size_t doff = (p * piece) % DBUF + (size_t)u * 4096;
			copy_unit(src + off, dst + doff, lane);
		}
		if (flags & F_FENCE) {
			__threadfence_system();
			__syncwarp();
			if (lane == 0)
				st_rel(&done[gw * 16], ++round);
		}
	}
}

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t phase)
{
	uint32_t ok = 0;

	while (!ok)
		asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;"
			     " selp.u32 %0, 1, 0, p; }" : "=r"(ok) : "r"(bar), "r"(phase) : "memory");
}

// Bulk copies: one thread per block streams its pieces through `stages` buffers of
// `unit` bytes in shared memory (load global -> shared, then store shared -> global);
// a round ends with every store complete, a fence and the done store.
__global__ void k_tma(const char *src, char *dst, size_t piece, size_t npieces, int per_round,
		      int flags, uint32_t *done, const uint32_t *host_word, unsigned unit,
		      unsigned stages)
{
	extern __shared__ __align__(128) char sm[];
	__shared__ __align__(8) uint64_t bars[16];
	unsigned upp = (unsigned)(piece / unit);
	uint32_t round = 0;

	if (threadIdx.x)
		return;
	for (unsigned s = 0; s < stages; s++)
		asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[s])));
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	uint32_t phase_bits = 0;	/* bit s: the parity stage s waits for next */

	for (size_t p0 = blockIdx.x * (size_t)per_round; p0 < npieces;
	     p0 += (size_t)gridDim.x * per_round) {
		if (flags & F_POLL)
			round += ld_sys(host_word);
		size_t np = npieces - p0 < (size_t)per_round ? npieces - p0 : (size_t)per_round;
		size_t n = np * upp;
		auto gaddr = [&](size_t u, bool d) {
			size_t p = p0 + u / upp;
			return (d ? (p * piece) % DBUF : (p * piece) % HBUF) + (u % upp) * unit;
		};
		auto load = [&](size_t u) {
			unsigned s = (unsigned)(u % stages);
			uint32_t b = smem_addr(&bars[s]);

			asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
				     :: "r"(b), "r"(unit) : "memory");
			asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
				     " [%0], [%1], %2, [%3];"
				     :: "r"(smem_addr(sm + (size_t)s * unit)), "l"(src + gaddr(u, false)),
					"r"(unit), "r"(b) : "memory");
		};
		for (size_t u = 0; u < n && u < stages; u++)
			load(u);
		for (size_t u = 0; u < n; u++) {
			unsigned s = (unsigned)(u % stages);

			bar_wait(smem_addr(&bars[s]), (phase_bits >> s) & 1);
			phase_bits ^= 1u << s;
			asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
				     :: "l"(dst + gaddr(u, true)), "r"(smem_addr(sm + (size_t)s * unit)),
					"r"(unit) : "memory");
			asm volatile("cp.async.bulk.commit_group;" ::: "memory");
			/* the previous unit's store has read its stage: load into it */
			if (u >= 1 && u - 1 + stages < n) {
				asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
				load(u - 1 + stages);
			}
		}
		asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
		if (flags & F_FENCE) {
			__threadfence_system();
			st_rel(&done[blockIdx.x * 16], ++round);
		}
	}
}

static std::atomic<int> load_stop;
static void *cpu_load(void *arg)
{
	size_t n = 256u << 20;
	char *a = (char *)malloc(n), *b = (char *)malloc(n);

	memset(a, 1, n);
	memset(b, 2, n);
	while (!load_stop.load(std::memory_order_relaxed)) {
		memcpy(b, a, n);
		memcpy(a, b, n);
	}
	free(a);
	free(b);
	return arg;
}

struct run_args {
	const char *src;
	char *dst;
	uint32_t *done, *word;
	cudaStream_t st;
};

static double run(const run_args &r, const char *kind, int blocks, size_t piece, int per_round,
		  int flags, int threads, unsigned unit, unsigned stages)
{
	size_t npieces = TOTAL / piece;
	cudaEvent_t e0, e1;
	float ms;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int rep = 0; rep < 2; rep++) {	/* the first is a warm-up */
		CK(cudaEventRecord(e0, r.st));
		if (!strcmp(kind, "lsu"))
			k_lsu<<<blocks, threads, 0, r.st>>>(r.src, r.dst, piece, npieces, per_round, flags,
							  r.done, r.word);
		else if (!strcmp(kind, "wsp"))
			k_wsp<<<blocks, threads, 0, r.st>>>(r.src, r.dst, piece, npieces, flags, r.done,
							  r.word);
		else if (!strcmp(kind, "tma"))
			k_tma<<<blocks, 32, (size_t)unit * stages, r.st>>>(r.src, r.dst, piece, npieces,
									per_round, flags, r.done, r.word,
									unit, stages);
		else
			for (size_t p = 0; p < npieces; p++)
				CK(cudaMemcpyAsync(r.dst + (p * piece) % DBUF, r.src + (p * piece) % HBUF,
						   piece, cudaMemcpyHostToDevice, r.st));
		CK(cudaEventRecord(e1, r.st));
		CK(cudaEventSynchronize(e1));
		CK(cudaGetLastError());
	}
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return TOTAL / (ms * 1e6);
}

static void check(const run_args &r, const char *kind, unsigned unit, unsigned stages)
{
	static char *back;

	if (!back)
		back = (char *)malloc(DBUF);
	CK(cudaMemset(r.dst, 0, DBUF));
	run(r, kind, 4, 128 << 10, 1, F_FENCE, 256, unit, stages);
	CK(cudaMemcpy(back, r.dst, DBUF, cudaMemcpyDeviceToHost));
	printf("# %s copy %s\n", kind, memcmp(back, r.src, DBUF) ? "WRONG" : "exact");
}

/* The rows of the agent's loads and the engine (bulk false), or of the bulk copies. */
static void table(const run_args &r, int nload, bool bulk)
{
	for (int l = 0; l < 2; l++) {
		pthread_t th[64];

		if (l) {
			load_stop = 0;
			for (int i = 0; i < nload; i++)
				pthread_create(&th[i], NULL, cpu_load, NULL);
		}
		for (size_t piece : { (size_t)128 << 10, (size_t)1 << 20 }) {
			if (!bulk)
				printf("%-4d %-7s %-6s %-5zu %-6s %-7s %-14s %.1f\n", l ? nload : 0,
				       "engine", "-", piece >> 10, "-", "-", "-",
				       run(r, "ce", 0, piece, 1, 0, 0, 0, 0));
			for (int blocks : { 1, 4, 8, 16 })
				for (int v = 0; v < 10; v++) {
					/* method, threads, flags, per_round, unit, stages */
					static const struct { const char *k; int th, fl, pr; unsigned un, stg; } V[] = {
						{ "lsu", 256, 0, 1, 0, 0 },
						{ "lsu", 256, F_FENCE, 1, 0, 0 },
						{ "lsu", 256, F_FENCE | F_POLL, 1, 0, 0 },
						{ "lsu", 256, F_FENCE | F_POLL, 4, 0, 0 },
						{ "lsu", 1024, F_FENCE | F_POLL, 1, 0, 0 },
						{ "tma", 32, F_FENCE | F_POLL, 1, 16 << 10, 8 },
						{ "tma", 32, F_FENCE | F_POLL, 4, 16 << 10, 8 },
						{ "wsp", 256, 0, 1, 0, 0 },
						{ "wsp", 256, F_FENCE, 1, 0, 0 },
						{ "wsp", 256, F_FENCE | F_POLL, 1, 0, 0 },
					};
					char fl[8], fly[16];

					if (bulk != !strcmp(V[v].k, "tma"))
						continue;

					snprintf(fl, sizeof(fl), "%s%s", V[v].fl & F_FENCE ? "F" : "",
						 V[v].fl & F_POLL ? "P" : "");
					snprintf(fly, sizeof(fly), "%u KiB",
						 V[v].un ? V[v].un * V[v].stg >> 10 : V[v].th / 32 * 4);
					printf("%-4d %-7s %-6d %-5zu %-6d %-7s %-14s %.1f\n", l ? nload : 0,
					       V[v].k, blocks, piece >> 10, V[v].pr, fl[0] ? fl : "-", fly,
					       run(r, V[v].k, blocks, piece, V[v].pr, V[v].fl, V[v].th,
						   V[v].un, V[v].stg));
				}
		}
		if (l) {
			load_stop = 1;
			for (int i = 0; i < nload; i++)
				pthread_join(th[i], NULL);
		}
	}
}

int main(int argc, char **argv)
{
	int nload = argc > 1 ? atoi(argv[1]) : 8;
	run_args r;
	char *src;

	CK(cudaHostAlloc(&src, HBUF, cudaHostAllocMapped));
	for (size_t i = 0; i < HBUF / 8; i++)
		((uint64_t *)src)[i] = i * 0x9e3779b97f4a7c15ull;
	r.src = src;
	CK(cudaMalloc(&r.dst, DBUF));
	CK(cudaHostAlloc(&r.done, 64 * 16 * 64, cudaHostAllocMapped));	/* a line per warp */
	CK(cudaHostAlloc(&r.word, 64, cudaHostAllocMapped));
	*r.word = 0;
	CK(cudaStreamCreateWithFlags(&r.st, cudaStreamNonBlocking));
	CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10));
	/* rows as they come: a bulk copy of host memory that faults ends the program */
	setvbuf(stdout, NULL, _IOLBF, 0);
	check(r, "lsu", 0, 0);
	check(r, "wsp", 0, 0);
	printf("%-4s %-7s %-6s %-5s %-6s %-7s %-14s %s\n", "load", "method", "blocks", "piece",
	       "round", "flags", "in flight/blk", "GB/s");
	table(r, nload, false);
	/* the bulk copies last, after their own check */
	check(r, "tma", 16 << 10, 8);
	table(r, nload, true);
	return 0;
}
