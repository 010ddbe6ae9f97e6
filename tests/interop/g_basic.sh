#!/bin/bash
# Guest: discover, connect with 2 I/O queues, identify, SMART, flush, fio verify, disconnect.
. /share/guest_lib.sh
P=$1 NQN=$2
modprobe nvme-tcp
out=$(nvme discover -t tcp -a "$HOST_IP" -s "$P" 2>&1); echo "$out" | sed 's/^/  /' | head -30
check "discover lists $NQN" grep -q "subnqn: *$NQN" <<<"$out"
check "connect (2 I/O queues)" nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" -i 2
check "namespace 1 appears" wait_dev /dev/nvme0n1
check "namespace 2 appears" wait_dev /dev/nvme0n2
nvme list | sed 's/^/  /'
check "model is gdx" grep -q '^mn *: gdx' <(nvme id-ctrl /dev/nvme0)
check "subnqn in id-ctrl" grep -q "subnqn *: $NQN" <(nvme id-ctrl /dev/nvme0)
check "2 I/O queues" grep -q 'mapped 2/0/0' <(dmesg)
check "id-ns nsze (64 MiB of 512 B)" grep -q 'nsze *: 0x20000' <(nvme id-ns /dev/nvme0n1)
check "ns 2 has 4 KiB blocks" grep -q '4096' /sys/block/nvme0n2/queue/logical_block_size
check "id-ns nguid non-zero" grep -qv 'nguid *: 0\+$' <(nvme id-ns /dev/nvme0n1 | grep nguid)
check "smart-log" sh -c 'nvme smart-log /dev/nvme0 -o json >/dev/null'
check "flush" nvme flush /dev/nvme0n1 -n 1
check "fio verify on the file namespace" fio_verify /dev/nvme0n1 24M
check "fio verify on the RAM namespace" fio_verify /dev/nvme0n2 16M
check "smart-log counts host writes" awk '/host_write_commands/ {exit !($3 > 0)}' <(nvme smart-log /dev/nvme0)
check "disconnect" nvme disconnect -n "$NQN"
check "device gone" wait_gone /dev/nvme0n1
finish
