# shellcheck shell=bash
# Sourced by the bench/*_vm.sh scripts: with PERF_OUT=DIR, the guest profiles one run
# of each job with perf (bench/vm_perf_guest.sh) and its reports land in DIR.  The
# guest image has no perf: the host's (Debian 12, the guest's release) travels in the
# share instead of rebuilding the shared image.

# vm_perf_share SHARE: copies perf, and those of its libraries the guest lacks, into
# SHARE/perf (no-op without PERF_OUT)
vm_perf_share() {
  [ -n "${PERF_OUT:-}" ] || return 0
  local perf
  perf=$(command -v perf) || { echo "PERF_OUT: no perf on this machine (apt install linux-perf)"; return 1; }
  "$(dirname "${BASH_SOURCE[0]}")/../tests/interop/vm.sh" share "$1/perf" "$perf" || return 1
  mkdir -p "$1/perf/out"
  cp "$(dirname "${BASH_SOURCE[0]}")/vm_perf_guest.sh" "$1/perf/"
}

# vm_perf_collect SHARE: the guest's reports into PERF_OUT
vm_perf_collect() {
  [ -n "${PERF_OUT:-}" ] || return 0
  mkdir -p "$PERF_OUT" && cp -r "$1/perf/out/." "$PERF_OUT/" && echo "perf reports: $PERF_OUT"
}
