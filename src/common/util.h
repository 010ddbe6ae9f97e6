/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_UTIL_H
#define GDX_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#define GDX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GDX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GDX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define GDX_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define GDX_ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a) - 1))
#define GDX_IS_ALIGNED(x, a) (((x) & ((__typeof__(x))(a) - 1)) == 0)
#define GDX_CONTAINER_OF(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))
#define GDX_UNUSED __attribute__((unused))
#define GDX_LIKELY(x) __builtin_expect(!!(x), 1)
#define GDX_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline uint64_t gdx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One step of a spin-wait: lets the sibling hyperthread run and saves power. */
static inline void gdx_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/*
 * The next poll window of a thread that polls before it sleeps, as guest
 * halt-polling adapts its own: gap is how long the last sleep waited for its
 * event, counted from the end of the thread's last busy stretch.  A gap within
 * the cap means polling a little longer would have caught the event without a
 * wake-up, so the window grows to cover it (x1.25); a gap beyond the cap means
 * polling would only have burnt the core, so the window halves.
 */
static inline uint64_t gdx_poll_adapt(uint64_t window, uint64_t gap, uint64_t cap)
{
	if (gap > cap)
		return window / 2;
	return GDX_MIN(cap, GDX_MAX(window, gap + gap / 4));
}

/*
 * The iovecs left after n of their bytes went (a short sendmsg or recvmsg):
 * whole ones are stepped over, the first partial one trimmed in place; *cnt
 * becomes the number left.
 */
static inline struct iovec *gdx_iov_advance(struct iovec *iov, int *cnt, size_t n)
{
	while (*cnt > 0 && n >= iov->iov_len) {
		n -= iov->iov_len;
		iov++;
		(*cnt)--;
	}
	if (*cnt > 0) {
		iov->iov_base = (char *)iov->iov_base + n;
		iov->iov_len -= n;
	}
	return iov;
}

#endif
