#!/bin/bash
# NVMe/RDMA: the gdx target listens on rdma:// over Soft-RoCE (rdma_rxe) inside the
# guest, and the guest's kernel host (nvme-rdma, nvme-cli) discovers it, connects,
# verifies I/O on a file and a RAM namespace (through the reactor's shared receive
# queue), is refused where its NQN is not allowed, reconnects across a target restart
# (to receive queues per queue pair); a raw host (rdma_probe) sends bad
# connect requests and capsules and posts no receive for a response (the stall
# timeout ends that queue), and the target carries on.  Both ends run in the
# guest: rxe exists only there.  The host-built binary runs there (both bookworm),
# with the libraries the guest image lacks carried beside it.
. "$(dirname "$0")/lib.sh"
[ -x "$GDX" ] || { echo "no gdx binary at $GDX"; exit 77; }
SHARE=$(mktemp -d); trap 'rm -rf "$SHARE"' EXIT
"$VM" share "$SHARE" "$GDX" || exit 1
probe=$(dirname "$GDX")/../../tests/interop/rdma_probe
[ -x "$probe" ] && cp "$probe" "$SHARE/"
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_rdma_kernel_host.sh" "$SHARE/"
VM_SHARE=$SHARE "$VM" run "$SHARE/g_rdma_kernel_host.sh" nqn.2024-01.io.gdx:interop-rdma
