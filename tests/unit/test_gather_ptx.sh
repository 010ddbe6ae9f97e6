#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The committed PTX of the gather kernel (src/gpu/gather_ptx.h) is what
# scripts/gen_gather_ptx.sh makes of src/gpu/gather.cu today.  Skipped (77)
# without nvcc, or with another nvcc release than the one that made it (its
# code may differ while the kernel did not).
#   test_gather_ptx.sh SRCDIR
set -u
root=${1:?usage: $0 SRCDIR}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "no nvcc: skipped"; exit 77; }
have=$("$nvcc" --version | sed -n 's/^Cuda compilation tools, //p')
grep -qF "($have)" "$root/src/gpu/gather_ptx.h" || {
	echo "nvcc $have did not make the committed PTX: skipped"; exit 77; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
NVCC=$nvcc sh "$root/scripts/gen_gather_ptx.sh" "$tmp" || exit 1
if ! cmp -s "$tmp" "$root/src/gpu/gather_ptx.h"; then
	diff "$root/src/gpu/gather_ptx.h" "$tmp" | head -20
	echo "src/gpu/gather_ptx.h is stale: run scripts/gen_gather_ptx.sh" >&2
	exit 1
fi
echo "src/gpu/gather_ptx.h matches src/gpu/gather.cu ($have)"
