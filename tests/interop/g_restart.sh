#!/bin/bash
# Guest: write a pattern, let the host restart the target, wait for the kernel
# to reconnect by itself, read the pattern back.
. /share/guest_lib.sh
P=$1 NQN=$2
modprobe nvme-tcp
check "connect" nvme connect -t tcp -a "$HOST_IP" -s "$P" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120
check "namespace appears" wait_dev /dev/nvme0n1
head -c 4M /dev/urandom > /tmp/pattern
check "write pattern" dd if=/tmp/pattern of=/dev/nvme0n1 bs=1M oflag=direct status=none
check "flush" nvme flush /dev/nvme0n1 -n 1
touch /share/written
for i in $(seq 600); do [ -e /share/restarted ] && break; sleep 0.1; done
check "host restarted the target" test -e /share/restarted
state() { cat /sys/class/nvme/nvme0/state 2>/dev/null; }
# the kernel notices the dead sockets, then reconnects every second
for i in $(seq 600); do [ "$(state)" != live ] && break; sleep 0.1; done
for i in $(seq 900); do [ "$(state)" = live ] && break; sleep 0.1; done
check "controller live again ($(state))" test "$(state)" = live
check "pattern reads back after the restart" cmp <(dd if=/dev/nvme0n1 bs=1M count=4 iflag=direct status=none) /tmp/pattern
check "fio verify after the restart" fio_verify /dev/nvme0n1 8M
check "disconnect" nvme disconnect -n "$NQN"
finish
