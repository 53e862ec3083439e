#!/bin/bash
# Does async-profiler keep its samples while jprofd records the same JVM?
# Runs tests/java/ThreadNames (three spinning Java threads) as nobody with
# async-profiler loaded at start-up (event=cpu, perf events, 10 ms), once
# alone and once with `jprofctl record --pid` (agent attached at run time)
# covering the middle of its run, and prints async-profiler's sample count
# of each run and jprofd's share of samples with Java frames. Not a
# pass/fail test. Run as root after building (build/).
#   AP_LIB=/work/ap/build/lib/libasyncProfiler.so   async-profiler, built
#   BUILD_DIR=build                                 the jprofd build to measure
#   CLASSES_DIR=$BUILD_DIR/tests/java               the compiled tests/java
#   BENCH_ROUNDS=3  BENCH_SECONDS=20  BENCH_RECORD_S=14
#   BENCH_JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$src/build}
classes=${CLASSES_DIR:-$build/tests/java}
ap=${AP_LIB:-/work/ap/build/lib/libasyncProfiler.so}
rounds=${BENCH_ROUNDS:-3}
secs=${BENCH_SECONDS:-20}
rec=${BENCH_RECORD_S:-14}
jhome=${BENCH_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}

[ "$(id -u)" -eq 0 ] || { echo "signal_coexistence.sh: run as root" >&2; exit 1; }
for f in "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so" "$ap" \
	"$classes/ThreadNames.class"; do
	[ -e "$f" ] || { echo "signal_coexistence.sh: $f missing; build first" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/jprof-sigco.XXXXXX)
chmod 755 "$tmp"
daemon_pid=""
cleanup() {
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
cp "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so" "$ap" "$tmp/"
mkdir -p "$tmp/classes" "$tmp/out"
cp "$classes"/*.class "$tmp/classes/"
chmod -R a+rX "$tmp"
chown nobody "$tmp/out"

"$tmp/jprofd" --socket "$tmp/jprofd.sock" --agent "$tmp/libjprofagent.so" --rate 19 \
	2>"$tmp/jprofd.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/jprofd.sock" ] && break; sleep 0.1; done

# The JVM's CPU time in ms (utime + stime), last seen while it ran: the
# samples a CPU profiler at 10 ms should have are cpu_ms / 10, whatever else
# competes for the CPUs.
cpu_watch() {
	local pid=$1 out=$2 hz
	hz=$(getconf CLK_TCK)
	while [ -e "/proc/$pid/stat" ]; do
		awk -v hz="$hz" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$pid/stat" >"$out.tmp" \
			2>/dev/null && mv "$out.tmp" "$out"
		sleep 0.1
	done
}

# run NAME WITH_JPROFD: prints async-profiler's samples per CPU time, and
# jprofd's Java share
run() {
	local name=$1 with=$2 pid total cpu
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$jhome/bin/java" \
		"-agentpath:$tmp/$(basename "$ap")=start,event=cpu,interval=10ms,collapsed,file=$tmp/out/$name.ap" \
		-cp "$tmp/classes" ThreadNames "$secs" 0 >"$tmp/out/$name.log" 2>&1 &
	pid=$!
	cpu_watch "$pid" "$tmp/out/$name.cpu" &
	if [ "$with" = 1 ]; then
		sleep 2
		"$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$pid" -d "${rec}s" -i 10ms \
			--java require --no-progress -o "$tmp/out/$name.jp" >/dev/null 2>"$tmp/out/$name.ctl" || true
	fi
	wait "$pid" || true
	sleep 0.2
	total=$(awk '{n += $NF} END {print n + 0}' "$tmp/out/$name.ap" 2>/dev/null || echo 0)
	cpu=$(cat "$tmp/out/$name.cpu" 2>/dev/null || echo 0)
	total="$total samples for $((cpu / 10)) CPU-10ms"
	if [ "$with" = 1 ]; then
		python3 - "$tmp/out/$name.jp" "$total" "$name" <<'PY'
import sys
tot = java = 0
for line in open(sys.argv[1]):
    st, _, n = line.rstrip().rpartition(" ")
    tot += int(n)
    if "ThreadNames." in st or "LateThreads." in st:
        java += int(n)
print("%-10s async-profiler %s; jprofd %5d samples, %.1f%% with Java frames"
      % (sys.argv[3], sys.argv[2], tot, 100.0 * java / max(1, tot)))
PY
	else
		printf '%-10s async-profiler %s\n' "$name" "$total"
	fi
}

for r in $(seq "$rounds"); do
	run "alone.$r" 0
	run "both.$r" 1
done
