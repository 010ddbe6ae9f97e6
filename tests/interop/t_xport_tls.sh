#!/bin/bash
# vm: trixie
# The transport's TCP backend over TLS 1.3 (PSK) in the Debian 13 guest, whose
# kernel has kTLS (this machine's has none: here only gdx's own records run):
#  - test_xport_tcp_wire's test_tls_psk with kTLS required: a clear peer, another
#    key and another identity refused before any frame, the accept going on, then
#    1 MiB byte-exact through the kernel's TLS records (a send; a write into
#    device memory and a read of it back), and again through gdx's (tls.record=user);
#  - gdx bench xport over TLS beside the same run in clear, and device memory both
#    ends over TLS: every size moves (the bench fails a size that does not), and
#    the figures say what TLS costs (under TCG: relative only).
. "$(dirname "$0")/lib.sh"
builddir=${GDX_BUILDDIR:-$INTEROP/../../build}
bin=$builddir/tests/func/test_xport_tcp_wire
[ -x "$bin" ] || { echo "no $bin (build with tests)"; exit 77; }
SHARE=$(mktemp -d); trap 'rm -rf "$SHARE"' EXIT
"$VM" share "$SHARE" "$bin" "$GDX" || exit 1
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_xport_tls.sh" "$SHARE/"
export VM_MEM=1536 VM_TIMEOUT=600
VM_SHARE=$SHARE "$VM" run "$SHARE/g_xport_tls.sh"
