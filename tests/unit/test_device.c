/* SPDX-License-Identifier: MIT */
/*
 * The device suite: written once against the public API and run on every
 * device.  CI runs it on the emulated device; tests/gpu/run.sh runs the same
 * binary with GDX_DEVICE=cuda on a GPU machine.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"
#include "gpu/device.h"

#include <gdx/gdx.h>

static struct gdx_device *dev;

#define GDX_T_ALIGN(x, a) (((x) + (a) - 1) / (a) * (a))

static int setup(void **state)
{
	(void)state;
	return gdx_device_open(NULL, &dev);
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	return 0;
}

static void spec_parsing(void **state)
{
	struct gdx_device *d;

	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	assert_int_equal(gdx_device_open("emulated:x", &d), -EINVAL);
	assert_int_equal(gdx_device_open("emulated:-1", &d), -EINVAL);
	assert_int_equal(gdx_device_open("nosuch", &d), -EINVAL);
	assert_int_equal(gdx_device_open("emulated:99", &d), GDX_ENODEVICE);
	/* The same device opened twice is one object. */
	assert_int_equal(gdx_device_open(gdx_device_name(dev), &d), 0);
	assert_ptr_equal(d, dev);
	gdx_device_close(d);
	assert_int_equal(gdx_device_count("nosuch"), -EINVAL);
	assert_true(gdx_device_count(gdx_device_kind(dev)) >= 1);
}

static void round_trip_all_kinds(void **state)
{
	const size_t n = (4 << 20) + 123;
	unsigned char *h = malloc(n), *back = malloc(n), *pin;
	void *d1, *d2;

	(void)state;
	t_fill(h, n, 1);
	assert_int_equal(gdx_device_malloc(dev, n, &d1), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d2), 0);
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&pin), 0);

	assert_int_equal(gdx_memcpy(dev, d1, h, n), 0);		/* H2D pageable */
	assert_int_equal(gdx_memcpy(dev, d2, d1, n), 0);		/* D2D */
	assert_int_equal(gdx_memcpy(dev, pin, d2, n), 0);		/* D2H pinned */
	assert_memory_equal(pin, h, n);
	memset(back, 0, n);
	assert_int_equal(gdx_memcpy(dev, back, (char *)d2 + 7, n - 7), 0); /* unaligned */
	assert_memory_equal(back, h + 7, n - 7);

	assert_int_equal(gdx_memset(dev, (char *)d1 + 100, 0xab, 1000), 0);
	assert_int_equal(gdx_memcpy(dev, back, d1, 2000), 0);
	for (int i = 100; i < 1100; i++)
		assert_int_equal(back[i], 0xab);
	assert_int_equal(back[99], h[99]);
	assert_int_equal(back[1100], h[1100]);

	assert_int_equal(gdx_pinned_free(dev, pin), 0);
	assert_int_equal(gdx_device_free(dev, d2), 0);
	assert_int_equal(gdx_device_free(dev, d1), 0);
	free(h);
	free(back);
}

static void pointer_queries(void **state)
{
	struct gdx_ptr_attrs a, b;
	char *host = malloc(4096);
	void *d, *pin;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_pointer_query(dev, (char *)d + 4097, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_DEVICE);
	assert_int_equal(a.device_ordinal, gdx_device_ordinal(dev));
	assert_ptr_equal(a.base, d);
	assert_true(a.size >= (1 << 20));
	assert_true(a.buffer_id != 0);

	assert_int_equal(gdx_pointer_query(dev, host, &b), 0);
	assert_int_equal(b.kind, GDX_MEM_HOST);
	assert_int_equal(b.buffer_id, 0);

	assert_int_equal(gdx_pinned_alloc(dev, 8192, &pin), 0);
	assert_int_equal(gdx_pointer_query(dev, (char *)pin + 10, &b), 0);
	assert_int_equal(b.kind, GDX_MEM_PINNED);
	assert_ptr_equal(b.base, pin);
	assert_int_equal(gdx_pinned_free(dev, pin), 0);

	assert_int_equal(gdx_host_register(dev, host, 4096, 0), 0);
	assert_int_equal(gdx_pointer_query(dev, host + 5, &b), 0);
	assert_int_equal(b.kind, GDX_MEM_PINNED);
	assert_int_equal(gdx_host_unregister(dev, host), 0);
	assert_int_equal(gdx_pointer_query(dev, host, &b), 0);
	assert_int_equal(b.kind, GDX_MEM_HOST);

	/* the lookup layers make per I/O tells the same, from gdx's table of its allocations */
	assert_ptr_equal(gdx_device_of_ptr((char *)d + 4097, &b), dev);
	assert_int_equal(b.kind, GDX_MEM_DEVICE);
	assert_ptr_equal(b.base, d);
	assert_int_equal(b.buffer_id, a.buffer_id);

	/* A new allocation never reuses a buffer id, nor does a freed one stay known. */
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_true(!gdx_device_of_ptr((char *)d + 4097, &b) || b.kind != GDX_MEM_DEVICE ||
		    b.buffer_id != a.buffer_id);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_pointer_query(dev, d, &b), 0);
	assert_true(b.buffer_id != a.buffer_id);
	assert_ptr_equal(gdx_device_of_ptr(d, &a), dev);
	assert_int_equal(a.buffer_id, b.buffer_id);
	assert_int_equal(gdx_device_free(dev, d), 0);
	free(host);
}

static void bad_pointers_are_refused(void **state)
{
	char host[64];
	void *d;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, 4096, &d), 0);
	/* Past the end of the allocation. */
	assert_int_not_equal(gdx_memcpy(dev, host, (char *)d + 4090, 64), 0);
	assert_int_not_equal(gdx_memset(dev, (char *)d + 4000, 0, 200), 0);
	if (!strcmp(gdx_device_kind(dev), "emulated")) {
		/* A host range that runs over a device allocation, refused before any access. */
		assert_int_equal(gdx_memcpy(dev, (char *)d - 4096, host, 3 * 4096), GDX_EBADPTR);
		assert_int_equal(gdx_memcpy(dev, host, (char *)d - 4096, 3 * 4096), GDX_EBADPTR);
		/* Ranges that wrap around the address space. */
		assert_int_equal(gdx_memcpy(dev, host, d, SIZE_MAX), GDX_EBADPTR);
		assert_int_equal(gdx_memcpy(dev, (void *)(UINTPTR_MAX - 10), host, 64), GDX_EBADPTR);
	}
	/* Registering a range that overlaps a registration. */
	assert_int_equal(gdx_host_register(dev, host, sizeof(host), 0), 0);
	assert_int_equal(gdx_host_register(dev, host + 8, 8, 0), -EEXIST);
	assert_int_equal(gdx_host_unregister(dev, host), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	/* Freed, and never allocated. */
	assert_int_not_equal(gdx_device_free(dev, d), 0);
	assert_int_not_equal(gdx_device_free(dev, host), 0);
	assert_int_not_equal(gdx_pinned_free(dev, host), 0);
	assert_int_not_equal(gdx_host_unregister(dev, host), 0);
	assert_int_equal(gdx_device_malloc(dev, 0, &d), -EINVAL);
	assert_int_equal(gdx_memcpy(dev, NULL, host, 1), -EINVAL);
	/* A fill is for device or pinned memory; cuMemsetD8 refuses pageable memory. */
	assert_int_equal(gdx_memset(dev, host, 0, sizeof(host)), -EINVAL);
}

/* On the emulated device the CPU must not reach device memory directly. */
static void cpu_access_to_device_memory_faults(void **state)
{
	volatile unsigned char *d;
	int status;
	pid_t pid;

	(void)state;
	if (strcmp(gdx_device_kind(dev), "emulated"))
		skip();
	assert_int_equal(gdx_device_malloc(dev, 4096, (void **)&d), 0);
	pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		(void)d[0];
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	assert_int_equal(gdx_device_free(dev, (void *)d), 0);
}

/*
 * dma-buf export, where the device has it: the buffer covers the page-aligned
 * range around the bytes asked for, and *offset says where they start.
 */
static void dmabuf_export(void **state)
{
	struct gdx_device_props p;
	const size_t n = 4 << 20;
	uint64_t off = 99;
	char host[64];
	int fd = -1;
	void *d;

	(void)state;
	assert_int_equal(gdx_device_props(dev, &p), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	if (!p.dmabuf_supported) {
		assert_int_equal(gdx_device_export_dmabuf(dev, d, n, &fd, &off), -EOPNOTSUPP);
		assert_int_equal(gdx_device_free(dev, d), 0);
		skip();
	}
	assert_int_equal(gdx_device_export_dmabuf(dev, d, n, &fd, &off), 0);
	assert_true(fd >= 0);
	assert_int_equal(off, 0);
	/* A dma-buf's size is where lseek puts its end. */
	assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)n);
	close(fd);

	assert_int_equal(gdx_device_export_dmabuf(dev, (char *)d + 4096 + 100, 5000, &fd, &off), 0);
	assert_int_equal(off, 100);
	assert_int_equal(lseek(fd, 0, SEEK_END), 8192);
	close(fd);

	/* Out of the allocation, and not device memory at all. */
	assert_int_equal(gdx_device_export_dmabuf(dev, (char *)d + n - 4096, 8192, &fd, &off),
			 -EINVAL);
	assert_int_equal(gdx_device_export_dmabuf(dev, host, sizeof(host), &fd, &off),
			 GDX_EBADPTR);
	assert_int_equal(gdx_device_free(dev, d), 0);
}

/*
 * The NIC's address for device memory (peer memory; on the emulated device
 * the copy engine's view): bytes copied into the device are there to read
 * through it, and bytes stored through it are what the device holds -- what
 * the NIC's DMA does with it.  Without peer memory the device says so.
 */
static void nic_addr_reaches_device_memory(void **state)
{
	const size_t n = 3 * 4096 + 500, off = 4096 + 100, len = 6000;
	unsigned char src[6000], back[6000], host[64];
	void *d, *va = NULL;
	int rc;

	(void)state;
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	rc = gdx_device_nic_addr(dev, (char *)d + off, len, &va);
	if (rc == -EOPNOTSUPP) {
		assert_int_equal(gdx_device_free(dev, d), 0);
		skip();
	}
	assert_int_equal(rc, 0);
	if (strcmp(gdx_device_kind(dev), "emulated")) {
		/* peer memory: the NIC is handed the device pointer itself */
		assert_ptr_equal(va, (char *)d + off);
	} else {
		assert_ptr_not_equal(va, (char *)d + off);
		assert_int_equal(gdx_memcpy(dev, (char *)d + off, src, len), 0);
		assert_memory_equal(va, src, len);
		for (size_t i = 0; i < len; i++)
			((unsigned char *)va)[i] = (unsigned char)~src[i];
		assert_int_equal(gdx_memcpy(dev, back, (char *)d + off, len), 0);
		for (size_t i = 0; i < len; i++)
			assert_int_equal(back[i], (unsigned char)~src[i]);
	}
	/* Past the allocation, and not device memory at all. */
	assert_int_equal(gdx_device_nic_addr(dev, (char *)d + n - 100, 200, &va), -EINVAL);
	assert_int_equal(gdx_device_nic_addr(dev, host, sizeof(host), &va), GDX_EBADPTR);
	assert_int_equal(gdx_device_free(dev, d), 0);
}

struct order_log {
	_Atomic int seq;
	int at[8];
};

static void note_a(void *arg) { struct order_log *l = arg; l->at[0] = atomic_fetch_add(&l->seq, 1); }
static void note_b(void *arg) { struct order_log *l = arg; l->at[1] = atomic_fetch_add(&l->seq, 1); }
static void note_c(void *arg) { struct order_log *l = arg; l->at[2] = atomic_fetch_add(&l->seq, 1); }

static void slow_fn(void *arg)
{
	usleep(50000);
	*(_Atomic int *)arg = 1;
}

static void stream_order_and_host_funcs(void **state)
{
	const size_t n = 1 << 20;
	unsigned char *src, *dst;
	struct gdx_stream *s;
	struct order_log log = { 0 };
	_Atomic int slow_done = 0;
	void *d;

	(void)state;
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&src), 0);
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&dst), 0);
	t_fill(src, n, 7);
	memset(dst, 0, n);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);

	assert_int_equal(gdx_stream_launch_host_func(s, slow_fn, &slow_done), 0);
	assert_int_equal(gdx_stream_query(s), -EBUSY);
	assert_int_equal(gdx_memcpy_async(dev, d, src, n, s), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_a, &log), 0);
	assert_int_equal(gdx_memcpy_async(dev, dst, d, n, s), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_b, &log), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(slow_done, 1);
	assert_int_equal(gdx_stream_query(s), 0);
	assert_int_equal(log.at[0], 0);
	assert_int_equal(log.at[1], 1);
	assert_memory_equal(dst, src, n);

	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
	assert_int_equal(gdx_pinned_free(dev, dst), 0);
}

/*
 * A synchronous free waits for work already queued on the memory, as cuMemFree
 * synchronises: the queued copy still reads what was there.
 */
static void free_waits_for_queued_work(void **state)
{
	const size_t n = 1 << 20;
	unsigned char *src, *dst;
	struct gdx_stream *s;
	_Atomic int slow_done = 0;
	void *d;

	(void)state;
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&src), 0);
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&dst), 0);
	t_fill(src, n, 11);
	memset(dst, 0, n);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, src, n), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, slow_fn, &slow_done), 0);
	assert_int_equal(gdx_memcpy_async(dev, dst, d, n, s), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	if (!strcmp(gdx_device_kind(dev), "emulated"))
		assert_int_equal(slow_done, 1);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_memory_equal(dst, src, n);
	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
	assert_int_equal(gdx_pinned_free(dev, dst), 0);
}

static void events_order_streams(void **state)
{
	struct gdx_stream *s1, *s2;
	struct gdx_event *e, *t0, *t1;
	struct order_log log = { 0 };
	_Atomic int slow_done = 0;
	float ms = -1;

	(void)state;
	assert_int_equal(gdx_stream_create(dev, &s1), 0);
	assert_int_equal(gdx_stream_create(dev, &s2), 0);
	assert_int_equal(gdx_event_create(dev, 0, &e), 0);
	assert_int_equal(gdx_event_create(dev, GDX_EVENT_TIMING, &t0), 0);
	assert_int_equal(gdx_event_create(dev, GDX_EVENT_TIMING, &t1), 0);
	/* A never-recorded event counts as complete. */
	assert_int_equal(gdx_event_query(e), 0);

	assert_int_equal(gdx_event_record(t0, s1), 0);
	assert_int_equal(gdx_stream_launch_host_func(s1, slow_fn, &slow_done), 0);
	assert_int_equal(gdx_stream_launch_host_func(s1, note_a, &log), 0);
	assert_int_equal(gdx_event_record(e, s1), 0);
	assert_int_equal(gdx_event_record(t1, s1), 0);
	assert_int_equal(gdx_event_query(e), -EBUSY);
	assert_int_equal(gdx_event_elapsed_ms(t0, t1, &ms), -EBUSY);
	/* s2 waits for s1's work up to e, so note_b runs after note_a. */
	assert_int_equal(gdx_stream_wait_event(s2, e), 0);
	assert_int_equal(gdx_stream_launch_host_func(s2, note_b, &log), 0);
	assert_int_equal(gdx_stream_synchronize(s2), 0);
	assert_int_equal(log.at[0], 0);
	assert_int_equal(log.at[1], 1);
	assert_int_equal(gdx_event_synchronize(e), 0);
	assert_int_equal(gdx_event_query(e), 0);
	assert_int_equal(gdx_event_synchronize(t1), 0);
	assert_int_equal(gdx_event_elapsed_ms(t0, t1, &ms), 0);
	assert_true(ms >= 40.0f && ms < 5000.0f);
	/* Untimed events cannot be timed. */
	assert_int_equal(gdx_event_elapsed_ms(t0, e, &ms), -EINVAL);

	/* Re-recording moves the event; a wait enqueued now sees the new spot. */
	slow_done = 0;
	assert_int_equal(gdx_stream_launch_host_func(s1, slow_fn, &slow_done), 0);
	assert_int_equal(gdx_event_record(e, s1), 0);
	assert_int_equal(gdx_stream_wait_event(s2, e), 0);
	assert_int_equal(gdx_stream_launch_host_func(s2, note_c, &log), 0);
	/* Destroying an event with work still queued on it is allowed. */
	assert_int_equal(gdx_event_destroy(e), 0);
	assert_int_equal(gdx_stream_synchronize(s2), 0);
	assert_int_equal(slow_done, 1);
	assert_int_equal(log.at[2], 2);

	assert_int_equal(gdx_event_destroy(t0), 0);
	assert_int_equal(gdx_event_destroy(t1), 0);
	assert_int_equal(gdx_stream_destroy(s1), 0);
	assert_int_equal(gdx_stream_destroy(s2), 0);
}

static void stream_ordered_alloc(void **state)
{
	struct gdx_device_props p;
	struct gdx_ptr_attrs a;
	struct gdx_stream *s;
	unsigned char host[4096], back[4096];
	void *d;

	(void)state;
	assert_int_equal(gdx_device_props(dev, &p), 0);
	if (!p.async_alloc_supported)
		skip();
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc_async(dev, 1 << 20, &d, s), 0);
	t_fill(host, sizeof(host), 3);
	assert_int_equal(gdx_memcpy_async(dev, d, host, sizeof(host), s), 0);
	assert_int_equal(gdx_memcpy_async(dev, back, d, sizeof(back), s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_memory_equal(back, host, sizeof(host));
	assert_int_equal(gdx_pointer_query(dev, (char *)d + 100, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_DEVICE);
	assert_ptr_equal(a.base, d);
	assert_int_equal(gdx_device_free_async(dev, d, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(gdx_stream_destroy(s), 0);
}

/*
 * A batch of copies: pinned pieces scattered into device memory in one call
 * (one driver call on CUDA 12.8+), a zero-size entry among them, in stream
 * order with the copies before and after it; bad arguments are refused.
 */
static void batched_copies(void **state)
{
	enum { N = 70, PIECE = 512 };	/* more than one driver batch of 64 */
	void *dsts[N], *srcs[N];
	size_t sizes[N];
	struct gdx_stream *s;
	unsigned char *pin, back[N * PIECE], want[N * PIECE];
	void *d;

	(void)state;
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc(dev, sizeof(back), &d), 0);
	assert_int_equal(gdx_pinned_alloc(dev, sizeof(back), (void **)&pin), 0);
	t_fill(pin, sizeof(back), 11);
	assert_int_equal(gdx_memset_async(dev, d, 0x5a, sizeof(back), s), 0);
	for (unsigned i = 0; i < N; i++) {
		/* piece i of the source lands at piece N-1-i of the destination */
		dsts[i] = (char *)d + (size_t)(N - 1 - i) * PIECE;
		srcs[i] = pin + (size_t)i * PIECE;
		sizes[i] = i == 7 ? 0 : PIECE;
	}
	assert_int_equal(gdx_memcpy_batch_async(dev, dsts, (const void *const *)srcs, sizes, N, s),
			 0);
	assert_int_equal(gdx_memcpy_async(dev, back, d, sizeof(back), s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	for (unsigned i = 0; i < N; i++) {
		if (i == 7)
			memset(want + (size_t)(N - 1 - i) * PIECE, 0x5a, PIECE);
		else
			memcpy(want + (size_t)(N - 1 - i) * PIECE, pin + (size_t)i * PIECE, PIECE);
	}
	assert_memory_equal(back, want, sizeof(back));
	/* without the zero-size entry: the whole batch goes to the device at once */
	sizes[7] = PIECE;
	assert_int_equal(gdx_memset_async(dev, d, 0, sizeof(back), s), 0);
	assert_int_equal(gdx_memcpy_batch_async(dev, dsts, (const void *const *)srcs, sizes, N, s),
			 0);
	assert_int_equal(gdx_memcpy_async(dev, back, d, sizeof(back), s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	memcpy(want + (size_t)(N - 8) * PIECE, pin + 7 * PIECE, PIECE);
	assert_memory_equal(back, want, sizeof(back));
	assert_int_equal(gdx_memcpy_batch_async(dev, dsts, (const void *const *)srcs, sizes, 0, s),
			 0);
	assert_int_equal(gdx_memcpy_batch_async(dev, NULL, (const void *const *)srcs, sizes, 2, s),
			 -EINVAL);
	assert_int_equal(gdx_memcpy_batch_async(NULL, dsts, (const void *const *)srcs, sizes, 2, s),
			 -EINVAL);
	dsts[1] = NULL;
	assert_int_equal(gdx_memcpy_batch_async(dev, dsts, (const void *const *)srcs, sizes, 2, s),
			 -EINVAL);
	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_pinned_free(dev, pin), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
}

/*
 * Many pieces of every size and alignment from pinned, registered and
 * pageable host memory in one batch: on cuda the small pinned ones go
 * through the gather kernel (up to 64 per launch), the rest to the copy
 * engine, and the result must be that of copying them one after another:
 * first laid out apart (long runs for the kernel), then at random places
 * that overlap, where a later piece must win wherever it lands; then again
 * after the sources were rewritten in place (no stale bytes may land).
 */
static void gathered_copies(void **state)
{
	enum { N = 400, DST = 1 << 20, SRC = 1 << 20 };
	uint64_t seed = (uint64_t)time(NULL), rs;
	unsigned char *src[3], *mirror, *back;
	void **dsts, **srcs;
	size_t *sizes;
	int kinds[N];
	struct gdx_stream *s;
	char *d;

	(void)state;
	print_message("gathered_copies: seed %llu\n", (unsigned long long)seed);
	rs = seed;
	dsts = calloc(N, sizeof(*dsts));
	srcs = calloc(N, sizeof(*srcs));
	sizes = calloc(N, sizeof(*sizes));
	mirror = malloc(DST);
	back = malloc(DST);
	assert_non_null(dsts && srcs && sizes && mirror && back);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc(dev, DST, (void **)&d), 0);
	assert_int_equal(gdx_pinned_alloc(dev, SRC, (void **)&src[0]), 0);
	src[1] = aligned_alloc(4096, SRC);
	src[2] = malloc(SRC);
	assert_non_null(src[1] && src[2]);
	assert_int_equal(gdx_host_register(dev, src[1], SRC, 0), 0);
	for (int k = 0; k < 3; k++)
		t_fill(src[k], SRC, seed + (uint64_t)k);
	for (int round = 0; round < 3; round++) {
		size_t at = 0;

		/* new bytes at the same host addresses: what a reused ring sees */
		if (round == 2)
			for (int k = 0; k < 3; k++)
				t_fill(src[k], SRC, seed + 7 + (uint64_t)k);

		memset(mirror, 0xa5, DST);
		assert_int_equal(gdx_memset_async(dev, d, 0xa5, DST, s), 0);
		for (unsigned i = 0; i < N; i++) {
			uint64_t r = t_rand(&rs);
			int kind = r % 8 == 0 ? 2 : r % 8 == 1 ? 1 : 0;	/* mostly pinned */
			size_t len, soff, doff;

			switch (r >> 8 & 7) {
			case 0: len = 70000 + (r >> 16) % 200000; break;	/* over the kernel's limit */
			case 1: len = 1 + (r >> 16) % 64; break;
			case 2: len = 65536; break;
			default: len = (r >> 11 & 1) ? 4096 : 1 + (r >> 16) % 9000; break;
			}
			soff = (r >> 12 & 1) ? GDX_T_ALIGN((r >> 24) % (SRC - len), 16) :
			       (r >> 24) % (SRC - len);
			if (round != 1 && at + len <= DST) {
				doff = at;
				at = GDX_T_ALIGN(at + len + (r >> 40) % 3 * 7, (r >> 13 & 1) ? 16 : 1);
			} else {
				doff = (r >> 40) % (DST - len);
				if (r >> 14 & 1)
					doff &= ~(size_t)15;
			}
			dsts[i] = d + doff;
			srcs[i] = src[kind] + soff;
			sizes[i] = len;
			kinds[i] = kind;
			memcpy(mirror + doff, src[kind] + soff, len);
		}
		assert_int_equal(gdx_memcpy_batch_async(dev, dsts, (const void *const *)srcs, sizes,
							N, s), 0);
		assert_int_equal(gdx_memcpy_async(dev, back, d, DST, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		if (memcmp(back, mirror, DST)) {
			size_t o = 0;

			while (back[o] == mirror[o])
				o++;
			/* the pieces that land on the first wrong byte, in batch order */
			print_message("gathered_copies: round %d, first wrong byte at %zu\n", round, o);
			for (unsigned i = 0; i < N; i++) {
				size_t doff = (size_t)((char *)dsts[i] - d);

				if (doff <= o && o < doff + sizes[i])
					print_message("  piece %u: %s, %zu bytes, dst %zu (mod 16: %zu), "
						      "src mod 16: %zu\n", i,
						      kinds[i] == 0 ? "pinned" :
						      kinds[i] == 1 ? "registered" : "pageable",
						      sizes[i], doff, doff % 16,
						      (size_t)((uintptr_t)srcs[i] % 16));
			}
		}
		assert_memory_equal(back, mirror, DST);
	}
	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_host_unregister(dev, src[1]), 0);
	assert_int_equal(gdx_pinned_free(dev, src[0]), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	free(src[1]);
	free(src[2]);
	free(mirror);
	free(back);
	free(dsts);
	free(srcs);
	free(sizes);
}

static void wrapped_stream(void **state)
{
	struct gdx_stream *s, *w;
	struct order_log log = { 0 };

	(void)state;
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_non_null(gdx_stream_native(s));
	assert_int_equal(gdx_stream_wrap(dev, gdx_stream_native(s), &w), 0);
	assert_ptr_equal(gdx_stream_native(w), gdx_stream_native(s));
	assert_int_equal(gdx_stream_launch_host_func(w, note_a, &log), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_b, &log), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(log.at[0], 0);
	assert_int_equal(log.at[1], 1);
	/* Destroying the wrapper leaves the stream usable. */
	assert_int_equal(gdx_stream_destroy(w), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_c, &log), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(log.at[2], 2);
	assert_int_equal(gdx_stream_destroy(s), 0);
}

/* Work done on a host thread joins stream order through a 32-bit word. */
static void stream_waits_for_value(void **state)
{
	struct order_log log = { 0 };
	struct gdx_stream *s;
	uint32_t *flag, host_word = 0;

	(void)state;
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&flag), 0);
	*flag = 0xfffffffeu;	/* the comparison is wrap-safe */
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_stream_wait_value32(s, flag, 0xffffffffu), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_a, &log), 0);
	assert_int_equal(gdx_stream_wait_value32(s, flag, 1), 0);
	assert_int_equal(gdx_stream_launch_host_func(s, note_b, &log), 0);
	usleep(50000);
	assert_int_equal(gdx_stream_query(s), -EBUSY);
	assert_int_equal(atomic_load(&log.seq), 0);
	__atomic_store_n(flag, 0xffffffffu, __ATOMIC_RELEASE);
	/* the stream's worker sees the word when it is scheduled: up to 10 s on a loaded machine */
	for (int i = 0; i < 2000 && atomic_load(&log.seq) < 1; i++)
		usleep(5000);
	assert_int_equal(atomic_load(&log.seq), 1);
	assert_int_equal(gdx_stream_query(s), -EBUSY);
	__atomic_store_n(flag, 2, __ATOMIC_RELEASE);	/* wrapped past 1 */
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(log.at[1], 1);
	/* Only pinned memory can be waited on; the word must be aligned. */
	assert_int_equal(gdx_stream_wait_value32(s, &host_word, 0), GDX_EBADPTR);
	assert_int_equal(gdx_stream_wait_value32(s, (uint32_t *)((char *)flag + 1), 0), -EINVAL);
	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_pinned_free(dev, flag), 0);
}

/* A stream reports how far it got through a word it stores after its earlier work. */
static void stream_writes_value(void **state)
{
	const size_t n = 64 << 10;
	struct gdx_stream *s;
	uint32_t *words, host_word = 0;
	unsigned char *src, *dst;
	void *d;
	int i;

	(void)state;
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&words), 0);
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&src), 0);
	assert_int_equal(gdx_pinned_alloc(dev, n, (void **)&dst), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	memset(words, 0, 4096);
	for (size_t k = 0; k < n; k++)
		src[k] = (unsigned char)(k * 7 + 1);
	memset(dst, 0, n);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	/* words[0] holds the stream; words[1] says when the copies behind it are done. */
	assert_int_equal(gdx_stream_wait_value32(s, &words[0], 1), 0);
	assert_int_equal(gdx_memcpy_async(dev, d, src, n, s), 0);
	assert_int_equal(gdx_memcpy_async(dev, dst, d, n, s), 0);
	assert_int_equal(gdx_stream_write_value32(s, &words[1], 7), 0);
	usleep(50000);
	assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&words[0], 1, __ATOMIC_RELEASE);
	for (i = 0; i < 5000 && __atomic_load_n(&words[1], __ATOMIC_ACQUIRE) != 7; i++)
		usleep(1000);
	assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE), 7);
	/* The copy into host memory is visible once the word is. */
	assert_memory_equal(dst, src, n);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	/* Only pinned memory: not plain host memory, not device memory; aligned words. */
	assert_int_equal(gdx_stream_write_value32(s, &host_word, 1), GDX_EBADPTR);
	assert_int_equal(gdx_stream_write_value32(s, d, 1), GDX_EBADPTR);
	assert_int_equal(gdx_stream_wait_value32(s, d, 1), GDX_EBADPTR);
	assert_int_equal(gdx_stream_write_value32(s, (uint32_t *)((char *)words + 2), 1), -EINVAL);
	assert_int_equal(gdx_stream_write_value32(NULL, words, 1), -EINVAL);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(host_word, 0);
	assert_int_equal(gdx_stream_destroy(s), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, dst), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
	assert_int_equal(gdx_pinned_free(dev, words), 0);
}

/* ---- copy agent ---------------------------------------------------------- */

#define AG_SRC (1u << 20)	/* pinned source bytes per producer */
#define AG_PIECES 96		/* pieces per round: more than the ring holds */

struct ag_producer {
	struct gdx_copy_agent *a;
	unsigned ring, rounds;
	unsigned char *src;	/* pinned */
	unsigned char *dst;	/* device: AG_SRC bytes of this producer's own */
	unsigned char *want, *got;
	uint64_t seed;
	int err;
};

/* An agent of rings and workers (0: the defaults), entries descriptors a ring. */
static struct gdx_copy_agent *ag_start(unsigned rings, unsigned workers, unsigned entries,
				       unsigned idle_us)
{
	struct gdx_copy_agent_opts o;
	struct gdx_copy_agent *a = NULL;

	gdx_copy_agent_opts_init(&o, sizeof(o));
	if (rings)
		o.rings = rings;
	if (workers)
		o.workers = workers;
	o.entries = entries;
	if (idle_us)
		o.idle_us = idle_us;
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), 0);
	return a;
}

/* Waits (bounded) until the ring's done word reaches seq; 0 or why not. */
static int ag_wait(struct gdx_copy_agent *a, unsigned ring, uint32_t seq)
{
	const uint32_t *w = gdx_copy_agent_done_word(a, ring);

	for (unsigned i = 0; (int32_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - seq) < 0; i++) {
		int rc = gdx_copy_agent_status(a);

		if (rc)
			return rc;
		if (i > 200000)
			return -ETIMEDOUT;
		usleep(i < 100 ? 0 : 50);
	}
	return 0;
}

/*
 * One producer per ring: rounds of pieces of random size and alignment from
 * its pinned source to its device range, back to back and not overlapping
 * (copies in flight land in any order), more than the ring holds at once
 * (posts answered -EAGAIN wait for the oldest); the source is refilled only
 * once the round's copies have landed.
 */
static void *ag_produce(void *arg)
{
	struct ag_producer *p = arg;

	for (unsigned round = 0; round < p->rounds && !p->err; round++) {
		size_t at = 0;
		uint32_t seq = 0;

		t_fill(p->src, AG_SRC, p->seed + round);
		for (unsigned i = 0; i < AG_PIECES && !p->err; i++) {
			size_t len = 1 + (size_t)(t_rand(&p->seed) % (i % 3 ? 4096 : 20000));
			size_t soff, doff;
			int rc;

			/* even pieces start 16-aligned on both sides, odd ones anywhere */
			if (i % 2 == 0)
				at = (at + 15) / 16 * 16;
			else
				at += (size_t)(t_rand(&p->seed) % 16);
			if (at + len > AG_SRC)
				break;
			doff = at;
			soff = (size_t)(t_rand(&p->seed) % (AG_SRC - len));
			if (i % 2 == 0)
				soff = soff / 16 * 16;
			at += len;
			while ((rc = gdx_copy_agent_post(p->a, p->ring, p->dst + doff, p->src + soff,
							 len, &seq)) == -EAGAIN)
				rc = ag_wait(p->a, p->ring, seq - 8);
			if (rc) {
				p->err = rc;
				break;
			}
			memcpy(p->want + doff, p->src + soff, len);
		}
		if (!p->err)
			p->err = ag_wait(p->a, p->ring, seq);
		/* idle now and then, so that workers end and are launched again */
		if (round % 2)
			usleep(3000);
	}
	return NULL;
}

static void copy_agent_copies(void **state)
{
	enum { RINGS = 7 };
	struct gdx_copy_agent *a;
	struct ag_producer p[RINGS];
	pthread_t th[RINGS];
	unsigned char *dmem;

	(void)state;
	a = ag_start(RINGS, 3, 32, 1000);
	assert_int_equal(gdx_device_malloc(dev, (size_t)RINGS * AG_SRC, (void **)&dmem), 0);
	assert_int_equal(gdx_memset(dev, dmem, 0, (size_t)RINGS * AG_SRC), 0);
	for (unsigned i = 0; i < RINGS; i++) {
		p[i] = (struct ag_producer){ .a = a, .ring = i, .rounds = 6, .seed = 77 + i,
					     .dst = dmem + (size_t)i * AG_SRC };
		assert_int_equal(gdx_pinned_alloc(dev, AG_SRC, (void **)&p[i].src), 0);
		p[i].want = calloc(1, AG_SRC);
		p[i].got = malloc(AG_SRC);
		assert_non_null(p[i].want);
		assert_non_null(p[i].got);
	}
	/* allocations first: on a GPU some wait for running kernels, workers among them */
	for (unsigned i = 0; i < RINGS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, ag_produce, &p[i]), 0);
	for (unsigned i = 0; i < RINGS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(gdx_copy_agent_status(a), 0);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	for (unsigned i = 0; i < RINGS; i++) {
		assert_int_equal(p[i].err, 0);
		assert_int_equal(gdx_memcpy(dev, p[i].got, p[i].dst, AG_SRC), 0);
		assert_memory_equal(p[i].got, p[i].want, AG_SRC);
		assert_int_equal(gdx_pinned_free(dev, p[i].src), 0);
		free(p[i].want);
		free(p[i].got);
	}
	assert_int_equal(gdx_device_free(dev, dmem), 0);
}

/*
 * Copies out of device memory into pinned memory, on a ring of their own,
 * while another ring's producer copies the other way (ag_produce): pieces of
 * random size and alignment from a device range filled beforehand into a
 * pinned range the CPU then reads straight, with no copy of its own behind.
 */
static void copy_agent_copies_to_host(void **state)
{
	struct gdx_copy_agent *a;
	struct ag_producer up;
	pthread_t th;
	unsigned char *dsrc, *pdst, *pat, *want;
	uint64_t seed = 4242;
	size_t at = 0;
	uint32_t seq = 0;
	int rc = 0;

	(void)state;
	a = ag_start(2, 2, 32, 1000);
	assert_int_equal(gdx_device_malloc(dev, 2 * AG_SRC, (void **)&dsrc), 0);
	assert_int_equal(gdx_pinned_alloc(dev, AG_SRC, (void **)&pdst), 0);
	up = (struct ag_producer){ .a = a, .ring = 0, .rounds = 4, .seed = 99,
				   .dst = dsrc + AG_SRC };
	assert_int_equal(gdx_pinned_alloc(dev, AG_SRC, (void **)&up.src), 0);
	up.want = calloc(1, AG_SRC);
	up.got = malloc(AG_SRC);
	pat = malloc(AG_SRC);
	want = calloc(1, AG_SRC);
	assert_true(up.want && up.got && pat && want);
	t_fill(pat, AG_SRC, 31);
	assert_int_equal(gdx_memcpy(dev, dsrc, pat, AG_SRC), 0);
	assert_int_equal(gdx_memset(dev, dsrc + AG_SRC, 0, AG_SRC), 0);
	memset(pdst, 0, AG_SRC);
	assert_int_equal(pthread_create(&th, NULL, ag_produce, &up), 0);
	for (unsigned i = 0; i < 4 * AG_PIECES && !rc; i++) {
		size_t len = 1 + (size_t)(t_rand(&seed) % (i % 3 ? 4096 : 20000));
		size_t soff;

		at += i % 2 ? (size_t)(t_rand(&seed) % 16) : (16 - at % 16) % 16;
		if (at + len > AG_SRC)
			break;
		soff = (size_t)(t_rand(&seed) % (AG_SRC - len));
		if (i % 2 == 0)
			soff = soff / 16 * 16;
		while ((rc = gdx_copy_agent_post(a, 1, pdst + at, dsrc + soff, len, &seq)) ==
		       -EAGAIN)
			rc = ag_wait(a, 1, seq - 8);
		memcpy(want + at, pat + soff, len);
		at += len;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(ag_wait(a, 1, seq), 0);
	assert_memory_equal(pdst, want, AG_SRC);
	pthread_join(th, NULL);
	assert_int_equal(up.err, 0);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_memcpy(dev, up.got, up.dst, AG_SRC), 0);
	assert_memory_equal(up.got, up.want, AG_SRC);
	assert_int_equal(gdx_pinned_free(dev, up.src), 0);
	assert_int_equal(gdx_pinned_free(dev, pdst), 0);
	assert_int_equal(gdx_device_free(dev, dsrc), 0);
	free(up.want);
	free(up.got);
	free(pat);
	free(want);
}

/*
 * Copies posted to one ring over overlapping destinations land in the order
 * posted: rounds of pieces at shifting offsets of one small range, each from
 * a source of its own bytes, posted back to back so that a worker finds many
 * at once; the range must hold what copying them one by one would leave.
 */
static void copy_agent_overlaps_in_order(void **state)
{
	enum { PIECES = 200, RANGE = 16384 };
	struct gdx_copy_agent *a;
	unsigned char *src, *dmem, *want, *got;
	uint64_t seed = 4242;
	uint32_t seq = 0;
	int rc;

	(void)state;
	a = ag_start(0, 0, 64, 0);
	assert_int_equal(gdx_pinned_alloc(dev, (size_t)PIECES * RANGE, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, RANGE, (void **)&dmem), 0);
	assert_int_equal(gdx_memset(dev, dmem, 0, RANGE), 0);
	want = calloc(1, RANGE);
	got = malloc(RANGE);
	assert_non_null(want);
	assert_non_null(got);
	t_fill(src, (size_t)PIECES * RANGE, 99);
	for (unsigned i = 0; i < PIECES; i++) {
		/* whole range, halves, and odd pieces that straddle the others' edges */
		size_t len = i % 3 == 0 ? RANGE : i % 3 == 1 ? RANGE / 2 :
			     1 + (size_t)(t_rand(&seed) % (RANGE - 1));
		size_t off = (size_t)(t_rand(&seed) % (RANGE - len + 1));
		const unsigned char *s = src + (size_t)i * RANGE;

		while ((rc = gdx_copy_agent_post(a, 0, dmem + off, s, len, &seq)) == -EAGAIN)
			rc = ag_wait(a, 0, seq - 8);
		assert_int_equal(rc, 0);
		memcpy(want + off, s, len);
	}
	assert_int_equal(ag_wait(a, 0, seq), 0);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_memcpy(dev, got, dmem, RANGE), 0);
	assert_memory_equal(got, want, RANGE);
	free(want);
	free(got);
	assert_int_equal(gdx_device_free(dev, dmem), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

/*
 * Every pair of source and destination offsets mod 16, either way, at lengths
 * around the agent's 16-byte words and 4 KiB units, sources at 64-byte
 * boundaries (as the staging rings place them) and off them (a copy cut at
 * the source's pages): the bytes land exactly, the ones beside each
 * destination stay as they were (the cuda agent cuts an unaligned copy into a
 * byte-wise head and tail around 16-byte stores, each made of two aligned
 * loads where the offsets differ).
 */
static void copy_agent_any_alignment(void **state)
{
	static const size_t lens[] = { 1, 15, 17, 100, 4095, 4113, 9000 };
	enum { NLEN = sizeof(lens) / sizeof(lens[0]), SLOT = 9088, N = 16 * 16 * NLEN };
	const size_t total = (size_t)N * SLOT;
	struct gdx_copy_agent *a;
	unsigned char *pin, *dmem, *pat, *want, *got;
	uint32_t seq = 0;

	(void)state;
	a = ag_start(1, 1, 64, 0);
	assert_int_equal(gdx_pinned_alloc(dev, total, (void **)&pin), 0);
	assert_int_equal(gdx_device_malloc(dev, total, (void **)&dmem), 0);
	pat = malloc(total);
	want = malloc(total);
	got = malloc(total);
	assert_true(pat && want && got);
	for (int pass = 0; pass < 4; pass++) {
		/* h2d: pattern in pinned memory, device filled; d2h: the other way round */
		int d = pass & 1;
		size_t base = pass & 2 ? 32 : 0;	/* 0: a source at 64 bytes each 16th copy */
		unsigned char *src = d ? dmem : pin, *dst = d ? pin : dmem;

		t_fill(pat, total, 7 + d);
		memset(want, 0xa5, total);
		if (d) {
			assert_int_equal(gdx_memcpy(dev, dmem, pat, total), 0);
			memset(pin, 0xa5, total);
		} else {
			memcpy(pin, pat, total);
			assert_int_equal(gdx_memset(dev, dmem, 0xa5, total), 0);
		}
		for (unsigned i = 0; i < N; i++) {
			size_t so = (size_t)i * SLOT + base + i % 16;
			size_t doff = (size_t)i * SLOT + 32 + i / 16 % 16;
			size_t len = lens[i / 256];
			int rc;

			while ((rc = gdx_copy_agent_post(a, 0, dst + doff, src + so, len, &seq)) ==
			       -EAGAIN)
				assert_int_equal(ag_wait(a, 0, seq - 32), 0);
			assert_int_equal(rc, 0);
			memcpy(want + doff, pat + so, len);
		}
		assert_int_equal(ag_wait(a, 0, seq), 0);
		if (d)
			memcpy(got, pin, total);
		else
			assert_int_equal(gdx_memcpy(dev, got, dmem, total), 0);
		for (unsigned i = 0; i < N; i++)
			if (memcmp(got + (size_t)i * SLOT, want + (size_t)i * SLOT, SLOT))
				fail_msg("%s: source at %zu mod 64, destination at %u mod 16, %zu "
					 "bytes: wrong", d ? "d2h" : "h2d", base + i % 16, i / 16 % 16,
					 lens[i / 256]);
	}
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_pinned_free(dev, pin), 0);
	assert_int_equal(gdx_device_free(dev, dmem), 0);
	free(pat);
	free(want);
	free(got);
}

/* Stopping with copies posted returns promptly; the ones done are whole. */
static void copy_agent_stops_with_copies_posted(void **state)
{
	const size_t piece = 256 << 10;
	struct gdx_copy_agent *a;
	unsigned char *src, *dmem, *got;
	uint32_t seq = 0, done;
	int rc;

	(void)state;
	a = ag_start(0, 0, 64, 0);
	assert_int_equal(gdx_pinned_alloc(dev, 64 * piece, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, 64 * piece, (void **)&dmem), 0);
	assert_int_equal(gdx_memset(dev, dmem, 0, 64 * piece), 0);
	t_fill(src, 64 * piece, 5);
	for (unsigned i = 0; i < 64; i++)
		assert_int_equal(gdx_copy_agent_post(a, 0, dmem + i * piece, src + i * piece,
						     piece, &seq), 0);
	assert_int_equal(seq, 64);
	/* the ring is full until the worker has finished a copy (it may, meanwhile) */
	rc = gdx_copy_agent_post(a, 0, dmem, src, 1, &seq);
	done = __atomic_load_n(gdx_copy_agent_done_word(a, 0), __ATOMIC_ACQUIRE);
	assert_true(rc == -EAGAIN || (rc == 0 && done > 0));
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	got = malloc(64 * piece);
	assert_non_null(got);
	assert_int_equal(gdx_memcpy(dev, got, dmem, 64 * piece), 0);
	/* copies end in order: a prefix of pieces landed whole */
	for (unsigned i = 0; i < 64; i++) {
		static const unsigned char zero[256 << 10];

		if (memcmp(got + i * piece, src + i * piece, piece)) {
			for (unsigned j = i; j < 64; j++)
				assert_memory_equal(got + j * piece, zero, piece);
			break;
		}
	}
	free(got);
	assert_int_equal(gdx_device_free(dev, dmem), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

static void copy_agent_bad_args(void **state)
{
	struct gdx_copy_agent_opts o;
	struct gdx_copy_agent *a;
	unsigned char *src;
	void *d;
	uint32_t seq;

	(void)state;
	gdx_copy_agent_opts_init(&o, sizeof(o));
	o.entries = 48;
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), -EINVAL);
	o.entries = 64;
	o.rings = 65;
	o.workers = 1;	/* a worker serves 64 rings at most */
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), -EINVAL);
	o.rings = 2;
	o.workers = 3;
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), -EINVAL);
	o.workers = 0;
	assert_int_equal(gdx_copy_agent_start(NULL, &o, &a), -EINVAL);
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, 4096, &d), 0);
	assert_int_equal(gdx_copy_agent_post(a, 2, d, src, 16, &seq), -EINVAL);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 0, &seq), -EINVAL);
	/* a worker counts 4 KiB units in 32 bits: no length whose count would wrap */
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, (size_t)UINT32_MAX - 8190, &seq),
			 -EINVAL);
	assert_int_equal(gdx_copy_agent_post(a, 0, NULL, src, 16, &seq), -EINVAL);
	assert_null(gdx_copy_agent_done_word(a, 2));
	assert_int_equal(gdx_copy_agent_status(a), 0);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_copy_agent_stop(NULL), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

/*
 * A copy the worker cannot make (into host memory: on a GPU a fault) ends
 * the agent with an error that status reports and posts return, never a hang.
 * Emulated only: on a GPU the fault would take the context with it.
 */
static void copy_agent_error_is_reported(void **state)
{
	struct gdx_copy_agent *a;
	unsigned char *src, host[64];
	void *d;
	uint32_t seq;
	int rc;

	(void)state;
	if (strcmp(gdx_device_kind(dev), "emulated"))
		skip();
	assert_int_equal(gdx_copy_agent_start(dev, NULL, &a), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, 4096, &d), 0);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), 0);
	assert_int_equal(ag_wait(a, 0, seq), 0);
	assert_int_equal(gdx_copy_agent_post(a, 0, host, src, 64, &seq), 0);
	rc = ag_wait(a, 0, seq);
	assert_int_equal(rc, GDX_EDRIVER);
	assert_int_equal(gdx_copy_agent_status(a), GDX_EDRIVER);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), GDX_EDRIVER);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

/*
 * A worker that stopped on an error is not launched again by the posts that
 * follow (one launch per post, each failing at once, until someone asks
 * status): the posts return the error themselves.  The emulated launch is
 * one device call of the posting thread, a post that launches nothing none.
 */
static void copy_agent_no_relaunch_after_error(void **state)
{
	struct gdx_copy_agent *a;
	unsigned char *src;
	uint64_t calls;
	uint32_t seq;
	void *d;
	int rc = 0;
	unsigned i;

	(void)state;
	if (strcmp(gdx_device_kind(dev), "emulated"))
		skip();
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "1"), 0);
	assert_int_equal(gdx_copy_agent_start(dev, NULL, &a), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, 4096, &d), 0);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), 0);
	assert_int_equal(ag_wait(a, 0, seq), 0);
	calls = gdx_device_calls();
	/*
	 * The second copy faults; the posts after it find the worker gone (a
	 * loaded machine may take a while to run it; relaunched, it would fill
	 * the ring and the post say -EAGAIN).
	 */
	for (i = 0; i < 4000 && !rc; i++) {
		rc = gdx_copy_agent_post(a, 0, d, src, 64, &seq);
		usleep(1000);
	}
	assert_int_equal(rc, GDX_EDRIVER);
	assert_true(gdx_device_calls() - calls <= 1);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), GDX_EDRIVER);
	assert_int_equal(gdx_copy_agent_status(a), GDX_EDRIVER);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

/*
 * Halting stops the workers and keeps the agent: a worker in a slow copy
 * (emulated.agent_copy_us: 1 s each; the first one seen landed, the worker is
 * in the second) outlasts the stop timeout (-ETIMEDOUT; posts are refused
 * from then on and what they describe is never copied), halting again waits
 * again until it has ended, the copy it had taken landed; status and posts
 * still answer (the agent is not freed) until it is stopped.
 */
static void copy_agent_halt(void **state)
{
	struct gdx_copy_agent_opts o;
	struct gdx_copy_agent *a;
	unsigned char *src, back[64], zero[64] = { 0 };
	uint32_t seq;
	char *d;
	int rc, tries = 0;

	(void)state;
	assert_int_equal(gdx_copy_agent_halt(NULL), -EINVAL);
	if (strcmp(gdx_device_kind(dev), "emulated"))
		skip();
	gdx_copy_agent_opts_init(&o, sizeof(o));
	o.stop_timeout_ms = 100;
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "1000000"), 0);
	assert_int_equal(gdx_copy_agent_start(dev, &o, &a), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&src), 0);
	assert_int_equal(gdx_device_malloc(dev, 4096, (void **)&d), 0);
	assert_int_equal(gdx_memset(dev, d, 0, 4096), 0);
	memset(src, 0x5a, 4096);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), 0);
	assert_int_equal(gdx_copy_agent_post(a, 0, d + 64, src, 64, &seq), 0);
	/* the first copy's bytes are there: the worker is in the second (done comes after it) */
	for (int i = 0;; i++) {
		assert_int_equal(gdx_memcpy(dev, back, d, 64), 0);
		if (!memcmp(back, src, 64))
			break;
		assert_true(i < 10000);
		usleep(1000);
	}
	assert_int_equal(gdx_copy_agent_halt(a), -ETIMEDOUT);
	assert_int_equal(gdx_copy_agent_status(a), -ESHUTDOWN);
	assert_int_equal(gdx_copy_agent_post(a, 0, d + 128, src, 64, &seq), -ESHUTDOWN);
	while ((rc = gdx_copy_agent_halt(a)) == -ETIMEDOUT)
		assert_true(++tries < 100);
	assert_int_equal(rc, 0);
	assert_int_equal(gdx_copy_agent_halt(a), 0);
	assert_int_equal(__atomic_load_n(gdx_copy_agent_done_word(a, 0), __ATOMIC_ACQUIRE), 2);
	assert_int_equal(gdx_memcpy(dev, back, d + 64, 64), 0);
	assert_memory_equal(back, src, 64);
	assert_int_equal(gdx_memcpy(dev, back, d + 128, 64), 0);
	assert_memory_equal(back, zero, 64);
	assert_int_equal(gdx_copy_agent_post(a, 0, d, src, 64, &seq), -ESHUTDOWN);
	assert_int_equal(gdx_copy_agent_stop(a), 0);
	assert_int_equal(gdx_config_set("emulated.agent_copy_us", "0"), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_pinned_free(dev, src), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(spec_parsing),
		cmocka_unit_test(round_trip_all_kinds),
		cmocka_unit_test(pointer_queries),
		cmocka_unit_test(bad_pointers_are_refused),
		cmocka_unit_test(cpu_access_to_device_memory_faults),
		cmocka_unit_test(dmabuf_export),
		cmocka_unit_test(nic_addr_reaches_device_memory),
		cmocka_unit_test(stream_order_and_host_funcs),
		cmocka_unit_test(free_waits_for_queued_work),
		cmocka_unit_test(events_order_streams),
		cmocka_unit_test(stream_ordered_alloc),
		cmocka_unit_test(batched_copies),
		cmocka_unit_test(gathered_copies),
		cmocka_unit_test(wrapped_stream),
		cmocka_unit_test(stream_waits_for_value),
		cmocka_unit_test(stream_writes_value),
		cmocka_unit_test(copy_agent_copies),
		cmocka_unit_test(copy_agent_copies_to_host),
		cmocka_unit_test(copy_agent_overlaps_in_order),
		cmocka_unit_test(copy_agent_any_alignment),
		cmocka_unit_test(copy_agent_stops_with_copies_posted),
		cmocka_unit_test(copy_agent_bad_args),
		cmocka_unit_test(copy_agent_error_is_reported),
		cmocka_unit_test(copy_agent_no_relaunch_after_error),
		cmocka_unit_test(copy_agent_halt),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
