/* SPDX-License-Identifier: MIT */
/*
 * The topology walk.  Every PCI function is found through the bus/pci/devices
 * links; resolving a link gives its place in the tree,
 *   devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0
 * i.e. the host bridge, then every bridge down to the device.  Two devices'
 * lists of bridges decide their distance (see gdx_topo_distance).  Everything
 * is read relative to a root so that tests run on fixture trees.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "topo/topo_int.h"

struct topo_node {
	struct gdx_topo_dev d;
	char host_bridge[24];
	char bridges[GDX_TOPO_MAX_DEPTH][16];
	int nbridges;
};

struct gdx_topo {
	char sysfs[PATH_MAX];
	char procfs[PATH_MAX];
	struct topo_node *dev;
	int n, cap;
};

GDX_API void gdx_topo_opts_init(struct gdx_topo_opts *o, size_t size)
{
	memset(o, 0, size);
	o->size = size;
}

int gdx_topo_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

const char *gdx_topo_sysfs_root(const struct gdx_topo *t)
{
	return t->sysfs;
}

const char *gdx_topo_procfs_root(const struct gdx_topo *t)
{
	return t->procfs;
}

int gdx_topo_read(const char *root, const char *rel, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	if (!len)
		return -EINVAL;
	if (gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel) < 0)
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = 0;
	return (int)n;
}

/* "DDDD:BB:DD.F" with a 4- or 5-digit domain (VMD uses 10000 and up). */
static int is_bdf(const char *s)
{
	size_t n = strlen(s), dom = n >= 8 ? n - 8 : 0;

	if (n != 12 && n != 13)
		return 0;
	for (size_t i = 0; i < n; i++) {
		int want_colon = i == dom || i == dom + 3;
		int want_dot = i == dom + 6;

		if (want_colon || want_dot) {
			if (s[i] != (want_colon ? ':' : '.'))
				return 0;
		} else if (!isxdigit((unsigned char)s[i])) {
			return 0;
		}
	}
	return 1;
}

static int is_host_bridge(const char *s)
{
	return !strncmp(s, "pci", 3) && strchr(s, ':') && isxdigit((unsigned char)s[3]);
}

/*
 * Resolves root/rel (a link into devices/) and fills the node's host bridge
 * and bridges.  Returns the nearest PCI function at or above the target in
 * pci (NUL when there is none), so a block device or an RDMA device finds the
 * function it hangs off.
 */
static int resolve_pci(const char *root, const char *rel, struct topo_node *nd, char *pci)
{
	char path[PATH_MAX], real[PATH_MAX];
	char *save = NULL, *c;
	char chain[GDX_TOPO_MAX_DEPTH + 1][16];
	int n = 0;

	pci[0] = 0;
	gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel);
	if (!realpath(path, real))
		return -errno;
	nd->host_bridge[0] = 0;
	for (c = strtok_r(real, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (is_host_bridge(c)) {
			gdx_topo_fmt(nd->host_bridge, sizeof(nd->host_bridge), "%s", c);
			n = 0;
		} else if (is_bdf(c) && nd->host_bridge[0]) {
			if (n == GDX_TOPO_MAX_DEPTH + 1)
				return -ELOOP;
			gdx_topo_fmt(chain[n++], sizeof(chain[0]), "%s", c);
		}
	}
	if (!n)
		return 0;
	gdx_topo_fmt(pci, 16, "%s", chain[n - 1]);
	nd->nbridges = n - 1;
	for (int i = 0; i < n - 1; i++)
		memcpy(nd->bridges[i], chain[i], sizeof(chain[0]));
	return 0;
}

static unsigned long read_ul(const char *root, const char *rel, int base, unsigned long def)
{
	char buf[64], *end;
	unsigned long v;

	if (gdx_topo_read(root, rel, buf, sizeof(buf)) <= 0)
		return def;
	errno = 0;
	v = strtoul(buf, &end, base);
	return errno || end == buf ? def : v;
}

static void read_link_base(const char *root, const char *rel, char *out, size_t len)
{
	char path[PATH_MAX], target[PATH_MAX];
	ssize_t n;

	out[0] = 0;
	gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel);
	n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return;
	target[n] = 0;
	gdx_topo_fmt(out, len, "%s", strrchr(target, '/') ? strrchr(target, '/') + 1 : target);
}

/* First entry (version order) of root/rel, skipping dot files. */
static int first_entry(const char *root, const char *rel, char *out, size_t len)
{
	char path[PATH_MAX];
	struct dirent **ents;
	int n, found = 0;

	out[0] = 0;
	gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel);
	n = scandir(path, &ents, NULL, versionsort);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		if (!found && ents[i]->d_name[0] != '.') {
			gdx_topo_fmt(out, len, "%s", ents[i]->d_name);
			found = 1;
		}
		free(ents[i]);
	}
	free(ents);
	return found ? 0 : -ENOENT;
}

static struct topo_node *add_node(struct gdx_topo *t)
{
	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 32;
		struct topo_node *d = realloc(t->dev, (size_t)cap * sizeof(*d));

		if (!d)
			return NULL;
		t->dev = d;
		t->cap = cap;
	}
	memset(&t->dev[t->n], 0, sizeof(t->dev[0]));
	t->dev[t->n].d.size = sizeof(struct gdx_topo_dev);
	t->dev[t->n].d.numa_node = -1;
	return &t->dev[t->n++];
}

static int find_pci(const struct gdx_topo *t, const char *pci, unsigned kinds)
{
	for (int i = 0; i < t->n; i++)
		if ((t->dev[i].d.kind & kinds) && !strcasecmp(t->dev[i].d.pci, pci))
			return i;
	return -ENOENT;
}

/* Fills the PCI facts of a node whose d.pci is set. */
static void read_pci_facts(struct gdx_topo *t, struct topo_node *nd)
{
	char rel[PATH_MAX], pci[16], buf[512];
	long numa;

	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s", nd->d.pci);
	resolve_pci(t->sysfs, rel, nd, pci);
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/vendor", nd->d.pci);
	nd->d.vendor = (uint16_t)read_ul(t->sysfs, rel, 16, 0);
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/device", nd->d.pci);
	nd->d.device = (uint16_t)read_ul(t->sysfs, rel, 16, 0);
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/class", nd->d.pci);
	nd->d.class_code = (uint32_t)read_ul(t->sysfs, rel, 16, 0);
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/numa_node", nd->d.pci);
	if (gdx_topo_read(t->sysfs, rel, buf, sizeof(buf)) > 0) {
		char *end;

		numa = strtol(buf, &end, 10);
		nd->d.numa_node = end != buf && !*end && numa >= 0 && numa < 4096 ? (int)numa : -1;
	}
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/local_cpulist", nd->d.pci);
	if (gdx_topo_read(t->sysfs, rel, buf, sizeof(buf)) > 0)
		gdx_topo_fmt(nd->d.cpulist, sizeof(nd->d.cpulist), "%s", buf);
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/driver", nd->d.pci);
	read_link_base(t->sysfs, rel, nd->d.driver, sizeof(nd->d.driver));
}

/* BAR1 is the second line of the resource file: "start end flags". */
static uint64_t bar1_size(const struct gdx_topo *t, const char *pci)
{
	char rel[PATH_MAX], buf[2048], *line;
	unsigned long long start, end, flags;

	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/resource", pci);
	if (gdx_topo_read(t->sysfs, rel, buf, sizeof(buf)) <= 0)
		return 0;
	line = strchr(buf, '\n');
	if (!line || sscanf(line + 1, "%llx %llx %llx", &start, &end, &flags) != 3)
		return 0;
	return end > start ? end - start + 1 : 0;
}

static int scan_pci(struct gdx_topo *t)
{
	char path[PATH_MAX], rel[PATH_MAX];
	struct dirent **ents;
	int n;

	gdx_topo_fmt(path, sizeof(path), "%s/bus/pci/devices", t->sysfs);
	n = scandir(path, &ents, NULL, versionsort);
	if (n < 0) {
		GDX_INFO("topo", "no PCI devices under %s: %s", path, strerror(errno));
		return 0;
	}
	for (int i = 0; i < n; i++) {
		const char *bdf = ents[i]->d_name;
		unsigned long cls, vendor;
		struct topo_node *nd;

		if (!is_bdf(bdf))
			goto next;
		gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/class", bdf);
		cls = read_ul(t->sysfs, rel, 16, 0);
		gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/vendor", bdf);
		vendor = read_ul(t->sysfs, rel, 16, 0);
		if (vendor != 0x10de || (cls >> 16) != 0x03)
			goto next;
		nd = add_node(t);
		if (!nd) {
			for (; i < n; i++)
				free(ents[i]);
			free(ents);
			return -ENOMEM;
		}
		nd->d.kind = GDX_TOPO_GPU;
		gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", bdf);
		read_pci_facts(t, nd);
		nd->d.bar1_size = bar1_size(t, bdf);
next:
		free(ents[i]);
	}
	free(ents);
	return 0;
}

static void port_attr(struct gdx_topo *t, const char *ib, const char *attr, char *out, size_t len)
{
	char rel[PATH_MAX], buf[128];
	const char *v = buf;

	gdx_topo_fmt(rel, sizeof(rel), "class/infiniband/%s/ports/1/%s", ib, attr);
	if (gdx_topo_read(t->sysfs, rel, buf, sizeof(buf)) <= 0)
		return;
	/* state reads "4: ACTIVE" */
	if (strchr(buf, ':') && isdigit((unsigned char)buf[0]))
		v = strchr(buf, ':') + 1;
	while (*v == ' ')
		v++;
	gdx_topo_fmt(out, len, "%s", v);
}

static int scan_class(struct gdx_topo *t, const char *cls, int (*one)(struct gdx_topo *, const char *))
{
	char path[PATH_MAX];
	struct dirent **ents;
	int n, err = 0;

	gdx_topo_fmt(path, sizeof(path), "%s/class/%s", t->sysfs, cls);
	n = scandir(path, &ents, NULL, versionsort);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		if (!err && ents[i]->d_name[0] != '.')
			err = one(t, ents[i]->d_name);
		free(ents[i]);
	}
	free(ents);
	return err;
}

static int one_rdma(struct gdx_topo *t, const char *ib)
{
	char rel[PATH_MAX], pci[16], parent[32];
	struct topo_node tmp = { 0 }, *nd;
	bool soft = false;

	gdx_topo_fmt(rel, sizeof(rel), "class/infiniband/%s/device", ib);
	resolve_pci(t->sysfs, rel, &tmp, pci);
	/* Soft-RoCE has no device of its own: it names its netdev in "parent" */
	gdx_topo_fmt(rel, sizeof(rel), "class/infiniband/%s/parent", ib);
	if (!pci[0] && gdx_topo_read(t->sysfs, rel, parent, sizeof(parent)) > 0) {
		gdx_topo_fmt(rel, sizeof(rel), "class/net/%s/device", parent);
		resolve_pci(t->sysfs, rel, &tmp, pci);
		soft = true;
	}
	nd = add_node(t);
	if (!nd)
		return -ENOMEM;
	nd->d.kind = GDX_TOPO_NIC;
	nd->d.rdma = soft ? GDX_TOPO_RDMA_SOFT : GDX_TOPO_RDMA_HW;
	gdx_topo_fmt(nd->d.name, sizeof(nd->d.name), "%s", ib);
	gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", pci);
	if (pci[0])
		read_pci_facts(t, nd);
	if (soft) {
		gdx_topo_fmt(nd->d.netdev, sizeof(nd->d.netdev), "%s", parent);
		gdx_topo_fmt(nd->d.driver, sizeof(nd->d.driver), "rdma_rxe");
	} else {
		gdx_topo_fmt(rel, sizeof(rel), "class/infiniband/%s/device/net", ib);
		first_entry(t->sysfs, rel, nd->d.netdev, sizeof(nd->d.netdev));
	}
	port_attr(t, ib, "link_layer", nd->d.link_layer, sizeof(nd->d.link_layer));
	port_attr(t, ib, "state", nd->d.port_state, sizeof(nd->d.port_state));
	port_attr(t, ib, "rate", nd->d.rate, sizeof(nd->d.rate));
	return 0;
}

/* Network interfaces on PCI that no RDMA device claims: the TCP paths. */
static int one_net(struct gdx_topo *t, const char *ifname)
{
	char rel[PATH_MAX], pci[16];
	struct topo_node tmp = { 0 }, *nd;

	gdx_topo_fmt(rel, sizeof(rel), "class/net/%s/device", ifname);
	if (resolve_pci(t->sysfs, rel, &tmp, pci) || !pci[0])
		return 0;
	for (int i = 0; i < t->n; i++)
		if (t->dev[i].d.kind == GDX_TOPO_NIC && !strcmp(t->dev[i].d.pci, pci))
			return 0;
	nd = add_node(t);
	if (!nd)
		return -ENOMEM;
	nd->d.kind = GDX_TOPO_NIC;
	gdx_topo_fmt(nd->d.name, sizeof(nd->d.name), "%s", ifname);
	gdx_topo_fmt(nd->d.netdev, sizeof(nd->d.netdev), "%s", ifname);
	gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", pci);
	read_pci_facts(t, nd);
	return 0;
}

static int one_nvme(struct gdx_topo *t, const char *ctrl)
{
	char rel[PATH_MAX], pci[16];
	struct topo_node *nd = add_node(t);

	if (!nd)
		return -ENOMEM;
	nd->d.kind = GDX_TOPO_NVME;
	gdx_topo_fmt(nd->d.name, sizeof(nd->d.name), "%s", ctrl);
	gdx_topo_fmt(rel, sizeof(rel), "class/nvme/%s/transport", ctrl);
	gdx_topo_read(t->sysfs, rel, nd->d.transport, sizeof(nd->d.transport));
	gdx_topo_fmt(rel, sizeof(rel), "class/nvme/%s/subsysnqn", ctrl);
	gdx_topo_read(t->sysfs, rel, nd->d.subsysnqn, sizeof(nd->d.subsysnqn));
	gdx_topo_fmt(rel, sizeof(rel), "class/nvme/%s/model", ctrl);
	gdx_topo_read(t->sysfs, rel, nd->d.model, sizeof(nd->d.model));
	if (!strcmp(nd->d.transport, "pcie")) {
		struct topo_node tmp = { 0 };

		gdx_topo_fmt(rel, sizeof(rel), "class/nvme/%s/device", ctrl);
		resolve_pci(t->sysfs, rel, &tmp, pci);
		gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", pci);
		if (pci[0])
			read_pci_facts(t, nd);
	} else {
		gdx_topo_fmt(rel, sizeof(rel), "class/nvme/%s/address", ctrl);
		gdx_topo_read(t->sysfs, rel, nd->d.address, sizeof(nd->d.address));
	}
	return 0;
}

/* NVMe functions no driver has turned into a controller (vfio, unbound). */
static int scan_unbound_nvme(struct gdx_topo *t)
{
	char path[PATH_MAX], rel[PATH_MAX];
	struct dirent **ents;
	int n, err = 0;

	gdx_topo_fmt(path, sizeof(path), "%s/bus/pci/devices", t->sysfs);
	n = scandir(path, &ents, NULL, versionsort);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		const char *bdf = ents[i]->d_name;
		struct topo_node *nd;

		gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/class", bdf);
		if (err || !is_bdf(bdf) || read_ul(t->sysfs, rel, 16, 0) != 0x010802 ||
		    find_pci(t, bdf, GDX_TOPO_NVME) >= 0)
			goto next;
		nd = add_node(t);
		if (!nd) {
			err = -ENOMEM;
			goto next;
		}
		nd->d.kind = GDX_TOPO_NVME;
		gdx_topo_fmt(nd->d.name, sizeof(nd->d.name), "nvme@%s", bdf + strlen(bdf) - 7);
		gdx_topo_fmt(nd->d.transport, sizeof(nd->d.transport), "pcie");
		gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", bdf);
		read_pci_facts(t, nd);
next:
		free(ents[i]);
	}
	free(ents);
	return err;
}

/* Whole disks behind a PCI storage function that is not NVMe. */
static int one_block(struct gdx_topo *t, const char *blk)
{
	char rel[PATH_MAX], pci[16];
	struct topo_node tmp = { 0 }, *nd;
	unsigned long cls;

	gdx_topo_fmt(rel, sizeof(rel), "class/block/%s/partition", blk);
	if (read_ul(t->sysfs, rel, 10, 0))
		return 0;
	gdx_topo_fmt(rel, sizeof(rel), "class/block/%s", blk);
	if (resolve_pci(t->sysfs, rel, &tmp, pci) || !pci[0])
		return 0;
	gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/class", pci);
	cls = read_ul(t->sysfs, rel, 16, 0);
	if (cls == 0x010802 || find_pci(t, pci, GDX_TOPO_NVME) >= 0)
		return 0;
	nd = add_node(t);
	if (!nd)
		return -ENOMEM;
	nd->d.kind = GDX_TOPO_DISK;
	gdx_topo_fmt(nd->d.name, sizeof(nd->d.name), "%s", blk);
	gdx_topo_fmt(nd->d.pci, sizeof(nd->d.pci), "%s", pci);
	read_pci_facts(t, nd);
	/* "virtio-pci" says less than the block driver on top of it */
	if (!strcmp(nd->d.driver, "virtio-pci")) {
		gdx_topo_fmt(rel, sizeof(rel), "class/block/%s/device/driver", blk);
		read_link_base(t->sysfs, rel, nd->d.driver, sizeof(nd->d.driver));
		if (!nd->d.driver[0])
			gdx_topo_fmt(nd->d.driver, sizeof(nd->d.driver), "virtio-pci");
	}
	return 0;
}

static int kind_rank(enum gdx_topo_kind k)
{
	return k == GDX_TOPO_GPU ? 0 : k == GDX_TOPO_NIC ? 1 : k == GDX_TOPO_NVME ? 2 : 3;
}

/* Hardware RDMA before Soft-RoCE before a plain netdev. */
static int rdma_rank(int rdma)
{
	return rdma == GDX_TOPO_RDMA_HW ? 2 : rdma == GDX_TOPO_RDMA_SOFT ? 1 : 0;
}

static int node_cmp(const void *a, const void *b)
{
	const struct topo_node *x = a, *y = b;
	int r = kind_rank(x->d.kind) - kind_rank(y->d.kind);

	if (r)
		return r;
	if (x->d.kind == GDX_TOPO_GPU)
		return strcmp(x->d.pci, y->d.pci);
	if (x->d.kind == GDX_TOPO_NIC && x->d.rdma != y->d.rdma)
		return rdma_rank(y->d.rdma) - rdma_rank(x->d.rdma);
	return strverscmp(x->d.name, y->d.name);
}

GDX_API int gdx_topo_open(struct gdx_topo **out, const struct gdx_topo_opts *opts)
{
	struct gdx_topo_opts o;
	struct gdx_topo *t;
	int err, gpus = 0;

	gdx_topo_opts_init(&o, sizeof(o));
	if (opts)
		memcpy(&o, opts, GDX_MIN(opts->size, sizeof(o)));
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	gdx_topo_fmt(t->sysfs, sizeof(t->sysfs), "%s",
		 o.sysfs_root ? o.sysfs_root : gdx_cfg_str("sysfs_root"));
	gdx_topo_fmt(t->procfs, sizeof(t->procfs), "%s",
		 o.procfs_root ? o.procfs_root : gdx_cfg_str("procfs_root"));
	err = scan_pci(t);
	if (!err)
		err = scan_class(t, "infiniband", one_rdma);
	if (!err)
		err = scan_class(t, "net", one_net);
	if (!err)
		err = scan_class(t, "nvme", one_nvme);
	if (!err)
		err = scan_unbound_nvme(t);
	if (!err)
		err = scan_class(t, "block", one_block);
	if (err) {
		gdx_topo_close(t);
		return err;
	}
	if (t->n)
		qsort(t->dev, (size_t)t->n, sizeof(t->dev[0]), node_cmp);
	for (int i = 0; i < t->n; i++) {
		if (t->dev[i].d.kind != GDX_TOPO_GPU)
			continue;
		t->dev[i].d.ordinal = gpus;
		gdx_topo_fmt(t->dev[i].d.name, sizeof(t->dev[i].d.name), "GPU%d", gpus++);
	}
	GDX_DBG("topo", "%s: %d devices, %d GPUs", t->sysfs, t->n, gpus);
	*out = t;
	return 0;
}

GDX_API void gdx_topo_close(struct gdx_topo *t)
{
	if (!t)
		return;
	free(t->dev);
	free(t);
}

GDX_API int gdx_topo_count(const struct gdx_topo *t)
{
	return t->n;
}

GDX_API int gdx_topo_get(const struct gdx_topo *t, int i, struct gdx_topo_dev *dev)
{
	size_t size;

	if (i < 0 || i >= t->n)
		return -ERANGE;
	if (dev->size < sizeof(dev->size))
		return -EINVAL;
	size = GDX_MIN(dev->size, sizeof(*dev));
	memcpy((char *)dev + sizeof(dev->size), (const char *)&t->dev[i].d + sizeof(dev->size),
	       size - sizeof(dev->size));
	return 0;
}

GDX_API int gdx_topo_find(const struct gdx_topo *t, unsigned kinds, const char *key)
{
	if (!key)
		return -EINVAL;
	for (int i = 0; i < t->n; i++) {
		const struct gdx_topo_dev *d = &t->dev[i].d;

		if (!(d->kind & kinds))
			continue;
		if (!strcmp(d->name, key) || (d->pci[0] && !strcasecmp(d->pci, key)) ||
		    (d->netdev[0] && !strcmp(d->netdev, key)))
			return i;
	}
	/* A bus id without the domain, as CUDA sometimes prints it. */
	if (strlen(key) == 7) {
		char full[16];

		gdx_topo_fmt(full, sizeof(full), "0000:%s", key);
		return find_pci(t, full, kinds);
	}
	return -ENOENT;
}

GDX_API int gdx_topo_nth(const struct gdx_topo *t, enum gdx_topo_kind kind, int n)
{
	for (int i = 0; i < t->n; i++)
		if (t->dev[i].d.kind == kind && n-- == 0)
			return i;
	return -ENOENT;
}

/* The device behind block device root/rel: PCI ancestor, NVMe name, or first slave. */
static int find_block(const struct gdx_topo *t, const char *rel, int depth)
{
	char path[PATH_MAX], real[PATH_MAX], pci[16], slave[64], rel2[96];
	struct topo_node tmp = { 0 };
	unsigned ctrl, ns;
	const char *base;
	int i;

	if (depth > 4)
		return -ENOENT;
	if (!resolve_pci(t->sysfs, rel, &tmp, pci) && pci[0]) {
		i = find_pci(t, pci, GDX_TOPO_NVME | GDX_TOPO_DISK);
		if (i >= 0)
			return i;
	}
	if (gdx_topo_fmt(path, sizeof(path), "%s/%s", t->sysfs, rel) < 0 || !realpath(path, real))
		return -ENOENT;
	/* a partition's slaves and name are its disk's */
	if (gdx_topo_fmt(path, sizeof(path), "%s/partition", real) > 0 && !access(path, F_OK))
		*strrchr(real, '/') = 0;
	base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
	/* a multipath namespace head sits under nvme-subsystem, off PCI */
	if (sscanf(base, "nvme%un%u", &ctrl, &ns) == 2) {
		char name[32];

		gdx_topo_fmt(name, sizeof(name), "nvme%u", ctrl);
		i = gdx_topo_find(t, GDX_TOPO_NVME, name);
		if (i >= 0)
			return i;
	}
	if (gdx_topo_fmt(path, sizeof(path), "%s/slaves", real) < 0 ||
	    first_entry("", path, slave, sizeof(slave)))
		return -ENOENT;
	gdx_topo_fmt(rel2, sizeof(rel2), "class/block/%s", slave);
	return find_block(t, rel2, depth + 1);
}

GDX_API int gdx_topo_find_file(const struct gdx_topo *t, const char *path)
{
	struct stat st;

	if (!path)
		return -EINVAL;
	if (stat(path, &st))
		return -errno;
	return gdx_topo_find_devno(t, major(st.st_dev), minor(st.st_dev));
}

int gdx_topo_find_devno(const struct gdx_topo *t, unsigned maj, unsigned min)
{
	char rel[64];

	if (!maj)
		return -ENOENT;
	gdx_topo_fmt(rel, sizeof(rel), "dev/block/%u:%u", maj, min);
	return find_block(t, rel, 0);
}

const char *gdx_topo_host_bridge(const struct gdx_topo *t, int i)
{
	if (i < 0 || i >= t->n || !t->dev[i].d.pci[0])
		return NULL;
	return t->dev[i].host_bridge;
}

static int common_prefix(const struct topo_node *a, const struct topo_node *b)
{
	int c = 0;

	while (c < a->nbridges && c < b->nbridges && !strcmp(a->bridges[c], b->bridges[c]))
		c++;
	return c;
}

/*
 * Below one host bridge, a PCIe switch is an upstream port with a downstream
 * port per link, so two devices on one switch sit one bridge below their
 * common ancestor (the upstream port).  Any more bridges below it, on either
 * side, are further switches: PXB.  No common bridge means different root
 * ports: the path crosses the root complex, PHB.
 */
GDX_API int gdx_topo_distance(const struct gdx_topo *t, int i, int j)
{
	const struct topo_node *a, *b;
	int c, extra;

	if (i < 0 || i >= t->n || j < 0 || j >= t->n)
		return -ERANGE;
	a = &t->dev[i];
	b = &t->dev[j];
	if (!a->d.pci[0] || !b->d.pci[0])
		return -ENODEV;
	if (i == j || !strcmp(a->d.pci, b->d.pci))
		return GDX_TOPO_X;
	if (strcmp(a->host_bridge, b->host_bridge)) {
		/* sysfs says -1 on one-node machines and in most VMs */
		if (a->d.numa_node >= 0 && b->d.numa_node >= 0 &&
		    a->d.numa_node != b->d.numa_node)
			return GDX_TOPO_SYS;
		return GDX_TOPO_NODE;
	}
	c = common_prefix(a, b);
	if (!c)
		return GDX_TOPO_PHB;
	extra = GDX_MAX(a->nbridges - c - 1, 0) + GDX_MAX(b->nbridges - c - 1, 0);
	return extra ? GDX_TOPO_PXB : GDX_TOPO_PIX;
}

int gdx_topo_path_bridges(const struct gdx_topo *t, int i, int j, char (*out)[16], int max)
{
	const struct topo_node *a, *b;
	int c, n = 0;

	if (gdx_topo_distance(t, i, j) < 0)
		return gdx_topo_distance(t, i, j);
	a = &t->dev[i];
	b = &t->dev[j];
	if (strcmp(a->host_bridge, b->host_bridge))
		return 0;
	c = common_prefix(a, b);
	if (!c)
		return 0;
	for (int k = a->nbridges - 1; k >= c && n < max; k--)
		memcpy(out[n++], a->bridges[k], sizeof(out[0]));
	for (int k = b->nbridges - 1; k >= c && n < max; k--)
		memcpy(out[n++], b->bridges[k], sizeof(out[0]));
	if (n < max)
		memcpy(out[n++], a->bridges[c - 1], sizeof(out[0]));
	return n;
}

GDX_API int gdx_topo_nearest(const struct gdx_topo *t, int i, unsigned kinds, int *link)
{
	int best = -ENOENT, best_d = 0;

	if (i < 0 || i >= t->n)
		return -ERANGE;
	for (int j = 0; j < t->n; j++) {
		int d;

		if (j == i || !(t->dev[j].d.kind & kinds))
			continue;
		d = gdx_topo_distance(t, i, j);
		if (d < 0)
			continue;
		if (best >= 0 && (d > best_d || (d == best_d && rdma_rank(t->dev[best].d.rdma) >=
							       rdma_rank(t->dev[j].d.rdma))))
			continue;
		best = j;
		best_d = d;
	}
	if (best >= 0 && link)
		*link = best_d;
	return best;
}

GDX_API int gdx_topo_rdma_nic(const struct gdx_topo *t, int i, int *link)
{
	int best = -ENOENT, best_key = 0, best_d = 0;

	if (i >= t->n)
		return -ERANGE;
	for (int j = 0; j < t->n; j++) {
		const struct gdx_topo_dev *d = &t->dev[j].d;
		int dist, key;

		if (d->kind != GDX_TOPO_NIC || d->rdma == GDX_TOPO_RDMA_NONE ||
		    (d->port_state[0] && strcmp(d->port_state, "ACTIVE")))
			continue;
		dist = i < 0 ? GDX_TOPO_X : gdx_topo_distance(t, i, j);
		/* off PCI sorts after every distance, Soft-RoCE after every hardware NIC */
		key = (d->rdma == GDX_TOPO_RDMA_HW ? 0 : 100) + (dist < 0 ? 99 : dist);
		if (best >= 0 && key >= best_key)
			continue;
		best = j;
		best_key = key;
		best_d = dist;
	}
	if (best >= 0 && link)
		*link = best_d;
	return best;
}

GDX_API const char *gdx_topo_link_name(int link)
{
	static const char *const names[] = { "X", "PIX", "PXB", "PHB", "NODE", "SYS" };

	return link >= 0 && link < (int)GDX_ARRAY_SIZE(names) ? names[link] : "?";
}

ssize_t gdx_pci_config(const struct gdx_topo *t, const char *bdf, uint8_t *buf, size_t len)
{
	char path[PATH_MAX];
	size_t got = 0;
	int fd;

	gdx_topo_fmt(path, sizeof(path), "%s/bus/pci/devices/%s/config", t->sysfs, bdf);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return (ssize_t)got;
}

int gdx_pci_find_cap(const uint8_t *cfg, size_t len, uint8_t id)
{
	unsigned pos;

	/* status bit 4: the capability list exists */
	if (len < 0x40)
		return -ENODATA;
	if (!(cfg[0x06] & 0x10))
		return 0;
	pos = cfg[0x34] & ~3u;
	for (int ttl = 48; pos >= 0x40 && ttl; ttl--) {
		if (pos + 2 > len)
			return -ENODATA;
		if (cfg[pos] == id)
			return (int)pos;
		pos = cfg[pos + 1] & ~3u;
	}
	return 0;
}

int gdx_pci_find_ecap(const uint8_t *cfg, size_t len, uint16_t id)
{
	unsigned pos = 0x100;

	for (int ttl = 480; ttl; ttl--) {
		uint32_t hdr;

		if (pos + 4 > len)
			return -ENODATA;
		hdr = (uint32_t)cfg[pos] | (uint32_t)cfg[pos + 1] << 8 |
		      (uint32_t)cfg[pos + 2] << 16 | (uint32_t)cfg[pos + 3] << 24;
		if (!hdr || hdr == 0xffffffffu)
			return 0;
		if ((hdr & 0xffff) == id)
			return (int)pos;
		pos = hdr >> 20;
		if (pos < 0x100)
			return 0;
	}
	return 0;
}
