#!/bin/bash
# Overhead of allocation and lock profiling.
# alloc: AllocSplit's throughput (allocation rounds per CPU-nanosecond of its
# main thread, which pays for every sampling callback) with no profiler, with
# jprofd -e alloc at the default 512 KiB interval (agent attached at run
# time) and at 64 KiB, and with JFR's ObjectAllocationSample
# (-XX:StartFlightRecording with only that event, at the "profile" settings'
# throttle of 300 samples/s, and unthrottled).
# lock: LockContend's throughput (monitor entries per CPU-nanosecond of its
# two contending threads) with no profiler, with jprofd -e lock (10 us) and
# with JFR's JavaMonitorEnter (only that event, the "profile" settings' 10 ms
# threshold).
# park: the same with a ReentrantLock (waiters park in Unsafe.park, which
# jprofd -e lock times): no profiler, jprofd -e lock (10 us), JFR's
# ThreadPark (only that event, the "profile" settings' 10 ms threshold).
# Its throughput is per wall-clock second: parked waiters use no CPU.
# Interleaved rounds so the machine's noise hits every configuration alike;
# medians per configuration. Not a pass/fail test. Run as root after
# building (build/).
#   BENCH_SECONDS=10  length of one workload run
#   BENCH_ROUNDS=5    interleaved rounds
#   BENCH_JAVA=path   java binary (default JDK 17)
#   BENCH_CONFIGS="park-none park-jprofd"  only these configurations
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/jvm_bench.sh"
jvm_bench_setup alloc_lock_overhead.sh 10 5 tests/java/AllocSplit.class tests/java/LockContend.class

# JFR settings with one event enabled (with stack traces) and one setting:
# jfc NAME EVENT SETTING VALUE
jfc() {
	cat >"$tmp/$1.jfc" <<JFC
<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0">
  <event name="$2">
    <setting name="enabled">true</setting>
    <setting name="stackTrace">true</setting>
    <setting name="$3">$4</setting>
  </event>
</configuration>
JFC
}
# ObjectAllocationSample as the "profile" settings configure it (throttle
# 300/s), or with no throttle; JavaMonitorEnter at "profile"'s threshold.
jfc alloc-300 jdk.ObjectAllocationSample throttle 300/s
jfc alloc-off jdk.ObjectAllocationSample throttle off
jfc lock jdk.JavaMonitorEnter threshold "10 ms"
jfc park jdk.ThreadPark threshold "10 ms"
chmod a+r "$tmp"/*.jfc

# run CONFIG ROUND: prints "config work_per_cpu_ns samples"
run() {
	local cfg=$1 r=$2 out="$tmp/out/$1.$2" go="$tmp/out/go.$1.$2"
	local cls=AllocSplit ev=alloc evopt=() clsargs=()
	# A fixed heap: GC sizing is the same in every configuration.
	local opts=(-Xms1g -Xmx1g)
	case $cfg in
	jfr-300s) opts+=("-XX:StartFlightRecording=settings=$tmp/alloc-300.jfc,filename=$tmp/out/rec.$r.jfr") ;;
	jfr-nothrottle) opts+=("-XX:StartFlightRecording=settings=$tmp/alloc-off.jfc,filename=$tmp/out/rec.$r.jfr") ;;
	jprofd-512k) evopt=(--alloc 512k) ;;
	jprofd-64k) evopt=(--alloc 64k) ;;
	lock-*) cls=LockContend ev=lock ;;
	park-*) cls=LockContend ev=lock clsargs=(2 reentrant) ;;
	esac
	case $cfg in
	lock-jfr) opts+=("-XX:StartFlightRecording=settings=$tmp/lock.jfc,filename=$tmp/out/rec.$r.jfr") ;;
	lock-jprofd | park-jprofd) evopt=(--lock 10us) ;;
	park-jfr) opts+=("-XX:StartFlightRecording=settings=$tmp/park.jfc,filename=$tmp/out/rec.$r.jfr") ;;
	esac
	# The workload starts allocating once $go exists: after the agent's
	# event is on, so the whole measured span is profiled.
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		"$java" "${opts[@]}" -cp "$tmp/classes" "$cls" "$secs" "$go" "${clsargs[@]}" >"$out.stdout" 2>&1 &
	jvm_pid=$!
	jvm_bench_started "$jvm_pid"
	# Every configuration starts measuring a running JVM, 2 s after start
	# (JFR has started by then; jprofd attaches during that time).
	sleep 2
	if [ ${#evopt[@]} -gt 0 ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
			"$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$jvm_pid" -e "$ev" \
			"${evopt[@]}" -d $((secs + 30))s --no-progress --json-events \
			-o "$tmp/out/p.$cfg.$r.collapsed" 2>"$out.events" &
		for _ in $(seq 300); do
			grep -q "pid $jvm_pid: $ev event on" "$tmp/jprofd.log" && break
			sleep 0.05
		done
	fi
	touch "$go"
	# The workload idles after printing: stop it then (the recording ends
	# with the process).
	for _ in $(seq $((secs * 20 + 600))); do
		grep -q '^{' "$out.stdout" 2>/dev/null && break
		sleep 0.05
	done
	kill -KILL "$jvm_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	jvm_pid=""
	python3 - "$cfg" "$out.stdout" "$out.events" "$secs" <<'PY'
import json, sys
cfg, stdout, events, secs = sys.argv[1:5]
res = json.loads([l for l in open(stdout) if l.startswith("{")][-1])
n = "-"
try:
    for line in open(events):
        if line.startswith("{") and '"profile"' in line:
            n = json.loads(line).get("summary", {}).get("java", {}).get("event_records", "-")
except OSError:
    pass
# Parking waiters burn no CPU, so a profiler that makes parks longer looks
# cheaper per CPU-ns: for park-* the work is per wall-clock ns instead.
per = int(secs) * 1e9 if cfg.startswith("park-") else res["cpu_ns"]
print(cfg, res.get("rounds", res.get("ops")) / per, n)
PY
}

configs=(none jprofd-512k jprofd-64k jfr-300s jfr-nothrottle lock-none lock-jprofd lock-jfr
	park-none park-jprofd park-jfr)
[ -n "${BENCH_CONFIGS:-}" ] && read -ra configs <<<"$BENCH_CONFIGS"
jvm_bench_rounds "AllocSplit and LockContend" "${configs[@]}"
python3 - "$tmp/results" "${configs[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for cfg, thr, n in rows:
    by.setdefault(cfg, []).append((float(thr), n))
base = {fam: statistics.median(t for t, _ in by[cfg]) for fam, cfg in
        (("alloc", "none"), ("lock", "lock-none"), ("park", "park-none")) if cfg in by}
print()
print("%-16s %18s %10s %s" % ("config", "work/cpu-ms", "vs none", "jprofd samples per run"))
print("(park-*: work per wall-clock ms)")
for cfg in sys.argv[2:]:
    vals = by.get(cfg, [])
    if not vals:
        continue
    med = statistics.median(t for t, _ in vals) / base[cfg.split("-")[0] if cfg.startswith(("lock-", "park-")) else "alloc"]
    med_abs = statistics.median(t for t, _ in vals)
    print("%-16s %18.2f %9.2f%% %s" % (cfg, med_abs * 1e6, (med - 1) * 100,
                                      ", ".join(n for _, n in vals if n != "-")))
PY
