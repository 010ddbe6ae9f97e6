#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Copies what `gdx check` and the topology walk read on this machine into a
# fixture tree, so the report can be reproduced (and tested) anywhere:
#
#   scripts/topo-snapshot.sh DIR      then   gdx check --root DIR
#
# DIR gets sys/ (PCI functions and their bridges, RDMA, net, NVMe and block
# classes, IOMMU groups, a few module entries), proc/ (modules, cmdline,
# meminfo, the NVIDIA driver's version and params, the kallsyms line P2PDMA
# needs) and lib/modules/<release>/ (the modules.dep and modules.builtin lines
# of the modules gdx check asks about).  Links keep their targets, so the
# tree has the machine's layout.  Run it as root to get whole config spaces.
# Plain POSIX sh and coreutils: it runs on a machine with nothing installed.
set -u
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
out=$1
S=/sys
P=/proc
mkdir -p "$out/sys" "$out/proc" || exit 1

# copy a readable regular file (relative to /sys)
f() {
	[ -f "$S/$1" ] && [ -r "$S/$1" ] || return 0
	mkdir -p "$out/sys/${1%/*}"
	cat "$S/$1" >"$out/sys/$1" 2>/dev/null || rm -f "$out/sys/$1"
}
# recreate a link with the same (relative) target
l() {
	[ -L "$S/$1" ] || return 0
	mkdir -p "$out/sys/${1%/*}"
	ln -sfn "$(readlink "$S/$1")" "$out/sys/$1"
}
# the path of a link's target relative to /sys
real() {
	r=$(readlink -f "$S/$1") || return 1
	echo "${r#"$S"/}"
}
# an empty directory git keeps
mark() {
	mkdir -p "$out/sys/$1" && : >"$out/sys/$1/.snapshot"
}

for dev in "$S"/bus/pci/devices/*; do
	[ -e "$dev" ] || continue
	b=${dev##*/}
	l "bus/pci/devices/$b"
	r=$(real "bus/pci/devices/$b") || continue
	for a in vendor device class numa_node local_cpulist resource; do
		f "$r/$a"
	done
	# unprivileged readers get the first 64 bytes; root the whole space
	head -c 4096 "$S/$r/config" >"$out/sys/$r/config" 2>/dev/null || rm -f "$out/sys/$r/config"
	l "$r/driver"
	if [ -L "$S/$r/driver" ]; then
		d=$(real "$r/driver") && mark "$d"
	fi
	if [ -L "$S/$r/iommu_group" ]; then
		l "$r/iommu_group"
		g=$(real "$r/iommu_group") && f "$g/type"
	fi
done

for c in "$S"/class/infiniband/*; do
	[ -e "$c" ] || continue
	n=${c##*/}
	l "class/infiniband/$n"
	r=$(real "class/infiniband/$n") || continue
	l "$r/device"
	f "$r/parent"
	for a in link_layer state rate; do
		f "$r/ports/1/$a"
	done
done

for c in "$S"/class/net/*; do
	[ -e "$c" ] || continue
	n=${c##*/}
	[ -L "$S/class/net/$n/device" ] || continue
	l "class/net/$n"
	r=$(real "class/net/$n") || continue
	l "$r/device"
	mark "$r"
done

for c in "$S"/class/nvme/*; do
	[ -e "$c" ] || continue
	n=${c##*/}
	l "class/nvme/$n"
	r=$(real "class/nvme/$n") || continue
	for a in transport model subsysnqn address state; do
		f "$r/$a"
	done
	l "$r/device"
done

for c in "$S"/class/block/*; do
	[ -e "$c" ] || continue
	n=${c##*/}
	l "class/block/$n"
	r=$(real "class/block/$n") || continue
	f "$r/dev"
	f "$r/size"
	f "$r/partition"
	l "$r/device"
	if [ -L "$S/$r/device" ]; then
		d=$(real "$r/device") && l "$d/driver"
		[ -L "$S/$d/driver" ] && dd=$(real "$d/driver") && mark "$dd"
	fi
	for s in "$S/$r"/slaves/*; do
		[ -e "$s" ] && l "$r/slaves/${s##*/}"
	done
done
for c in "$S"/dev/block/*; do
	[ -e "$c" ] && l "dev/block/${c##*/}"
done

for c in "$S"/class/iommu/*; do
	[ -e "$c" ] || continue
	n=${c##*/}
	l "class/iommu/$n"
	r=$(real "class/iommu/$n") && mark "$r"
done

for m in nvidia nvidia_peermem nvidia_fs ib_uverbs ib_core nvme_tcp nvme_rdma nvmet nvmet_tcp \
	nvmet_rdma nvme_core rdma_rxe; do
	[ -d "$S/module/$m" ] && mark "module/$m"
done
f module/nvme_core/parameters/multipath
f kernel/mm/transparent_hugepage/enabled

pf() {
	[ -r "$P/$1" ] || return 0
	case $1 in */*) mkdir -p "$out/proc/${1%/*}" ;; esac
	cat "$P/$1" >"$out/proc/$1" 2>/dev/null || rm -f "$out/proc/$1"
}
for a in modules cmdline meminfo sys/kernel/osrelease sys/kernel/io_uring_disabled \
	driver/nvidia/version driver/nvidia/params; do
	pf "$a"
done
grep -m1 p2pdma_pgmap_ops "$P/kallsyms" >"$out/proc/kallsyms" 2>/dev/null ||
	rm -f "$out/proc/kallsyms"

rel=$(cat "$P/sys/kernel/osrelease" 2>/dev/null || uname -r)
# the lines naming these modules themselves, not those that depend on them
wanted='^[^:]*/(nvme-tcp|nvme-rdma|nvmet|nvmet-tcp|nvmet-rdma|nvidia-peermem|nvidia-fs|ib_uverbs|nvidia_fs|nvidia_peermem)\.ko[.a-z]*(:|$)'
if [ -d "/lib/modules/$rel" ]; then
	mkdir -p "$out/lib/modules/$rel"
	for m in modules.dep modules.builtin; do
		grep -E "$wanted" "/lib/modules/$rel/$m" | cut -d: -f1 >"$out/lib/modules/$rel/$m"
	done
fi
echo "snapshot of $(uname -n) ($rel) in $out: gdx check --root $out"
