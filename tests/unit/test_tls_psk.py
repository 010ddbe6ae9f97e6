#!/usr/bin/env python3
"""Known answers for the NVMe/TCP PSKs of src/common/tls.c, computed here with
hashlib/hmac/zlib alone: the interchange format (base64 of key and CRC-32), the
retained PSK, the v0 and v1 identities and the TLS PSK (HKDF with libnvme's info
layout: length little-endian, "tls13 " + label + context, no length bytes), and
the target's lookup of an identity; and the transport's PSK per identity
(gdx_tls_psk_derive: HKDF of the configured key as is, label gdx-xport).  Usage: test_tls_psk.py TOOL"""
import base64, hashlib, hmac, os, subprocess, sys, zlib

TOOL = sys.argv[1]
HOST = "nqn.2014-08.org.nvmexpress:uuid:12345678-1234-1234-1234-123456789abc"
SUB = "nqn.2024-01.io.gdx:tls"
fails = 0


def run(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True,
                          check=True).stdout.split("\n")[:-1]


def check(what, got, want):
    global fails
    if got == want:
        print(f"ok: {what}")
    else:
        print(f"FAILED: {what}\n  got  {got}\n  want {want}")
        fails += 1


def interchange(hmac_id, key):
    crc = zlib.crc32(key).to_bytes(4, "little")
    return f"NVMeTLSkey-1:{hmac_id:02x}:" + base64.b64encode(key + crc).decode() + ":"


def md(h):
    return hashlib.sha256 if h == 1 else hashlib.sha384


def hkdf(h, ikm, info, n):
    prk = hmac.new(b"\0" * md(h)().digest_size, ikm, md(h)).digest()
    out, t, i = b"", b"", 1
    while len(out) < n:
        t = hmac.new(prk, t + info + bytes([i]), md(h)).digest()
        out, i = out + t, i + 1
    return out[:n]


def libnvme_info(n, label, context):
    return n.to_bytes(2, "little") + b"tls13 " + label + context


def expect(hmac_id, key, version):
    h = hmac_id or (2 if len(key) == 48 else 1)
    n = len(key)
    retained = key if hmac_id == 0 else hkdf(h, key, libnvme_info(n, b"HostNQN", HOST.encode()), n)
    if version == 0:
        ident = f"NVMe0R{h:02d} {HOST} {SUB}"
        ctx = ident.encode()
    else:
        dig = base64.b64encode(hmac.new(retained, f"{HOST} {SUB} NVMe-over-Fabrics".encode(),
                                        md(h)).digest()).decode()
        ident = f"NVMe1R{h:02d} {HOST} {SUB} {dig}"
        ctx = f"{h:02d} {dig}".encode()
    return ident, hkdf(h, retained, libnvme_info(n, b"nvme-tls-psk", ctx), n).hex()


cases = [(1, os.urandom(32)), (2, os.urandom(48)), (0, os.urandom(32)), (0, os.urandom(48)),
         (1, bytes(range(32)))]
for hmac_id, key in cases:
    s = interchange(hmac_id, key)
    check(f"parse {s[:16]} ({len(key)} bytes)", run("parse", s), [f"{hmac_id} {len(key)} {key.hex()}"])
    for v in (0, 1):
        ident, psk = expect(hmac_id, key, v)
        check(f"  v{v} identity and TLS PSK", run("psk", s, str(v), HOST, SUB), [ident, psk])
        check(f"  v{v} the target finds it", run("lookup", s, ident), [HOST, SUB, psk])

# what the parser and the lookup must refuse
key = bytes(range(32))
good = interchange(1, key)
bad_crc = good[:16] + base64.b64encode(key + b"\0\0\0\0").decode() + ":"
check("bad CRC refused", run("parse", bad_crc), ["error -74"])
check("SHA-384 tag on a 32-byte key refused", run("parse", interchange(2, key)[:14] + "2" + good[15:]),
      ["error -22"])
check("no trailing ':' refused", run("parse", good[:-1]), ["error -22"])
check("version 2 refused", run("parse", "NVMeTLSkey-2" + good[12:]), ["error -22"])
ident, _ = expect(1, key, 1)
check("v1 identity with another digest refused",
      run("lookup", good, ident[:-5] + ("A" if ident[-5] != "A" else "B") + ident[-4:]), ["error -126"])
check("identity made with another key refused",
      run("lookup", interchange(1, bytes(32)), ident), ["error -126"])
check("generated-PSK identity refused", run("lookup", good, f"NVMe0G01 {HOST} {SUB}"), ["error -126"])
check("SHA-384 identity for a SHA-256 key refused", run("lookup", good, f"NVMe0R02 {HOST} {SUB}"),
      ["error -126"])
check("trailing word refused", run("lookup", good, f"NVMe0R01 {HOST} {SUB} x"), ["error -126"])
# the transport's TCP backend: the configured key as is (its HH not applied), per identity
for hmac_id, key in cases:
    s = interchange(hmac_id, key)
    h = hmac_id or (2 if len(key) == 48 else 1)
    for ident in ("gdx", "rank-0 of job 7"):
        want = hkdf(h, key, libnvme_info(len(key), b"gdx-xport", ident.encode()), len(key)).hex()
        check(f"xport PSK, {s[:16]} ({len(key)} bytes), identity '{ident}'",
              run("derive", s, "gdx-xport", ident), [f"{h} {ident}", want])
check("xport identity not printable refused", run("derive", good, "gdx-xport", "a\tb"), ["error -22"])
check("xport identity empty refused", run("derive", good, "gdx-xport", ""), ["error -22"])
sys.exit(1 if fails else 0)
