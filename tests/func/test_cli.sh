#!/bin/sh
# SPDX-License-Identifier: MIT
# The gdx tool at the terminal: each bad input exits with its status and one
# message naming the value and what was expected (docs/cli.md).
set -u
gdx=$1
dir=$(mktemp -d "${GDX_BUILDDIR:-/tmp}/gdx_cli.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
head -c 65536 /dev/urandom >"$dir/src" || exit 1

# expect RC STDERR CMD...: the exit status, and stderr exactly.
expect() {
	want_rc=$1 want_err=$2
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"; rc=$?
	[ "$rc" = "$want_rc" ] || fail "$*: exit $rc, want $want_rc: $(cat "$dir/err")"
	[ "$(cat "$dir/err")" = "$want_err" ] || fail "$*: stderr '$(cat "$dir/err")', want '$want_err'"
}

# Configuration typos stop the tool, named (not logged and ignored).
expect 1 "gdx: GDX_DEVICE='emualted': want one of auto|cuda|emulated, each optionally with :N" \
	env GDX_DEVICE=emualted "$gdx" cp "$dir/src" gpu:0
expect 1 "gdx: GDX_FILE_DEPTH='0': want an integer from 1 to 1024" \
	env GDX_FILE_DEPTH=0 "$gdx" cp "$dir/src" gpu:0
printf '{\n  "file": {"depth" 4}\n}\n' >"$dir/syntax.json"
expect 1 "gdx: GDX_CONFIG: $dir/syntax.json:2:20: object property name separator ':' expected" \
	env GDX_CONFIG="$dir/syntax.json" "$gdx" cp "$dir/src" gpu:0
printf '{"file": {"dept": 4}}\n' >"$dir/key.json"
expect 1 "gdx: GDX_CONFIG: $dir/key.json: unknown key 'file.dept' (gdx config lists the knobs)" \
	env GDX_CONFIG="$dir/key.json" "$gdx" cp "$dir/src" gpu:0
printf '{"file": {"depth": "deep"}}\n' >"$dir/value.json"
expect 1 "gdx: GDX_CONFIG: $dir/value.json: bad value \"deep\" for 'file.depth' (want an integer from 1 to 1024)" \
	env GDX_CONFIG="$dir/value.json" "$gdx" cp "$dir/src" gpu:0
env GDX_CONFIG="$dir/value.json" "$gdx" config >/dev/null 2>&1 && fail "gdx config with a bad file exits 0"
echo ok
