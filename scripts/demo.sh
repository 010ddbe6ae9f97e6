#!/usr/bin/env bash
# The main job on an embedded default: installs what it needs, builds gdx, then
# runs each data path on this machine and says which path every transfer took.
#   1. gdx check      readiness report for this machine
#   2. storage        a generated 256 MiB file -> device memory -> back to a file
#   3. NVMe-oF        a gdx target serving a RAM namespace on loopback; the gdx host
#                     writes a pattern and reads it back into device memory
#   4. pipeline       the seeds' training step: load N+1 | compute N | send N-1
# Without a GPU, device memory is the emulated device (GDX_DEVICE=emulated), and
# the demo says so; with one, it is the GPU.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bash scripts/setup-deps.sh
build=${GDX_DEMO_BUILD:-build-demo}
[ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release -Dtests=false >/dev/null
ninja -C "$build" >/dev/null
gdx="$build/tools/gdx/gdx"
work=$(mktemp -d /var/tmp/gdx-demo.XXXXXX)
target_pid=
cleanup() {
  [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n=== %s\n' "$*"; }

if [ -z "${GDX_DEVICE:-}" ]; then
  if "$gdx" check --json 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("gpus") else 1)'; then
    export GDX_DEVICE=cuda
  else
    export GDX_DEVICE=emulated
  fi
fi
echo "gdx $("$gdx" version | awk '{print $2}') at $top/$gdx, device: $GDX_DEVICE"
[ "$GDX_DEVICE" = emulated ] && echo "(no GPU here: device memory is the emulated device, host memory the CPU cannot touch directly)"

step "1. gdx check --path $work"
"$gdx" check --path "$work" || true

step "2. storage -> device memory -> storage (gdx cp --via gpu:0)"
python3 - "$work/data.bin" <<'PY'
import random, sys
r = random.Random(20261129)
with open(sys.argv[1], "wb") as f:
    for _ in range(256):
        f.write(r.randbytes(1 << 20))
PY
"$gdx" cp -q "$work/data.bin" "$work/copy.bin" --via gpu:0
cmp "$work/data.bin" "$work/copy.bin" && echo "round trip: 256 MiB identical"

step "3. NVMe/TCP: gdx target (RAM namespace) <- gdx host, data into device memory"
nqn=nqn.2026-11.io.gdx:demo
port=$((20000 + RANDOM % 20000))
"$gdx" nvmf target --listen 127.0.0.1:$port --nqn $nqn --ns ram:64M >"$work/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 50); do
  "$gdx" nvmf discover -a 127.0.0.1 -s $port >/dev/null 2>&1 && break
  sleep 0.1
done
"$gdx" nvmf discover -a 127.0.0.1 -s $port
"$gdx" nvmf write -a 127.0.0.1 -s $port -n $nqn --from pattern:42 -l 16M --data-digest
"$gdx" nvmf read -a 127.0.0.1 -s $port -n $nqn -l 16M -m gpu:0 --to "$work/nvmf.bin" --data-digest
"$gdx" nvmf write -a 127.0.0.1 -s $port -n $nqn --from "$work/nvmf.bin" -l 16M -o 16M -m gpu:0
kill "$target_pid"; wait "$target_pid" 2>/dev/null || true; target_pid=
tail -3 "$work/target.log"

step "4. pipeline: the seeds' training step (load N+1 | compute N | send N-1)"
"$build/examples/train_step/train_step" --data "$work/train.dat" --batches 100 --serial

printf '\ndemo done\n'
printf 'the gdx binary: %s (not on PATH; "sudo ninja -C %s install" puts it in\n' "$top/$gdx" "$build"
printf '/usr/local/bin with its man page: man gdx; README.md, Install)\n'
