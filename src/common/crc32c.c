/* SPDX-License-Identifier: MIT */
/*
 * CRC32C through ISA-L.  crc32_iscsi() neither inverts its seed nor its
 * result, so the ~0 pre- and post-conditioning of the NVMe/TCP (and iSCSI)
 * digest happens here; that also makes update() chain: the finished crc of one
 * piece, inverted back, is the raw register state the next piece continues from.
 */
#include <limits.h>

#include <isa-l/crc.h>

#include "common/crc32c.h"

uint32_t gdx_crc32c_update(uint32_t crc, const void *buf, size_t len)
{
	/* ISA-L reads the buffer only; its prototype predates const. */
	unsigned char *p = (unsigned char *)(uintptr_t)buf;
	uint32_t raw = ~crc;

	/* Its length is an int: feed larger buffers in pieces. */
	while (len) {
		int n = len > (size_t)(INT_MAX & ~4095) ? (INT_MAX & ~4095) : (int)len;

		raw = crc32_iscsi(p, n, raw);
		p += n;
		len -= (size_t)n;
	}
	return ~raw;
}

uint32_t gdx_crc32c(const void *buf, size_t len)
{
	return gdx_crc32c_update(0, buf, len);
}
