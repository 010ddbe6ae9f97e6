/* SPDX-License-Identifier: MIT */
/*
 * TLS 1.3 with pre-shared keys over a TCP socket, the record layer handed to
 * the kernel (kTLS) or run in userspace, and the NVMe/TCP secure channel's
 * keys on top of it.
 *
 * Handshake: OpenSSL 3 runs it on the caller's socket, non-blocking, one
 * step per readiness (gdx_tls_step), so an event loop can drive many and a
 * blocking caller can bound one (gdx_tls_run).  Once it is done
 * gdx_tls_records sets up the record layer, so that the caller's
 * send/recv/poll on its fd stay as they are:
 *  - kTLS: the traffic keys go to the kernel (TCP_ULP "tls", TLS_TX,
 *    TLS_RX) and OpenSSL lets go of the socket.  Neither side sends
 *    post-handshake messages (no session tickets), so record sequence
 *    numbers start at 0 on both directions.
 *  - a relay, where the kernel cannot take the keys (no tls module, cipher
 *    not offered) or tls.record is "user": the TCP socket moves to a thread
 *    of the connection's own that runs OpenSSL's record layer, and the
 *    caller's fd number is made (dup3) one end of a socketpair whose other
 *    end that thread reads and writes.  The caller's data path is unchanged;
 *    socket options of TCP's (TCP_NODELAY, TCP_QUICKACK, TCP_INFO) no longer
 *    apply to its fd, splice and MSG_ZEROCOPY would only copy into the
 *    socketpair (the callers already keep them off under TLS), and the peer
 *    address must be read before (getpeername on a socketpair names nobody).
 * Nothing is ever sent in clear instead of encrypted.
 *
 * NVMe keys (NVMe/TCP transport specification, secure channel, as Linux,
 * nvme-cli and libnvme implement it):
 *   configured PSK   "NVMeTLSkey-1:HH:<base64(key || CRC-32(key) LE)>:",
 *                    HH = 00 (used as is), 01 (SHA-256, 32 bytes), 02 (SHA-384, 48)
 *   retained PSK     HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", hostnqn, L)
 *   identity v0      "NVMe0Rhh <hostnqn> <subnqn>"
 *   identity v1      "NVMe1Rhh <hostnqn> <subnqn> <digest>", digest =
 *                    base64(HMAC(retained, "<hostnqn> <subnqn> NVMe-over-Fabrics"))
 *   TLS PSK          HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk",
 *                    v0: identity, v1: "hh <digest>", L)
 * hh is the hash of the cipher suite (01: TLS_AES_128_GCM_SHA256, 02:
 * TLS_AES_256_GCM_SHA384).  HKDF-Expand-Label's info is laid out as libnvme
 * does (nvme-cli puts these keys in the kernel keyring): the length as two
 * bytes little-endian, "tls13 ", the label and the context, with no length
 * bytes for label and context.  tests/unit/test_tls_psk.py checks all of it
 * against an independent Python computation.
 */
#ifndef GDX_COMMON_TLS_H
#define GDX_COMMON_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GDX_TLS_KEY_MAX 48
#define GDX_TLS_IDENTITY_MAX (8 + 2 * 224 + 2 + 65 + 1)	/* v1, SHA-384, NQNs of 223 */

/* A configured PSK as `nvme gen-tls-key` writes it. */
struct gdx_tls_key {
	uint8_t hmac;			/* 0: no transform, 1: SHA-256, 2: SHA-384 */
	uint8_t len;			/* 32 or 48 */
	uint8_t key[GDX_TLS_KEY_MAX];
};

/* A PSK as the handshake uses it: its identity, its bytes, its hash (1 or 2). */
struct gdx_tls_psk {
	char identity[GDX_TLS_IDENTITY_MAX];
	uint8_t hash;
	uint8_t len;
	uint8_t key[GDX_TLS_KEY_MAX];
};

/* Parses the interchange format; -EINVAL for anything else, -EBADMSG for a bad CRC. */
int gdx_tls_key_parse(const char *s, struct gdx_tls_key *k);
/* Reads a file holding one key in the interchange format (trailing white space ignored). */
int gdx_tls_key_load(const char *path, struct gdx_tls_key *k);
/* The hash of the cipher suite the key goes with: 1 (SHA-256) or 2 (SHA-384). */
int gdx_tls_key_hash(const struct gdx_tls_key *k);
/* Zeroes a key or a PSK in a way the compiler keeps. */
void gdx_tls_wipe(void *p, size_t n);

int gdx_tls_retained(const struct gdx_tls_key *k, const char *hostnqn, uint8_t *out);
/* The identity (version 0 or 1) and TLS PSK a host offers to subnqn. */
int gdx_tls_nvme_psk(const struct gdx_tls_key *k, int version, const char *hostnqn,
		     const char *subnqn, struct gdx_tls_psk *out);
/*
 * Splits an NVMe retained-PSK identity (v0 or v1) into its hash (1 or 2) and
 * NQNs (256 bytes each): its version, or -ENOKEY if it is not one.  It says
 * whose key to look the PSK up with; gdx_tls_nvme_lookup() then checks it.
 */
int gdx_tls_nvme_identity(const char *identity, int *hash, char *hostnqn, char *subnqn);
/*
 * The target's side: the TLS PSK for an identity a host offered, if it is an
 * NVMe identity (v0 or v1, hash matching the key's) made with key k; the
 * identity's NQNs go to hostnqn and subnqn (256 bytes each).  -ENOKEY if not.
 */
int gdx_tls_nvme_lookup(const struct gdx_tls_key *k, const char *identity, struct gdx_tls_psk *out,
			char *hostnqn, char *subnqn);

/*
 * A PSK for a protocol other than NVMe: identity as given (printable ASCII),
 * key HKDF-Expand(HKDF-Extract(0, configured key), info), info laid out as
 * above (the length as two bytes little-endian, "tls13 ", label, identity),
 * hash and length the configured key's (its HH transform is not applied).
 * One configured key thus gives each identity its own PSK.  -EINVAL for an
 * identity empty, too long or not printable.
 */
int gdx_tls_psk_derive(const struct gdx_tls_key *k, const char *label, const char *identity,
		       struct gdx_tls_psk *out);

/* ---- handshake ---------------------------------------------------------- */

struct gdx_tls_hs;

/* Finds the PSK for an identity a client offered: 0, or -ENOKEY to refuse it. */
typedef int (*gdx_tls_find_fn)(void *arg, const char *identity, struct gdx_tls_psk *out);

/* Client: offers psk (copied) on the connected socket fd. */
int gdx_tls_client_start(int fd, const struct gdx_tls_psk *psk, struct gdx_tls_hs **out);
/*
 * Server: find is called with the client's identities before the cipher
 * suite is chosen, and the suite follows the PSK it gives (hash 0), or only
 * PSKs of hash (1 or 2) are taken.
 */
int gdx_tls_server_start(int fd, int hash, gdx_tls_find_fn find, void *arg,
			 struct gdx_tls_hs **out);
/*
 * One step: 0 when the handshake is done (gdx_tls_records is next), -EAGAIN
 * with *events (POLLIN or POLLOUT) to wait for, else a failure:
 * -EKEYREJECTED (the peer's key or identity was refused, or it refused ours),
 * -ECONNRESET, -EPROTO.  The socket may be blocking or not.
 */
int gdx_tls_step(struct gdx_tls_hs *hs, short *events);
/*
 * After the handshake: the record layer by the kernel or by a relay thread,
 * as tls.record says (auto: the kernel where it can).  With the relay, fd
 * names a socketpair's end from here on, with the flags (O_NONBLOCK,
 * FD_CLOEXEC) and receive/send timeouts the socket had.  An epoll set holding
 * fd holds the socket, not the number: take fd out before and put it back
 * after.  0, or -EOPNOTSUPP (tls.record=kernel and no kTLS), -EPROTO, -errno.
 * The relay's log says, once per process, that records are in userspace.
 */
int gdx_tls_records(struct gdx_tls_hs *hs);
/* Steps until done, failed or timeout_ms passed (-ETIMEDOUT), then gdx_tls_records. */
int gdx_tls_run(struct gdx_tls_hs *hs, unsigned timeout_ms);
/* The identity the handshake used (the server learns it from the client). */
const char *gdx_tls_identity(const struct gdx_tls_hs *hs);
/* Wipes the handshake's secrets; the socket stays open. */
void gdx_tls_free(struct gdx_tls_hs *hs);

/* True if the first byte a client sent starts a TLS handshake record. */
static inline bool gdx_tls_is_hello(uint8_t first_byte)
{
	return first_byte == 0x16;
}

#endif
