/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOPO_H
#define GDX_TOPO_H

/*
 * The machine's topology as sysfs shows it: GPUs, network adapters, NVMe
 * controllers (local and fabrics) and other disks, where each sits in the PCIe
 * tree, its NUMA node and the CPUs near it.  The transport and storage layers
 * use it to pick the NIC nearest a GPU and to place bounce buffers; `gdx check`
 * prints it.  A snapshot is read once by gdx_topo_open() and never changes.
 *
 * Distances use nvidia-smi's words, best first:
 *   X    the same device
 *   PIX  through at most one PCIe switch (or one bridge)
 *   PXB  through several PCIe switches, without crossing a host bridge
 *   PHB  through a PCIe host bridge (the root complex of one CPU)
 *   NODE between host bridges of one NUMA node
 *   SYS  across the interconnect between NUMA nodes (UPI, Infinity Fabric)
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gdx_topo_kind {
	GDX_TOPO_GPU = 1,	/* NVIDIA display/3D controller (vendor 0x10de, class 0x03) */
	GDX_TOPO_NIC = 2,	/* network function: RDMA device or plain netdev */
	GDX_TOPO_NVME = 4,	/* NVMe controller: PCIe, or fabrics (tcp, rdma, ...) */
	GDX_TOPO_DISK = 8,	/* any other block device on PCI (virtio-blk, AHCI, SAS) */
	GDX_TOPO_ANY = 15,
};

enum gdx_topo_link {
	GDX_TOPO_X = 0,
	GDX_TOPO_PIX,
	GDX_TOPO_PXB,
	GDX_TOPO_PHB,
	GDX_TOPO_NODE,
	GDX_TOPO_SYS,
};

enum gdx_topo_rdma {
	GDX_TOPO_RDMA_NONE = 0,		/* a plain netdev: TCP */
	GDX_TOPO_RDMA_HW = 1,		/* an RDMA NIC: can DMA into GPU memory */
	GDX_TOPO_RDMA_SOFT = 2,		/* Soft-RoCE (rxe) on a netdev: the CPU copies */
};

struct gdx_topo;

struct gdx_topo_opts {
	size_t size;
	const char *sysfs_root;		/* NULL: knob sysfs_root (default /sys) */
	const char *procfs_root;	/* NULL: knob procfs_root (default /proc) */
};

GDX_API void gdx_topo_opts_init(struct gdx_topo_opts *o, size_t size);

struct gdx_topo_dev {
	size_t size;			/* set by the caller: sizeof the struct it has */
	enum gdx_topo_kind kind;
	int ordinal;			/* GPU: its index in PCI bus order (nvidia-smi's) */
	char name[32];			/* GPU0, mlx5_0, eth0, nvme0, vda */
	char pci[16];			/* DDDD:BB:DD.F, empty when not on PCI */
	uint16_t vendor, device;
	uint32_t class_code;		/* 24-bit PCI class */
	int numa_node;			/* -1 when sysfs does not say */
	char cpulist[256];		/* CPUs local to the device, "0-55,112-167" */
	char driver[32];		/* bound kernel driver, empty when none */
	uint64_t bar1_size;		/* GPU: size of BAR1 in bytes, 0 unknown */
	/* NIC */
	int rdma;			/* enum gdx_topo_rdma */
	char netdev[32];		/* its first network interface */
	char link_layer[16];		/* RDMA port 1: InfiniBand or Ethernet */
	char port_state[16];		/* RDMA port 1: ACTIVE, DOWN, ... */
	char rate[48];			/* RDMA port 1: "400 Gb/sec (4X NDR)" */
	/* NVMe */
	char transport[8];		/* pcie, tcp, rdma, fc, loop */
	char address[128];		/* fabrics: traddr=...,trsvcid=... */
	char subsysnqn[224];
	char model[48];
};

/* Reads the topology under the roots; *out is freed with gdx_topo_close(). */
GDX_API int gdx_topo_open(struct gdx_topo **out, const struct gdx_topo_opts *opts);
GDX_API void gdx_topo_close(struct gdx_topo *t);

/* Devices are ordered GPUs, NICs, NVMe, disks; each kind in PCI bus order. */
GDX_API int gdx_topo_count(const struct gdx_topo *t);
/* Copies device i into *dev (up to dev->size bytes); -ERANGE when i is out of range. */
GDX_API int gdx_topo_get(const struct gdx_topo *t, int i, struct gdx_topo_dev *dev);
/* Index of the device whose name or PCI address is key, among kinds; -ENOENT. */
GDX_API int gdx_topo_find(const struct gdx_topo *t, unsigned kinds, const char *key);
/* Index of the kind's n-th device (n-th GPU, ...); -ENOENT. */
GDX_API int gdx_topo_nth(const struct gdx_topo *t, enum gdx_topo_kind kind, int n);

/*
 * Index of the NVMe controller or disk holding the filesystem of path (through
 * partitions, device mapper and md to the first device below); -ENOENT when it
 * has none (tmpfs, overlayfs, NFS) or it is not in the snapshot, -errno from
 * stat().  Meaningful only for a snapshot of the running machine's sysfs.
 */
GDX_API int gdx_topo_find_file(const struct gdx_topo *t, const char *path);

/* enum gdx_topo_link between devices i and j; -ENODEV when one is not on PCI. */
GDX_API int gdx_topo_distance(const struct gdx_topo *t, int i, int j);
/*
 * The device of the given kinds nearest to device i (never i itself): the
 * smallest distance, then hardware RDMA before Soft-RoCE before plain NICs,
 * then the lowest index.
 * *link receives the distance when link is not NULL.  -ENOENT when none.
 */
GDX_API int gdx_topo_nearest(const struct gdx_topo *t, int i, unsigned kinds, int *link);

/*
 * The RDMA NIC gdx moves device i's network data through: among RDMA devices
 * whose port 1 is ACTIVE (or of unknown state), hardware before Soft-RoCE,
 * then the nearest to i, then the lowest index; i < 0 asks for the first such
 * NIC.  *link (when not NULL) receives the distance, -ENODEV if either is off
 * PCI.  -ENOENT when there is none.
 */
GDX_API int gdx_topo_rdma_nic(const struct gdx_topo *t, int i, int *link);

/* "X", "PIX", ... ; "?" for anything else. */
GDX_API const char *gdx_topo_link_name(int link);

#ifdef __cplusplus
}
#endif
#endif
