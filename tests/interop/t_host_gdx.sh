#!/bin/bash
# Host: the gdx NVMe/TCP host (the gdx CLI) against the gdx target on loopback:
# discover, identify, data written and read back from host, pinned and (emulated)
# device memory with and without digests, then the target killed (SIGKILL) in the
# middle of a 256 MiB read and restarted on the same port: the read must finish
# with the right bytes after a reconnect.  No VM needed.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d); trap 'stop_target; rm -rf "$SHARE"' EXIT
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:host-gdx
export GDX_DEVICE=emulated GDX_NVMF_HOST_RECONNECT_DELAY_MS=50
truncate -s 256M "$SHARE/ns.img"
head -c 256M /dev/urandom >"$SHARE/src"
targs=(-l 127.0.0.1:$PORT -n $NQN -N "$SHARE/ns.img" -r 2)
start_target "$SHARE/target.log" "${targs[@]}" || exit 1
fails=0
check() { local d=$1; shift; if "$@"; then echo "  ok: $d"; else echo "  FAILED: $d"; fails=$((fails + 1)); fi; }
has() { grep -q "$1" <<<"$2"; }
G=("$GDX" nvmf) A=(-a 127.0.0.1 -s "$PORT" -n "$NQN")
out=$("${G[@]}" discover -a 127.0.0.1 -s "$PORT" --json 2>&1)
check "discover lists $NQN" has "\"subnqn\": \"$NQN\"" "$out"
out=$("${G[@]}" id-ctrl "${A[@]}" --json 2>&1)
check "id-ctrl: the gdx target" has '"mn": "gdx' "$out"
out=$("${G[@]}" id-ns "${A[@]}" --json 2>&1)
check "id-ns: 256 MiB" has '"bytes": 268435456' "$out"
check "write 256 MiB from host memory" "${G[@]}" write "${A[@]}" -l 256M --from "$SHARE/src" --queues 4
check "read it back into pinned memory" "${G[@]}" read "${A[@]}" -l 256M -m pinned --to "$SHARE/out1"
check "  same bytes" cmp "$SHARE/src" "$SHARE/out1"
dd if="$SHARE/src" of="$SHARE/mid" bs=1M skip=8 count=8 status=none
check "write 8 MiB from device memory with digests" "${G[@]}" write "${A[@]}" -o 8M -l 8M -m gpu:0 \
  --from "$SHARE/mid" --hdr-digest --data-digest
check "read into device memory with digests" "${G[@]}" read "${A[@]}" -o 8M -l 8M -m gpu:0 \
  --hdr-digest --data-digest --to "$SHARE/out2"
check "  same bytes" cmp "$SHARE/mid" "$SHARE/out2"
check "out-of-range read fails" bash -c '! "$@" 2>/dev/null' _ "${G[@]}" read "${A[@]}" -o 256M -l 4k

# kill the target mid-read, restart it on the same port; retry if the read won the race
ok=0
for try in 1 2 3; do
  "${G[@]}" read "${A[@]}" -l 256M --queues 4 --json --to "$SHARE/out3" >"$SHARE/read.json" 2>"$SHARE/read.err" &
  rpid=$!
  sleep 0.05
  kill -9 "$TARGET_PID"; wait "$TARGET_PID" 2>/dev/null; TARGET_PID=
  sleep 0.3
  start_target "$SHARE/target.$try.log" "${targs[@]}" || break
  wait $rpid; rc=$?
  cat "$SHARE/read.json" "$SHARE/read.err" | sed 's/^/  /' | tail -4
  if [ $rc = 0 ] && grep -q '"reconnects": [1-9]' "$SHARE/read.json"; then ok=1; break; fi
  [ $rc = 0 ] || break
  echo "  (the read finished before the kill; again)"
done
check "a read survives the target's death and restart (reconnected)" test $ok = 1
check "  same bytes" cmp "$SHARE/src" "$SHARE/out3"
exit $((fails > 0))
