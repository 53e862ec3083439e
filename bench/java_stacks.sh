#!/bin/bash
# How complete are the Java stacks of real JVM programs? Runs the JDK's javac
# compiling part of java.base (the running JDK's src.zip: openjdk-17-source
# for JDK 17), Debian's
# scalac compiling generated sources, and jruby running a Ruby loop, each as
# nobody (and, when asked for, Debian's tomcat10 under wrk, as tomcat),
# records each with `jprofctl record --pid` (agent attached at run time) and
# prints, per program, the share of samples whose Java part is lost
# and under which marker frame ([unknown_java], [not_walkable_java], ...).
# Not a pass/fail test. Run as root after building (build/). Installs scala,
# jruby and openjdk-17-source (tomcat10, wrk) with apt-get when they are missing.
#   BENCH_PROGRAMS="javac scalac jruby"  which programs (also: tomcat)
#   BENCH_INTERVAL=10ms                  sampling interval
#   BENCH_ROUNDS=1                       runs of each program
#   BENCH_SECONDS=25                     length of the jruby run and of each
#                                        tomcat recording
#   BENCH_ASPROF=/path/to/asprof         tomcat: then async-profiler for as long,
#                                        under the same load (--fdtransfer)
#   BENCH_JAVA_HOME=/usr/lib/jvm/...     the JDK that runs them (default 17)
#   BENCH_AGENT_ENV="K=V ..."            extra environment of the JVMs (e.g.
#                                        JPROF_AGENT_RECOVER=0: the agent does
#                                        not retry failed ASGCT walks)
#   BENCH_KEEP=DIR                       keep the profiles (raw JSON) and the
#                                        daemon's events (JSON lines) there
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$src/build}
programs=${BENCH_PROGRAMS:-javac scalac jruby}
interval=${BENCH_INTERVAL:-10ms}
rounds=${BENCH_ROUNDS:-1}
secs=${BENCH_SECONDS:-25}
jhome=${BENCH_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
read -r -a agent_env <<<"${BENCH_AGENT_ENV:-}"
me=java_stacks.sh
# shellcheck source=bench/java_workloads.sh
. "$src/bench/java_workloads.sh"
jw_prepare "$programs" jprof-jstacks
cleanup() {
	if [ -n "${BENCH_KEEP:-}" ]; then
		mkdir -p "$BENCH_KEEP" && cp "$tmp"/out/*.raw.json "$tmp"/out/*.events "$tmp"/ap/*.collapsed \
			"$tmp"/out/*.wrk "$tmp"/out/*.stdout "$tmp/jprofd.log" "$BENCH_KEEP/" 2>/dev/null || true
	fi
	jw_stop_all
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/out" "$tmp/ap"
jw_inputs
chown nobody "$tmp/out"
# tomcat runs as tomcat, and so does its recording.
chmod 1777 "$tmp/out"
# async-profiler's output is written by its agent, as the JVM's user.
chmod 777 "$tmp/ap"
jw_daemon

# tomcat ROUND: tomcat under wrk, warmed up for 10 s, recorded by jprofd for
# $secs, then (with BENCH_ASPROF) by async-profiler for $secs, back to back
# under the same load.
run_tomcat() {
	local r=$1 out="$tmp/out/tomcat.$1" load
	load=$((10 + secs + 5))
	[ -n "${BENCH_ASPROF:-}" ] && load=$((load + secs + 5))
	tomcat_start "$out.stdout"
	wrk -t1 -c8 -d"${load}s" "$tomcat_url" >"$out.wrk" 2>&1 &
	load_pid=$!
	sleep 10
	jw_events=$out.events
	jw_record tomcat "$tomcat_pid" -d "${secs}s" -i "$interval" --java require --no-progress \
		--json-events -f raw -o "$out.raw.json" || true
	if [ -n "${BENCH_ASPROF:-}" ]; then
		"$BENCH_ASPROF" -e cpu -i "$interval" -d "$secs" --fdtransfer -a -o collapsed \
			-f "$tmp/ap/tomcat.$r.collapsed" "$tomcat_pid" >"$out.asprof" 2>&1 || true
	fi
	# wrk prints its totals only when it ends by itself.
	wait "$load_pid" || true
	load_pid=""
	kill -0 "$tomcat_pid" 2>/dev/null || { echo "java_stacks.sh: tomcat died:" >&2; tail -n 20 "$out.stdout" >&2; exit 1; }
	tomcat_stop
	[ -s "$out.raw.json" ] || { echo "java_stacks.sh: tomcat: no profile" >&2; cat "$out.events" >&2; exit 1; }
}

# run PROGRAM ROUND: writes $tmp/out/PROGRAM.ROUND.raw.json
run() {
	local prog=$1 r=$2 pid="" out="$tmp/out/$1.$2"
	if [ "$prog" = tomcat ]; then
		run_tomcat "$r"
		return
	fi
	jw_argv_of "$prog" "$secs"
	rm -rf "$tmp/work/classes"/*
	jw_spawn "$out.stdout" "${jw_argv[@]}"
	pid=$(jw_wait_jvm "$job_pid")
	if [ -z "$pid" ]; then
		echo "java_stacks.sh: $prog: no JVM started" >&2
		tail -n 5 "$out.stdout" >&2
		exit 1
	fi
	# Until HotSpot's signal handlers exist the JVM cannot be attached.
	sleep 1
	# The whole run: the recording ends when the JVM exits.
	jw_events=$out.events
	jw_record nobody "$pid" -d 300s -i "$interval" --java require --no-progress \
		--json-events -f raw -o "$out.raw.json" || true
	wait "$job_pid" || { echo "java_stacks.sh: $prog failed:" >&2; tail -n 5 "$out.stdout" >&2; exit 1; }
	job_pid=""
	[ -s "$out.raw.json" ] || { echo "java_stacks.sh: $prog: no profile" >&2; cat "$out.events" >&2; exit 1; }
}

echo "java_stacks.sh: interval $interval, $("$jhome/bin/java" -version 2>&1 | head -1)," \
	"JVM environment: ${BENCH_AGENT_ENV:-none}"
for r in $(seq "$rounds"); do
	for p in $programs; do
		run "$p" "$r"
	done
done

python3 - "$tmp/out" "$tmp/ap" <<'PY'
import collections, glob, json, os, sys

# A sample's Java part is lost when its stack has one of these markers where
# the Java frames would be (AsyncGetCallTrace errors, and a BPF sample with
# no agent record). Threads that never run Java code (GC, compiler) have
# neither Java frames nor such a marker.
LOST = {"[unknown_java]", "[not_walkable_java]", "[java_stack_missing]", "[gc_active]",
        "[safepoint]", "[deoptimization]", "[thread_exit]", "[no_class_load]",
        "[unknown_state]", "[unknown_java_method]"}
NO_MARKER = "(no marker, native [jit] frames)"
# HotSpot's own threads never run Java code: a compiler thread installing an
# nmethod (CodeBuffer::copy_code_to) or the sweeper and the VM thread
# cleaning inline caches have [jit] frames in their native stacks, and a
# compiler thread's late signal gives [java_stack_missing]; none of that is
# a Java stack lost. Matched on the thread's name (the 15-character OS name,
# or the Java name when the profile has it).
VM_THREADS = ("C1 CompilerThre", "C2 CompilerThre", "Sweeper thread", "VM Thread",
              "VM Periodic Tas", "Service Thread", "Monitor Deflati", "GC Thread",
              "G1 ")
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.raw.json"))):
    prog, rnd = os.path.basename(path).split(".")[:2]
    p = json.load(open(path))
    frames = p["frames"]
    vm_tids = {t["tid"] for t in p.get("threads", [])
               if str(t.get("name", "")).startswith(VM_THREADS)}
    total = java = 0
    lost = collections.Counter()
    other = collections.Counter()
    depths = []
    for s in p["stacks"]:
        n = s["samples"]
        total += n
        fr = [frames[i] for i in s["frames"]]
        nj = sum(1 for f in fr if f["kind"].startswith("java"))
        markers = [f["name"] for f in fr if f["kind"] == "marker"]
        if s.get("tid") in vm_tids and not nj:
            if any(m in LOST for m in markers) or any(f["name"] == "[jit]" for f in fr):
                other["(HotSpot's own threads: lost marker or [jit], not counted)"] += n
            continue
        for m in markers:
            (lost if m in LOST else other)[m] += n
        if nj:
            java += n
            depths += [nj] * n
        elif not any(m in LOST for m in markers) and any(
                f["name"] == "[jit]" or f["name"].startswith("JavaCalls::call_helper")
                for f in fr):
            # A Java thread's sample without Java frames and without a
            # marker: taken on the thread's own event before the agent had
            # its fd, or an AsyncGetCallTrace "not Java" answer for a Java
            # thread in the VM (a runtime stub): lost all the same.
            lost[NO_MARKER] += n
    jt = java + sum(c for m, c in lost.items() if m != "[unknown_java_method]")
    depths.sort()
    # The join's and the ring's counters (summary.java of the profile event):
    # why a BPF sample had no agent record.
    jsum = {}
    ev = path[:-len(".raw.json")] + ".events"
    for line in open(ev) if os.path.exists(ev) else []:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("type") == "profile":
            jsum = e.get("summary", {}).get("java", {})
    rows.append((prog, rnd, total, java, jt, lost, other,
                 depths[len(depths) // 2] if depths else 0, jsum))

print()
print("%-7s %-3s %8s %10s %8s  %s" % ("program", "run", "samples", "java-thr", "w/ Java",
                                    "lost, as % of all samples, per marker"))
for prog, rnd, total, java, jt, lost, other, med, jsum in rows:
    pct = lambda c: 100.0 * c / total if total else 0.0
    desc = ", ".join("%s %.1f%%" % (m, pct(c)) for m, c in lost.most_common()) or "none"
    print("%-7s %-3s %8d %10d %7.1f%%  %s" % (prog, rnd, total, jt,
                                               100.0 * java / jt if jt else 0.0, desc))
    if other:
        print("%-7s %-3s %8s %10s %8s  other markers: %s" % ("", "", "", "", "", ", ".join(
            "%s %.1f%%" % (m, pct(c)) for m, c in other.most_common())))
    print("%-7s %-3s %8s %10s %8s  median Java depth %d" % ("", "", "", "", "", med))
    if jsum:
        ring = jsum.get("ring", {})
        print("%-7s %-3s %8s %10s %8s  join: joined %s, without_java %s, agent_unmatched %s;"
              " ring: records %s, dropped %s; signal %s" % (
                  "", "", "", "", "", jsum.get("joined"), jsum.get("without_java"),
                  jsum.get("agent_unmatched"), ring.get("records"), ring.get("dropped"),
                  jsum.get("signal", {}).get("number")))
# async-profiler's collapsed output (-a: Java frames end in _[j], _[i], _[0],
# _[1]); its error frames stand where a Java stack was lost.
AP_LOST = {"[unknown_Java]", "[not_walkable_Java]", "[not_walkable_not_Java]", "[GC_active]",
           "[safepoint]", "[deoptimization]", "[thread_exit]", "[no_class_load]",
           "[unknown_state]", "[no_Java_frame]", "[unknown_not_Java]"}
JAVA_SUFFIX = ("_[j]", "_[i]", "_[0]", "_[1]")
for path in sorted(glob.glob(os.path.join(sys.argv[2], "*.collapsed"))):
    prog, rnd = os.path.basename(path).split(".")[:2]
    total = java = 0
    lost = collections.Counter()
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        n = int(n)
        total += n
        fr = stack.split(";")
        if any(f.endswith(JAVA_SUFFIX) for f in fr):
            java += n
        else:
            for f in fr:
                if f in AP_LOST:
                    lost[f] += n
    jt = java + sum(lost.values())
    pct = lambda c: 100.0 * c / total if total else 0.0
    print("%-7s %-3s %8d %10d %7.1f%%  async-profiler; lost: %s" % (
        prog, rnd, total, jt, 100.0 * java / jt if jt else 0.0,
        ", ".join("%s %.1f%%" % (m, pct(c)) for m, c in lost.most_common()) or "none"))
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.wrk"))):
    for line in open(path):
        if "Requests/sec" in line or "requests in" in line or "Non-2xx" in line:
            print("%-7s %-3s wrk: %s" % (os.path.basename(path).split(".")[0],
                                         os.path.basename(path).split(".")[1], line.strip()))
PY
