#!/bin/bash
# Guest side of bench/nvmf_target_vm.sh: the kernel host reads from the kernel's
# nvmet target and from the gdx target, both serving a null namespace and both
# connected at once, over the guest's loopback (tcp) or over rdma_rxe on eth0.  Each fio job runs ROUNDS
# times against each target, alternating (and alternating which goes first), so
# that load changes on the machine hit both alike; every run prints one RESULT line.
# Arguments: RUNTIME (seconds per run) ROUNDS JOBS (subset of "qd1 qd32 qd128 bw")
#   FIO_CPUS (fio's --cpus_allowed for both targets, "" = anywhere) TRANSPORT (tcp, rdma)
#   GDX-TARGET-OPTIONS...
set -uo pipefail
RUNTIME=${1:-4} ROUNDS=${2:-3} JOBS=${3:-qd1 qd32 qd128 bw} FIO_CPUS=${4:-} TR=${5:-tcp} SIZE=1G
shift 5
export LD_LIBRARY_PATH=/share/lib
A=127.0.0.1 GDX_L=127.0.0.1:4421
if [ "$TR" = rdma ]; then
  # rxe serves a NIC, not the loopback: both targets on the guest's own address
  modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet-rdma || exit 1
  rdma link add rxe0 type rxe netdev eth0 || exit 1
  A=$GUEST_IP GDX_L=rdma://$GUEST_IP:4421
else
  modprobe -a nvme-tcp nvmet-tcp
fi
modprobe null_blk nr_devices=1 gb=1
C=/sys/kernel/config/nvmet
NQN_K=nqn.2024-01.io.gdx:bench-nvmet NQN_G=nqn.2024-01.io.gdx:bench-gdx

# kernel nvmet-tcp on null_blk, port 4420
mkdir $C/subsystems/$NQN_K
echo 1 > $C/subsystems/$NQN_K/attr_allow_any_host
mkdir $C/subsystems/$NQN_K/namespaces/1
echo /dev/nullb0 > $C/subsystems/$NQN_K/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN_K/namespaces/1/enable
mkdir $C/ports/1
echo $TR > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo $A > $C/ports/1/addr_traddr; echo 4420 > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN_K $C/ports/1/subsystems/$NQN_K
# the gdx target, null namespace of the same size, port 4421
/share/gdx nvmf target -l $GDX_L -n $NQN_G -N null:$SIZE "$@" >/tmp/gdx.log 2>&1 & T=$!
for i in $(seq 100); do grep -q ready /tmp/gdx.log && break; sleep 0.1; done

nvme connect -t $TR -a $A -s 4420 -n $NQN_K >/dev/null || exit 1
nvme connect -t $TR -a $A -s 4421 -n $NQN_G >/dev/null || { cat /tmp/gdx.log; exit 1; }
dev_of() {
  local c
  for i in $(seq 300); do
    for c in /sys/class/nvme/nvme*; do
      if [ "$(cat $c/subsysnqn 2>/dev/null)" = "$1" ] && [ -b /dev/$(basename $c)n1 ]; then
        echo /dev/$(basename $c)n1; return 0
      fi
    done
    sleep 0.1
  done
  return 1
}
DEV_K=$(dev_of $NQN_K) || exit 1
DEV_G=$(dev_of $NQN_G) || exit 1
echo "nvmet: $DEV_K  gdx: $DEV_G  ($(nproc) vCPUs; gdx options: $*; fio on CPUs '$FIO_CPUS')"

# one fio job, terse output; its device and job options follow
FIO=(fio --name=j --direct=1 --ioengine=libaio --runtime="$RUNTIME" --time_based --size="$SIZE"
     --output-format=terse --terse-version=3 ${FIO_CPUS:+--cpus_allowed=$FIO_CPUS})
# run LABEL DEV KEY fio-args...: one run, one RESULT line (IOPS, or KiB/s for bw)
run() {
  local label=$1 dev=$2 key=$3 field; shift 3
  case $key in bw*) field=7 ;; *) field=8 ;; esac
  echo "RESULT $label $key $("${FIO[@]}" --filename="$dev" "$@" 2>/dev/null | awk -F';' -v f=$field '{print $f}')"
}
job_args() {
  case $1 in
    qd*) echo --rw=randread --bs=4k --iodepth=${1#qd} ;;
    bw) echo --rw=read --bs=128k --iodepth=32 ;;
  esac
}
for r in $(seq "$ROUNDS"); do
  for job in $JOBS; do
    case $job in qd*) key=iops_$job ;; bw) key=bw_128k_kib ;; esac
    # shellcheck disable=SC2046 # job_args is a list of options
    if [ $((r % 2)) = 1 ]; then
      run nvmet $DEV_K $key $(job_args $job); run gdx $DEV_G $key $(job_args $job)
    else
      run gdx $DEV_G $key $(job_args $job); run nvmet $DEV_K $key $(job_args $job)
    fi
  done
done
# PERF_OUT (bench/vm_perf.sh): each job once more on each target, profiled
if [ -x /share/perf/perf ]; then
  . /share/perf/vm_perf_guest.sh
  for job in $JOBS; do
    # shellcheck disable=SC2046
    perf_run nvmet-$job "${FIO[@]}" --filename=$DEV_K $(job_args $job)
    # shellcheck disable=SC2046
    perf_run gdx-$job "${FIO[@]}" --filename=$DEV_G $(job_args $job)
  done
fi
nvme disconnect -n $NQN_K >/dev/null
nvme disconnect -n $NQN_G >/dev/null
# how many commands each of the gdx target's queues took per ibv_post_send (RDMA)
grep -o 'qid [0-9]*: queue ends.*send posts' /tmp/gdx.log | sed 's/^/gdx posts: /'
kill $T; wait $T
