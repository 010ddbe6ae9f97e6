# Helpers for guest scripts (sourced inside the VM).
set -uo pipefail
fails=0
ok() { echo "  ok: $*"; }
bad() { echo "  FAILED: $*"; fails=$((fails + 1)); }
# check DESCRIPTION COMMAND...: runs it, counts a failure if it fails
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
wait_dev() { local i; for i in $(seq $(( ${2:-30} * 10 ))); do [ -b "$1" ] && return 0; sleep 0.1; done; return 1; }
wait_gone() { local i; for i in $(seq $(( ${2:-30} * 10 ))); do [ -e "$1" ] || return 0; sleep 0.1; done; return 1; }
# fio_verify DEV SIZE [extra fio args]: random writes of 4k..256k at depth 32, then verify
fio_verify() {
  local dev=$1 size=$2; shift 2
  local out
  out=$(fio --name=v --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite \
    --bsrange=4k-256k --iodepth=32 --size="$size" --verify=crc32c --do_verify=1 \
    --verify_fatal=1 --verify_state_save=0 --output-format=terse --terse-version=3 "$@" 2>&1)
  local rc=$?
  echo "$out" | awk -F';' 'NF > 50 {printf "  fio: write %s KiB/s %s IOPS, verify read %s KiB/s, errors=%s\n", $48, $49, $7, $5}'
  [ $rc = 0 ] || echo "$out" | tail -5
  return $rc
}
finish() {
  echo "  dmesg:"; dmesg | grep -E 'nvme' | tail -${1:-15} | sed 's/^/    /'
  [ $fails = 0 ]
}
