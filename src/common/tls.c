/* SPDX-License-Identifier: MIT */
/* TLS 1.3 PSK handshake handed to kTLS, and the NVMe/TCP PSKs (tls.h says how). */
#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <linux/tls.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include "common/config.h"
#include "common/log.h"
#include "common/tls.h"
#include "common/util.h"

#define KEY_PREFIX "NVMeTLSkey-1:"
#define NQN_MAX 256
#define DIGEST_B64_MAX 65	/* base64 of 48 bytes, and its NUL */

void gdx_tls_wipe(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}

static const EVP_MD *hash_md(int hash)
{
	return hash == 1 ? EVP_sha256() : hash == 2 ? EVP_sha384() : NULL;
}

static size_t hash_len(int hash)
{
	return hash == 1 ? 32 : hash == 2 ? 48 : 0;
}

/* ---- configured PSKs ------------------------------------------------------ */

int gdx_tls_key_parse(const char *s, struct gdx_tls_key *k)
{
	size_t n = strlen(s), b64, pad = 0;
	uint8_t raw[64 + 4];
	int hmac, dec;
	uint32_t crc;

	memset(k, 0, sizeof(*k));
	if (n < sizeof(KEY_PREFIX) + 3 || strncmp(s, KEY_PREFIX, sizeof(KEY_PREFIX) - 1))
		return -EINVAL;
	s += sizeof(KEY_PREFIX) - 1;
	if (s[0] != '0' || s[1] < '0' || s[1] > '2' || s[2] != ':')
		return -EINVAL;
	hmac = s[1] - '0';
	s += 3;
	b64 = strlen(s) - 1;
	/* 32 or 48 bytes and a CRC-32: 48 or 72 base64 characters, then ':' */
	if ((b64 != 48 && b64 != 72) || s[b64] != ':')
		return -EINVAL;
	dec = EVP_DecodeBlock(raw, (const unsigned char *)s, (int)b64);
	if (dec < 0)
		return -EINVAL;
	while (pad < 2 && s[b64 - 1 - pad] == '=')
		pad++;
	dec -= (int)pad;
	if ((dec != 36 && dec != 52) || (hmac == 1 && dec != 36) || (hmac == 2 && dec != 52)) {
		gdx_tls_wipe(raw, sizeof(raw));
		return -EINVAL;
	}
	k->hmac = (uint8_t)hmac;
	k->len = (uint8_t)(dec - 4);
	memcpy(k->key, raw, k->len);
	crc = crc32_gzip_refl(0, raw, k->len);
	if (crc != ((uint32_t)raw[k->len] | (uint32_t)raw[k->len + 1] << 8 |
		    (uint32_t)raw[k->len + 2] << 16 | (uint32_t)raw[k->len + 3] << 24)) {
		gdx_tls_wipe(raw, sizeof(raw));
		gdx_tls_wipe(k, sizeof(*k));
		return -EBADMSG;
	}
	gdx_tls_wipe(raw, sizeof(raw));
	return 0;
}

int gdx_tls_key_load(const char *path, struct gdx_tls_key *k)
{
	char buf[128];
	size_t n;
	int ret;
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	ret = ferror(f) ? -EIO : !feof(f) ? -EINVAL : 0;
	fclose(f);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r' ||
		     buf[n - 1] == '\t'))
		n--;
	buf[n] = 0;
	if (!ret)
		ret = gdx_tls_key_parse(buf, k);
	gdx_tls_wipe(buf, sizeof(buf));
	return ret;
}

int gdx_tls_key_hash(const struct gdx_tls_key *k)
{
	return k->hmac ? k->hmac : k->len == 48 ? 2 : 1;
}

/* ---- derivations ----------------------------------------------------------- */

/*
 * HKDF-Extract(0, ikm) then HKDF-Expand with libnvme's info: the length as
 * two bytes little-endian, "tls13 ", the label, then the context pieces.
 */
static int hkdf_nvme(int hash, const uint8_t *ikm, size_t ikm_len, const char *label,
		     const char *ctx1, const char *ctx2, uint8_t *out, size_t len)
{
	char info[2 + 6 + 16 + 2 * GDX_TLS_IDENTITY_MAX];
	size_t n = 0;
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_HKDF, NULL);
	EVP_KDF_CTX *kc = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM p[4];
	int ok;

	EVP_KDF_free(kdf);
	if (!kc)
		return -ENOMEM;
	info[n++] = (char)(len & 0xff);
	info[n++] = (char)(len >> 8);
	n += (size_t)snprintf(info + n, sizeof(info) - n, "tls13 %s%s%s", label, ctx1,
			      ctx2 ? ctx2 : "");
	p[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
						(char *)EVP_MD_get0_name(hash_md(hash)), 0);
	p[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_len);
	p[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
	p[3] = OSSL_PARAM_construct_end();
	ok = n < sizeof(info) && EVP_KDF_derive(kc, out, len, p) == 1;
	EVP_KDF_CTX_free(kc);
	return ok ? 0 : -EIO;
}

int gdx_tls_retained(const struct gdx_tls_key *k, const char *hostnqn, uint8_t *out)
{
	if (!k->hmac) {
		memcpy(out, k->key, k->len);
		return 0;
	}
	return hkdf_nvme(k->hmac, k->key, k->len, "HostNQN", hostnqn, NULL, out, k->len);
}

/* base64(HMAC(retained, "<hostnqn> <subnqn> NVMe-over-Fabrics")): identity v1's digest */
static int psk_digest(int hash, const uint8_t *retained, size_t len, const char *hostnqn,
		      const char *subnqn, char *out)
{
	char msg[2 * NQN_MAX + 24];
	uint8_t mac[EVP_MAX_MD_SIZE];
	unsigned mlen = 0;
	int n = snprintf(msg, sizeof(msg), "%s %s NVMe-over-Fabrics", hostnqn, subnqn);

	if (n < 0 || (size_t)n >= sizeof(msg) ||
	    !HMAC(hash_md(hash), retained, (int)len, (const uint8_t *)msg, (size_t)n, mac, &mlen))
		return -EINVAL;
	EVP_EncodeBlock((unsigned char *)out, mac, (int)mlen);
	gdx_tls_wipe(mac, sizeof(mac));
	return 0;
}

/* The identity and TLS PSK from a retained PSK. */
static int nvme_psk(int hash, const uint8_t *retained, size_t len, int version,
		    const char *hostnqn, const char *subnqn, struct gdx_tls_psk *out)
{
	char digest[DIGEST_B64_MAX], hh[8];
	int n, ret;

	snprintf(hh, sizeof(hh), "%02d ", hash);
	if (version == 0) {
		n = snprintf(out->identity, sizeof(out->identity), "NVMe0R%02d %s %s", hash,
			     hostnqn, subnqn);
	} else {
		ret = psk_digest(hash, retained, len, hostnqn, subnqn, digest);
		if (ret)
			return ret;
		n = snprintf(out->identity, sizeof(out->identity), "NVMe1R%02d %s %s %s", hash,
			     hostnqn, subnqn, digest);
	}
	if (n < 0 || (size_t)n >= sizeof(out->identity))
		return -EINVAL;
	out->hash = (uint8_t)hash;
	out->len = (uint8_t)len;
	return hkdf_nvme(hash, retained, len, "nvme-tls-psk", version ? hh : out->identity,
			 version ? digest : NULL, out->key, len);
}

int gdx_tls_nvme_psk(const struct gdx_tls_key *k, int version, const char *hostnqn,
		     const char *subnqn, struct gdx_tls_psk *out)
{
	uint8_t retained[GDX_TLS_KEY_MAX];
	int ret;

	if ((version != 0 && version != 1) || strlen(hostnqn) >= NQN_MAX ||
	    strlen(subnqn) >= NQN_MAX)
		return -EINVAL;
	ret = gdx_tls_retained(k, hostnqn, retained);
	if (!ret)
		ret = nvme_psk(gdx_tls_key_hash(k), retained, k->len, version, hostnqn, subnqn, out);
	gdx_tls_wipe(retained, sizeof(retained));
	return ret;
}

int gdx_tls_psk_derive(const struct gdx_tls_key *k, const char *label, const char *identity,
		       struct gdx_tls_psk *out)
{
	size_t n = strlen(identity);

	if (!n || n >= sizeof(out->identity) || strlen(label) > 16)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (identity[i] < 0x20 || identity[i] > 0x7e)
			return -EINVAL;
	memcpy(out->identity, identity, n + 1);
	out->hash = (uint8_t)gdx_tls_key_hash(k);
	out->len = k->len;
	return hkdf_nvme(out->hash, k->key, k->len, label, identity, NULL, out->key, out->len);
}

/* Copies the next space-delimited word of *s into out (n bytes); false if none or too long. */
static bool word(const char **s, char *out, size_t n)
{
	size_t len = strcspn(*s, " ");

	if (!len || len >= n)
		return false;
	memcpy(out, *s, len);
	out[len] = 0;
	*s += len;
	if (**s == ' ')
		(*s)++;
	return true;
}

int gdx_tls_nvme_identity(const char *identity, int *hash, char *hostnqn, char *subnqn)
{
	char digest[DIGEST_B64_MAX];
	const char *s = identity + 9;
	int version;

	/* "NVMe<v>R<hh> ": retained PSKs only; gdx keeps no generated (DH-HMAC-CHAP) PSK */
	if (strncmp(identity, "NVMe", 4) || (identity[4] != '0' && identity[4] != '1') ||
	    identity[5] != 'R' || identity[6] != '0' || (identity[7] != '1' && identity[7] != '2') ||
	    identity[8] != ' ')
		return -ENOKEY;
	version = identity[4] - '0';
	if (!word(&s, hostnqn, NQN_MAX) || !word(&s, subnqn, NQN_MAX) ||
	    (version == 1 && !word(&s, digest, sizeof(digest))) || *s)
		return -ENOKEY;
	*hash = identity[7] - '0';
	return version;
}

int gdx_tls_nvme_lookup(const struct gdx_tls_key *k, const char *identity, struct gdx_tls_psk *out,
			char *hostnqn, char *subnqn)
{
	int hash, version = gdx_tls_nvme_identity(identity, &hash, hostnqn, subnqn), ret;

	if (version < 0)
		return version;
	if (hash != gdx_tls_key_hash(k))
		return -ENOKEY;
	ret = gdx_tls_nvme_psk(k, version, hostnqn, subnqn, out);
	if (ret)
		return ret;
	/* rebuilt from its NQNs it must be the offered identity: v1's digest must be ours */
	if (strlen(out->identity) != strlen(identity) ||
	    CRYPTO_memcmp(out->identity, identity, strlen(identity))) {
		gdx_tls_wipe(out, sizeof(*out));
		return -ENOKEY;
	}
	return 0;
}

/* ---- handshake ------------------------------------------------------------ */

struct gdx_tls_hs {
	SSL_CTX *ctx;
	SSL *ssl;
	int fd;
	int hash;
	bool server;
	bool refused;		/* the server's find refused the client's identity */
	gdx_tls_find_fn find;
	void *arg;
	struct gdx_tls_psk psk;
	uint8_t secret[2][GDX_TLS_KEY_MAX];	/* client, server application traffic secrets */
	unsigned have;		/* bit 0: client's, bit 1: server's */
};

static SSL_SESSION *psk_session(SSL *ssl, const struct gdx_tls_psk *psk)
{
	const SSL_CIPHER *c = SSL_CIPHER_find(ssl, (const unsigned char *)(psk->hash == 2 ?
								       "\x13\x02" : "\x13\x01"));
	SSL_SESSION *s = c ? SSL_SESSION_new() : NULL;

	if (s && (!SSL_SESSION_set1_master_key(s, psk->key, psk->len) ||
		  !SSL_SESSION_set_cipher(s, c) ||
		  !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))) {
		SSL_SESSION_free(s);
		s = NULL;
	}
	return s;
}

static int use_psk(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
		   SSL_SESSION **sess)
{
	struct gdx_tls_hs *hs = SSL_get_app_data(ssl);

	*sess = NULL;
	if (md && md != hash_md(hs->psk.hash))
		return 1;	/* a HelloRetryRequest chose another hash: no PSK fits */
	*sess = psk_session(ssl, &hs->psk);
	*id = (const unsigned char *)hs->psk.identity;
	*idlen = strlen(hs->psk.identity);
	return *sess != NULL;
}

/* TLS 1.3's cipher suites of a hash: 1 SHA-256, 2 SHA-384, 0 either */
static const char *suites(int hash)
{
	return hash == 1 ? "TLS_AES_128_GCM_SHA256" : hash == 2 ? "TLS_AES_256_GCM_SHA384" :
	       "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
}

/* True if find() has a PSK for an offered identity (of the server's hash, if it has one). */
static bool find_offered(struct gdx_tls_hs *hs, const unsigned char *id, size_t idlen)
{
	char identity[GDX_TLS_IDENTITY_MAX];
	bool ok;

	/* identities are NQNs and base64: printable ASCII, safe to log */
	for (size_t i = 0; i < idlen; i++)
		if (id[i] < 0x20 || id[i] > 0x7e)
			idlen = sizeof(identity);
	if (idlen >= sizeof(identity)) {
		snprintf(hs->psk.identity, sizeof(hs->psk.identity), "(not printable or too long)");
		return false;
	}
	/* a copy: find() fills psk.identity with the identity it rebuilt, to compare with this */
	memcpy(identity, id, idlen);
	identity[idlen] = 0;
	ok = !hs->find(hs->arg, identity, &hs->psk) && (!hs->hash || hs->psk.hash == hs->hash);
	if (!ok) {
		gdx_tls_wipe(&hs->psk, sizeof(hs->psk));
		memcpy(hs->psk.identity, identity, idlen + 1);
	}
	return ok;
}

/*
 * The server's PSK, found before OpenSSL picks the cipher suite: TLS 1.3 uses
 * a PSK only with a suite of its hash, and a server whose keys differ in hash
 * (one host's SHA-384 key beside another's SHA-256 one) learns which suite
 * from the identity alone.  The first offered identity find() takes wins;
 * none: the handshake goes on without a PSK and fails (no certificate).
 */
static int hello_cb(SSL *ssl, int *alert, void *arg)
{
	struct gdx_tls_hs *hs = SSL_get_app_data(ssl);
	const unsigned char *p;
	size_t n, len;

	(void)arg;
	hs->refused = true;
	snprintf(hs->psk.identity, sizeof(hs->psk.identity), "(none offered)");
	/* pre_shared_key: identities<7..2^16-1> of { opaque identity<1..2^16-1>; uint32 age; }, binders */
	if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_psk, &p, &n) || n < 2 ||
	    ((size_t)p[0] << 8 | p[1]) > n - 2)
		return SSL_CLIENT_HELLO_SUCCESS;
	n = (size_t)p[0] << 8 | p[1];
	for (p += 2; n >= 2; p += len + 6, n -= len + 6) {
		len = (size_t)p[0] << 8 | p[1];
		if (!len || len + 6 > n)
			break;
		if (!find_offered(hs, p + 2, len))
			continue;
		if (!SSL_set_ciphersuites(ssl, suites(hs->psk.hash))) {
			*alert = SSL_AD_INTERNAL_ERROR;
			return SSL_CLIENT_HELLO_ERROR;
		}
		hs->hash = hs->psk.hash;
		hs->refused = false;
		break;
	}
	return SSL_CLIENT_HELLO_SUCCESS;
}

/* OpenSSL asks for each offered identity in turn: the one hello_cb found a PSK for gets it. */
static int find_psk(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
	struct gdx_tls_hs *hs = SSL_get_app_data(ssl);

	*sess = NULL;
	if (hs->refused || idlen != strlen(hs->psk.identity) || memcmp(id, hs->psk.identity, idlen))
		return 1;
	*sess = psk_session(ssl, &hs->psk);
	return *sess != NULL;
}

/* The application traffic secrets arrive through the key log, the one place OpenSSL shows them. */
static void keylog(const SSL *ssl, const char *line)
{
	static const char *const names[2] = { "CLIENT_TRAFFIC_SECRET_0 ", "SERVER_TRAFFIC_SECRET_0 " };
	struct gdx_tls_hs *hs = SSL_get_app_data(ssl);
	size_t len = hash_len(hs->hash);

	for (unsigned w = 0; w < 2; w++) {
		const char *hex;
		long n;
		uint8_t *b;

		if (strncmp(line, names[w], strlen(names[w])))
			continue;
		hex = strchr(line + strlen(names[w]), ' ');
		b = hex ? OPENSSL_hexstr2buf(hex + 1, &n) : NULL;
		if (b && (size_t)n == len) {
			memcpy(hs->secret[w], b, len);
			hs->have |= 1u << w;
		}
		if (b)
			OPENSSL_clear_free(b, (size_t)n);
	}
}

static int hs_new(int fd, int hash, bool server, struct gdx_tls_hs **out)
{
	struct gdx_tls_hs *hs = calloc(1, sizeof(*hs));

	if (!hs)
		return -ENOMEM;
	hs->fd = fd;
	hs->hash = hash;
	hs->server = server;
	hs->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!hs->ctx || !SSL_CTX_set_min_proto_version(hs->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(hs->ctx, suites(hash)) ||
	    !SSL_CTX_set_num_tickets(hs->ctx, 0))
		goto fail;
	SSL_CTX_set_options(hs->ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_keylog_callback(hs->ctx, keylog);
	hs->ssl = SSL_new(hs->ctx);
	if (!hs->ssl || !SSL_set_fd(hs->ssl, fd) || !SSL_set_app_data(hs->ssl, hs))
		goto fail;
	*out = hs;
	return 0;
fail:
	gdx_tls_free(hs);
	return -ENOMEM;
}

int gdx_tls_client_start(int fd, const struct gdx_tls_psk *psk, struct gdx_tls_hs **out)
{
	int ret;

	if (!hash_len(psk->hash) || psk->len != hash_len(psk->hash))
		return -EINVAL;
	ret = hs_new(fd, psk->hash, false, out);
	if (ret)
		return ret;
	(*out)->psk = *psk;
	SSL_set_psk_use_session_callback((*out)->ssl, use_psk);
	SSL_set_connect_state((*out)->ssl);
	return 0;
}

int gdx_tls_server_start(int fd, int hash, gdx_tls_find_fn find, void *arg,
			 struct gdx_tls_hs **out)
{
	int ret;

	if (hash && !hash_len(hash))
		return -EINVAL;
	ret = hs_new(fd, hash, true, out);
	if (ret)
		return ret;
	(*out)->find = find;
	(*out)->arg = arg;
	SSL_CTX_set_client_hello_cb((*out)->ctx, hello_cb, NULL);
	SSL_set_psk_find_session_callback((*out)->ssl, find_psk);
	SSL_set_accept_state((*out)->ssl);
	return 0;
}

/* TLS 1.3's HKDF-Expand-Label (RFC 8446 7.1) with an empty context: a traffic key or IV. */
static int expand_label(int hash, const uint8_t *secret, const char *label, uint8_t *out,
			size_t len)
{
	uint8_t info[2 + 1 + 16 + 1];
	size_t n = 0, l = strlen(label);
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_HKDF, NULL);
	EVP_KDF_CTX *kc = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM p[5];
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY, ok;

	EVP_KDF_free(kdf);
	if (!kc)
		return -ENOMEM;
	info[n++] = (uint8_t)(len >> 8);
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + l);
	memcpy(info + n, "tls13 ", 6);
	memcpy(info + n + 6, label, l);
	n += 6 + l;
	info[n++] = 0;
	p[0] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
						(char *)EVP_MD_get0_name(hash_md(hash)), 0);
	p[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret,
						 hash_len(hash));
	p[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
	p[3] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
	p[4] = OSSL_PARAM_construct_end();
	ok = EVP_KDF_derive(kc, out, len, p) == 1;
	EVP_KDF_CTX_free(kc);
	return ok ? 0 : -EIO;
}

/* One direction of the record layer to the kernel, at sequence number 0. */
static int ktls_dir(int fd, int hash, int dir, const uint8_t *secret)
{
	union {
		struct tls12_crypto_info_aes_gcm_128 g128;
		struct tls12_crypto_info_aes_gcm_256 g256;
	} ci;
	uint8_t key[32], iv[12];
	size_t klen = hash == 2 ? 32 : 16;
	socklen_t cilen;
	int ret;

	memset(&ci, 0, sizeof(ci));
	ret = expand_label(hash, secret, "key", key, klen);
	if (!ret)
		ret = expand_label(hash, secret, "iv", iv, sizeof(iv));
	if (ret)
		goto out;
	if (hash == 2) {
		ci.g256.info.version = TLS_1_3_VERSION;
		ci.g256.info.cipher_type = TLS_CIPHER_AES_GCM_256;
		memcpy(ci.g256.key, key, 32);
		memcpy(ci.g256.salt, iv, 4);
		memcpy(ci.g256.iv, iv + 4, 8);
		cilen = sizeof(ci.g256);
	} else {
		ci.g128.info.version = TLS_1_3_VERSION;
		ci.g128.info.cipher_type = TLS_CIPHER_AES_GCM_128;
		memcpy(ci.g128.key, key, 16);
		memcpy(ci.g128.salt, iv, 4);
		memcpy(ci.g128.iv, iv + 4, 8);
		cilen = sizeof(ci.g128);
	}
	if (setsockopt(fd, SOL_TLS, dir, &ci, cilen))
		ret = -errno;
out:
	gdx_tls_wipe(&ci, sizeof(ci));
	gdx_tls_wipe(key, sizeof(key));
	gdx_tls_wipe(iv, sizeof(iv));
	return ret;
}

/*
 * The record layer to the kernel.  -EOPNOTSUPP where it cannot take it and
 * nothing was installed (no tls module; or the cipher not offered, TLS_TX
 * refused: a tls socket without keys passes bytes through as they are), with
 * what it said in why; once TLS_TX is in there is no way back.
 */
static int ktls_install(struct gdx_tls_hs *hs, char *why, size_t n)
{
	int me = hs->server, ret;

	/* bytes OpenSSL read past the handshake could not reach the kernel's decryption */
	if (hs->have != 3 || SSL_has_pending(hs->ssl)) {
		GDX_ERR("tls", "fd %d: handshake left %s", hs->fd,
			hs->have != 3 ? "no traffic secrets" : "data OpenSSL has read");
		return -EPROTO;
	}
	if (setsockopt(hs->fd, SOL_TCP, TCP_ULP, "tls", sizeof("tls"))) {
		ret = -errno;
		snprintf(why, n, "TCP_ULP \"tls\": %s", strerror(errno));
		return ret == -ENOENT || ret == -ENOPROTOOPT ? -EOPNOTSUPP : ret;
	}
	ret = ktls_dir(hs->fd, hs->hash, TLS_TX, hs->secret[me]);
	if (ret) {
		snprintf(why, n, "TLS_TX %s: %s", hs->hash == 2 ? "TLS_AES_256_GCM_SHA384" :
			 "TLS_AES_128_GCM_SHA256", strerror(-ret));
		return -EOPNOTSUPP;
	}
	ret = ktls_dir(hs->fd, hs->hash, TLS_RX, hs->secret[!me]);
	if (ret)
		GDX_ERR("tls", "kernel TLS took the send key, not the receive key: %s",
			strerror(-ret));
	return ret;
}

int gdx_tls_step(struct gdx_tls_hs *hs, short *events)
{
	unsigned long e;
	int r, err;
	char why[160];

	ERR_clear_error();
	r = SSL_do_handshake(hs->ssl);
	if (r == 1)
		return 0;
	err = SSL_get_error(hs->ssl, r);
	if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
		*events = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return -EAGAIN;
	}
	e = ERR_peek_error();
	ERR_error_string_n(e, why, sizeof(why));
	/* info, not warn: a peer can make as many as it likes; the caller reports the failure */
	if (hs->refused) {
		GDX_INFO("tls", "fd %d: no PSK for identity %s", hs->fd, hs->psk.identity);
		return -EKEYREJECTED;
	}
	if (err == SSL_ERROR_SSL) {
		GDX_INFO("tls", "fd %d: handshake failed: %s", hs->fd, why);
		return -EKEYREJECTED;
	}
	GDX_INFO("tls", "fd %d: peer closed during the handshake", hs->fd);
	return -ECONNRESET;
}

/* ---- the record layer in userspace ------------------------------------------ */

#define RELAY_BUF 16384			/* a TLS record's plaintext at most */
#define RELAY_LINGER_MS 5000		/* for the peer to take what a closed application sent */
#define RELAY_STACK (512u << 10)

/*
 * One connection's relay: OpenSSL's records on the TCP socket (net), plain
 * bytes on its end of the socketpair (app) whose other end the caller holds.
 * What it holds is bounded: a record's plaintext each way here, OpenSSL's
 * record buffers, and the two sockets' kernel buffers; when one side does not
 * take bytes the relay stops reading the other, so the backpressure is TCP's.
 */
struct relay {
	SSL_CTX *ctx;
	SSL *ssl;
	int net, app;
	char peer[INET6_ADDRSTRLEN + 8];
	struct relay *next, **pprev;	/* in relays */
	size_t ulen, uoff;		/* up: from the application, to SSL_write */
	size_t dlen, doff;		/* down: from SSL_read, to the application */
	uint8_t up[RELAY_BUF], down[RELAY_BUF];
};

/* The peer's address and port, for the relay's log lines (the caller's own name it after). */
static void peer_str(int fd, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		ss.ss_family = AF_UNSPEC;
	if (ss.ss_family == AF_INET) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, a, sizeof(a));
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, a, sizeof(a));
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	snprintf(out, n, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, port);
}

/*
 * The relays whose thread runs.  None may outlive the process's exit
 * handlers: OPENSSL_cleanup, which runs after ours, frees what a running
 * SSL uses and the thread-local keys OPENSSL_thread_stop needs.  So an
 * exiting process ends them as its exit would close its sockets: each
 * relay's application end is shut, as if the application had closed it, so
 * what it wrote still goes out, then close_notify (RELAY_LINGER_MS at most
 * for all of them, as the kernel sends what is left in a closed TCP
 * socket); those still running then have their TCP socket shut, which ends
 * them at once.
 *
 * A forked child has copies of its parent's relays and of their sockets,
 * but none of their threads: it closes its copies of the sockets (a shutdown
 * would end the parent's connections) and sets the relays aside in
 * relays_forked, never to touch their OpenSSL state again (a thread of the
 * parent may have been mid-call in it).  Its exit then waits for its own
 * relays only.
 */
#define RELAY_EXIT_FORCE_MS 1000

static pthread_mutex_t relays_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t relays_cond = PTHREAD_COND_INITIALIZER;
static struct relay *relays;
static struct relay *relays_forked;	/* in a forked child: kept, never run nor freed */

/* Waits until no relay is listed, for ms at most; relays_lock held. */
static void relays_wait(unsigned ms)
{
	struct timespec end;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (long)(ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	while (relays && !pthread_cond_timedwait(&relays_cond, &relays_lock, &end))
		;
}

static void relays_exit_wait(void)
{
	unsigned left = 0;

	pthread_mutex_lock(&relays_lock);
	for (struct relay *r = relays; r; r = r->next)
		shutdown(r->app, SHUT_RDWR);
	relays_wait(RELAY_LINGER_MS);
	for (struct relay *r = relays; r; r = r->next)
		shutdown(r->net, SHUT_RDWR);
	relays_wait(RELAY_EXIT_FORCE_MS);
	for (struct relay *r = relays; r; r = r->next)
		left++;
	pthread_mutex_unlock(&relays_lock);
	if (left)
		GDX_WARN("tls", "%u TLS record relays still run at exit", left);
}

static void relays_fork_prepare(void)
{
	pthread_mutex_lock(&relays_lock);	/* the list whole, a listed relay's sockets open */
}

static void relays_fork_parent(void)
{
	pthread_mutex_unlock(&relays_lock);
}

static void relays_fork_child(void)
{
	struct relay *r, *next;

	for (r = relays; r; r = next) {
		next = r->next;
		close(r->net);
		close(r->app);
		r->net = r->app = -1;
		r->next = relays_forked;
		relays_forked = r;
	}
	relays = NULL;
	pthread_mutex_unlock(&relays_lock);
}

static void relays_once(void)
{
	pthread_atfork(relays_fork_prepare, relays_fork_parent, relays_fork_child);
	atexit(relays_exit_wait);
}

static void relay_list(struct relay *r)
{
	pthread_mutex_lock(&relays_lock);
	r->next = relays;
	r->pprev = &relays;
	if (relays)
		relays->pprev = &r->next;
	relays = r;
	pthread_mutex_unlock(&relays_lock);
}

static void relay_unlist(struct relay *r)
{
	*r->pprev = r->next;
	if (r->next)
		r->next->pprev = r->pprev;
	if (!relays)
		pthread_cond_broadcast(&relays_cond);
}

static void relay_free(struct relay *r)
{
	SSL_free(r->ssl);	/* the socket BIO does not close net */
	SSL_CTX_free(r->ctx);
	if (r->net >= 0)
		close(r->net);
	if (r->app >= 0)
		close(r->app);
	gdx_tls_wipe(r, sizeof(*r));
	free(r);
}

/* The relay thread's end: OpenSSL's state, this thread's too, then the list. */
static void relay_end(struct relay *r)
{
	SSL_free(r->ssl);
	SSL_CTX_free(r->ctx);
	r->ssl = NULL;
	r->ctx = NULL;
	OPENSSL_thread_stop();	/* this thread's error queue */
	pthread_mutex_lock(&relays_lock);
	relay_unlist(r);
	relay_free(r);		/* its sockets close under the lock: relays_exit_wait shuts them */
	pthread_mutex_unlock(&relays_lock);
}

/*
 * After an SSL_read, SSL_write or SSL_shutdown that returned n <= 0: 0 with
 * *ev to wait for on net, 1 for the peer's end of the stream (close_notify,
 * or EOF: a kTLS peer closes without one, and every gdx protocol frames its
 * messages, so EOF cannot cut one short unseen), -1 for a failure, said.
 */
static int relay_ssl(struct relay *r, int n, short *ev)
{
	int sys = errno, err = SSL_get_error(r->ssl, n);
	unsigned long e = ERR_peek_error();
	char why[160];

	switch (err) {
	case SSL_ERROR_WANT_READ:
		*ev |= POLLIN;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*ev |= POLLOUT;
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		return 1;
	case SSL_ERROR_SYSCALL:
		if (!sys || sys == EPIPE)
			return 1;
		GDX_INFO("tls", "%s: connection ends: %s", r->peer, strerror(sys));
		return -1;
	default:
		if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
			return 1;
		ERR_error_string_n(e, why, sizeof(why));
		/* a bad record (bad_record_mac) or the peer's alert: OpenSSL sent or read the alert */
		GDX_INFO("tls", "%s: connection ends: TLS record layer: %s", r->peer, why);
		return -1;
	}
}

/*
 * The relay's loop: each way, read when its buffer is empty, write while it
 * is not, until neither moves; then poll for what the stalled steps wait on.
 * The peer's end of stream becomes the application's (SHUT_WR on app), the
 * application's becomes close_notify and FIN; a failure either side closes
 * both, except a write to the peer's: what the peer sent before is still
 * read and passed on, then its end of stream.  Once the application has
 * closed its end (POLLHUP, or EPIPE or ECONNRESET on app: it closed with
 * bytes of ours unread) what it sent still goes out, then close_notify, and
 * what the peer sends is read and dropped until its end of stream: closing
 * net with bytes unread would reset the connection, and a reset throws away
 * what is still on its way to the peer.  RELAY_LINGER_MS bounds all of that.
 */
static void *relay_main(void *arg)
{
	struct relay *r = arg;
	bool net_in = true, app_in = true;	/* the stream from each is not over */
	bool net_out = true, app_out = true;	/* the stream to each is not over */
	bool app_gone = false;			/* the application closed its end */
	uint64_t linger_end = 0;		/* once it has: when the relay stops */

	for (;;) {
		struct pollfd p[2];
		bool moved;
		int n;

		do {
			moved = false;
			p[0] = (struct pollfd){ .fd = r->net };
			p[1] = (struct pollfd){ .fd = app_gone ? -1 : r->app };
			/* SSL_get_error reads the error queue: clear before each call */
			if (net_in && !r->dlen) {
				ERR_clear_error();
				errno = 0;
				n = SSL_read(r->ssl, r->down, sizeof(r->down));
				if (n > 0) {
					r->dlen = (size_t)n;
					r->doff = 0;
					moved = true;
				} else if ((n = relay_ssl(r, n, &p[0].events)) < 0) {
					goto out;
				} else if (n) {
					net_in = false;
					moved = true;
				}
			}
			if (r->dlen && app_gone) {
				r->dlen = 0;	/* for nobody */
			} else if (r->dlen) {
				ssize_t w = send(r->app, r->down + r->doff, r->dlen - r->doff,
						 MSG_DONTWAIT | MSG_NOSIGNAL);

				if (w > 0) {
					r->doff += (size_t)w;
					if (r->doff == r->dlen)
						r->dlen = 0;
					moved = true;
				} else if (errno == EAGAIN) {
					p[1].events |= POLLOUT;
				} else if (errno == EPIPE || errno == ECONNRESET) {
					/* closed: what it sent is still to read, and leaves */
					app_gone = true;
					moved = true;
				} else if (errno != EINTR) {
					goto out;
				}
			}
			if (!net_in && !r->dlen && app_out) {
				shutdown(r->app, SHUT_WR);
				app_out = false;
				moved = true;
			}
			if (app_in && !r->ulen) {
				ssize_t m = recv(r->app, r->up, sizeof(r->up), MSG_DONTWAIT);

				if (m > 0) {
					r->ulen = (size_t)m;
					r->uoff = 0;
					moved = true;
				} else if (!m) {
					app_in = false;
					moved = true;
				} else if (errno == ECONNRESET) {
					/* closed with bytes of ours unread: it comes after all it sent */
					app_in = false;
					app_gone = true;
					moved = true;
				} else if (errno == EAGAIN) {
					p[1].events |= POLLIN;
				} else if (errno != EINTR) {
					goto out;
				}
			}
			if (r->ulen) {
				ERR_clear_error();
				errno = 0;
				n = SSL_write(r->ssl, r->up + r->uoff, (int)(r->ulen - r->uoff));
				if (n > 0) {
					r->uoff += (size_t)n;
					if (r->uoff == r->ulen)
						r->ulen = 0;
					moved = true;
				} else if (relay_ssl(r, n, &p[0].events)) {
					/*
					 * The peer reset or closed: what we send goes
					 * nowhere, but records it sent before may still
					 * be in the socket (a target's termination PDU
					 * just before its reset), and go to the
					 * application first.  Its sends fail with EPIPE
					 * from here, as on the reset socket itself.
					 */
					r->ulen = 0;
					app_in = false;
					net_out = false;
					shutdown(r->app, SHUT_RD);
					moved = true;
				}
			}
			if (!app_in && !r->ulen && net_out) {
				ERR_clear_error();
				errno = 0;
				/* close_notify, unless reading failed (EOF without one): OpenSSL then sends nothing */
				n = SSL_in_init(r->ssl) ? 0 : SSL_shutdown(r->ssl);
				if (n >= 0 || relay_ssl(r, n, &p[0].events)) {
					shutdown(r->net, SHUT_WR);
					net_out = false;
					moved = true;
				}
			}
		} while (moved);
		if (!net_out && !net_in && (!app_out || app_gone))
			break;
		if (!p[0].events)
			p[0].fd = -1;	/* an event nothing waits on (a reset) would spin */
		if (app_gone && !linger_end)
			linger_end = gdx_now_ns() + RELAY_LINGER_MS * 1000000ull;
		if (app_gone) {
			uint64_t now = gdx_now_ns();

			n = now < linger_end ? poll(p, 2, (int)((linger_end - now + 999999) / 1000000)) : 0;
		} else {
			n = poll(p, 2, -1);
		}
		if (n < 0 && errno != EINTR)
			break;
		if (!n) {
			GDX_INFO("tls", "%s: the peer did not end the connection within %d ms "
				 "of its close here", r->peer, RELAY_LINGER_MS);
			break;
		}
		if (p[1].revents & (POLLHUP | POLLERR))
			app_gone = true;
	}
out:
	relay_end(r);
	return NULL;
}

/* The TCP socket to a relay thread, and fd made the application's end of a socketpair. */
static int relay_start(struct gdx_tls_hs *hs)
{
	struct relay *r = calloc(1, sizeof(*r));
	struct timeval tmo[2];
	socklen_t tl = sizeof(tmo[0]);
	int sp[2], fl = fcntl(hs->fd, F_GETFL), fdfl = fcntl(hs->fd, F_GETFD), one = 1, ret;
	sigset_t all, old;
	pthread_attr_t a;
	pthread_t th;

	static pthread_once_t once = PTHREAD_ONCE_INIT;

	if (!r)
		return -ENOMEM;
	pthread_once(&once, relays_once);
	r->net = r->app = -1;
	if (fl < 0 || fdfl < 0 || getsockopt(hs->fd, SOL_SOCKET, SO_RCVTIMEO, &tmo[0], &tl) ||
	    getsockopt(hs->fd, SOL_SOCKET, SO_SNDTIMEO, &tmo[1], &tl) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp)) {
		ret = -errno;
		free(r);
		return ret;
	}
	r->app = sp[1];
	peer_str(hs->fd, r->peer, sizeof(r->peer));
	/* the relay waits in poll and its sockets never block it; all of its records are whole */
	if ((r->net = fcntl(hs->fd, F_DUPFD_CLOEXEC, 0)) < 0 ||
	    fcntl(r->net, F_SETFL, fl | O_NONBLOCK) || fcntl(r->app, F_SETFL, O_NONBLOCK) ||
	    fcntl(sp[0], F_SETFL, fl & O_NONBLOCK) ||
	    setsockopt(sp[0], SOL_SOCKET, SO_RCVTIMEO, &tmo[0], sizeof(tmo[0])) ||
	    setsockopt(sp[0], SOL_SOCKET, SO_SNDTIMEO, &tmo[1], sizeof(tmo[1]))) {
		ret = -errno;
		goto fail;
	}
	setsockopt(r->net, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!SSL_set_fd(hs->ssl, r->net)) {
		ret = -ENOMEM;
		goto fail;
	}
	/* the handshake's callbacks point at hs, which the caller frees */
	SSL_CTX_set_keylog_callback(hs->ctx, NULL);
	SSL_set_app_data(hs->ssl, NULL);
	SSL_set_mode(hs->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
	SSL_set_read_ahead(hs->ssl, 1);
	r->ssl = hs->ssl;
	r->ctx = hs->ctx;
	hs->ssl = NULL;
	hs->ctx = NULL;
	/*
	 * No signal for the relay: the application's handlers run on its own
	 * threads, and OpenSSL's write() to a reset peer raises SIGPIPE.
	 */
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, RELAY_STACK);
	relay_list(r);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&th, &a, relay_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (ret) {
		pthread_mutex_lock(&relays_lock);
		relay_unlist(r);
		pthread_mutex_unlock(&relays_lock);
		goto fail;
	}
	pthread_setname_np(th, "gdx-tls");
	/* from here the relay owns r; the socket stays open in it (net) */
	if (dup3(sp[0], hs->fd, fdfl & FD_CLOEXEC ? O_CLOEXEC : 0) < 0) {
		ret = -errno;
		close(sp[0]);	/* the relay sees its end closed, and ends */
		return ret;
	}
	close(sp[0]);
	return 0;
fail:
	close(sp[0]);
	relay_free(r);
	return ret;
}

int gdx_tls_records(struct gdx_tls_hs *hs)
{
	static atomic_bool said;
	const char *mode = gdx_cfg_str("tls.record");
	char why[96] = "tls.record=user";
	int ret;

	if (strcmp(mode, "user")) {
		ret = ktls_install(hs, why, sizeof(why));
		if (ret != -EOPNOTSUPP)
			return ret;
		if (!strcmp(mode, "kernel")) {
			GDX_ERR("tls", "kernel TLS is not available (%s) and tls.record is kernel: "
				"load the tls module, or let gdx make the records (auto)", why);
			return ret;
		}
	}
	if (!atomic_exchange(&said, true))
		GDX_INFO("tls", "TLS records in userspace: %s (%s)",
			 strcmp(mode, "user") ? "the kernel has no kTLS" : "as configured", why);
	ret = relay_start(hs);
	if (ret)
		GDX_ERR("tls", "fd %d: cannot start the TLS record relay: %s", hs->fd, strerror(-ret));
	return ret;
}

int gdx_tls_run(struct gdx_tls_hs *hs, unsigned timeout_ms)
{
	uint64_t end = gdx_now_ns() + (uint64_t)timeout_ms * 1000000;
	int fl = fcntl(hs->fd, F_GETFL), ret;

	if (fl < 0 || fcntl(hs->fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	for (;;) {
		struct pollfd p = { .fd = hs->fd };
		uint64_t now;

		ret = gdx_tls_step(hs, &p.events);
		if (!ret)
			ret = gdx_tls_records(hs);
		if (ret != -EAGAIN)
			break;
		now = gdx_now_ns();
		if (now >= end || poll(&p, 1, (int)((end - now + 999999) / 1000000)) == 0) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	fcntl(hs->fd, F_SETFL, fl);
	return ret;
}

const char *gdx_tls_identity(const struct gdx_tls_hs *hs)
{
	return hs->psk.identity;
}

void gdx_tls_free(struct gdx_tls_hs *hs)
{
	if (!hs)
		return;
	SSL_free(hs->ssl);	/* the socket BIO does not close fd */
	SSL_CTX_free(hs->ctx);
	gdx_tls_wipe(hs, sizeof(*hs));
	free(hs);
}
