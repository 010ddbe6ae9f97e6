#!/usr/bin/env bash
# vm.sh - boot Debian's stock kernel (linux-image-amd64: 6.1 in bookworm, 6.12 in trixie)
# under QEMU and run a script inside it, so that the guest kernel's NVMe/TCP host, nvmet-tcp
# target and Soft-RoCE (rdma_rxe) can be used as interoperability peers of host programs.
#
# Usage
#   ./vm.sh prepare              install host tools, download the kernel and build the
#                                guest image into cache/ (idempotent; a re-run takes ~2 s)
#   ./vm.sh run SCRIPT [ARGS..]  boot the VM, run SCRIPT inside as root (cwd /share),
#                                stream its stdout+stderr, power off, exit with its status
#                                (124: VM timed out, 125: guest died without a status)
#   ./vm.sh share DIR BIN..      copy the host-built BIN.. into DIR and the libraries of
#                                theirs the guest image lacks into DIR/lib, for the guest
#                                to run them with LD_LIBRARY_PATH=DIR/lib (after prepare)
#   ./vm.sh shell                boot the VM with an interactive shell on this terminal
#   ./vm.sh info                 print configuration, cache contents and sizes
#   ./vm.sh clean                remove cache/ (everything prepare made)
#
# Options (environment variables)
#   VM_DIST=bookworm     guest release: bookworm (Debian 12, kernel 6.1, nvme-cli 2.3) or
#                        trixie (Debian 13, kernel 6.12 with NVMe in-band authentication and
#                        NVMe/TCP TLS, nvme-cli 2.13, ktls-utils' tlshd, keyutils). Each
#                        release has its own cache; its packages come from the host's Debian
#                        mirror (the URIs of the host's apt sources, with the suite renamed).
#   VM_MEM=1024          guest memory in MiB
#   VM_CPUS=2            number of vCPUs
#   VM_ACCEL=auto        auto|kvm|tcg. auto picks kvm only where /dev/kvm is backed by
#                        kvm_intel/kvm_amd. On a PVM host (/sys/module/kvm_pvm, as on this
#                        workplace's machines) a stock kernel cannot run under KVM (qemu
#                        aborts on MSR 0x10a, or the vCPU spins forever), so auto => tcg.
#   VM_HOSTFWD=""        host -> guest: space separated qemu hostfwd rules, host side must be
#                        127.x.x.x, e.g. "tcp:127.0.0.1:14420-:4420" (host 127.0.0.1:14420
#                        -> guest :4420)
#   VM_GUESTFWD=""       guest -> host: space separated ports P or P:HOSTPORT; a guest connect
#                        to $HOST_IP:P (10.0.2.100:P) reaches host 127.0.0.1:HOSTPORT (=P)
#                        through a socat relay that qemu starts per connection
#   VM_NET_RESTRICT=1    1: slirp restrict=on, the guest can open no connection but the
#                        VM_GUESTFWD ones (UDP, DNS and everything else is dropped by qemu).
#                        0: plain slirp; HOST_IP=10.0.2.2 = host 127.0.0.1 on every port, no
#                        relay, but qemu would also forward guest traffic to other addresses
#                        (the guest has no default route and a blackhole for slirp's DNS).
#   VM_SHARE=$PWD        host folder mounted read-write at /share in the guest (9p)
#   VM_TIMEOUT=900       seconds before the VM is killed (vm.sh then exits 124)
#   VM_CMDLINE=""        extra kernel command line
#   VM_CONSOLE=0         1: copy the kernel console (ttyS0) to stderr as well
#   VM_RUNDIR=""         where to keep this run's files (default: a new cache/runs/run.XXXXXX)
#   VM_KEEP_RUNS=20      how many old cache/runs/run.* folders to keep
#   VM_CACHE=/var/tmp/gdx-vm-cache (bookworm), /var/tmp/gdx-vm-cache-trixie (trixie)
#   VM_KERNEL_PKG=""     kernel package (default: the one the release's linux-image-amd64
#                        depends on)
#   VM_EXTRA_PACKAGES="" more Debian packages for the guest (prepare)
#
# Guest side
#   Network: qemu user-mode (slirp) only, ipv6 off. Guest eth0 = 10.0.2.15/24 with NO
#   default route; resolv.conf points at the guest's own 127.0.0.1. See VM_NET_RESTRICT.
#   Env in SCRIPT: HOST_IP (10.0.2.100, or 10.0.2.2 with VM_NET_RESTRICT=0; also the
#   name "host" in /etc/hosts), GUEST_IP=10.0.2.15, HARNESS_RUN=/run/harness
#   Root: read-only ext4 image (cache/root.img) under a tmpfs overlay, so it is writable
#   and every boot starts clean. Mounts: /share (VM_SHARE, 9p, cache=none: host changes
#   are seen at once), /run/harness (this run's folder), configfs, devtmpfs, /tmp tmpfs.
#   /etc/nvme/hostnqn and hostid are new random values at every boot.
#   Tools: nvme-cli, iproute2 (ip, rdma, ss), ibverbs-utils, perftest, rdmacm-utils,
#   fio, tcpdump, python3, busybox, kmod; trixie adds tlshd (ktls-utils) and keyctl
#   (keyutils) and the libraries a gdx binary built on the host links (gdx can run inside);
#   tlshd is not started. All of the kernel's modules except graphics,
#   sound, media, wireless, usb, ... are installed (modprobe works, including aliases).
set -euo pipefail

VM_DIST=${VM_DIST:-bookworm}
case "$VM_DIST" in
  bookworm) DIST_PACKAGES="";;
  trixie) DIST_PACKAGES="ktls-utils keyutils liburing2 libjson-c5 libnuma1 libisal2 libssl3t64";;
  *) echo "[vm.sh] ERROR: VM_DIST must be bookworm or trixie" >&2; exit 2;;
esac
SUITE=$VM_DIST
# The cache (about 1 GB) stays outside the repository.
if [ "$VM_DIST" = bookworm ]; then VM_CACHE=${VM_CACHE:-/var/tmp/gdx-vm-cache}; else VM_CACHE=${VM_CACHE:-/var/tmp/gdx-vm-cache-$VM_DIST}; fi
CACHE=$VM_CACHE
VM_MEM=${VM_MEM:-1024}
VM_CPUS=${VM_CPUS:-2}
VM_ACCEL=${VM_ACCEL:-auto}
VM_HOSTFWD=${VM_HOSTFWD:-}
VM_GUESTFWD=${VM_GUESTFWD:-}
VM_NET_RESTRICT=${VM_NET_RESTRICT:-1}
VM_TIMEOUT=${VM_TIMEOUT:-900}
VM_CMDLINE=${VM_CMDLINE:-}
VM_CONSOLE=${VM_CONSOLE:-0}
VM_KEEP_RUNS=${VM_KEEP_RUNS:-20}

# command:package pairs needed on the host
HOST_TOOLS="qemu-system-x86_64:qemu-system-x86 mmdebstrap:mmdebstrap cpio:cpio depmod:kmod
 xz:xz-utils zstd:zstd mke2fs:e2fsprogs busybox:busybox-static socat:socat"
GUEST_PACKAGES="kmod iproute2 procps util-linux mount busybox nvme-cli ibverbs-utils
 ibverbs-providers perftest rdmacm-utils fio tcpdump netcat-openbsd python3 ${DIST_PACKAGES:+$DIST_PACKAGES }${VM_EXTRA_PACKAGES:-}"
# module folders left out of the guest image (size only; nothing here matters for NVMe/RDMA)
MODULE_PRUNE="kernel/sound kernel/drivers/gpu kernel/drivers/media kernel/drivers/net/wireless
 kernel/drivers/staging kernel/drivers/iio kernel/drivers/usb kernel/drivers/bluetooth
 kernel/net/bluetooth kernel/drivers/hwmon kernel/drivers/input kernel/drivers/hid
 kernel/drivers/platform kernel/drivers/infiniband/hw kernel/drivers/net/ethernet"
# modules the stage-1 initramfs loads to mount the root image
STAGE1_MODULES="virtio_pci virtio_blk crc32c_generic ext4 overlay virtio_net virtio_rng 9pnet_virtio 9p configfs"

log() { printf '[vm.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }
hash_of() { printf '%s' "$*" | sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- stage 1: /init in the initramfs
# Everything that can be done with the static busybox is done here: under TCG each exec
# of a dynamically linked binary from the root image costs 50-250 ms.
stage1_init() {
cat <<'EOF'
#!/bin/busybox sh
# stage 1 (static busybox in the initramfs, written by vm.sh prepare)
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /lower /rw /newroot
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
case " $(cat /proc/cmdline) " in *" harness.debug "*) dbg() { echo "stage1 $(cut -d' ' -f1 /proc/uptime) $*"; };; *) dbg() { :; };; esac
fail() { echo "harness stage1: FATAL: $*"; poweroff -f; }
for m in $(cat /modules.list); do insmod "/modules/$m" 2>/dev/null; done
dbg "modules loaded"
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do usleep 20000; i=$((i+1)); done
mount -t ext4 -o ro,noload /dev/vda /lower || fail "cannot mount /dev/vda"
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "overlay"
R=/newroot
mkdir -p $R/proc $R/sys $R/dev $R/run $R/tmp $R/share
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs -o mode=0755 tmpfs $R/run
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t configfs configfs $R/sys/kernel/config
ln -sf /proc/self/fd $R/dev/fd; ln -sf fd/0 $R/dev/stdin; ln -sf fd/1 $R/dev/stdout; ln -sf fd/2 $R/dev/stderr
mkdir -p $R/run/harness
o=trans=virtio,version=9p2000.L,msize=524288
mount -t 9p -o $o harness $R/run/harness || fail "cannot mount the harness share"
mount -t 9p -o $o share $R/share || echo "harness stage1: no /share"
hostname vm
u=$(cat /proc/sys/kernel/random/uuid)           # a fresh NVMe host identity for every boot
mkdir -p $R/etc/nvme; echo "$u" > $R/etc/nvme/hostid; echo "nqn.2014-08.org.nvmexpress:uuid:$u" > $R/etc/nvme/hostnqn
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0     # no default route on purpose
ip route add blackhole 10.0.2.3/32 2>/dev/null                # slirp's DNS forwarder: never
stty -F /dev/ttyS1 raw -echo 2>/dev/null
dbg "root ready"
cut -d' ' -f1 /proc/uptime > $R/run/harness/ready
umount /dev /proc
exec switch_root $R /sbin/harness-init
EOF
}

# ---------------------------------------------------------------- stage 2: /sbin/harness-init on the root image
guest_init() {
cat <<'EOF'
#!/bin/bash
# PID 1 of the harness VM, stage 2 (written by vm.sh prepare): run the script, power off
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8
export HOST_IP=10.0.2.100 GUEST_IP=10.0.2.15 HARNESS_RUN=/run/harness
[ -f /run/harness/env ] && . /run/harness/env
echo "$HOST_IP host" >> /etc/hosts
read -r cmdline < /proc/cmdline
if [[ " $cmdline " == *" harness.shell "* ]]; then
  echo "harness: interactive shell (exit or Ctrl-D powers off)" > /dev/console
  setsid bash -c 'exec bash -i </dev/ttyS0 >/dev/ttyS0 2>&1'
  rc=$?
else
  args=(); [ -s /run/harness/args ] && mapfile -d '' -t args < /run/harness/args
  cd /share 2>/dev/null || cd /
  first=; read -r -n2 first < /run/harness/script
  if [ "$first" = "#!" ]; then
    /run/harness/script "${args[@]}" </dev/null >/dev/ttyS1 2>&1; rc=$?
  else
    bash /run/harness/script "${args[@]}" </dev/null >/dev/ttyS1 2>&1; rc=$?
  fi
fi
cd /
echo "$rc" > /run/harness/rc
sync
umount /share /run/harness 2>/dev/null
busybox poweroff -f
EOF
}

# ---------------------------------------------------------------- prepare
host_sources() {  # the host's Debian apt sources file, if it has one
  local f
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [ -s "$f" ] && grep -qE '^(deb |URIs:)' "$f"; then echo "$f"; return; fi
  done
}

# The guest release's apt sources: the host's own file when the host runs that release,
# else a copy with the host's codename replaced (same mirror, e.g. bookworm-security ->
# trixie-security), kept with a private apt state in cache/apt so the host's apt is untouched.
APT=(apt-get)
APTC=(apt-cache)
guest_sources() {
  local host_src code
  host_src=$(host_sources)
  code=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  if [ -z "$host_src" ] || [ "$code" = "$SUITE" ]; then echo "$host_src"; return; fi
  [ -n "$code" ] || die "cannot tell the host's release (VERSION_CODENAME) to rename it to $SUITE"
  mkdir -p "$CACHE/apt/sources.list.d" "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
  local out=$CACHE/apt/sources.list.d/${host_src##*/}
  sed -E "s/\b$code\b/$SUITE/g" "$host_src" > "$out.tmp" && mv "$out.tmp" "$out"
  echo "$out"
}
apt_setup() {
  local src; src=$(guest_sources)
  if [[ $src == "$CACHE"/apt/* ]]; then
    local o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$CACHE/apt/sources.list.d"
             -o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt/cache"
             -o "Dir::State::status=/dev/null")
    APT=(apt-get "${o[@]}"); APTC=(apt-cache "${o[@]}")
  fi
}

kernel_pkg() {
  if [ -n "${VM_KERNEL_PKG:-}" ]; then echo "$VM_KERNEL_PKG"; return; fi
  "${APTC[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}

prepare_host_tools() {
  local missing="" t
  for t in $HOST_TOOLS; do command -v "${t%%:*}" >/dev/null 2>&1 || missing="$missing ${t#*:}"; done
  [ -z "$missing" ] && return 0
  log "installing host packages:$missing"
  [ "$(id -u)" = 0 ] || die "need root to apt-get install$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

prepare_kernel() {
  local pkg deb kver off
  apt_setup
  if [ -z "$(kernel_pkg)" ]; then "${APT[@]}" update -qq; fi
  pkg=$(kernel_pkg); [ -n "$pkg" ] || die "cannot find the kernel package that linux-image-amd64 depends on"
  if [ "$(cat "$CACHE/kernel/PKG" 2>/dev/null)" = "$pkg" ] && [ -f "$CACHE/kernel/vmlinux" ]; then return 0; fi
  log "downloading $pkg"
  mkdir -p "$CACHE/debs"
  (cd "$CACHE/debs" && rm -f "$pkg"_*.deb && "${APT[@]}" download "$pkg" 2>&1 | grep -v 'unsandboxed' >&2 || true)
  deb=$(ls "$CACHE/debs/$pkg"_*.deb 2>/dev/null | head -1); [ -f "$deb" ] || die "apt-get download $pkg failed"
  rm -rf "$CACHE/kernel.tmp"; mkdir -p "$CACHE/kernel.tmp"
  dpkg -x "$deb" "$CACHE/kernel.tmp/root"
  # bookworm's package ships /lib/modules, trixie's /usr/lib/modules: keep the first layout
  if [ -d "$CACHE/kernel.tmp/root/usr/lib/modules" ]; then
    mkdir -p "$CACHE/kernel.tmp/root/lib"
    mv "$CACHE/kernel.tmp/root/usr/lib/modules" "$CACHE/kernel.tmp/root/lib/"
  fi
  kver=$(ls "$CACHE/kernel.tmp/root/lib/modules/")
  depmod -b "$CACHE/kernel.tmp/root" "$kver"
  cp "$CACHE/kernel.tmp/root/boot/vmlinuz-$kver" "$CACHE/kernel.tmp/vmlinuz"
  # bzImage -> uncompressed ELF vmlinux: qemu boots it through its PVH entry point
  # (CONFIG_PVH=y), which skips real-mode setup and the payload's decompression (~5 s
  # under TCG). bookworm's payload is xz, trixie's zstd.
  local z unz=""
  for z in $'\xfd7zXZ:xz' $'\x28\xb5\x2f\xfd:zstd'; do
    off=$(LC_ALL=C grep -abo "${z%:*}" "$CACHE/kernel.tmp/vmlinuz" | head -1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then unz=${z#*:}; break; fi
  done
  [ -n "$unz" ] || die "no xz or zstd payload in vmlinuz"
  tail -c +$((off + 1)) "$CACHE/kernel.tmp/vmlinuz" | "$unz" -dc > "$CACHE/kernel.tmp/vmlinux" 2>/dev/null || true
  [ "$(head -c4 "$CACHE/kernel.tmp/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || die "vmlinux extraction failed"
  echo "$kver" > "$CACHE/kernel.tmp/KVER"
  echo "$pkg" > "$CACHE/kernel.tmp/PKG"
  rm -rf "$CACHE/kernel"; mv "$CACHE/kernel.tmp" "$CACHE/kernel"
  rm -f "$deb"                              # unpacked in kernel/root; ~70 MB
}

prepare_rootfs() {
  local want src
  want=$(hash_of "$SUITE $GUEST_PACKAGES")
  if [ -d "$CACHE/rootfs/usr" ] && [ "$(cat "$CACHE/rootfs.stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "building the guest root file system with mmdebstrap ($SUITE: $(echo $GUEST_PACKAGES))"
  # the host's mirror (see guest_sources), else mmdebstrap's default
  src=$(guest_sources)
  rm -rf "$CACHE/rootfs" "$CACHE/rootfs.stamp"
  mmdebstrap --mode=root --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include="$(echo $GUEST_PACKAGES | tr ' ' ',')" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/i18n/*' --dpkgopt='path-exclude=/usr/share/zoneinfo/*' \
    "$SUITE" "$CACHE/rootfs" $src > "$CACHE/mmdebstrap.log" 2>&1 \
    || { tail -30 "$CACHE/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $CACHE/mmdebstrap.log)"; }
  rm -rf "$CACHE/rootfs/var/cache/"* "$CACHE/rootfs/var/log/"* "$CACHE/rootfs/var/lib/apt/lists/"* 2>/dev/null || true
  echo "$want" > "$CACHE/rootfs.stamp"
}

prepare_image() {
  # root.img: rootfs + kernel modules + /sbin/harness-init;  initrd.cpio: stage 1
  local kver kroot want r d m size st1
  kver=$(cat "$CACHE/kernel/KVER"); kroot=$CACHE/kernel/root; r=$CACHE/rootfs
  want=$(hash_of "$kver $(cat "$CACHE/rootfs.stamp") $MODULE_PRUNE $STAGE1_MODULES $(guest_init) $(stage1_init) $(declare -f prepare_image)")
  if [ -f "$CACHE/root.img" ] && [ -f "$CACHE/initrd.cpio" ] && [ "$(cat "$CACHE/image.stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "building root.img and initrd.cpio (kernel $kver)"
  rm -rf "$r/usr/lib/modules"; mkdir -p "$r/usr/lib/modules"
  cp -a "$kroot/lib/modules/$kver" "$r/usr/lib/modules/"
  for d in $MODULE_PRUNE; do rm -rf "${r:?}/usr/lib/modules/$kver/$d"; done
  depmod -b "$r" "$kver"
  guest_init > "$r/sbin/harness-init"; chmod 755 "$r/sbin/harness-init"
  # no name server: lookups must never leave the guest (mmdebstrap copied the host's file)
  rm -f "$r/etc/resolv.conf"; echo "nameserver 127.0.0.1" > "$r/etc/resolv.conf"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tvm\n' > "$r/etc/hosts"
  echo vm > "$r/etc/hostname"
  size=$(( $(du -sm "$r" | cut -f1) * 12 / 10 + 64 ))
  rm -f "$CACHE/root.img.tmp"
  mke2fs -q -F -t ext4 -O ^has_journal,^metadata_csum -L harness-root -d "$r" "$CACHE/root.img.tmp" "${size}M" \
    >/dev/null || die "mke2fs failed"
  mv "$CACHE/root.img.tmp" "$CACHE/root.img"
  rm -rf "${r:?}/usr/lib/modules/$kver"     # only needed inside root.img
  # stage-1 initramfs: static busybox + the modules to mount the root image
  st1=$CACHE/stage1; rm -rf "$st1"; mkdir -p "$st1/bin" "$st1/modules"
  cp "$(command -v busybox)" "$st1/bin/busybox"
  modprobe -d "$kroot" -S "$kver" --show-depends -a $STAGE1_MODULES | awk '$1=="insmod"{print $2}' | awk '!s[$0]++' \
  | while read -r m; do cp "$m" "$st1/modules/"; basename "$m"; done > "$st1/modules.list"
  stage1_init > "$st1/init"; chmod 755 "$st1/init"
  (cd "$st1" && find . -print0 | cpio --null -o -H newc --quiet) > "$CACHE/initrd.cpio"
  echo "$want" > "$CACHE/image.stamp"
}

cmd_prepare() {
  local t0; t0=$(now)
  mkdir -p "$CACHE"
  prepare_host_tools
  prepare_kernel
  prepare_rootfs
  prepare_image
  log "prepare done in $(secs "$t0" "$(now)") s; cache: $(du -sh "$CACHE" | cut -f1) ($CACHE)"
}

# ---------------------------------------------------------------- run
pick_accel() {
  case "$VM_ACCEL" in
    kvm|tcg) echo "$VM_ACCEL"; return;;
    auto) ;;
    *) die "VM_ACCEL must be auto, kvm or tcg";;
  esac
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; } && [ ! -d /sys/module/kvm_pvm ]; then
    echo kvm
  else
    echo tcg
  fi
}

boot_vm() {  # $1 = run dir, $2 = mode (script|shell)
  local run=$1 mode=$2 accel fwd="" r cmdline share qrc
  [ -f "$CACHE/root.img" ] && [ -f "$CACHE/initrd.cpio" ] && [ -f "$CACHE/kernel/vmlinux" ] || die "run '$0 prepare' first"
  accel=$(pick_accel)
  for r in $VM_HOSTFWD; do
    [[ $r =~ ^(tcp|udp):127\.[0-9]+\.[0-9]+\.[0-9]+:[0-9]+-(10\.0\.2\.15)?:[0-9]+$ ]] \
      || die "hostfwd rule '$r' must look like tcp:127.0.0.1:HOSTPORT-:GUESTPORT (loopback only)"
    fwd="$fwd,hostfwd=$r"
  done
  if [ "$VM_NET_RESTRICT" = 1 ]; then
    fwd="$fwd,restrict=on"; echo "HOST_IP=10.0.2.100" > "$run/env"
    for r in $VM_GUESTFWD; do
      [[ $r =~ ^([0-9]+)(:([0-9]+))?$ ]] || die "guestfwd entry '$r' must be PORT or PORT:HOSTPORT"
      fwd="$fwd,guestfwd=tcp:10.0.2.100:${BASH_REMATCH[1]}-cmd:socat -lf /dev/null STDIO TCP4:127.0.0.1:${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}"
    done
  else
    echo "HOST_IP=10.0.2.2" > "$run/env"
    [ -z "$VM_GUESTFWD" ] || log "VM_GUESTFWD is ignored with VM_NET_RESTRICT=0 (10.0.2.2 reaches every host port)"
  fi
  share=${VM_SHARE:-$PWD}; [ -d "$share" ] || die "VM_SHARE=$share is not a folder"
  # no_timer_check: under TCG on a loaded host 6.12's IO-APIC timer check can miss its
  # ticks and panic ("IO-APIC + timer doesn't work!"); qemu's timer is known to work
  cmdline="console=ttyS0 rdinit=/init panic=-1 quiet loglevel=4 mitigations=off random.trust_cpu=on"
  cmdline="$cmdline no_timer_check"
  [ "$mode" = shell ] && cmdline="$cmdline harness.shell"
  cmdline="$cmdline $VM_CMDLINE"
  local q=(qemu-system-x86_64 -name harness -machine q35 -m "$VM_MEM" -smp "$VM_CPUS"
    -nodefaults -no-user-config -display none -no-reboot
    -kernel "$CACHE/kernel/vmlinux" -initrd "$CACHE/initrd.cpio" -append "$cmdline"
    -drive "file=$CACHE/root.img,if=none,id=root,format=raw,readonly=on"
    -device virtio-blk-pci,drive=root
    -netdev "user,id=n0,ipv6=off,net=10.0.2.0/24$fwd" -device virtio-net-pci,netdev=n0
    -device virtio-rng-pci
    -virtfs "local,path=$run,mount_tag=harness,security_model=none,id=fs0"
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=fs1")
  if [ "$accel" = kvm ]; then q+=(-accel kvm -cpu host); else q+=(-accel tcg,thread=multi -cpu max); fi
  if [ "$mode" = shell ]; then
    q+=(-serial mon:stdio)
  else
    q+=(-serial "file:$run/console.log"
        -chardev "stdio,id=out,signal=off,logfile=$run/output.log" -serial chardev:out)
  fi
  printf '%q ' "${q[@]}" > "$run/qemu.cmd"; echo >> "$run/qemu.cmd"
  echo "$accel" > "$run/accel"
  if [ "$mode" = shell ]; then "${q[@]}"; return; fi
  log "booting: accel=$accel mem=${VM_MEM}M cpus=$VM_CPUS timeout=${VM_TIMEOUT}s share=$share restrict=$VM_NET_RESTRICT${VM_HOSTFWD:+ hostfwd=$VM_HOSTFWD}${VM_GUESTFWD:+ guestfwd=$VM_GUESTFWD}"
  if [ "$VM_CONSOLE" = 1 ]; then tail -F -n +1 "$run/console.log" >&2 2>/dev/null & echo $! > "$run/tail.pid"; fi
  qrc=0; timeout -k 5 "$VM_TIMEOUT" "${q[@]}" < /dev/null || qrc=$?
  if [ -f "$run/tail.pid" ]; then kill "$(cat "$run/tail.pid")" 2>/dev/null || true; fi
  return $qrc
}

new_rundir() {
  local run
  if [ -n "${VM_RUNDIR:-}" ]; then
    run=$VM_RUNDIR; mkdir -p "$run"; rm -f "$run"/{rc,ready,console.log,output.log,script,args,env,tail.pid}
  else
    mkdir -p "$CACHE/runs"
    # keep the newest VM_KEEP_RUNS run folders
    ls -1dt "$CACHE"/runs/run.* 2>/dev/null | tail -n +"$((VM_KEEP_RUNS + 1))" | xargs -r rm -rf
    run=$(mktemp -d "$CACHE/runs/run.XXXXXX")
  fi
  echo "$run"
}

cmd_run() {
  [ $# -ge 1 ] || die "usage: $0 run SCRIPT [ARGS...]"
  local script=$1; shift
  [ -f "$script" ] || die "no such script: $script"
  local run t0 t1 qrc rc ready boot up a
  run=$(new_rundir)
  cp "$script" "$run/script"; chmod 755 "$run/script"
  : > "$run/args"; for a in "$@"; do printf '%s\0' "$a" >> "$run/args"; done
  t0=$(now)
  qrc=0; boot_vm "$run" script || qrc=$?
  # A guest kernel that dies before its shell (under TCG the 6.12 kernel now and then
  # takes an int3 while patching its text at boot) ran nothing of the script: boot again.
  for a in 1 2; do
    [ ! -f "$run/ready" ] && [ ! -f "$run/rc" ] && [ "$qrc" != 124 ] && [ "$qrc" != 137 ] ||
      break
    log "the guest died before its shell (qemu exit $qrc; last console line: $(tail -n 1 \
      "$run/console.log" 2>/dev/null | cut -c1-100)): booting again ($a of 2)"
    rm -f "$run"/{console.log,output.log,tail.pid}
    qrc=0; boot_vm "$run" script || qrc=$?
  done
  t1=$(now)
  if [ -s "$run/output.log" ] && [ -n "$(tail -c1 "$run/output.log")" ]; then echo >&2; fi
  if [ -f "$run/ready" ]; then
    ready=$(stat -c %.9Y "$run/ready"); boot=$(secs "$t0" "$ready"); up=$(cat "$run/ready")
  else boot="?"; up="?"; fi
  if [ -f "$run/rc" ]; then
    rc=$(cat "$run/rc")
  else
    if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then rc=124; log "TIMEOUT: VM killed after ${VM_TIMEOUT}s"; else rc=125; fi
    log "the guest did not report an exit status (qemu exit $qrc); last console lines:"
    tail -n 40 "$run/console.log" >&2 2>/dev/null || true
  fi
  log "accel=$(cat "$run/accel") boot-to-shell=${boot}s (guest uptime ${up}s) total=$(secs "$t0" "$t1")s exit=$rc run-dir=$run"
  exit "$rc"
}

# ---------------------------------------------------------------- share
# A host-built binary runs in the guest (the host's release or a later one: the same
# glibc or a newer) on the guest's own libraries wherever the image has them, so
# that libibverbs matches the guest's providers and glibc stays whole, and on the host's
# for the rest, whatever they are: bookworm's image has no liburing or ISA-L, neither
# has cmocka or the sanitizers' runtimes.  The image's files are the cache's rootfs.
cmd_share() {
  [ $# -ge 2 ] || die "usage: $0 share DIR BIN..."
  local dir=$1 libs lib; shift
  [ -d "$CACHE/rootfs/usr" ] || die "run '$0 prepare' first"
  libs=$(ldd "$@") || die "ldd $* failed"
  ! grep 'not found' <<<"$libs" || die "libraries missing on this machine"
  mkdir -p "$dir/lib"
  cp -- "$@" "$dir/"
  while read -r lib; do
    [ -e "$CACHE/rootfs$lib" ] || cp "$lib" "$dir/lib/"
  done < <(awk '/=> \// { print $3 }' <<<"$libs" | sort -u)
}

cmd_shell() {
  local run; run=$(new_rundir); : > "$run/script"
  boot_vm "$run" shell
}

cmd_info() {
  echo "release:    $VM_DIST"
  echo "cache:      $CACHE ($(du -sh "$CACHE" 2>/dev/null | cut -f1))"
  echo "kernel:     $(cat "$CACHE/kernel/PKG" 2>/dev/null) $(cat "$CACHE/kernel/KVER" 2>/dev/null)"
  echo "root.img:   $(du -h --apparent-size "$CACHE/root.img" 2>/dev/null | cut -f1) ($(du -h "$CACHE/root.img" 2>/dev/null | cut -f1) used)"
  echo "accel:      $(pick_accel) (VM_ACCEL=$VM_ACCEL)"
  echo "qemu:       $(qemu-system-x86_64 --version 2>/dev/null | head -1)"
  echo "packages:   $(echo $GUEST_PACKAGES)"
}

case "${1:-}" in
  prepare) shift; cmd_prepare "$@";;
  run)     shift; cmd_run "$@";;
  share)   shift; cmd_share "$@";;
  shell)   shift; cmd_shell "$@";;
  info)    shift; cmd_info "$@";;
  clean)   rm -rf "$CACHE";;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 2;;
esac
