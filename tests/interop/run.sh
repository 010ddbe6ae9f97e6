#!/usr/bin/env bash
# Interop tests: a qemu guest running Debian's stock kernel plays the peer.
# Prepares the VM cache (apt-installs qemu etc. on first use; VM_CACHE, default
# /var/tmp/gdx-vm-cache), then runs every tests/interop/t_*.sh (or those named
# as arguments), printing PASS/FAIL/SKIP per test (exit 77 = skip) and ending with
#   N passed, N failed, N skipped
# GDX_BUILDDIR picks the build whose gdx binary the tests use (default: build).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
builddir=${GDX_BUILDDIR:-$top/build}
export GDX=${GDX:-$builddir/tools/gdx/gdx}
logdir=${GDX_INTEROP_LOGS:-$builddir/interop-logs}
mkdir -p "$logdir"
pass=0 fail=0 skip=0

if [ ! -x "$GDX" ]; then
  echo "FAIL  setup: no gdx binary at $GDX (build first, or set GDX_BUILDDIR)"
  echo "0 passed, 1 failed, 0 skipped"; exit 1
fi
t0=$(date +%s)
if ! "$here/vm.sh" prepare >"$logdir/prepare.log" 2>&1; then
  tail -20 "$logdir/prepare.log"
  echo "FAIL  prepare ($(( $(date +%s) - t0 ))s, log: $logdir/prepare.log)"
  echo "0 passed, 1 failed, 0 skipped"; exit 1
fi
echo "ok    prepare ($(( $(date +%s) - t0 ))s)"

if [ $# -gt 0 ]; then tests=("$@"); else tests=("$here"/t_*.sh); fi
for t in "${tests[@]}"; do
  [ -f "$t" ] || t=$here/$t
  name=$(basename "$t" .sh)
  t0=$(date +%s)
  bash "$t" >"$logdir/$name.log" 2>&1; rc=$?
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) echo "PASS  $name (${secs}s)"; pass=$((pass + 1)) ;;
    77) echo "SKIP  $name (${secs}s): $(tail -1 "$logdir/$name.log")"; skip=$((skip + 1)) ;;
    *) echo "FAIL  $name (${secs}s, exit $rc, log: $logdir/$name.log)"
       grep -E 'FAILED|FAIL:|error' "$logdir/$name.log" | head -10 | sed 's/^/      /'
       fail=$((fail + 1)) ;;
  esac
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
