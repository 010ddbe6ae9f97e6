#!/bin/bash
# vm: trixie
# NVMe/TCP over TLS 1.3 (PSK) in the Debian 13 guest, whose kernel has kTLS (this
# machine's has none, so gdx runs inside the guest here):
#  - gdx host <-> gdx target on the guest's loopback: byte-exact writes and reads with
#    digests, into device memory too; a clear host and a wrong key refused; a host
#    whose Connect names another host NQN than its PSK identity refused;
#  - the kernel host (`nvme connect --tls`, tlshd doing its handshake) -> the gdx
#    target: the PSK nvme-cli derives and puts in the keyring is the one gdx derives,
#    for the v0 identity (check-tls-key --insert) and the v1 one (connect --tls-key);
#    fio verify; a clear kernel connect refused;
#  - the same with the gdx target making its own records (tls.record=user, as where
#    the kernel has no kTLS): the kernel host's connect and fio verify, gdx host <->
#    gdx target both in userspace, a wrong key refused;
#  - PSKs per host (host entries' tls_key, no port key): the kernel host connects with
#    its own, a second host NQN with the first one's key is refused and with its own
#    connects; the gdx host likewise;
#  - the gdx host -> the kernel's nvmet-tcp with addr_tsas tls1.3 (tlshd serving).
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d)
trap 'rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_tls.sh" "$INTEROP/tls_connect.py" "$SHARE/"
"$VM" share "$SHARE" "$GDX" "$(dirname "$GDX")/../../tests/unit/tls_psk_tool" || exit 1
export VM_MEM=1536 VM_TIMEOUT=600
VM_SHARE=$SHARE "$VM" run "$SHARE/g_tls.sh"
