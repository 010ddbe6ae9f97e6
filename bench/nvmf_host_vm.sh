#!/bin/bash
# SPDX-License-Identifier: MIT
#
# gdx NVMe-oF host against the Linux kernel host, same target, same guest, same run:
# boots the qemu guest (tests/interop/vm.sh, Debian's stock kernel), exports a null_blk
# namespace through the guest's nvmet-tcp on 127.0.0.1:4420 (TRANSPORT=rdma: nvmet-rdma
# on the guest's address over rdma_rxe), connects the kernel host,
# and runs `gdx bench nvmf-host --fio-dev /dev/nvme0n1` inside the guest: fio on the
# kernel host's block device, then the gdx host on the same target, each line with its
# ratio to the kernel host, plus the guest's loopback TCP ceiling.  TCG makes both
# slow; the ratios are what count.
#
#   bench/nvmf_host_vm.sh [SECONDS] [gdx bench args...]
#   (GDX_BUILDDIR picks the build, default build; GDX_NVMF_HOST_* knobs and GDX_DEVICE
#   are passed in; PERF_OUT=DIR: then the 128 KiB job once more on each host, profiled
#   with perf, reports in DIR: bench/vm_perf.sh)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=${GDX_BUILDDIR:-$top/build}
secs=${1:-3}
gdx=$builddir/tools/gdx/gdx
[ -x "$gdx" ] || { echo "no gdx at $gdx (build first)" >&2; exit 2; }
share=$(mktemp -d)
trap 'rm -rf "$share"' EXIT
"$top/tests/interop/vm.sh" prepare >/dev/null || { echo "vm prepare failed"; exit 1; }
"$top/tests/interop/vm.sh" share "$share" "$gdx" || exit 1
. "$top/bench/vm_perf.sh"
vm_perf_share "$share" || exit 1
# the caller's GDX_NVMF_HOST_* knobs and GDX_DEVICE (emulated: pinned, gpu:0 memory
# in a guest without a GPU) reach the gdx host in the guest
hostknobs=$(env | grep -E '^GDX_(NVMF_HOST_[A-Z_0-9]*|DEVICE)=[^ ]*$' | tr '\n' ' ')
cat >"$share/guest.sh" <<GUEST
#!/bin/bash
set -u
NQN=nqn.2024-01.io.gdx:bench
modprobe null_blk nr_devices=1 gb=1 bs=4096 >/dev/null
TR=${TRANSPORT:-tcp} A=127.0.0.1
if [ \$TR = rdma ]; then
  modprobe -a rdma_rxe ib_uverbs rdma_ucm nvmet-rdma nvme-rdma || exit 1
  rdma link add rxe0 type rxe netdev eth0 || exit 1
  A=\$GUEST_IP
else
  modprobe -a nvmet-tcp nvme-tcp
fi
cd /sys/kernel/config/nvmet
mkdir subsystems/\$NQN; echo 1 > subsystems/\$NQN/attr_allow_any_host
mkdir subsystems/\$NQN/namespaces/1
echo /dev/nullb0 > subsystems/\$NQN/namespaces/1/device_path
echo 1 > subsystems/\$NQN/namespaces/1/enable
mkdir ports/1; echo \$TR > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam
echo \$A > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/\$NQN ports/1/subsystems/\$NQN
cd /
nvme connect -t \$TR -a \$A -s 4420 -n \$NQN >/dev/null || exit 1
for i in \$(seq 100); do [ -b /dev/nvme0n1 ] && break; sleep 0.1; done
echo "# guest: \$(nproc) vCPUs (TCG), kernel \$(uname -r), kernel host: \$(dmesg | grep -o 'mapped [0-9/]* default/read/poll' | tail -1)"
LD_LIBRARY_PATH=/share/lib GDX_NVMF_HOST_KATO_MS=30000 $hostknobs/share/gdx bench nvmf-host \
  --transport \$TR -a \$A -s 4420 -n \$NQN --fio-dev /dev/nvme0n1 -t $secs --queues \$(nproc) \
  \$([ \$TR = rdma ] && echo --no-tcp) "\${@}"
rc=\$?
if [ -x /share/perf/perf ]; then
  . /share/perf/vm_perf_guest.sh
  perf_run kernel-bw fio --name=j --filename=/dev/nvme0n1 --direct=1 --ioengine=libaio \
    --rw=randread --bs=128k --iodepth=32 --runtime=$secs --time_based --norandommap
  perf_run gdx-bw env LD_LIBRARY_PATH=/share/lib GDX_NVMF_HOST_KATO_MS=30000 $hostknobs \
    /share/gdx bench nvmf-host --transport \$TR -a \$A -s 4420 -n \$NQN -t $secs --rounds 1 \
    --queues \$(nproc) --qd none \$([ \$TR = rdma ] && echo --no-tcp) "\${@}"
fi
nvme disconnect -n \$NQN >/dev/null
exit \$rc
GUEST
chmod +x "$share/guest.sh"
VM_SHARE=$share VM_CPUS=${VM_CPUS:-2} VM_TIMEOUT=${VM_TIMEOUT:-900} \
  "$top/tests/interop/vm.sh" run "$share/guest.sh" "${@:2}"
rc=$?
vm_perf_collect "$share"
exit $rc
