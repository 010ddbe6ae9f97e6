/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_AUTH_AUTH_H
#define GDX_NVMF_AUTH_AUTH_H

/*
 * NVMe in-band authentication, DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5): the
 * secrets, the crypto and the messages, shared by the target (core/auth.c)
 * and the host (host/auth.c).  The crypto is OpenSSL 3's; nothing here logs
 * a secret, and every buffer that held one is wiped before it is freed.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Authentication Send/Receive: SECP and SPSP of the DH-HMAC-CHAP protocol */
#define NVMF_AUTH_SECP 0xe9
#define NVMF_AUTH_SPSP0 0x01
#define NVMF_AUTH_SPSP1 0x01

/* Connect response DW0: the controller requires authentication (AUTHREQ) */
#define NVMF_AUTHREQ_ATR (1u << 17)
#define NVMF_AUTHREQ_ASCR (1u << 18)

enum { NVMF_AUTH_COMMON = 0x00, NVMF_AUTH_DHCHAP = 0x01 };	/* auth_type */

enum {	/* auth_id */
	NVMF_AUTH_NEGOTIATE = 0x00,
	NVMF_AUTH_CHALLENGE = 0x01,
	NVMF_AUTH_REPLY = 0x02,
	NVMF_AUTH_SUCCESS1 = 0x03,
	NVMF_AUTH_SUCCESS2 = 0x04,
	NVMF_AUTH_FAILURE2 = 0xf0,
	NVMF_AUTH_FAILURE1 = 0xf1,
};

/* Failure1/Failure2: reason code 01h (authentication failure), with an explanation */
#define NVMF_AUTH_RC_FAILED 0x01
enum {
	NVMF_AUTH_RCE_FAILED = 0x01,
	NVMF_AUTH_RCE_NOT_USABLE = 0x02,
	NVMF_AUTH_RCE_CONCAT_MISMATCH = 0x03,
	NVMF_AUTH_RCE_HASH_UNUSABLE = 0x04,
	NVMF_AUTH_RCE_DHGROUP_UNUSABLE = 0x05,
	NVMF_AUTH_RCE_INCORRECT_PAYLOAD = 0x06,
	NVMF_AUTH_RCE_INCORRECT_MESSAGE = 0x07,
};

#define NVMF_AUTH_ID_DHCHAP 0x01	/* protocol descriptor AUTHID */

enum { NVMF_AUTH_SHA256 = 1, NVMF_AUTH_SHA384 = 2, NVMF_AUTH_SHA512 = 3 };
enum { NVMF_AUTH_DH_NULL = 0, NVMF_AUTH_FFDHE2048 = 1, NVMF_AUTH_FFDHE3072 = 2,
       NVMF_AUTH_FFDHE4096 = 3, NVMF_AUTH_FFDHE6144 = 4, NVMF_AUTH_FFDHE8192 = 5 };
#define NVMF_AUTH_NHASH 3
#define NVMF_AUTH_NDH 6

#define NVMF_AUTH_HASH_MAX 64		/* SHA-512 */
#define NVMF_AUTH_DH_MAX 1024		/* ffdhe8192, bytes */
/* The largest message: a Reply with SHA-512 and ffdhe8192 (a Challenge is smaller). */
#define NVMF_AUTH_MSG_MAX (16 + 2 * NVMF_AUTH_HASH_MAX + NVMF_AUTH_DH_MAX)

/* ---- names ---------------------------------------------------------------- */

/* Digest bytes of a hash identifier, 0 for an unknown one. */
size_t nvmf_auth_hash_len(uint8_t hash);
/* "hmac(sha256)" ... as configfs writes them; NULL for an unknown identifier. */
const char *nvmf_auth_hash_name(uint8_t hash);
/* "null", "ffdhe2048" ...; NULL for an unknown identifier. */
const char *nvmf_auth_dh_name(uint8_t group);
/* Public value bytes of a group: 0 for null, -1 for an unknown one. */
int nvmf_auth_dh_len(uint8_t group);
/*
 * A comma-separated list of names ("hmac(sha384),sha512", "null,ffdhe2048")
 * into identifiers, in the order given: the count, or -EINVAL.
 */
int nvmf_auth_hash_list(const char *s, uint8_t *ids, unsigned max);
int nvmf_auth_dh_list(const char *s, uint8_t *ids, unsigned max);

/* ---- secrets ---------------------------------------------------------------- */

struct nvmf_auth_key {
	uint8_t hash;			/* transformation hash (the hh of DHHC-1:hh:), 0: none */
	uint8_t len;			/* 32, 48 or 64 */
	uint8_t key[NVMF_AUTH_HASH_MAX];
};

/*
 * "DHHC-1:hh:<base64 of key || CRC-32(key), little-endian>:" as `nvme
 * gen-dhchap-key` writes it; trailing white space (a file's newline) is
 * ignored.  0 or -EINVAL (nothing of the secret kept).
 */
int nvmf_auth_key_parse(const char *s, struct nvmf_auth_key *k);
void nvmf_auth_key_wipe(struct nvmf_auth_key *k);

/*
 * The transformed key (8.13.5.7): the key itself for hh 00, else
 * HMAC-hh(key, nqn || "NVMe-over-Fabrics").  out holds NVMF_AUTH_HASH_MAX;
 * returns its length, or a negative errno.
 */
int nvmf_auth_transform(const struct nvmf_auth_key *k, const char *nqn, uint8_t *out);

/* ---- the exchange --------------------------------------------------------------- */

/*
 * Augmented challenge: HMAC(H(session key), challenge) where a DH exchange
 * took place (skey_len > 0), else the challenge unchanged.  hl bytes to out.
 */
int nvmf_auth_augment(uint8_t hash, const uint8_t *skey, size_t skey_len,
		      const uint8_t *chal, uint8_t *out);

/*
 * The response value: HMAC(tkey, chal || seq (le32) || tid (le16) || sc_c ||
 * "HostHost" || hostnqn || 00h || subnqn) for the host's response, or with
 * "Controller" || subnqn || 00h || hostnqn for the controller's.  chal is the
 * (augmented) challenge, hl bytes; so is out.
 */
int nvmf_auth_response(uint8_t hash, const uint8_t *tkey, size_t tkey_len, const uint8_t *chal,
		       uint32_t seq, uint16_t tid, uint8_t sc_c, bool ctrl, const char *hostnqn,
		       const char *subnqn, uint8_t *out);

/* Constant-time comparison: true if equal. */
bool nvmf_auth_equal(const void *a, const void *b, size_t n);
/* Wipes n bytes (the compiler may not drop it). */
void nvmf_auth_wipe(void *p, size_t n);
/* Cryptographically random bytes: 0 or -EIO. */
int nvmf_auth_random(void *p, size_t n);

/* An FFDHE key pair of one exchange. */
struct nvmf_auth_dh;
int nvmf_auth_dh_new(uint8_t group, struct nvmf_auth_dh **out);
/* Our public value, big-endian, padded to the group's size (nvmf_auth_dh_len). */
int nvmf_auth_dh_public(struct nvmf_auth_dh *dh, uint8_t *out);
/*
 * The shared secret with the peer's public value (group size, big-endian,
 * checked to be in 2..p-2): the session key, padded to the group's size.
 */
int nvmf_auth_dh_derive(struct nvmf_auth_dh *dh, const uint8_t *peer, size_t peer_len,
			uint8_t *skey);
void nvmf_auth_dh_free(struct nvmf_auth_dh *dh);

/* ---- messages --------------------------------------------------------------------- */

/*
 * One decoded message.  The pointers point into the buffer it was parsed
 * from; for building, into the caller's values.
 */
struct nvmf_auth_msg {
	uint8_t type;			/* NVMF_AUTH_COMMON or NVMF_AUTH_DHCHAP */
	uint8_t id;			/* NVMF_AUTH_NEGOTIATE ... */
	uint16_t tid;
	union {
		struct {		/* Negotiate: the DH-HMAC-CHAP descriptor's lists */
			uint8_t sc_c;
			uint8_t nhash, ndh;
			uint8_t hashes[30];
			uint8_t dhs[30];
		} neg;
		struct {		/* Challenge */
			uint8_t hl, hash, dh;
			uint32_t seq;
			const uint8_t *cval;
			const uint8_t *dhv;
			uint16_t dhvlen;
		} chal;
		struct {		/* Reply */
			uint8_t hl, cvalid;
			uint32_t seq;
			const uint8_t *rval;
			const uint8_t *cval;	/* hl bytes, meaningful when cvalid */
			const uint8_t *dhv;
			uint16_t dhvlen;
		} reply;
		struct {		/* Success1 */
			uint8_t hl, rvalid;
			const uint8_t *rval;
		} succ1;
		struct {		/* Failure1 and Failure2 */
			uint8_t rc, rce;
		} fail;
	};
};

/*
 * Decodes and checks the lengths of a message of len bytes: 0, or the
 * reason code explanation to answer it with (INCORRECT_PAYLOAD,
 * INCORRECT_MESSAGE).  Values that need context (the hash agreed on, the
 * transaction) are the caller's to check.
 */
int nvmf_auth_msg_parse(const void *buf, size_t len, struct nvmf_auth_msg *m);
/* Encodes m into buf (cap bytes): its length, or -ENOSPC, or -EINVAL for an unknown id. */
int nvmf_auth_msg_build(const struct nvmf_auth_msg *m, void *buf, size_t cap);

#endif
