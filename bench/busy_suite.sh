#!/bin/bash
# The whole test suite on a busy machine: runs tests/run BENCH_RUNS times in
# a clean clone of HEAD, each while BENCH_BUSY busy loops (`yes >/dev/null`)
# run, and prints a row per run (result and minutes) and each run's failed
# tests. It measures; it decides nothing (docs/benchmarks.md keeps results).
# Must run as root, as tests/run does.
#   BENCH_RUNS=3   BENCH_BUSY=2   BENCH_DIR=/var/tmp/jprof-busy-suite
set -uo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "busy_suite.sh: must be run as root (try: sudo $0)" >&2
	exit 1
fi
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${BENCH_RUNS:-3}
busy=${BENCH_BUSY:-2}
dir=${BENCH_DIR:-/var/tmp/jprof-busy-suite}
declare -a loops=() rows=()

stop_loops() {
	for p in "${loops[@]}"; do kill "$p" 2>/dev/null; done
	loops=()
}
trap 'stop_loops' EXIT
trap 'stop_loops; exit 130' INT TERM

rm -rf "$dir"
git clone -q "$src" "$dir" || exit 1
echo "busy_suite.sh: $runs run(s) of tests/run in $dir ($(git -C "$dir" log --oneline -1)), $busy busy loop(s) beside each"
for i in $(seq 1 "$runs"); do
	for _ in $(seq 1 "$busy"); do
		yes >/dev/null &
		loops+=($!)
	done
	log="$dir/run-$i.log"
	t0=$(date +%s)
	(cd "$dir" && JPROF_SKIP_DEPS=${JPROF_SKIP_DEPS:-0} tests/run </dev/null >"$log" 2>&1)
	rc=$?
	t1=$(date +%s)
	stop_loops
	res=passed
	[ "$rc" -eq 0 ] || res=FAILED
	rows+=("run $i: $res in $(( (t1 - t0) / 60 )) min $(( (t1 - t0) % 60 )) s ($log)")
	printf '%s\n' "${rows[-1]}"
	grep -E '^[[:space:]]+[0-9]+ - .*\((Failed|Timeout)\)' "$log" | sed 's/^/    /'
done
printf '\nsummary:\n'
printf '  %s\n' "${rows[@]}"
