// SPDX-License-Identifier: MIT
//
// KvikIO beside gdx: reads a file into GPU memory with KvikIO's C++ API
// (libkvikio, the library under its Python wheels) and prints GB/s, so
// bench/file_gpu.sh can put its figure next to gdx's on the same file.
//
//   kvikio_probe FILE SIZE hot|cold [NTHREADS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <cuda.h>
#include <kvikio/defaults.hpp>
#include <kvikio/file_handle.hpp>

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		const char *s = "?";
		cuGetErrorString(r, &s);
		std::fprintf(stderr, "kvikio_probe: %s: %s\n", what, s);
		std::exit(1);
	}
}

// Brings the file into the page cache, or drops it from there.
static void prepare(const char *path, size_t size, bool hot)
{
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		std::perror(path);
		std::exit(1);
	}
	if (hot) {
		static char buf[1 << 20];
		for (size_t done = 0; done < size;) {
			ssize_t n = read(fd, buf, sizeof buf);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
	} else {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	}
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		std::fprintf(stderr, "usage: kvikio_probe FILE SIZE hot|cold [NTHREADS]\n");
		return 2;
	}
	const char *path = argv[1];
	size_t size = std::strtoull(argv[2], nullptr, 0);
	bool hot = !std::strcmp(argv[3], "hot");
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr buf;

	if (argc > 4)
		kvikio::defaults::set_thread_pool_nthreads(std::strtoul(argv[4], nullptr, 0));
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	check(cuMemAlloc(&buf, size), "cuMemAlloc");

	kvikio::FileHandle f(path, "r");
	// One untimed read first: KvikIO allocates its bounce buffers and threads lazily.
	f.pread(reinterpret_cast<void *>(buf), size < (64u << 20) ? size : (64u << 20), 0).get();
	prepare(path, size, hot);
	auto t0 = std::chrono::steady_clock::now();
	size_t got = f.pread(reinterpret_cast<void *>(buf), size, 0).get();
	check(cuCtxSynchronize(), "cuCtxSynchronize");
	double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

	std::printf("kvikio %s %s %zu bytes threads %u task %zu compat %s: %.2f GB/s\n", path,
		    hot ? "hot" : "cold", got, kvikio::defaults::thread_pool_nthreads(),
		    kvikio::defaults::task_size(), f.get_compat_mode_manager().is_compat_mode_preferred() ? "yes" : "no",
		    got / s / 1e9);
	cuMemFree(buf);
	return got == size ? 0 : 1;
}
