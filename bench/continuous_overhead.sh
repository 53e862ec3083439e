#!/bin/bash
# What continuous profiling with fleet scrapes costs the daemon: for each
# rate (19 and 99 Hz by default) runs jprofd with the host view and the HTTP
# listener on 127.0.0.1, keeps every CPU busy, and every 10 s scrapes
# /metrics and starts a /debug/pprof/profile?seconds=10 request (as a
# Prometheus plus a Parca/Alloy agent would). Samples the daemon's CPU time
# (utime+stime from /proc/PID/stat) and RSS (VmRSS) at each scrape, and the
# time its BPF programs ran (kernel.bpf_stats_enabled; charged to the
# interrupted tasks, not to the daemon), plus its unwind table counters.
# Prints CPU % of one core (user+system, BPF, both) and RSS start/end/max
# per rate. Not a pass/fail test.
# Run as root.
#   JPROFD=path          default: build/jprofd
#   BENCH_SECONDS=600    measurement length per rate
#   BENCH_RATES="19 99"  rates to measure, one run each
#   BENCH_RETENTION=     --host-retention in seconds (default: the daemon's, 600);
#                        set it below BENCH_SECONDS to see RSS once the window is full
#   BENCH_BUSY=N         busy processes (default: nproc), half spinners, half tar|gzip/find
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jprofd=${JPROFD:-$src/build/jprofd}
spin=${SPIN_CHAIN:-$src/build/tests/progs/spin_chain}
seconds=${BENCH_SECONDS:-600}
rates=${BENCH_RATES:-19 99}
retention=${BENCH_RETENTION:-}
busy=${BENCH_BUSY:-$(nproc)}
scrape=10
clk_tck=$(getconf CLK_TCK)

if [ "$(id -u)" -ne 0 ]; then
	echo "continuous_overhead.sh: must be run as root (jprofd loads BPF programs)" >&2
	exit 1
fi
for tool in curl python3; do
	command -v "$tool" >/dev/null || { echo "continuous_overhead.sh: needs $tool" >&2; exit 1; }
done
if [ ! -x "$jprofd" ]; then
	echo "continuous_overhead.sh: $jprofd not found; build first or set JPROFD" >&2
	exit 1
fi

tmp=$(mktemp -d /tmp/jprof-bench.XXXXXX)
daemon_pid=""
bg_pids=()
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1

stop_daemon() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	daemon_pid=""
}

cleanup() {
	local p
	for p in "${bg_pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	stop_daemon
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
	rm -rf "$tmp"
}

bpf_ns() {  # daemon pid -> total run_time_ns of its BPF programs
	local ids
	ids=$(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
ids = set(int(x) for x in sys.argv[1].split())
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("id") in ids))' "$ids"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

for i in $(seq "$busy"); do
	if [ $((i % 2)) -eq 0 ]; then
		bash -c 'while :; do tar cf - /usr/lib/x86_64-linux-gnu 2>/dev/null | gzip -1 >/dev/null; find /usr -xdev -name "*.so*" >/dev/null 2>&1; done' &
	elif [ -x "$spin" ]; then
		"$spin" 100000 &
	else
		bash -c 'while :; do :; done' &
	fi
	bg_pids+=($!)
done

declare -a results=()
for rate in $rates; do
	port=$(free_port)
	base="http://127.0.0.1:$port"
	# Profiles need authorization even on loopback: as root, the Unix
	# socket listener serves them without a token.
	args=(--socket "$tmp/jprofd.sock" --rate "$rate" --http "127.0.0.1:$port"
	      --http-socket "$tmp/http.sock")
	[ -n "$retention" ] && args+=(--host-retention "$retention")
	"$jprofd" "${args[@]}" 2>"$tmp/jprofd-$rate.log" &
	daemon_pid=$!
	for _ in $(seq 150); do
		curl -fs -o /dev/null "$base/metrics" && break
		if ! kill -0 "$daemon_pid" 2>/dev/null; then
			echo "jprofd exited at startup; its log:" >&2
			cat "$tmp/jprofd-$rate.log" >&2
			exit 1
		fi
		sleep 0.1
	done

	echo
	echo "jprofd pid $daemon_pid, --rate $rate${retention:+, --host-retention $retention}, $busy busy, ${seconds}s, scrape every ${scrape}s"
	printf '%8s %10s %8s %10s %12s %10s\n' "t(s)" "cpu(ticks)" "cpu%" "rss(kB)" "buckets" "pprof(B)"
	start_ticks=$(cpu_ticks "$daemon_pid")
	start_bpf=$(bpf_ns "$daemon_pid")
	start_rss=$(rss_kb "$daemon_pid")
	max_rss=$start_rss
	start_ns=$(date +%s%N)
	prev_ticks=$start_ticks
	prev_ns=$start_ns
	elapsed=0
	n=0
	while [ "$elapsed" -lt "$seconds" ]; do
		# The profile request waits its 10 s in the daemon; start it and
		# read what the previous one returned.
		curl -fs --unix-socket "$tmp/http.sock" -o "$tmp/profile-$n.pb.gz" \
			"http://localhost/debug/pprof/profile?seconds=$scrape" &
		sleep "$scrape"
		if ! kill -0 "$daemon_pid" 2>/dev/null; then
			echo "jprofd died during the benchmark; its log:" >&2
			cat "$tmp/jprofd-$rate.log" >&2
			exit 1
		fi
		curl -fs -o "$tmp/metrics" "$base/metrics"
		buckets=$(awk '/^jprofd_hostview_buckets / { print $2 }' "$tmp/metrics")
		pbytes=-
		[ "$n" -gt 0 ] && [ -s "$tmp/profile-$((n - 1)).pb.gz" ] && pbytes=$(stat -c %s "$tmp/profile-$((n - 1)).pb.gz")
		rm -f "$tmp/profile-$((n - 1)).pb.gz"
		now_ns=$(date +%s%N)
		ticks=$(cpu_ticks "$daemon_pid")
		rss=$(rss_kb "$daemon_pid")
		[ "$rss" -gt "$max_rss" ] && max_rss=$rss
		pct=$(awk -v d="$((ticks - prev_ticks))" -v ns="$((now_ns - prev_ns))" -v hz="$clk_tck" \
			'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')
		elapsed=$(( (now_ns - start_ns) / 1000000000 ))
		printf '%8d %10d %8s %10d %12s %10s\n' "$elapsed" "$ticks" "$pct" "$rss" "${buckets:--}" "$pbytes"
		prev_ticks=$ticks
		prev_ns=$now_ns
		n=$((n + 1))
	done
	end_ns=$(date +%s%N)
	end_ticks=$(cpu_ticks "$daemon_pid")
	end_rss=$(rss_kb "$daemon_pid")
	end_bpf=$(bpf_ns "$daemon_pid")
	total_pct=$(awk -v d="$((end_ticks - start_ticks))" -v ns="$((end_ns - start_ns))" -v hz="$clk_tck" \
		'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')
	bpf_pct=$(awk -v b="$((end_bpf - start_bpf))" -v ns="$((end_ns - start_ns))" \
		'BEGIN { printf "%.3f", 100 * b / ns }')
	both_pct=$(awk -v a="$total_pct" -v b="$bpf_pct" 'BEGIN { printf "%.3f", a + b }')
	unwind=$(curl -fs --unix-socket "$tmp/http.sock" http://localhost/metrics 2>/dev/null |
		awk '/^jprofd_unwind_(tables|rows|rows_capacity) / { printf "%s=%s ", $1, $2 }')
	stop_daemon
	results+=("rate $rate Hz: jprofd ${total_pct}% of one core (user+system) + BPF ${bpf_pct}% = ${both_pct}%; RSS start ${start_rss} kB, end ${end_rss} kB, max ${max_rss} kB; ${unwind}")
done

echo
for r in "${results[@]}"; do
	echo "result: $r"
done
