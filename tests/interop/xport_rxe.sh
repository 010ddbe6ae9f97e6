#!/bin/bash
# Runs the transport conformance suite on the verbs backend over Soft-RoCE
# (rdma_rxe) inside the qemu guest (Debian's stock kernel; see tests/interop or
# the shared vm/ harness).  The host-built binary runs in the guest: both are
# Debian bookworm, and libraries the guest image lacks are carried beside it.
# Usage: xport_rxe.sh BUILDDIR   (exit 77 when no VM harness is found)
set -u
# Each run boots a CPU-heavy TCG guest: only when asked (tests/run.sh asks).
[ "${GDX_TEST_VM:-0}" = 1 ] || { echo "GDX_TEST_VM is not 1: skipping the VM test"; exit 77; }
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$top/build}
vm=${GDX_VM_SH:-}
for c in "$top/tests/interop/vm/vm.sh" "$top/tests/interop/vm.sh" /work/shared/vm/vm.sh; do
  [ -z "$vm" ] && [ -x "$c" ] && vm=$c
done
[ -n "$vm" ] || { echo "no vm.sh: skipping"; exit 77; }
share=$(mktemp -d "$build/xport-rxe.XXXXXX")
trap 'rm -rf "$share"' EXIT
mkdir -p "$share/lib"
cp "$build/tests/func/test_xport_conformance" "$top/tests/interop/xport_rxe_guest.sh" "$share/"
[ -x "$build/tools/gdx/gdx" ] && cp "$build/tools/gdx/gdx" "$share/"
# The guest image has rdma-core, json-c and numa; carry the rest of what the binaries link.
for b in "$share/test_xport_conformance" "$share/gdx"; do
  [ -e "$b" ] || continue
  ldd "$b" | awk '/=> \//{print $3}' | grep -E 'cmocka|uring|isal|asan|ubsan' | xargs -r cp -t "$share/lib"
done
[ -n "${GDX_LOG_LEVEL:-}" ] && echo "export GDX_LOG_LEVEL=$GDX_LOG_LEVEL XPORT_GREP='${XPORT_GREP:-}'" > "$share/env.sh"
VM_SHARE=$share VM_CPUS=${VM_CPUS:-2} VM_TIMEOUT=${VM_TIMEOUT:-900} \
  "$vm" run "$share/xport_rxe_guest.sh"
