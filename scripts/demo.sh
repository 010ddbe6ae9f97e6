#!/usr/bin/env bash
# The main job on an embedded default: installs dependencies, builds gdx, and
# runs it on this machine: the readiness report, then a file -> device ->
# file round trip (on the emulated device where there is no GPU).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
bash scripts/setup-deps.sh
[ -f build/build.ninja ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build >/dev/null
export PATH="$top/build/tools/gdx:$PATH"
gdx version
gdx check
