/* SPDX-License-Identifier: MIT */
/*
 * The checks that read only the sysfs, procfs and modules trees, so a fixture
 * tree gives the same report everywhere.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/util.h"
#include "topo/topo_int.h"

struct chk *chk_add(struct chk_ctx *x, const char *id, const char *title, enum chk_status st)
{
	struct chk *c = &x->c[x->n < CHK_MAX ? x->n++ : CHK_MAX - 1];

	memset(c, 0, sizeof(*c));
	c->id = id;
	c->title = title;
	c->st = st;
	return c;
}

void chk_set(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

void chk_cat(char *buf, size_t len, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	if (n + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

const char *chk_size(uint64_t b, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (b >= 1024 && !(b % 1024) && u + 1 < GDX_ARRAY_SIZE(unit)) {
		b /= 1024;
		u++;
	}
	chk_set(buf, len, "%llu %s", (unsigned long long)b, unit[u]);
	return buf;
}

/* Reads a whole file under root (modules.dep runs to a megabyte); NULL if absent. */
static char *slurp(const char *root, const char *rel)
{
	char path[PATH_MAX];
	size_t cap = 1 << 16, n = 0;
	char *buf;
	int fd;

	if (gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel) < 0)
		return NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(cap);
	while (buf) {
		ssize_t r;

		if (n + 1 == cap) {
			char *b = realloc(buf, cap * 2);

			if (!b) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = b;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (buf)
		buf[n] = 0;
	return buf;
}

static void underscores(char *dst, size_t len, const char *src)
{
	size_t i;

	for (i = 0; src[i] && i + 1 < len; i++)
		dst[i] = src[i] == '-' ? '_' : src[i];
	dst[i] = 0;
}

/* Does a modules.dep / modules.builtin line list "<name>.ko" (dashes and underscores alike)? */
static bool modlist_has(const char *text, const char *name)
{
	size_t len = strlen(name);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = l + strcspn(l, ":\n");
		const char *base = l;
		char mod[128];

		for (const char *p = l; p < end; p++)
			if (*p == '/')
				base = p + 1;
		if ((size_t)(end - base) < len + 3 || (size_t)(end - base) >= sizeof(mod))
			continue;
		memcpy(mod, base, (size_t)(end - base));
		mod[end - base] = 0;
		underscores(mod, sizeof(mod), mod);
		if (!strncmp(mod, name, len) && !strncmp(mod + len, ".ko", 3))
			return true;
	}
	return false;
}

static enum mod_state module_state(struct chk_ctx *x, const char *name)
{
	char rel[PATH_MAX], *text;
	enum mod_state st = MOD_UNKNOWN;
	struct stat sb;
	char path[PATH_MAX];

	text = slurp(x->procfs, "modules");
	if (text) {
		size_t len = strlen(name);

		st = MOD_MISSING;
		for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (!strncmp(l, name, len) && l[len] == ' ')
				st = MOD_LOADED;
		free(text);
	}
	/* built in, or loaded on a kernel whose /proc/modules we cannot read */
	if (st != MOD_LOADED && gdx_topo_fmt(path, sizeof(path), "%s/module/%s", x->sysfs, name) > 0 &&
	    !stat(path, &sb))
		st = MOD_LOADED;
	if (st == MOD_LOADED || !x->kernel[0])
		return st;
	gdx_topo_fmt(rel, sizeof(rel), "%s/modules.builtin", x->kernel);
	text = slurp(x->modroot, rel);
	if (text) {
		if (modlist_has(text, name))
			st = MOD_LOADED;
		free(text);
	}
	if (st == MOD_LOADED)
		return st;
	gdx_topo_fmt(rel, sizeof(rel), "%s/modules.dep", x->kernel);
	text = slurp(x->modroot, rel);
	if (text) {
		st = modlist_has(text, name) ? MOD_AVAILABLE : MOD_MISSING;
		free(text);
	}
	return st;
}

enum mod_state chk_module(struct chk_ctx *x, const char *module)
{
	char name[32];
	enum mod_state st;

	underscores(name, sizeof(name), module);
	for (int i = 0; i < x->nmods; i++)
		if (!strcmp(x->mods[i].name, name))
			return x->mods[i].st;
	st = module_state(x, name);
	if (x->nmods < (int)GDX_ARRAY_SIZE(x->mods)) {
		memcpy(x->mods[x->nmods].name, name, sizeof(name));
		x->mods[x->nmods++].st = st;
	}
	return st;
}

static void read_driver(struct chk_ctx *x)
{
	char buf[512], *p;

	if (gdx_topo_read(x->procfs, "driver/nvidia/version", buf, sizeof(buf)) <= 0)
		return;
	x->drv_open = strstr(buf, "Open Kernel Module") != NULL;
	/* the version is the first token that looks like 535.161.08 */
	for (p = buf; *p; p++) {
		if (isdigit((unsigned char)*p) && (p == buf || p[-1] == ' ')) {
			size_t n = strspn(p, "0123456789.");

			if (n >= 5 && memchr(p, '.', n) && n < sizeof(x->drv_version)) {
				memcpy(x->drv_version, p, n);
				x->drv_version[n] = 0;
				x->drv_major = atoi(p);
				break;
			}
		}
	}
}

static void chk_driver(struct chk_ctx *x)
{
	struct chk *c;

	if (!x->drv_version[0]) {
		if (!x->ngpu) {
			c = chk_add(x, "driver", "NVIDIA driver", CHK_NA);
			CHK_SET(c->finding, "no NVIDIA GPU and no driver; device memory comes from the "
				"emulated device (GDX_DEVICE=emulated)");
			return;
		}
		c = chk_add(x, "driver", "NVIDIA driver", CHK_FAIL);
		CHK_SET(c->finding, "%d GPU%s but no driver loaded (%s/driver/nvidia/version missing)",
			x->ngpu, x->ngpu > 1 ? "s" : "", x->procfs);
		CHK_SET(c->fix, "install the NVIDIA driver (open kernel modules, >= 515) and load it");
		return;
	}
	c = chk_add(x, "driver", "NVIDIA driver", CHK_OK);
	CHK_SET(c->finding, "%s, %s kernel modules", x->drv_version,
		x->drv_open ? "open" : "proprietary");
	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = { .size = sizeof(d) };

		gdx_topo_get(x->t, i, &d);
		if (d.kind == GDX_TOPO_GPU && strcmp(d.driver, "nvidia")) {
			c->st = CHK_WARN;
			CHK_CAT(c->finding, "; %s is bound to %s", d.name, d.driver[0] ? d.driver : "no driver");
			CHK_SET(c->fix, "bind %s to nvidia", d.pci);
		}
	}
	if (!x->ngpu) {
		c->st = CHK_WARN;
		CHK_CAT(c->finding, ", but no NVIDIA GPU on PCI");
	}
}

static void chk_dmabuf(struct chk_ctx *x)
{
	bool kernel_ok = x->kmajor > 5 || (x->kmajor == 5 && x->kminor >= 12);
	struct chk *c;

	x->dmabuf = kernel_ok && x->drv_open && x->drv_major >= 515;
	if (!x->ngpu) {
		c = chk_add(x, "dmabuf", "dma-buf", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	c = chk_add(x, "dmabuf", "dma-buf", x->dmabuf ? CHK_OK : CHK_FAIL);
	if (x->dmabuf) {
		CHK_SET(c->finding, "kernel %d.%d and open driver %d: GPU memory can be exported "
			"as dma-buf and registered with a NIC (ibv_reg_dmabuf_mr)", x->kmajor, x->kminor,
			x->drv_major);
		return;
	}
	if (!kernel_ok) {
		CHK_SET(c->finding, "kernel %s is older than 5.12 (no RDMA dma-buf import)",
			x->kernel[0] ? x->kernel : "(unknown)");
		CHK_SET(c->fix, "boot a kernel >= 5.12");
	} else if (!x->drv_version[0]) {
		CHK_SET(c->finding, "no NVIDIA driver");
		CHK_SET(c->fix, "install the open NVIDIA kernel modules (>= 515)");
	} else if (!x->drv_open) {
		CHK_SET(c->finding, "driver %s uses the proprietary kernel modules, which export no "
			"dma-buf", x->drv_version);
		CHK_SET(c->fix, "install the open kernel modules (nvidia-open, >= 515)");
	} else {
		CHK_SET(c->finding, "driver %s is older than 515", x->drv_version);
		CHK_SET(c->fix, "install driver >= 515 (open kernel modules)");
	}
}

static void chk_peermem(struct chk_ctx *x)
{
	enum mod_state m = chk_module(x, "nvidia_peermem");
	struct chk *c;

	x->peermem = m == MOD_LOADED;
	if (!x->ngpu) {
		c = chk_add(x, "peermem", "nvidia_peermem", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	if (x->peermem) {
		c = chk_add(x, "peermem", "nvidia_peermem", CHK_OK);
		CHK_SET(c->finding, "loaded: NICs can register GPU memory through ib_core peer memory");
		return;
	}
	if (x->dmabuf) {
		c = chk_add(x, "peermem", "nvidia_peermem", CHK_OK);
		CHK_SET(c->finding, "not loaded, and not needed: gdx registers GPU memory as dma-buf");
		return;
	}
	c = chk_add(x, "peermem", "nvidia_peermem", x->nrdma ? CHK_FAIL : CHK_WARN);
	CHK_SET(c->finding, "%s: a NIC cannot register GPU memory%s",
		m == MOD_UNKNOWN ? "state unknown (no module list)" : "not loaded",
		x->nrdma ? ", so RDMA into the GPU bounces through host memory" :
		" (no RDMA device here anyway)");
	if (m == MOD_MISSING)
		CHK_SET(c->fix, "install the driver's nvidia-peermem module, then modprobe nvidia-peermem");
	else
		CHK_SET(c->fix, "modprobe nvidia-peermem");
}

static void chk_nvfs(struct chk_ctx *x)
{
	enum mod_state m = chk_module(x, "nvidia_fs");
	struct chk *c;

	x->nvfs = m == MOD_LOADED;
	if (!x->ngpu) {
		c = chk_add(x, "nvidia_fs", "nvidia-fs", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	if (x->nvfs) {
		c = chk_add(x, "nvidia_fs", "nvidia-fs", CHK_OK);
		CHK_SET(c->finding, "loaded: cuFile can DMA between NVMe and GPU memory");
		return;
	}
	if (x->p2pdma) {
		c = chk_add(x, "nvidia_fs", "nvidia-fs", CHK_OK);
		CHK_SET(c->finding, "not loaded, and not needed: cuFile can use PCI P2PDMA");
		return;
	}
	c = chk_add(x, "nvidia_fs", "nvidia-fs", x->nnvme_local ? CHK_FAIL : CHK_WARN);
	CHK_SET(c->finding, "%s: file reads into the GPU go through the pinned bounce ring%s",
		m == MOD_UNKNOWN ? "state unknown (no module list)" : "not loaded",
		x->nnvme_local ? "" : " (no local NVMe either)");
	CHK_SET(c->fix, m == MOD_AVAILABLE ? "modprobe nvidia-fs" :
		"install GPUDirect Storage (nvidia-fs, libcufile), then modprobe nvidia-fs");
}

/* Does a procfs file hold a line containing needle?  -1 when it cannot be read. */
static int file_has(const char *root, const char *rel, const char *needle)
{
	char path[PATH_MAX], line[512];
	int found = 0;
	FILE *f;

	if (gdx_topo_fmt(path, sizeof(path), "%s/%s", root, rel) < 0)
		return -1;
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/*
 * cuFile's P2PDMA mode (GDS 1.13+) reaches local NVMe without nvidia-fs:
 * the kernel's PCI P2PDMA (6.2+, p2pdma_pgmap_ops in kallsyms), the open
 * kernel modules >= 565 with a static BAR1, and NVMe multipath off.
 */
static void eval_p2pdma(struct chk_ctx *x)
{
	int ksym = file_has(x->procfs, "kallsyms", "p2pdma_pgmap_ops");
	bool kernel = ksym > 0 || (ksym < 0 && (x->kmajor > 6 || (x->kmajor == 6 && x->kminor >= 2)));
	int bar1 = file_has(x->procfs, "driver/nvidia/params", "RMForceStaticBar1=1");
	char mp[8] = "";

	gdx_topo_read(x->sysfs, "module/nvme_core/parameters/multipath", mp, sizeof(mp));
	x->p2pdma_fix[0] = 0;
	if (!kernel)
		CHK_SET(x->p2pdma_fix, "a kernel with PCI P2PDMA (>= 6.2, CONFIG_PCI_P2PDMA)");
	else if (!x->drv_open || x->drv_major < 565)
		CHK_SET(x->p2pdma_fix, "the open kernel modules >= 565");
	else if (mp[0] == 'Y')
		CHK_SET(x->p2pdma_fix, "options nvme_core multipath=N (then rebuild the initramfs "
			"and reboot)");
	else if (bar1 <= 0)
		CHK_SET(x->p2pdma_fix, "options nvidia NVreg_RegistryDwords=\"RMForceStaticBar1=1;"
			"RmForceDisableIomapWC=1;\" (then reload the driver)");
	x->p2pdma = x->ngpu && !x->p2pdma_fix[0];
}

static void chk_p2pdma(struct chk_ctx *x)
{
	struct chk *c;

	if (!x->ngpu) {
		c = chk_add(x, "p2pdma", "PCI P2PDMA", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	if (x->p2pdma) {
		c = chk_add(x, "p2pdma", "PCI P2PDMA", CHK_OK);
		CHK_SET(c->finding, "kernel P2PDMA, open driver %d, static BAR1, NVMe multipath off: "
			"cuFile's P2PDMA mode needs no nvidia-fs", x->drv_major);
		return;
	}
	if (x->nvfs) {
		c = chk_add(x, "p2pdma", "PCI P2PDMA", CHK_NA);
		CHK_SET(c->finding, "not needed: nvidia-fs is loaded (cuFile's P2PDMA mode would "
			"need %s)", x->p2pdma_fix);
		return;
	}
	c = chk_add(x, "p2pdma", "PCI P2PDMA", x->nnvme_local ? CHK_FAIL : CHK_WARN);
	CHK_SET(c->finding, "cuFile cannot reach NVMe without nvidia-fs here (P2PDMA mode "
		"needs kernel P2PDMA, open driver >= 565, static BAR1, multipath off)");
	CHK_SET(c->fix, "%s", x->p2pdma_fix);
}

static void chk_bar1(struct chk_ctx *x)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	char small[32] = "", a[32], b[32];
	int unknown = 0;
	struct chk *c;

	if (!x->ngpu) {
		c = chk_add(x, "bar1", "BAR1", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = { .size = sizeof(d) };

		gdx_topo_get(x->t, i, &d);
		if (d.kind != GDX_TOPO_GPU)
			continue;
		if (!d.bar1_size) {
			unknown++;
			continue;
		}
		if (d.bar1_size < lo) {
			lo = d.bar1_size;
			chk_set(small, sizeof(small), "%s", d.name);
		}
		hi = GDX_MAX(hi, d.bar1_size);
	}
	if (!hi) {
		c = chk_add(x, "bar1", "BAR1", CHK_WARN);
		CHK_SET(c->finding, "size unknown (no resource file)");
		return;
	}
	c = chk_add(x, "bar1", "BAR1", lo >= (1ull << 30) ? CHK_OK : CHK_WARN);
	if (lo == hi)
		CHK_SET(c->finding, "%s on %s%s", chk_size(lo, a, sizeof(a)),
			x->ngpu > 1 ? "every GPU" : small, unknown ? " (some unknown)" : "");
	else
		CHK_SET(c->finding, "%s to %s; the smallest on %s", chk_size(lo, a, sizeof(a)),
			chk_size(hi, b, sizeof(b)), small);
	if (c->st == CHK_WARN) {
		CHK_CAT(c->finding, ": at most that much GPU memory can be mapped for direct I/O at once");
		CHK_SET(c->fix, "enable Above 4G decoding and Resizable BAR in the firmware");
	} else {
		CHK_CAT(c->finding, ": room to map large GPU buffers for NICs and NVMe");
	}
}

static bool cmdline_has(const struct chk_ctx *x, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = strstr(x->cmdline, word); p; p = strstr(p + 1, word))
		if ((p == x->cmdline || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return true;
	return false;
}

static void chk_iommu(struct chk_ctx *x)
{
	char path[PATH_MAX], type[32] = "", rel[PATH_MAX];
	int units = 0, g;
	struct chk *c;
	bool pt = cmdline_has(x, "iommu=pt") || cmdline_has(x, "iommu.passthrough=1") ||
		  cmdline_has(x, "amd_iommu=pt");
	bool off = cmdline_has(x, "intel_iommu=off") || cmdline_has(x, "amd_iommu=off") ||
		   cmdline_has(x, "iommu=off");

	for (int i = 0; i < 64; i++) {
		static const char *const pfx[] = { "dmar", "ivhd", "smmu3." };

		for (size_t k = 0; k < GDX_ARRAY_SIZE(pfx); k++) {
			struct stat sb;

			gdx_topo_fmt(path, sizeof(path), "%s/class/iommu/%s%d", x->sysfs, pfx[k], i);
			if (!stat(path, &sb))
				units++;
		}
	}
	/* the domain type of the group of the first GPU (or of any device) */
	g = x->ngpu ? gdx_topo_nth(x->t, GDX_TOPO_GPU, 0) : (gdx_topo_count(x->t) ? 0 : -1);
	if (g >= 0) {
		struct gdx_topo_dev d = { .size = sizeof(d) };

		gdx_topo_get(x->t, g, &d);
		gdx_topo_fmt(rel, sizeof(rel), "bus/pci/devices/%s/iommu_group/type", d.pci);
		if (d.pci[0])
			gdx_topo_read(x->sysfs, rel, type, sizeof(type));
	}
	if (!units && !type[0]) {
		c = chk_add(x, "iommu", "IOMMU", CHK_OK);
		CHK_SET(c->finding, "%s: devices DMA to physical addresses",
			off ? "off (kernel command line)" : "none active");
		return;
	}
	if (!strcmp(type, "identity") || (!type[0] && pt)) {
		c = chk_add(x, "iommu", "IOMMU", CHK_OK);
		CHK_SET(c->finding, "%d unit%s, passthrough (%s): peer-to-peer DMA is not translated",
			units, units == 1 ? "" : "s", type[0] ? "domain type identity" : "iommu=pt");
		return;
	}
	x->iommu_translating = true;
	c = chk_add(x, "iommu", "IOMMU", CHK_WARN);
	CHK_SET(c->finding, "%d unit%s translating DMA (%s): peer-to-peer between GPU and NIC/NVMe "
		"needs dma-buf mappings and may fail or slow down", units, units == 1 ? "" : "s",
		type[0] ? type : "domain type unknown");
	CHK_SET(c->fix, "boot with iommu=pt (or intel_iommu=off / amd_iommu=off)");
}

static void dev_name(const struct chk_ctx *x, int i, char *out, size_t len)
{
	struct gdx_topo_dev d = { .size = sizeof(d) };

	gdx_topo_get(x->t, i, &d);
	chk_set(out, len, "%s", d.name);
}

/* ACS on the switch ports between each GPU and the NIC and NVMe gdx would pair it with. */
static void chk_acs(struct chk_ctx *x)
{
	char redirect[256] = "", unknown_at[16] = "", pair[80] = "";
	int paths = 0, bridges = 0, unknown = 0, redir = 0;
	struct chk *c;

	for (int g = 0; g < x->ngpu; g++) {
		int gi = gdx_topo_nth(x->t, GDX_TOPO_GPU, g);
		unsigned kinds[] = { GDX_TOPO_NIC, GDX_TOPO_NVME };

		for (size_t k = 0; k < GDX_ARRAY_SIZE(kinds); k++) {
			char br[GDX_TOPO_MAX_DEPTH * 2 + 1][16];
			int peer = gdx_topo_nearest(x->t, gi, kinds[k], NULL);
			int nb = peer < 0 ? 0 : gdx_topo_path_bridges(x->t, gi, peer, br,
								      (int)GDX_ARRAY_SIZE(br));

			if (nb > 0)
				paths++;
			for (int b = 0; b < nb; b++) {
				uint8_t cfg[4096];
				ssize_t len = gdx_pci_config(x->t, br[b], cfg, sizeof(cfg));
				int pos = len < 0 ? -ENODATA : gdx_pci_find_ecap(cfg, (size_t)len,
										 GDX_PCI_ECAP_ACS);
				uint16_t ctl;

				bridges++;
				if (pos < 0) {
					if (!unknown++)
						chk_set(unknown_at, sizeof(unknown_at), "%s", br[b]);
					continue;
				}
				if (!pos)
					continue;
				ctl = (uint16_t)(cfg[pos + GDX_PCI_ACS_CTRL] |
						 cfg[pos + GDX_PCI_ACS_CTRL + 1] << 8);
				if (!(ctl & (GDX_PCI_ACS_RR | GDX_PCI_ACS_CR | GDX_PCI_ACS_EC)) ||
				    strstr(redirect, br[b]))
					continue;
				if (!redir++) {
					chk_set(x->acs_bridge, sizeof(x->acs_bridge), "%s", br[b]);
					char a[32], b2[32];

					dev_name(x, gi, a, sizeof(a));
					dev_name(x, peer, b2, sizeof(b2));
					chk_set(pair, sizeof(pair), "%s-%s", a, b2);
				}
				CHK_CAT(redirect, "%s%s", redirect[0] ? ", " : "", br[b]);
			}
		}
	}
	x->acs_redirect = redir;
	if (!x->ngpu) {
		c = chk_add(x, "acs", "ACS", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	if (!paths) {
		c = chk_add(x, "acs", "ACS", CHK_NA);
		CHK_SET(c->finding, "no GPU shares a PCIe switch with a NIC or NVMe: peer traffic "
			"crosses the root complex, where ACS does not apply");
		return;
	}
	if (redir) {
		c = chk_add(x, "acs", "ACS", CHK_WARN);
		CHK_SET(c->finding, "P2P redirect on %s (on the %s path): peer traffic below %s "
			"detours through the root complex", redirect, pair, redir > 1 ? "them" : "it");
		CHK_SET(c->fix, "setpci -s %s ECAP_ACS+6.w=0 (each bridge listed), or disable ACS "
			"in the firmware", x->acs_bridge);
		return;
	}
	if (unknown) {
		c = chk_add(x, "acs", "ACS", CHK_WARN);
		CHK_SET(c->finding, "unknown on %d of %d bridges: config space of %s not readable past "
			"64 bytes", unknown, bridges, unknown_at);
		CHK_SET(c->fix, "run gdx check as root");
		return;
	}
	c = chk_add(x, "acs", "ACS", CHK_OK);
	CHK_SET(c->finding, "no P2P redirect on the %d switch port%s between GPUs and their "
		"NICs/NVMe", bridges, bridges == 1 ? "" : "s");
}

static void chk_relaxed(struct chk_ctx *x)
{
	char off[256] = "", unk[256] = "", first_off[16] = "";
	int seen = 0, noff = 0, nunk = 0;
	struct chk *c;

	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = { .size = sizeof(d) };
		uint8_t cfg[256];
		ssize_t len;
		int pos;

		gdx_topo_get(x->t, i, &d);
		if (!d.pci[0] || !(d.kind == GDX_TOPO_GPU || (d.kind == GDX_TOPO_NIC && d.rdma == GDX_TOPO_RDMA_HW)))
			continue;
		seen++;
		len = gdx_pci_config(x->t, d.pci, cfg, sizeof(cfg));
		pos = len < 0 ? -ENODATA : gdx_pci_find_cap(cfg, (size_t)len, GDX_PCI_CAP_EXP);
		if (pos <= 0 || (size_t)pos + GDX_PCI_EXP_DEVCTL + 2 > (size_t)len) {
			nunk++;
			CHK_CAT(unk, "%s%s", unk[0] ? ", " : "", d.name);
			continue;
		}
		if (!(cfg[pos + GDX_PCI_EXP_DEVCTL] & GDX_PCI_EXP_DEVCTL_RELAX)) {
			if (!noff++)
				chk_set(first_off, sizeof(first_off), "%s", d.pci);
			CHK_CAT(off, "%s%s", off[0] ? ", " : "", d.name);
		}
	}
	if (!x->ngpu) {
		c = chk_add(x, "relaxed_ordering", "Relaxed ordering", CHK_NA);
		CHK_SET(c->finding, "no GPU");
		return;
	}
	if (noff) {
		c = chk_add(x, "relaxed_ordering", "Relaxed ordering", CHK_WARN);
		CHK_SET(c->finding, "off on %s: writes into GPU memory are strictly ordered, which "
			"caps peer bandwidth on some CPUs", off);
		CHK_SET(c->fix, "setpci -s %s CAP_EXP+8.w=0010:0010 (and mlx5: relaxed_ordering "
			"enabled in the firmware, mlxconfig PCI_WR_ORDERING)", first_off);
		if (nunk)
			CHK_CAT(c->finding, "; unknown on %s", unk);
		return;
	}
	if (nunk) {
		c = chk_add(x, "relaxed_ordering", "Relaxed ordering", CHK_WARN);
		CHK_SET(c->finding, "unknown on %s: config space not readable past 64 bytes", unk);
		CHK_SET(c->fix, "run gdx check as root");
		return;
	}
	c = chk_add(x, "relaxed_ordering", "Relaxed ordering", CHK_OK);
	CHK_SET(c->finding, "enabled on all %d GPUs and RDMA NICs", seen);
}

static void chk_rdma(struct chk_ctx *x)
{
	enum mod_state uv = chk_module(x, "ib_uverbs");
	char names[256] = "", soft[128] = "";
	struct chk *c;

	x->uverbs = uv == MOD_LOADED;
	for (int i = 0; i < gdx_topo_count(x->t); i++) {
		struct gdx_topo_dev d = { .size = sizeof(d) };

		gdx_topo_get(x->t, i, &d);
		if (d.kind == GDX_TOPO_NIC && d.rdma && strcmp(d.port_state, "ACTIVE"))
			CHK_CAT(names, "%s%s %s", names[0] ? ", " : "", d.name,
				d.port_state[0] ? d.port_state : "state unknown");
		if (d.kind == GDX_TOPO_NIC && d.rdma == GDX_TOPO_RDMA_SOFT)
			CHK_CAT(soft, "%s%s", soft[0] ? ", " : "", d.name);
	}
	if (!x->nrdma) {
		c = chk_add(x, "rdma", "RDMA devices", CHK_WARN);
		CHK_SET(c->finding, "none: network transfers and NVMe-oF use TCP");
		CHK_SET(c->fix, "an InfiniBand or RoCE NIC (for tests: modprobe rdma_rxe; "
			"rdma link add rxe0 type rxe netdev <if>)");
		return;
	}
	c = chk_add(x, "rdma", "RDMA devices", CHK_OK);
	CHK_SET(c->finding, "%d, %d with an active port", x->nrdma, x->nrdma_active);
	if (soft[0])
		CHK_CAT(c->finding, "; Soft-RoCE (host memory only): %s", soft);
	if (names[0]) {
		c->st = x->nrdma_active ? CHK_WARN : CHK_FAIL;
		CHK_CAT(c->finding, " (%s)", names);
		CHK_SET(c->fix, "bring the port up (cable, subnet manager for InfiniBand)");
	}
	if (uv == MOD_MISSING || uv == MOD_AVAILABLE) {
		c->st = CHK_FAIL;
		CHK_CAT(c->finding, "; ib_uverbs not loaded: user-space verbs cannot open them");
		CHK_SET(c->fix, "modprobe ib_uverbs");
	}
}

static void chk_uring_sysctl(struct chk_ctx *x)
{
	char buf[16];
	struct chk *c;

	x->io_uring_disabled = 0;
	if (gdx_topo_read(x->procfs, "sys/kernel/io_uring_disabled", buf, sizeof(buf)) > 0)
		x->io_uring_disabled = atoi(buf);
	if (!x->io_uring_disabled) {
		c = chk_add(x, "io_uring_sysctl", "io_uring sysctl", CHK_OK);
		CHK_SET(c->finding, "kernel.io_uring_disabled is 0 or absent: io_uring allowed");
		return;
	}
	c = chk_add(x, "io_uring_sysctl", "io_uring sysctl",
		    x->io_uring_disabled == 1 ? CHK_WARN : CHK_FAIL);
	CHK_SET(c->finding, "kernel.io_uring_disabled=%d: %s; gdx falls back to pread/pwrite",
		x->io_uring_disabled, x->io_uring_disabled == 1 ?
		"only members of kernel.io_uring_group may create rings" : "nobody may create rings");
	CHK_SET(c->fix, "sysctl kernel.io_uring_disabled=0");
}

static long meminfo(const char *text, const char *key)
{
	const char *p = text ? strstr(text, key) : NULL;

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void chk_hugepages(struct chk_ctx *x)
{
	char *mi = slurp(x->procfs, "meminfo"), thp[64] = "", sz[32];
	long total = meminfo(mi, "HugePages_Total:"), kb = meminfo(mi, "Hugepagesize:");
	const char *mode = NULL;
	struct chk *c;

	free(mi);
	if (gdx_topo_read(x->sysfs, "kernel/mm/transparent_hugepage/enabled", thp, sizeof(thp)) > 0)
		mode = strstr(thp, "[always]") ? "always" : strstr(thp, "[madvise]") ? "madvise" :
		       strstr(thp, "[never]") ? "never" : NULL;
	if (total > 0) {
		c = chk_add(x, "hugepages", "Huge pages", CHK_OK);
		CHK_SET(c->finding, "%ld reserved of %s", total, chk_size((uint64_t)kb << 10, sz,
									   sizeof(sz)));
		if (mode)
			CHK_CAT(c->finding, "; transparent huge pages: %s", mode);
		return;
	}
	if (mode && strcmp(mode, "never")) {
		c = chk_add(x, "hugepages", "Huge pages", CHK_OK);
		CHK_SET(c->finding, "none reserved; transparent huge pages: %s, so large pinned "
			"buffers still get 2 MiB pages", mode);
		return;
	}
	c = chk_add(x, "hugepages", "Huge pages", CHK_WARN);
	CHK_SET(c->finding, "none reserved%s: pinned bounce buffers use 4 KiB pages (more TLB "
		"and IOMMU entries)", mode ? " and transparent huge pages off" : "");
	CHK_SET(c->fix, "sysctl vm.nr_hugepages=1024, or echo madvise > "
		"/sys/kernel/mm/transparent_hugepage/enabled");
}

static void chk_modules(struct chk_ctx *x, const char *id, const char *title,
			const char *const *mods, size_t n, const char *why)
{
	char loaded[128] = "", avail[128] = "", missing[128] = "", unknown[128] = "";
	struct chk *c;

	for (size_t i = 0; i < n; i++) {
		switch (chk_module(x, mods[i])) {
		case MOD_LOADED: CHK_CAT(loaded, "%s%s", loaded[0] ? " " : "", mods[i]); break;
		case MOD_AVAILABLE: CHK_CAT(avail, "%s%s", avail[0] ? " " : "", mods[i]); break;
		case MOD_MISSING: CHK_CAT(missing, "%s%s", missing[0] ? " " : "", mods[i]); break;
		case MOD_UNKNOWN: CHK_CAT(unknown, "%s%s", unknown[0] ? " " : "", mods[i]); break;
		}
	}
	c = chk_add(x, id, title, missing[0] || unknown[0] ? CHK_WARN : CHK_OK);
	if (loaded[0])
		CHK_CAT(c->finding, "loaded: %s", loaded);
	if (avail[0])
		CHK_CAT(c->finding, "%savailable: %s", c->finding[0] ? "; " : "", avail);
	if (missing[0])
		CHK_CAT(c->finding, "%snot in this kernel: %s", c->finding[0] ? "; " : "", missing);
	if (unknown[0])
		CHK_CAT(c->finding, "%sunknown: %s (no %s/modules, so no loadable modules, no "
			"%s/%s, and none shows in %s/module)", c->finding[0] ? "; " : "", unknown,
			x->procfs, x->modroot, x->kernel[0] ? x->kernel : "<release>", x->sysfs);
	CHK_CAT(c->finding, " (%s)", why);
	if (avail[0])
		CHK_SET(c->fix, "modprobe -a %s (when needed)", avail);
	else if (missing[0] || unknown[0])
		CHK_SET(c->fix, "a kernel built with these modules (Debian's stock kernel has them)");
}

void check_sys(struct chk_ctx *x)
{
	static const char *const host_mods[] = { "nvme-tcp", "nvme-rdma" };
	static const char *const tgt_mods[] = { "nvmet", "nvmet-tcp", "nvmet-rdma" };

	if (gdx_topo_read(x->procfs, "sys/kernel/osrelease", x->kernel, sizeof(x->kernel)) > 0)
		sscanf(x->kernel, "%d.%d", &x->kmajor, &x->kminor);
	gdx_topo_read(x->procfs, "cmdline", x->cmdline, sizeof(x->cmdline));
	read_driver(x);
	chk_driver(x);
	chk_dmabuf(x);
	chk_peermem(x);
	eval_p2pdma(x);
	chk_nvfs(x);
	chk_p2pdma(x);
	chk_bar1(x);
	chk_iommu(x);
	chk_acs(x);
	chk_relaxed(x);
	chk_rdma(x);
	chk_uring_sysctl(x);
	chk_hugepages(x);
	chk_modules(x, "nvmf_host_modules", "Kernel NVMe-oF host", host_mods,
		    GDX_ARRAY_SIZE(host_mods), "for nvme connect; gdx's own host needs neither");
	chk_modules(x, "nvmf_target_modules", "Kernel NVMe-oF target", tgt_mods,
		    GDX_ARRAY_SIZE(tgt_mods), "for a kernel target; gdx's own target needs none");
}
