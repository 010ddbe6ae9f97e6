#!/usr/bin/env bash
# What TLS 1.3 costs NVMe/TCP, gdx beside the kernel, in one Debian 13 guest (TCG,
# kernel 6.12 with kTLS; this machine's kernel has none): the kernel host (fio) reads
# from the gdx target and from nvmet-tcp, each over a clear port and a TLS-required
# port (tlshd doing the kernel's handshakes), and the gdx host (gdx bench nvmf-host)
# reads from both targets the same ways: 4 KiB random reads at depth 32 (IOPS) and
# 128 KiB reads at depth 32 (KiB/s), null namespaces, the guest's loopback.  TCG makes
# everything slow: the TLS/clear ratio of each pair, from the same run, is the result.
#   bench/nvmf_tls_vm.sh [BUILD_DIR]   (env: RUNTIME seconds per fio job, default 4;
#       GDX_OPTS, the gdx target's options, default -r 1)
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$top/build}
gdx=$build/tools/gdx/gdx
[ -x "$gdx" ] || { echo "no $gdx: build first"; exit 1; }
share=$(mktemp -d); trap 'rm -rf "$share"' EXIT
export VM_DIST=trixie
"$top/tests/interop/vm.sh" prepare >/dev/null || { echo "vm prepare failed"; exit 1; }
"$top/tests/interop/vm.sh" share "$share" "$gdx" || exit 1
cat >"$share/g.sh" <<'GUEST'
set -u
export LD_LIBRARY_PATH=/share/lib
T=$1 GDX_OPTS=$2 G=/share/gdx NQN=nqn.2024-01.io.gdx:bench NQN2=nqn.2024-01.io.gdx:nvmet-bench
KHOST=$(cat /etc/nvme/hostnqn) GHOST=nqn.2024-01.io.gdx:bench-host
KEY=$(python3 -c 'import base64,os,zlib;k=os.urandom(32);print("NVMeTLSkey-1:01:"+base64.b64encode(k+zlib.crc32(k).to_bytes(4,"little")).decode()+":")')
modprobe -a tls nvme-tcp nvmet nvmet-tcp null_blk
tlshd >/dev/null 2>&1 &
for h in $KHOST $GHOST; do for n in $NQN $NQN2; do
  nvme check-tls-key --hostnqn=$h --subsysnqn=$n --keydata="$KEY" --insert >/dev/null; done; done
cat >/tmp/gdx.json <<JSON
{ "subsystems": [ { "nqn": "$NQN", "attr": { "allow_any_host": "1" },
    "namespaces": [ { "nsid": 1, "enable": 1, "device": { "path": "null:1G" } } ] } ],
  "ports": [ { "portid": 1, "addr": { "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4420" },
               "subsystems": [ "$NQN" ] },
             { "portid": 2, "addr": { "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4421",
                 "treq": "required", "tsas": "tls1.3" }, "tls_key": "$KEY", "subsystems": [ "$NQN" ] } ] }
JSON
$G nvmf target -c /tmp/gdx.json $GDX_OPTS >/tmp/target.log 2>&1 &
C=/sys/kernel/config/nvmet
mkdir $C/subsystems/$NQN2; echo 1 >$C/subsystems/$NQN2/attr_allow_any_host
mkdir $C/subsystems/$NQN2/namespaces/1
echo /dev/nullb0 >$C/subsystems/$NQN2/namespaces/1/device_path; echo 1 >$C/subsystems/$NQN2/namespaces/1/enable
for p in 1 2; do
  mkdir $C/ports/$p; echo tcp >$C/ports/$p/addr_trtype; echo ipv4 >$C/ports/$p/addr_adrfam
  echo 127.0.0.1 >$C/ports/$p/addr_traddr; echo $((4429 + p)) >$C/ports/$p/addr_trsvcid
done
echo tls1.3 >$C/ports/2/addr_tsas; echo required >$C/ports/2/addr_treq
for p in 1 2; do ln -s $C/subsystems/$NQN2 $C/ports/$p/subsystems/; done
sleep 1
fio1() {  # DEV RW BS -> IOPS or KiB/s
  fio --name=b --filename=$1 --direct=1 --ioengine=libaio --rw=$2 --bs=$3 --iodepth=32 \
    --runtime=$T --time_based --output-format=terse --terse-version=3 2>/dev/null |
    awk -F';' -v bs=$3 '{print (bs == "4k" ? $8 : $7)}'
}
for t in "gdx clear 4420 $NQN" "gdx tls 4421 $NQN" "nvmet clear 4430 $NQN2" "nvmet tls 4431 $NQN2"; do
  set -- $t
  extra=; [ $2 = tls ] && extra=--tls
  nvme connect -t tcp -a 127.0.0.1 -s $3 -n $4 -i 2 $extra >/dev/null || { echo "RESULT $1 $2 connect-failed 0"; continue; }
  for i in $(seq 50); do [ -b /dev/nvme0n1 ] && break; sleep 0.1; done
  echo "RESULT kernel-host>$1 $2 iops_4k_qd32 $(fio1 /dev/nvme0n1 randread 4k)"
  echo "RESULT kernel-host>$1 $2 kibps_128k_qd32 $(fio1 /dev/nvme0n1 read 128k)"
  nvme disconnect -n $4 >/dev/null; sleep 0.5
  extra=; [ $2 = tls ] && extra="--tls-key $KEY"
  $G bench nvmf-host -a 127.0.0.1 -s $3 -n $4 --queues 2 --qd 32 --bw-qd 32 --bw-bs 128k -t $T -r 1 \
    --no-tcp --json $extra 2>/tmp/bench.err | python3 -c '
import json, sys
who, mode = sys.argv[1], sys.argv[2]
for l in sys.stdin:
    try: o = json.loads(l)
    except ValueError: continue
    print("RESULT gdx-host>%s %s %s" % (who, mode, json.dumps(o)))
' $1 $2
  tail -2 /tmp/bench.err
done
GUEST
VM_DIST=trixie VM_SHARE=$share VM_CPUS=2 VM_MEM=1536 VM_TIMEOUT=${VM_TIMEOUT:-900} \
  "$top/tests/interop/vm.sh" run "$share/g.sh" "${RUNTIME:-4}" "${GDX_OPTS:--r 1}" |
  tee "$share/out.log"
