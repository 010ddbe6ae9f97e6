#!/bin/sh
# SPDX-License-Identifier: MIT
# The install the README documents: `meson install` into a staging root puts
# the gdx binary under bin/ and its man pages where `man gdx` finds them.
set -u
build=${GDX_BUILDDIR:?}
command -v man >/dev/null || { echo "man not installed (scripts/setup-deps.sh installs man-db)"; exit 77; }
dest=$(mktemp -d "$build/gdx_install.XXXXXX") || exit 1
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$build" --no-rebuild --destdir "$dest" >"$dest/log" 2>&1 ||
	fail "meson install: $(tail -5 "$dest/log")"
bin=$(find "$dest" -path '*/bin/gdx' -type f)
[ -n "$bin" ] && [ -x "$bin" ] || fail "no bin/gdx under $dest"
"$bin" --version | grep -q '^gdx ' || fail "installed gdx: $("$bin" --version 2>&1)"
page=$(find "$dest" -path '*/man1/gdx.1' -type f)
[ -n "$page" ] || fail "no man1/gdx.1 under $dest"
mandir=${page%/man1/gdx.1}
for p in gdx gdx-check; do
	[ "$(MANPATH=$mandir man -w $p)" = "$mandir/man1/$p.1" ] ||
		fail "man -w $p: $(MANPATH=$mandir man -w $p 2>&1)"
done
[ "$(MANPATH=$mandir man -w 3 libgdx)" = "$mandir/man3/libgdx.3" ] || fail "man 3 libgdx"
# what the README promises: with the bin/ directory on PATH, man finds the pages beside it
bindir=${bin%/gdx}
[ "$(env -u MANPATH PATH="$bindir:$PATH" man -w gdx)" = "$mandir/man1/gdx.1" ] ||
	fail "man -w gdx with $bindir on PATH: $(env -u MANPATH PATH="$bindir:$PATH" man -w gdx 2>&1)"
MANPATH=$mandir MANWIDTH=100 man gdx 2>"$dest/err" | grep -q -- "gdx --version" ||
	fail "man gdx is not this build's page (no --version): $(cat "$dest/err")"
echo ok
