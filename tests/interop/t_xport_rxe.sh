#!/bin/bash
# The transport conformance suite on the verbs backend, over Soft-RoCE (rdma_rxe)
# inside the guest: both ends run there, looped back inside rxe.  The host-built
# binary runs in the guest (both Debian bookworm); the libraries the guest image
# lacks are carried beside it.  XPORT_BENCH="args" also runs gdx bench xport there.
. "$(dirname "$0")/lib.sh"
builddir=${GDX_BUILDDIR:-$INTEROP/../../build}
bin=$builddir/tests/func/test_xport_conformance
[ -x "$bin" ] || { echo "no $bin (build with tests)"; exit 77; }
SHARE=$(mktemp -d); trap 'rm -rf "$SHARE"' EXIT
cp "$INTEROP/g_xport_rxe.sh" "$SHARE/"
bins=("$bin")
[ -x "$GDX" ] && bins+=("$GDX")
"$VM" share "$SHARE" "${bins[@]}" || exit 1
{
  echo "export GDX_TEST_XPORT_MAX=${GDX_TEST_XPORT_MAX:-4M}"
  [ -n "${GDX_LOG_LEVEL:-}" ] && echo "export GDX_LOG_LEVEL=$GDX_LOG_LEVEL"
  [ -n "${XPORT_BENCH:-}" ] && echo "XPORT_BENCH='$XPORT_BENCH'"
} > "$SHARE/env.sh"
[ -n "${XPORT_BENCH:-}" ] && VM_TIMEOUT=900
VM_SHARE=$SHARE "$VM" run "$SHARE/g_xport_rxe.sh"
