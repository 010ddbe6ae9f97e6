#!/bin/bash
# vm: trixie
# The Debian 13 guest is what the TLS and DH-HMAC-CHAP tests need: kernel 6.12 whose
# config has NVMe/TCP TLS and in-band authentication on both sides, nvme-tcp and
# nvmet-tcp loading, nvme-cli 2.13, tlshd and keyctl present, and a gdx binary built
# on the host running inside.
. "$(dirname "$0")/lib.sh"
[ "${VM_DIST:-}" = trixie ] || { echo "run through run.sh (or with VM_DIST=trixie)"; exit 1; }
SHARE=$(mktemp -d)
trap 'rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$SHARE/"
"$VM" share "$SHARE" "$GDX" || exit 1
cat >"$SHARE/g.sh" <<'GUEST'
. /share/guest_lib.sh
export LD_LIBRARY_PATH=/share/lib
kver=$(uname -r); echo "  kernel $kver"
check "kernel 6.12" grep -q '^6\.12\.' <<<"$kver"
check "modprobe nvme-tcp nvmet-tcp tls" modprobe -a nvme-tcp nvmet-tcp tls
check "kTLS offered (tls ULP)" grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp
check "the .nvme keyring exists" grep -q '\.nvme' /proc/keys
v=$(nvme version); echo "  $v"
check "nvme-cli 2.13" grep -q 'nvme version 2\.13' <<<"$v"
check "tlshd present" test -x /usr/sbin/tlshd
check "keyctl present" command -v keyctl
check "gdx runs in the guest" /share/gdx --version
finish
GUEST
fails=0
cfg=$(ls "${VM_CACHE:-/var/tmp/gdx-vm-cache-trixie}"/kernel/root/boot/config-* 2>/dev/null | head -1)
for o in NVME_AUTH NVME_TARGET_AUTH NVME_TCP_TLS NVME_TARGET_TCP_TLS TLS; do
  if grep -qE "^CONFIG_$o=[ym]" "$cfg" 2>/dev/null; then echo "  ok: guest kernel has CONFIG_$o"
  else echo "  FAILED: guest kernel has CONFIG_$o ($cfg)"; fails=$((fails + 1)); fi
done
VM_SHARE=$SHARE "$VM" run "$SHARE/g.sh" || fails=$((fails + 1))
[ $fails = 0 ]
