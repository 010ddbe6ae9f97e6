/* SPDX-License-Identifier: MIT */
/*
 * DH-HMAC-CHAP crypto over OpenSSL 3: secrets, the key transformation, the
 * augmented challenge, the response values and the FFDHE exchange.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <isa-l/crc.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>

#include "common/util.h"
#include "nvmf/auth/auth.h"

static const struct {
	const char *name;	/* configfs's */
	const char *md;		/* OpenSSL's */
	size_t len;
} hashes[] = {
	[NVMF_AUTH_SHA256] = { "hmac(sha256)", "SHA256", 32 },
	[NVMF_AUTH_SHA384] = { "hmac(sha384)", "SHA384", 48 },
	[NVMF_AUTH_SHA512] = { "hmac(sha512)", "SHA512", 64 },
};

static const struct {
	const char *name;	/* configfs's, and OpenSSL's group name */
	int len;
} groups[] = {
	[NVMF_AUTH_DH_NULL] = { "null", 0 },
	[NVMF_AUTH_FFDHE2048] = { "ffdhe2048", 256 },
	[NVMF_AUTH_FFDHE3072] = { "ffdhe3072", 384 },
	[NVMF_AUTH_FFDHE4096] = { "ffdhe4096", 512 },
	[NVMF_AUTH_FFDHE6144] = { "ffdhe6144", 768 },
	[NVMF_AUTH_FFDHE8192] = { "ffdhe8192", 1024 },
};

size_t nvmf_auth_hash_len(uint8_t hash)
{
	return hash && hash < GDX_ARRAY_SIZE(hashes) ? hashes[hash].len : 0;
}

const char *nvmf_auth_hash_name(uint8_t hash)
{
	return nvmf_auth_hash_len(hash) ? hashes[hash].name : NULL;
}

const char *nvmf_auth_dh_name(uint8_t group)
{
	return group < GDX_ARRAY_SIZE(groups) ? groups[group].name : NULL;
}

int nvmf_auth_dh_len(uint8_t group)
{
	return group < GDX_ARRAY_SIZE(groups) ? groups[group].len : -1;
}

/* A comma-separated list of hash or group names into identifiers, each once. */
static int list_parse(const char *s, uint8_t *ids, unsigned max, bool hash)
{
	unsigned n = 0;

	for (;;) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		int id = -1;

		for (unsigned i = hash ? 1 : 0; i < (hash ? GDX_ARRAY_SIZE(hashes) :
						      GDX_ARRAY_SIZE(groups)); i++) {
			const char *name = hash ? hashes[i].name : groups[i].name;

			/* "hmac(sha256)" or just "sha256" */
			if ((strlen(name) == len && !strncmp(name, s, len)) ||
			    (hash && strlen(name) == len + 6 && !strncmp(name + 5, s, len)))
				id = (int)i;
		}
		if (id < 0 || n == max || memchr(ids, id, n))
			return -EINVAL;
		ids[n++] = (uint8_t)id;
		if (!end)
			break;
		s = end + 1;
	}
	return (int)n;
}

int nvmf_auth_hash_list(const char *s, uint8_t *ids, unsigned max)
{
	return list_parse(s, ids, max, true);
}

int nvmf_auth_dh_list(const char *s, uint8_t *ids, unsigned max)
{
	return list_parse(s, ids, max, false);
}

/* ---- primitives ---------------------------------------------------------------- */

bool nvmf_auth_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

void nvmf_auth_wipe(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}

int nvmf_auth_random(void *p, size_t n)
{
	return RAND_bytes(p, (int)n) == 1 ? 0 : -EIO;
}

static int digest(uint8_t hash, const uint8_t *data, size_t len, uint8_t *out)
{
	EVP_MD *md = EVP_MD_fetch(NULL, hashes[hash].md, NULL);
	unsigned outl = 0;
	int ok = md && EVP_Digest(data, len, out, &outl, md, NULL);

	EVP_MD_free(md);
	return ok ? (int)outl : -EIO;
}

/* HMAC-hash over the pieces in v: the digest's length, or -EIO. */
static int hmac(uint8_t hash, const uint8_t *key, size_t klen, const struct iovec *v, unsigned n,
		uint8_t *out)
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)hashes[hash].md, 0),
		OSSL_PARAM_construct_end(),
	};
	size_t outl = 0;
	int ok = ctx && EVP_MAC_init(ctx, key, klen, p);

	for (unsigned i = 0; ok && i < n; i++)
		ok = EVP_MAC_update(ctx, v[i].iov_base, v[i].iov_len);
	ok = ok && EVP_MAC_final(ctx, out, &outl, NVMF_AUTH_HASH_MAX);
	/* the context held the key: OpenSSL cleanses it on free */
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return ok ? (int)outl : -EIO;
}

/* ---- secrets --------------------------------------------------------------------- */

void nvmf_auth_key_wipe(struct nvmf_auth_key *k)
{
	OPENSSL_cleanse(k, sizeof(*k));
}

int nvmf_auth_key_parse(const char *s, struct nvmf_auth_key *k)
{
	/* base64 of 68 bytes (a 64-byte key and its CRC): 92 characters */
	uint8_t raw[72];
	size_t n = strlen(s), blen;
	int len, ret = -EINVAL;
	uint32_t crc;

	memset(k, 0, sizeof(*k));
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	if (n < 11 || strncmp(s, "DHHC-1:", 7) || s[7] != '0' || s[8] < '0' || s[8] > '3' ||
	    s[9] != ':' || s[n - 1] != ':')
		return -EINVAL;
	blen = n - 11;
	if (blen % 4 || blen > 92)
		return -EINVAL;
	len = EVP_DecodeBlock(raw, (const unsigned char *)s + 10, (int)blen);
	/* EVP_DecodeBlock counts the bytes the '=' padding stands for */
	for (size_t i = 0; len > 0 && i < 2 && s[10 + blen - 1 - i] == '='; i++)
		len--;
	if (len != 36 && len != 52 && len != 68)
		goto out;
	len -= 4;
	crc = (uint32_t)raw[len] | (uint32_t)raw[len + 1] << 8 | (uint32_t)raw[len + 2] << 16 |
	      (uint32_t)raw[len + 3] << 24;
	if (crc32_gzip_refl(0, raw, (uint64_t)len) != crc)
		goto out;
	k->hash = (uint8_t)(s[8] - '0');
	k->len = (uint8_t)len;
	memcpy(k->key, raw, (size_t)len);
	ret = 0;
out:
	OPENSSL_cleanse(raw, sizeof(raw));
	return ret;
}

int nvmf_auth_transform(const struct nvmf_auth_key *k, const char *nqn, uint8_t *out)
{
	static const char label[] = "NVMe-over-Fabrics";
	struct iovec v[] = {
		{ (void *)nqn, strlen(nqn) },
		{ (void *)label, sizeof(label) - 1 },
	};

	if (!k->hash) {
		memcpy(out, k->key, k->len);
		return k->len;
	}
	if (!nvmf_auth_hash_len(k->hash))
		return -EINVAL;
	return hmac(k->hash, k->key, k->len, v, GDX_ARRAY_SIZE(v), out);
}

/* ---- the exchange ------------------------------------------------------------------ */

int nvmf_auth_augment(uint8_t hash, const uint8_t *skey, size_t skey_len, const uint8_t *chal,
		      uint8_t *out)
{
	size_t hl = nvmf_auth_hash_len(hash);
	uint8_t hkey[NVMF_AUTH_HASH_MAX];
	struct iovec v = { (void *)chal, hl };
	int ret;

	if (!hl)
		return -EINVAL;
	if (!skey_len) {
		memmove(out, chal, hl);
		return (int)hl;
	}
	ret = digest(hash, skey, skey_len, hkey);
	if (ret > 0)
		ret = hmac(hash, hkey, hl, &v, 1, out);
	OPENSSL_cleanse(hkey, sizeof(hkey));
	return ret;
}

int nvmf_auth_response(uint8_t hash, const uint8_t *tkey, size_t tkey_len, const uint8_t *chal,
		       uint32_t seq, uint16_t tid, uint8_t sc_c, bool ctrl, const char *hostnqn,
		       const char *subnqn, uint8_t *out)
{
	static const uint8_t zero;
	uint8_t s[4] = { (uint8_t)seq, (uint8_t)(seq >> 8), (uint8_t)(seq >> 16),
			 (uint8_t)(seq >> 24) };
	uint8_t t[2] = { (uint8_t)tid, (uint8_t)(tid >> 8) };
	const char *first = ctrl ? subnqn : hostnqn, *second = ctrl ? hostnqn : subnqn;
	struct iovec v[] = {
		{ (void *)chal, nvmf_auth_hash_len(hash) },
		{ s, sizeof(s) },
		{ t, sizeof(t) },
		{ &sc_c, 1 },
		{ (void *)(ctrl ? "Controller" : "HostHost"), ctrl ? 10 : 8 },
		{ (void *)first, strlen(first) },
		{ (void *)&zero, 1 },
		{ (void *)second, strlen(second) },
	};

	if (!v[0].iov_len)
		return -EINVAL;
	return hmac(hash, tkey, tkey_len, v, GDX_ARRAY_SIZE(v), out);
}

/* ---- FFDHE --------------------------------------------------------------------------- */

struct nvmf_auth_dh {
	EVP_PKEY *key;
	uint8_t group;
};

int nvmf_auth_dh_new(uint8_t group, struct nvmf_auth_dh **out)
{
	struct nvmf_auth_dh *dh;
	EVP_PKEY_CTX *pc;
	OSSL_PARAM p[2];

	if (nvmf_auth_dh_len(group) <= 0)
		return -EINVAL;
	dh = calloc(1, sizeof(*dh));
	if (!dh)
		return -ENOMEM;
	dh->group = group;
	p[0] = OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
						(char *)groups[group].name, 0);
	p[1] = OSSL_PARAM_construct_end();
	pc = EVP_PKEY_CTX_new_from_name(NULL, "DH", NULL);
	if (!pc || EVP_PKEY_keygen_init(pc) <= 0 || EVP_PKEY_CTX_set_params(pc, p) <= 0 ||
	    EVP_PKEY_generate(pc, &dh->key) <= 0) {
		EVP_PKEY_CTX_free(pc);
		free(dh);
		return -EIO;
	}
	EVP_PKEY_CTX_free(pc);
	*out = dh;
	return 0;
}

int nvmf_auth_dh_public(struct nvmf_auth_dh *dh, uint8_t *out)
{
	BIGNUM *pub = NULL;
	int len = groups[dh->group].len, ret = -EIO;

	if (EVP_PKEY_get_bn_param(dh->key, OSSL_PKEY_PARAM_PUB_KEY, &pub) &&
	    BN_bn2binpad(pub, out, len) == len)
		ret = len;
	BN_free(pub);
	return ret;
}

int nvmf_auth_dh_derive(struct nvmf_auth_dh *dh, const uint8_t *peer, size_t peer_len,
			uint8_t *skey)
{
	size_t len = (size_t)groups[dh->group].len, got = len;
	EVP_PKEY_CTX *fc = NULL, *dc = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *p = NULL;
	EVP_PKEY *pk = NULL;
	BIGNUM *pub = NULL;
	int ret = -EIO;

	if (peer_len != len)
		return -EINVAL;
	pub = BN_bin2bn(peer, (int)peer_len, NULL);
	bld = OSSL_PARAM_BLD_new();
	if (!pub || !bld ||
	    !OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME,
					     groups[dh->group].name, 0) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PUB_KEY, pub) ||
	    !(p = OSSL_PARAM_BLD_to_param(bld)))
		goto out;
	fc = EVP_PKEY_CTX_new_from_name(NULL, "DH", NULL);
	if (!fc || EVP_PKEY_fromdata_init(fc) <= 0 ||
	    EVP_PKEY_fromdata(fc, &pk, EVP_PKEY_PUBLIC_KEY, p) <= 0)
		goto out;
	dc = EVP_PKEY_CTX_new_from_pkey(NULL, dh->key, NULL);
	/*
	 * set_peer checks the peer's value (2 <= y <= p-2, and y^q = 1 for the
	 * safe-prime groups): 1 or p-1 would make the shared secret known.
	 * Padded: the session key is the full group size, leading zeros too.
	 */
	if (!dc || EVP_PKEY_derive_init(dc) <= 0 || EVP_PKEY_CTX_set_dh_pad(dc, 1) <= 0 ||
	    EVP_PKEY_derive_set_peer_ex(dc, pk, 1) <= 0) {
		ret = -EINVAL;
		goto out;
	}
	if (EVP_PKEY_derive(dc, skey, &got) > 0 && got == len)
		ret = (int)len;
out:
	EVP_PKEY_CTX_free(dc);
	EVP_PKEY_CTX_free(fc);
	EVP_PKEY_free(pk);
	OSSL_PARAM_free(p);
	OSSL_PARAM_BLD_free(bld);
	BN_free(pub);
	return ret;
}

void nvmf_auth_dh_free(struct nvmf_auth_dh *dh)
{
	if (!dh)
		return;
	/* OpenSSL clears the private key as it frees it */
	EVP_PKEY_free(dh->key);
	free(dh);
}
