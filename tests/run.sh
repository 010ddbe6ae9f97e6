#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds twice (release, and
# ASan+UBSan), runs every test on both builds, and ends with one line
#   N passed, N failed, N skipped
# Options: GDX_TEST_BUILDS="release asan" (default both), GDX_TEST_ARGS (extra
# arguments for meson test, e.g. a suite name), GDX_TEST_FUZZ_SECONDS (per
# libFuzzer target, default 20; 0 skips the fuzz run, which counts as one test).
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

bash scripts/setup-deps.sh || { echo "setup-deps failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

builds=${GDX_TEST_BUILDS:-"release asan"}
pass=0 fail=0 skip=0 rc=0
for b in $builds; do
  dir="build-test-$b"
  case $b in
    release) opts=(-Dbuildtype=release) ;;
    asan) opts=(-Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false) ;;
    *) echo "unknown build '$b'"; exit 2 ;;
  esac
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "${opts[@]}" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; fail=$((fail + 1)); rc=1; continue; }
  fi
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    grep -E 'error|FAILED' -A5 "$dir.build.log" | head -60
    echo "build $b failed"; fail=$((fail + 1)); rc=1; continue
  fi
  echo "=== tests on the $b build"
  # shellcheck disable=SC2086
  meson test -C "$dir" --print-errorlogs --num-processes 2 ${GDX_TEST_ARGS:-} 2>&1 | grep -vE '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout): ' || true
  log="$dir/meson-logs/testlog.json"
  if [ -f "$log" ]; then
    read -r p f s < <(python3 - "$log" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
)
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    [ "$f" = 0 ] || rc=1
  else
    fail=$((fail + 1)); rc=1
  fi
done
fuzz_secs=${GDX_TEST_FUZZ_SECONDS:-20}
if [ "$fuzz_secs" = 0 ]; then
  skip=$((skip + 1))
else
  echo "=== fuzz targets (clang, libFuzzer), ${fuzz_secs}s each"
  if bash tests/fuzz/run.sh "$fuzz_secs"; then pass=$((pass + 1)); else fail=$((fail + 1)); rc=1; fi
fi
echo "$pass passed, $fail failed, $skip skipped"
exit $rc
