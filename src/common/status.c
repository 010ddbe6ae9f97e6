/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include <gdx/gdx.h>

#include "gdx_build_config.h"
#include "nvmf/proto/nvme.h"

static const char *const lib_msgs[] = {
	[-(GDX_ENODEVICE - GDX_E_BASE)] = "no such device",
	[-(GDX_ENOTDIRECT - GDX_E_BASE)] = "direct path unavailable and fallback forbidden (strict mode)",
	[-(GDX_ENOLIB - GDX_E_BASE)] = "required vendor library not found",
	[-(GDX_EDRIVER - GDX_E_BASE)] = "device driver call failed",
	[-(GDX_EPROTO - GDX_E_BASE)] = "peer violated the wire protocol",
	[-(GDX_ENVME - GDX_E_BASE)] = "NVMe command failed",
	[-(GDX_ECONFIG - GDX_E_BASE)] = "invalid configuration",
	[-(GDX_EBADPTR - GDX_E_BASE)] = "pointer is not memory of the required kind",
	[-(GDX_EREMOTE - GDX_E_BASE)] = "remote access refused (bad key or out of bounds)",
	[-(GDX_EDISCONNECTED - GDX_E_BASE)] = "connection lost",
};

/* "NVMe status: NAME: SENTENCE(0xSTATUS)" in one of a few per-thread buffers. */
static const char *nvme_strerror(unsigned status)
{
	static __thread char buf[4][320];
	static __thread unsigned next;
	const char *what = gdx_nvme_status_what((uint16_t)status);
	char *b = buf[next++ % 4];

	snprintf(b, sizeof(buf[0]), "NVMe status: %s%s%s(%#x)", gdx_nvme_status_str((uint16_t)status),
		 what ? ": " : "", what ? what : "", status);
	return b;
}

GDX_API const char *gdx_strerror(int err)
{
	if (err == 0)
		return "success";
	if (gdx_nvme_status(err))
		return nvme_strerror(gdx_nvme_status(err));
	if (err < GDX_E_BASE && err > GDX_E_LAST) {
		const char *m = lib_msgs[-(err - GDX_E_BASE)];

		return m ? m : "unknown gdx error";
	}
	if (err <= GDX_E_BASE)
		return "unknown gdx error";
	/* strerror's table is static text for every errno glibc knows. */
	return strerror(err < 0 ? -err : err);
}

GDX_API const char *gdx_version(void)
{
	return GDX_VERSION;
}
