#!/bin/bash
# Cost of wall-clock recording of a JVM (`record -e wall`, issue 12 item 2):
# WallBench (tests/java) with 200 threads sleeping 100 ms at a time and a
# main thread in a CPU loop, with no profiler, with jprofd -e cpu and with
# jprofd -e wall, both at the default 10 ms, and -e wall -i 50ms (agent
# attached at run time).
# Reported per configuration (medians of interleaved rounds):
#   - the main thread's work per CPU-ns vs none (it pays for its own CPU
#     samples, and in wall mode for nothing else: it never sleeps);
#   - the CPU time of the JVM's other threads (the process's minus the main
#     thread's) per second of the measured span: the wall timer's /proc
#     reads and signals, every blocked thread's handler, and the JVM's own
#     background work (the main thread's share depends on the machine's
#     load, so the process total would not compare);
#   - wall: the agent's wall records per run, and how near each sleeping
#     thread's total in the profile is to the recording's length.
# Not a pass/fail test. Run as root after building (build/).
#   BENCH_SECONDS=10  length of one measured span
#   BENCH_ROUNDS=5    interleaved rounds
#   BENCH_THREADS=200 sleeping threads
#   BENCH_JAVA=path   java binary (default JDK 17)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/jvm_bench.sh"
jvm_bench_setup wall_overhead.sh 10 5 tests/java/WallBench.class
threads=${BENCH_THREADS:-200}

# run CONFIG ROUND: prints "config work_per_cpu_ns others_cpu_ms_per_s records thread_share"
run() {
	local cfg=$1 r=$2 out="$tmp/out/$1.$2" go="$tmp/out/go.$1.$2" prof="$tmp/out/p.$1.$2"
	local ev=${1%%-*} iv=10ms
	[ "$cfg" = wall-50ms ] && iv=50ms
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		"$java" -cp "$tmp/classes" WallBench "$secs" "$threads" "$go" >"$out.stdout" 2>&1 &
	jvm_pid=$!
	jvm_bench_started "$jvm_pid"
	sleep 2
	if [ "$cfg" != none ]; then
		# The recording outlasts the measured span; the JVM is killed
		# after it (the recording then ends with the process).
		setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
			"$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$jvm_pid" -e "$ev" \
			-i "$iv" -d $((secs + 3))s --threads --no-progress --json-events -f collapsed \
			-o "$prof" 2>"$out.events" &
		for _ in $(seq 300); do
			grep -q "session [0-9]*: bound to the agent of pid $jvm_pid" "$tmp/jprofd.log" && break
			sleep 0.05
		done
		# The agent's threads and perf events are set up by then.
		sleep 0.5
	fi
	touch "$go"
	for _ in $(seq $((secs * 20 + 600))); do
		grep -q '^{' "$out.stdout" 2>/dev/null && break
		sleep 0.05
	done
	wait %2 2>/dev/null || true
	kill -KILL "$jvm_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	jvm_pid=""
	python3 - "$cfg" "$out.stdout" "$out.events" "$prof" "$secs" <<'PY'
import json, re, sys
cfg, stdout, events, prof, secs = sys.argv[1:6]
res = json.loads([l for l in open(stdout) if l.startswith("{")][-1])
records, share = "-", "-"
try:
    for line in open(events):
        if line.startswith("{") and '"profile"' in line:
            summ = json.loads(line).get("summary", {})
            records = str(summ.get("java", {}).get("wall_records", "-"))
            dur = summ.get("duration_ms", 0) * 1e6
    if cfg.startswith("wall"):
        per = {}
        for line in open(prof):
            stack, v = line.rsplit(" ", 1)
            m = re.match(r"\[(sleeper-\d+) tid=", stack)
            if m:
                per[m.group(1)] = per.get(m.group(1), 0) + int(v)
        vals = sorted(v / dur for v in per.values())
        if vals:
            share = "%d threads, median %.3f, min %.3f, max %.3f of the recording" % (
                len(vals), vals[len(vals) // 2], vals[0], vals[-1])
except OSError:
    pass
print(cfg, res["work"] / res["cpu_ns"],
      (res["process_cpu_ns"] - res["cpu_ns"]) / res["wall_ns"] * 1e3, records,
      share, sep="\t")
PY
}

configs=(none cpu wall wall-50ms)
jvm_bench_rounds "WallBench ($threads sleeping threads)" "${configs[@]}"
python3 - "$tmp/results" "${configs[@]}" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {}
for cfg, thr, pcpu, n, share in rows:
    by.setdefault(cfg, []).append((float(thr), float(pcpu), n, share))
base = statistics.median(t for t, _, _, _ in by["none"])
print()
print("%-9s %14s %9s %24s  %s" % ("config", "work/cpu-us", "vs none", "other threads' CPU ms/s",
                                  "wall records per run"))
for cfg in sys.argv[2:]:
    vals = by.get(cfg, [])
    if not vals:
        continue
    med = statistics.median(t for t, _, _, _ in vals)
    print("%-9s %14.2f %8.2f%% %24.1f  %s" % (cfg, med * 1e3, (med / base - 1) * 100,
                                            statistics.median(p for _, p, _, _ in vals),
                                            ", ".join(n for _, _, n, _ in vals if n != "-")))
for cfg in sys.argv[2:]:
    for _, _, _, share in by.get(cfg, []):
        if share != "-":
            print("%s: per sleeping thread, wall time in the profile / recording length: %s"
                  % (cfg, share))
PY
