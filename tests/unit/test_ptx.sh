#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The committed PTX of a kernel (src/gpu/NAME_ptx.h) is what
# scripts/gen_ptx.sh NAME makes of src/gpu/NAME.cu today.  Skipped (77)
# without nvcc, or with another nvcc release than the one that made it (its
# code may differ while the kernel did not).
#   test_ptx.sh SRCDIR NAME     (NAME: gather or agent)
set -u
root=${1:?usage: $0 SRCDIR NAME}
name=${2:?usage: $0 SRCDIR NAME}
ptx=src/gpu/${name}_ptx.h
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "no nvcc: skipped"; exit 77; }
have=$("$nvcc" --version | sed -n 's/^Cuda compilation tools, //p')
grep -qF "($have)" "$root/$ptx" || {
	echo "nvcc $have did not make the committed PTX: skipped"; exit 77; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
NVCC=$nvcc sh "$root/scripts/gen_ptx.sh" "$name" "$tmp" || exit 1
if ! cmp -s "$tmp" "$root/$ptx"; then
	diff "$root/$ptx" "$tmp" | head -20
	echo "$ptx is stale: run scripts/gen_ptx.sh $name" >&2
	exit 1
fi
echo "$ptx matches src/gpu/$name.cu ($have)"
