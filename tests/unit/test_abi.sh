#!/usr/bin/env bash
# ABI hygiene of libgdx.so: it exports exactly the GDX_API functions that the
# public headers declare, each under the version node GDX_0.1; every public
# header compiles on its own as strict C11 and is in the install list, as is
# every man page.
# Usage: test_abi.sh LIBGDX_SO SRCDIR CC
set -uo pipefail
lib=$1 src=$2 cc=$3
fail=0
bad() { echo "test_abi: $*"; fail=1; }

mapfile -t exported < <(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort -u)
[ ${#exported[@]} -gt 0 ] || { echo "test_abi: no symbols read from $lib"; exit 1; }
for s in "${exported[@]}"; do
	case $s in *@@GDX_0.1) ;; *) bad "$s is not under the version node GDX_0.1" ;; esac
done
exports=$(printf '%s\n' "${exported[@]}" | sed 's/@.*//' | sort -u)

headers=$(cd "$src/include" && find gdx -name '*.h' | sort)
declared=$(cd "$src/include" && grep -vh '^#define' $headers | grep -oE 'GDX_API [^(;]*\(' |
	sed -E 's/\($//; s/.*[ *]//' | sort -u)
while read -r s; do
	[ -n "$s" ] && bad "$s is exported but no public header declares it GDX_API"
done < <(comm -23 <(echo "$exports") <(echo "$declared"))
while read -r s; do
	[ -n "$s" ] && bad "$s is declared GDX_API but libgdx.so does not export it"
done < <(comm -13 <(echo "$exports") <(echo "$declared"))

for h in $headers; do
	echo "#include <$h>" | "$cc" -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only \
		-I"$src/include" -x c - 2>&1 | head -5 | sed "s|^|$h: |" | grep . && bad "$h does not compile alone"
	grep -q "'$h'" "$src/include/meson.build" || bad "$h is not installed (include/meson.build)"
done
for m in "$src"/man/*.[1-8]; do
	grep -q "'${m##*/}'" "$src/man/meson.build" || bad "${m##*/} is not installed (man/meson.build)"
done
[ $fail = 0 ] && echo "test_abi: $(echo "$exports" | wc -l) exports, $(echo "$headers" | wc -w) headers: ok"
exit $fail
