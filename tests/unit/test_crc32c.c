/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <string.h>

#include "test.h"

#include "common/crc32c.h"

/* Bit-at-a-time CRC32C, the reflected polynomial 0x82F63B78: the reference. */
static uint32_t ref_crc32c(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = 0xffffffffu;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

static void check_value(void **state)
{
	(void)state;
	assert_int_equal(gdx_crc32c("123456789", 9), 0xe3069283u);
	assert_int_equal(gdx_crc32c("", 0), 0);
	assert_int_equal(gdx_crc32c(NULL, 0), 0);
	assert_int_equal(gdx_crc32c("a", 1), 0xc1d04330u);
}

/* RFC 3720 B.4: the iSCSI test vectors, which use the same digest as NVMe/TCP. */
static void rfc3720_vectors(void **state)
{
	static const unsigned char read_pdu[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	unsigned char b[32];

	(void)state;
	memset(b, 0, sizeof(b));
	assert_int_equal(gdx_crc32c(b, sizeof(b)), 0x8a9136aau);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(gdx_crc32c(b, sizeof(b)), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	assert_int_equal(gdx_crc32c(b, sizeof(b)), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	assert_int_equal(gdx_crc32c(b, sizeof(b)), 0x113fdb5cu);
	assert_int_equal(gdx_crc32c(read_pdu, sizeof(read_pdu)), 0xd9963a56u);
}

/*
 * HDGST of an NVMe/TCP CapsuleCmd header (CH + SQE, HLEN 72) with header and
 * data digests on: a 1 KiB Write, cid 0x1234, nsid 1, in-capsule SGL data
 * block.  The digest goes on the wire little-endian right after the header.
 */
static void nvme_tcp_header_digest(void **state)
{
	static const unsigned char hdr[72] = {
		/* CH: CapsuleCmd, flags HDGSTF|DDGSTF, HLEN 72, PDO 76, PLEN 1104 */
		0x04, 0x03, 0x48, 0x4c, 0x50, 0x04, 0x00, 0x00,
		/* SQE: opc 0x01 (Write), PSDT SGL, cid 0x1234, nsid 1 */
		0x01, 0x40, 0x34, 0x12, 0x01, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* cdw2-3 */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,	/* mptr */
		/* dptr: SGL data block, offset 0, length 1024, type 0x01 (offset) */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
		/* cdw10-15: slba 0, nlb 1 (two 512-byte blocks) */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	uint32_t d = gdx_crc32c(hdr, sizeof(hdr));
	unsigned char wire[4] = { (unsigned char)d, (unsigned char)(d >> 8),
				  (unsigned char)(d >> 16), (unsigned char)(d >> 24) };
	static const unsigned char want[4] = { 0x4b, 0xd5, 0xbb, 0xe6 };

	(void)state;
	assert_int_equal(d, 0xe6bbd54bu);
	assert_memory_equal(wire, want, 4);
	/* A receiver checks it by recomputing; a flipped bit must not pass. */
	{
		unsigned char bad[72];

		memcpy(bad, hdr, sizeof(bad));
		bad[11] ^= 0x10;
		assert_int_not_equal(gdx_crc32c(bad, sizeof(bad)), d);
	}
}

/* update() chains across any split, and matches the reference on odd sizes/alignments. */
static void update_chains(void **state)
{
	static unsigned char buf[70000];
	uint64_t s = 42;

	(void)state;
	t_fill(buf, sizeof(buf), 7);
	for (int iter = 0; iter < 200; iter++) {
		size_t off = t_rand(&s) % 64, len = t_rand(&s) % (sizeof(buf) - 64);
		size_t cut = len ? t_rand(&s) % len : 0;
		uint32_t whole = gdx_crc32c(buf + off, len);
		uint32_t c = gdx_crc32c_update(0, buf + off, cut);

		c = gdx_crc32c_update(c, buf + off + cut, len - cut);
		assert_int_equal(c, whole);
		if (iter < 40)
			assert_int_equal(whole, ref_crc32c(buf + off, len));
	}
	/* Byte by byte as well. */
	{
		uint32_t c = 0;

		for (int i = 0; i < 9; i++)
			c = gdx_crc32c_update(c, "123456789" + i, 1);
		assert_int_equal(c, 0xe3069283u);
	}
	/* An empty update leaves the crc alone. */
	assert_int_equal(gdx_crc32c_update(0xdeadbeefu, buf, 0), 0xdeadbeefu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(check_value),
		cmocka_unit_test(rfc3720_vectors),
		cmocka_unit_test(nvme_tcp_header_digest),
		cmocka_unit_test(update_chains),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
