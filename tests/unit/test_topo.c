/* SPDX-License-Identifier: MIT */
/*
 * The topology walk on the fixture machines under tests/data/sysfs, and the
 * distance rules on small trees built here, one rule each.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gdx/topo.h>

#include "test.h"
#include "topo/topo_int.h"

static char fixture[PATH_MAX];

static struct gdx_topo *open_fixture(const char *name)
{
	char sys[PATH_MAX + 64], proc[PATH_MAX + 64];
	struct gdx_topo_opts o;
	struct gdx_topo *t = NULL;

	snprintf(sys, sizeof(sys), "%s/%s/sys", fixture, name);
	snprintf(proc, sizeof(proc), "%s/%s/proc", fixture, name);
	gdx_topo_opts_init(&o, sizeof(o));
	o.sysfs_root = sys;
	o.procfs_root = proc;
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	assert_non_null(t);
	return t;
}

static int find(const struct gdx_topo *t, const char *key)
{
	int i = gdx_topo_find(t, GDX_TOPO_ANY, key);

	if (i < 0)
		fail_msg("device %s not found", key);
	return i;
}

static const char *dist(const struct gdx_topo *t, const char *a, const char *b)
{
	return gdx_topo_link_name(gdx_topo_distance(t, find(t, a), find(t, b)));
}

static void test_dgx_devices(void **state)
{
	struct gdx_topo *t = open_fixture("dgx8");
	struct gdx_topo_dev d = { .size = sizeof(d) };
	int gpus = 0, nics = 0, nvme = 0;

	(void)state;
	for (int i = 0; i < gdx_topo_count(t); i++) {
		assert_int_equal(gdx_topo_get(t, i, &d), 0);
		gpus += d.kind == GDX_TOPO_GPU;
		nics += d.kind == GDX_TOPO_NIC;
		nvme += d.kind == GDX_TOPO_NVME;
	}
	assert_int_equal(gpus, 8);
	assert_int_equal(nics, 8);
	assert_int_equal(nvme, 6);
	/* GPUs are numbered in PCI bus order, as nvidia-smi numbers them */
	assert_int_equal(gdx_topo_get(t, gdx_topo_nth(t, GDX_TOPO_GPU, 3), &d), 0);
	assert_string_equal(d.name, "GPU3");
	assert_string_equal(d.pci, "0000:49:00.0");
	assert_int_equal(d.ordinal, 3);
	assert_int_equal(d.numa_node, 0);
	assert_string_equal(d.cpulist, "0-55,112-167");
	assert_string_equal(d.driver, "nvidia");
	assert_true(d.bar1_size == 128ull << 30);
	assert_int_equal(d.vendor, 0x10de);
	assert_int_equal(d.class_code, 0x030200);

	assert_int_equal(gdx_topo_get(t, find(t, "mlx5_5"), &d), 0);
	assert_int_equal(d.kind, GDX_TOPO_NIC);
	assert_true(d.rdma);
	assert_string_equal(d.pci, "0000:8a:00.0");
	assert_string_equal(d.netdev, "ibp138s0");
	assert_string_equal(d.link_layer, "InfiniBand");
	assert_string_equal(d.port_state, "ACTIVE");
	assert_int_equal(d.numa_node, 1);

	/* a fabrics controller has no PCI function, but a transport and an address */
	assert_int_equal(gdx_topo_get(t, find(t, "nvme5"), &d), 0);
	assert_string_equal(d.transport, "rdma");
	assert_string_equal(d.pci, "");
	assert_non_null(strstr(d.address, "traddr=192.168.10.2"));
	assert_string_equal(d.subsysnqn, "nqn.2024-01.io.example:pool0");

	/* lookups by PCI address (with and without domain) and by netdev */
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_GPU, "0000:C5:00.0"), find(t, "GPU6"));
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_GPU, "c5:00.0"), find(t, "GPU6"));
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_NIC, "ibp6s0"), find(t, "mlx5_0"));
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_NIC, "GPU0"), -ENOENT);
	assert_int_equal(gdx_topo_nth(t, GDX_TOPO_GPU, 8), -ENOENT);
	gdx_topo_close(t);
}

static void test_dgx_distances(void **state)
{
	struct gdx_topo *t = open_fixture("dgx8");

	(void)state;
	assert_string_equal(dist(t, "GPU0", "GPU0"), "X");
	assert_string_equal(dist(t, "GPU0", "mlx5_0"), "PIX");	/* one switch */
	assert_string_equal(dist(t, "GPU0", "mlx5_1"), "PXB");	/* three switches */
	assert_string_equal(dist(t, "GPU0", "GPU1"), "PXB");
	assert_string_equal(dist(t, "GPU0", "nvme0"), "PXB");
	assert_string_equal(dist(t, "GPU0", "nvme4"), "PHB");	/* boot drive, other root port */
	assert_string_equal(dist(t, "GPU0", "mlx5_2"), "NODE");	/* other host bridge, node 0 */
	assert_string_equal(dist(t, "GPU2", "nvme4"), "NODE");
	assert_string_equal(dist(t, "GPU0", "mlx5_7"), "SYS");
	assert_string_equal(dist(t, "mlx5_7", "GPU0"), "SYS");
	assert_string_equal(dist(t, "GPU7", "mlx5_7"), "PIX");
	assert_int_equal(gdx_topo_distance(t, find(t, "GPU0"), find(t, "nvme5")), -ENODEV);
	assert_int_equal(gdx_topo_distance(t, 0, gdx_topo_count(t)), -ERANGE);
	assert_int_equal(gdx_topo_distance(t, -1, 0), -ERANGE);
	gdx_topo_close(t);
}

static void test_dgx_nearest(void **state)
{
	struct gdx_topo *t = open_fixture("dgx8");
	static const char *const nic[] = { "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
					   "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7" };
	static const char *const nvme[] = { "nvme0", "nvme0", "nvme1", "nvme1",
					    "nvme2", "nvme2", "nvme3", "nvme3" };
	struct gdx_topo_dev d = { .size = sizeof(d) };
	int link = -1;

	(void)state;
	for (int g = 0; g < 8; g++) {
		int gi = gdx_topo_nth(t, GDX_TOPO_GPU, g);

		assert_int_equal(gdx_topo_get(t, gdx_topo_nearest(t, gi, GDX_TOPO_NIC, &link), &d), 0);
		assert_string_equal(d.name, nic[g]);
		assert_int_equal(link, GDX_TOPO_PIX);
		assert_int_equal(gdx_topo_get(t, gdx_topo_nearest(t, gi, GDX_TOPO_NVME, &link), &d), 0);
		assert_string_equal(d.name, nvme[g]);
		assert_int_equal(link, GDX_TOPO_PXB);
	}
	for (int g = 0; g < 8; g++) {
		int gi = gdx_topo_nth(t, GDX_TOPO_GPU, g);

		assert_int_equal(gdx_topo_rdma_nic(t, gi, &link), find(t, nic[g]));
		assert_int_equal(link, GDX_TOPO_PIX);
	}
	assert_int_equal(gdx_topo_rdma_nic(t, -1, NULL), find(t, "mlx5_0"));
	assert_int_equal(gdx_topo_rdma_nic(t, gdx_topo_count(t), NULL), -ERANGE);
	/* the nearest GPU to a NIC, the way the transport asks the other way round */
	assert_int_equal(gdx_topo_get(t, gdx_topo_nearest(t, find(t, "mlx5_6"), GDX_TOPO_GPU,
							    NULL), &d), 0);
	assert_string_equal(d.name, "GPU6");
	assert_int_equal(gdx_topo_nearest(t, find(t, "GPU0"), GDX_TOPO_DISK, NULL), -ENOENT);
	gdx_topo_close(t);
}

static void test_dgx_path_bridges(void **state)
{
	struct gdx_topo *t = open_fixture("dgx8");
	char br[8][16];
	uint8_t cfg[4096];
	ssize_t len;
	int n, pos;

	(void)state;
	n = gdx_topo_path_bridges(t, find(t, "GPU6"), find(t, "mlx5_6"), br, 8);
	assert_int_equal(n, 3);
	assert_string_equal(br[0], "0000:c4:00.0");	/* GPU6's downstream port */
	assert_string_equal(br[1], "0000:c4:01.0");	/* mlx5_6's */
	assert_string_equal(br[2], "0000:c3:00.0");	/* the switch's upstream port */
	assert_int_equal(gdx_topo_path_bridges(t, find(t, "GPU0"), find(t, "mlx5_2"), br, 8), 0);
	assert_int_equal(gdx_topo_path_bridges(t, find(t, "GPU0"), find(t, "nvme4"), br, 8), 0);
	n = gdx_topo_path_bridges(t, find(t, "GPU0"), find(t, "mlx5_1"), br, 8);
	assert_int_equal(n, 7);
	assert_int_equal(gdx_topo_path_bridges(t, find(t, "GPU0"), find(t, "mlx5_1"), br, 2), 2);

	/* the fixture leaves ACS P2P redirect on in that switch */
	len = gdx_pci_config(t, "0000:c4:00.0", cfg, sizeof(cfg));
	assert_int_equal(len, 0x200);
	pos = gdx_pci_find_ecap(cfg, (size_t)len, GDX_PCI_ECAP_ACS);
	assert_int_equal(pos, 0x100);
	assert_true(cfg[pos + GDX_PCI_ACS_CTRL] & GDX_PCI_ACS_RR);
	pos = gdx_pci_find_cap(cfg, (size_t)len, GDX_PCI_CAP_EXP);
	assert_int_equal(pos, 0x40);
	assert_int_equal((cfg[pos + GDX_PCI_EXP_FLAGS] >> 4) & 0xf, 6);	/* downstream port */
	assert_int_equal(gdx_pci_config(t, "0000:ff:00.0", cfg, sizeof(cfg)), -ENOENT);
	gdx_topo_close(t);
}

static void test_vm(void **state)
{
	struct gdx_topo *t = open_fixture("vm1gpu");
	struct gdx_topo_dev d = { .size = sizeof(d) };
	uint8_t cfg[256];
	ssize_t len;

	(void)state;
	assert_int_equal(gdx_topo_count(t), 3);
	assert_int_equal(gdx_topo_get(t, 0, &d), 0);
	assert_string_equal(d.name, "GPU0");
	assert_string_equal(d.pci, "0000:00:05.0");
	assert_int_equal(d.numa_node, -1);
	assert_true(d.bar1_size == 256ull << 30);
	assert_string_equal(dist(t, "GPU0", "vda"), "PHB");
	assert_string_equal(dist(t, "GPU0", "eth0"), "PHB");
	assert_int_equal(gdx_topo_get(t, find(t, "eth0"), &d), 0);
	assert_false(d.rdma);
	assert_string_equal(d.pci, "0000:00:03.0");
	assert_int_equal(gdx_topo_get(t, find(t, "vda"), &d), 0);
	assert_int_equal(d.kind, GDX_TOPO_DISK);
	assert_int_equal(gdx_topo_nearest(t, 0, GDX_TOPO_NVME, NULL), -ENOENT);
	/* an unprivileged reader gets 64 bytes: too few to find any capability */
	len = gdx_pci_config(t, "0000:00:05.0", cfg, sizeof(cfg));
	assert_int_equal(len, 64);
	assert_int_equal(gdx_pci_find_cap(cfg, (size_t)len, GDX_PCI_CAP_EXP), -ENODATA);
	assert_int_equal(gdx_pci_find_ecap(cfg, (size_t)len, GDX_PCI_ECAP_ACS), -ENODATA);
	gdx_topo_close(t);
}

static void test_nogpu(void **state)
{
	struct gdx_topo *t = open_fixture("nogpu");
	struct gdx_topo_dev d = { .size = sizeof(d) };

	(void)state;
	assert_int_equal(gdx_topo_nth(t, GDX_TOPO_GPU, 0), -ENOENT);
	/* RDMA NICs come before plain ones */
	assert_int_equal(gdx_topo_get(t, gdx_topo_nth(t, GDX_TOPO_NIC, 0), &d), 0);
	assert_string_equal(d.name, "mlx5_0");
	assert_string_equal(d.link_layer, "Ethernet");
	assert_int_equal(d.rdma, GDX_TOPO_RDMA_HW);
	/* Soft-RoCE takes the place of the netdev it runs on */
	assert_int_equal(gdx_topo_get(t, gdx_topo_nth(t, GDX_TOPO_NIC, 1), &d), 0);
	assert_string_equal(d.name, "rxe0");
	assert_int_equal(d.rdma, GDX_TOPO_RDMA_SOFT);
	assert_string_equal(d.netdev, "eno1");
	assert_string_equal(d.pci, "0000:03:00.0");
	assert_int_equal(gdx_topo_nth(t, GDX_TOPO_NIC, 2), -ENOENT);
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_NIC, "eno1"), find(t, "rxe0"));
	assert_string_equal(dist(t, "nvme0", "mlx5_0"), "PHB");
	assert_string_equal(dist(t, "nvme0", "rxe0"), "PHB");
	assert_int_equal(gdx_topo_rdma_nic(t, find(t, "nvme0"), NULL), find(t, "mlx5_0"));
	/* both NICs are PHB from the NVMe: the hardware one wins the tie */
	assert_int_equal(gdx_topo_nearest(t, find(t, "nvme0"), GDX_TOPO_NIC, NULL), find(t, "mlx5_0"));
	gdx_topo_close(t);
}

/* A snapshot of Debian's stock kernel in the qemu guest: Soft-RoCE, NVMe/TCP. */
static void test_debianvm(void **state)
{
	struct gdx_topo *t = open_fixture("debianvm");
	struct gdx_topo_dev d = { .size = sizeof(d) };

	(void)state;
	assert_int_equal(gdx_topo_get(t, find(t, "rxe0"), &d), 0);
	assert_int_equal(d.rdma, GDX_TOPO_RDMA_SOFT);
	assert_string_equal(d.netdev, "eth0");
	assert_string_equal(d.pci, "0000:00:02.0");
	assert_string_equal(d.port_state, "ACTIVE");
	assert_int_equal(gdx_topo_get(t, find(t, "nvme0"), &d), 0);
	assert_string_equal(d.transport, "tcp");
	assert_string_equal(d.pci, "");
	assert_non_null(strstr(d.address, "traddr=127.0.0.1,trsvcid=4420"));
	assert_int_equal(gdx_topo_get(t, find(t, "vda"), &d), 0);
	assert_string_equal(d.driver, "virtio_blk");
	assert_string_equal(dist(t, "rxe0", "vda"), "PHB");
	/* the namespace head of a fabrics controller: found by name, off PCI */
	assert_int_equal(gdx_topo_find_devno(t, 259, 1), find(t, "nvme0"));
	assert_int_equal(gdx_topo_find_devno(t, 254, 0), find(t, "vda"));
	assert_int_equal(gdx_topo_nth(t, GDX_TOPO_GPU, 0), -ENOENT);
	gdx_topo_close(t);
}

static void test_get_sizes(void **state)
{
	struct gdx_topo *t = open_fixture("dgx8");
	struct gdx_topo_dev d;

	(void)state;
	/* an older caller's smaller struct gets only its part */
	memset(&d, 0x7f, sizeof(d));
	d.size = offsetof(struct gdx_topo_dev, pci);
	assert_int_equal(gdx_topo_get(t, 0, &d), 0);
	assert_string_equal(d.name, "GPU0");
	assert_int_equal((unsigned char)d.pci[0], 0x7f);
	d.size = 2;
	assert_int_equal(gdx_topo_get(t, 0, &d), -EINVAL);
	d.size = sizeof(d);
	assert_int_equal(gdx_topo_get(t, -1, &d), -ERANGE);
	assert_int_equal(gdx_topo_get(t, gdx_topo_count(t), &d), -ERANGE);
	assert_string_equal(gdx_topo_link_name(GDX_TOPO_SYS), "SYS");
	assert_string_equal(gdx_topo_link_name(-ENODEV), "?");
	assert_string_equal(gdx_topo_link_name(6), "?");
	gdx_topo_close(t);
}

static void test_missing_root(void **state)
{
	struct gdx_topo_opts o;
	struct gdx_topo *t;

	(void)state;
	gdx_topo_opts_init(&o, sizeof(o));
	o.sysfs_root = "/nonexistent/gdx-sysfs";
	o.procfs_root = "/nonexistent/gdx-procfs";
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	assert_int_equal(gdx_topo_count(t), 0);
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_ANY, "GPU0"), -ENOENT);
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_ANY, NULL), -EINVAL);
	assert_int_equal(gdx_topo_nearest(t, 0, GDX_TOPO_NIC, NULL), -ERANGE);
	gdx_topo_close(t);
	gdx_topo_close(NULL);
}

/* ---- the distance rules on trees built here ----------------------------- */

static char tmp[PATH_MAX];

static void mk(const char *rel, const char *text)
{
	char path[PATH_MAX * 2];
	char *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	for (slash = strchr(path + strlen(tmp) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(path, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A PCI function at devices/<chain>/<bdf>, with its bus/pci/devices link. */
static void pcidev(const char *chain, unsigned cls, unsigned vendor, int numa)
{
	char rel[PATH_MAX], link[PATH_MAX * 2], target[PATH_MAX], val[32];
	const char *bdf = strrchr(chain, '/') + 1;

	snprintf(rel, sizeof(rel), "sys/devices/%s/class", chain);
	snprintf(val, sizeof(val), "0x%06x\n", cls);
	mk(rel, val);
	snprintf(rel, sizeof(rel), "sys/devices/%s/vendor", chain);
	snprintf(val, sizeof(val), "0x%04x\n", vendor);
	mk(rel, val);
	snprintf(rel, sizeof(rel), "sys/devices/%s/numa_node", chain);
	snprintf(val, sizeof(val), "%d\n", numa);
	mk(rel, val);
	mk("sys/bus/pci/devices/.keep", "");
	snprintf(link, sizeof(link), "%s/sys/bus/pci/devices/%s", tmp, bdf);
	snprintf(target, sizeof(target), "../../../devices/%s", chain);
	assert_int_equal(symlink(target, link), 0);
}

static void netdev(const char *chain, const char *ifname)
{
	char link[PATH_MAX * 2], target[PATH_MAX];

	snprintf(link, sizeof(link), "sys/class/net/%s/uevent", ifname);
	mk(link, "");
	snprintf(link, sizeof(link), "%s/sys/class/net/%s/device", tmp, ifname);
	snprintf(target, sizeof(target), "../../../devices/%s", chain);
	assert_int_equal(symlink(target, link), 0);
}

/* An RDMA device on the PCI function at chain, with port 1 in the given state. */
static void rdmadev(const char *chain, const char *ib, const char *state)
{
	char rel[PATH_MAX], link[PATH_MAX * 2], target[PATH_MAX];

	snprintf(rel, sizeof(rel), "sys/devices/%s/infiniband/%s/ports/1/state", chain, ib);
	mk(rel, state);
	snprintf(link, sizeof(link), "%s/sys/devices/%s/infiniband/%s/device", tmp, chain, ib);
	assert_int_equal(symlink("../..", link), 0);
	mk("sys/class/infiniband/.keep", "");
	snprintf(link, sizeof(link), "%s/sys/class/infiniband/%s", tmp, ib);
	snprintf(target, sizeof(target), "../../devices/%s/infiniband/%s", chain, ib);
	assert_int_equal(symlink(target, link), 0);
}

static void rm_tree(void)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	assert_int_equal(system(cmd), 0);
}

static void test_rules(void **state)
{
	struct gdx_topo_opts o;
	struct gdx_topo *t;
	char sys[PATH_MAX + 8], lnk[PATH_MAX * 2];

	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/gdx-topo-XXXXXX");
	assert_non_null(mkdtemp(tmp));
	/* a GPU and a NIC as two functions of one card under a root port: one bridge */
	pcidev("pci0000:00/0000:00:01.0", 0x060400, 0x8086, -1);
	pcidev("pci0000:00/0000:00:01.0/0000:01:00.0", 0x030000, 0x10de, -1);
	pcidev("pci0000:00/0000:00:01.0/0000:01:00.1", 0x020000, 0x15b3, -1);
	netdev("pci0000:00/0000:00:01.0/0000:01:00.1", "eth1");
	/* a GPU straight on the host bridge, as in a VM */
	pcidev("pci0000:00/0000:00:05.0", 0x030200, 0x10de, -1);
	/* a NIC on another host bridge; NUMA unknown on both sides: NODE, not SYS */
	pcidev("pci0000:80/0000:80:02.0", 0x020000, 0x8086, -1);
	netdev("pci0000:80/0000:80:02.0", "eth2");
	/* an NVIDIA audio function (class 0x0403) and an NVSwitch (0x0680) are no GPUs */
	pcidev("pci0000:00/0000:00:01.0/0000:01:00.2", 0x040300, 0x10de, -1);
	pcidev("pci0000:00/0000:00:06.0", 0x068000, 0x10de, -1);
	/* an NVMe controller with no driver still counts */
	pcidev("pci0000:00/0000:00:07.0", 0x010802, 0x144d, -1);

	snprintf(sys, sizeof(sys), "%s/sys", tmp);
	gdx_topo_opts_init(&o, sizeof(o));
	o.sysfs_root = sys;
	o.procfs_root = tmp;
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	assert_int_equal(gdx_topo_count(t), 5);
	/* GPUs in bus order: GPU0 is 00:05.0, GPU1 01:00.0 */
	assert_string_equal(dist(t, "GPU1", "eth1"), "PIX");
	assert_string_equal(dist(t, "GPU0", "GPU1"), "PHB");
	assert_string_equal(dist(t, "GPU0", "eth1"), "PHB");
	assert_string_equal(dist(t, "GPU1", "eth2"), "NODE");
	assert_string_equal(dist(t, "GPU0", "nvme@00:07.0"), "PHB");
	assert_string_equal(gdx_topo_host_bridge(t, find(t, "eth2")), "pci0000:80");
	gdx_topo_close(t);
	rm_tree();

	/* an RDMA NIC one switch away with its port down loses to an active one far away */
	assert_non_null(mkdtemp(strcpy(tmp, "/tmp/gdx-topo-XXXXXX")));
	pcidev("pci0000:00/0000:00:01.0", 0x060400, 0x8086, 0);
	pcidev("pci0000:00/0000:00:01.0/0000:01:00.0", 0x030200, 0x10de, 0);
	pcidev("pci0000:00/0000:00:01.0/0000:01:00.1", 0x020700, 0x15b3, 0);
	rdmadev("pci0000:00/0000:00:01.0/0000:01:00.1", "mlx5_0", "1: DOWN");
	pcidev("pci0000:80/0000:80:02.0", 0x020700, 0x15b3, 1);
	rdmadev("pci0000:80/0000:80:02.0", "mlx5_1", "4: ACTIVE");
	snprintf(sys, sizeof(sys), "%s/sys", tmp);
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	{
		int link = -1;

		assert_string_equal(dist(t, "GPU0", "mlx5_0"), "PIX");
		assert_int_equal(gdx_topo_nearest(t, 0, GDX_TOPO_NIC, NULL), find(t, "mlx5_0"));
		assert_int_equal(gdx_topo_rdma_nic(t, 0, &link), find(t, "mlx5_1"));
		assert_int_equal(link, GDX_TOPO_SYS);
	}
	gdx_topo_close(t);
	rm_tree();

	/* the same NIC with NUMA nodes known and different: SYS */
	assert_non_null(mkdtemp(strcpy(tmp, "/tmp/gdx-topo-XXXXXX")));
	pcidev("pci0000:00/0000:00:05.0", 0x030200, 0x10de, 0);
	pcidev("pci0000:80/0000:80:02.0", 0x020000, 0x8086, 1);
	netdev("pci0000:80/0000:80:02.0", "eth2");
	snprintf(sys, sizeof(sys), "%s/sys", tmp);
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	assert_string_equal(dist(t, "GPU0", "eth2"), "SYS");
	gdx_topo_close(t);

	/* a multipath namespace head, off PCI, is found through its controller's name */
	pcidev("pci0000:00/0000:00:07.0", 0x010802, 0x144d, 0);
	mk("sys/class/nvme/nvme0/transport", "pcie\n");
	snprintf(lnk, sizeof(lnk), "%s/sys/class/nvme/nvme0/device", tmp);
	assert_int_equal(symlink("../../../devices/pci0000:00/0000:00:07.0", lnk), 0);
	mk("sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1/dev", "259:9\n");
	mk("sys/dev/block/.keep", "");
	snprintf(lnk, sizeof(lnk), "%s/sys/dev/block/259:9", tmp);
	assert_int_equal(symlink("../../devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", lnk),
			 0);
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	assert_int_equal(gdx_topo_find_devno(t, 259, 9), find(t, "nvme0"));
	assert_int_equal(gdx_topo_find_devno(t, 259, 10), -ENOENT);
	gdx_topo_close(t);
	rm_tree();
}

/* Malformed trees: garbage values, dangling links, stray names; nothing crashes. */
static void test_malformed(void **state)
{
	struct gdx_topo_opts o;
	struct gdx_topo_dev d = { .size = sizeof(d) };
	struct gdx_topo *t;
	char sys[PATH_MAX + 8], lnk[PATH_MAX * 2];

	(void)state;
	assert_non_null(mkdtemp(strcpy(tmp, "/tmp/gdx-topo-XXXXXX")));
	pcidev("pci0000:00/0000:00:05.0", 0x030200, 0x10de, 0);
	/* garbage where numbers belong, a resource file with one line */
	mk("sys/devices/pci0000:00/0000:00:05.0/numa_node", "abc\n");
	mk("sys/devices/pci0000:00/0000:00:05.0/resource", "0x1000 0x1fff 0x200\n");
	pcidev("pci0000:00/0000:00:06.0", 0x030200, 0x10de, 0);
	mk("sys/devices/pci0000:00/0000:00:06.0/resource", "0x0 0x0 0x0\nnot numbers at all\n");
	pcidev("pci0000:00/0000:00:07.0", 0x010802, 0x144d, 0);
	mk("sys/devices/pci0000:00/0000:00:07.0/class", "zzz\n");
	/* a dangling link and names that are no PCI address */
	snprintf(lnk, sizeof(lnk), "%s/sys/bus/pci/devices/0000:00:09.0", tmp);
	assert_int_equal(symlink("../../../devices/pci0000:00/0000:00:09.0", lnk), 0);
	mk("sys/bus/pci/devices/README", "not a device\n");
	snprintf(lnk, sizeof(lnk), "%s/sys/bus/pci/devices/0000:00:0a.0x", tmp);
	assert_int_equal(symlink("../../../devices/pci0000:00/0000:00:05.0", lnk), 0);
	/* an RDMA device whose device link dangles, an NVMe controller with nothing in it */
	mk("sys/class/infiniband/.keep", "");
	snprintf(lnk, sizeof(lnk), "%s/sys/class/infiniband/mlx5_9", tmp);
	assert_int_equal(symlink("../../devices/nowhere/mlx5_9", lnk), 0);
	mk("sys/class/nvme/nvme7/.keep", "");
	/* a block device loop: dm-0's slave is dm-0 */
	mk("sys/devices/virtual/block/dm-0/dev", "253:0\n");
	mk("sys/devices/virtual/block/dm-0/slaves/.keep", "");
	snprintf(lnk, sizeof(lnk), "%s/sys/devices/virtual/block/dm-0/slaves/dm-0", tmp);
	assert_int_equal(symlink("..", lnk), 0);
	mk("sys/class/block/.keep", "");
	snprintf(lnk, sizeof(lnk), "%s/sys/class/block/dm-0", tmp);
	assert_int_equal(symlink("../../devices/virtual/block/dm-0", lnk), 0);
	mk("sys/dev/block/.keep", "");
	snprintf(lnk, sizeof(lnk), "%s/sys/dev/block/253:0", tmp);
	assert_int_equal(symlink("../../devices/virtual/block/dm-0", lnk), 0);

	snprintf(sys, sizeof(sys), "%s/sys", tmp);
	gdx_topo_opts_init(&o, sizeof(o));
	o.sysfs_root = sys;
	o.procfs_root = tmp;
	assert_int_equal(gdx_topo_open(&t, &o), 0);
	/* two GPUs, the RDMA device off PCI, the empty controller; the class-less NVMe is not one */
	assert_int_equal(gdx_topo_get(t, find(t, "GPU0"), &d), 0);
	assert_int_equal(d.numa_node, -1);
	assert_true(d.bar1_size == 0);
	assert_int_equal(gdx_topo_get(t, find(t, "GPU1"), &d), 0);
	assert_true(d.bar1_size == 0);
	assert_int_equal(gdx_topo_get(t, find(t, "mlx5_9"), &d), 0);
	assert_string_equal(d.pci, "");
	assert_int_equal(gdx_topo_distance(t, find(t, "GPU0"), find(t, "mlx5_9")), -ENODEV);
	assert_int_equal(gdx_topo_rdma_nic(t, find(t, "GPU0"), NULL), find(t, "mlx5_9"));
	assert_int_equal(gdx_topo_get(t, find(t, "nvme7"), &d), 0);
	assert_string_equal(d.transport, "");
	assert_int_equal(gdx_topo_find(t, GDX_TOPO_NVME, "0000:00:07.0"), -ENOENT);
	assert_int_equal(gdx_topo_count(t), 4);
	assert_int_equal(gdx_topo_find_devno(t, 253, 0), -ENOENT);
	gdx_topo_close(t);
	rm_tree();
}

static void test_find_block(void **state)
{
	struct gdx_topo *t = open_fixture("vm1gpu");
	int i;

	(void)state;
	/* a partition resolves to its disk */
	assert_int_equal(gdx_topo_find_devno(t, 254, 1), find(t, "vda"));
	assert_int_equal(gdx_topo_find_devno(t, 254, 0), find(t, "vda"));
	assert_int_equal(gdx_topo_find_devno(t, 254, 7), -ENOENT);
	/* major 0: tmpfs, overlayfs, NFS have no block device */
	assert_int_equal(gdx_topo_find_devno(t, 0, 42), -ENOENT);
	assert_int_equal(gdx_topo_find_file(t, "/nonexistent/gdx"), -ENOENT);
	assert_int_equal(gdx_topo_find_file(t, NULL), -EINVAL);
	gdx_topo_close(t);

	t = open_fixture("nogpu");
	/* an LVM volume resolves through its slave partition to the NVMe below */
	assert_int_equal(gdx_topo_find_devno(t, 253, 0), find(t, "nvme0"));
	assert_int_equal(gdx_topo_find_devno(t, 259, 1), find(t, "nvme0"));
	gdx_topo_close(t);

	t = open_fixture("dgx8");
	i = gdx_topo_find_devno(t, 259, 6);
	assert_int_equal(i, find(t, "nvme3"));
	gdx_topo_close(t);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void test_cap_parsing(void **state)
{
	uint8_t cfg[0x200];

	(void)state;
	/* a capability list that loops back on itself ends */
	memset(cfg, 0, sizeof(cfg));
	cfg[0x06] = 0x10;
	cfg[0x34] = 0x40;
	cfg[0x40] = 0x01;
	cfg[0x41] = 0x40;
	assert_int_equal(gdx_pci_find_cap(cfg, sizeof(cfg), GDX_PCI_CAP_EXP), 0);
	/* no list at all */
	cfg[0x06] = 0;
	assert_int_equal(gdx_pci_find_cap(cfg, sizeof(cfg), GDX_PCI_CAP_EXP), 0);
	/* a pointer past what was read */
	cfg[0x06] = 0x10;
	cfg[0x34] = 0xfc;
	assert_int_equal(gdx_pci_find_cap(cfg, 0x80, GDX_PCI_CAP_EXP), -ENODATA);
	/* extended list: AER at 0x100 -> ACS at 0x148 */
	put32(cfg + 0x100, 0x0001 | 1u << 16 | 0x148u << 20);
	put32(cfg + 0x148, 0x000d | 1u << 16);
	assert_int_equal(gdx_pci_find_ecap(cfg, sizeof(cfg), GDX_PCI_ECAP_ACS), 0x148);
	assert_int_equal(gdx_pci_find_ecap(cfg, 0x120, GDX_PCI_ECAP_ACS), -ENODATA);
	/* a next pointer below 0x100 ends the list */
	put32(cfg + 0x148, 0x000e | 1u << 16 | 0x40u << 20);
	assert_int_equal(gdx_pci_find_ecap(cfg, sizeof(cfg), GDX_PCI_ECAP_ACS), 0);
	/* an all-ones header (device gone) ends it too */
	memset(cfg + 0x100, 0xff, 4);
	assert_int_equal(gdx_pci_find_ecap(cfg, sizeof(cfg), GDX_PCI_ECAP_ACS), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dgx_devices),
		cmocka_unit_test(test_dgx_distances),
		cmocka_unit_test(test_dgx_nearest),
		cmocka_unit_test(test_dgx_path_bridges),
		cmocka_unit_test(test_vm),
		cmocka_unit_test(test_nogpu),
		cmocka_unit_test(test_debianvm),
		cmocka_unit_test(test_get_sizes),
		cmocka_unit_test(test_missing_root),
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_find_block),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_cap_parsing),
	};
	const char *src = getenv("GDX_SRCDIR");

	snprintf(fixture, sizeof(fixture), "%s/tests/data/sysfs", src ? src : ".");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
