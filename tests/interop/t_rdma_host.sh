#!/bin/bash
# NVMe/RDMA host: the gdx host over rdma_rxe inside the guest against the kernel's
# nvmet-rdma and against the gdx target: discover, identify, byte-exact writes and
# reads (host and pinned memory), cross-checked by the guest's own kernel host on
# nvmet's namespace; a page written in-capsule from host and device memory; writes
# and reads of emulated device memory the NIC registers
# (path direct, byte-exact); with registration switched off the same through
# registered host memory (path bounce, byte-exact, several queues; on a scsi_debug
# namespace with random latencies answers out of order, held for the earlier ones), and
# with require_direct the error naming why; the gdx target's request buffers bounded per
# queue and in all (commands wait, bytes exact, RSS bounded); a read into device memory
# held in flight by a stopped reader survives the gdx target's death and restart by
# reconnecting, every run, with device memory probed once per controller.  Both ends run in the guest: rxe exists only there.
. "$(dirname "$0")/lib.sh"
[ -x "$GDX" ] || { echo "no gdx binary at $GDX"; exit 77; }
SHARE=$(mktemp -d); trap 'rm -rf "$SHARE"' EXIT
"$VM" share "$SHARE" "$GDX" || exit 1
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_rdma_host.sh" "$SHARE/"
VM_SHARE=$SHARE "$VM" run "$SHARE/g_rdma_host.sh"
