#!/bin/bash
# Overhead of profiling a JVM: CpuSplit's throughput with no profiler, with
# jprofd at 100 Hz and at 1 kHz (agent attached at run time), and with the
# JDK's own JFR (profile settings), in interleaved rounds so the machine's
# noise hits every configuration alike. Also reports attach latency: from the
# record request to the first sample with Java frames (summary.java), and
# accuracy: the share of CpuSplit.alpha among the alpha and beta samples
# against the split of CPU time CpuSplit measures itself from the moment the
# recording is requested (its START file).
# Not a pass/fail test. Run as root after building (build/).
#   BENCH_SECONDS=20  length of one workload run
#   BENCH_ROUNDS=3    interleaved rounds
#   BENCH_JAVA=path   java binary (default JDK 17)
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/jvm_bench.sh"
jvm_bench_setup jvm_overhead.sh 20 3 tests/java/CpuSplit.class

as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; }

# run CONFIG ROUND: prints "config work_per_cpu_ns attach_ms first_java_ms"
run() {
	local cfg=$1 r=$2 out="$tmp/out/$1.$2" opts=() interval="" pid
	case $cfg in
	jfr) opts=("-XX:StartFlightRecording=settings=profile,filename=$tmp/out/rec.$r.jfr") ;;
	jprofd-100hz) interval=10ms ;;
	jprofd-1khz) interval=1ms ;;
	esac
	# Not through as_nobody: a backgrounded function is a subshell, and $!
	# would be that root shell, not the JVM.
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		"$java" "${opts[@]}" -cp "$tmp/classes" CpuSplit "$secs" "$out.stop" "$out.start" \
		>"$out.stdout" 2>&1 &
	pid=$!
	jvm_pid=$pid
	jvm_bench_started "$pid"
	# Profile a running JVM, not one in its first moments (before its
	# signal handlers exist it cannot be attached; -agentpath is the way
	# to profile startup).
	sleep 1
	# CpuSplit's counts (throughput and the true split) start here in every
	# configuration: its first second (JIT warm-up) is not compared.
	touch "$out.start"
	if [ -n "$interval" ]; then
		# Record the whole run: it ends when the JVM exits.
		as_nobody "$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$pid" \
			-d $((secs + 10))s -i "$interval" --java require --no-progress --json-events \
			-o "$tmp/out/p.$cfg.$r.collapsed" 2>"$out.events" || true
		if ! grep -q "CpuSplit.alpha" "$tmp/out/p.$cfg.$r.collapsed" 2>/dev/null; then
			echo "jvm_overhead.sh: the $cfg recording has no Java frames:" >&2
			tail -n 3 "$out.events" >&2
			echo "jprofd's log:" >&2
			tail -n 20 "$tmp/jprofd.log" >&2
			exit 1
		fi
	fi
	wait "$pid"
	jvm_pid=""
	python3 - "$cfg" "$out.stdout" "$out.events" "$tmp/out/p.$cfg.$r.collapsed" <<'PY'
import json, re, sys
cfg, stdout, events, collapsed = sys.argv[1:5]
res = json.loads([l for l in open(stdout) if l.startswith("{")][-1])
# Accuracy: samples whose stack holds alpha (or beta), against the CPU time
# CpuSplit measured around its alpha and beta calls since START.
acc = "-"
try:
    a = b = 0
    for line in open(collapsed):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        a += int(n) if "CpuSplit.alpha" in stack else 0
        b += int(n) if "CpuSplit.beta" in stack else 0
    truth = res["alpha_cpu_ns"] / (res["alpha_cpu_ns"] + res["beta_cpu_ns"])
    if a + b:
        acc = "%.2f" % ((a / (a + b) - truth) * 100)
except OSError:
    pass
att = first = "-"
try:
    for line in open(events):
        if line.startswith("{") and '"profile"' in line:
            j = json.loads(line).get("summary", {}).get("java", {})
            att, first = j.get("attach_ms", "-"), j.get("first_java_sample_ms", "-")
except OSError:
    pass
print(cfg, res["work"] / res["cpu_ns"], att, first, acc)
PY
}

configs=(none jprofd-100hz jprofd-1khz jfr)
jvm_bench_rounds CpuSplit "${configs[@]}"
python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for cfg, thr, att, first, acc in rows:
    by.setdefault(cfg, []).append((float(thr), att, first, acc))
base = statistics.median(t for t, _, _, _ in by["none"])
print()
print("%-14s %14s %10s %-28s %s" % ("config", "work/cpu-ns", "vs none",
      "alpha share - truth (pp)", "attach ms / first Java sample ms"))
for cfg in ("none", "jprofd-100hz", "jprofd-1khz", "jfr"):
    vals = by.get(cfg, [])
    if not vals:
        continue
    med = statistics.median(t for t, _, _, _ in vals)
    lat = ", ".join("%s/%s" % (a, f) for _, a, f, _ in vals if a != "-")
    acc = ", ".join(x for _, _, _, x in vals if x != "-")
    print("%-14s %14.4f %9.2f%% %-28s %s" % (cfg, med, (med / base - 1) * 100, acc, lat))
PY
