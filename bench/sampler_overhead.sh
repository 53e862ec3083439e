#!/bin/bash
# Measures what the always-on system-wide sampler costs: runs jprofd with
# --rate 99 on a temporary socket while every CPU is kept busy, and samples
# the daemon's CPU time (utime+stime from /proc/PID/stat) and RSS every
# INTERVAL seconds. Not a pass/fail test. Run as root.
#   JPROFD=path        default: build/jprofd
#   BENCH_SECONDS=60   measurement length
#   BENCH_INTERVAL=5   sampling interval
#   BENCH_RATE=99      --rate passed to jprofd
#   BENCH_BUSY=N       busy processes (default: nproc)
#   BENCH_LOAD=mixed   mixed: half spinners, half tar|gzip and find loops
#                      (many distinct user and kernel stacks); spin: spinners only
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jprofd=${JPROFD:-$src/build/jprofd}
spin=${SPIN_CHAIN:-$src/build/tests/progs/spin_chain}
seconds=${BENCH_SECONDS:-60}
interval=${BENCH_INTERVAL:-5}
rate=${BENCH_RATE:-99}
busy=${BENCH_BUSY:-$(nproc)}
load=${BENCH_LOAD:-mixed}
clk_tck=$(getconf CLK_TCK)

if [ "$(id -u)" -ne 0 ]; then
	echo "sampler_overhead.sh: must be run as root (jprofd loads BPF programs)" >&2
	exit 1
fi
if [ ! -x "$jprofd" ]; then
	echo "sampler_overhead.sh: $jprofd not found; build first or set JPROFD" >&2
	exit 1
fi

tmp=$(mktemp -d /tmp/jprof-bench.XXXXXX)
daemon_pid=""
busy_pids=()

cleanup() {
	local p
	for p in "${busy_pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
	fi
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# cpu_ticks PID: utime+stime in clock ticks (fields 14 and 15; the comm
# field may contain spaces, so split after the last ')').
cpu_ticks() {
	local stat
	stat=$(<"/proc/$1/stat")
	stat=${stat##*) }
	# shellcheck disable=SC2086 # word splitting is the point
	set -- $stat
	echo $(( ${12} + ${13} ))
}

rss_kb() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

"$jprofd" --socket "$tmp/jprofd.sock" --rate "$rate" 2>"$tmp/jprofd.log" &
daemon_pid=$!
for _ in $(seq 150); do
	[ -S "$tmp/jprofd.sock" ] && break
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		echo "jprofd exited at startup; its log:" >&2
		cat "$tmp/jprofd.log" >&2
		exit 1
	fi
	sleep 0.1
done
if [ ! -S "$tmp/jprofd.sock" ]; then
	echo "jprofd did not create its socket within 15 s; its log:" >&2
	cat "$tmp/jprofd.log" >&2
	exit 1
fi

for i in $(seq "$busy"); do
	if [ "$load" = mixed ] && [ $((i % 2)) -eq 0 ]; then
		# Compression, archive walking and directory scans: syscalls, page
		# cache, many libraries; a realistic spread of stacks.
		bash -c 'while :; do tar cf - /usr/lib/x86_64-linux-gnu 2>/dev/null | gzip -1 >/dev/null; find /usr -xdev -name "*.so*" >/dev/null 2>&1; done' &
	elif [ -x "$spin" ]; then
		"$spin" $((seconds + 30)) &
	else
		bash -c 'while :; do :; done' &
	fi
	busy_pids+=($!)
done

echo "jprofd pid $daemon_pid, --rate $rate, $busy busy process(es) ($load load), ${seconds}s, CLK_TCK $clk_tck"
printf '%8s %12s %10s %10s\n' "t(s)" "cpu(ticks)" "cpu%" "rss(kB)"

start_ticks=$(cpu_ticks "$daemon_pid")
start_rss=$(rss_kb "$daemon_pid")
max_rss=$start_rss
start_ns=$(date +%s%N)
prev_ticks=$start_ticks
prev_ns=$start_ns
printf '%8d %12d %10s %10d\n' 0 "$start_ticks" "-" "$start_rss"

elapsed=0
while [ "$elapsed" -lt "$seconds" ]; do
	sleep "$interval"
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		echo "jprofd died during the benchmark; its log:" >&2
		cat "$tmp/jprofd.log" >&2
		exit 1
	fi
	now_ns=$(date +%s%N)
	ticks=$(cpu_ticks "$daemon_pid")
	rss=$(rss_kb "$daemon_pid")
	[ "$rss" -gt "$max_rss" ] && max_rss=$rss
	pct=$(awk -v d="$((ticks - prev_ticks))" -v ns="$((now_ns - prev_ns))" -v hz="$clk_tck" \
		'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')
	elapsed=$(( (now_ns - start_ns) / 1000000000 ))
	printf '%8d %12d %10s %10d\n' "$elapsed" "$ticks" "$pct" "$rss"
	prev_ticks=$ticks
	prev_ns=$now_ns
done

end_ns=$(date +%s%N)
end_ticks=$(cpu_ticks "$daemon_pid")
end_rss=$(rss_kb "$daemon_pid")
total_pct=$(awk -v d="$((end_ticks - start_ticks))" -v ns="$((end_ns - start_ns))" -v hz="$clk_tck" \
	'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')

kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""

echo
echo "result: jprofd used ${total_pct}% of one core at --rate $rate with $busy busy CPU(s)"
echo "result: RSS start ${start_rss} kB, end ${end_rss} kB, max ${max_rss} kB"
echo "result: jprofd exit code after SIGTERM: $rc"
