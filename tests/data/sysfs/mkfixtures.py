#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the fixture machines `gdx check` and tests/unit/test_topo.c read.

Each fixture is ROOT/{sys,proc,lib/modules}: the parts of sysfs and procfs gdx
reads, laid out as Linux lays them out (devices under devices/pciDDDD:BB/...,
bus/ and class/ entries as relative links into it).  Run it from anywhere;
it rewrites tests/data/sysfs/{dgx8,vm1gpu,nogpu}.  The trees are committed, so
the tests do not need Python.

  dgx8    8 GPUs and 8 ConnectX-7 NICs in pairs behind PCIe switches, four
          host bridges on two NUMA nodes, one data NVMe per host bridge behind
          its own switch, a boot NVMe on a root port, an NVMe/RDMA controller.
          Proprietary 535 driver (no dma-buf), nvidia_peermem not loaded,
          nvidia_fs loaded, iommu=pt, ACS redirect left on in one switch.
  vm1gpu  A cloud VM like the lent H200 machine: one GPU straight under the
          host bridge, virtio-blk and virtio-net, no NUMA info, open 580
          driver (what the H200 runs), no RDMA, config space beyond 64 bytes unreadable.
  nogpu   A server without GPU: a local NVMe (with an LVM volume on it), a RoCE
          NIC, an Ethernet port with Soft-RoCE (rxe0) on it.
"""
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Tree:
    def __init__(self, name):
        self.root = os.path.join(HERE, name)
        shutil.rmtree(self.root, ignore_errors=True)
        self.sys = os.path.join(self.root, "sys")
        self.proc = os.path.join(self.root, "proc")
        os.makedirs(self.sys)
        os.makedirs(self.proc)
        self.iommu_group = 0

    def write(self, path, text, binary=False):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb" if binary else "w") as f:
            f.write(text)

    def link(self, at, target):
        """A relative link at `at` pointing to the absolute fixture path target."""
        os.makedirs(os.path.dirname(at), exist_ok=True)
        os.symlink(os.path.relpath(target, os.path.dirname(at)), at)

    def sysw(self, rel, text):
        self.write(os.path.join(self.sys, rel), text + "\n")

    def procw(self, rel, text):
        self.write(os.path.join(self.proc, rel), text)

    def pci(self, parent, bdf, vendor, device, cls, numa=None, cpus=None, driver=None,
            config=None, resource=None, iommu=None):
        """Adds a PCI function under parent (a devices/ path) and returns its path."""
        d = os.path.join(parent, bdf)
        os.makedirs(d)
        self.write(os.path.join(d, "vendor"), "0x%04x\n" % vendor)
        self.write(os.path.join(d, "device"), "0x%04x\n" % device)
        self.write(os.path.join(d, "class"), "0x%06x\n" % cls)
        self.write(os.path.join(d, "numa_node"), "%d\n" % (-1 if numa is None else numa))
        if cpus:
            self.write(os.path.join(d, "local_cpulist"), cpus + "\n")
        if driver:
            drv = os.path.join(self.sys, "bus/pci/drivers", driver)
            self.write(os.path.join(drv, "uevent"), "DRIVER=%s\n" % driver)
            self.link(os.path.join(d, "driver"), drv)
        if config is not None:
            self.write(os.path.join(d, "config"), config, binary=True)
        if resource:
            lines = resource + [(0, 0, 0)] * (13 - len(resource))
            self.write(os.path.join(d, "resource"),
                       "".join("0x%016x 0x%016x 0x%016x\n" % r for r in lines))
        if iommu:
            g = os.path.join(self.sys, "kernel/iommu_groups/%d" % self.iommu_group)
            self.write(os.path.join(g, "type"), iommu + "\n")
            self.link(os.path.join(d, "iommu_group"), g)
            self.iommu_group += 1
        self.link(os.path.join(self.sys, "bus/pci/devices", bdf), d)
        return d

    def host_bridge(self, name):
        d = os.path.join(self.sys, "devices", name)
        os.makedirs(d)
        return d

    def netdev(self, pcidir, ifname):
        n = os.path.join(pcidir, "net", ifname)
        os.makedirs(n)
        self.link(os.path.join(n, "device"), pcidir)
        self.link(os.path.join(self.sys, "class/net", ifname), n)

    def rdma(self, pcidir, ibdev, link_layer, state, rate):
        i = os.path.join(pcidir, "infiniband", ibdev)
        self.write(os.path.join(i, "ports/1/link_layer"), link_layer + "\n")
        self.write(os.path.join(i, "ports/1/state"), state + "\n")
        self.write(os.path.join(i, "ports/1/rate"), rate + "\n")
        self.link(os.path.join(i, "device"), pcidir)
        self.link(os.path.join(self.sys, "class/infiniband", ibdev), i)

    def nvme(self, pcidir, ctrl, model, nqn, transport="pcie", address=None):
        if pcidir is None:
            c = os.path.join(self.sys, "devices/virtual/nvme-fabrics/ctl", ctrl)
        else:
            c = os.path.join(pcidir, "nvme", ctrl)
        self.write(os.path.join(c, "transport"), transport + "\n")
        self.write(os.path.join(c, "model"), model + "\n")
        self.write(os.path.join(c, "subsysnqn"), nqn + "\n")
        self.write(os.path.join(c, "state"), "live\n")
        if address:
            self.write(os.path.join(c, "address"), address + "\n")
        if pcidir is not None:
            self.link(os.path.join(c, "device"), pcidir)
        self.link(os.path.join(self.sys, "class/nvme", ctrl), c)
        if pcidir is None:
            return None
        n = int(ctrl[4:])
        return self.block(c, ctrl + "n1", "259:%d" % (2 * n))

    def block(self, parent, name, devno=None):
        b = os.path.join(parent, name)
        self.write(os.path.join(b, "size"), "536870912\n")
        self.link(os.path.join(self.sys, "class/block", name), b)
        if devno:
            self.write(os.path.join(b, "dev"), devno + "\n")
            self.link(os.path.join(self.sys, "dev/block", devno), b)
        return b

    def partition(self, disk, name, devno):
        p = self.block(disk, name, devno)
        self.write(os.path.join(p, "partition"), name[-1] + "\n")
        return p

    def modules(self, release, loaded, available, builtin=()):
        self.procw("modules", "".join(
            "%s 16384 0 - Live 0x0000000000000000\n" % m for m in loaded))
        for m in loaded:
            self.write(os.path.join(self.sys, "module", m, "refcnt"), "0\n")
        for m in builtin:
            self.write(os.path.join(self.sys, "module", m, "uevent"), "")
        d = os.path.join(self.root, "lib/modules", release)
        self.write(os.path.join(d, "modules.dep"), "".join(
            "kernel/drivers/%s.ko.xz:\n" % m for m in available))
        self.write(os.path.join(d, "modules.builtin"), "".join(
            "kernel/drivers/%s.ko\n" % m for m in builtin))
        self.procw("sys/kernel/osrelease", release + "\n")


def config(vendor, device, cls, port_type=0, relaxed=True, acs=None, size=0x200):
    """Configuration space: header, a PCIe capability at 0x40, ACS at 0x100."""
    c = bytearray(0x200)
    struct.pack_into("<HHHH", c, 0, vendor, device, 0x0406, 0x0010)
    c[9], c[10], c[11] = cls & 0xff, (cls >> 8) & 0xff, cls >> 16
    c[0x0e] = 1 if port_type in (4, 5, 6) else 0
    c[0x34] = 0x40
    struct.pack_into("<BBH", c, 0x40, 0x10, 0, 0x0002 | (port_type << 4))
    struct.pack_into("<I", c, 0x44, 0x8fc0)
    struct.pack_into("<H", c, 0x48, 0x2800 | (0x0010 if relaxed else 0))
    if acs is not None:
        struct.pack_into("<IHH", c, 0x100, 0x000d | (1 << 16), 0x005f, acs)
    return bytes(c[:size])


NVIDIA, MELLANOX, BROADCOM, INTEL, SAMSUNG, REDHAT = 0x10de, 0x15b3, 0x1000, 0x8086, 0x144d, 0x1af4
H100, H200, CX7, PEX, RP, PM1733 = 0x2330, 0x2335, 0x1021, 0xc030, 0x352a, 0xa824
BRIDGE, GPU3D, IBCLS, ETHCLS, NVMECLS = 0x060400, 0x030200, 0x020700, 0x020000, 0x010802
GIB = 1 << 30


def gpu_resource(bar1):
    return [(0xa0000000, 0xa0ffffff, 0x40200), (0x38000000000, 0x38000000000 + bar1 - 1, 0x14220c),
            (0, 0, 0), (0xa1000000, 0xa2ffffff, 0x14220c)]


def dgx8():
    t = Tree("dgx8")
    cpus = {0: "0-55,112-167", 1: "56-111,168-223"}
    acs_off, acs_rr = 0x0000, 0x000d  # SV|RR|CR: what a kernel with ACS enforcement leaves
    for q, hb in enumerate((0x00, 0x40, 0x80, 0xc0)):
        numa = q // 2
        kw = dict(numa=numa, cpus=cpus[numa], iommu="identity")
        root = t.host_bridge("pci0000:%02x" % hb)
        rp = t.pci(root, "0000:%02x:01.1" % hb, INTEL, RP, BRIDGE, driver="pcieport",
                   config=config(INTEL, RP, BRIDGE, 4, acs=0x001d), **kw)
        usp = t.pci(rp, "0000:%02x:00.0" % (hb + 1), BROADCOM, PEX, BRIDGE, driver="pcieport",
                    config=config(BROADCOM, PEX, BRIDGE, 5), **kw)
        for k in range(2):  # a switch per GPU/NIC pair, under the first-level switch
            g, n = 2 * q + k, 2 * q + k
            b = hb + 3 + 4 * k
            dsp = t.pci(usp, "0000:%02x:%02x.0" % (hb + 2, k), BROADCOM, PEX, BRIDGE,
                        driver="pcieport", config=config(BROADCOM, PEX, BRIDGE, 6, acs=acs_off),
                        **kw)
            usp2 = t.pci(dsp, "0000:%02x:00.0" % b, BROADCOM, PEX, BRIDGE, driver="pcieport",
                         config=config(BROADCOM, PEX, BRIDGE, 5), **kw)
            acs = acs_rr if q == 3 and k == 0 else acs_off
            d0 = t.pci(usp2, "0000:%02x:00.0" % (b + 1), BROADCOM, PEX, BRIDGE, driver="pcieport",
                       config=config(BROADCOM, PEX, BRIDGE, 6, acs=acs), **kw)
            d1 = t.pci(usp2, "0000:%02x:01.0" % (b + 1), BROADCOM, PEX, BRIDGE, driver="pcieport",
                       config=config(BROADCOM, PEX, BRIDGE, 6, acs=acs), **kw)
            t.pci(d0, "0000:%02x:00.0" % (b + 2), NVIDIA, H100, GPU3D, driver="nvidia",
                  config=config(NVIDIA, H100, GPU3D), resource=gpu_resource(128 * GIB), **kw)
            nic = t.pci(d1, "0000:%02x:00.0" % (b + 3), MELLANOX, CX7, IBCLS, driver="mlx5_core",
                        config=config(MELLANOX, CX7, IBCLS, relaxed=(n != 5)), **kw)
            t.netdev(nic, "ibp%ds0" % (b + 3))
            t.rdma(nic, "mlx5_%d" % n, "InfiniBand", "4: ACTIVE", "400 Gb/sec (4X NDR)")
            del g
        dsp = t.pci(usp, "0000:%02x:02.0" % (hb + 2), BROADCOM, PEX, BRIDGE, driver="pcieport",
                    config=config(BROADCOM, PEX, BRIDGE, 6, acs=acs_off), **kw)
        usp2 = t.pci(dsp, "0000:%02x:00.0" % (hb + 0x0b), BROADCOM, PEX, BRIDGE, driver="pcieport",
                     config=config(BROADCOM, PEX, BRIDGE, 5), **kw)
        d0 = t.pci(usp2, "0000:%02x:00.0" % (hb + 0x0c), BROADCOM, PEX, BRIDGE, driver="pcieport",
                   config=config(BROADCOM, PEX, BRIDGE, 6, acs=acs_off), **kw)
        nv = t.pci(d0, "0000:%02x:00.0" % (hb + 0x0d), SAMSUNG, PM1733, NVMECLS, driver="nvme",
                   config=config(SAMSUNG, PM1733, NVMECLS), **kw)
        t.nvme(nv, "nvme%d" % q, "SAMSUNG MZWLR7T6HALA-00007",
               "nqn.1994-11.com.samsung:nvme:PM1733:2.5-inch:S6CPNA0T%03d" % q)
        if q == 0:  # the boot drive, on a root port of its own
            rp2 = t.pci(root, "0000:00:01.2", INTEL, RP, BRIDGE, driver="pcieport",
                        config=config(INTEL, RP, BRIDGE, 4, acs=0x001d), **kw)
            boot = t.pci(rp2, "0000:0e:00.0", SAMSUNG, 0xa80a, NVMECLS, driver="nvme",
                         config=config(SAMSUNG, 0xa80a, NVMECLS), **kw)
            t.nvme(boot, "nvme4", "SAMSUNG MZ1L21T9HCLS-00A07",
                   "nqn.1994-11.com.samsung:nvme:PM9A3:M.2:S64PNA0T001")
    t.nvme(None, "nvme5", "Linux", "nqn.2024-01.io.example:pool0", "rdma",
           "traddr=192.168.10.2,trsvcid=4420,src_addr=192.168.10.11")
    for i in range(2):
        t.write(os.path.join(t.sys, "devices/virtual/iommu/dmar%d/intel-iommu/version" % i),
                "1:0\n")
        t.link(os.path.join(t.sys, "class/iommu/dmar%d" % i),
               os.path.join(t.sys, "devices/virtual/iommu/dmar%d" % i))
    t.sysw("kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    t.procw("driver/nvidia/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:06 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    t.procw("cmdline", "BOOT_IMAGE=/boot/vmlinuz-5.15.0-1053-nvidia root=UUID=6f1c ro "
            "intel_iommu=on iommu=pt pci=realloc=off\n")
    t.procw("meminfo", "MemTotal:       2113389248 kB\nHugePages_Total:    4096\n"
            "HugePages_Free:     4096\nHugepagesize:       2048 kB\n")
    t.procw("sys/kernel/io_uring_disabled", "0\n")
    t.modules("5.15.0-1053-nvidia",
              ["nvidia_fs", "nvidia_uvm", "nvidia_modeset", "nvidia", "mlx5_ib", "ib_uverbs",
               "ib_core", "mlx5_core", "nvme_rdma", "nvme_fabrics", "nvme", "nvme_core"],
              ["nvme/host/nvme-tcp", "nvme/host/nvme-rdma", "nvme/target/nvmet",
               "nvme/target/nvmet-tcp", "nvme/target/nvmet-rdma", "video/nvidia-peermem"])


def vm1gpu():
    t = Tree("vm1gpu")
    root = t.host_bridge("pci0000:00")
    small = 0x40  # what an unprivileged reader of config gets
    t.pci(root, "0000:00:00.0", INTEL, 0x29c0, 0x060000, cpus="0-15",
          config=config(INTEL, 0x29c0, 0x060000, size=small))
    t.pci(root, "0000:00:01.0", REDHAT, 0x1045, 0xffff00, cpus="0-15", driver="virtio-pci")
    blk = t.pci(root, "0000:00:02.0", REDHAT, 0x1042, 0x010000, cpus="0-15", driver="virtio-pci",
                config=config(REDHAT, 0x1042, 0x010000, size=small))
    vda = t.block(os.path.join(blk, "virtio1/block"), "vda", "254:0")
    drv = os.path.join(t.sys, "bus/virtio/drivers/virtio_blk")
    t.write(os.path.join(drv, "uevent"), "DRIVER=virtio_blk\n")
    t.link(os.path.join(blk, "virtio1/driver"), drv)
    t.link(os.path.join(vda, "device"), os.path.join(blk, "virtio1"))
    t.partition(vda, "vda1", "254:1")
    net = t.pci(root, "0000:00:03.0", REDHAT, 0x1041, ETHCLS, cpus="0-15", driver="virtio-pci",
                config=config(REDHAT, 0x1041, ETHCLS, size=small))
    t.netdev(os.path.join(net, "virtio2"), "eth0")
    t.pci(root, "0000:00:05.0", NVIDIA, H200, GPU3D, cpus="0-15", driver="nvidia",
          config=config(NVIDIA, H200, GPU3D, size=small), resource=gpu_resource(256 * GIB))
    t.sysw("kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    t.procw("driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build"
            "  (dvs-builder@U16-I1-N08-05-3)  Tue Jun 30 01:20:29 UTC 2026\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    t.procw("cmdline", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-31-cloud-amd64 root=/dev/vda1 ro "
            "console=ttyS0\n")
    t.procw("meminfo", "MemTotal:       131890212 kB\nHugePages_Total:       0\n"
            "HugePages_Free:        0\nHugepagesize:       2048 kB\n")
    t.procw("sys/kernel/io_uring_disabled", "0\n")
    t.modules("6.1.0-31-cloud-amd64",
              ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia", "virtio_net", "virtio_blk"],
              ["nvme/host/nvme-tcp", "nvme/host/nvme-fabrics", "nvme/target/nvmet",
               "nvme/target/nvmet-tcp"])


def nogpu():
    t = Tree("nogpu")
    root = t.host_bridge("pci0000:00")
    kw = dict(numa=0, cpus="0-31")
    t.pci(root, "0000:00:00.0", INTEL, 0x09a2, 0x060000, **kw)
    rp1 = t.pci(root, "0000:00:02.0", INTEL, 0x347a, BRIDGE, driver="pcieport",
                config=config(INTEL, 0x347a, BRIDGE, 4, acs=0x001d), **kw)
    rp2 = t.pci(root, "0000:00:03.0", INTEL, 0x347b, BRIDGE, driver="pcieport",
                config=config(INTEL, 0x347b, BRIDGE, 4, acs=0x001d), **kw)
    rp3 = t.pci(root, "0000:00:1c.0", INTEL, 0xa190, BRIDGE, driver="pcieport", **kw)
    nv = t.pci(rp1, "0000:01:00.0", SAMSUNG, PM1733, NVMECLS, driver="nvme",
               config=config(SAMSUNG, PM1733, NVMECLS), **kw)
    ns = t.nvme(nv, "nvme0", "SAMSUNG MZWLR7T6HALA-00007",
                "nqn.1994-11.com.samsung:nvme:PM1733:2.5-inch:S6CPNA0T100")
    t.partition(ns, "nvme0n1p2", "259:1")
    # an LVM volume on that partition: device mapper, off PCI, with a slave
    dm = t.block(os.path.join(t.sys, "devices/virtual/block"), "dm-0", "253:0")
    t.link(os.path.join(dm, "slaves/nvme0n1p2"), os.path.join(ns, "nvme0n1p2"))
    nic = t.pci(rp2, "0000:02:00.0", MELLANOX, 0x101d, ETHCLS, driver="mlx5_core",
                config=config(MELLANOX, 0x101d, ETHCLS, relaxed=False), **kw)
    t.netdev(nic, "enp2s0np0")
    t.rdma(nic, "mlx5_0", "Ethernet", "4: ACTIVE", "100 Gb/sec (4X EDR)")
    eth = t.pci(rp3, "0000:03:00.0", INTEL, 0x1533, ETHCLS, driver="igb", **kw)
    t.netdev(eth, "eno1")
    # Soft-RoCE on the Ethernet port, as the interop tests set it up
    rxe = os.path.join(t.sys, "devices/virtual/infiniband/rxe0")
    t.write(os.path.join(rxe, "parent"), "eno1\n")
    t.write(os.path.join(rxe, "ports/1/link_layer"), "Ethernet\n")
    t.write(os.path.join(rxe, "ports/1/state"), "4: ACTIVE\n")
    t.write(os.path.join(rxe, "ports/1/rate"), "1 Gb/sec (1X SDR)\n")
    t.link(os.path.join(t.sys, "class/infiniband/rxe0"), rxe)
    t.sysw("kernel/mm/transparent_hugepage/enabled", "[always] madvise never")
    t.procw("cmdline", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=/dev/nvme0n1p2 ro quiet\n")
    t.procw("meminfo", "MemTotal:       263890212 kB\nHugePages_Total:       0\n"
            "HugePages_Free:        0\nHugepagesize:       2048 kB\n")
    t.procw("sys/kernel/io_uring_disabled", "2\n")
    t.modules("6.1.0-28-amd64",
              ["nvme_tcp", "nvme_fabrics", "mlx5_ib", "ib_uverbs", "ib_core", "mlx5_core", "igb",
               "nvme", "nvme_core"],
              ["nvme/host/nvme-tcp", "nvme/host/nvme-rdma", "nvme/target/nvmet",
               "nvme/target/nvmet-tcp", "nvme/target/nvmet-rdma"])


if __name__ == "__main__":
    for f in (dgx8, vm1gpu, nogpu):
        f()
    for top, dirs, files in os.walk(HERE):
        if not dirs and not files:
            sys.exit("empty directory (git would drop it): " + top)
    sys.exit(0)
