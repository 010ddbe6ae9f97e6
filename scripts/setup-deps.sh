#!/usr/bin/env bash
# Installs what building and testing gdx needs on Debian 12 (run as root, or with sudo).
# Idempotent: packages already present are skipped without touching the network.
set -euo pipefail

pkgs=(
  gcc meson ninja-build pkg-config
  liburing-dev libibverbs-dev librdmacm-dev libjson-c-dev libnuma-dev libisal-dev libcmocka-dev libssl-dev
  rdma-core ibverbs-utils
  clang libclang-rt-14-dev
  python3 python3-dev python3-venv util-linux e2fsprogs man-db
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "setup-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
