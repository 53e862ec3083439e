#!/bin/bash
# What continuous profiling with fleet scrapes costs the daemon: for each
# rate (19 and 99 Hz by default) runs jprofd with the host view and the HTTP
# listener on 127.0.0.1, keeps every CPU busy, and every 10 s scrapes
# /metrics and starts a /debug/pprof/profile?seconds=10 request (as a
# Prometheus plus a Parca/Alloy agent would). Samples the daemon's CPU time
# (utime+stime from /proc/PID/stat) and RSS (VmRSS) at each scrape, and the
# time its BPF programs ran (kernel.bpf_stats_enabled; charged to the
# interrupted tasks, not to the daemon), plus its unwind table counters.
# Prints CPU % of one core (user+system, BPF, both), samples/s, RSS
# start/end/max, table memory and the unwind worker's loads per rate. Not a
# pass/fail test.
# Run as root.
#   JPROFD=path          default: build/jprofd
#   JPROFD_BASE=path     a second daemon (e.g. a build of main) run at the same
#                        time with the same arguments, each with its own
#                        scrapes: both lines printed, and the ratio, measured
#                        over the same seconds of the same load
#   BENCH_SECONDS=600    measurement length per rate
#   BENCH_RATES="19 99"  rates to measure, one run each
#   BENCH_RETENTION=     --host-retention in seconds (default: the daemon's, 600);
#                        set it below BENCH_SECONDS to see RSS once the window is full
#   BENCH_BUSY=N         busy processes (default: nproc), half spinners, half tar|gzip/find
#   BENCH_SPAWN=1        also a host that starts processes all the time: a gcc
#                        compile loop, a python3 loop, redis-server under
#                        redis-benchmark, a /bin/true loop (the daemon's cost
#                        then includes reading every new process)
#   BENCH_WARMUP=S       seconds after start not counted (default 0): the
#                        start-up reads kallsyms and every process's tables
#   BENCH_ARGS="..."     more jprofd arguments, both daemons (e.g.
#                        --unwind-max-memory 32M)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jprofd=${JPROFD:-$src/build/jprofd}
spin=${SPIN_CHAIN:-$src/build/tests/progs/spin_chain}
seconds=${BENCH_SECONDS:-600}
rates=${BENCH_RATES:-19 99}
retention=${BENCH_RETENTION:-}
busy=${BENCH_BUSY:-$(nproc)}
spawn=${BENCH_SPAWN:-}
warmup=${BENCH_WARMUP:-0}
base_jprofd=${JPROFD_BASE:-}
scrape=10
clk_tck=$(getconf CLK_TCK)

if [ "$(id -u)" -ne 0 ]; then
	echo "continuous_overhead.sh: must be run as root (jprofd loads BPF programs)" >&2
	exit 1
fi
for tool in curl python3; do
	command -v "$tool" >/dev/null || { echo "continuous_overhead.sh: needs $tool" >&2; exit 1; }
done
for d in "$jprofd" ${base_jprofd:+"$base_jprofd"}; do
	if [ ! -x "$d" ]; then
		echo "continuous_overhead.sh: $d not found; build first or set JPROFD" >&2
		exit 1
	fi
done
if [ -n "$spawn" ]; then
	for tool in gcc redis-server redis-benchmark; do
		command -v "$tool" >/dev/null || { echo "continuous_overhead.sh: BENCH_SPAWN needs $tool" >&2; exit 1; }
	done
fi

tmp=$(mktemp -d /tmp/jprof-bench.XXXXXX)
daemon_pids=()
bg_pids=()
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1

stop_daemons() {
	local p
	for p in "${daemon_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	daemon_pids=()
}

cleanup() {
	local p
	for p in "${bg_pids[@]}"; do
		kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true
	done
	[ -n "$spawn" ] && redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1
	stop_daemons
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

# The daemon's own heap and stacks: VmRSS also counts the pages of the
# mapped unwind_rows array it has written (RssFile), kernel memory the
# array holds whether mapped or not.
rss_anon_kb() {
	awk '/^RssAnon:/ { print $2 }' "/proc/$1/status"
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
redis_port=0
if [ -n "$spawn" ]; then
	# Each in its own process group, so the cleanup ends its children too.
	redis_port=$(free_port)
	printf 'int f(int x) { return x * x; }\nint main(void) { return f(3); }\n' >"$tmp/t.c"
	setsid python3 -c 'x = 0
while True:
    for i in range(100000): x += i * i' &
	bg_pids+=($!)
	setsid redis-server --port "$redis_port" --save "" --appendonly no >/dev/null 2>&1 &
	bg_pids+=($!)
	setsid bash -c "while :; do redis-benchmark -p $redis_port -q -n 20000 -c 4 -t set,get >/dev/null 2>&1; done" &
	bg_pids+=($!)
	setsid bash -c "while :; do gcc -O2 -o '$tmp/t.out' '$tmp/t.c'; sleep 0.2; done" &
	bg_pids+=($!)
	setsid bash -c 'while :; do /bin/true; sleep 0.05; done' &
	bg_pids+=($!)
fi

metric() {  # metrics file, name -> value (first sample of that name)
	awk -v n="$2" '$1 == n { print $2; exit }' "$1"
}

declare -a results=()
names=(new)
bins=("$jprofd")
if [ -n "$base_jprofd" ]; then
	names+=(base)
	bins+=("$base_jprofd")
fi
for rate in $rates; do
	declare -A port=() pid=() t0=() b0=() s0=() rss0=() maxrss=() prev=() pct_sum=()
	for k in "${!names[@]}"; do
		nm=${names[$k]}
		port[$nm]=$(free_port)
		# Profiles need authorization even on loopback: as root, the Unix
		# socket listener serves them without a token.
		args=(--socket "$tmp/$nm.sock" --rate "$rate" --http "127.0.0.1:${port[$nm]}"
		      --http-socket "$tmp/$nm-http.sock")
		[ -n "$retention" ] && args+=(--host-retention "$retention")
		# shellcheck disable=SC2206 # word splitting is the point
		[ -n "${BENCH_ARGS:-}" ] && args+=($BENCH_ARGS)
		"${bins[$k]}" "${args[@]}" 2>"$tmp/jprofd-$nm-$rate.log" &
		pid[$nm]=$!
		daemon_pids+=("${pid[$nm]}")
	done
	for nm in "${names[@]}"; do
		for _ in $(seq 150); do
			curl -fs -o /dev/null "http://127.0.0.1:${port[$nm]}/metrics" && break
			if ! kill -0 "${pid[$nm]}" 2>/dev/null; then
				echo "jprofd ($nm) exited at startup; its log:" >&2
				cat "$tmp/jprofd-$nm-$rate.log" >&2
				exit 1
			fi
			sleep 0.1
		done
	done
	[ "$warmup" -gt 0 ] && sleep "$warmup"

	echo
	echo "--rate $rate${retention:+, --host-retention $retention}, $busy busy${spawn:+ + spawning load}, ${seconds}s after ${warmup}s, scrape every ${scrape}s; daemons: ${names[*]}"
	printf '%8s %6s %10s %8s %10s %12s %10s\n' "t(s)" "daemon" "cpu(ticks)" "cpu%" "rss(kB)" "buckets" "pprof(B)"
	for nm in "${names[@]}"; do
		t0[$nm]=$(cpu_ticks "${pid[$nm]}")
		b0[$nm]=$(bpf_ns "${pid[$nm]}")
		curl -fs -o "$tmp/metrics-$nm" "http://127.0.0.1:${port[$nm]}/metrics"
		cp "$tmp/metrics-$nm" "$tmp/metrics0-$nm"
		s0[$nm]=$(metric "$tmp/metrics-$nm" jprofd_samples_total)
		rss0[$nm]=$(rss_kb "${pid[$nm]}")
		maxrss[$nm]=${rss0[$nm]}
		prev[$nm]=${t0[$nm]}
	done
	start_ns=$(date +%s%N)
	prev_ns=$start_ns
	elapsed=0
	n=0
	while [ "$elapsed" -lt "$seconds" ]; do
		# The profile request waits its 10 s in the daemon; start it and
		# read what the previous one returned.
		for nm in "${names[@]}"; do
			curl -fs --unix-socket "$tmp/$nm-http.sock" -o "$tmp/profile-$nm-$n.pb.gz" \
				"http://localhost/debug/pprof/profile?seconds=$scrape" &
		done
		sleep "$scrape"
		now_ns=$(date +%s%N)
		elapsed=$(( (now_ns - start_ns) / 1000000000 ))
		for nm in "${names[@]}"; do
			if ! kill -0 "${pid[$nm]}" 2>/dev/null; then
				echo "jprofd ($nm) died during the benchmark; its log:" >&2
				cat "$tmp/jprofd-$nm-$rate.log" >&2
				exit 1
			fi
			curl -fs -o "$tmp/metrics-$nm" "http://127.0.0.1:${port[$nm]}/metrics"
			buckets=$(metric "$tmp/metrics-$nm" jprofd_hostview_buckets)
			pbytes=-
			[ "$n" -gt 0 ] && [ -s "$tmp/profile-$nm-$((n - 1)).pb.gz" ] &&
				pbytes=$(stat -c %s "$tmp/profile-$nm-$((n - 1)).pb.gz")
			rm -f "$tmp/profile-$nm-$((n - 1)).pb.gz"
			ticks=$(cpu_ticks "${pid[$nm]}")
			rss=$(rss_kb "${pid[$nm]}")
			[ "$rss" -gt "${maxrss[$nm]}" ] && maxrss[$nm]=$rss
			pct=$(awk -v d="$((ticks - prev[$nm]))" -v ns="$((now_ns - prev_ns))" -v hz="$clk_tck" \
				'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')
			printf '%8d %6s %10d %8s %10d %12s %10s\n' "$elapsed" "$nm" "$ticks" "$pct" "$rss" "${buckets:--}" "$pbytes"
			prev[$nm]=$ticks
		done
		prev_ns=$now_ns
		n=$((n + 1))
	done
	end_ns=$(date +%s%N)
	declare -A total=()
	for nm in "${names[@]}"; do
		end_ticks=$(cpu_ticks "${pid[$nm]}")
		end_rss=$(rss_kb "${pid[$nm]}")
		end_anon=$(rss_anon_kb "${pid[$nm]}")
		end_bpf=$(bpf_ns "${pid[$nm]}")
		curl -fs -o "$tmp/metrics-$nm" "http://127.0.0.1:${port[$nm]}/metrics"
		samples=$(metric "$tmp/metrics-$nm" jprofd_samples_total)
		rows=$(metric "$tmp/metrics-$nm" jprofd_unwind_rows)
		copies=$(metric "$tmp/metrics-$nm" jprofd_unwind_evicted_copy_bytes)
		# Over the measured seconds only (the start-up loads every
		# running process's tables).
		per_s() {
			local a b
			a=$(metric "$tmp/metrics0-$nm" "$1")
			b=$(metric "$tmp/metrics-$nm" "$1")
			awk -v d="$(( ${b:-0} - ${a:-0} ))" -v ns="$((end_ns - start_ns))" \
				'BEGIN { printf "%.1f", d / (ns / 1e9) }'
		}
		delta() {
			local a b
			a=$(metric "$tmp/metrics0-$nm" "$1")
			b=$(metric "$tmp/metrics-$nm" "$1")
			echo $(( ${b:-0} - ${a:-0} ))
		}
		builds=$(delta jprofd_unwind_table_builds_total)
		evicted=$(delta jprofd_unwind_tables_evicted_total)
		reloads=$(delta jprofd_unwind_table_reloads_total)
		loads="requests $(per_s jprofd_unwind_requests_total)/s, maps read $(per_s jprofd_unwind_process_reads_total)/s ($(per_s jprofd_unwind_process_reads_unchanged_total)/s unchanged), rows uploaded $(per_s jprofd_unwind_rows_uploaded_total)/s"
		total_pct=$(awk -v d="$((end_ticks - t0[$nm]))" -v ns="$((end_ns - start_ns))" -v hz="$clk_tck" \
			'BEGIN { printf "%.3f", 100 * (d / hz) / (ns / 1e9) }')
		total[$nm]=$total_pct
		bpf_pct=$(awk -v b="$((end_bpf - b0[$nm]))" -v ns="$((end_ns - start_ns))" \
			'BEGIN { printf "%.3f", 100 * b / ns }')
		both_pct=$(awk -v a="$total_pct" -v b="$bpf_pct" 'BEGIN { printf "%.3f", a + b }')
		rate_s=$(awk -v d="$(( ${samples:-0} - ${s0[$nm]:-0} ))" -v ns="$((end_ns - start_ns))" \
			'BEGIN { printf "%.0f", d / (ns / 1e9) }')
		results+=("$nm, rate $rate Hz: jprofd ${total_pct}% of one core (user+system) + BPF ${bpf_pct}% = ${both_pct}%; ${rate_s} samples/s; RSS start ${rss0[$nm]} kB, end ${end_rss} kB (anonymous ${end_anon} kB), max ${maxrss[$nm]} kB; tables ${rows:-0} rows = $(( ${rows:-0} * 16 / 1024 )) KiB in BPF + $(( ${copies:-0} / 1024 )) KiB of evicted copies; over the run ${builds:-0} builds, ${evicted:-0} evicted, ${reloads:-0} reloaded; $loads")
	done
	if [ -n "$base_jprofd" ]; then
		results+=("rate $rate Hz: new / base user+system = $(awk -v a="${total[new]}" -v b="${total[base]}" \
			'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')")
	fi
	stop_daemons
	unset port pid t0 b0 s0 rss0 maxrss prev pct_sum total
done

echo
for r in "${results[@]}"; do
	echo "result: $r"
done
