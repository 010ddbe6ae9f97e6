/* SPDX-License-Identifier: MIT */
/*
 * gdx check: the readiness report.  The devices and the GPU x NIC x NVMe
 * matrix, one line per check, then for each data source the path gdx will take
 * and the one step that would make a bounce path direct.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <gdx/gdx.h>
#include <gdx/topo.h>

#include "check.h"
#include "cmd.h"
#include "common/config.h"
#include "common/util.h"
#include "topo/topo_int.h"

enum { R_GPU, R_STORAGE_DIRECT, R_RDMA, R_RDMA_DIRECT, R_NVMF_TCP, R_NVMF_RDMA,
       R_K_NVME_TCP, R_K_NVME_RDMA, R_K_NVMET_TCP, R_K_NVMET_RDMA, R_IO_URING, R_ODIRECT,
       R_COUNT };

static const char *const ready_names[R_COUNT] = {
	"gpu", "storage-direct", "rdma", "rdma-direct", "nvmf-tcp", "nvmf-rdma",
	"kernel-nvme-tcp", "kernel-nvme-rdma", "kernel-nvmet-tcp", "kernel-nvmet-rdma",
	"io-uring", "odirect",
};

enum ready { NOT_READY, READY, NOT_CHECKED };

struct reco {
	const char *id, *title;
	const char *path;	/* direct, bounce, host, tcp, none */
	char detail[512];
	char step[320];
};

struct report {
	struct chk_ctx x;
	int gpu;		/* the GPU the recommendations are for, -1 none */
	struct reco r[4];
	int nr;
	enum ready ready[R_COUNT];
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gdx check [--sysfs-root DIR] [--procfs-root DIR] [--modules-root DIR]\n"
		"                 [--root DIR] [--path P] [--json] [--live|--no-live]\n"
		"                 [--gpu GPU] [--require WHAT[,WHAT...]]\n\n"
		"  --root DIR     DIR/sys, DIR/proc and DIR/lib/modules (a fixture machine)\n"
		"  --path P       the file or directory whose filesystem the O_DIRECT probe tests\n"
		"                 (default: the current directory)\n"
		"  --gpu GPU      recommendations for this GPU (GPU3, 3 or its PCI address;\n"
		"                 default GPU0)\n"
		"  --no-live      skip the checks that ask this machine (CUDA, io_uring, O_DIRECT,\n"
		"                 memlock, libraries); the default when a root is given\n"
		"  --require W    exit 1 unless W is ready; W is one of\n                ");
	for (int i = 0; i < R_COUNT; i++)
		fprintf(f, "%s%s", i && !(i % 6) ? "\n                 " : " ", ready_names[i]);
	fprintf(f, "\n");
}

static const char *sym(enum chk_status s)
{
	static const char *const s_[] = { "\u2713", "\u2717", "!", "-" };

	return s_[s];
}

static const char *st_word(enum chk_status s)
{
	static const char *const w[] = { "ok", "fail", "warn", "n/a" };

	return w[s];
}

static struct gdx_topo_dev dev_at(const struct gdx_topo *t, int i)
{
	struct gdx_topo_dev d = { .size = sizeof(d) };

	gdx_topo_get(t, i, &d);
	return d;
}

static const char *kind_word(enum gdx_topo_kind k)
{
	return k == GDX_TOPO_GPU ? "gpu" : k == GDX_TOPO_NIC ? "nic" : k == GDX_TOPO_NVME ? "nvme" :
	       "disk";
}

static void count_devices(struct chk_ctx *x)
{
	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = dev_at(x->t, i);

		switch (d.kind) {
		case GDX_TOPO_GPU: x->ngpu++; break;
		case GDX_TOPO_NIC:
			x->nnic++;
			x->nrdma += d.rdma != GDX_TOPO_RDMA_NONE;
			x->nrdma_active += d.rdma != GDX_TOPO_RDMA_NONE &&
					   (!d.port_state[0] || !strcmp(d.port_state, "ACTIVE"));
			break;
		case GDX_TOPO_NVME:
			if (d.pci[0])
				x->nnvme_local++;
			else
				x->nnvme_fabric++;
			break;
		default: x->ndisk++; break;
		}
	}
}

/* The RDMA NIC gdx uses for device i, as the library chooses it. */
static int rdma_nic_for(const struct chk_ctx *x, int i, int *link)
{
	return gdx_topo_rdma_nic(x->t, i, link);
}

static enum mod_state mod(struct chk_ctx *x, const char *m)
{
	return chk_module(x, m);
}

/* A module's readiness: not checked when nothing says whether the kernel has it. */
static enum ready mod_ready(struct chk_ctx *x, const char *m)
{
	enum mod_state s = mod(x, m);

	return s == MOD_UNKNOWN ? NOT_CHECKED : s == MOD_MISSING ? NOT_READY : READY;
}

/* Both needed: a known no decides, then a not known. */
static enum ready both(enum ready a, enum ready b)
{
	if (a == NOT_READY || b == NOT_READY)
		return NOT_READY;
	return a == NOT_CHECKED || b == NOT_CHECKED ? NOT_CHECKED : READY;
}

static const char *uring_word(const struct chk_ctx *x)
{
	return x->io_uring_disabled == 2 || (x->live && !x->io_uring_ok) ? "pread threads" :
	       "io_uring";
}

/* Where the data under --path lives, as the live checks found it; "" when unknown. */
static int path_holder(const struct chk_ctx *x, char *where, size_t len)
{
	int held;

	where[0] = 0;
	if (!x->live)
		return -ENOENT;
	held = gdx_topo_find_file(x->t, x->path);
	if (held >= 0) {
		struct gdx_topo_dev d = dev_at(x->t, held);

		if (d.kind == GDX_TOPO_NVME && !d.pci[0])
			chk_set(where, len, "--path is on %s (NVMe over %s, remote)", d.name,
				d.transport);
		else
			chk_set(where, len, "--path is on %s (%s)", d.name, d.kind == GDX_TOPO_NVME ?
				"NVMe" : d.driver[0] ? d.driver : "disk");
	} else if (x->path_fs[0]) {
		chk_set(where, len, "--path is on %s, with no local disk below", x->path_fs);
	}
	return held;
}

static void reco_storage(struct report *rp)
{
	struct chk_ctx *x = &rp->x;
	struct reco *r = &rp->r[rp->nr++];
	int g = rp->gpu, link = 0, nv, held;
	struct gdx_topo_dev gd, nd;
	char where[160];
	bool direct;

	r->id = "local_storage";
	r->title = "local NVMe";
	held = path_holder(x, where, sizeof(where));
	if (g < 0) {
		r->path = "host";
		CHK_SET(r->detail, "no GPU: files are read with O_DIRECT through %s into host "
			"memory (the emulated device stands in for a GPU)", uring_word(x));
		if (x->nnvme_local)
			CHK_CAT(r->detail, "; %d local NVMe", x->nnvme_local);
		if (where[0])
			CHK_CAT(r->detail, "; %s", where);
		CHK_SET(r->step, "-");
		return;
	}
	gd = dev_at(x->t, g);
	if (!x->drv_version[0]) {
		r->path = "none";
		CHK_SET(r->detail, "%s has no driver: gdx cannot reach its memory", gd.name);
		CHK_SET(r->step, "install and load the NVIDIA driver");
		return;
	}
	nv = gdx_topo_nearest(x->t, g, GDX_TOPO_NVME, &link);
	if (held >= 0 && dev_at(x->t, held).kind == GDX_TOPO_NVME && dev_at(x->t, held).pci[0]) {
		nv = held;
		link = gdx_topo_distance(x->t, g, held);
	} else if (where[0] || nv < 0) {
		/* the data is not on NVMe, or there is no NVMe at all */
		int disk = held >= 0 ? held : gdx_topo_nearest(x->t, g, GDX_TOPO_DISK, &link);

		if (held >= 0)
			link = GDX_MAX(gdx_topo_distance(x->t, g, held), 0);
		r->path = "bounce";
		if (where[0] && held < 0 && !strcmp(x->path_fs, "tmpfs")) {
			r->path = "pagecache";
			CHK_SET(r->detail, "%s: %s copies straight out of the registered page cache",
				where, gd.name);
		} else if (where[0]) {
			CHK_SET(r->detail, "%s, not NVMe: O_DIRECT reads into a pinned ring, then "
				"copies to %s (cached files: straight out of the page cache)", where,
				gd.name);
		} else if (disk >= 0) {
			struct gdx_topo_dev dd = dev_at(x->t, disk);

			CHK_SET(r->detail, "no local NVMe; %s (%s, %s from %s): O_DIRECT reads into "
				"a pinned ring, then copies to %s (cached files: straight out of the "
				"page cache)", dd.name, dd.driver[0] ? dd.driver : "disk",
				gdx_topo_link_name(link), gd.name, gd.name);
		} else {
			CHK_SET(r->detail, "no local NVMe or disk on PCI: reads go through a pinned "
				"ring, then copies to %s", gd.name);
		}
		if (nv >= 0)
			CHK_SET(r->step, "keep the data on %s (%s from %s): GPUDirect Storage reads "
				"NVMe only", dev_at(x->t, nv).name, gdx_topo_link_name(link), gd.name);
		else
			CHK_SET(r->step, "none on this machine: GPUDirect Storage needs an NVMe drive "
				"(or a GDS-capable filesystem)");
		return;
	}
	nd = dev_at(x->t, nv);
	direct = (x->nvfs || x->p2pdma) && !x->iommu_translating && (!x->live || x->cufile_ok);
	r->path = direct ? "direct" : "bounce";
	if (direct)
		CHK_SET(r->detail, "cuFile DMA from %s into %s (%s), through %s", nd.name, gd.name,
			gdx_topo_link_name(link), x->nvfs ? "nvidia-fs" : "PCI P2PDMA");
	else
		CHK_SET(r->detail, "%s -> pinned ring -> %s (%s apart): O_DIRECT reads through "
			"%s, async copies", nd.name, gd.name, gdx_topo_link_name(link),
			uring_word(x));
	if (!direct)
		CHK_CAT(r->detail, " (cached files: straight out of the page cache)");
	if (where[0])
		CHK_CAT(r->detail, "; %s", where);
	if (x->live && !x->odirect_ok)
		CHK_CAT(r->detail, "; --path refuses O_DIRECT, so files there are read buffered");
	if (!x->nvfs && !x->p2pdma) {
		enum mod_state m = mod(x, "nvidia_fs");

		/* the cheaper of the two ways: a module at hand, else P2PDMA's one setting */
		if (m == MOD_AVAILABLE)
			CHK_SET(r->step, "load nvidia-fs (modprobe nvidia-fs)");
		else if (strncmp(x->p2pdma_fix, "options", 7) == 0)
			CHK_SET(r->step, "for cuFile's P2PDMA mode: %s", x->p2pdma_fix);
		else
			CHK_SET(r->step, "install GPUDirect Storage (nvidia-fs), then modprobe "
				"nvidia-fs");
	} else if (x->iommu_translating) {
		CHK_SET(r->step, "boot with iommu=pt: GPUDirect Storage needs untranslated DMA");
	} else if (x->live && !x->cufile_ok) {
		CHK_SET(r->step, "install libcufile (GPUDirect Storage)");
	} else if (link >= GDX_TOPO_NODE) {
		int best = gdx_topo_nearest(x->t, g, GDX_TOPO_NVME, NULL);

		if (best >= 0 && best != nv && gdx_topo_distance(x->t, g, best) < link)
			CHK_SET(r->step, "%s and %s are %s apart: keep %s's data on %s (%s)", gd.name,
				nd.name, gdx_topo_link_name(link), gd.name, dev_at(x->t, best).name,
				gdx_topo_link_name(gdx_topo_distance(x->t, g, best)));
		else
			CHK_SET(r->step, "%s and %s are %s apart: put an NVMe under %s's switch",
				gd.name, nd.name, gdx_topo_link_name(link), gd.name);
	} else {
		CHK_SET(r->step, "-");
	}
	if (!x->live && direct)
		CHK_CAT(r->detail, " (libcufile not checked: live checks off)");
}

/* What stands between the network source and GPU memory; the one step, or "". */
static void rdma_blocker(struct chk_ctx *x, const struct gdx_topo_dev *nic, char *step,
			 size_t len)
{
	step[0] = 0;
	if (nic->rdma == GDX_TOPO_RDMA_SOFT) {
		chk_set(step, len, "%s is Soft-RoCE (the CPU copies): a hardware RDMA NIC "
			"(InfiniBand or RoCE)", nic->name);
	} else if (!x->dmabuf && !x->peermem) {
		enum mod_state pm = mod(x, "nvidia_peermem");

		if (pm == MOD_AVAILABLE || pm == MOD_UNKNOWN)
			chk_set(step, len, "load nvidia_peermem (modprobe nvidia-peermem)");
		else if (x->drv_open)
			chk_set(step, len, "install nvidia-peermem, or a kernel >= 5.12 for dma-buf");
		else
			chk_set(step, len, "install the open kernel modules (dma-buf) or nvidia-peermem");
	} else if (!x->uverbs && mod(x, "ib_uverbs") != MOD_UNKNOWN) {
		chk_set(step, len, "modprobe ib_uverbs");
	} else if (x->live && !x->ibverbs_ok) {
		chk_set(step, len, "install libibverbs1 and ibverbs-providers");
	} else if (x->live && !x->memlock_ok) {
		chk_set(step, len, "raise memlock (ulimit -l unlimited)");
	}
}

static void reco_net(struct report *rp, bool nvmf)
{
	struct chk_ctx *x = &rp->x;
	struct reco *r = &rp->r[rp->nr++];
	int g = rp->gpu, link, nic;
	char block[320];
	struct gdx_topo_dev gd = { 0 }, nd;

	r->id = nvmf ? "remote_nvmf" : "network_peer";
	r->title = nvmf ? "remote NVMe-oF" : "network peer";
	nic = rdma_nic_for(x, g, &link);
	if (g >= 0)
		gd = dev_at(x->t, g);
	if (nic < 0) {
		int eth = g >= 0 ? gdx_topo_nearest(x->t, g, GDX_TOPO_NIC, NULL) :
				   gdx_topo_nth(x->t, GDX_TOPO_NIC, 0);
		char via[64] = "";

		if (eth >= 0)
			CHK_SET(via, " via %s", dev_at(x->t, eth).name);
		r->path = g >= 0 ? "bounce" : "host";
		CHK_SET(r->detail, "%s%s into %s%s", nvmf ? "gdx's NVMe/TCP host" :
			"gdx's TCP transport", via, g >= 0 ? "pinned host memory, then copies to " :
			"host memory (no GPU)", g >= 0 ? gd.name : "");
		CHK_SET(r->step, g >= 0 ? "none without an RDMA NIC (InfiniBand or RoCE)" : "-");
	} else {
		nd = dev_at(x->t, nic);
		rdma_blocker(x, &nd, block, sizeof(block));
		if (g < 0) {
			r->path = "host";
			CHK_SET(r->detail, "%s via %s into host memory (no GPU)", nvmf ?
				"gdx's NVMe/RDMA host" : "RDMA", nd.name);
			CHK_SET(r->step, "-");
		} else if (!x->drv_version[0]) {
			r->path = "none";
			CHK_SET(r->detail, "%s has no driver", gd.name);
			CHK_SET(r->step, "install and load the NVIDIA driver");
		} else if (block[0]) {
			r->path = "bounce";
			CHK_SET(r->detail, "%s via %s (%s from %s) into pinned host memory, then "
				"copies to %s", nvmf ? "gdx's NVMe/RDMA host" : "RDMA", nd.name,
				gdx_topo_link_name(link), gd.name, gd.name);
			CHK_SET(r->step, "%s", block);
		} else {
			r->path = "direct";
			CHK_SET(r->detail, "%s via %s (%s from %s) straight into GPU memory "
				"registered through %s", nvmf ? "gdx's NVMe/RDMA host" : "RDMA",
				nd.name, gdx_topo_link_name(link), gd.name,
				x->dmabuf ? "dma-buf" : "nvidia_peermem");
			if (link >= GDX_TOPO_PHB)
				CHK_SET(r->step, "%s and %s are %s apart: put a NIC under %s's PCIe "
					"switch", gd.name, nd.name, gdx_topo_link_name(link), gd.name);
			else if (x->acs_redirect)
				CHK_SET(r->step, "turn off ACS redirect on %s", x->acs_bridge);
			else if (x->iommu_translating)
				CHK_SET(r->step, "boot with iommu=pt");
			else
				CHK_SET(r->step, "-");
			if (!x->live)
				CHK_CAT(r->detail, " (memlock and libibverbs not checked: live "
					"checks off)");
		}
	}
	if (nvmf && x->nnvme_fabric) {
		for (int i = 0; i < gdx_topo_count(x->t); i++) {
			struct gdx_topo_dev d = dev_at(x->t, i);

			if (d.kind == GDX_TOPO_NVME && !d.pci[0]) {
				CHK_CAT(r->detail, "; the kernel is connected to %s (%s %s)", d.name,
					d.transport, d.address);
				break;
			}
		}
	}
}

/* Which NIC gdx pairs with each GPU, and how far apart they are. */
static void reco_pairs(struct report *rp)
{
	struct chk_ctx *x = &rp->x;
	struct reco *r;
	int worst = -1, worst_g = -1, worst_nic = -1;

	if (!x->ngpu || !x->nrdma_active)
		return;
	r = &rp->r[rp->nr++];
	r->id = "nic_per_gpu";
	r->title = "NIC per GPU";
	r->path = "info";
	for (int g = 0; g < x->ngpu; g++) {
		int gi = gdx_topo_nth(x->t, GDX_TOPO_GPU, g), link;
		int nic = rdma_nic_for(x, gi, &link);

		CHK_CAT(r->detail, "%s%s->%s %s", g ? ", " : "", dev_at(x->t, gi).name,
			dev_at(x->t, nic).name, gdx_topo_link_name(link));
		if (link > worst) {
			worst = link;
			worst_g = gi;
			worst_nic = nic;
		}
	}
	/* the first NIC is what a program that does not look picks */
	if (worst >= GDX_TOPO_PHB)
		CHK_SET(r->step, "%s's nearest RDMA NIC %s is %s apart: traffic crosses the CPU; "
			"add a NIC near it", dev_at(x->t, worst_g).name,
			dev_at(x->t, worst_nic).name, gdx_topo_link_name(worst));
	else {
		int first = rdma_nic_for(x, -1, NULL);

		int far = GDX_TOPO_PHB, far_g = -1, far_nic = -1, far_link = 0;

		for (int g = 0; g < x->ngpu; g++) {
			int gi = gdx_topo_nth(x->t, GDX_TOPO_GPU, g), link;
			int nic = rdma_nic_for(x, gi, &link);
			int d = gdx_topo_distance(x->t, gi, first);

			if (d > far && nic != first) {
				far = d;
				far_g = gi;
				far_nic = nic;
				far_link = link;
			}
		}
		if (far_g >= 0)
			CHK_SET(r->step, "%s and %s are %s apart: use %s (%s), as gdx does",
				dev_at(x->t, far_g).name, dev_at(x->t, first).name,
				gdx_topo_link_name(far), dev_at(x->t, far_nic).name,
				gdx_topo_link_name(far_link));
		if (!r->step[0])
			CHK_SET(r->step, "-");
	}
}

static void readiness(struct report *rp)
{
	struct chk_ctx *x = &rp->x;
	bool rdma = x->nrdma_active > 0 && (x->uverbs || mod(x, "ib_uverbs") == MOD_UNKNOWN) &&
		    (!x->live || x->ibverbs_ok);

	rp->ready[R_GPU] = x->ngpu && x->drv_version[0] ? READY : NOT_READY;
	rp->ready[R_STORAGE_DIRECT] = !strcmp(rp->r[0].path, "direct") ? READY : NOT_READY;
	rp->ready[R_RDMA] = rdma ? READY : NOT_READY;
	rp->ready[R_RDMA_DIRECT] = !strcmp(rp->r[2].path, "direct") ? READY : NOT_READY;
	/* gdx's own NVMe-oF host and target need a way out, not kernel modules */
	rp->ready[R_NVMF_TCP] = x->nnic ? READY : NOT_READY;
	rp->ready[R_NVMF_RDMA] = rdma ? READY : NOT_READY;
	rp->ready[R_K_NVME_TCP] = mod_ready(x, "nvme_tcp");
	rp->ready[R_K_NVME_RDMA] = both(rdma ? READY : NOT_READY, mod_ready(x, "nvme_rdma"));
	rp->ready[R_K_NVMET_TCP] = both(mod_ready(x, "nvmet"), mod_ready(x, "nvmet_tcp"));
	rp->ready[R_K_NVMET_RDMA] = both(rdma ? READY : NOT_READY,
					 both(mod_ready(x, "nvmet"), mod_ready(x, "nvmet_rdma")));
	rp->ready[R_IO_URING] = !x->live ? NOT_CHECKED : x->io_uring_ok ? READY : NOT_READY;
	rp->ready[R_ODIRECT] = !x->live ? NOT_CHECKED : x->odirect_ok ? READY : NOT_READY;
	if (rp->ready[R_STORAGE_DIRECT] == READY && !x->live)
		rp->ready[R_STORAGE_DIRECT] = NOT_CHECKED;
	if (rp->ready[R_RDMA_DIRECT] == READY && !x->live)
		rp->ready[R_RDMA_DIRECT] = NOT_CHECKED;
}

/* ---- text ------------------------------------------------------------- */

static void print_devices(const struct chk_ctx *x)
{
	int n = gdx_topo_count(x->t);

	printf("Devices\n");
	if (!n)
		printf("  no GPU, NIC, NVMe or disk found under %s\n", x->sysfs);
	for (int i = 0; i < n; i++) {
		struct gdx_topo_dev d = dev_at(x->t, i);
		char numa[8], sz[32];

		if (!d.pci[0]) {
			printf("  %-9s %s %s  %s\n", d.name, d.transport[0] ? d.transport : "virtual",
			       d.address, d.subsysnqn);
			continue;
		}
		if (d.numa_node >= 0)
			chk_set(numa, sizeof(numa), "%d", d.numa_node);
		else
			chk_set(numa, sizeof(numa), "-");
		printf("  %-9s %s  %04x:%04x  NUMA %-2s %-11s", d.name, d.pci, d.vendor, d.device,
		       numa, d.driver[0] ? d.driver : "(no driver)");
		switch (d.kind) {
		case GDX_TOPO_GPU:
			printf(" BAR1 %s", d.bar1_size ? chk_size(d.bar1_size, sz, sizeof(sz)) : "?");
			break;
		case GDX_TOPO_NIC:
			if (d.rdma)
				printf(" %s %s %s %s %s", d.rdma == GDX_TOPO_RDMA_SOFT ?
				       "Soft-RoCE on" : "RDMA", d.netdev[0] ? d.netdev : "-",
				       d.link_layer, d.port_state, d.rate);
			else
				printf(" TCP only");
			break;
		case GDX_TOPO_NVME:
			printf(" %s", d.model);
			break;
		default:
			printf(" disk");
			break;
		}
		printf("\n");
	}
}

static bool in_matrix_col(const struct gdx_topo_dev *d, bool gpu_rows)
{
	if (!d->pci[0])
		return false;
	if (gpu_rows)
		return d->kind != GDX_TOPO_GPU;
	return d->kind == GDX_TOPO_NVME || d->kind == GDX_TOPO_DISK;
}

static void print_matrix(const struct chk_ctx *x)
{
	bool gpu_rows = x->ngpu > 0;
	int n = gdx_topo_count(x->t), rows = 0, cols = 0;

	for (int i = 0; i < n; i++) {
		struct gdx_topo_dev d = dev_at(x->t, i);

		rows += d.pci[0] && (gpu_rows ? d.kind == GDX_TOPO_GPU : d.kind == GDX_TOPO_NIC);
		cols += in_matrix_col(&d, gpu_rows);
	}
	printf("\nTopology (nvidia-smi topo -m words)\n");
	if (!rows || !cols) {
		printf("  nothing to relate: %s\n", gpu_rows ? "no NIC, NVMe or disk on PCI" :
		       "no GPU, and no NIC with storage beside it");
		return;
	}
	printf("  %-9s", "");
	for (int j = 0; j < n; j++) {
		struct gdx_topo_dev d = dev_at(x->t, j);

		if (in_matrix_col(&d, gpu_rows))
			printf(" %-*s", (int)GDX_MAX(strlen(d.name), 4), d.name);
	}
	printf("  NUMA  CPU affinity\n");
	for (int i = 0; i < n; i++) {
		struct gdx_topo_dev r = dev_at(x->t, i);

		if (!r.pci[0] || (gpu_rows ? r.kind != GDX_TOPO_GPU : r.kind != GDX_TOPO_NIC))
			continue;
		printf("  %-9s", r.name);
		for (int j = 0; j < n; j++) {
			struct gdx_topo_dev c = dev_at(x->t, j);

			if (in_matrix_col(&c, gpu_rows))
				printf(" %-*s", (int)GDX_MAX(strlen(c.name), 4),
				       gdx_topo_link_name(gdx_topo_distance(x->t, i, j)));
		}
		if (r.numa_node >= 0)
			printf("  %-5d %s\n", r.numa_node, r.cpulist[0] ? r.cpulist : "-");
		else
			printf("  %-5s %s\n", "-", r.cpulist[0] ? r.cpulist : "-");
	}
	printf("  X = self, PIX = one PCIe switch, PXB = several PCIe switches, PHB = through a "
	       "host bridge,\n  NODE = between host bridges of one NUMA node, SYS = across NUMA "
	       "nodes\n");
}

#define TEXT_WIDTH 100

/*
 * Prints text from column col, breaking lines at spaces before TEXT_WIDTH and
 * starting each further line at column indent.
 */
static void wrap(const char *text, int col, int indent)
{
	const char *p = text;

	while (*p) {
		size_t word = strcspn(p, " ");

		if (col > indent && col + 1 + (int)word > TEXT_WIDTH) {
			printf("\n%*s", indent, "");
			col = indent;
		} else if (p != text) {
			putchar(' ');
			col++;
		}
		printf("%.*s", (int)word, p);
		col += (int)word;
		p += word;
		while (*p == ' ')
			p++;
	}
	putchar('\n');
}

static void print_checks(const struct chk_ctx *x, bool live)
{
	for (int i = 0; i < x->n; i++) {
		const struct chk *c = &x->c[i];

		if (c->live != live)
			continue;
		printf("  %s %-22s ", sym(c->st), c->title);
		wrap(c->finding, 27, 27);
		if (c->fix[0]) {
			printf("%27sfix: ", "");
			wrap(c->fix, 32, 32);
		}
	}
}

static void print_text(const struct report *rp)
{
	const struct chk_ctx *x = &rp->x;

	printf("gdx check: readiness report\n");
	printf("sysfs %s, procfs %s, modules %s/%s\n\n", x->sysfs, x->procfs, x->modroot,
	       x->kernel[0] ? x->kernel : "?");
	print_devices(x);
	print_matrix(x);
	printf("\nChecks (\u2713 ready, \u2717 missing, ! degraded or unknown, - not applicable)\n");
	print_checks(x, false);
	if (x->live) {
		printf("\nLive checks (this process on this machine)\n");
		print_checks(x, true);
	} else {
		printf("\nLive checks: off (CUDA, io_uring, O_DIRECT, memlock and libraries not "
		       "probed; --live turns them on)\n");
	}
	if (rp->gpu >= 0)
		printf("\nRecommendations (for %s)\n", dev_at(x->t, rp->gpu).name);
	else
		printf("\nRecommendations\n");
	for (int i = 0; i < rp->nr; i++) {
		const struct reco *r = &rp->r[i];

		printf("  %-15s %-7s ", r->title, r->path);
		wrap(r->detail, 26, 26);
		if (strcmp(r->step, "-")) {
			printf("%26sstep: ", "");
			wrap(r->step, 32, 32);
		}
	}
	printf("\nReady:");
	for (int i = 0, col = 6; i < R_COUNT; i++) {
		int w = (int)strlen(ready_names[i]) + 3;

		if (col + w > TEXT_WIDTH) {
			printf("\n      ");
			col = 6;
		}
		printf(" %s %s", ready_names[i], rp->ready[i] == READY ? "\u2713" :
		       rp->ready[i] == NOT_READY ? "\u2717" : "?");
		col += w;
	}
	printf("\n");
}

/* ---- JSON ------------------------------------------------------------- */

static void jstr(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static void jint(json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

static json_object *json_devices(const struct chk_ctx *x)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = dev_at(x->t, i);
		json_object *o = json_object_new_object();
		char hex[16];

		jstr(o, "name", d.name);
		jstr(o, "kind", kind_word(d.kind));
		if (d.pci[0]) {
			jstr(o, "pci", d.pci);
			chk_set(hex, sizeof(hex), "%04x:%04x", d.vendor, d.device);
			jstr(o, "id", hex);
			chk_set(hex, sizeof(hex), "0x%06x", d.class_code);
			jstr(o, "class", hex);
			jint(o, "numa_node", d.numa_node);
			jstr(o, "cpus", d.cpulist);
			jstr(o, "driver", d.driver);
		}
		if (d.kind == GDX_TOPO_GPU)
			jint(o, "bar1_bytes", (int64_t)d.bar1_size);
		if (d.kind == GDX_TOPO_NIC) {
			jstr(o, "rdma", d.rdma == GDX_TOPO_RDMA_HW ? "hardware" :
			     d.rdma == GDX_TOPO_RDMA_SOFT ? "soft-roce" : "none");
			jstr(o, "netdev", d.netdev);
			if (d.rdma) {
				jstr(o, "link_layer", d.link_layer);
				jstr(o, "port_state", d.port_state);
				jstr(o, "rate", d.rate);
			}
		}
		if (d.kind == GDX_TOPO_NVME) {
			jstr(o, "transport", d.transport);
			if (d.address[0])
				jstr(o, "address", d.address);
			jstr(o, "subsysnqn", d.subsysnqn);
			jstr(o, "model", d.model);
		}
		json_object_array_add(a, o);
	}
	return a;
}

/* Each GPU (each NIC when there is none) against every other PCI device. */
static json_object *json_matrix(const struct chk_ctx *x)
{
	json_object *m = json_object_new_object();
	int n = gdx_topo_count(x->t);

	for (int i = 0; i < n; i++) {
		struct gdx_topo_dev r = dev_at(x->t, i);
		json_object *row;

		if (!r.pci[0] || r.kind != (x->ngpu ? GDX_TOPO_GPU : GDX_TOPO_NIC))
			continue;
		row = json_object_new_object();
		for (int j = 0; j < n; j++) {
			int l = j == i ? -1 : gdx_topo_distance(x->t, i, j);

			if (l >= 0)
				jstr(row, dev_at(x->t, j).name, gdx_topo_link_name(l));
		}
		json_object_object_add(m, r.name, row);
	}
	return m;
}

static json_object *json_nearest(const struct chk_ctx *x)
{
	json_object *a = json_object_new_array();

	for (int g = 0; g < x->ngpu; g++) {
		int gi = gdx_topo_nth(x->t, GDX_TOPO_GPU, g), link;
		json_object *o = json_object_new_object();
		int nic = rdma_nic_for(x, gi, &link);

		jstr(o, "gpu", dev_at(x->t, gi).name);
		if (nic >= 0) {
			jstr(o, "rdma_nic", dev_at(x->t, nic).name);
			jstr(o, "rdma_nic_link", gdx_topo_link_name(link));
		}
		nic = gdx_topo_nearest(x->t, gi, GDX_TOPO_NVME, &link);
		if (nic >= 0) {
			jstr(o, "nvme", dev_at(x->t, nic).name);
			jstr(o, "nvme_link", gdx_topo_link_name(link));
		}
		json_object_array_add(a, o);
	}
	return a;
}

static void print_json(const struct report *rp)
{
	const struct chk_ctx *x = &rp->x;
	json_object *root = json_object_new_object(), *a, *o;

	jstr(root, "sysfs_root", x->sysfs);
	jstr(root, "procfs_root", x->procfs);
	jstr(root, "modules_root", x->modroot);
	jstr(root, "kernel", x->kernel);
	json_object_object_add(root, "live", json_object_new_boolean(x->live));
	jint(root, "gpus", x->ngpu);
	json_object_object_add(root, "devices", json_devices(x));
	json_object_object_add(root, "matrix", json_matrix(x));
	json_object_object_add(root, "nearest", json_nearest(x));
	a = json_object_new_array();
	for (int i = 0; i < x->n; i++) {
		const struct chk *c = &x->c[i];

		o = json_object_new_object();
		jstr(o, "id", c->id);
		jstr(o, "title", c->title);
		jstr(o, "status", st_word(c->st));
		json_object_object_add(o, "live", json_object_new_boolean(c->live));
		jstr(o, "finding", c->finding);
		if (c->fix[0])
			jstr(o, "fix", c->fix);
		json_object_array_add(a, o);
	}
	json_object_object_add(root, "checks", a);
	a = json_object_new_array();
	for (int i = 0; i < rp->nr; i++) {
		o = json_object_new_object();
		jstr(o, "source", rp->r[i].id);
		jstr(o, "path", rp->r[i].path);
		jstr(o, "detail", rp->r[i].detail);
		jstr(o, "step", rp->r[i].step);
		json_object_array_add(a, o);
	}
	json_object_object_add(root, "recommendations", a);
	if (rp->gpu >= 0)
		jstr(root, "recommendations_for", dev_at(x->t, rp->gpu).name);
	o = json_object_new_object();
	for (int i = 0; i < R_COUNT; i++)
		json_object_object_add(o, ready_names[i], rp->ready[i] == NOT_CHECKED ? NULL :
				       json_object_new_boolean(rp->ready[i] == READY));
	json_object_object_add(root, "ready", o);
	printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
						      JSON_C_TO_STRING_SPACED |
						      JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
}

/* ---- main ------------------------------------------------------------- */

static int parse_require(const char *arg, bool *want)
{
	char buf[256], *save = NULL;

	chk_set(buf, sizeof(buf), "%s", arg);
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		int i;

		for (i = 0; i < R_COUNT && strcmp(w, ready_names[i]); i++)
			;
		if (i == R_COUNT) {
			fprintf(stderr, "gdx check: unknown --require '%s'\n", w);
			return -EINVAL;
		}
		want[i] = true;
	}
	return 0;
}

int cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sysfs-root", required_argument, NULL, 's' },
		{ "procfs-root", required_argument, NULL, 'p' },
		{ "modules-root", required_argument, NULL, 'm' },
		{ "root", required_argument, NULL, 'r' },
		{ "path", required_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "live", no_argument, NULL, 'L' },
		{ "no-live", no_argument, NULL, 'N' },
		{ "require", required_argument, NULL, 'R' },
		{ "gpu", required_argument, NULL, 'G' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	char sysfs[PATH_MAX] = "", procfs[PATH_MAX] = "", modroot[PATH_MAX] = "";
	bool json = false, want[R_COUNT] = { false };
	int live = -1, opt, err, rc = 0;
	struct gdx_topo_opts to;
	struct report *rp;
	const char *path = ".", *gpu = NULL;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's': chk_set(sysfs, sizeof(sysfs), "%s", optarg); break;
		case 'p': chk_set(procfs, sizeof(procfs), "%s", optarg); break;
		case 'm': chk_set(modroot, sizeof(modroot), "%s", optarg); break;
		case 'r':
			if (gdx_topo_fmt(sysfs, sizeof(sysfs), "%s/sys", optarg) < 0 ||
			    gdx_topo_fmt(procfs, sizeof(procfs), "%s/proc", optarg) < 0 ||
			    gdx_topo_fmt(modroot, sizeof(modroot), "%s/lib/modules", optarg) < 0) {
				fprintf(stderr, "gdx check: --root too long\n");
				return 2;
			}
			break;
		case 'P': path = optarg; break;
		case 'G': gpu = optarg; break;
		case 'j': json = true; break;
		case 'L': live = 1; break;
		case 'N': live = 0; break;
		case 'R':
			if (parse_require(optarg, want))
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (!sysfs[0])
		chk_set(sysfs, sizeof(sysfs), "%s", gdx_cfg_str("sysfs_root"));
	if (!procfs[0])
		chk_set(procfs, sizeof(procfs), "%s", gdx_cfg_str("procfs_root"));
	if (!modroot[0])
		chk_set(modroot, sizeof(modroot), "%s", gdx_cfg_str("modules_root"));
	/* A tree that is not there would make an empty report that looks like a machine. */
	for (int i = 0; i < 2; i++) {
		const char *dir = i ? procfs : sysfs, *why = NULL;
		struct stat st;

		if (stat(dir, &st))
			why = strerror(errno);
		else if (!S_ISDIR(st.st_mode))
			why = "not a directory";
		if (why) {
			fprintf(stderr, "%s: %s root %s: %s\n", argv[0], i ? "procfs" : "sysfs", dir,
				why);
			return 1;
		}
	}
	/* live probes describe this machine, which a fixture tree is not */
	if (live < 0)
		live = !strcmp(sysfs, "/sys") && !strcmp(procfs, "/proc");

	rp = calloc(1, sizeof(*rp));
	if (!rp)
		return 1;
	gdx_topo_opts_init(&to, sizeof(to));
	to.sysfs_root = sysfs;
	to.procfs_root = procfs;
	err = gdx_topo_open(&rp->x.t, &to);
	if (err) {
		fprintf(stderr, "gdx check: reading the topology under %s: %s\n", sysfs,
			gdx_strerror(err));
		free(rp);
		return 1;
	}
	rp->x.sysfs = sysfs;
	rp->x.procfs = procfs;
	rp->x.modroot = modroot;
	rp->x.path = path;
	rp->x.live = live;
	count_devices(&rp->x);
	rp->gpu = gdx_topo_nth(rp->x.t, GDX_TOPO_GPU, 0);
	if (gpu) {
		char name[32];
		char *end;
		long n = strtol(gpu, &end, 10);

		if (!*end && end != gpu)
			chk_set(name, sizeof(name), "GPU%ld", n);
		else
			chk_set(name, sizeof(name), "%s", gpu);
		rp->gpu = gdx_topo_find(rp->x.t, GDX_TOPO_GPU, name);
		if (rp->gpu < 0) {
			fprintf(stderr, "gdx check: no GPU '%s' (%d found)\n", gpu, rp->x.ngpu);
			gdx_topo_close(rp->x.t);
			free(rp);
			return 2;
		}
	}
	check_sys(&rp->x);
	if (live)
		check_live(&rp->x);
	reco_storage(rp);
	reco_net(rp, true);
	reco_net(rp, false);
	reco_pairs(rp);
	readiness(rp);
	if (json)
		print_json(rp);
	else
		print_text(rp);
	for (int i = 0; i < R_COUNT; i++) {
		if (!want[i] || rp->ready[i] == READY)
			continue;
		fprintf(stderr, "gdx check: %s is %s\n", ready_names[i],
			rp->ready[i] == NOT_CHECKED ? "not checked (live checks off, or nothing to "
			"read it from)" : "not ready");
		rc = 1;
	}
	gdx_topo_close(rp->x.t);
	free(rp);
	return rc;
}
