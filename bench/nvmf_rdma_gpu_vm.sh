#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Proves bench/nvmf_rdma_gpu.sh, written for a machine with a GPU and an RDMA NIC,
# where neither exists: in the qemu guest (tests/interop/vm.sh) over rdma_rxe with
# the emulated device.  With no RDMA device it says so and exits 0; over rxe0 it
# measures the gdx target and nvmet-rdma into host and device memory beside
# perftest's ceilings, every row with its path: direct (the emulated device's memory
# registered as peer memory), and with only dma-buf allowed (rxe registers none)
# bounce naming why, the GDX_REQUIRE_DIRECT=1 pass refused with that reason.  Tiny
# durations: the rows and paths are checked, not the figures.  About 3 minutes, so
# not among the interop tests CI runs.
#
#   bench/nvmf_rdma_gpu_vm.sh [BUILD]   (default build; exit 0: every check passed)
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gdx=${1:-$top/build}/tools/gdx/gdx
[ -x "$gdx" ] || { echo "no $gdx: build first"; exit 1; }
share=$(mktemp -d); trap 'rm -rf "$share"' EXIT
"$top/tests/interop/vm.sh" prepare >/dev/null || { echo "vm prepare failed"; exit 1; }
"$top/tests/interop/vm.sh" share "$share" "$gdx" || exit 1
mkdir -p "$share/bench"
cp "$top/tests/interop/guest_lib.sh" "$top/bench/nvmf_rdma_gpu_guest.sh" "$share/"
cp "$top/bench/nvmf_rdma_gpu.sh" "$top/bench/gpu_lib.sh" "$share/bench/"
VM_SHARE=$share VM_TIMEOUT=${VM_TIMEOUT:-600} "$top/tests/interop/vm.sh" run "$share/nvmf_rdma_gpu_guest.sh"
