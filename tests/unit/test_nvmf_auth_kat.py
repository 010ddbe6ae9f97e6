#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""DH-HMAC-CHAP known answers: src/nvmf/auth (through auth_kat) against values
computed here from the NVMe Base specification's definitions (8.13.5) with
hashlib, hmac and Python integers, and the FFDHE primes built from their
definition in RFC 7919, not taken from OpenSSL.  Usage: test_nvmf_auth_kat.py AUTH_KAT"""
import base64
import hashlib
import hmac
import os
import secrets
import struct
import subprocess
import sys
import zlib

HASHES = {1: hashlib.sha256, 2: hashlib.sha384, 3: hashlib.sha512}
NAMES = {1: "sha256", 2: "sha384", 3: "sha512"}


def e_times_2pow(bits):
    """floor(e * 2^bits) from the series sum 1/k!"""
    one = 1 << (bits + 64)
    s, t, k = 0, one, 0
    while t:
        s += t
        k += 1
        t //= k
    return s >> 64


# RFC 7919, appendix A: p = 2^b - 2^{b-64} + {[2^{b-130} e] + X} * 2^64 - 1
GROUPS = {1: (2048, 560316), 2: (3072, 2625351), 3: (4096, 5736041),
          4: (6144, 15705020), 5: (8192, 10965728)}


def ffdhe(gid):
    b, x = GROUPS[gid]
    return 2**b - 2**(b - 64) + (e_times_2pow(b - 130) + x) * 2**64 - 1


def probable_prime(n, rounds=4):
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for _ in range(rounds):
        a = secrets.randbelow(n - 3) + 2
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def secret(key, hh):
    crc = struct.pack("<I", zlib.crc32(key) & 0xffffffff)
    return "DHHC-1:%02d:%s:" % (hh, base64.b64encode(key + crc).decode())


def transform(key, hh, nqn):
    if hh == 0:
        return key
    return hmac.new(key, nqn.encode() + b"NVMe-over-Fabrics", HASHES[hh]).digest()


def augment(h, skey, chal):
    if not skey:
        return chal
    return hmac.new(HASHES[h](skey).digest(), chal, HASHES[h]).digest()


def response(h, tkey, chal, seq, tid, ctrl, hostnqn, subnqn):
    msg = chal + struct.pack("<IHB", seq, tid, 0)
    if ctrl:
        msg += b"Controller" + subnqn.encode() + b"\0" + hostnqn.encode()
    else:
        msg += b"HostHost" + hostnqn.encode() + b"\0" + subnqn.encode()
    return hmac.new(tkey, msg, HASHES[h]).digest()


class Kat:
    def __init__(self, exe):
        self.p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)

    def __call__(self, *args):
        self.p.stdin.write(" ".join(str(a) for a in args) + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()


failures = 0


def check(what, got, want):
    global failures
    if got != want:
        failures += 1
        print("FAIL %s:\n  got  %s\n  want %s" % (what, got, want))


def main():
    kat = Kat(sys.argv[1])
    host = "nqn.2014-08.org.nvmexpress:uuid:6f1a5e2c-8d3b-4c7e-9a10-2b3c4d5e6f70"
    sub = "nqn.2026-12.io.gdx:auth-kat"

    # secrets: each length and transformation hash, as nvme gen-dhchap-key writes them
    for klen in (32, 48, 64):
        for hh in (0, 1, 2, 3):
            key = os.urandom(klen)
            s = secret(key, hh)
            check("key %d/%d" % (klen, hh), kat("key", s), "%d %d %s" % (hh, klen, key.hex()))
            check("key %d/%d with trailing white space" % (klen, hh), kat("key", s + "\t"),
                  "%d %d %s" % (hh, klen, key.hex()))
            check("transform %d/%d" % (klen, hh), kat("transform", s, host),
                  transform(key, hh, host).hex())
    # what must be refused: wrong CRC, lengths, prefix, hh, base64
    key = os.urandom(32)
    good = secret(key, 1)
    bad_crc = "DHHC-1:01:%s:" % base64.b64encode(key + b"\0\0\0\0").decode()
    short = "DHHC-1:00:%s:" % base64.b64encode(key[:16] + struct.pack(
        "<I", zlib.crc32(key[:16]))).decode()
    for what, s in (("bad CRC", bad_crc), ("16-byte key", short),
                    ("hh 04", good.replace(":01:", ":04:")),
                    ("DHHC-2", good.replace("DHHC-1", "DHHC-2")),
                    ("no final colon", good[:-1]), ("bad base64", good[:12] + "!" + good[13:]),
                    ("empty", "DHHC-1:00::")):
        check("refuses %s" % what, kat("key", s), "error")

    # the response values, with and without an augmented challenge
    for h in (1, 2, 3):
        hl = HASHES[h]().digest_size
        for ctrl in (0, 1):
            tkey = os.urandom(hl)
            chal = os.urandom(hl)
            seq, tid = secrets.randbits(32), secrets.randbits(16)
            check("response %s ctrl=%d" % (NAMES[h], ctrl),
                  kat("response", h, tkey.hex(), chal.hex(), seq, tid, ctrl, host, sub),
                  response(h, tkey, chal, seq, tid, ctrl, host, sub).hex())
        skey = os.urandom(256)
        chal = os.urandom(hl)
        check("augment %s" % NAMES[h], kat("augment", h, skey.hex(), chal.hex()),
              augment(h, skey, chal).hex())

    # FFDHE: our public value g^x and the session key Y^x against g^y and Y^... here
    for gid in sorted(GROUPS):
        p = ffdhe(gid)
        size = GROUPS[gid][0] // 8
        if gid == 1:
            check("ffdhe2048 is a safe prime", probable_prime(p) and probable_prime(p // 2),
                  True)
        y = secrets.randbits(256) | 1
        ours = pow(2, y, p).to_bytes(size, "big")
        out = kat("dh", gid, ours.hex())
        if out == "error":
            check("dh %d" % gid, out, "a public value and a session key")
            continue
        pub, skey = (bytes.fromhex(v) for v in out.split())
        check("dh %d public size" % gid, len(pub), size)
        check("dh %d session key" % gid, skey.hex(),
              pow(int.from_bytes(pub, "big"), y, p).to_bytes(size, "big").hex())
        # values that would make the shared secret known are refused
        for what, v in (("1", 1), ("p-1", p - 1), ("0", 0), ("p", p)):
            check("dh %d refuses %s" % (gid, what), kat("dh", gid, v.to_bytes(size, "big").hex()),
                  "error")
        check("dh %d refuses a short value" % gid, kat("dh", gid, ours[1:].hex()), "error")

    # names as configfs writes them, and the short ones
    check("lists", kat("lists", "hmac(sha512),sha256", "ffdhe3072,null"), "31 20")
    check("lists refuse a duplicate", kat("lists", "sha256,hmac(sha256)", "null"), "error")
    check("lists refuse an unknown name", kat("lists", "md5", "null"), "error")
    check("lists refuse an empty name", kat("lists", "sha256,", "null"), "error")

    if failures:
        print("%d failures" % failures)
        return 1
    print("all known answers match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
