#!/bin/bash
# Stress: each real JVM program sampled at 1 ms for minutes, with no JVM crash
# and no stall (issue 13). For each program, one JVM runs it in a loop for
# BENCH_MINUTES: javac (the JDK's compiler API) and scalac (Scala 2.11's
# compiler) compiling java_stacks.sh's inputs again and again, jruby its Ruby
# loop, tomcat10 serving a JSP under wrk; the JVM is attached once by the
# first of consecutive `jprofctl record --pid -i 1ms` recordings of
# BENCH_RECORD_SECONDS that cover the whole run. At the end it checks: the
# JVM exited 0 (tomcat: still alive), no hs_err_pid*.log in its cwd or /tmp,
# the daemon alive, every recording ended in time with samples, and progress
# every minute (compiles, Ruby iterations, requests) not collapsing against
# the first minute; prints the per-minute series and one summary line per
# program. Not a pass/fail test, but exits 1 when a program failed a check.
# Run as root after building (build/); logs go to BENCH_LOGS.
#   BENCH_PROGRAMS="javac scalac jruby tomcat"
#   BENCH_MINUTES=10                   run time per program
#   BENCH_INTERVAL=1ms                 sampling interval
#   BENCH_RECORD_SECONDS=60            length of each recording
#   BENCH_JAVA_HOME=/usr/lib/jvm/...   the JDK that runs them (default 17)
#   BENCH_NICE=5                       nice of the workload (and of wrk: 0)
#   BENCH_LOGS=DIR                     keep the logs there (default a new
#                                      /tmp/jprof-jstress-logs.*)
#   BENCH_AGENT_ENV="K=V ..."          extra environment of the JVMs
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$src/build}
programs=${BENCH_PROGRAMS:-javac scalac jruby tomcat}
minutes=${BENCH_MINUTES:-10}
interval=${BENCH_INTERVAL:-1ms}
rec_secs=${BENCH_RECORD_SECONDS:-60}
jhome=${BENCH_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
nice_n=${BENCH_NICE:-5}
read -r -a agent_env <<<"${BENCH_AGENT_ENV:-}"
me=java_stress.sh
# shellcheck source=bench/java_workloads.sh
. "$src/bench/java_workloads.sh"
jw_prepare "$programs" jprof-jstress
logs=${BENCH_LOGS:-$(mktemp -d /tmp/jprof-jstress-logs.XXXXXX)}
mkdir -p "$logs"
cleanup() {
	cp "$tmp/jprofd.log" "$logs/" 2>/dev/null || true
	jw_stop_all
}
trap cleanup EXIT
trap 'exit 130' INT TERM

jw_inputs
# The loop around the compilers: one JVM compiles until its time is up and
# prints "done <ms since the epoch> 1" after each compile.
mkdir -p "$tmp/work/driver"
cat >"$tmp/work/driver/StressLoop.java" <<'JAVA'
import java.lang.reflect.Method;
import java.util.Arrays;
import javax.tools.ToolProvider;

public class StressLoop {
    public static void main(String[] a) throws Exception {
        long stop = System.currentTimeMillis() + Long.parseLong(a[0]) * 1000;
        String[] args = Arrays.copyOfRange(a, 2, a.length);
        Method scalac = null;
        Object module = null;
        if (a[1].equals("scalac")) {
            Class<?> c = Class.forName("scala.tools.nsc.Main$");
            module = c.getField("MODULE$").get(null);
            scalac = c.getMethod("process", String[].class);
        }
        while (System.currentTimeMillis() < stop) {
            boolean ok;
            if (scalac != null) {
                // Scala 2.11's Driver.process returns nothing; its reporter
                // counts the errors.
                scalac.invoke(module, (Object) args);
                Object rep = module.getClass().getMethod("reporter").invoke(module);
                ok = !(Boolean) rep.getClass().getMethod("hasErrors").invoke(rep);
            } else {
                ok = ToolProvider.getSystemJavaCompiler().run(null, null, null, args) == 0;
            }
            if (!ok) {
                System.out.println("compile failed");
                System.exit(1);
            }
            System.out.println("done " + System.currentTimeMillis() + " 1");
        }
    }
}
JAVA
"$jhome/bin/javac" --release 17 -d "$tmp/work/driver" "$tmp/work/driver/StressLoop.java"
chmod -R a+rX "$tmp/work"
# Recordings are written as the JVM's user (nobody, tomcat).
mkdir -p "$tmp/rec" && chmod 1777 "$tmp/rec"
jw_daemon

now() { date +%s; }

# Keep wrk going against tomcat until $1 (epoch seconds): one wrk run per
# minute, each followed by a progress line "done <ms at its start> <requests>".
tomcat_load() {
	local until=$1 out=$2 d n t
	while :; do
		d=$((until - $(now)))
		[ "$d" -gt 60 ] && d=60
		[ "$d" -lt 5 ] && break
		t=$(date +%s%3N)
		n=$(wrk -t1 -c8 -d"${d}s" "$tomcat_url" 2>&1 | tee -a "$out.wrk" |
			awk '/requests in/ {print $1}')
		echo "done $t ${n:-0}" >>"$out.progress"
	done
}

# Summary of one raw profile: samples, samples of Java threads, the share of
# those with Java frames, bare [unknown_java] as a share of all samples.
summarize() {
	python3 - "$1" <<'PY'
import json, sys
LOST = {"[unknown_java]", "[not_walkable_java]", "[java_stack_missing]", "[gc_active]",
        "[safepoint]", "[deoptimization]", "[thread_exit]", "[no_class_load]",
        "[unknown_state]"}
p = json.load(open(sys.argv[1]))
frames = p["frames"]
total = java = lost = unk = 0
for s in p["stacks"]:
    n = s["samples"]
    total += n
    fr = [frames[i] for i in s["frames"]]
    if any(f["kind"].startswith("java") for f in fr):
        java += n
        continue
    names = [f["name"] for f in fr if f["kind"] == "marker"]
    # Lost: a marker in place of the Java frames, or a Java thread's native
    # frames ([jit], JavaCalls) with neither (java_stacks.sh says when).
    if any(m in LOST for m in names) or any(
            f["name"] == "[jit]" or f["name"].startswith("JavaCalls::call_helper") for f in fr):
        lost += n
    if "[unknown_java]" in names:
        unk += n
jt = java + lost
print("samples %d java-thread %d with-java %.1f%% unknown_java %.2f%%" % (
    total, jt, 100.0 * java / jt if jt else 0.0, 100.0 * unk / total if total else 0.0))
PY
}

# stress PROGRAM: one JVM of it for $minutes, recorded all along.
stress() {
	local prog=$1 out="$logs/$1" user=nobody cwd pid start deadline d i=0 t0 t1 rc
	local status exit_rc=""
	: >"$out.progress"
	: >"$out.recordings"
	start=$(now)
	deadline=$((start + minutes * 60))
	echo "$start" >"$out.start"
	touch "$tmp/start.$prog"
	case $prog in
	tomcat)
		user=tomcat
		cwd=$tmp/tomcat
		tomcat_start "$out.stdout"
		pid=$tomcat_pid
		tomcat_load "$deadline" "$out" &
		load_pid=$!
		;;
	*)
		cwd=$tmp/run-$prog
		mkdir -p "$cwd" && chown nobody "$cwd"
		case $prog in
		javac) jw_argv=(java -Xmx1g -cp "$tmp/work/driver" StressLoop "$((minutes * 60))" javac
				-nowarn --patch-module "java.base=$tmp/work/java.base"
				-d "$tmp/work/classes" "@$tmp/work/javac.files") ;;
		scalac) jw_argv=(java -Xmx1g -Xss4m -cp "$tmp/work/driver:/usr/share/scala-2.11/lib/*"
				 StressLoop "$((minutes * 60))" scalac -usejavacp
				 -d "$tmp/work/classes" "$tmp/work/scala"/*.scala) ;;
		jruby) jw_argv=(jruby "$tmp/work/loop.rb" "$((minutes * 60))" progress) ;;
		*) echo "$me: unknown program $prog" >&2; exit 2 ;;
		esac
		# The JVM's cwd is where it would write an hs_err file.
		cd "$cwd"
		jw_spawn "$out.stdout" "${jw_argv[@]}"
		cd "$tmp"
		pid=$(jw_wait_jvm "$job_pid")
		;;
	esac
	if [ -z "$pid" ]; then
		echo "$me: $prog: no JVM started" >&2
		tail -n 5 "$out.stdout" >&2
		exit 1
	fi
	# Until HotSpot's signal handlers exist the JVM cannot be attached.
	sleep 1
	while kill -0 "$pid" 2>/dev/null; do
		d=$((deadline - $(now)))
		[ "$d" -gt "$rec_secs" ] && d=$rec_secs
		[ "$d" -lt 5 ] && break
		i=$((i + 1))
		t0=$(date +%s%3N)
		rc=0
		jw_timeout=$((d + 60))
		jw_events=$out.rec$i.events
		jw_record "$user" "$pid" -d "${d}s" -i "$interval" --java require --no-progress \
			--json-events -f raw -o "$tmp/rec/rec.raw.json" || rc=$?
		t1=$(date +%s%3N)
		if [ -s "$tmp/rec/rec.raw.json" ]; then
			echo "rec $i rc $rc length ${d}s took $(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100))s" \
				"$(summarize "$tmp/rec/rec.raw.json")" >>"$out.recordings"
		else
			echo "rec $i rc $rc length ${d}s took $(((t1 - t0) / 1000))s no profile" >>"$out.recordings"
		fi
		rm -f "$tmp/rec/rec.raw.json"
	done
	# The end: tomcat must still be serving; the compilers and jruby end by
	# themselves (after the compile under way).
	if [ "$prog" = tomcat ]; then
		wait "$load_pid" || true
		load_pid=""
		if kill -0 "$pid" 2>/dev/null; then status="alive at end"; else status="DIED"; fi
		tomcat_stop
	else
		for _ in $(seq 3000); do kill -0 "$job_pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$job_pid" 2>/dev/null; then
			status="HUNG (still running 300 s after its end)"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		exit_rc=0
		wait "$job_pid" || exit_rc=$?
		job_pid=""
		[ -z "${status:-}" ] && status="exit $exit_rc"
		grep '^done ' "$out.stdout" >"$out.progress" || true
	fi
	find "$cwd" /tmp -maxdepth 1 -name 'hs_err_pid*.log' -newer "$tmp/start.$prog" \
		-exec cp {} "$logs/" \; -print >"$out.hs_err" || true
	find "$cwd" -maxdepth 1 -name 'core*' -newer "$tmp/start.$prog" -print >>"$out.hs_err" || true
	local daemon=alive
	kill -0 "$daemon_pid" 2>/dev/null || daemon=DEAD
	local prc=0
	python3 - "$prog" "$start" "$minutes" "$status" "$daemon" "$out" "$rec_secs" >"$out.summary" <<'PY' || prc=$?
import re, statistics, sys
prog, start, minutes, status, daemon, out, rec_secs = sys.argv[1:]
start, minutes, rec_secs = int(start), int(minutes), int(rec_secs)
bad = []
if not (status == "exit 0" or status == "alive at end"):
    bad.append("JVM " + status)
hs = [l.strip() for l in open(out + ".hs_err") if l.strip()]
if hs:
    bad.append("hs_err/core: " + " ".join(hs))
if daemon != "alive":
    bad.append("daemon dead")
# Progress per minute since the JVM started, and the longest gap between
# two progress lines (the time to the first one is the JVM's warm-up).
per = [0] * minutes
times = []
for line in open(out + ".progress"):
    f = line.split()
    if len(f) >= 3 and f[0] == "done":
        ms, n = int(f[1]), int(f[2])
        # A compile that ends just after the last minute counts in it.
        per[min(minutes - 1, (ms - start * 1000) // 60000)] += n
        times.append(ms)
gaps = [b - a for a, b in zip(times, times[1:])]
maxgap = max(gaps) / 1000.0 if gaps else 0.0
medgap = statistics.median(gaps) / 1000.0 if gaps else 0.0
first = (times[0] - start * 1000) / 1000.0 if times else 0.0
if not times:
    bad.append("no progress")
# A stall: a gap longer than the first, cold run (JVM start-up, class
# loading, the JIT's first compiles) by half, plus 10 s; later runs can be
# slow for a minute while the JIT still works or other load comes and goes.
# tomcat's lines are wrk runs of 60 s: its requests per minute say it.
elif prog != "tomcat" and gaps and maxgap > 1.5 * first + 10:
    bad.append("stall: longest gap %.0f s (first after %.0f s)" % (maxgap, first))
# The first minute holds the JVM's warm-up: later minutes should not fall
# below half of it (when it is large enough to say so).
full = per[:-1] if len(per) > 1 else per
if per[0] >= 4 and any(c < per[0] / 2 for c in full[1:]):
    bad.append("progress collapsed")
recs = [l.split() for l in open(out + ".recordings")]
nrec = len(recs)
samples = [int(r[r.index("samples") + 1]) for r in recs if "samples" in r]
late = [r[1] for r in recs if float(r[r.index("took") + 1].rstrip("s")) > rec_secs + 30]
if nrec == 0 or len(samples) < nrec or any(s == 0 for s in samples):
    bad.append("recording without samples")
if any(r[3] != "0" for r in recs):
    bad.append("recording failed: " + ",".join(r[1] for r in recs if r[3] != "0"))
if late:
    bad.append("recording late: " + ",".join(late))
wj = [float(r[r.index("with-java") + 1].rstrip("%")) for r in recs if "with-java" in r]
uj = [float(r[r.index("unknown_java") + 1].rstrip("%")) for r in recs if "unknown_java" in r]
print("%-7s per-minute progress: %s; first after %.0f s, then gaps median %.1f s, longest %.1f s" % (
    prog, " ".join(map(str, per)), first, medgap, maxgap))
print("%-7s %s: %d min, JVM %s, hs_err none%s, daemon %s, %d recordings, samples %d..%d (total %d),"
      " Java-thread with Java frames %.1f..%.1f%%, [unknown_java] <= %.2f%%" % (
          prog, "OK" if not bad else "FAIL (" + "; ".join(bad) + ")", minutes, status,
          "" if not hs else " NO", daemon, nrec, min(samples or [0]), max(samples or [0]),
          sum(samples), min(wj or [0]), max(wj or [0]), max(uj or [0])))
sys.exit(1 if bad else 0)
PY
	cat "$out.summary"
	return $prc
}

echo "$me: ${minutes} min per program at $interval, recordings of ${rec_secs}s," \
	"$("$jhome/bin/java" -version 2>&1 | head -1), workload nice $nice_n, logs in $logs"
failed=0
jw_nice=(nice -n "$nice_n")
for p in $programs; do
	stress "$p" || failed=1
	cp "$tmp/jprofd.log" "$logs/" 2>/dev/null || true
done
exit $failed
