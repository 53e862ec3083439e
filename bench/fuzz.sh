#!/bin/bash
# Long runs of the libFuzzer harnesses (tests/fuzz/). Builds them with clang
# in build-fuzz/ (the configuration tests/run uses), runs each for
# BENCH_SECONDS from its committed seeds (in a fresh corpus directory, so
# that runs compare), and prints per harness: executions, exec/s, coverage
# (cov: edges of the instrumented code reached, of all of them; ft: libFuzzer's
# features), corpus size and peak RSS. tests/run runs the same harnesses
# for 25 s each. Not a pass/fail test, but a finding is printed with the
# input that reproduces it, and the exit status is then 1.
#   BENCH_SECONDS=600    run time per harness
#   BENCH_FUZZERS="proto agent ring procmaps kallsyms elf lines"
#   BENCH_SEED=1         libFuzzer -seed (fixed: runs of one tree compare)
#   FUZZ_BUILD=build-fuzz
set -uo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD:-$src/build-fuzz}
seconds=${BENCH_SECONDS:-600}
fuzzers=${BENCH_FUZZERS:-proto agent ring procmaps kallsyms elf lines}
seed=${BENCH_SEED:-1}
out=$build/tests/fuzz/bench

command -v clang >/dev/null || { echo "fuzz.sh: needs clang (packaging/install-deps.sh)" >&2; exit 1; }
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DJPROF_WERROR=ON -DJPROF_FUZZ=ON -DJPROF_SANITIZE=ON >/dev/null || exit 1
cmake --build "$build" -j"$(nproc)" --target fuzz >/dev/null || exit 1

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
found=0
rows=()
for name in $fuzzers; do
	bin=$build/tests/fuzz/fuzz_$name
	seeds=$src/tests/fuzz/corpus/$name
	log=$out/$name.log
	rm -rf "${out:?}/$name"
	mkdir -p "$out/$name/corpus" "$out/$name/artifacts"
	dict=()
	[ -f "$src/tests/fuzz/$name.dict" ] && dict=(-dict="$src/tests/fuzz/$name.dict")
	# <name>.options: more flags, one a line (after ours: they win).
	[ -f "$src/tests/fuzz/$name.options" ] && mapfile -t -O "${#dict[@]}" dict \
		< <(grep -E '^-' "$src/tests/fuzz/$name.options")
	echo "fuzz.sh: $name for ${seconds}s (log: $log)" >&2
	"$bin" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "${dict[@]}" -artifact_prefix="$out/$name/artifacts/" \
		"$out/$name/corpus" "$seeds" >"$log" 2>&1
	rc=$?
	# "INFO: Loaded 1 modules (N inline 8-bit counters)": the edges there are.
	edges=$(grep -aoE 'Loaded 1 modules +\([0-9]+ inline' "$log" | grep -oE '[0-9]+' | tail -n 1)
	last=$(grep -aE '^#[0-9]+' "$log" | tail -n 1)
	cov=$(grep -aoE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+')
	ft=$(grep -aoE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+')
	corp=$(grep -aoE 'corp: [0-9]+/[0-9]+[KM]?b' <<<"$last" | cut -d' ' -f2)
	runs=$(grep -aoE 'number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$')
	eps=$(grep -aoE 'average_exec_per_sec: +[0-9]+' "$log" | grep -oE '[0-9]+$')
	rss=$(grep -aoE 'peak_rss_mb: +[0-9]+' "$log" | grep -oE '[0-9]+$')
	result=ok
	if [ "$rc" -ne 0 ]; then
		result="FOUND (exit $rc): $(ls "$out/$name/artifacts" | head -n 1)"
		found=1
	fi
	rows+=("$(printf '%-9s %12s %8s %6s/%-6s %6s %12s %6s  %s' "$name" "${runs:-?}" "${eps:-?}" \
		"${cov:-?}" "${edges:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" "$result")")
done

printf '\n%s seconds each, seed %s, %s\n' "$seconds" "$seed" "$(uname -r)"
printf '%-9s %12s %8s %13s %6s %12s %6s  %s\n' harness runs exec/s cov/edges ft corpus rssMB result
printf '%s\n' "${rows[@]}"
if [ "$found" -ne 0 ]; then
	echo "fuzz.sh: findings are in $out/<harness>/artifacts/; reproduce with build-fuzz/tests/fuzz/fuzz_<harness> FILE" >&2
	exit 1
fi
