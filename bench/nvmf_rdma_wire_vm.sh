#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the gdx host and the kernel host ask of the same nvmet-rdma target on the wire,
# per 128 KiB read: in the qemu guest (tests/interop/vm.sh) nvmet-rdma serves a null_blk
# namespace over rdma_rxe; the kernel host (fio, 128 KiB random reads at depth 32) and
# then the gdx host (`gdx bench nvmf-host --qd none`, same job) each read for a while,
# and around each job the script reads rxe0's counters
# (/sys/class/infiniband/rxe0/ports/1/hw_counters: packets sent and received, RDMA
# sends and receives, RNR NAKs, sequence errors, retries, duplicates) and traces nvmet's
# commands (nvmet:nvmet_req_init: how many reads the target saw, their length and
# flags, and per I/O queue the vCPU nvmet took them on), and prints the counters per
# read, both hosts side by side.  rxe loops packets to its own address back inside the
# kernel, so tcpdump on eth0 sees none of them: the counters are the wire.  With a
# 1024-byte path MTU a 128 KiB read is 128 RDMA WRITE packets, the command's and the
# response's SENDs, and the ACKs.  The guest's CPU time
# beside: the host process's, and the rest (the target, rxe, softirqs); and this
# machine's CPU time in qemu (qemu_cpu_ms), the only one of them that is work: TCG's
# guest clock runs on while a vCPU waits for this machine.
#
#   bench/nvmf_rdma_wire_vm.sh [SECONDS] [gdx bench args...]
#   (GDX_BUILDDIR picks the build, default build; MEMS: the gdx host's memory kinds, one
#   job each, default host; GDX_NVMF_HOST_* knobs and GDX_DEVICE are passed in;
#   WIRE_LOG=FILE keeps the guest's raw output; ARMS: gdx host variants to compare in the
#   same guest, space-separated, each comma-separated GDX_NVMF_HOST_*=VALUE knobs over the
#   caller's and gdx=PATH for another gdx binary: one job each per memory kind, in
#   order, named gdx-MEM-1, gdx-MEM-2...)
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
hostknobs=$(env | grep -E '^GDX_(NVMF_HOST_[A-Z_0-9]*|DEVICE)=[^ ]*$' | tr '\n' ' ')
# gdxjobs: the guest's gdx host jobs for memory kind $m, one per arm
read -ra arms <<<"${ARMS:-}"
[ ${#arms[@]} -gt 0 ] || arms=("")
gdxjobs=""
for i in "${!arms[@]}"; do
  bin=/share/gdx libs=/share/lib knobs="" name='gdx-$m'
  [ ${#arms[@]} -gt 1 ] && name+=-$((i + 1))
  IFS=, read -ra kv <<<"${arms[$i]}"
  for x in "${kv[@]}"; do
    case $x in
      gdx=*) mkdir "$share/arm$i" && "$top/tests/interop/vm.sh" share "$share/arm$i" "${x#gdx=}" ||
               exit 2
             bin=/share/arm$i/$(basename "${x#gdx=}") libs=/share/arm$i/lib:/share/lib ;;
      GDX_NVMF_HOST_*=*) knobs+=" $x" ;;
      *) echo "ARMS: $x is neither a GDX_NVMF_HOST_* knob nor gdx=PATH" >&2; exit 2 ;;
    esac
  done
  gdxjobs+="  echo \"# $name: arm $((i + 1)):${arms[$i]:+ ${arms[$i]}}\"
  job $name env LD_LIBRARY_PATH=$libs GDX_NVMF_HOST_KATO_MS=30000 $hostknobs$knobs \\
    $bin bench nvmf-host --transport rdma -a \$A -s 4420 -n \$NQN -t $secs --rounds 1 \\
    --queues \$(nproc) --qd none --no-tcp -m \$m \"\$@\"
"
done
cat >"$share/guest.sh" <<GUEST
#!/bin/bash
set -u
NQN=nqn.2024-01.io.gdx:wire
T=/sys/kernel/tracing
mount -t tracefs tracefs \$T 2>/dev/null
modprobe null_blk nr_devices=1 gb=1 bs=4096 >/dev/null
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvmet-rdma nvme-rdma || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
A=\$GUEST_IP
cd /sys/kernel/config/nvmet
mkdir subsystems/\$NQN; echo 1 > subsystems/\$NQN/attr_allow_any_host
mkdir subsystems/\$NQN/namespaces/1
echo /dev/nullb0 > subsystems/\$NQN/namespaces/1/device_path
echo 1 > subsystems/\$NQN/namespaces/1/enable
mkdir ports/1; echo rdma > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam
echo \$A > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/\$NQN ports/1/subsystems/\$NQN
cd /share
echo "# guest: \$(nproc) vCPUs, kernel \$(uname -r), eth0 mtu \$(cat /sys/class/net/eth0/mtu)"
ibv_devinfo -v -d rxe0 | grep -E 'active_mtu|max_qp_rd_atom|max_qp_init_rd_atom|max_sge:' |
  sed 's/^[[:space:]]*/# rxe0: /'
echo 8192 > \$T/buffer_size_kb
# snap NAME: rxe0's counters, and the guest's CPU time (busy: user, nice, system, irq,
# softirq; idle: idle, iowait; USER_HZ) and context switches
snap() {
  echo "SNAP \$1"
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
    echo "CNT \$1 \${f##*/} \$(cat \$f)"
  done
  awk -v s=\$1 '/^cpu / { print "CNT", s, "cpu_busy_ms", 10 * (\$2 + \$3 + \$4 + \$7 + \$8);
                          print "CNT", s, "cpu_softirq_ms", 10 * \$8;
                          print "CNT", s, "cpu_idle_ms", 10 * (\$5 + \$6) }
                /^ctxt/ { print "CNT", s, "context_switches", \$2 }' /proc/stat
}
# job NAME CMD...: the command between two snaps, its CPU time (its shell's waited-for
# children's) and nvmet's reads (traced) beside
job() {
  local n=\$1; shift
  echo > \$T/trace
  echo 1 > \$T/events/nvmet/nvmet_req_init/enable
  snap \$n-0
  sh -c '"\$@" || exit; awk "{ print 10 * (\\\$16 + \\\$17) }" /proc/\$\$/stat' sh "\$@" \\
    >/tmp/\$n.out 2>&1 || { echo "\$n failed:"; tail -20 /tmp/\$n.out; }
  snap \$n-1
  echo 0 > \$T/events/nvmet/nvmet_req_init/enable
  echo "CNT \$n-0 host_cpu_ms 0"
  echo "CNT \$n-1 host_cpu_ms \$(tail -1 /tmp/\$n.out)"
  grep -o 'qid=[1-9][0-9]*.*cmd=(nvme_cmd_read[^)]*)' \$T/trace |
    sed -E 's/.*flags=([0-9a-fx]+).*len=([0-9]+).*/\1 \2/' | sort | uniq -c |
    sed "s/^ *\([0-9]*\) /READ \$n \1 /"
  grep 'nvme_cmd_read' \$T/trace | sed -nE 's/.*\[([0-9]+)\].* qid=([0-9]+),.*/\2 \1/p' |
    sort | uniq -c | sed "s/^ *\([0-9]*\) /QCPU \$n \1 /"
  grep -E 'IOPS|GB/s|read:' /tmp/\$n.out | head -4 | sed "s/^/# \$n: /"
}
nvme connect -t rdma -a \$A -s 4420 -n \$NQN >/dev/null || exit 1
for i in \$(seq 100); do [ -b /dev/nvme0n1 ] && break; sleep 0.1; done
echo "# kernel host: max_hw_sectors_kb \$(cat /sys/block/nvme0n1/queue/max_hw_sectors_kb)," \
  "max_segments \$(cat /sys/block/nvme0n1/queue/max_segments)," \
  "\$(dmesg | grep -o 'mapped [0-9/]* default/read/poll' | tail -1)"
job kernel fio --name=j --filename=/dev/nvme0n1 --direct=1 --ioengine=libaio --rw=randread \
  --bs=128k --iodepth=32 --runtime=$secs --time_based --norandommap
for m in ${MEMS:-host}; do
$gdxjobs
done
nvme disconnect -n \$NQN >/dev/null
GUEST
chmod +x "$share/guest.sh"
# qemu_ms: this machine's CPU time (ms) in the guest's qemu, its vCPUs' work.  Under TCG
# the guest's own clock counts the time a vCPU waits for this machine as the vCPU's, so
# its CPU time per read moves with this machine's load; qemu's does not.
qemu_ms() {
  local pids=$vm all="" kids p
  while [ -n "$pids" ]; do
    all="$all $pids" kids=""
    for p in $pids; do kids="$kids $(pgrep -P "$p")"; done
    pids=$(xargs <<<"$kids")
  done
  for p in $all; do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == qemu-system* ]] &&
      awk '{ print 10 * ($14 + $15) }' "/proc/$p/stat"
  done | head -1
}
mkfifo "$share/out.fifo"
VM_SHARE=$share VM_CPUS=${VM_CPUS:-2} VM_TIMEOUT=${VM_TIMEOUT:-600} \
  "$top/tests/interop/vm.sh" run "$share/guest.sh" "${@:2}" >"$share/out.fifo" 2>&1 &
vm=$!
while IFS= read -r line; do
  line=${line%$'\r'}
  printf '%s\n' "$line" >>"$share/out.log"
  case $line in
    "SNAP "*) echo "CNT ${line#SNAP } qemu_cpu_ms $(qemu_ms)" >>"$share/out.log" ;;
    "#"*|*failed*|*rror*) printf '%s\n' "$line" ;;
  esac
done <"$share/out.fifo"
wait $vm
[ -n "${WIRE_LOG:-}" ] && cp "$share/out.log" "$WIRE_LOG"
python3 - "$share/out.log" <<'PY'
import collections, sys
cnt, reads, qcpu = {}, collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    p = line.split()
    if p[:1] == ["CNT"]:
        cnt[(p[1], p[2])] = int(p[3])
    elif p[:1] == ["READ"]:
        reads[(p[1], p[3], int(p[4]))] += int(p[2])
    elif p[:1] == ["QCPU"]:
        qcpu[(p[1], int(p[3]), int(p[4]))] += int(p[2])
hosts = list(dict.fromkeys(k[0][:-2] for k in cnt))
n = {h: sum(v for (x, _, _), v in reads.items() if x == h) for h in hosts}
for h in hosts:
    print("%s: %d reads at the target: %s" % (h, n[h], ", ".join(
        "%d with flags %s, %d KiB" % (v, f, (l + 1) * 4)
        for (x, f, l), v in sorted(reads.items()) if x == h)))
for h in hosts:
    # where nvmet took each queue's reads: the vCPU its CQ work ran on
    print("%s: reads by queue and the vCPU nvmet took them on: %s" % (h, "; ".join(
        "queue %d: %s" % (q, ", ".join("vCPU %d %d" % (c, v) for (x, y, c), v in
                                        sorted(qcpu.items()) if x == h and y == q))
        for q in sorted({y for (x, y, _) in qcpu if x == h}))))
if not all(n.values()):
    sys.exit(1)
d = lambda h, name: (cnt.get((h + "-1", name), 0) - cnt.get((h + "-0", name), 0)) / n[h]
print("per read (CPU in ms, the job's start included):")
print("  %-22s" % "" + "".join(" %10s" % h for h in hosts))
for name in sorted({k[1] for k in cnt}):
    print("  %-22s" % name + "".join(" %10.2f" % d(h, name) for h in hosts))
# qemu_cpu_ms is the work; the guest's own figures move with this machine's load
# what the host's processes did not spend: the target's, rxe's, the rest of the kernel's
print("  %-22s" % "cpu_not_host_ms" + "".join(
    " %10.2f" % (d(h, "cpu_busy_ms") - d(h, "host_cpu_ms")) for h in hosts))
PY
