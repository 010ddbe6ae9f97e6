/* SPDX-License-Identifier: MIT */
/*
 * The checks that ask this process and this machine rather than a tree: they
 * create an io_uring, write and read a file with O_DIRECT, read the rlimits and
 * load libraries.  Only run when live checks are on.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <liburing.h>

#include <gdx/device.h>
#include <gdx/gdx.h>

#include "check.h"
#include "common/util.h"
#include "topo/topo_int.h"

static void live_uring(struct chk_ctx *x)
{
	struct io_uring ring;
	int err = io_uring_queue_init(4, &ring, 0);
	struct chk *c;

	x->io_uring_ok = !err;
	if (!err) {
		io_uring_queue_exit(&ring);
		c = chk_add(x, "io_uring", "io_uring", CHK_OK);
		CHK_SET(c->finding, "created a ring: O_DIRECT reads run through io_uring");
		return;
	}
	c = chk_add(x, "io_uring", "io_uring", CHK_FAIL);
	CHK_SET(c->finding, "io_uring_queue_init: %s; gdx falls back to pread/pwrite threads",
		strerror(-err));
	CHK_SET(c->fix, err == -EPERM ? "sysctl kernel.io_uring_disabled=0, or allow io_uring_setup "
		"in the container's seccomp profile" : "a kernel with io_uring (>= 5.6)");
}

static const char *fs_name(long type)
{
	switch ((unsigned long)type) {
	case 0xef53: return "ext4";
	case 0x58465342: return "xfs";
	case 0x9123683e: return "btrfs";
	case 0x01021994: return "tmpfs";
	case 0x794c7630: return "overlayfs";
	case 0x6969: return "nfs";
	case 0x65735546: return "fuse";
	case 0x2fc12fc1: return "zfs";
	case 0x5346544e: return "ntfs";
	case 0x858458f6: return "ramfs";
	case 0xf15f: return "ecryptfs";
	case 0x00c36400: return "ceph";
	case 0x0bd00bd0: return "lustre";
	case 0x47504653: return "gpfs";
	case 0x73717368: return "squashfs";
	case 0x9fa0: return "proc";
	default: return NULL;
	}
}

/* The whole disk a filesystem lives on, by its device number ("vda", "nvme0n1"). */
static void block_name(struct chk_ctx *x, dev_t dev, char *out, size_t len)
{
	char path[PATH_MAX], real[PATH_MAX];
	char *base;

	out[0] = 0;
	if (!major(dev))
		return;
	gdx_topo_fmt(path, sizeof(path), "%s/dev/block/%u:%u", x->sysfs, major(dev), minor(dev));
	if (!realpath(path, real))
		return;
	gdx_topo_fmt(path, sizeof(path), "%s/partition", real);
	if (!access(path, F_OK))
		*strrchr(real, '/') = 0;
	base = strrchr(real, '/');
	chk_set(out, len, "%s", base ? base + 1 : real);
}

static void live_odirect(struct chk_ctx *x)
{
	char dir[PATH_MAX], name[PATH_MAX + 32], fsdesc[96], disk[64];
	const char *fs;
	struct statfs sf;
	struct stat sb;
	struct chk *c;
	void *buf = NULL;
	int fd, err = 0;

	chk_set(dir, sizeof(dir), "%s", x->path);
	if (stat(dir, &sb)) {
		c = chk_add(x, "odirect", "O_DIRECT", CHK_FAIL);
		CHK_SET(c->finding, "%s: %s", x->path, strerror(errno));
		CHK_SET(c->fix, "--path a directory or file on the filesystem holding the data");
		return;
	}
	if (!S_ISDIR(sb.st_mode)) {
		char *slash = strrchr(dir, '/');

		if (slash)
			*(slash == dir ? slash + 1 : slash) = 0;
		else
			chk_set(dir, sizeof(dir), ".");
	}
	fs = !statfs(dir, &sf) ? fs_name(sf.f_type) : NULL;
	chk_set(x->path_fs, sizeof(x->path_fs), "%s", fs ? fs : "an unknown filesystem");
	block_name(x, sb.st_dev, disk, sizeof(disk));
	if (fs)
		chk_set(fsdesc, sizeof(fsdesc), "%s%s%s", fs, disk[0] ? " on " : "", disk);
	else
		chk_set(fsdesc, sizeof(fsdesc), "filesystem 0x%lx%s%s", (unsigned long)sf.f_type,
			 disk[0] ? " on " : "", disk);

	chk_set(name, sizeof(name), "%s/.gdx-check-XXXXXX", dir);
	fd = mkstemp(name);
	if (fd < 0) {
		err = errno;
		c = chk_add(x, "odirect", "O_DIRECT", CHK_WARN);
		CHK_SET(c->finding, "%s (%s): cannot create a probe file: %s", x->path, fsdesc,
			strerror(err));
		CHK_SET(c->fix, "--path a directory you may write to");
		return;
	}
	close(fd);
	fd = open(name, O_RDWR | O_DIRECT | O_CLOEXEC);
	unlink(name);
	if (fd < 0) {
		err = errno;
		x->odirect_ok = false;
		c = chk_add(x, "odirect", "O_DIRECT", CHK_FAIL);
		CHK_SET(c->finding, "%s (%s) refuses O_DIRECT (%s): reads there go through the page "
			"cache", x->path, fsdesc, strerror(err));
		CHK_SET(c->fix, "keep the data on a block filesystem (ext4, xfs) on NVMe");
		return;
	}
	if (posix_memalign(&buf, 4096, 8192)) {
		close(fd);
		c = chk_add(x, "odirect", "O_DIRECT", CHK_WARN);
		CHK_SET(c->finding, "out of memory");
		return;
	}
	memset(buf, 0x5a, 4096);
	if (pwrite(fd, buf, 4096, 0) != 4096)
		err = errno ? errno : EIO;
	else if (pread(fd, (char *)buf + 4096, 4096, 0) != 4096)
		err = errno ? errno : EIO;
	else if (memcmp(buf, (char *)buf + 4096, 4096))
		err = EIO;
	close(fd);
	free(buf);
	x->odirect_ok = !err;
	c = chk_add(x, "odirect", "O_DIRECT", err ? CHK_FAIL : CHK_OK);
	if (err) {
		CHK_SET(c->finding, "%s (%s) opens with O_DIRECT but a 4 KiB aligned write+read "
			"failed: %s", x->path, fsdesc, strerror(err));
		CHK_SET(c->fix, "check the filesystem's logical block size and free space");
	} else {
		CHK_SET(c->finding, "%s (%s): 4 KiB aligned write+read verified%s", x->path, fsdesc,
			fs && !strcmp(fs, "tmpfs") ? " (tmpfs accepts O_DIRECT since Linux 6.6; "
			"the data is in memory anyway)" : "");
	}
}

static bool has_cap_ipc_lock(void)
{
	char line[256];
	bool yes = false;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "CapEff:", 7))
			yes = (strtoull(line + 7, NULL, 16) >> 14) & 1;
	fclose(f);
	return yes;
}

static void live_memlock(struct chk_ctx *x)
{
	struct rlimit rl;
	bool cap = has_cap_ipc_lock();
	char sz[32];
	struct chk *c;

	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		c = chk_add(x, "memlock", "memlock limit", CHK_WARN);
		CHK_SET(c->finding, "getrlimit: %s", strerror(errno));
		return;
	}
	x->memlock = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
	x->memlock_ok = cap || x->memlock >= (1ull << 30);
	if (rl.rlim_cur == RLIM_INFINITY) {
		c = chk_add(x, "memlock", "memlock limit", CHK_OK);
		CHK_SET(c->finding, "unlimited");
		return;
	}
	chk_size(x->memlock, sz, sizeof(sz));
	if (cap) {
		c = chk_add(x, "memlock", "memlock limit", CHK_OK);
		CHK_SET(c->finding, "%s, but this process has CAP_IPC_LOCK, which lifts it", sz);
		return;
	}
	c = chk_add(x, "memlock", "memlock limit", x->memlock_ok ? CHK_OK : CHK_WARN);
	CHK_SET(c->finding, "%s%s", sz, x->memlock_ok ? "" :
		": pinned host buffers registered with a NIC or io_uring count against it");
	if (!x->memlock_ok)
		CHK_SET(c->fix, "ulimit -l unlimited (limits.conf: * - memlock unlimited; "
			"systemd: LimitMEMLOCK=infinity)");
}

static void live_lib(struct chk_ctx *x, const char *id, const char *lib, const char *sym,
		     bool *ok, const char *why, const char *fix)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	struct chk *c;

	*ok = h && dlsym(h, sym);
	c = chk_add(x, id, lib, *ok ? CHK_OK : CHK_WARN);
	if (*ok)
		CHK_SET(c->finding, "loads (%s found)", sym);
	else
		CHK_SET(c->finding, "%s: %s", h ? "symbol missing" : dlerror(), why);
	if (!*ok)
		CHK_SET(c->fix, "%s", fix);
	if (h)
		dlclose(h);
}

/*
 * What the CUDA driver itself says about each GPU.  Its dma-buf answer is the
 * truth the recommendations then use, where check_sys could only reason from
 * the kernel and driver versions.
 */
static void live_cuda(struct chk_ctx *x)
{
	int n = gdx_device_count("cuda"), dmabuf = 0, gdr = 0, cuda_ver = 0;
	char list[384] = "";
	struct chk *c;

	x->cuda_count = n;
	if (n <= 0) {
		c = chk_add(x, "cuda", "CUDA driver", x->ngpu ? CHK_FAIL : CHK_NA);
		if (n < 0)
			CHK_SET(c->finding, "libcuda cannot be used: %s", gdx_strerror(n));
		else
			CHK_SET(c->finding, "the driver sees no GPU");
		if (x->ngpu) {
			CHK_CAT(c->finding, ", yet sysfs shows %d NVIDIA GPU%s", x->ngpu,
				x->ngpu > 1 ? "s" : "");
			CHK_SET(c->fix, n < 0 ? "install the driver's libcuda.so.1 (knob cuda.lib "
				"names another)" : "check CUDA_VISIBLE_DEVICES and nvidia-smi");
		}
		return;
	}
	for (int i = 0; i < n; i++) {
		struct gdx_device_props p;
		struct gdx_device *dev;
		char spec[16];
		int t;

		chk_set(spec, sizeof(spec), "cuda:%d", i);
		if (gdx_device_open(spec, &dev))
			continue;
		if (!gdx_device_props(dev, &p)) {
			t = gdx_topo_find(x->t, GDX_TOPO_GPU, p.pci_bdf);
			dmabuf += !!p.dmabuf_supported;
			gdr += !!p.gdr_supported;
			cuda_ver = p.driver_version;
			if (i < 4)
				CHK_CAT(list, "%s%s %s (%s)", i ? ", " : "", spec, p.model,
					t >= 0 ? p.pci_bdf : "not in sysfs");
			else if (i == 4)
				CHK_CAT(list, ", ...");
		}
		gdx_device_close(dev);
	}
	c = chk_add(x, "cuda", "CUDA driver", CHK_OK);
	CHK_SET(c->finding, "CUDA %d.%d, %d GPU%s: %s; dma-buf export on %d, GPUDirect RDMA on %d",
		cuda_ver / 1000, cuda_ver % 1000 / 10, n, n > 1 ? "s" : "", list, dmabuf, gdr);
	if (n != x->ngpu) {
		c->st = CHK_WARN;
		CHK_CAT(c->finding, "; sysfs shows %d", x->ngpu);
		CHK_SET(c->fix, "check CUDA_VISIBLE_DEVICES");
	}
	if (!gdr) {
		c->st = CHK_WARN;
		CHK_SET(c->fix, "the driver reports no GPUDirect RDMA on this platform (VMs often "
			"hide it): network data will bounce");
	}
	if ((dmabuf == n) != x->dmabuf)
		CHK_CAT(c->finding, " (the driver's answer on dma-buf overrides the version check "
			"above)");
	x->dmabuf = dmabuf == n;
}

void check_live(struct chk_ctx *x)
{
	int before = x->n;

	live_cuda(x);
	live_uring(x);
	live_odirect(x);
	live_memlock(x);
	live_lib(x, "libcufile", "libcufile.so.0", "cuFileDriverOpen", &x->cufile_ok,
		 "no cuFile: storage uses the bounce ring", "install GPUDirect Storage (libcufile0, "
		 "from the CUDA repository)");
	live_lib(x, "libibverbs", "libibverbs.so.1", "ibv_get_device_list", &x->ibverbs_ok,
		 "no verbs: network transfers use TCP", "apt install libibverbs1 ibverbs-providers");
	for (int i = before; i < x->n; i++)
		x->c[i].live = true;
}
