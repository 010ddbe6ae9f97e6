/* SPDX-License-Identifier: MIT */
#ifndef GDX_STATUS_H
#define GDX_STATUS_H

/*
 * Every gdx call returns 0 (or a count) on success and a negative number on
 * failure: a negative errno where the kernel has a fitting one, otherwise one of
 * the library codes below, which all lie under -10000 so they never collide
 * with an errno.  gdx_strerror() names either kind.
 */

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the symbols libgdx exports; everything else is hidden. */
#define GDX_API __attribute__((visibility("default")))

enum gdx_status {
	GDX_OK = 0,
	GDX_E_BASE = -10000,
	GDX_ENODEVICE = -10001,	  /* no device of the kind asked for */
	GDX_ENOTDIRECT = -10002,  /* strict mode: the direct path is missing */
	GDX_ENOLIB = -10003,	  /* a vendor library could not be loaded */
	GDX_EDRIVER = -10004,	  /* the device driver refused a call */
	GDX_EPROTO = -10005,	  /* the peer broke the wire protocol */
	GDX_ENVME = -10006,	  /* NVMe failure without a status (else GDX_E_NVME below) */
	GDX_ECONFIG = -10007,	  /* bad configuration value or file */
	GDX_EBADPTR = -10008,	  /* pointer not backed by memory of the kind needed */
	GDX_EREMOTE = -10009,	  /* the peer refused a remote access (key or bounds) */
	GDX_EDISCONNECTED = -10010, /* the connection went away with work pending */
	GDX_E_LAST = -10011,
};

/*
 * An NVMe command that completed with an error status returns
 * GDX_E_NVME(status), status being SCT << 8 | SC (DNR and More left out);
 * gdx_nvme_status() gives the status back, 0 for any other code, and
 * gdx_strerror() names it as nvme-cli does: "NVMe status: LBA Out of Range:
 * The command references an LBA that exceeds the size of the namespace(0x80)".
 */
#define GDX_E_NVME_BASE (-20000)
#define GDX_E_NVME(status) (GDX_E_NVME_BASE - (int)((status) & 0x7ff))

static inline unsigned gdx_nvme_status(int err)
{
	return err < GDX_E_NVME_BASE && err >= GDX_E_NVME_BASE - 0x7ff ?
		       (unsigned)(GDX_E_NVME_BASE - err) : 0;
}

/* Text for a gdx return code: library codes and negative (or positive) errnos. */
GDX_API const char *gdx_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
