/* SPDX-License-Identifier: MIT */
/*
 * DH-HMAC-CHAP messages (NVMe Base 2.0, 8.13.5.x), little-endian on the wire.
 * Every message starts with AUTH-Type, AUTH-Id, two reserved bytes and the
 * transaction identifier.  A receive buffer may be longer than the message
 * it holds (Authentication Receive transfers AL bytes), so a message is
 * accepted when it fits in len, and its own fields say how long it is.
 */
#include <errno.h>
#include <string.h>

#include "nvmf/auth/auth.h"

#define HDR 16		/* Challenge, Reply, Success1, Success2 */
#define NEG_HDR 8
#define NEG_DESC 64
#define FAIL_LEN 8

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static bool hl_ok(uint8_t hl)
{
	return hl == 32 || hl == 48 || hl == 64;
}

static int parse_negotiate(const uint8_t *b, size_t len, struct nvmf_auth_msg *m)
{
	unsigned napd = b[7];

	m->neg.sc_c = b[6];
	if (!napd || len < NEG_HDR + (size_t)napd * NEG_DESC)
		return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
	/* the first DH-HMAC-CHAP descriptor; others name protocols gdx does not speak */
	for (unsigned i = 0; i < napd; i++) {
		const uint8_t *d = b + NEG_HDR + i * NEG_DESC;

		if (d[0] != NVMF_AUTH_ID_DHCHAP)
			continue;
		if (d[2] > 30 || d[3] > 30)
			return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
		m->neg.nhash = d[2];
		m->neg.ndh = d[3];
		memcpy(m->neg.hashes, d + 4, d[2]);
		memcpy(m->neg.dhs, d + 4 + 30, d[3]);
		return 0;
	}
	return NVMF_AUTH_RCE_NOT_USABLE;
}

int nvmf_auth_msg_parse(const void *buf, size_t len, struct nvmf_auth_msg *m)
{
	const uint8_t *b = buf;

	memset(m, 0, sizeof(*m));
	if (len < FAIL_LEN)
		return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
	m->type = b[0];
	m->id = b[1];
	m->tid = get16(b + 4);
	if (m->type == NVMF_AUTH_COMMON) {
		switch (m->id) {
		case NVMF_AUTH_NEGOTIATE:
			return parse_negotiate(b, len, m);
		case NVMF_AUTH_FAILURE1:
		case NVMF_AUTH_FAILURE2:
			m->fail.rc = b[6];
			m->fail.rce = b[7];
			return 0;
		default:
			return NVMF_AUTH_RCE_INCORRECT_MESSAGE;
		}
	}
	if (m->type != NVMF_AUTH_DHCHAP)
		return NVMF_AUTH_RCE_INCORRECT_MESSAGE;
	if (len < HDR)
		return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
	switch (m->id) {
	case NVMF_AUTH_CHALLENGE:
		m->chal.hl = b[6];
		m->chal.hash = b[8];
		m->chal.dh = b[9];
		m->chal.dhvlen = get16(b + 10);
		m->chal.seq = get32(b + 12);
		if (m->chal.hl != nvmf_auth_hash_len(m->chal.hash) ||
		    len < HDR + (size_t)m->chal.hl + m->chal.dhvlen)
			return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
		m->chal.cval = b + HDR;
		m->chal.dhv = b + HDR + m->chal.hl;
		return 0;
	case NVMF_AUTH_REPLY:
		m->reply.hl = b[6];
		m->reply.cvalid = b[8];
		m->reply.dhvlen = get16(b + 10);
		m->reply.seq = get32(b + 12);
		if (!hl_ok(m->reply.hl) || m->reply.cvalid > 1 ||
		    len < HDR + 2 * (size_t)m->reply.hl + m->reply.dhvlen)
			return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
		m->reply.rval = b + HDR;
		m->reply.cval = b + HDR + m->reply.hl;
		m->reply.dhv = b + HDR + 2 * m->reply.hl;
		return 0;
	case NVMF_AUTH_SUCCESS1:
		m->succ1.hl = b[6];
		m->succ1.rvalid = b[8];
		if (!hl_ok(m->succ1.hl) || m->succ1.rvalid > 1 ||
		    (m->succ1.rvalid && len < HDR + (size_t)m->succ1.hl))
			return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
		m->succ1.rval = m->succ1.rvalid ? b + HDR : NULL;
		return 0;
	case NVMF_AUTH_SUCCESS2:
		return 0;
	default:
		return NVMF_AUTH_RCE_INCORRECT_MESSAGE;
	}
}

int nvmf_auth_msg_build(const struct nvmf_auth_msg *m, void *buf, size_t cap)
{
	uint8_t *b = buf;
	size_t len;

	switch (m->id) {
	case NVMF_AUTH_NEGOTIATE:
		len = NEG_HDR + NEG_DESC;
		break;
	case NVMF_AUTH_CHALLENGE:
		len = HDR + (size_t)m->chal.hl + m->chal.dhvlen;
		break;
	case NVMF_AUTH_REPLY:
		len = HDR + 2 * (size_t)m->reply.hl + m->reply.dhvlen;
		break;
	case NVMF_AUTH_SUCCESS1:
		len = HDR + (m->succ1.rvalid ? m->succ1.hl : 0);
		break;
	case NVMF_AUTH_SUCCESS2:
		len = HDR;
		break;
	case NVMF_AUTH_FAILURE1:
	case NVMF_AUTH_FAILURE2:
		len = FAIL_LEN;
		break;
	default:
		return -EINVAL;
	}
	if (len > cap)
		return -ENOSPC;
	memset(b, 0, len);
	b[0] = m->id == NVMF_AUTH_NEGOTIATE || m->id == NVMF_AUTH_FAILURE1 ||
			       m->id == NVMF_AUTH_FAILURE2 ?
		       NVMF_AUTH_COMMON :
		       NVMF_AUTH_DHCHAP;
	b[1] = m->id;
	put16(b + 4, m->tid);
	switch (m->id) {
	case NVMF_AUTH_NEGOTIATE:
		b[6] = m->neg.sc_c;
		b[7] = 1;
		b[NEG_HDR] = NVMF_AUTH_ID_DHCHAP;
		b[NEG_HDR + 2] = m->neg.nhash;
		b[NEG_HDR + 3] = m->neg.ndh;
		memcpy(b + NEG_HDR + 4, m->neg.hashes, m->neg.nhash);
		memcpy(b + NEG_HDR + 4 + 30, m->neg.dhs, m->neg.ndh);
		break;
	case NVMF_AUTH_CHALLENGE:
		b[6] = m->chal.hl;
		b[8] = m->chal.hash;
		b[9] = m->chal.dh;
		put16(b + 10, m->chal.dhvlen);
		put32(b + 12, m->chal.seq);
		memcpy(b + HDR, m->chal.cval, m->chal.hl);
		if (m->chal.dhvlen)
			memcpy(b + HDR + m->chal.hl, m->chal.dhv, m->chal.dhvlen);
		break;
	case NVMF_AUTH_REPLY:
		b[6] = m->reply.hl;
		b[8] = m->reply.cvalid;
		put16(b + 10, m->reply.dhvlen);
		put32(b + 12, m->reply.seq);
		memcpy(b + HDR, m->reply.rval, m->reply.hl);
		if (m->reply.cvalid)
			memcpy(b + HDR + m->reply.hl, m->reply.cval, m->reply.hl);
		if (m->reply.dhvlen)
			memcpy(b + HDR + 2 * m->reply.hl, m->reply.dhv, m->reply.dhvlen);
		break;
	case NVMF_AUTH_SUCCESS1:
		b[6] = m->succ1.hl;
		b[8] = m->succ1.rvalid;
		if (m->succ1.rvalid)
			memcpy(b + HDR, m->succ1.rval, m->succ1.hl);
		break;
	case NVMF_AUTH_FAILURE1:
	case NVMF_AUTH_FAILURE2:
		b[6] = m->fail.rc;
		b[7] = m->fail.rce;
		break;
	default:
		break;
	}
	return (int)len;
}
