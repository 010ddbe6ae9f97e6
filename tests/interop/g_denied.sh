#!/bin/bash
# Guest: this host's NQN is not on the subsystem's list.
. /share/guest_lib.sh
P=$1 NQN=$2
modprobe nvme-tcp
out=$(nvme discover -t tcp -a "$HOST_IP" -s "$P" 2>&1); echo "$out" | sed 's/^/  /' | head
check "discovery shows this host nothing" grep -q 'Number of Records 0' <<<"$out"
if nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" 2>&1; then bad "connect should fail"; else ok "connect refused"; fi
check "kernel names the reason" grep -q 'is not allowed' <(dmesg)
check "no controller left" test ! -e /dev/nvme0n1
# the allowed host NQN gets in
check "allowed host connects" nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" -q "$3"
check "namespace appears" wait_dev /dev/nvme0n1
check "disconnect" nvme disconnect -n "$NQN"
finish
