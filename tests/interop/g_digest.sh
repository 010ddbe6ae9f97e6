#!/bin/bash
# Guest: header + data digests, 2 default + 2 read queues, fio verify, disconnect;
# then a connection with SQ flow control disabled (C2HData SUCCESS), fio verify.
. /share/guest_lib.sh
P=$1 NQN=$2
modprobe nvme-tcp
check "connect with digests, 4 I/O queues" \
  nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" -i 2 -W 2 --hdr-digest --data-digest
check "namespace appears" wait_dev /dev/nvme0n1
check "4 I/O queues" grep -q 'mapped 2/2/0' <(dmesg)
check "fio verify with digests" fio_verify /dev/nvme0n1 16M
check "fio verify, reads on the read queues" fio_verify /dev/nvme0n1 8M --offset=32M --rw=randrw
check "disconnect" nvme disconnect -n "$NQN"
check "device gone" wait_gone /dev/nvme0n1
# SQ flow control off: reads complete with C2HData SUCCESS and no CapsuleResp
check "connect with SQ flow control disabled" \
  nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" --disable-sqflow
check "namespace appears" wait_dev /dev/nvme0n1
check "fio verify without SQ flow control" fio_verify /dev/nvme0n1 8M --offset=40M
check "disconnect" nvme disconnect -n "$NQN"
finish
