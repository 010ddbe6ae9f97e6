#!/usr/bin/env bash
# Builds every libFuzzer target with clang in build-fuzz/ (-Dfuzz=true: the
# library with coverage, ASan and UBSan) and runs each for SECONDS, starting
# from its seed corpus tests/fuzz/corpus/<name>/.  Fails if a target crashes,
# leaks, times out on an input, or the build fails.
#   tests/fuzz/run.sh [SECONDS] [name...]      (default 20 seconds, all targets; a name
#   with or without its executable's fuzz_ prefix)
# New inputs go to build-fuzz/fuzz-corpus/<name>/, crashes to build-fuzz/fuzz-artifacts/.
set -uo pipefail
secs=${1:-20}
shift || true
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS] [name...]" >&2; exit 2 ;; esac
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top" || exit 1
dir=build-fuzz

if [ ! -f "$dir/build.ninja" ]; then
  # werror off: this build hunts crashes, the gcc builds police warnings.
  if ! CC=clang meson setup "$dir" -Dfuzz=true -Dbuildtype=debugoptimized -Dwerror=false \
      -Db_lundef=false >"$dir.setup.log" 2>&1; then
    tail -20 "$dir.setup.log"; echo "fuzz: setup failed"; exit 1
  fi
fi
if ! ninja -C "$dir" fuzz >"$dir.build.log" 2>&1; then
  grep -E 'error|FAILED' -A5 "$dir.build.log" | head -40; echo "fuzz: build failed"; exit 1
fi

mapfile -t targets < <(python3 - "$dir" <<'PY'
import json, subprocess, sys
out = subprocess.run(["meson", "introspect", "--targets", sys.argv[1]],
                     capture_output=True, text=True, check=True).stdout
for t in json.loads(out):
    if t["type"] == "executable" and t["name"].startswith("fuzz_"):
        print(t["name"][len("fuzz_"):], t["filename"][0])
PY
)
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no targets found"; exit 1; }

fail=0 ran=0
mkdir -p "$dir/fuzz-artifacts"
for t in "${targets[@]}"; do
  name=${t%% *} exe=${t#* }
  # a target by its name (xport_tcp) or its executable's (fuzz_xport_tcp)
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | sed 's/^fuzz_//' | grep -qx "$name"; then continue; fi
  seeds=tests/fuzz/corpus/$name work=$dir/fuzz-corpus/$name
  mkdir -p "$work"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/fuzz-artifacts/$name-")
  [ -f "tests/fuzz/$name.dict" ] && args+=(-dict="tests/fuzz/$name.dict")
  [ -d "$seeds" ] || echo "fuzz: $name has no seed corpus ($seeds)"
  log=$dir/fuzz-$name.log
  ran=$((ran + 1))
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 GDX_DEVICE=emulated \
      "$exe" "${args[@]}" "$work" $( [ -d "$seeds" ] && echo "$seeds") >"$log" 2>&1; then
    echo "fuzz: $name ok ($(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$') runs in ${secs}s)"
  else
    fail=$((fail + 1))
    echo "fuzz: $name FAILED (log: $log)"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==|Test unit written' "$log" | head -20
  fi
done
[ $ran -gt 0 ] || { echo "fuzz: no target matched $*"; exit 1; }
echo "fuzz: $ran target(s), $fail failed"
[ $fail = 0 ]
