#!/bin/bash
# Guest side of t_rdma_kernel_host.sh: Soft-RoCE on eth0, the gdx target on rdma://,
# the kernel's nvme-rdma host against it, then rdma_probe's bad input.
. /share/guest_lib.sh
NQN=$1 NQN2=$1-closed P=4420
cd /share
export LD_LIBRARY_PATH=$PWD/lib
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
truncate -s 64M /tmp/ns1.img
tpid=
# start [OPTIONS]: the target, with OPTIONS added
start() {
  : >/tmp/target.log
  GDX_LOG_LEVEL=debug GDX_NVMF_TARGET_STALL_TIMEOUT_MS=2000 ./gdx nvmf target -l "rdma://$GUEST_IP:$P" -n "$NQN" -N /tmp/ns1.img \
    -N ram:32M,bs=4096 -n "$NQN2" -N ram:8M -H nqn.2014-08.org.nvmexpress:uuid:someone-else \
    "$@" >>/tmp/target.log 2>&1 &
  tpid=$!
  for _ in $(seq 100); do grep -q 'target: ready' /tmp/target.log && return 0; sleep 0.1; done
  return 1
}
# give up at the first step that fails: what follows needs it
need() {
  local d=$1; shift
  "$@" && { ok "$d"; return; }
  bad "$d"
  grep -v DEBUG /tmp/target.log | tail -40 | sed 's/^/  target: /'
  dmesg | grep -iE 'nvme|rdma|rxe' | tail -20 | sed 's/^/  dmesg: /'
  exit 1
}
# the first life's queue pairs take their commands from the reactor's shared receive queue
# (the default)
start
need "target listens on rdma" grep -q "listening on rdma $GUEST_IP:$P" /tmp/target.log
out=$(nvme discover -t rdma -a "$GUEST_IP" -s $P 2>&1); echo "$out" | sed 's/^/  /' | head -30
need "discover lists $NQN" grep -q "subnqn: *$NQN\$" <<<"$out"
check "discover says rdma" grep -q "trtype: *rdma" <<<"$out"
check "discover gives the RDMA fields" grep -q "rdma_cms: *rdma-cm" <<<"$out"
need "connect over rdma (2 I/O queues)" nvme connect -t rdma -a "$GUEST_IP" -s $P -n "$NQN" -i 2 \
  --reconnect-delay=1 --ctrl-loss-tmo=60
need "namespace 1 appears" wait_dev /dev/nvme0n1
check "namespace 2 appears" wait_dev /dev/nvme0n2
nvme list | sed 's/^/  /'
check "transport is rdma" grep -q rdma /sys/class/nvme/nvme0/transport
check "model is gdx" grep -q '^mn *: gdx' <(nvme id-ctrl /dev/nvme0)
sgls=$(nvme id-ctrl /dev/nvme0 | awk '/^sgls/ {print $3}')
check "keyed SGLs advertised ($sgls)" test $(( ${sgls:-0} & 4 )) = 4
check "id-ns nsze (64 MiB of 512 B)" grep -q 'nsze *: 0x20000' <(nvme id-ns /dev/nvme0n1)
check "smart-log" sh -c 'nvme smart-log /dev/nvme0 -o json >/dev/null'
check "flush" nvme flush /dev/nvme0n1 -n 1
check "fio verify on the file namespace" fio_verify /dev/nvme0n1 24M
check "fio verify on the RAM namespace" fio_verify /dev/nvme0n2 16M
check "its queues took commands from a shared receive queue" \
  grep -q "a shared receive queue of 256 receives" /tmp/target.log
head -c 3M /dev/urandom >/tmp/pat
check "write a pattern" dd if=/tmp/pat of=/dev/nvme0n2 bs=1M oflag=direct status=none
# the target restarts under the connected host: it reconnects and the RAM is new
kill "$tpid"; wait "$tpid"
check "target stops cleanly" test $? = 0
# a queue pair on the shared receive queue goes once the device said it took its last
# receive, or, from a device that never says so, 2 s after the queue's end
check "  its queue pairs went after Last WQE Reached (or without, counted)" \
  grep -qE "last WQE reached|no Last WQE Reached" /tmp/target.log
grep -m2 -E "last WQE reached|no Last WQE Reached" /tmp/target.log | sed 's/^/  target: /'
# the second life polls its completion queues (--poll-us) instead of sleeping on them, and
# gives each queue pair its own receives
GDX_NVMF_TARGET_RDMA_SRQ=0 need "target restarts (polling, no shared receive queue)" \
  start --poll-us 500
for _ in $(seq 300); do grep -q live /sys/class/nvme/nvme0/state 2>/dev/null && \
  grep -q 'connect: host' /tmp/target.log && break; sleep 0.1; done
check "the host reconnects" grep -q live /sys/class/nvme/nvme0/state
check "I/O after the reconnect" dd if=/tmp/pat of=/dev/nvme0n2 bs=1M oflag=direct status=none
check "  on receive queues of its own" bash -c '! grep -q "shared receive queue of" /tmp/target.log'
check "disconnect" nvme disconnect -n "$NQN"
check "device gone" wait_gone /dev/nvme0n1
if ! nvme connect -t rdma -a "$GUEST_IP" -s $P -n "$NQN2" >/tmp/closed.out 2>&1; then
  ok "a host that is not allowed is refused"
else
  bad "a host that is not allowed is refused"; nvme disconnect -n "$NQN2"
fi
if [ -x ./rdma_probe ]; then
  ./rdma_probe "$GUEST_IP" $P "$NQN"; check "bad connect requests and capsules (rdma_probe)" test $? = 0
  check "  the stalled queue's end is logged" grep -q "not completed by the host for" /tmp/target.log
  # the queue that ended before its RTU: its disconnect went out once the CM had the
  # connection established (by the RTU, or earlier by the capsule's COMM_EST)
  check "  the queue ended before its RTU is disconnected" \
    grep -qE "ended before established: disconnect sent now|a capsule before the RTU" /tmp/target.log
  grep -m1 "not completed by the host" /tmp/target.log | sed 's/^/  target: /'
else
  bad "rdma_probe was not built"
fi
need "connect again" nvme connect -t rdma -a "$GUEST_IP" -s $P -n "$NQN" -i 1
check "namespace 2 back" wait_dev /dev/nvme0n2
check "pattern reads back" cmp -n 3145728 /tmp/pat <(dd if=/dev/nvme0n2 bs=1M count=3 iflag=direct status=none)
check "disconnect again" nvme disconnect -n "$NQN"
check "device gone again" wait_gone /dev/nvme0n1
kill "$tpid"; wait "$tpid"
check "target stops cleanly" test $? = 0
# a polling reactor looks at the clock and at epoll (each a system call in this guest,
# whose clock source is an HPET) once in 16 polls, not at every poll
rl=$(grep -m1 -oE 'rdma reactor 0: [0-9]+ polls of its completion queues, [0-9]+ clock reads, [0-9]+ event waits' /tmp/target.log)
echo "  target: $rl"
read -r polls clocks waits <<<"$(echo "$rl" | grep -oE '[0-9]+ (polls|clock|event)' | cut -d' ' -f1 | tr '\n' ' ')"
check "  polling: the clock read at most once in 4 polls" test "${polls:-0}" -gt 0 -a "$((4 * ${clocks:-0}))" -le "${polls:-0}"
check "  polling: epoll asked at most once in 4 polls" test "$((4 * ${waits:-0}))" -le "${polls:-0}"
grep -Ev 'DEBUG' /tmp/target.log | tail -20 | sed 's/^/  target: /'
finish
