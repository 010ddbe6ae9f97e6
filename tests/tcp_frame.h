/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's frame header as a peer writes it by hand (tests and the
 * tcp fuzzer): 48 bytes, little-endian, as src/xport/tcp/tcp_int.h's struct hdr.
 */
#ifndef GDX_TESTS_TCP_FRAME_H
#define GDX_TESTS_TCP_FRAME_H

#include <stdint.h>

#define TCP_HELLO_MAGIC 0x54584447u	/* "GDXT", in imm of the hello (type 1, id: version 1) */

enum { TF_HELLO = 1, TF_SEND, TF_WRITE, TF_READ, TF_RESP, TF_READ_RESP };

struct frame {
	uint8_t type, flags;
	uint16_t rsvd;
	int32_t status;
	uint32_t imm, rsvd2;
	uint64_t id, raddr, key, len;
};
_Static_assert(sizeof(struct frame) == 48, "the frame header is 48 bytes on the wire");

#endif
