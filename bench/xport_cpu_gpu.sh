#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Where the transport's host -> host bandwidth goes (issue 21: 64 KiB messages carry
# 0.8 of one raw TCP stream): `gdx bench xport --op write` at each size, with the CPU
# each thread of the process used inside its gdx bandwidth phase and inside the raw
# TCP stream's that follows (the ceiling), where each busy thread of the gdx phase
# waits (its system call, sampled every 10 ms: epoll_wait, sendmsg, futex...), then a
# second run under `perf record` (cpu-clock: no hardware events in a guest) for the gdx
# phase's hottest symbols per thread.  The H200 has no perf: stage this machine's with
# bench/perf_stage.sh .carry/perf and put .carry/perf first in PATH there.
#
#   bench/xport_cpu_gpu.sh [GDX]
#
# GDX as for bench/xport_speed_gpu.sh.  GDX_XPORT_SIZES (default "64k 256k"),
# GDX_XPORT_SECS (per phase, default 4), GDX_XPORT_PERF_DIR (keeps each size's
# perf-SIZE.data there).  A thread near 100% bounds the phase; all
# well under it, the hand-overs between them do.  About 25 s a size.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"
O=$(mktemp -d 2>/dev/null || echo /tmp)
SECS=${GDX_XPORT_SECS:-4}
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# cpu T0 T1 DT: the threads' CPU between two gpu_ticks files, busiest first
cpu() {
	join "$1" "$2" | awk -v dt="$3" '{ c = ($5 - $3) / dt; s += c; if (c >= 5) printf "%s %.0f%%\n", $2, c }
		END { printf "total %.0f%%\n", s }' | sort -k2 -nr | tr '\n' ' '
}

for size in ${GDX_XPORT_SIZES:-64k 256k}; do
	$loader "$GDX" bench xport --addr tcp://127.0.0.1:0 --sizes "$size" --secs "$SECS" \
		--op write --src host --dst host >"$O/x.out" 2>&1 &
	bp=$!
	# the gdx phase comes first, then the raw stream's, each SECS long
	sleep 1
	gpu_ticks $bp >"$O/a0"; a0=$(date +%s.%N)
	: >"$O/w"
	end=$(($(date +%s%N) + 1800000000))
	while [ "$(date +%s%N)" -lt $end ]; do
		for t in /proc/$bp/task/*; do
			read -r sc _ <"$t/syscall" 2>/dev/null || continue
			echo "$(cat "$t/comm")#${t##*/} $sc"
		done >>"$O/w" 2>/dev/null
		sleep 0.01
	done
	gpu_ticks $bp >"$O/a1"; a1=$(date +%s.%N)
	sleep $((SECS - 3 + 1))
	gpu_ticks $bp >"$O/b0"; b0=$(date +%s.%N)
	sleep 2
	gpu_ticks $bp >"$O/b1"; b1=$(date +%s.%N)
	wait $bp
	grep -E "^ +$size " "$O/x.out"
	echo "  gdx phase:  $(cpu "$O/a0" "$O/a1" "$(awk "BEGIN { print $a1 - $a0 }")")"
	echo "  raw stream: $(cpu "$O/b0" "$O/b1" "$(awk "BEGIN { print $b1 - $b0 }")")"
	# per thread of the gdx phase: the share of samples in each state, the system call it
	# sleeps in (x86-64: 232 epoll_wait, 202 futex, 46 sendmsg, 44 sendto, 45 recvfrom,
	# 47 recvmsg, 7 poll, 24 sched_yield) or "running" (on a CPU)
	awk '{ n[$1]++; k[$1 " " $2]++ } END { for (x in k) { split(x, a, " ");
		if (n[a[1]] >= 20 && k[x] * 100 / n[a[1]] >= 3) printf "%s %s %.0f%%\n", a[1], a[2], k[x] * 100 / n[a[1]] } }' \
		"$O/w" | sort | awk '{ if ($1 != last) { printf "%s  %s:", (NR > 1 ? "\n" : ""), $1; last = $1 }
		printf " %s %s", $2, $3 } END { print "" }' | sed 's/^/  waits /'

	command -v perf >/dev/null || continue
	$loader "$GDX" bench xport --addr tcp://127.0.0.1:0 --sizes "$size" --secs "$SECS" \
		--op write --src host --dst host --no-ceiling >"$O/p.out" 2>&1 &
	bp=$!
	sleep 1
	perf record -q -e cpu-clock -F 999 -g -p $bp -o "$O/perf.data" -- sleep 2 >/dev/null 2>&1
	wait $bp
	grep -E "^ +$size " "$O/p.out" | sed 's/^/  under perf: /'
	[ -n "${GDX_XPORT_PERF_DIR:-}" ] && cp "$O/perf.data" "$GDX_XPORT_PERF_DIR/perf-$size.data"
	perf report -q -i "$O/perf.data" --no-children --sort comm,sym -g none 2>/dev/null |
		awk 'NF && $1 ~ /%$/ { print "   " $0; if (++n == 40) exit }'
done
