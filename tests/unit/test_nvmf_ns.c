/* SPDX-License-Identifier: MIT */
/* RAM and null namespaces: which read data are pages of their own (the
 * transport lends them to the kernel), which are zeroes (it lends zeroed pages
 * of its own instead of the shared zero page), which are neither (copied). */
#include <string.h>

#include "test.h"

#include "nvmf/core/core.h"

#define MiB (1024ull * 1024)

static unsigned completions;

static void on_done(struct nvmf_req *req)
{
	(void)req;
	completions++;
}

static void open_ns(struct nvmf_ns *ns, const char *spec)
{
	memset(ns, 0, sizeof(*ns));
	ns->ops = nvmf_ns_backend(spec);
	ns->lba_shift = 12;
	assert_int_equal(ns->ops->open(ns, spec), 0);
}

/* Write Zeroes of nlb 4 KiB blocks from slba, through the backend. */
static void write_zeroes(struct nvmf_ns *ns, uint64_t slba, uint32_t nlb)
{
	struct nvmf_sq sq = { 0 };
	struct nvmf_req req = { .sq = &sq, .ns = ns, .done = on_done };
	unsigned before = completions;

	req.cmd.opc = GDX_NVME_CMD_WRITE_ZEROES;
	req.cmd.cdw10 = (uint32_t)slba;
	req.cmd.cdw11 = (uint32_t)(slba >> 32);
	req.cmd.cdw12 = nlb - 1;
	req.io_off = slba << ns->lba_shift;
	ns->ops->submit(ns, &req);
	assert_int_equal(completions, before + 1);
	assert_int_equal(req.cqe.status, 0);
}

#define OWN NVMF_PAGES_OWN
#define ZERO NVMF_PAGES_ZERO
#define MIXED NVMF_PAGES_SHARED

static void ram_tells_own_pages_from_zeroes(void **state)
{
	struct nvmf_ns ns;
	char *p;

	(void)state;
	open_ns(&ns, "ram:64M");
	assert_ptr_equal(ns.ops, &nvmf_ns_ram_ops);
	/* never written: the zero page */
	assert_int_equal(ns.ops->pages(&ns, 0, 128 * 1024), ZERO);
	assert_int_equal(ns.ops->pages(&ns, 63 * MiB, MiB), ZERO);

	/* a write of 256 KiB at 1 MiB + 4 KiB: those pages, no others */
	p = ns.ops->map(&ns, MiB + 4096, 256 * 1024, true);
	memset(p, 0xa5, 256 * 1024);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 256 * 1024), OWN);
	assert_int_equal(ns.ops->pages(&ns, MiB + 8192, 4096), OWN);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096 + 255 * 1024, 1024), OWN);
	assert_int_equal(ns.ops->pages(&ns, MiB, 128 * 1024), MIXED);	/* first page unwritten */
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 260 * 1024), MIXED);	/* one past */
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096 + 256 * 1024, 4096), ZERO);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 0), MIXED);
	/* reading does not make pages the namespace's own */
	assert_ptr_equal(ns.ops->map(&ns, 8 * MiB, MiB, false), (char *)p - MiB - 4096 + 8 * MiB);
	assert_int_equal(ns.ops->pages(&ns, 8 * MiB, MiB), ZERO);

	/* a write across bitmap words (page 63 to page 64 + 70) */
	ns.ops->map(&ns, 63 * 4096, 72 * 4096, true);
	assert_int_equal(ns.ops->pages(&ns, 63 * 4096, 72 * 4096), OWN);
	assert_int_equal(ns.ops->pages(&ns, 62 * 4096, 2 * 4096), MIXED);
	assert_int_equal(ns.ops->pages(&ns, 135 * 4096, 64 * 4096), ZERO);

	/* zeroing hands whole pages back: they are the zero page again */
	write_zeroes(&ns, (MiB + 4096) / 4096 + 8, 16);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 256 * 1024), MIXED);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096 + 8 * 4096, 16 * 4096), ZERO);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 8 * 4096), OWN);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096 + 24 * 4096, 256 * 1024 - 24 * 4096), OWN);
	for (unsigned i = 0; i < 256 * 1024; i++)
		assert_int_equal((unsigned char)p[i], i >= 8 * 4096 && i < 24 * 4096 ? 0 : 0xa5);
	/* written again: its own again */
	ns.ops->map(&ns, MiB + 4096, 256 * 1024, true);
	assert_int_equal(ns.ops->pages(&ns, MiB + 4096, 256 * 1024), OWN);
	ns.ops->close(&ns);
}

static void null_reads_zeroes(void **state)
{
	struct nvmf_ns ns;

	(void)state;
	open_ns(&ns, "null:1G");
	assert_ptr_equal(ns.ops, &nvmf_ns_null_ops);
	assert_int_equal(ns.ops->pages(&ns, 0, MiB), ZERO);
	assert_int_equal(ns.ops->pages(&ns, 512 * MiB, 128 * 1024), ZERO);
	ns.ops->close(&ns);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ram_tells_own_pages_from_zeroes),
		cmocka_unit_test(null_reads_zeroes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
