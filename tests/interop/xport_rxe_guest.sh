#!/bin/bash
# Guest side of xport_rxe.sh: Soft-RoCE on eth0, then the transport conformance
# suite on the verbs backend (both ends in the guest, looped back inside rxe).
set -u
cd /share
modprobe -a rdma_rxe ib_uverbs rdma_ucm || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
[ -f env.sh ] && . ./env.sh
export LD_LIBRARY_PATH=$PWD/lib GDX_DEVICE=emulated
export GDX_TEST_XPORT=rdma GDX_TEST_XPORT_ADDR="rdma://$GUEST_IP:0"
export GDX_TEST_XPORT_MAX=${GDX_TEST_XPORT_MAX:-4M}
timeout 600 ./test_xport_conformance 2>&1 | { [ -n "${XPORT_GREP:-}" ] && grep -E "$XPORT_GREP" || cat; }; rc=${PIPESTATUS[0]}
echo "conformance (rdma over rxe0): exit $rc"
if [ -x ./gdx ] && [ -n "${XPORT_BENCH:-}" ]; then
  ./gdx bench xport --backend rdma --addr "rdma://$GUEST_IP:0" $XPORT_BENCH || rc=1
fi
exit $rc
