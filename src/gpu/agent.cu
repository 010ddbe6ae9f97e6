/* SPDX-License-Identifier: MIT */
/*
 * The copy agent's worker on the cuda device: one block that stays resident
 * and copies pieces from pinned host memory into device memory as the CPU
 * describes them in descriptor rings (pinned, read by the GPU over PCIe), so
 * that a receiver thread hands a copy over with plain stores instead of a
 * driver call.  The protocol and the memory layout are those of
 * include/gdx/plugin/device.h (struct gdx_agent_*); src/gpu/agent.c is the
 * host side and src/gpu/emulated.c runs the same loop on a host thread.
 *
 * Kept for reference and for regenerating src/gpu/agent_ptx.h with
 * `scripts/gen_ptx.sh agent` (the driver JIT-compiles the committed PTX; it
 * needs sm_70: acquire loads, release stores and nanosleep).
 *
 * Worker w owns rings w, w + nworkers, ...  Its thread 0 watches their tails
 * and the stop word; the block takes up to AG_BATCH descriptors of one ring,
 * cuts them into 4 KiB units and its warps copy the units, eight 16-byte loads
 * in flight per lane.  Once every thread's stores are fenced at system scope,
 * thread 0 publishes the ring's done word (the seq of the last descriptor):
 * the CPU then knows both that the data landed and that the ring bytes and
 * the descriptors may be reused.  After idle_ns without work the worker clears
 * its live word, looks at the tails once more (the CPU, having published a
 * tail, looks at live: one of the two sees the other's store) and ends; the
 * CPU launches it again when it finds live clear.
 */
#include <stdint.h>

#define AG_THREADS 256
#define AG_WARPS (AG_THREADS / 32)
#define AG_BATCH 32
#define AG_UNIT 4096
#define AG_MAX_OWN 64

struct agent_desc {
	uint64_t dst, src;
	uint32_t len, seq;
	uint64_t rsvd;
};

struct agent_ring {
	uint32_t tail;
	uint32_t pad0[15];
	uint32_t done;
	uint32_t pad1[15];
};

struct agent_worker {
	uint32_t live;
	uint32_t err;
	uint32_t pad[14];
};

struct agent_args {
	uint64_t stop, workers, rings, descs;
	uint64_t idle_ns;
	uint32_t nrings, entries, worker, nworkers;
};

#define AG_ERR_SEQ 1	/* a descriptor did not carry the seq its slot should hold */
#define AG_ERR_OWN 2	/* more rings per worker than it can track */

static __device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ void st_release(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ uint64_t now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* The first owned ring, from rr on, with descriptors not taken yet; -1 if none. */
static __device__ int find_work(const struct agent_args &a, const uint32_t *next, unsigned nown,
				unsigned rr, uint32_t *n)
{
	struct agent_ring *rings = (struct agent_ring *)a.rings;

	for (unsigned j = 0; j < nown; j++) {
		unsigned k = (rr + j) % nown;
		uint32_t t = ld_acquire(&rings[a.worker + k * a.nworkers].tail);

		if (t != next[k] - 1) {
			uint32_t avail = t - (next[k] - 1);

			*n = avail < AG_BATCH ? avail : AG_BATCH;
			return (int)k;
		}
	}
	return -1;
}

extern "C" __global__ void __launch_bounds__(AG_THREADS) gdx_copy_agent(const struct agent_args a)
{
	__shared__ uint32_t next[AG_MAX_OWN];	/* seq of the next descriptor per owned ring */
	__shared__ struct agent_desc d[AG_BATCH];
	__shared__ uint32_t first[AG_BATCH + 1];	/* first unit of each descriptor */
	__shared__ int cmd, ring_k;
	__shared__ uint32_t take;
	struct agent_worker *w = (struct agent_worker *)a.workers + a.worker;
	struct agent_ring *rings = (struct agent_ring *)a.rings;
	const struct agent_desc *descs = (const struct agent_desc *)a.descs;
	unsigned nown = a.worker < a.nrings ? (a.nrings - 1 - a.worker) / a.nworkers + 1 : 0;
	unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32, rr = 0;
	uint64_t idle_since = 0;

	if (tid == 0) {
		st_release(&w->live, 1);
		if (nown > AG_MAX_OWN) {
			w->err = AG_ERR_OWN;
			nown = 0;
		}
		for (unsigned k = 0; k < nown; k++)
			next[k] = *(volatile uint32_t *)&rings[a.worker + k * a.nworkers].done + 1;
		idle_since = now_ns();
	}
	__syncthreads();
	for (;;) {
		if (tid == 0) {
			uint32_t n = 0;
			int k = -1;

			cmd = 0;
			if (ld_acquire((const uint32_t *)a.stop) || nown == 0) {
				cmd = 2;
			} else if ((k = find_work(a, next, nown, rr, &n)) >= 0) {
				cmd = 1;
			} else if (now_ns() - idle_since > a.idle_ns) {
				/* going idle: clear live, then look once more (see the top) */
				st_release(&w->live, 0);
				__threadfence_system();
				k = find_work(a, next, nown, rr, &n);
				if (k >= 0) {
					st_release(&w->live, 1);
					cmd = 1;
				} else {
					cmd = 3;
				}
			} else {
				__nanosleep(200);
			}
			if (cmd == 1) {
				ring_k = k;
				take = n;
				rr = (unsigned)k + 1;
				idle_since = now_ns();
			}
		}
		__syncthreads();
		if (cmd >= 2)
			break;
		if (cmd == 0) {
			/* every thread has read cmd before thread 0 writes the next */
			__syncthreads();
			continue;
		}

		unsigned k = (unsigned)ring_k, n = take, r = a.worker + k * a.nworkers;
		const struct agent_desc *base = descs + (uint64_t)r * a.entries;

		if (tid < n) {
			const volatile struct agent_desc *s = base + ((next[k] + tid) & (a.entries - 1));

			d[tid].dst = s->dst;
			d[tid].src = s->src;
			d[tid].len = s->len;
			d[tid].seq = s->seq;
		}
		__syncthreads();
		if (tid == 0) {
			first[0] = 0;
			for (unsigned i = 0; i < n; i++) {
				if (d[i].seq != next[k] + i) {
					w->err = AG_ERR_SEQ;
					cmd = 2;
				}
				first[i + 1] = first[i] + (d[i].len + AG_UNIT - 1) / AG_UNIT;
			}
		}
		__syncthreads();
		if (cmd == 2)
			break;
		for (unsigned u = warp, i = 0; u < first[n]; u += AG_WARPS) {
			while (first[i + 1] <= u)
				i++;
			uint64_t off = (uint64_t)(u - first[i]) * AG_UNIT;
			uint32_t len = d[i].len - (uint32_t)off < AG_UNIT ? d[i].len - (uint32_t)off
									  : AG_UNIT;
			const char *src = (const char *)d[i].src + off;
			char *dst = (char *)d[i].dst + off;
			uint32_t o = 0;

			if (!(((uintptr_t)src | (uintptr_t)dst) & 15)) {
				/* all eight loads issued before any store: eight PCIe reads in flight */
				uint32_t vlen = len & ~15u;
				uint4 v[8];

#pragma unroll
				for (int j = 0; j < 8; j++) {
					o = (j * 32 + lane) * 16;
					if (o < vlen)
						v[j] = __ldcv((const uint4 *)(src + o));
				}
#pragma unroll
				for (int j = 0; j < 8; j++) {
					o = (j * 32 + lane) * 16;
					if (o < vlen)
						*(uint4 *)(dst + o) = v[j];
				}
				o = vlen;
			}
			/* the unaligned rest byte by byte; volatile: ring bytes are rewritten */
			for (o += lane; o < len; o += 32)
				dst[o] = *(const volatile char *)(src + o);
		}
		__threadfence_system();
		__syncthreads();
		if (tid == 0) {
			next[k] += n;
			st_release(&rings[r].done, next[k] - 1);
		}
	}
	if (tid == 0 && cmd == 2)
		st_release(&w->live, 0);
}
