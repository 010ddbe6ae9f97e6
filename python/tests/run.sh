#!/usr/bin/env bash
# The Python package as a user gets it: a fresh virtual environment, `pip install
# .[test]` (meson-python builds libgdx and the extension; pytest, NumPy and
# safetensors come from PyPI), then pytest on the emulated device.  Its last line
# is pytest's summary.  GDX_PY_VENV: where the environment goes (default
# build-test-python/venv, made anew each run).  The tests of gdx.check() and
# gdx.nvmf need the gdx tool: GDX_CLI, by default tests/run.sh's release build's.
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${GDX_PY_VENV:-$top/build-test-python/venv}
rm -rf "$venv"
python3 -m venv "$venv" || { echo "python3 -m venv failed (python3-venv)"; exit 1; }
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$top[test]" ||
	{ echo "pip install failed"; exit 1; }
cd "$top" || exit 1
[ -n "${GDX_CLI:-}" ] || [ ! -x build-test-release/tools/gdx/gdx ] ||
	export GDX_CLI=$top/build-test-release/tools/gdx/gdx
GDX_DEVICE=${GDX_DEVICE:-emulated} "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
