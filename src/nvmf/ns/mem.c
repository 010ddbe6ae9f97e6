/* SPDX-License-Identifier: MIT */
/*
 * RAM and null namespaces.  Both expose their bytes through map(), so the TCP
 * transport receives write data straight into the namespace and sends read
 * data straight from it.  A null namespace reads zeroes and discards writes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/config.h"
#include "common/util.h"
#include "nvmf/core/core.h"

static int parse_size(const char *spec, const char *prefix, uint64_t *size)
{
	size_t n = strlen(prefix);

	if (strncmp(spec, prefix, n))
		return -EINVAL;
	if (gdx_parse_size(spec + n, size) || *size == 0)
		return -EINVAL;
	return 0;
}

static int ram_open(struct nvmf_ns *ns, const char *spec)
{
	void *p;
	int ret = parse_size(spec, "ram:", &ns->size);

	if (ret)
		return ret;
	/* untouched pages cost nothing and read as zeroes */
	p = mmap(NULL, ns->size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	ns->priv = p;
	return 0;
}

static void ram_close(struct nvmf_ns *ns)
{
	if (ns->priv)
		munmap(ns->priv, ns->size);
}

static void *ram_map(struct nvmf_ns *ns, uint64_t off, uint64_t len, bool write)
{
	(void)len;
	(void)write;
	return (char *)ns->priv + off;
}

/* Zeroes a byte range, handing whole pages back to the kernel. */
static void ram_zero(struct nvmf_ns *ns, uint64_t off, uint64_t len)
{
	char *base = ns->priv;
	uint64_t a = GDX_ALIGN_UP(off, 4096ull), b = GDX_ALIGN_DOWN(off + len, 4096ull);

	if (b > a + 4096) {
		memset(base + off, 0, a - off);
		madvise(base + a, b - a, MADV_DONTNEED);
		memset(base + b, 0, off + len - b);
	} else {
		memset(base + off, 0, len);
	}
}

static void ram_submit(struct nvmf_ns *ns, struct nvmf_req *req)
{
	switch (req->cmd.opc) {
	case GDX_NVME_CMD_WRITE_ZEROES:
		ram_zero(ns, req->io_off, (uint64_t)gdx_nvme_rw_nlb(&req->cmd) << ns->lba_shift);
		break;
	case GDX_NVME_CMD_DSM: {
		const struct gdx_nvme_dsm_range *r = req->buf;

		for (uint32_t i = 0; i <= (req->cmd.cdw10 & 0xff); i++)
			ram_zero(ns, r[i].slba << ns->lba_shift,
				 (uint64_t)r[i].nlb << ns->lba_shift);
		break;
	}
	default:
		/* read/write data already moved through map(); flush has nothing to do */
		break;
	}
	nvmf_io_done(req, 0);
}

const struct nvmf_ns_ops nvmf_ns_ram_ops = {
	.name = "ram",
	.open = ram_open,
	.close = ram_close,
	.map = ram_map,
	.submit = ram_submit,
};

/* Reads come from a shared zero region, writes land in a shared scratch one. */
struct null_priv {
	void *zero;
	void *scratch;
	size_t len;
};

static int null_open(struct nvmf_ns *ns, const char *spec)
{
	struct null_priv *p;
	int ret = parse_size(spec, "null:", &ns->size);

	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->len = 16u << 20;	/* above any transfer the target accepts */
	p->zero = mmap(NULL, p->len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	p->scratch = mmap(NULL, p->len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p->zero == MAP_FAILED || p->scratch == MAP_FAILED) {
		ret = -errno;
		if (p->zero != MAP_FAILED)
			munmap(p->zero, p->len);
		if (p->scratch != MAP_FAILED)
			munmap(p->scratch, p->len);
		free(p);
		return ret;
	}
	ns->priv = p;
	return 0;
}

static void null_close(struct nvmf_ns *ns)
{
	struct null_priv *p = ns->priv;

	if (!p)
		return;
	munmap(p->zero, p->len);
	munmap(p->scratch, p->len);
	free(p);
}

static void *null_map(struct nvmf_ns *ns, uint64_t off, uint64_t len, bool write)
{
	struct null_priv *p = ns->priv;

	(void)off;
	if (len > p->len)
		return NULL;
	return write ? p->scratch : p->zero;
}

static void null_submit(struct nvmf_ns *ns, struct nvmf_req *req)
{
	(void)ns;
	nvmf_io_done(req, 0);
}

const struct nvmf_ns_ops nvmf_ns_null_ops = {
	.name = "null",
	.open = null_open,
	.close = null_close,
	.map = null_map,
	.submit = null_submit,
};

const struct nvmf_ns_ops *nvmf_ns_backend(const char *spec)
{
	if (!strncmp(spec, "ram:", 4))
		return &nvmf_ns_ram_ops;
	if (!strncmp(spec, "null:", 5))
		return &nvmf_ns_null_ops;
	return &nvmf_ns_file_ops;
}
