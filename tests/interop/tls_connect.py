#!/usr/bin/env python3
"""A raw NVMe/TCP host over TLS 1.3 in user space (Python's ssl with a PSK), for
what no real host sends: its PSK identity names one host NQN, its Connect another.
ICReq, then an admin-queue Connect naming HOSTNQN and SUBNQN; prints the Connect's
status as SCT<<8|SC in hex, or "closed".
Usage: tls_connect.py PORT IDENTITY PSK_HEX HOSTNQN SUBNQN"""
import socket
import ssl
import struct
import sys

port, ident, psk, host, sub = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
ctx.set_ciphers("DEFAULT")
ctx.set_psk_client_callback(lambda hint: (ident, bytes.fromhex(psk)))
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(port)), timeout=30))


def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            print("closed")
            sys.exit(0)
        b += c
    return b


s.sendall(struct.pack("<BBBBI", 0x00, 0, 128, 0, 128) + bytes(120))   # ICReq
recv(128)                                                              # ICResp
sqe = bytearray(64)
struct.pack_into("<BBH", sqe, 0, 0x7F, 0x40, 1)        # fabrics, SGL data, CID 1
sqe[4] = 0x01                                          # FCTYPE Connect
struct.pack_into("<QIxxxB", sqe, 24, 0, 1024, 0x01)    # in-capsule data, offset 0
struct.pack_into("<HHHBxI", sqe, 40, 0, 0, 31, 0, 30000)  # admin queue, 32 entries, KATO
data = bytearray(1024)
data[0:16] = b"gdx-tls-connect!"
struct.pack_into("<H", data, 16, 0xFFFF)
data[256:256 + len(sub)] = sub.encode()
data[512:512 + len(host)] = host.encode()
s.sendall(struct.pack("<BBBBI", 0x04, 0, 72, 72, 72 + 1024) + sqe + data)
ch = recv(8)
rest = recv(struct.unpack_from("<I", ch, 4)[0] - 8)
status = struct.unpack_from("<H", rest, 14)[0] >> 1     # CQE DW3 bits 31:17
print("%x" % (status & 0x7FF))
