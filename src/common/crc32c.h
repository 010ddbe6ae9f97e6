/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_CRC32C_H
#define GDX_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * CRC32C (Castagnoli) as NVMe/TCP digests use it: initial value ~0, final xor
 * ~0.  gdx_crc32c_update continues a running crc (pass the previous result).
 */
uint32_t gdx_crc32c(const void *buf, size_t len);
uint32_t gdx_crc32c_update(uint32_t crc, const void *buf, size_t len);

#endif
