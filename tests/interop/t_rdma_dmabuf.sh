#!/bin/bash
# vm: trixie
# The emulated device's dma-buf, for real: Debian 13's kernel has /dev/udmabuf (Debian
# 12's has not), so there the device suite's dmabuf_export exports emulated device
# memory as a dma-buf (the memfd's pages) and checks its size and offset, and the
# NVMe/RDMA host over rdma_rxe, allowed only dma-buf, reads 1 MiB into device memory:
# path direct through a dma-buf where rxe registers one, else path bounce (through
# registered host memory) with the NIC's answer named (the export itself worked).
. "$(dirname "$0")/lib.sh"
[ "${VM_DIST:-}" = trixie ] || { echo "run through run.sh (or with VM_DIST=trixie)"; exit 1; }
B=$(dirname "$GDX")/../..	# the build the gdx binary comes from
[ -x "$B/tests/unit/test_device" ] || { echo "no test_device in $B"; exit 77; }
SHARE=$(mktemp -d); trap 'rm -rf "$SHARE"' EXIT
"$VM" share "$SHARE" "$GDX" "$B/tests/unit/test_device" || exit 1
cp "$INTEROP/guest_lib.sh" "$SHARE/"
cat >"$SHARE/g.sh" <<'GUEST'
. /share/guest_lib.sh
cd /share
export LD_LIBRARY_PATH=$PWD/lib GDX_DEVICE=emulated
export GDX_NVMF_HOST_KATO_MS=15000 GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000
modprobe udmabuf 2>/dev/null
check "/dev/udmabuf" test -c /dev/udmabuf
out=$(./test_device 2>&1); rc=$?
grep -E 'dmabuf_export|nic_addr' <<<"$out" | sed 's/^/  /'
check "the device suite passes" test $rc = 0
check "  dmabuf_export ran (not skipped)" grep -q 'OK \] dmabuf_export' <<<"$out"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvmet-rdma || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
N=nqn.2024-01.io.gdx:dmabuf
./gdx nvmf target -l "rdma://$GUEST_IP:4420" -n $N -N ram:8M >/tmp/target.log 2>&1 &
tpid=$!
for _ in $(seq 100); do grep -q 'target: ready' /tmp/target.log && break; sleep 0.1; done
head -c 1M /dev/urandom >/tmp/pat
R=(-t rdma -a "$GUEST_IP" -s 4420 -n $N)
check "gdx writes 1 MiB" ./gdx nvmf write "${R[@]}" -l 1M --from /tmp/pat --quiet
out=$(GDX_LOG_LEVEL=info GDX_NVMF_HOST_RDMA_DEVICE_REG=dmabuf ./gdx nvmf read "${R[@]}" \
  -l 1M -m gpu:0 --to /tmp/back 2>&1); rc=$?
echo "$out" | tail -3 | sed 's/^/  /'
check "the read into device memory succeeds" test $rc = 0
check "  same bytes" cmp /tmp/pat /tmp/back
if grep -q 'path direct' <<<"$out"; then
  check "  direct, through a dma-buf" grep -q 'through a dma-buf' <<<"$out"
else
  # rxe registers no dma-buf (6.1 and 6.12): the host bounces through registered host
  # memory and says why, the NIC's answer, not the export's
  check "  bounced, the NIC having refused the dma-buf" \
    bash -c 'grep -q "path bounce" <<<"$0" && grep -q "dma-buf: the NIC does not register it" <<<"$0"' "$out"
fi
kill $tpid; wait $tpid
finish
GUEST
VM_SHARE=$SHARE "$VM" run "$SHARE/g.sh"
