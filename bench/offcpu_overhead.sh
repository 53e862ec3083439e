#!/bin/bash
# What off-CPU recording costs and whether its totals agree with a
# reference. Runs jprofd on a temporary socket, a pipe ping-pong workload
# (two processes bouncing a byte: a context switch per hop), and
#   1. no recording: context switches/s of the workload alone;
#   2. `record -e offcpu --pid` of the workload, then `record -e offcpu --all`:
#      the switch program's cost per run from bpf_stats (run_time_ns/run_cnt,
#      a mean: the kernel keeps no distribution), the daemon's CPU time
#      (utime+stime) and the context switches/s meanwhile;
#   3. the same --pid recording side by side with bpfcc-tools' offcputime
#      on the same process: total off-CPU time of each (offcputime needs
#      kprobes; where the kernel has none it is reported as unavailable).
# Not a pass/fail test. Run as root.
#   JPROFD=path  JPROFCTL=path   default: build/jprofd, build/jprofctl
#   BENCH_SECONDS=10             length of each phase
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jprofd=${JPROFD:-$src/build/jprofd}
jprofctl=${JPROFCTL:-$src/build/jprofctl}
secs=${BENCH_SECONDS:-10}
clk_tck=$(getconf CLK_TCK)

if [ "$(id -u)" -ne 0 ]; then
	echo "offcpu_overhead.sh: must be run as root" >&2
	exit 1
fi
tmp=$(mktemp -d /tmp/jprof-bench.XXXXXX)
daemon_pid=""
work_pid=""
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)

cleanup() {
	[ -n "$work_pid" ] && kill "$work_pid" 2>/dev/null || true
	[ -n "$daemon_pid" ] && kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
	sysctl -q kernel.bpf_stats_enabled="$old_stats" || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! command -v offcputime-bpfcc >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q bpfcc-tools >/dev/null 2>&1 ||
		echo "offcpu_overhead.sh: bpfcc-tools could not be installed; no reference" >&2
fi

# The workload: parent and child bounce one byte over two pipes.
cat > "$tmp/pingpong.c" <<'C'
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(void)
{
	int a[2], b[2];
	char c = 0;

	if (pipe(a) || pipe(b))
		return 1;
	if (fork() == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;)
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
				_exit(0);
	}
	for (;;)
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
			return 0;
}
C
cc -O2 -fno-omit-frame-pointer -o "$tmp/pingpong" "$tmp/pingpong.c"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
prog_stats() {  # run_time_ns run_cnt of the loaded offcpu_switch program
	bpftool prog show name offcpu_switch 2>/dev/null |
		awk '{for (i = 1; i < NF; i++) { if ($i == "run_time_ns") t = $(i+1); if ($i == "run_cnt") n = $(i+1) }}
		     END {print (t ? t : 0), (n ? n : 0)}'
}

"$jprofd" --socket "$tmp/s.sock" > /dev/null 2> "$tmp/jprofd.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
"$tmp/pingpong" > /dev/null 2>&1 &
work_pid=$!
sleep 1
sysctl -q kernel.bpf_stats_enabled=1

c0=$(ctxt); sleep "$secs"; c1=$(ctxt)
printf "%-34s %12s %14s %16s\n" phase "switches/s" "ns per run" "daemon CPU %"
printf "%-34s %12d %14s %16s\n" "no recording" $(( (c1 - c0) / secs )) - -

phase() {  # name, record arguments...
	local name=$1 d0 d1 c0 c1 t0 n0 t1 n1 rp
	shift
	"$jprofctl" --socket "$tmp/s.sock" record -e offcpu "$@" -d "${secs}s" -f collapsed \
		-o "$tmp/$name.collapsed" --no-progress 2> "$tmp/$name.err" &
	rp=$!
	sleep 0.5
	read -r t0 n0 < <(prog_stats)
	d0=$(cpu_ticks "$daemon_pid"); c0=$(ctxt)
	sleep $((secs - 1))
	read -r t1 n1 < <(prog_stats)
	d1=$(cpu_ticks "$daemon_pid"); c1=$(ctxt)
	wait "$rp"
	printf "%-34s %12d %14s %16s\n" "record -e offcpu $*" $(( (c1 - c0) / (secs - 1) )) \
		"$(awk -v t=$((t1 - t0)) -v n=$((n1 - n0)) 'BEGIN {printf "%.0f", n ? t / n : 0}')" \
		"$(awk -v d=$((d1 - d0)) -v s=$((secs - 1)) -v k="$clk_tck" 'BEGIN {printf "%.2f", 100 * d / k / s}')"
}
phase pid --pid "$work_pid"
phase all --all

echo
echo "side by side with offcputime (same process, same ${secs} s):"
ref="$tmp/ref.txt"
if command -v offcputime-bpfcc >/dev/null &&
	timeout $((secs + 30)) offcputime-bpfcc -f -p "$work_pid" "$secs" > "$ref" 2> "$tmp/ref.err" &
then
	refp=$!
	"$jprofctl" --socket "$tmp/s.sock" record -e offcpu --pid "$work_pid" -d "${secs}s" \
		-f collapsed -o "$tmp/side.collapsed" --no-progress 2>/dev/null
	if wait "$refp" && [ -s "$ref" ]; then
		# offcputime -f: "stack count" with microseconds.
		awk '{s += $NF} END {printf "offcputime: %.3f s\n", s / 1e6}' "$ref"
	else
		echo "offcputime: unavailable ($(head -c 300 "$tmp/ref.err" | tr '\n' ' '))"
	fi
else
	"$jprofctl" --socket "$tmp/s.sock" record -e offcpu --pid "$work_pid" -d "${secs}s" \
		-f collapsed -o "$tmp/side.collapsed" --no-progress 2>/dev/null
	echo "offcputime: not installed"
fi
awk '{s += $NF} END {printf "jprofd:     %.3f s\n", s / 1e9}' "$tmp/side.collapsed"
