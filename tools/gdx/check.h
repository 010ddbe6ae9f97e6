/* SPDX-License-Identifier: MIT */
#ifndef GDX_TOOL_CHECK_H
#define GDX_TOOL_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <gdx/topo.h>

/*
 * gdx check in three parts: check_sys.c reads the trees under the sysfs,
 * procfs and modules roots (deterministic on a fixture), check_live.c asks
 * this process and machine (io_uring, O_DIRECT, rlimits, dlopen), and
 * cmd_check.c turns the findings into the report.
 */

enum chk_status { CHK_OK, CHK_FAIL, CHK_WARN, CHK_NA };

struct chk {
	const char *id;		/* JSON key */
	const char *title;
	enum chk_status st;
	bool live;
	char finding[640];
	char fix[320];
};

enum mod_state { MOD_UNKNOWN, MOD_MISSING, MOD_AVAILABLE, MOD_LOADED };

#define CHK_MAX 32
#define MAX_LIVE_LIBS 2

struct chk_ctx {
	struct gdx_topo *t;
	const char *sysfs, *procfs, *modroot, *path;
	bool live;
	int ngpu, nnic, nrdma, nrdma_active, nnvme_local, nnvme_fabric, ndisk;

	/* facts from the trees */
	char drv_version[32];
	int drv_major;
	bool drv_open;
	char kernel[80];
	int kmajor, kminor;
	bool modules_readable;
	char cmdline[2048];
	bool dmabuf, peermem, nvfs, uverbs;
	bool p2pdma;		/* cuFile's P2PDMA mode can work (no nvidia-fs needed) */
	char p2pdma_fix[160];	/* the missing piece when it cannot */
	bool iommu_translating;
	int acs_redirect;	/* bridges with P2P redirect on a GPU path */
	char acs_bridge[16];
	int io_uring_disabled;

	/* live facts; meaningful only when live */
	bool io_uring_ok, odirect_ok, memlock_ok, cufile_ok, ibverbs_ok;
	int cuda_count;
	char path_fs[16];	/* the filesystem type holding --path */		/* GPUs the CUDA driver sees, or a negative gdx code */
	uint64_t memlock;

	struct chk c[CHK_MAX];
	int n;

	/* module states already looked up: modules.dep runs to a megabyte */
	struct { char name[32]; enum mod_state st; } mods[24];
	int nmods;
};

struct chk *chk_add(struct chk_ctx *x, const char *id, const char *title, enum chk_status st);
void chk_set(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void chk_cat(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CHK_SET(field, ...) chk_set((field), sizeof(field), __VA_ARGS__)
#define CHK_CAT(field, ...) chk_cat((field), sizeof(field), __VA_ARGS__)

enum mod_state chk_module(struct chk_ctx *x, const char *name);
const char *chk_size(uint64_t bytes, char *buf, size_t len);

void check_sys(struct chk_ctx *x);
void check_live(struct chk_ctx *x);

#endif
