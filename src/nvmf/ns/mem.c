/* SPDX-License-Identifier: MIT */
/*
 * RAM and null namespaces.  Both expose their bytes through map(), so the TCP
 * transport receives write data straight into the namespace and sends read
 * data straight from it.  A null namespace reads zeroes and discards writes.
 * Both say which read data are pages of their own (pages()): the zero page
 * behind never-written memory is shared by every read, and lending it to the
 * kernel from every core makes its count the one thing all queues wait on.
 */
#include <errno.h>
#include <stdatomic.h>
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

/*
 * A RAM namespace is anonymous memory: never-written pages all map the
 * kernel's one zero page.  A bit per page says which were written since they
 * were last handed back (pages()): only those go to the socket by reference.
 */
struct ram {
	char *mem;
	_Atomic uint64_t *written;	/* a bit per page */
};

#define RAM_PAGE 4096ull

static int ram_open(struct nvmf_ns *ns, const char *spec)
{
	struct ram *r;
	uint64_t words;
	int ret = parse_size(spec, "ram:", &ns->size);

	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	words = GDX_ALIGN_UP(ns->size, RAM_PAGE * 64) / (RAM_PAGE * 64);
	r->written = calloc(words, sizeof(*r->written));
	/* untouched pages cost nothing and read as zeroes */
	r->mem = mmap(NULL, ns->size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!r->written || r->mem == MAP_FAILED) {
		ret = r->written ? -errno : -ENOMEM;
		if (r->mem != MAP_FAILED)
			munmap(r->mem, ns->size);
		free(r->written);
		free(r);
		return ret;
	}
	ns->priv = r;
	return 0;
}

static void ram_close(struct nvmf_ns *ns)
{
	struct ram *r = ns->priv;

	if (!r)
		return;
	munmap(r->mem, ns->size);
	free(r->written);
	free(r);
}

/* The bits of word w that pages [first, last] cover. */
static uint64_t page_bits(uint64_t w, uint64_t first, uint64_t last)
{
	uint64_t lo = w == first / 64 ? first % 64 : 0, hi = w == last / 64 ? last % 64 : 63;

	return (hi == 63 ? ~0ull : (1ull << (hi + 1)) - 1) & ~((1ull << lo) - 1);
}

/*
 * Sets (or clears) the bits of the pages [first, last].  Set: a look first,
 * so that rewriting written pages stores nothing to the shared bitmap.
 */
static void ram_mark(struct ram *r, uint64_t first, uint64_t last, bool set)
{
	for (uint64_t w = first / 64; w <= last / 64; w++) {
		uint64_t m = page_bits(w, first, last);
		uint64_t v = atomic_load_explicit(&r->written[w], memory_order_relaxed);

		if (set && (v & m) != m)
			atomic_fetch_or_explicit(&r->written[w], m, memory_order_relaxed);
		else if (!set && (v & m))
			atomic_fetch_and_explicit(&r->written[w], ~m, memory_order_relaxed);
	}
}

static void *ram_map(struct nvmf_ns *ns, uint64_t off, uint64_t len, bool write)
{
	struct ram *r = ns->priv;

	/* marked before the data lands: a read racing the write may send old or new bytes */
	if (write && len)
		ram_mark(r, off / RAM_PAGE, (off + len - 1) / RAM_PAGE, true);
	return r->mem + off;
}

/*
 * Written pages are the namespace's own; never-written ones (or handed back
 * since) read as zeroes; a range of both is neither.
 */
static enum nvmf_ns_pages ram_pages(struct nvmf_ns *ns, uint64_t off, uint64_t len)
{
	struct ram *r = ns->priv;
	uint64_t first = off / RAM_PAGE, last = (off + len - 1) / RAM_PAGE;
	bool any = false, all = true;

	if (!len)
		return NVMF_PAGES_SHARED;
	for (uint64_t w = first / 64; w <= last / 64; w++) {
		uint64_t m = page_bits(w, first, last);
		uint64_t v = atomic_load_explicit(&r->written[w], memory_order_relaxed) & m;

		any |= v != 0;
		all &= v == m;
	}
	return all ? NVMF_PAGES_OWN : any ? NVMF_PAGES_SHARED : NVMF_PAGES_ZERO;
}

/* Zeroes a byte range, handing whole pages back to the kernel. */
static void ram_zero(struct nvmf_ns *ns, uint64_t off, uint64_t len)
{
	struct ram *r = ns->priv;
	char *base = r->mem;
	uint64_t a = GDX_ALIGN_UP(off, RAM_PAGE), b = GDX_ALIGN_DOWN(off + len, RAM_PAGE);

	if (b > a + RAM_PAGE) {
		memset(base + off, 0, a - off);
		/* cleared first: from here on these pages read as zeroes */
		ram_mark(r, a / RAM_PAGE, b / RAM_PAGE - 1, false);
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
	.pages = ram_pages,
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

/* Reads are zeroes (its zero region is the kernel's one zero page). */
static enum nvmf_ns_pages null_pages(struct nvmf_ns *ns, uint64_t off, uint64_t len)
{
	(void)ns;
	(void)off;
	(void)len;
	return NVMF_PAGES_ZERO;
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
	.pages = null_pages,
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
