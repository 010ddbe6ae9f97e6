/* SPDX-License-Identifier: MIT */
/*
 * The copy agent's worker on the cuda device: one block that stays resident
 * and copies pieces between pinned host memory and device memory (either way) as the CPU
 * describes them in descriptor rings (pinned, read by the GPU over PCIe), so
 * that a receiver thread hands a copy over with plain stores instead of a
 * driver call.  The protocol and the memory layout are those of
 * include/gdx/plugin/device.h (struct gdx_agent_*); src/gpu/agent.c is the
 * host side and src/gpu/emulated.c runs the same protocol on a host thread.
 *
 * Kept for reference and for regenerating src/gpu/agent_ptx.h with
 * `scripts/gen_ptx.sh agent` (the driver JIT-compiles the committed PTX; it
 * needs sm_70: relaxed and release accesses at system scope, acq_rel fences
 * and nanosleep).
 *
 * Worker w owns rings w, w + nworkers, ...  Its warp 0 polls: its lanes are
 * split between up to 32 owned rings, at most AG_POLL per ring, each lane
 * loads one slot (the ring's next one, the one after, ...), and every lane's
 * load is in flight at once, with the stop word's, so one bus round trip both
 * finds work and reads the descriptors.  Each ring's run of ready slots is
 * taken, up to the first whose destination overlaps an earlier one's: a round.
 * Two groups of eight warps take the rounds in turn; a group cuts its round's
 * copies into 4 KiB units and its warps copy the units, eight 16-byte loads
 * in flight per lane, at any alignment (copy_unit).  Once every thread of the
 * group fenced its stores at system scope, each ring's done word gets the seq
 * of its last descriptor taken, in the order of the rounds: the CPU then
 * knows both that the data landed and that the ring bytes and the slots may
 * be reused.  The groups are the point:
 * a system fence drains what its thread has in flight, so with one group the
 * copies stopped once a round, fence, barrier and poll in turn (on an H200
 * beside loopback TCP, four workers fencing per 128 KiB piece copied 30.8 GB/s
 * where the same loads without the fence copied 48.4; bench/gpu_agent_copy.cu);
 * with two, one group's fence overlaps the other's copies, and warp 0 polls
 * for the next round meanwhile.  A round whose copies overlap the destination
 * of one the other group still copies waits for it, so copies posted to a ring
 * still land in order where they overlap.
 *
 * After idle_ns without work the worker clears its live word,
 * polls every owned ring once more (the CPU, having posted, looks at live:
 * one of the two sees the other's store) and ends; the CPU launches it again
 * when it finds live clear.
 */
#include <stdint.h>

#define AG_GROUPS 2
#define AG_GROUP_WARPS 8
#define AG_GROUP_THREADS (AG_GROUP_WARPS * 32)
/* warp 0 polls, the groups copy; src/gpu/cuda.c launches this many */
#define AG_THREADS (32 + AG_GROUPS * AG_GROUP_THREADS)
#define AG_UNIT 4096
#define AG_MAX_OWN 64
#define AG_FULL 0xffffffffu
/*
 * Slots a poll loads per ring: a run this long is taken per round.  Each is a
 * 48-byte read over the bus, and an idle worker polls about once a
 * microsecond: 32 per ring would cost a GB/s of PCIe reads per worker.
 */
#define AG_POLL 4
static_assert(AG_POLL < 32, "a ring's lanes are a part of the warp");

struct agent_desc {
	uint64_t w[8];		/* dst lo, dst hi, src lo, src hi, len: seq in each high half */
};

struct agent_ring {
	uint32_t done;
	uint32_t pad[15];
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

/* src/gpu/agent.c checks include/gdx/plugin/device.h against the same figures. */
static_assert(sizeof(struct agent_desc) == 64, "a descriptor is one 64-byte line");
static_assert(sizeof(struct agent_ring) == 64, "a ring's done word has its own line");
static_assert(sizeof(struct agent_worker) == 64, "a worker's words have their own line");
static_assert(sizeof(struct agent_args) == 56, "the kernel's argument layout");

#define AG_ERR_OWN 2	/* more rings per worker than it can track */

struct agent_copy {
	uint64_t dst, src;
	uint32_t len;
};

/* What warp 0 hands a group for one round of copies. */
struct agent_round {
	struct agent_copy c[32];
	uint32_t first[33];		/* first unit of each copy */
	uint32_t pub_ring[32], pub_seq[32];	/* done words to store after the copies */
	uint32_t n, npub;
	uint32_t round;			/* its place in the order of done words */
};

/* The block's shared state: warp 0 writes next and the rounds, the groups the rest. */
struct agent_shared {
	uint32_t next[AG_MAX_OWN];	/* seq of the next descriptor per owned ring */
	struct agent_round r[AG_GROUPS];
	uint32_t full[AG_GROUPS];	/* r[g] handed to group g, until its done words are out */
	uint32_t published;		/* rounds whose done words are out */
	uint32_t exit;			/* warp 0 ended (every round done before) */
};

static __device__ __forceinline__ uint32_t ld_relaxed(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ void ld_relaxed2(const uint64_t *p, uint64_t &a, uint64_t &b)
{
	asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];"
		     : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

static __device__ __forceinline__ void st_release(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ void fence_acq_rel(void)
{
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

static __device__ __forceinline__ uint64_t now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/*
 * A copy of more than one unit from a source not at a 64-byte boundary (a
 * user's buffer at an odd offset) is cut where its source crosses a 4 KiB
 * boundary, so that every unit but the first reads whole lines of one page:
 * an H200 copied 128 KiB from 3 bytes into pinned pages to 3 bytes into
 * device memory at 0.42 of an aligned copy's rate cut from the copy's start,
 * at 0.83 cut so.  gdx's own rings place pieces at 64-byte boundaries and
 * keep the cut from the start; a copy of one unit or less stays one unit, so
 * that warp 0 still copies a lone one itself.  Returns the lead: the first
 * unit holds AG_UNIT - lead bytes, the others AG_UNIT (the last what is left).
 */
static __device__ __forceinline__ uint32_t unit_lead(uint64_t src, uint32_t len)
{
	return len > AG_UNIT && (src & 63) ? (uint32_t)(src & (AG_UNIT - 1)) : 0;
}

/*
 * One poll by warp 0 of owned rings rr, rr + 1, ... (up to 32 of them), with
 * the stop word's load in flight beside the slots'.  Takes each ring's run of
 * ready descriptors into s (copies, units, done words to publish) and returns
 * how many it took, the same in every lane; *stop: the stop word was set.
 */
static __device__ unsigned poll(const struct agent_args &a, uint32_t *next, struct agent_round &s,
				unsigned nown, unsigned rr, unsigned lane, bool *stop)
{
	const struct agent_desc *descs = (const struct agent_desc *)a.descs;
	unsigned ngroups = nown < 32 ? nown : 32, per = 32 / ngroups < AG_POLL ? 32 / ngroups : AG_POLL;
	unsigned g = lane / per, i = lane % per, k = (rr + g) % nown, run = 0, units = 0;
	bool mine = g < ngroups, valid = false, take;
	uint32_t seq = 0, st = 0;
	uint64_t w[6];

	if (lane == 0)
		st = ld_relaxed((const uint32_t *)a.stop);
	if (mine) {
		const uint64_t *p;

		seq = next[k] + i;
		p = descs[(uint64_t)(a.worker + k * a.nworkers) * a.entries +
			  (seq & (a.entries - 1))].w;
		ld_relaxed2(p, w[0], w[1]);
		ld_relaxed2(p + 2, w[2], w[3]);
		ld_relaxed2(p + 4, w[4], w[5]);
		valid = w[0] >> 32 == seq && w[1] >> 32 == seq && w[2] >> 32 == seq &&
			w[3] >> 32 == seq && w[4] >> 32 == seq;
	}
	*stop = __shfl_sync(AG_FULL, st, 0) != 0;
	/* a ring's run: its lanes' ready slots from the group's first lane on */
	unsigned ready = __ballot_sync(AG_FULL, valid);
	if (mine) {
		unsigned gb = (ready >> (g * per)) & ((1u << per) - 1);

		run = __ffs(~gb) - 1;
	}
	/*
	 * The copies of one round land in any order: a descriptor whose
	 * destination overlaps an earlier one of its run ends the run, and goes
	 * in the next round, after the earlier one's copy is fenced.  So copies
	 * posted to one ring land in order where they overlap.
	 */
	uint64_t dst = valid ? (uint32_t)w[0] | (w[1] << 32) : 0;
	uint32_t len = valid ? (uint32_t)w[4] : 0;
	bool clash = false;

	for (unsigned j = 0; j < per; j++) {
		uint64_t od = __shfl_sync(AG_FULL, dst, (g * per + j) & 31);
		uint32_t ol = __shfl_sync(AG_FULL, len, (g * per + j) & 31);

		if (j < i && i < run && od < dst + len && dst < od + ol)
			clash = true;
	}
	unsigned clashes = __ballot_sync(AG_FULL, clash);
	if (mine) {
		unsigned cb = (clashes >> (g * per)) & ((1u << per) - 1);

		if (cb && (unsigned)__ffs(cb) - 1 < run)
			run = __ffs(cb) - 1;
	}
	take = mine && i < run;
	unsigned took = __ballot_sync(AG_FULL, take);
	if (!took)
		return 0;
	/* the data behind the descriptors, for this warp and, past the barrier, the block */
	fence_acq_rel();
	unsigned below = __popc(took & ((1u << lane) - 1));
	if (take) {
		uint64_t src = (uint32_t)w[2] | (w[3] << 32);

		s.c[below].dst = dst;
		s.c[below].src = src;
		s.c[below].len = len;
		units = (unit_lead(src, len) + len + AG_UNIT - 1) / AG_UNIT;
	}
	/* the copies lie in lane order: an inclusive sum of units gives each one's end */
	for (unsigned o = 1; o < 32; o <<= 1) {
		uint32_t v = __shfl_up_sync(AG_FULL, units, o);

		if (lane >= o)
			units += v;
	}
	if (take)
		s.first[below + 1] = units;
	bool lead = take && i == 0;
	unsigned leads = __ballot_sync(AG_FULL, lead);
	if (lead) {
		unsigned j = __popc(leads & ((1u << lane) - 1));

		next[k] += run;
		s.pub_ring[j] = a.worker + k * a.nworkers;
		s.pub_seq[j] = next[k] - 1;
	}
	if (lane == 0) {
		s.first[0] = 0;
		s.n = __popc(took);
		s.npub = __popc(leads);
	}
	__syncwarp();
	return s.n;
}

/*
 * Warp 0 polls until there is work (returns 1, the round in s), the stop word
 * is set (2), or the worker has been idle for idle_ns and a last poll of every
 * ring after clearing live found nothing (3: live stays clear).
 */
static __device__ int wait_for_work(const struct agent_args &a, uint32_t *next,
				    struct agent_round &s, struct agent_worker *w, unsigned nown,
				    unsigned lane, unsigned &rr, uint64_t &idle_since)
{
	unsigned closing = 0;	/* polls since live was cleared */

	for (;;) {
		bool stop = true;
		unsigned n = nown ? poll(a, next, s, nown, rr, lane, &stop) : 0;

		if (stop)
			return 2;
		/* past 32 rings, the next poll looks at the next 32, work or not */
		if (nown > 32)
			rr = (rr + 32) % nown;
		if (n) {
			if (closing && lane == 0)
				st_release(&w->live, 1);
			idle_since = now_ns();
			return 1;
		}
		if (closing) {
			if (++closing > (nown + 31) / 32)
				return 3;
		} else if (__shfl_sync(AG_FULL, lane == 0 && now_ns() - idle_since > a.idle_ns, 0)) {
			/*
			 * Going idle (lane 0's clock decides for the warp, whose lanes
			 * must not part around the shuffles): clear live, then poll
			 * every ring once more (see the top).
			 */
			if (lane == 0)
				st_release(&w->live, 0);
			__syncwarp();
			__threadfence_system();
			closing = 1;
		} else {
			__nanosleep(100);
		}
	}
}

static __device__ __forceinline__ uint32_t ld_shared(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

static __device__ __forceinline__ void st_shared(uint32_t *p, uint32_t v)
{
	*(volatile uint32_t *)p = v;
}

/*
 * The 16 bytes from byte sh (1..15) on of the 32 in a then b: a destination
 * word whose source bytes straddle two aligned source words.  sh is the same
 * in every lane, so the selects cost no divergence and c stays in registers.
 */
static __device__ __forceinline__ uint4 straddle(uint4 a, uint4 b, unsigned sh)
{
	const uint32_t c[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
	unsigned q = sh >> 2, r = (sh & 3) * 8;
	uint32_t d[5];

#pragma unroll
	for (int m = 0; m < 5; m++)
		d[m] = q == 0 ? c[m] : q == 1 ? c[m + 1] : q == 2 ? c[m + 2] : c[m + 3];
	return make_uint4(__funnelshift_r(d[0], d[1], r), __funnelshift_r(d[1], d[2], r),
			  __funnelshift_r(d[2], d[3], r), __funnelshift_r(d[3], d[4], r));
}

static __device__ __forceinline__ uint4 shfl4(uint4 v, int src, bool down)
{
	if (down)
		return make_uint4(__shfl_down_sync(AG_FULL, v.x, src), __shfl_down_sync(AG_FULL, v.y, src),
				  __shfl_down_sync(AG_FULL, v.z, src), __shfl_down_sync(AG_FULL, v.w, src));
	return make_uint4(__shfl_sync(AG_FULL, v.x, src), __shfl_sync(AG_FULL, v.y, src),
			  __shfl_sync(AG_FULL, v.z, src), __shfl_sync(AG_FULL, v.w, src));
}

/*
 * One warp copies unit u of round s; i: the copy it lies in, found from the
 * last one's (units rise).  Every store but those of a head (under 16
 * bytes) and a tail (under 32) is a 16-byte store to an aligned destination,
 * and every load of the body a 16-byte load, eight in flight per lane,
 * whatever the two ends' alignment, so that a user's buffer at an odd offset
 * (a tensor's slice) is not copied byte by byte: on an H200 such copies of
 * 128 KiB to 1 MiB ran at 0.55-0.95 of an aligned copy's rate where source
 * and destination differ mod 16, 0.75-1.0 where they do not, against 0.01-0.2
 * byte by byte (bench/agent_offset_gpu.sh).  Where they differ, each
 * destination word is cut out of two aligned source words, the second a
 * shuffle from the next lane; those loads reach up to 15 bytes before and
 * after the body, never past the 16-byte words that hold its bytes, so never
 * into another page.  All loads bypass the caches (ld.cv): ring bytes are
 * rewritten between copies.
 */
static __device__ __forceinline__ void copy_unit(const struct agent_round &s, unsigned u,
						 unsigned &i, unsigned lane)
{
	while (s.first[i + 1] <= u)
		i++;
	/* in 32 bits: gdx_copy_agent_post keeps lead + len + AG_UNIT below 2^32 */
	uint32_t r = u - s.first[i], lead = unit_lead(s.c[i].src, s.c[i].len);
	uint32_t off = r ? r * AG_UNIT - lead : 0, end = (r + 1) * AG_UNIT - lead;
	uint32_t len = (end < s.c[i].len ? end : s.c[i].len) - off;
	const char *src = (const char *)s.c[i].src + off;
	char *dst = (char *)s.c[i].dst + off;
	/* head: the bytes before the destination's first 16-byte boundary */
	uint32_t head = (uint32_t)(-(uintptr_t)dst & 15);

	if (head > len)
		head = len;
	const char *bsrc = src + head;
	char *bdst = dst + head;
	unsigned sh = (unsigned)((uintptr_t)bsrc & 15);
	/*
	 * The body: whole 16-byte words, at most the 255 whose source words the
	 * lanes' 256 loads hold when they straddle (the 256th needs a 257th);
	 * the tail: the rest, under 32 bytes.
	 */
	uint32_t vlen = (len - head) & ~15u, tail, o;
	char hb = 0, tb = 0;

	if (sh && vlen > AG_UNIT - 16)
		vlen = AG_UNIT - 16;
	tail = len - head - vlen;
	uint4 v[8];

	/* the ends' bytes loaded with the body's words: one bus round trip per unit, not three */
	if (lane < head)
		hb = __ldcv(src + lane);
	if (lane < tail)
		tb = __ldcv(bsrc + vlen + lane);
	if (!sh) {
		/* eight loads a lane in flight */
#pragma unroll
		for (int j = 0; j < 8; j++) {
			o = (j * 32 + lane) * 16;
			if (o < vlen)
				v[j] = __ldcv((const uint4 *)(bsrc + o));
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			o = (j * 32 + lane) * 16;
			if (o < vlen)
				*(uint4 *)(bdst + o) = v[j];
		}
	} else {
		/* destination word k from source words k and k + 1 (lane 31: the next row's first) */
		const uint4 *w = (const uint4 *)(bsrc - sh);
		uint32_t nw = vlen ? (sh + vlen + 15) / 16 : 0;

#pragma unroll
		for (int j = 0; j < 8; j++) {
			uint32_t k = j * 32 + lane;

			v[j] = k < nw ? __ldcv(w + k) : make_uint4(0, 0, 0, 0);
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			uint4 next = shfl4(v[j], 1, true);

			/* the last row's lane 31 has no next word: vlen stops before it */
			if (j < 7) {
				uint4 first = shfl4(v[j + 1], 0, false);

				if (lane == 31)
					next = first;
			}
			o = (j * 32 + lane) * 16;
			if (o < vlen)
				*(uint4 *)(bdst + o) = straddle(v[j], next, sh);
		}
	}
	if (lane < head)
		dst[lane] = hb;
	if (lane < tail)
		bdst[vlen + lane] = tb;
}

/*
 * One warp stores round s's done words, its copies fenced, once every earlier
 * round's are out (published), and counts it out.  Block-scope fences order
 * the stores of two warps to a done word: both are of this block, so the
 * order of their shared word carries over to the word in host memory.
 */
static __device__ void publish(const struct agent_args &a, struct agent_shared &sh,
			       const struct agent_round &s, unsigned lane)
{
	struct agent_ring *rings = (struct agent_ring *)a.rings;

	while (ld_shared(&sh.published) != s.round)
		;
	__threadfence_block();
	if (lane < s.npub)
		st_release(&rings[s.pub_ring[lane]].done, s.pub_seq[lane]);
	__syncwarp();
	__threadfence_block();
	if (lane == 0)
		st_shared(&sh.published, s.round + 1);
}

/* A barrier of group g's threads alone (barrier 0 is __syncthreads'). */
static __device__ __forceinline__ void group_sync(unsigned g)
{
	asm volatile("bar.sync %0, %1;" :: "r"(g + 1), "n"(AG_GROUP_THREADS) : "memory");
}

/* Whether a copy of round s overlaps a copy of round o, the same in every lane. */
static __device__ bool rounds_overlap(const struct agent_round &s, const struct agent_round &o,
				      unsigned lane)
{
	bool hit = false;

	if (lane < s.n) {
		uint64_t d = s.c[lane].dst, e = d + s.c[lane].len;

		for (unsigned j = 0; j < o.n; j++)
			if (o.c[j].dst < e && d < o.c[j].dst + o.c[j].len)
				hit = true;
	}
	return __any_sync(AG_FULL, hit);
}

/*
 * Warp 0: rounds to the groups in turn, each once the group is done with its
 * previous one; a round overlapping the other group's waits for that one.  On
 * stop or idle it lets the groups finish and sets exit.
 */
static __device__ void poller(const struct agent_args &a, struct agent_shared &sh,
			      struct agent_worker *w, unsigned nown, unsigned lane)
{
	uint64_t idle_since = now_ns();
	unsigned rr = 0, g = 0;
	uint32_t round = 0;
	int cmd;

	for (;;) {
		struct agent_round &s = sh.r[g];

		while (ld_shared(&sh.full[g]))
			__nanosleep(32);
		cmd = wait_for_work(a, sh.next, s, w, nown, lane, rr, idle_since);
		if (cmd != 1)
			break;
		if (lane == 0)
			s.round = round;
		round++;
		__syncwarp();
		/*
		 * A lone unit with every earlier round out: this warp copies it
		 * itself, as main's one-group block did, without a hand-over (a
		 * lone 4 KiB copy landed 1.5-2 us later through a group).  Lane
		 * 0's look decides for the warp: a group may count out meanwhile.
		 */
		if (__shfl_sync(AG_FULL, s.first[s.n] <= 1 && ld_shared(&sh.published) == s.round,
				0)) {
			unsigned i = 0;

			if (s.first[s.n])
				copy_unit(s, 0, i, lane);
			__threadfence_system();
			__syncwarp();
			publish(a, sh, s, lane);
			continue;
		}
		/* one look for the warp, whose lanes rounds_overlap's vote needs */
		if (__shfl_sync(AG_FULL, ld_shared(&sh.full[g ^ 1]), 0) &&
		    rounds_overlap(sh.r[g], sh.r[g ^ 1], lane))
			while (ld_shared(&sh.full[g ^ 1]))
				__nanosleep(32);
		/* the round before the word that hands it over */
		__threadfence_block();
		__syncwarp();
		if (lane == 0)
			st_shared(&sh.full[g], 1);
		g ^= 1;
	}
	while (ld_shared(&sh.full[0]) || ld_shared(&sh.full[1]))
		__nanosleep(32);
	if (lane == 0) {
		if (cmd == 2)
			st_release(&w->live, 0);
		__threadfence_block();
		st_shared(&sh.exit, 1);
	}
}

/*
 * Group g (threads gt of AG_GROUP_THREADS) copies rounds g, g + 2, ...: its
 * units spread over its warps; every thread fences its own stores, and once
 * the group's barrier says all did, its first warp stores the round's done
 * words after the previous round's (published), then gives the round back.
 */
static __device__ void group(const struct agent_args &a, struct agent_shared &sh, unsigned g,
			     unsigned gt)
{
	const struct agent_round &s = sh.r[g];
	unsigned gw = gt / 32, lane = gt % 32;

	for (;;) {
		/* no sleep here: a round waiting for its group is a copy's latency */
		if (gt == 0) {
			while (!ld_shared(&sh.full[g]) && !ld_shared(&sh.exit))
				;
			__threadfence_block();
		}
		group_sync(g);
		/* full stays set until this group clears it; exit comes after the last round */
		if (!ld_shared(&sh.full[g]))
			return;

		for (unsigned u = gw, i = 0; u < s.first[s.n]; u += AG_GROUP_WARPS)
			copy_unit(s, u, i, lane);
		__threadfence_system();
		/* every copy of the round fenced */
		group_sync(g);
		if (gw)
			continue;
		/* a ring's done words go out in the order its descriptors were taken */
		publish(a, sh, s, lane);
		if (lane == 0)
			st_shared(&sh.full[g], 0);
	}
}

extern "C" __global__ void __launch_bounds__(AG_THREADS) gdx_copy_agent(const struct agent_args a)
{
	__shared__ struct agent_shared sh;
	struct agent_worker *w = (struct agent_worker *)a.workers + a.worker;
	struct agent_ring *rings = (struct agent_ring *)a.rings;
	unsigned nown = a.worker < a.nrings ? (a.nrings - 1 - a.worker) / a.nworkers + 1 : 0;
	unsigned tid = threadIdx.x;

	if (tid < 32) {
		if (tid == 0) {
			st_release(&w->live, 1);
			sh.full[0] = sh.full[1] = 0;
			sh.published = 0;
			sh.exit = 0;
		}
		if (nown > AG_MAX_OWN) {
			if (tid == 0)
				w->err = AG_ERR_OWN;
			nown = 0;
		}
		for (unsigned k = tid; k < nown; k += 32)
			sh.next[k] = ld_relaxed(&rings[a.worker + k * a.nworkers].done) + 1;
	}
	__syncthreads();
	if (tid < 32)
		poller(a, sh, w, nown, tid);
	else
		group(a, sh, (tid - 32) / AG_GROUP_THREADS, (tid - 32) % AG_GROUP_THREADS);
}
