#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# gdx check on each fixture machine against its expected report (text and
# JSON), the exit codes of --require and bad usage, the GDX_* root knobs, and
# one live run on this machine.  GDX_REGEN=1 rewrites the expected reports.
set -u
gdx=$(realpath "${1:?usage: test_check.sh path/to/gdx}") || exit 1
cd "${GDX_SRCDIR:?}" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# rc expected, then the arguments; the output lands in $out, stderr in $err
expect_rc() {
  local want=$1 got
  shift
  out=$("$gdx" check "$@" 2>/tmp/gdx-check-err.$$)
  got=$?
  err=$(cat /tmp/gdx-check-err.$$)
  rm -f /tmp/gdx-check-err.$$
  [ "$got" = "$want" ] || fail "gdx check $* exited $got, want $want ($err)"
}

for m in dgx8 vm1gpu nogpu debianvm; do
  for fmt in txt json; do
    exp=tests/data/expected/$m.$fmt
    args=(--root "tests/data/sysfs/$m" --no-live)
    [ "$fmt" = json ] && args+=(--json)
    expect_rc 0 "${args[@]}"
    if [ -n "${GDX_REGEN:-}" ]; then
      printf '%s\n' "$out" >"$exp"
      continue
    fi
    diff -u "$exp" <(printf '%s\n' "$out") >/tmp/gdx-check-diff.$$ ||
      { head -40 /tmp/gdx-check-diff.$$; fail "$m $fmt report differs from $exp"; }
    rm -f /tmp/gdx-check-diff.$$
  done
  if command -v python3 >/dev/null; then
    "$gdx" check --root "tests/data/sysfs/$m" --no-live --json | python3 -c 'import json,sys; json.load(sys.stdin)' ||
      fail "$m: --json is not JSON"
  fi
done

# --require sets the exit code, and says why on stderr
expect_rc 0 --root tests/data/sysfs/dgx8 --require gpu,rdma --require nvmf-rdma
expect_rc 1 --root tests/data/sysfs/dgx8 --require rdma-direct
grep -q "rdma-direct is not ready" <<<"$err" || fail "no reason for rdma-direct: $err"
expect_rc 1 --root tests/data/sysfs/nogpu --require gpu
expect_rc 0 --root tests/data/sysfs/nogpu --require rdma,kernel-nvmet-rdma
expect_rc 1 --root tests/data/sysfs/vm1gpu --require rdma
expect_rc 0 --root tests/data/sysfs/vm1gpu --require gpu,nvmf-tcp,kernel-nvme-tcp
expect_rc 1 --root tests/data/sysfs/vm1gpu --require odirect
grep -q "not checked" <<<"$err" || fail "odirect without live checks: $err"

# recommendations for another GPU, named three ways
for g in 6 GPU6 0000:c5:00.0; do
  expect_rc 0 --root tests/data/sysfs/dgx8 --gpu "$g"
  grep -q "^Recommendations (for GPU6)" <<<"$out" && grep -q "via mlx5_6 (PIX from GPU6)" <<<"$out" ||
    fail "--gpu $g: $(grep -A3 '^Recommendations' <<<"$out")"
done
expect_rc 2 --root tests/data/sysfs/dgx8 --gpu 8
expect_rc 2 --root tests/data/sysfs/nogpu --gpu 0

# bad usage
expect_rc 2 --require warp-drive
expect_rc 2 --bogus
expect_rc 2 --root tests/data/sysfs/dgx8 stray
expect_rc 0 --help

# a tree that is not there is an error naming it, not an empty machine
expect_rc 1 --root /nonexistent/gdx --no-live
[ "$err" = "gdx check: sysfs root /nonexistent/gdx/sys: No such file or directory" ] ||
  fail "missing tree: '$err'"
[ -z "$out" ] || fail "missing tree printed a report: $out"
# an empty tree is a machine with nothing on it; what it cannot tell (no module
# list, no live checks) is ? on the Ready line and null in JSON, never a ✗
empty=$(mktemp -d) || exit 1
mkdir "$empty/sys" "$empty/proc"
expect_rc 0 --root "$empty" --no-live
grep -q "no GPU, NIC, NVMe or disk found" <<<"$out" || fail "empty tree: $out"
grep -Eq "kernel-nvme-tcp \?( |$)" <<<"$out" || fail "empty tree: unknown module not ?: $out"
grep -Eq "kernel-nvmet-tcp \?( |$)" <<<"$out" || fail "empty tree: unknown modules not ?: $out"
expect_rc 0 --root "$empty" --no-live --json
if command -v python3 >/dev/null; then
  python3 -c 'import json, sys
r = json.load(sys.stdin)["ready"]
bad = [k for k in ("kernel-nvme-tcp", "kernel-nvmet-tcp", "io-uring", "odirect") if r[k] is not None]
sys.exit("not null: %s" % bad if bad else 0)' <<<"$out" || fail "empty tree: JSON ready"
fi
expect_rc 1 --root "$empty" --no-live --require kernel-nvme-tcp
grep -q "kernel-nvme-tcp is not checked" <<<"$err" || fail "empty tree --require: $err"
rm -rf "$empty"

# the knobs name the roots as well as the options do
out=$(GDX_SYSFS_ROOT=tests/data/sysfs/vm1gpu/sys GDX_PROCFS_ROOT=tests/data/sysfs/vm1gpu/proc \
  GDX_MODULES_ROOT=tests/data/sysfs/vm1gpu/lib/modules "$gdx" check --no-live)
grep -q "GPU0 .*0000:00:05.0" <<<"$out" || fail "GDX_SYSFS_ROOT not used"
grep -q "580.159.04" <<<"$out" || fail "GDX_PROCFS_ROOT not used"
grep -q "available: nvme-tcp" <<<"$out" || fail "GDX_MODULES_ROOT not used"

# live checks on this machine: they run, and sit in their own section
dir=$(mktemp -d)
expect_rc 0 --live --path "$dir"
grep -q "^Live checks (this process" <<<"$out" || fail "no live section"
grep -q "O_DIRECT .*$dir" <<<"$out" || fail "no O_DIRECT probe of $dir"
grep -q "memlock limit" <<<"$out" || fail "no memlock line"
[ -z "$(ls -A "$dir")" ] || fail "the O_DIRECT probe left a file behind"
expect_rc 1 --live --path "$dir/missing" --require odirect
rmdir "$dir"

# cuFile's P2PDMA mode: each missing piece is named, in order, on a copy of
# the VM fixture that grows a newer kernel and the settings one by one
vm=$(mktemp -d)
cp -a tests/data/sysfs/vm1gpu/. "$vm"
p2p() { "$gdx" check --root "$vm" --no-live | grep -A4 "PCI P2PDMA"; }
grep -q "fix: a kernel with PCI P2PDMA" <<<"$(p2p)" || fail "P2PDMA on 6.1: $(p2p)"
echo "6.8.0-40-generic" >"$vm/proc/sys/kernel/osrelease"
mkdir -p "$vm/sys/module/nvme_core/parameters"
echo Y >"$vm/sys/module/nvme_core/parameters/multipath"
grep -q "fix: options nvme_core multipath=N" <<<"$(p2p)" || fail "P2PDMA, multipath: $(p2p)"
echo N >"$vm/sys/module/nvme_core/parameters/multipath"
grep -q "fix: options nvidia" <<<"$(p2p)" && grep -q "RMForceStaticBar1=1" <<<"$(p2p)" ||
  fail "P2PDMA, BAR1: $(p2p)"
echo 'RegistryDwords: "RMForceStaticBar1=1;RmForceDisableIomapWC=1;"' \
  >"$vm/proc/driver/nvidia/params"
grep -q "✓ PCI P2PDMA" <<<"$(p2p)" || fail "P2PDMA ready: $(p2p)"
"$gdx" check --root "$vm" --no-live | grep -q "✓ nvidia-fs .*not needed" ||
  fail "nvidia-fs is still asked for with P2PDMA ready"
# Soft-RoCE on the VM's eth0: RDMA works, but never into GPU memory
mkdir -p "$vm/sys/devices/virtual/infiniband/rxe0/ports/1" "$vm/sys/class/infiniband"
echo eth0 >"$vm/sys/devices/virtual/infiniband/rxe0/parent"
echo "4: ACTIVE" >"$vm/sys/devices/virtual/infiniband/rxe0/ports/1/state"
ln -s ../../devices/virtual/infiniband/rxe0 "$vm/sys/class/infiniband/rxe0"
echo "ib_uverbs 16384 0 - Live 0x0" >>"$vm/proc/modules"
out=$("$gdx" check --root "$vm" --no-live)
grep -q "network peer    bounce  RDMA via rxe0 (PHB from GPU0)" <<<"$out" ||
  fail "Soft-RoCE: $(grep -A1 'network peer' <<<"$out")"
grep -q "step: rxe0 is Soft-RoCE" <<<"$out" || fail "Soft-RoCE step: $out"
rm -rf "$vm"

# the CUDA driver's own view: a look-alike driver that sees no GPU, on a
# machine whose sysfs shows one, is a failure with a reason
fake=${GDX_BUILDDIR:-}/tests/unit/libfake_cuda.so
if [ -f "$fake" ]; then
  out=$(GDX_CUDA_LIB=$fake "$gdx" check --root tests/data/sysfs/vm1gpu --live --path "$PWD")
  grep -q "✗ CUDA driver .*sees no GPU, yet sysfs shows 1 NVIDIA GPU" <<<"$out" ||
    fail "CUDA driver seeing no GPU: $(grep 'CUDA driver' <<<"$out")"
  out=$(GDX_CUDA_LIB=$fake "$gdx" check --root tests/data/sysfs/nogpu --live --path "$PWD")
  grep -q -- "- CUDA driver .*sees no GPU$" <<<"$out" || fail "no GPU anywhere: not n/a"
fi

# a snapshot of this machine reads back as this machine
snap=$(mktemp -d)
if sh scripts/topo-snapshot.sh "$snap" >/dev/null; then
  # JSON: the text wraps differently around the longer roots
  a=$("$gdx" check --root "$snap" --no-live --json | sed "s|$snap/|/|g")
  b=$("$gdx" check --no-live --json)
  [ "$a" = "$b" ] || { diff <(echo "$a") <(echo "$b") | head -20; fail "snapshot differs from /sys"; }
else
  fail "scripts/topo-snapshot.sh failed"
fi
rm -rf "$snap"

[ "$fails" = 0 ] && echo "all gdx check cases passed"
exit $((fails > 0))
