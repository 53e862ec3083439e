#!/bin/bash
# How long a `record --pid` waits at its start gate for the process's unwind
# tables (issue 29 item 7): python3, gcc's cc1 (a `gcc -c` of a large
# generated file) and a JVM (libjvm.so, recorded with --java off so that the
# agent's attach is not part of the wait), each run as nobody, in three
# situations:
#   fresh    a daemon just started with an empty table cache (never seen)
#   second   another process of the same binary, same daemon
#   restart  the daemon restarted on the same cache directory
# and, with BENCH_NOCACHE=1 (default), "restart" again with the disk cache
# off (unwind_cache_dir off): what a restart cost before the cache.
#
# Prints one row per binary and situation: the gate wait (wait_ms of the
# `sampling` reply), whether it opened ready, and from the daemon's debug log
# what the wait was made of: tables built from CFI (count, ms) and tables
# loaded from the disk cache (count, ms). Then the cache directory's size.
#
#   sudo bench/start_latency.sh        (BENCH_RUNS=3 JPROFD=... JPROFCTL=...)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JPROFD=${JPROFD:-$src/build/jprofd}
JPROFCTL=${JPROFCTL:-$src/build/jprofctl}
RUNS=${BENCH_RUNS:-3}
NOCACHE=${BENCH_NOCACHE:-1}
RATE=${BENCH_RATE:-19}  # the host view's (0: only the recorded processes' tables are built)
JAVA=${JAVA:-java}

[ "$(id -u)" -eq 0 ] || { echo "start_latency.sh: run as root" >&2; exit 1; }

work=$(mktemp -d /var/tmp/jprof-start-bench.XXXXXX)
chmod 755 "$work"
dpid=
wpids=()
cleanup() {
	for p in "${wpids[@]}" $dpid; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# Workloads, readable by nobody.
cat >"$work/spin.py" <<'PY'
while True:
    pass
PY
cat >"$work/Spin.java" <<'JAVA'
public class Spin {
    public static void main(String[] a) {
        long x = 0;
        while (true) x += System.nanoTime() & 7;
    }
}
JAVA
python3 - "$work/big.c" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        f.write("int f%d(int *a, int n) { int s = 0; for (int i = 0; i < n; i++)"
                " s += a[i] * %d + (s >> 3); return s; }\n" % (i, i))
PY
chmod 644 "$work"/*
(cd "$work" && "${JAVA%java}javac" Spin.java 2>/dev/null) || true

# exec: the pid started in the background is the workload's, not a shell's.
as_nobody() { exec setpriv --reuid nobody --regid nogroup --clear-groups -- "$@"; }

start_daemon() {  # $1: cache dir ("off": none)
	: >"$work/d.log"
	local cache=()
	# A daemon from before the cache has no such flag.
	"$JPROFD" --help | grep -q unwind-cache-dir && cache=(--unwind-cache-dir "$1")
	"$JPROFD" --socket "$work/d.sock" --rate "$RATE" --log-level debug "${cache[@]}" \
		>>"$work/d.log" 2>&1 &
	dpid=$!
	for _ in $(seq 200); do
		[ -S "$work/d.sock" ] && "$JPROFCTL" --socket "$work/d.sock" status >/dev/null 2>&1 && return
		sleep 0.05
	done
	echo "start_latency.sh: the daemon did not start" >&2
	cat "$work/d.log" >&2
	exit 1
}

# Waits (up to 120 s) until the daemon has the binary's table, built or
# loaded: a daemon stopped during a build writes nothing to the cache.
wait_table() {  # $1: what
	local pat
	case $1 in
	python3) pat='python3\.[0-9]* for' ;;
	cc1) pat='/cc1 for' ;;
	java) pat='libjvm\.so for' ;;
	esac
	for _ in $(seq 1200); do
		grep -qE "unwind: (built|loaded) .*$pat" "$work/d.log" && return
		sleep 0.1
	done
}

stop_daemon() {
	kill "$dpid"
	wait "$dpid" 2>/dev/null || true
	dpid=
	rm -f "$work/d.sock"
}

# Starts one workload; sets wpid to the pid to record (empty: none).
start_work() {
	wpid=
	case $1 in
	python3)
		as_nobody /usr/bin/python3 "$work/spin.py" >/dev/null 2>&1 &
		wpids+=($!)
		wpid=$!
		;;
	cc1)
		as_nobody gcc -O2 -c "$work/big.c" -o /dev/null >/dev/null 2>&1 &
		wpids+=($!)
		for _ in $(seq 400); do
			wpid=$(pgrep -P "$!" -x cc1 || true)
			[ -n "$wpid" ] && break
			sleep 0.01
		done
		;;
	java)
		if [ -f "$work/Spin.class" ]; then
			as_nobody "$JAVA" -cp "$work" Spin >/dev/null 2>&1 &
		else
			as_nobody "$JAVA" "$work/Spin.java" >/dev/null 2>&1 &
		fi
		wpids+=($!)
		wpid=$!
		;;
	esac
}

stop_work() {
	for p in "${wpids[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	wait "${wpids[@]}" 2>/dev/null || true
	wpids=()
}

# One recording; prints a row: the gate's wait_ms and ready, and the
# tables built from CFI and loaded from the cache for the process (n/ms).
measure() {  # $1: what, $2: when, $3: run
	local lines ev wait ready from built cached
	start_work "$1"
	if [ -z "$wpid" ]; then
		printf "%-8s %-8s %3d %8s\n" "$1" "$2" "$3" "no pid"
		stop_work
		return
	fi
	# The process past its start (its libraries mapped), as a user would
	# find it running.
	sleep 0.5
	from=$(wc -l <"$work/d.log")
	ev=$("$JPROFCTL" --socket "$work/d.sock" record --pid "$wpid" -d 200ms --java off \
		--json-events -o "$work/out.collapsed" 2>&1 >/dev/null | grep '"sampling"' | head -1 || true)
	wait=$(sed -n 's/.*"wait_ms": *\([0-9]*\).*/\1/p' <<<"$ev")
	ready=$(sed -n 's/.*"ready": *\([a-z]*\).*/\1/p' <<<"$ev")
	lines=$(tail -n +"$((from + 1))" "$work/d.log")
	built=$({ grep -E "unwind: built .* for pid $wpid:" <<<"$lines" || true; } |
		sed -n 's/.*rows, \([0-9]*\) ms.*/\1/p' | awk '{n++; s+=$1} END {printf "%d/%d", n, s}')
	cached=$({ grep -E "unwind: loaded .* for pid $wpid from the cache" <<<"$lines" || true; } |
		 sed -n 's/.* \([0-9]*\) ms.*/\1/p' | awk '{n++; s+=$1} END {printf "%d/%d", n, s}')
	printf "%-8s %-8s %3d %8s %6s %12s %12s\n" "$1" "$2" "$3" "${wait:--}" "${ready:--}" \
		"$built" "$cached"
	stop_work
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; host view at $RATE Hz"
printf "%-8s %-8s %3s %8s %6s %12s %12s\n" binary when run wait_ms ready "built n/ms" "cached n/ms"
for run in $(seq "$RUNS"); do
	rm -rf "$work/cache"
	for what in python3 cc1 java; do
		rm -rf "$work/cache"
		start_daemon "$work/cache"
		measure "$what" fresh "$run"
		measure "$what" second "$run"
		wait_table "$what"
		stop_daemon
		start_daemon "$work/cache"
		measure "$what" restart "$run"
		stop_daemon
		if [ "$NOCACHE" = 1 ]; then
			start_daemon off
			measure "$what" nocache "$run"
			stop_daemon
		fi
	done
done
rm -rf "$work/cache"
start_daemon "$work/cache"
for what in python3 cc1 java; do measure "$what" fill 0 >/dev/null; wait_table "$what"; done
stop_daemon
[ -d "$work/cache" ] || exit 0
echo
echo "cache after all three: $(du -sb "$work/cache" | cut -f1) bytes in" \
	"$(find "$work/cache" -type f | wc -l) files"
find "$work/cache" -type f -printf "%s\n" | sort -n | awk '{printf "  %d", $1} END {print ""}'
