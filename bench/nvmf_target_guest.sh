#!/bin/bash
# Guest side of bench/nvmf_target_vm.sh: the kernel host reads from the kernel's
# nvmet-tcp target and from the gdx target, both serving a null namespace over
# the guest's loopback, with the same fio jobs; prints one line per job.
# Arguments: RUNTIME (seconds per job) REACTORS POLL_US (for the gdx target).
set -uo pipefail
RUNTIME=${1:-8} REACTORS=${2:-1} POLL_US=${3:-0} SIZE=1G
export LD_LIBRARY_PATH=/share/lib
modprobe -a nvme-tcp nvmet-tcp null_blk nr_devices=1 gb=1
C=/sys/kernel/config/nvmet
NQN_K=nqn.2024-01.io.gdx:bench-nvmet NQN_G=nqn.2024-01.io.gdx:bench-gdx

wait_dev() { local i; for i in $(seq 300); do [ -b "$1" ] && return 0; sleep 0.1; done; return 1; }
# run LABEL DEV: 4k random reads at depth 1/32/128, 128k sequential reads
jobs() {
  local label=$1 dev=$2 qd out
  for qd in 1 32 128; do
    out=$(fio --name=r --filename="$dev" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
      --iodepth=$qd --runtime=$RUNTIME --time_based --size=$SIZE --output-format=terse \
      --terse-version=3 2>/dev/null)
    echo "RESULT $label iops_qd$qd $(echo "$out" | awk -F';' '{print $8}')"
  done
  out=$(fio --name=b --filename="$dev" --direct=1 --ioengine=libaio --rw=read --bs=128k \
    --iodepth=32 --runtime=$RUNTIME --time_based --size=$SIZE --output-format=terse \
    --terse-version=3 2>/dev/null)
  echo "RESULT $label bw_128k_kib $(echo "$out" | awk -F';' '{print $7}')"
}

# kernel nvmet-tcp on null_blk
mkdir $C/subsystems/$NQN_K
echo 1 > $C/subsystems/$NQN_K/attr_allow_any_host
mkdir $C/subsystems/$NQN_K/namespaces/1
echo /dev/nullb0 > $C/subsystems/$NQN_K/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN_K/namespaces/1/enable
mkdir $C/ports/1
echo tcp > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo 127.0.0.1 > $C/ports/1/addr_traddr; echo 4420 > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN_K $C/ports/1/subsystems/$NQN_K
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN_K || exit 1
wait_dev /dev/nvme0n1 || exit 1
jobs nvmet /dev/nvme0n1
nvme disconnect -n $NQN_K >/dev/null

# the gdx target, null namespace of the same size
/share/gdx nvmf target -l 127.0.0.1:4421 -n $NQN_G -N null:$SIZE -r "$REACTORS" \
  --poll-us "$POLL_US" \
  >/tmp/gdx.log 2>&1 & T=$!
for i in $(seq 100); do grep -q ready /tmp/gdx.log && break; sleep 0.1; done
nvme connect -t tcp -a 127.0.0.1 -s 4421 -n $NQN_G || { cat /tmp/gdx.log; exit 1; }
for i in $(seq 300); do [ -b /dev/nvme0n1 ] || [ -b /dev/nvme1n1 ] && break; sleep 0.1; done
dev=$(ls /dev/nvme*n1 | head -1)
jobs gdx "$dev"
nvme disconnect -n $NQN_G >/dev/null
kill $T; wait $T
