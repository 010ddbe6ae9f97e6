#!/usr/bin/env bash
# Interop tests: a qemu guest running Debian's stock kernel plays the peer.
# Prepares the VM cache of each guest release the tests ask for (apt-installs qemu
# etc. on first use; see vm.sh's VM_DIST and VM_CACHE), then runs every
# tests/interop/t_*.sh (or those named as arguments), printing PASS/FAIL/SKIP per test
# (exit 77 = skip) and ending with
#   N passed, N failed, N skipped
# A script runs in a bookworm guest (Debian 12, kernel 6.1) unless it has a line
#   # vm: trixie
# (Debian 13, kernel 6.12: NVMe in-band authentication and NVMe/TCP TLS); run.sh
# exports VM_DIST for it accordingly.
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
# the guest release a script asks for: its '# vm: NAME' line, else bookworm
dist_of() { sed -n 's/^# vm: *\([a-z0-9]*\).*/\1/p' "$1" | head -1 | grep . || echo bookworm; }

if [ $# -gt 0 ]; then tests=("$@"); else tests=("$here"/t_*.sh); fi
for i in "${!tests[@]}"; do [ -f "${tests[$i]}" ] || tests[$i]=$here/${tests[$i]}; done
for d in $(for t in "${tests[@]}"; do dist_of "$t"; done | sort -u); do
  t0=$(date +%s)
  if ! VM_DIST=$d "$here/vm.sh" prepare >"$logdir/prepare-$d.log" 2>&1; then
    tail -20 "$logdir/prepare-$d.log"
    echo "FAIL  prepare $d ($(( $(date +%s) - t0 ))s, log: $logdir/prepare-$d.log)"
    echo "0 passed, 1 failed, 0 skipped"; exit 1
  fi
  echo "ok    prepare $d ($(( $(date +%s) - t0 ))s)"
done

for t in "${tests[@]}"; do
  name=$(basename "$t" .sh)
  t0=$(date +%s)
  VM_DIST=$(dist_of "$t") bash "$t" >"$logdir/$name.log" 2>&1; rc=$?
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
