#!/bin/bash
# Guest side of t_rdma_host.sh.
. /share/guest_lib.sh
cd /share
export LD_LIBRARY_PATH=$PWD/lib GDX_DEVICE=emulated
export GDX_NVMF_HOST_KATO_MS=15000 GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000	# TCG is slow
NQN_K=nqn.2024-01.io.gdx:rdma-nvmet NQN_G=nqn.2024-01.io.gdx:rdma-gdx
need() {
  local d=$1; shift
  "$@" && { ok "$d"; return; }
  bad "$d"
  tail -20 /tmp/target.log 2>/dev/null | sed 's/^/  target: /'
  dmesg | grep -iE 'nvme|rdma|rxe' | tail -20 | sed 's/^/  dmesg: /'
  exit 1
}
# stops DESCRIPTION PID LOG: SIGTERM, then exit status 0; else the status and the log's end
stops() {
  local rc
  kill "$2"; wait "$2"; rc=$?
  [ $rc = 0 ] && { ok "$1"; return; }
  bad "$1 (exit status $rc)"
  tail -30 "$3" | sed 's/^/  target: /'
}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvmet-rdma nvme-rdma || exit 1
rdma link add rxe0 type rxe netdev eth0 || exit 1
A=$GUEST_IP
# nvmet-rdma on a 64 MiB file, port 4420
truncate -s 64M /tmp/k.img
C=/sys/kernel/config/nvmet
mkdir $C/subsystems/$NQN_K
echo 1 > $C/subsystems/$NQN_K/attr_allow_any_host
mkdir $C/subsystems/$NQN_K/namespaces/1
echo /tmp/k.img > $C/subsystems/$NQN_K/namespaces/1/device_path
echo 1 > $C/subsystems/$NQN_K/namespaces/1/buffered_io	# tmpfs has no O_DIRECT
echo 1 > $C/subsystems/$NQN_K/namespaces/1/enable
mkdir $C/ports/1
echo rdma > $C/ports/1/addr_trtype; echo ipv4 > $C/ports/1/addr_adrfam
echo $A > $C/ports/1/addr_traddr; echo 4420 > $C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN_K $C/ports/1/subsystems/$NQN_K
# the gdx target on port 4421
./gdx nvmf target -l "rdma://$A:4421" -n $NQN_G -N ram:32M >/tmp/target.log 2>&1 &
tpid=$!
for _ in $(seq 100); do grep -q 'target: ready' /tmp/target.log && break; sleep 0.1; done
head -c 3M /dev/urandom >/tmp/pat
head -c 4k /dev/urandom >/tmp/page
G=(./gdx nvmf)
B=(env GDX_NVMF_HOST_RDMA_DEVICE_REG=off GDX_NVMF_HOST_BOUNCE_CHUNK=16k
   GDX_NVMF_HOST_BOUNCE_CHUNKS=8 GDX_LOG_LEVEL=info)
# answers held for earlier ones, summed over the queues' closing lines in $1
held() {
  sed -n 's/.* \([0-9]*\) of them answered before an earlier one.*/\1/p' <<<"$1" |
    awk '{s += $1} END {print s + 0}'
}
for side in nvmet gdx; do
  if [ $side = nvmet ]; then P=4420 N=$NQN_K; else P=4421 N=$NQN_G; fi
  R=(-t rdma -a "$A" -s $P -n "$N")
  out=$("${G[@]}" discover -t rdma -a "$A" -s $P --json 2>&1); echo "  $out" | head -c 400; echo
  need "$side: gdx discovers over rdma" grep -q "$N" <<<"$out"
  out=$("${G[@]}" id-ctrl "${R[@]}" --json 2>&1); echo "  $out" | head -c 300; echo
  need "$side: gdx identifies over rdma" grep -q '"sgls"\|"cntlid"' <<<"$out"
  # the connect offers the controller as many RDMA READs (a write's data) at once as the
  # queue has entries, within the device's limit, as the Linux host offers the limit
  out=$(GDX_LOG_LEVEL=debug "${G[@]}" read "${R[@]}" -l 4k --to /tmp/x 2>&1)
  n=$(sed -n 's/.*queue 1: \([0-9]*\) entries, .*/\1/p' <<<"$out" | head -1)
  rd=$(ibv_devinfo -v -d rxe0 | awk '/max_qp_rd_atom:/ { print $2 }')
  want=$((n < rd ? n : rd))
  grep 'queue 1: .* entries' <<<"$out" | sed 's/^/  /'
  check "$side: queue 1 of $n entries offers $want RDMA READs at once (the device $rd)" \
    grep -q "queue 1: $n entries, $want RDMA READs at once offered" <<<"$out"
  check "$side: gdx writes 3 MiB from host memory" "${G[@]}" write "${R[@]}" -o 1M -l 3M \
    --from /tmp/pat --queues 2
  check "$side: gdx reads them back" "${G[@]}" read "${R[@]}" -o 1M -l 3M --to /tmp/back.$side
  check "$side:   same bytes" cmp /tmp/pat /tmp/back.$side
  # with nvmf.host.rdma_poll_us a receiver's poll window grows from 0 to cover its sleeps,
  # and it polls its CQ before it sleeps and finds completions so; without, it finds none
  # so (the counts are logged at close)
  for us in 50000 0; do
    out=$(GDX_NVMF_HOST_RDMA_POLL_US=$us GDX_LOG_LEVEL=debug "${G[@]}" read "${R[@]}" -o 1M \
      -l 3M --to /tmp/poll.$side 2>&1)
    polled=$(sed -n 's/.*completions found \([0-9]*\) times polling the CQ.*/\1/p' <<<"$out" |
      awk '{s += $1} END {print s + 0}')
    slept=$(sed -n 's/.* \([0-9]*\) times after a sleep.*/\1/p' <<<"$out" |
      awk '{s += $1} END {print s + 0}')
    if [ $us = 0 ]; then
      check "$side: a receiver that does not poll sleeps ($slept) and finds none so ($polled)" \
        test "$slept" -gt 0 -a "$polled" = 0
    else
      check "$side: a receiver polling its CQ ${us} us finds completions so ($polled)" \
        test "$polled" -gt 0
    fi
    check "$side:   same bytes" cmp /tmp/pat /tmp/poll.$side
  done
  check "$side: gdx reads into pinned memory" "${G[@]}" read "${R[@]}" -o 1M -l 3M -m pinned \
    --to /tmp/pinned.$side
  check "$side:   same bytes" cmp /tmp/pat /tmp/pinned.$side
  # a write of a page goes in the command capsule: copied from host memory, gathered by
  # the NIC from device memory
  check "$side: gdx writes a page in-capsule from host memory" "${G[@]}" write "${R[@]}" \
    -o 9M -l 4k --from /tmp/page
  check "$side:   read back, same bytes" cmp /tmp/page \
    <("${G[@]}" read "${R[@]}" -o 9M -l 4k --quiet --to -)
  check "$side: gdx writes a page in-capsule from device memory" "${G[@]}" write "${R[@]}" \
    -o 10M -l 4k -m gpu:0 --from /tmp/page
  check "$side:   read back, same bytes" cmp /tmp/page \
    <("${G[@]}" read "${R[@]}" -o 10M -l 4k --quiet --to -)
  # device memory: the NIC registers it and the target's RDMA moves the bytes in and out
  # of it; the CPU never touches the device pointer (any access would fault)
  out=$(GDX_LOG_LEVEL=info GDX_REQUIRE_DIRECT=1 "${G[@]}" write "${R[@]}" -o 5M -l 3M -m gpu:0 \
    --from /tmp/pat --queues 2 2>&1); rc=$?; echo "$out" | tail -3 | sed 's/^/  /'
  check "$side: gdx writes 3 MiB from device memory, path direct" \
    bash -c '[ "$0" = 0 ] && grep -q "path direct" <<<"$1"' $rc "$out"
  check "$side:   the NIC reached it as peer memory (no dma-buf here)" \
    grep -q "reaches device memory through peer memory" <<<"$out"
  check "$side:   one probe of device memory for both queues" \
    test "$(grep -c 'probed whether' <<<"$out")" = 1
  check "$side:   host memory reads them back" "${G[@]}" read "${R[@]}" -o 5M -l 3M \
    --to /tmp/dwr.$side
  check "$side:   same bytes" cmp /tmp/pat /tmp/dwr.$side
  out=$(GDX_REQUIRE_DIRECT=1 "${G[@]}" read "${R[@]}" -o 1M -l 3M -m gpu:0 \
    --to /tmp/dev.$side 2>&1); rc=$?; echo "$out" | tail -2 | sed 's/^/  /'
  check "$side: gdx reads 3 MiB into device memory, path direct" \
    bash -c '[ "$0" = 0 ] && grep -q "path direct" <<<"$1"' $rc "$out"
  check "$side:   same bytes" cmp /tmp/pat /tmp/dev.$side
  check "$side: the same, registered per command" env GDX_NVMF_HOST_RDMA_REGCACHE=0 \
    "${G[@]}" read "${R[@]}" -o 1M -l 3M -m gpu:0 --to /tmp/dev1.$side
  check "$side:   same bytes" cmp /tmp/pat /tmp/dev1.$side
  # Debian 12's kernel has no udmabuf, so no dma-buf: with only that way allowed, or
  # none, device memory bounces through registered host memory and the log says why
  out=$(GDX_NVMF_HOST_RDMA_DEVICE_REG=dmabuf "${G[@]}" read "${R[@]}" -o 1M -l 64k -m gpu:0 \
    --to /tmp/x 2>&1); rc=$?; echo "$out" | tail -2 | sed 's/^/  /'
  check "$side: dma-buf only: path bounce, with each way's answer" \
    bash -c '[ "$0" = 0 ] && grep -q "dma-buf: .*path bounce" <<<"$1"' $rc "$out"
  check "$side:   same bytes" cmp <(head -c 64k /tmp/pat) /tmp/x
  # registration off: 16k commands (the bounce chunk) over 3 queues of depth 16 keep up
  # to 8 in flight per queue (128k rings, which fill: submitters wait for room)
  out=$("${B[@]}" "${G[@]}" write "${R[@]}" -o 13M -l 3M -m gpu:0 --from /tmp/pat \
    --queues 3 --depth 16 2>&1); rc=$?; echo "$out" | grep -E "cannot register|path" | \
    sed 's/^/  /'
  check "$side: registration off: writes 3 MiB from device memory, path bounce" \
    bash -c '[ "$0" = 0 ] && grep -q "path bounce" <<<"$1"' $rc "$out"
  check "$side:   said why" grep -q "rdma_device_reg is off.*path bounce" <<<"$out"
  check "$side:   host memory reads them back" "${G[@]}" read "${R[@]}" -o 13M -l 3M \
    --to /tmp/bw.$side
  check "$side:   same bytes" cmp /tmp/pat /tmp/bw.$side
  out=$("${B[@]}" "${G[@]}" read "${R[@]}" -o 13M -l 3M -m gpu:0 --to /tmp/br.$side \
    --queues 3 --depth 16 2>&1); rc=$?; echo "$out" | grep -E "bounced|path" | sed 's/^/  /'
  check "$side: registration off: reads 3 MiB into device memory, path bounce" \
    bash -c '[ "$0" = 0 ] && grep -q "path bounce" <<<"$1"' $rc "$out"
  check "$side:   same bytes" cmp /tmp/pat /tmp/br.$side
  # a poll window never spins while bounced copies are in flight (their lane's wait
  # completes them); the reads come out whole with one
  check "$side:   the same with a poll window" env GDX_NVMF_HOST_RDMA_POLL_US=50000 \
    "${B[@]}" "${G[@]}" read "${R[@]}" -o 13M -l 3M -m gpu:0 --to /tmp/bp.$side --queues 3 \
    --depth 16
  check "$side:   same bytes" cmp /tmp/pat /tmp/bp.$side
  out=$(GDX_REQUIRE_DIRECT=1 GDX_NVMF_HOST_RDMA_DEVICE_REG=off "${G[@]}" read "${R[@]}" -o 1M \
    -l 64k -m gpu:0 --to /tmp/x 2>&1); rc=$?; echo "$out" | tail -2 | sed 's/^/  /'
  check "$side: registration off, require_direct: refused, naming why" \
    bash -c '[ "$0" != 0 ] && grep -q "rdma_device_reg is off.*require_direct is set" <<<"$1"' \
    $rc "$out"
  check "$side:   host memory still goes" env GDX_REQUIRE_DIRECT=1 \
    GDX_NVMF_HOST_RDMA_DEVICE_REG=off "${G[@]}" read "${R[@]}" -o 1M -l 64k --to /tmp/x
done
# answers out of order, for certain: nvmet's namespace 2 is a scsi_debug disk whose
# commands each take a random time up to 4 ms, so the bounced commands in flight on a
# queue are answered out of order and the later ones wait for the earlier ones
need "scsi_debug disk with random completion times" \
  modprobe -a sd_mod && modprobe scsi_debug dev_size_mb=8 ndelay=4000000 random=1
for _ in $(seq 50); do
  SD=$(grep -l scsi_debug /sys/block/sd*/device/model 2>/dev/null | head -1)
  [ -n "$SD" ] && break; sleep 0.1
done
SD=${SD%/device/model}; SD=/dev/${SD##*/}
need "  it appears as $SD" wait_dev "$SD"
mkdir $C/subsystems/$NQN_K/namespaces/2
echo "$SD" > $C/subsystems/$NQN_K/namespaces/2/device_path
need "  nvmet serves it as namespace 2" bash -c "echo 1 > $C/subsystems/$NQN_K/namespaces/2/enable"
R=(-t rdma -a "$A" -s 4420 -n "$NQN_K" -N 2)
out=$("${B[@]}" "${G[@]}" write "${R[@]}" -o 1M -l 3M -m gpu:0 --from /tmp/pat --queues 3 \
  --depth 16 2>&1); rc=$?; echo "$out" | grep -E "bounced|path" | sed 's/^/  /'
check "random latencies: writes 3 MiB from device memory, path bounce" \
  bash -c '[ "$0" = 0 ] && grep -q "path bounce" <<<"$1"' $rc "$out"
check "  answers out of order were held for earlier ones ($(held "$out"))" test "$(held "$out")" -gt 0
check "  host memory reads them back" "${G[@]}" read "${R[@]}" -o 1M -l 3M --to /tmp/sdw
check "  same bytes" cmp /tmp/pat /tmp/sdw
out=$("${B[@]}" "${G[@]}" read "${R[@]}" -o 1M -l 3M -m gpu:0 --to /tmp/sdr --queues 3 \
  --depth 16 2>&1); rc=$?; echo "$out" | grep -E "bounced|path" | sed 's/^/  /'
check "random latencies: reads 3 MiB into device memory, path bounce" \
  bash -c '[ "$0" = 0 ] && grep -q "path bounce" <<<"$1"' $rc "$out"
check "  answers out of order were held for earlier ones ($(held "$out"))" test "$(held "$out")" -gt 0
check "  same bytes" cmp /tmp/pat /tmp/sdr
# Timeouts as on TCP: nvmet serves the same subsystem over TCP too, and scsi_debug now
# holds each command 1250 jiffies (5 s at Debian's HZ 250), past a 1 s I/O timeout.  On
# either transport the read fails as timed out, soon after the timeout: the teardown of
# the queue it held, the reconnect and the disconnect do not wait for nvmet's answer.
modprobe nvmet-tcp
mkdir $C/ports/2
echo tcp > $C/ports/2/addr_trtype; echo ipv4 > $C/ports/2/addr_adrfam
echo $A > $C/ports/2/addr_traddr; echo 4425 > $C/ports/2/addr_trsvcid
ln -s $C/subsystems/$NQN_K $C/ports/2/subsystems/$NQN_K
# (random off first: it draws each command's time from 0 to the delay, and one in five
# would then be answered within the timeout)
need "scsi_debug holds each command 5 s" \
  bash -c 'echo 0 > /sys/bus/pseudo/drivers/scsi_debug/random &&
    echo 1250 > /sys/bus/pseudo/drivers/scsi_debug/delay'
# ms_of CMD...: how long CMD took, in ms ($ms), its status ($rc) and output ($out)
ms_of() {
  local t0=$(date +%s%N)
  out=$("$@" 2>&1); rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}
for tr in rdma tcp; do
  P=4420; [ $tr = tcp ] && P=4425
  # the same read of namespace 1, answered at once: what connecting and going cost here
  ms_of "${G[@]}" read -t $tr -a "$A" -s $P -n "$NQN_K" -l 4k --to /tmp/x; base=$ms
  ms_of env GDX_NVMF_HOST_IO_TIMEOUT_MS=1000 "${G[@]}" read -t $tr -a "$A" -s $P -n "$NQN_K" \
    -N 2 -l 4k --to /tmp/x
  echo "$out" | grep -vE "^\[#" | tail -4 | sed 's/^/  /'
  check "$tr: a read held past the 1 s I/O timeout fails, timed out ($ms ms, $base answered)" \
    bash -c '[ "$0" != 0 ] && grep -q "timed out after 1000 ms" <<<"$1"' $rc "$out"
  check "$tr:   the host did not wait for the answer" test $ms -lt $((base + 3500))
done
# back to a jiffy once the held commands are answered (busy until then)
for _ in $(seq 150); do
  echo 1 2>/dev/null > /sys/bus/pseudo/drivers/scsi_debug/delay && break; sleep 0.1
done
# Request buffers are bounded.  The host keeps 32 commands of 256 KiB in flight on each
# of 2 queues (16 MiB of buffers a target without limits holds); a target allowed 1 MiB
# a queue, then one allowed 1 MiB in all, makes the rest wait and still serves every
# byte, and its peak RSS shows what it held (+6 and +5 MiB, of which ~2 are queues and
# threads and up to 4 the shared receive queue's; +26 MiB before the limits covered RDMA).
head -c 16M /dev/urandom >/tmp/b16
truncate -s 16M /tmp/bnd.img
bounded() {
  local what=$1 bpid rss0 hwm; shift
  env "$@" ./gdx nvmf target -l "rdma://$A:4422" -n $NQN_G -N /tmp/bnd.img >/tmp/bnd.log 2>&1 &
  bpid=$!
  for _ in $(seq 100); do grep -q 'target: ready' /tmp/bnd.log && break; sleep 0.1; done
  rss0=$(awk '/VmRSS/{print $2}' /proc/$bpid/status)
  local L=(-t rdma -a "$A" -s 4422 -n "$NQN_G" --queues 2 --depth 32 -l 16M --quiet)
  check "$what: 64 writes of 256 KiB on 2 queues" env GDX_NVMF_HOST_MAX_IO=256K \
    "${G[@]}" write "${L[@]}" --from /tmp/b16
  check "$what: 64 reads of 256 KiB back" env GDX_NVMF_HOST_MAX_IO=256K \
    "${G[@]}" read "${L[@]}" --to /tmp/b16.back
  check "$what:   same bytes" cmp /tmp/b16 /tmp/b16.back
  hwm=$(awk '/VmHWM/{print $2}' /proc/$bpid/status)
  echo "  $what: target RSS $rss0 KiB before, peak $hwm KiB"
  check "$what: commands waited for buffers" grep -q "its commands wait for buffers" /tmp/bnd.log
  grep -m1 "its commands wait" /tmp/bnd.log | sed 's/^/  target: /'
  check "$what: the target's peak RSS grew by less than 12 MiB" test $((hwm - rss0)) -lt 12288
  stops "$what: the target stops cleanly" $bpid /tmp/bnd.log
}
bounded "1 MiB a queue" GDX_NVMF_TARGET_CONN_BUF_MAX=1M
bounded "1 MiB in all" GDX_NVMF_TARGET_BUF_MAX=1M
# One command at a time a queue (64 KiB allowed, 256 KiB commands), 8 queues of 32 on the
# target's one reactor and its shared receive queue of 256, 3 rounds of reads: a
# response's completion and the host's next command often come in one poll, and a command
# that waited while holding the buffer of the request it took once kept the queue stuck
# with nothing running.  A stuck read fails in 10 s here (the host's I/O timeout; it
# would then reconnect and resend).
GDX_NVMF_TARGET_CONN_BUF_MAX=64K GDX_NVMF_TARGET_RDMA_SRQ=256 ./gdx nvmf target \
  -l "rdma://$A:4422" -n $NQN_G -N /tmp/bnd.img >/tmp/bnd.log 2>&1 &
bpid=$!
for _ in $(seq 100); do grep -q 'target: ready' /tmp/bnd.log && break; sleep 0.1; done
O=(-t rdma -a "$A" -s 4422 -n "$NQN_G" --queues 8 --depth 32 -l 16M --quiet)
export GDX_NVMF_HOST_MAX_IO=256K GDX_NVMF_HOST_IO_TIMEOUT_MS=10000
for round in 1 2 3; do
  check "one at a time: round $round: 64 reads of 256 KiB on 8 queues" \
    "${G[@]}" read "${O[@]}" --to /tmp/b16.back 2>/tmp/one.log
  check "one at a time: round $round:   same bytes" cmp /tmp/b16 /tmp/b16.back
  check "one at a time: round $round:   no command timed out" \
    bash -c '! grep -m3 "timed out\|reconnect" /tmp/one.log'
done
unset GDX_NVMF_HOST_MAX_IO GDX_NVMF_HOST_IO_TIMEOUT_MS
stops "one at a time: the target stops cleanly" $bpid /tmp/bnd.log
# the gdx target dies in the middle of a read into device memory and comes back: the
# host reconnects over rdma and the read completes with the same bytes.  The read goes to a reader that stops
# after its first MiB: the host's window (4 pieces of 8 MiB) then fills and its fifth
# piece cannot be asked for until the reader goes on, so the 40 MiB read is under way
# when the target dies, on any machine, however fast.
stops "the gdx target on RAM stops cleanly" $tpid /tmp/target.log
head -c 40M /dev/urandom >/tmp/big
# ready_on PID: the target's "ready" line within 60 s (a loaded machine starts it slowly)
ready_on() {
  local i
  for i in $(seq 600); do
    grep -q 'target: ready' /tmp/target.log && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
./gdx nvmf target -l "rdma://$A:4421" -n $NQN_G -N /tmp/big >/tmp/target.log 2>&1 &
tpid=$!
need "the gdx target on a 40 MiB file is ready" ready_on $tpid
R=(-t rdma -a "$A" -s 4421 -n "$NQN_G")
rm -f /tmp/big.fifo; mkfifo /tmp/big.fifo
GDX_LOG_LEVEL=info GDX_NVMF_HOST_RECONNECT_DELAY_MS=500 "${G[@]}" read "${R[@]}" -l 40M \
  -m gpu:0 --quiet --to - >/tmp/big.fifo 2>/tmp/reread.log &
rpid=$!
exec 3</tmp/big.fifo
timeout 60 dd bs=1M count=1 iflag=fullblock status=none <&3 >/tmp/big.back
check "the read's first MiB arrives" test "$(stat -c %s /tmp/big.back)" = 1048576
check "  the read is under way, held by its reader" kill -0 $rpid
kill -9 $tpid; wait $tpid 2>/dev/null
./gdx nvmf target -l "rdma://$A:4421" -n $NQN_G -N /tmp/big >/tmp/target.log 2>&1 &
tpid=$!
check "the restarted target is ready" ready_on $tpid
# the reader goes on once the host is back (or has given up: the checks below say which)
for _ in $(seq 300); do grep -q 'reconnected\|gave up' /tmp/reread.log && break; sleep 0.1; done
timeout 120 cat <&3 >>/tmp/big.back
exec 3<&-
wait $rpid; rc=$?
sed 's/^/  read: /' /tmp/reread.log | tail -6
check "the read survives the target's restart" test $rc = 0
check "  it reconnected" grep -q reconnected /tmp/reread.log
check "  into device memory, probed once: the reconnect kept the answer" \
  test "$(grep -c 'probed whether' /tmp/reread.log)" = 1
check "  same bytes" cmp /tmp/big /tmp/big.back
# the kernel host reads what gdx wrote to nvmet's namespace
need "kernel host connects to nvmet-rdma" nvme connect -t rdma -a "$A" -s 4420 -n $NQN_K
need "namespace appears" wait_dev /dev/nvme0n1
check "the kernel host reads gdx's write" cmp /tmp/pat \
  <(dd if=/dev/nvme0n1 bs=1M skip=1 count=3 iflag=direct status=none)
check "disconnect" nvme disconnect -n $NQN_K
stops "the restarted gdx target stops cleanly" $tpid /tmp/target.log
finish
