#!/bin/bash
# Host: the gdx NVMe/TCP host against the guest kernel's nvmet-tcp (VM_HOSTFWD):
# discover, identify; gdx writes data (from host and device memory, with and without
# digests) that the guest's own kernel host reads back, the kernel host writes data
# that gdx reads back; every comparison is byte for byte.  Then the port drops the
# subsystem mid-read and takes it back: the read completes after a reconnect.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d) VMPID=
trap '[ -n "$VMPID" ] && kill $VMPID 2>/dev/null; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_host_kernel.sh" "$SHARE/"
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:kernel-target
export GDX_DEVICE=emulated	# gpu:0 is the emulated device: device memory goes by bounce
export GDX_NVMF_HOST_KATO_MS=15000 GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000	# TCG is slow
head -c 1M /dev/urandom >"$SHARE/a.src"
head -c 2M /dev/urandom >"$SHARE/b.src"
head -c 1M /dev/urandom >"$SHARE/c.src"
VM_SHARE=$SHARE VM_HOSTFWD="tcp:127.0.0.1:$PORT-:4420" "$VM" run "$SHARE/g_host_kernel.sh" "$NQN" \
  >"$SHARE/vm.log" 2>&1 &
VMPID=$!
wait_flag() {
  local i
  for i in $(seq $((${2:-300} * 10))); do
    [ -e "$SHARE/$1" ] && return 0
    kill -0 $VMPID 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
fails=0
check() { local d=$1; shift; if "$@"; then echo "  ok: $d"; else echo "  FAILED: $d"; fails=$((fails + 1)); fi; }
has() { grep -q "$1" <<<"$2"; }
G=("$GDX" nvmf) A=(-a 127.0.0.1 -s "$PORT" -n "$NQN")
if wait_flag target.ready; then
  out=$("${G[@]}" discover -a 127.0.0.1 -s "$PORT" --json 2>&1); echo "  $out" | head -c 600; echo
  check "discover lists $NQN" has "\"subnqn\": \"$NQN\"" "$out"
  out=$("${G[@]}" id-ctrl "${A[@]}" --json 2>&1); echo "  $out" | head -c 600; echo
  check "id-ctrl: model Linux" has '"mn": "Linux"' "$out"
  check "id-ctrl: subnqn" has "\"subnqn\": \"$NQN\"" "$out"
  out=$("${G[@]}" id-ns "${A[@]}" --json 2>&1); echo "  $out"
  check "id-ns: 64 MiB" has '"bytes": 67108864, "nmic"' "$out"
  check "id-ns: 4 KiB blocks (nvmet takes the file's block size)" has '"block_size": 4096' "$out"
  check "gdx writes 1 MiB from host memory" "${G[@]}" write "${A[@]}" -o 1M -l 1M --from "$SHARE/a.src"
  check "gdx writes 2 MiB from device memory, header+data digests" \
    "${G[@]}" write "${A[@]}" -o 4M -l 2M --from "$SHARE/b.src" -m gpu:0 --hdr-digest --data-digest
  check "gdx refuses an unaligned offset" bash -c '! "$@"' _ "${G[@]}" read "${A[@]}" -o 100 -l 512
  touch "$SHARE/step1.done"
  if wait_flag step2.done; then
    check "kernel host reads what gdx wrote (host memory)" cmp "$SHARE/a.src" "$SHARE/a.guest"
    check "kernel host reads what gdx wrote (device memory, digests)" cmp "$SHARE/b.src" "$SHARE/b.guest"
    check "gdx reads what the kernel host wrote (host memory)" \
      "${G[@]}" read "${A[@]}" -o 8M -l 1M --to "$SHARE/c.gdx"
    check "  same bytes" cmp "$SHARE/c.src" "$SHARE/c.gdx"
    check "gdx reads into device memory with digests and 4 queues" \
      "${G[@]}" read "${A[@]}" -o 8M -l 1M -m gpu:0 --hdr-digest --data-digest --queues 4 \
      --to "$SHARE/c.gdx2"
    check "  same bytes" cmp "$SHARE/c.src" "$SHARE/c.gdx2"
    check "gdx reads into pinned memory" "${G[@]}" read "${A[@]}" -o 8M -l 1M -m pinned \
      --to "$SHARE/c.gdx3"
    check "  same bytes" cmp "$SHARE/c.src" "$SHARE/c.gdx3"
    # the kernel target drops the association mid-read and comes back: gdx reconnects.
    # The whole namespace (about 3 s under TCG): 16 MiB (0.7 s) could end before
    # the guest, polling for fault.now, had dropped it.
    check "gdx reads 64 MiB as a reference" "${G[@]}" read "${A[@]}" -l 64M --to "$SHARE/r1"
    GDX_NVMF_HOST_RECONNECT_DELAY_MS=2000 "${G[@]}" read "${A[@]}" -l 64M --queues 2 --json \
      --to "$SHARE/r2" >"$SHARE/r2.json" 2>"$SHARE/r2.err" &
    rpid=$!
    sleep 0.5
    touch "$SHARE/fault.now"
    wait $rpid; rc=$?
    sed 's/^/  /' "$SHARE/r2.json" "$SHARE/r2.err" | tail -6
    check "the read survives nvmet dropping the association" test $rc = 0
    check "  after a reconnect" grep -q '"reconnects": [1-9]' "$SHARE/r2.json"
    check "  same bytes" cmp "$SHARE/r1" "$SHARE/r2"
    check "  the guest did drop it" test -e "$SHARE/fault.done"
  else
    echo "  FAILED: the guest never finished its part"; fails=$((fails + 1))
  fi
else
  echo "  FAILED: the guest target never became ready"; fails=$((fails + 1))
fi
touch "$SHARE/host.done"
wait $VMPID; vrc=$?; VMPID=
sed 's/^/  guest: /' "$SHARE/vm.log" | tail -40
[ $fails = 0 ] && [ $vrc = 0 ]
