#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Stages this machine's perf for a machine that has none (the lent H200): DIR gets
# the binary, the shared libraries it loads other than glibc's and the C++ runtime
# (the target's own serve, being as new or newer), and a `perf` wrapper that runs
# the binary with them.  Put DIR first in PATH there; software events only
# (-e cpu-clock) in a guest without hardware counters.
#
#   bench/perf_stage.sh DIR
set -eu
DIR=${1:?usage: bench/perf_stage.sh DIR}
perf=$(command -v perf) || { echo "perf_stage: no perf here (apt-get install linux-perf)" >&2; exit 2; }
bin=$(readlink -f "$perf")
mkdir -p "$DIR/lib"
cp "$bin" "$DIR/perf.bin"
ldd "$bin" | awk '$3 ~ /^\// { print $3 }' |
	grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
	while read -r lib; do cp -L "$lib" "$DIR/lib/"; done
cat >"$DIR/perf" <<'W'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/perf.bin" "$@"
W
chmod +x "$DIR/perf"
"$DIR/perf" version >/dev/null
echo "perf_stage: $("$DIR/perf" version) in $DIR ($(du -sh "$DIR" | cut -f1))"
