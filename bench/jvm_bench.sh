# Sourced by the JVM benchmarks (jvm_overhead.sh, alloc_lock_overhead.sh):
# checks root and the build, makes a temporary directory with copies of the
# Java workloads, jprofctl and the agent (a rebuild during a run does not
# change what is measured; nobody can read them), starts jprofd on its own
# socket, and stops everything on exit, also on Ctrl-C.

# jvm_bench_setup NAME SECONDS ROUNDS FILE...: FILE are paths under the
# build that must exist. Sets secs and rounds (BENCH_SECONDS, BENCH_ROUNDS,
# else SECONDS and ROUNDS), java (BENCH_JAVA, else JDK 17), src, build, tmp
# (classes in $tmp/classes, output in $tmp/out, writable by nobody) and
# daemon_pid. A caller sets jvm_pid while a JVM runs, so that the cleanup
# can stop it.
jvm_bench_setup() {
	local name=$1 f
	secs=${BENCH_SECONDS:-$2}
	rounds=${BENCH_ROUNDS:-$3}
	java=${BENCH_JAVA:-/usr/lib/jvm/java-17-openjdk-amd64/bin/java}
	shift 3
	src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	build=${BUILD_DIR:-$src/build}
	if [ "$(id -u)" -ne 0 ]; then
		echo "$name: run as root (it starts jprofd)" >&2
		exit 1
	fi
	for f in jprofd jprofctl agent/libjprofagent.so "$@"; do
		[ -e "$build/$f" ] || { echo "$name: $build/$f missing; build first" >&2; exit 1; }
	done
	tmp=$(mktemp -d "/tmp/jprof-${name%.sh}.XXXXXX")
	chmod 755 "$tmp"
	daemon_pid=""
	jvm_pid=""
	trap jvm_bench_cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir -p "$tmp/classes" "$tmp/out"
	cp "$build"/tests/java/*.class "$tmp/classes/"
	cp "$build/jprofctl" "$build/agent/libjprofagent.so" "$tmp/"
	chmod -R a+rX "$tmp"
	chown nobody "$tmp/out"
	"$build/jprofd" --socket "$tmp/jprofd.sock" --agent "$tmp/libjprofagent.so" --rate 19 \
		2>"$tmp/jprofd.log" &
	daemon_pid=$!
	for _ in $(seq 100); do [ -S "$tmp/jprofd.sock" ] && break; sleep 0.1; done
}

jvm_bench_cleanup() {
	[ -n "$jvm_pid" ] && kill -KILL "$jvm_pid" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}

# jvm_bench_started PID: waits until the JVM has exec'd as nobody (libjvm
# mapped), since before that nobody may not record it.
jvm_bench_started() {
	for _ in $(seq 200); do
		grep -q libjvm.so "/proc/$1/maps" 2>/dev/null && return 0
		sleep 0.01
	done
}

# jvm_bench_rounds WORKLOAD CONFIG...: $rounds interleaved rounds of the
# caller's `run CONFIG ROUND` over every CONFIG, each output line kept in
# $tmp/results (printed as it comes).
jvm_bench_rounds() {
	local workload=$1 r cfg
	shift
	echo "$workload ${secs}s x $rounds rounds, $("$java" -version 2>&1 | head -1)"
	: >"$tmp/results"
	for r in $(seq "$rounds"); do
		for cfg in "$@"; do
			run "$cfg" "$r" | tee -a "$tmp/results"
		done
	done
}
