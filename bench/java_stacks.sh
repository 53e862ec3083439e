#!/bin/bash
# How complete are the Java stacks of real JVM programs? Runs the JDK's javac
# compiling part of java.base (from openjdk-17-source's src.zip), Debian's
# scalac compiling generated sources, and jruby running a Ruby loop, each as
# nobody, records each with `jprofctl record --pid` (agent attached at run
# time) and prints, per program, the share of samples whose Java part is lost
# and under which marker frame ([unknown_java], [not_walkable_java], ...).
# Not a pass/fail test. Run as root after building (build/). Installs scala,
# jruby and openjdk-17-source with apt-get when they are missing.
#   BENCH_PROGRAMS="javac scalac jruby"  which programs
#   BENCH_INTERVAL=10ms                  sampling interval
#   BENCH_ROUNDS=1                       runs of each program
#   BENCH_SECONDS=25                     length of the jruby run
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

if [ "$(id -u)" -ne 0 ]; then
	echo "java_stacks.sh: run as root (it starts jprofd)" >&2
	exit 1
fi
for f in "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so"; do
	[ -e "$f" ] || { echo "java_stacks.sh: $f missing; build first" >&2; exit 1; }
done
need=()
command -v scalac >/dev/null || need+=(scala)
command -v jruby >/dev/null || need+=(jruby)
[ -e /usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip ] || need+=(openjdk-17-source)
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" >/dev/null
fi

tmp=$(mktemp -d /tmp/jprof-jstacks.XXXXXX)
chmod 755 "$tmp"
daemon_pid=""
job_pid=""
cleanup() {
	if [ -n "${BENCH_KEEP:-}" ]; then
		mkdir -p "$BENCH_KEEP" && cp "$tmp"/out/*.raw.json "$tmp"/out/*.events "$tmp/jprofd.log" "$BENCH_KEEP/" \
			2>/dev/null || true
	fi
	[ -n "$job_pid" ] && kill -KILL "$job_pid" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/out" "$tmp/work"
# Copies: a rebuild during the run does not change what is measured.
cp "$build/jprofd" "$build/jprofctl" "$build/agent/libjprofagent.so" "$tmp/"

# javac's input: java.util, java.time and java.lang of java.base, compiled as
# a patch of java.base (as the JDK's build does).
(cd "$tmp/work" && unzip -q /usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip \
	'java.base/java/util/*' 'java.base/java/time/*' 'java.base/java/lang/*')
find "$tmp/work/java.base" -name '*.java' >"$tmp/work/javac.files"
# scalac's input: pattern matches over case classes and collection lambdas
# (what the Scala compiler spends its time typing and transforming).
mkdir -p "$tmp/work/scala"
python3 - "$tmp/work/scala" <<'PY'
import sys
for i in range(4):
    with open("%s/M%d.scala" % (sys.argv[1], i), "w") as f:
        f.write("package bench.m%d\n" % i)
        f.write("sealed trait Shape { def area: Double }\n")
        for j in range(10):
            f.write("case class S%d(a: Int, b: String) extends Shape { def area: Double = a * %d.0 }\n"
                    % (j, j))
        f.write("object Ops {\n")
        for j in range(30):
            f.write("  def f%d(s: Shape): Int = s match {\n" % j)
            for k in range(10):
                f.write("    case S%d(a, b) => a + b.length + %d\n" % (k, j))
            f.write("  }\n")
            f.write("  def g%d(xs: List[Int]): List[String] = xs.filter(_ > %d).map(x => (x * 2).toString)\n"
                    % (j, j))
        f.write("}\n")
PY
cat >"$tmp/work/loop.rb" <<'RUBY'
# Strings, hashes, blocks and method dispatch through JRuby's call sites.
class Acc
  def initialize; @h = Hash.new(0); end
  def add(k, v); @h[k] += v; end
  def top; @h.max_by { |_, v| v }; end
end
stop = Time.now + ARGV[0].to_i
n = 0
while Time.now < stop
  a = Acc.new
  (1..2000).each { |i| a.add("k#{i % 97}", i * 3) }
  s = (1..200).map { |i| i.to_s(16) }.join(",").split(",").map(&:reverse).sort.first
  n += a.top[1] + s.size
end
puts n
RUBY
chmod -R a+rX "$tmp/work"
chown nobody "$tmp/out"
mkdir -p "$tmp/work/classes" && chown nobody "$tmp/work/classes"

"$tmp/jprofd" --socket "$tmp/jprofd.sock" --agent "$tmp/libjprofagent.so" --rate 19 \
	2>"$tmp/jprofd.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/jprofd.sock" ] && break; sleep 0.1; done

# The pid of the JVM among $1 and its descendants (launcher scripts fork or
# exec java), or nothing.
jvm_of() {
	local p kids
	for p in "$1" $(pgrep -P "$1" 2>/dev/null || true); do
		if grep -q libjvm.so "/proc/$p/maps" 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	for p in $(pgrep -P "$1" 2>/dev/null || true); do
		kids=$(jvm_of "$p")
		if [ -n "$kids" ]; then
			echo "$kids"
			return
		fi
	done
	return 0
}

# run PROGRAM ROUND: writes $tmp/out/PROGRAM.ROUND.raw.json
run() {
	local prog=$1 r=$2 argv=() pid="" out="$tmp/out/$1.$2"
	case $prog in
	javac) argv=("$jhome/bin/javac" -J-Xmx1g -nowarn --patch-module "java.base=$tmp/work/java.base"
		     -d "$tmp/work/classes" "@$tmp/work/javac.files") ;;
	scalac) argv=(scalac -J-Xmx1g -d "$tmp/work/classes" "$tmp/work/scala"/*.scala) ;;
	jruby) argv=(jruby "$tmp/work/loop.rb" "$secs") ;;
	*) echo "java_stacks.sh: unknown program $prog" >&2; exit 2 ;;
	esac
	rm -rf "$tmp/work/classes"/*
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		env JAVA_HOME="$jhome" PATH="$jhome/bin:$PATH" "${agent_env[@]}" "${argv[@]}" \
		>"$out.stdout" 2>&1 &
	job_pid=$!
	for _ in $(seq 500); do
		pid=$(jvm_of "$job_pid")
		[ -n "$pid" ] && break
		sleep 0.02
	done
	if [ -z "$pid" ]; then
		echo "java_stacks.sh: $prog: no JVM started" >&2
		tail -n 5 "$out.stdout" >&2
		exit 1
	fi
	# Until HotSpot's signal handlers exist the JVM cannot be attached.
	sleep 1
	# The whole run: the recording ends when the JVM exits.
	setpriv --reuid=nobody --regid=nogroup --clear-groups -- \
		"$tmp/jprofctl" --socket "$tmp/jprofd.sock" record --pid "$pid" -d 300s \
		-i "$interval" --java require --no-progress --json-events -f raw -o "$out.raw.json" \
		2>"$out.events" || true
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

python3 - "$tmp/out" <<'PY'
import collections, glob, json, os, sys

# A sample's Java part is lost when its stack has one of these markers where
# the Java frames would be (AsyncGetCallTrace errors, and a BPF sample with
# no agent record). Threads that never run Java code (GC, compiler) have
# neither Java frames nor such a marker.
LOST = {"[unknown_java]", "[not_walkable_java]", "[java_stack_missing]", "[gc_active]",
        "[safepoint]", "[deoptimization]", "[thread_exit]", "[no_class_load]",
        "[unknown_state]", "[unknown_java_method]"}
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.raw.json"))):
    prog, rnd = os.path.basename(path).split(".")[:2]
    p = json.load(open(path))
    frames = p["frames"]
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
        for m in markers:
            (lost if m in LOST else other)[m] += n
        if nj:
            java += n
            depths += [nj] * n
        elif not any(m in LOST for m in markers):
            continue
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
PY
