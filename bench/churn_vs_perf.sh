#!/bin/bash
# jprofd's cost on a host that starts processes all the time, side by side
# with perf's on the same load in the same run (issue 27, item 7).
#
# The load, the same in every phase: a loop that starts short processes
# (about BENCH_SPAWN_RATE a second: sh, sed, a small gcc -c, true) and
# nproc/2 busy programs (xz -9 of random data, python3 arithmetic). Phases,
# BENCH_SECONDS each, one after the other:
#   jprofd --rate 19    the default host view
#   jprofd --rate 99
#   perf record -a -F 99 -g (frame pointers, written to a file in /tmp)
# Cost: a daemon's CPU time (its threads' schedstat) plus the time its BPF
# programs ran (kernel.bpf_stats_enabled; the kernel charges that time to
# the interrupted tasks, so it is added here); perf's user+system CPU, its
# threads included. perf's own in-kernel work (the callchain walk in the
# interrupt) is charged to the interrupted tasks and not counted, so the
# ratio is in perf's favour. Also prints processes started per second
# (/proc/stat), the daemon's RSS at start and end, and its unwind counters.
# Not a pass/fail test. Run as root.
#   JPROFD=path            default: build/jprofd
#   BENCH_SECONDS=120      per phase
#   BENCH_SPAWN_RATE=25    processes started per second by the churn loop
#   BENCH_WARMUP=15        seconds after a daemon starts that are not measured
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jprofd=${JPROFD:-$src/build/jprofd}
seconds=${BENCH_SECONDS:-120}
rate=${BENCH_SPAWN_RATE:-25}
warmup=${BENCH_WARMUP:-15}

if [ "$(id -u)" -ne 0 ]; then
	echo "churn_vs_perf.sh: must be run as root" >&2
	exit 1
fi
for tool in perf bpftool python3 gcc xz; do
	command -v "$tool" >/dev/null || { echo "churn_vs_perf.sh: needs $tool" >&2; exit 1; }
done
[ -x "$jprofd" ] || { echo "churn_vs_perf.sh: $jprofd not found; build first" >&2; exit 1; }

work=$(mktemp -d /tmp/jprof-churn-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
	rm -rf "$work"
}
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1

printf 'int f(int x) { return x * 3 + 1; }\n' >"$work/small.c"
head -c 64M /dev/urandom >"$work/random"

# The churn: each round starts 4 processes (sh, sed, gcc (+cc1, as), true);
# rounds are paced to the asked rate.
churn() {
	local pause
	pause=$(python3 -c "print(4.0 / $rate)")
	while :; do
		sh -c 'echo x | sed s/x/y/ >/dev/null'
		gcc -c -o "$work/small.o" "$work/small.c" 2>/dev/null || true
		/bin/true
		sleep "$pause"
	done
}
busy() {
	local i
	for i in $(seq 1 $(( ($(nproc) + 1) / 2 ))); do
		if [ $((i % 2)) -eq 1 ]; then
			(while :; do xz -9 -T1 -c "$work/random" >/dev/null; done) &
		else
			(python3 -c 'while True: sum(i * i for i in range(100000))') &
		fi
		pids+=($!)
	done
}
churn &
pids+=($!)
busy

forks() { awk '/^processes/ { print $2 }' /proc/stat; }
cpu_ns() {  # on-CPU time of pid's live threads (schedstat: ns, user+system)
	cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'
}
bpf_ns() {  # run time of the BPF programs pid holds (fdinfo prog_id -> bpftool)
	local id total=0 ns
	for id in $(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | sort -u); do
		ns=$(bpftool prog show id "$id" -j 2>/dev/null |
		     python3 -c 'import json,sys; print(json.load(sys.stdin).get("run_time_ns", 0))' || echo 0)
		total=$((total + ns))
	done
	echo $total
}
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

report() {  # name cpu_ns bpf_ns forks seconds
	python3 - "$@" <<'EOF'
import sys
name, cpu_ns, bpf_ns, forks, secs = sys.argv[1:]
cpu = int(cpu_ns) / 1e9
bpf = int(bpf_ns) / 1e9
secs = float(secs)
print("%-16s cpu %6.2f%%  bpf %6.2f%%  total %6.2f%% of a core   %5.1f new processes/s"
      % (name, 100 * cpu / secs, 100 * bpf / secs, 100 * (cpu + bpf) / secs, int(forks) / secs))
EOF
}

results=()
for hz in 19 99; do
	sock=$work/jprofd-$hz.sock
	"$jprofd" --socket "$sock" --rate "$hz" 2>"$work/jprofd-$hz.err" &
	d=$!
	pids+=($d)
	sleep "$warmup"
	t0=$(cpu_ns $d); b0=$(bpf_ns $d); f0=$(forks); r0=$(rss_kb $d)
	sleep "$seconds"
	t1=$(cpu_ns $d); b1=$(bpf_ns $d); f1=$(forks); r1=$(rss_kb $d)
	"$src/build/jprofctl" --socket "$sock" status --json >"$work/status-$hz.json" 2>/dev/null || true
	kill -TERM $d; wait $d || true
	line=$(report "jprofd ${hz} Hz" $((t1 - t0)) $((b1 - b0)) $((f1 - f0)) "$seconds")
	echo "$line   RSS ${r0} -> ${r1} KiB"
	results+=("$line")
	python3 - "$work/status-$hz.json" <<'EOF' || true
import json, sys
u = json.load(open(sys.argv[1]))["status"]["sampler"].get("unwind", {})
keys = ("stacks", "stacks_to_root", "stacks_without_tables", "requests", "requests_deferred",
        "requests_deferred_exited", "process_reads", "builds", "rows", "rows_capacity", "rows_full")
print("  unwind: " + ", ".join("%s %s" % (k, u.get(k)) for k in keys))
EOF
done

perf record -a -F 99 -g -o "$work/perf.data" -q -- sleep $((seconds + warmup)) 2>"$work/perf.err" &
pp=$!
pids+=($pp)
sleep "$warmup"
p=$pp
t0=$(cpu_ns "$p"); f0=$(forks)
sleep "$seconds"
t1=$(cpu_ns "$p"); f1=$(forks)
wait $pp || true
line=$(report "perf -F 99 -g" $((t1 - t0)) 0 $((f1 - f0)) "$seconds")
echo "$line   (perf.data $(du -h "$work/perf.data" | cut -f1))"
results+=("$line")

python3 - "${results[@]}" <<'EOF'
import re, sys
tot = [float(re.search(r"total +([0-9.]+)%", l).group(1)) for l in sys.argv[1:]]
if tot[2] > 0:
    print("jprofd 19 Hz / perf 99 Hz: %.2fx   jprofd 99 Hz / perf 99 Hz: %.2fx"
          % (tot[0] / tot[2], tot[1] / tot[2]))
EOF
