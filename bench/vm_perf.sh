# shellcheck shell=bash
# Sourced by the bench/*_vm.sh scripts: what they put in the guest's share beside
# their guest script.  gdx and the libraries it links; and with PERF_OUT=DIR, perf:
# the guest profiles one run of each job with it (bench/vm_perf_guest.sh) and its
# reports land in DIR.  The guest image lacks a few of gdx's libraries and has no
# perf; the host's (Debian 12, the guest's release: the same glibc) travel in the
# share instead of rebuilding the shared image.

# vm_gdx_share SHARE GDX: copies the gdx binary GDX to SHARE/gdx and the libraries it
# links, but glibc's own, into SHARE/lib (the guest runs it with
# LD_LIBRARY_PATH=/share/lib)
vm_gdx_share() {
  mkdir -p "$1/lib" && cp "$2" "$1/gdx" &&
    ldd "$2" | awk '/=> \// { print $3 }' | grep -vE '/libc\.so|/ld-linux' |
      xargs -r cp -L -t "$1/lib/"
}

# vm_perf_share SHARE: copies perf and what it links into SHARE/perf (no-op without
# PERF_OUT)
vm_perf_share() {
  [ -n "${PERF_OUT:-}" ] || return 0
  local perf
  perf=$(command -v perf) || { echo "PERF_OUT: no perf on this machine (apt install linux-perf)"; return 1; }
  mkdir -p "$1/perf/lib" "$1/perf/out"
  cp "$perf" "$1/perf/perf"
  ldd "$perf" | awk '/=> \// { print $3 }' | grep -vE '/(libc|libm|ld-linux[^/]*)\.so' |
    xargs -r cp -L -t "$1/perf/lib/"
  cp "$(dirname "${BASH_SOURCE[0]}")/vm_perf_guest.sh" "$1/perf/"
}

# vm_perf_collect SHARE: the guest's reports into PERF_OUT
vm_perf_collect() {
  [ -n "${PERF_OUT:-}" ] || return 0
  mkdir -p "$PERF_OUT" && cp -r "$1/perf/out/." "$PERF_OUT/" && echo "perf reports: $PERF_OUT"
}
