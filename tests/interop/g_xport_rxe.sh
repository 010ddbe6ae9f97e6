#!/bin/bash
# Guest side of t_xport_rxe.sh: Soft-RoCE on eth0, then the transport conformance
# suite on the verbs backend (and, if asked, gdx bench xport beside ib_write_bw).
set -u
cd /share
. ./env.sh
modprobe -a rdma_rxe ib_uverbs rdma_ucm || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
export LD_LIBRARY_PATH=$PWD/lib GDX_DEVICE=emulated
GDX_TEST_XPORT=rdma GDX_TEST_XPORT_ADDR="rdma://$GUEST_IP:0" timeout 600 ./test_xport_conformance
rc=$?
echo "conformance (rdma over rxe0): exit $rc"
if [ -n "${XPORT_BENCH:-}" ]; then
  # shellcheck disable=SC2086
  ./gdx bench xport --addr "rdma://$GUEST_IP:0" $XPORT_BENCH || rc=1
fi
exit $rc
