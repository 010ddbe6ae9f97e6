# shellcheck shell=bash
# Sourced by a bench guest script when the share holds perf (bench/vm_perf.sh).
# perf_run NAME CMD...: runs CMD twice, once under `perf stat -a -A` (per vCPU: CPU
# time, context switches, system calls: exact counts) and once under `perf record -a -g`
# (cpu-clock samples at 999 Hz, and system calls sampled by period); the reports go to
# /share/perf/out/NAME.{stat,dso,sym,cpu,sys}, CMD's output to NAME.out, and the data
# with the guest's kallsyms to NAME.{data,kallsyms}, for a closer look on the host:
#   perf report -i NAME.data --kallsyms NAME.kallsyms --comms gdx-nvmf-rdma0 --sort sym
# Both runs carry perf's cost (every system call hits a tracepoint): compare targets
# under it with each other, not with the unprofiled rounds.
PERF_DIR=/share/perf
# the host's perf with its own libraries; the command it runs keeps the guest's
perf_() { /lib64/ld-linux-x86-64.so.2 --library-path $PERF_DIR/lib $PERF_DIR/perf "$@"; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
echo -1 > /proc/sys/kernel/perf_event_paranoid
echo 0 > /proc/sys/kernel/kptr_restrict

perf_run() {
  local o=$PERF_DIR/out/$1 d=/tmp/perf-$1.data; shift
  perf_ stat -a -A -x, -e cpu-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter \
    -o "$o.stat" -- "$@" > "$o.out" 2>&1
  perf_ record -q -a -g -F 999 -e cpu-clock -e raw_syscalls:sys_enter -o "$d" -- "$@" \
    >> "$o.out" 2>&1
  # where the CPU time goes: by program and library; the busiest programs' symbols
  # (each relative to its program); by vCPU
  perf_ report -i "$d" --stdio --no-children -g none --percent-limit 0.5 \
    --sort comm,dso > "$o.dso" 2>/dev/null
  perf_ report -i "$d" --stdio --no-children -g none --percent-limit 0.3 \
    --sort comm,dso,sym > "$o.sym" 2>/dev/null
  perf_ report -i "$d" --stdio --no-children -g none --sort cpu,comm > "$o.cpu" 2>/dev/null
  # system calls by program and number, each sample weighted by its period
  perf_ script -i "$d" -F comm,period,event,trace 2>/dev/null | awk '
    BEGIN { split("0 read 1 write 3 close 7 poll 9 mmap 10 mprotect 11 munmap 16 ioctl " \
                  "17 pread64 18 pwrite64 19 readv 20 writev 24 sched_yield 35 nanosleep " \
                  "202 futex 208 io_getevents 209 io_submit 228 clock_gettime " \
                  "230 clock_nanosleep 232 epoll_wait 257 openat 262 newfstatat " \
                  "270 pselect6 271 ppoll 281 epoll_pwait 426 io_uring_enter", t, " ")
            for (i = 1; i < length(t); i += 2) name[t[i]] = t[i + 1] }
    { for (e = 1; e <= NF; e++) if ($e == "raw_syscalls:sys_enter:") break
      if (e > NF || $(e + 1) != "NR") next
      c = $1; for (j = 2; j < e - 1; j++) c = c " " $j
      nr = $(e + 2); n[c " " (nr in name ? name[nr] : "NR" nr)] += $(e - 1); all += $(e - 1) }
    END { printf "%d system calls\n", all
          for (k in n) printf "%8d %s\n", n[k], k | "sort -rn" }' > "$o.sys"
  # the data and the guest kernel's symbols, to look again on the host (--kallsyms)
  cp "$d" "$o.data"
  cp /proc/kallsyms "$o.kallsyms"
  rm -f "$d"
}
