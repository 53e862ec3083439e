#!/bin/bash
# A daemon that has run for an hour beside many programs (issue 27): stack
# completeness beside `perf --call-graph dwarf` and the daemon's cost, probed
# again and again as the host ages.
#
# One jprofd with its defaults (host view at 19 Hz, default table memory)
# runs BENCH_MINUTES beside a mix started as nobody at nice 10: a JVM
# running a CPU loop, javac started every 30 s, postgres + pgbench, nginx +
# wrk and redis + redis-benchmark in bursts, a python3 and a perl loop, and
# a churn of short processes (sh, sed, gcc -c) at about 10 a second.
# At each probe time (BENCH_PROBES, minutes since the start) it compiles a
# 6,000-function C file with gcc -O2 under `perf record --call-graph dwarf`
# and asks the host view for cc1's stacks over the same seconds, and does
# the same for the long-running python3 loop (perf -p for BENCH_PROBE_S
# seconds). For each it prints the share of samples whose user stack reaches
# a root frame (_start, __libc_start_*, start_thread, clone*), the median
# user depth and the sample count; then the daemon's CPU since the last
# probe (its threads' schedstat plus its BPF programs' run time, % of one
# core), its RSS and its unwinding counters.
# Not a pass/fail test. Run as root. Takes BENCH_MINUTES.
#   JPROFD, JPROFCTL       default: build/jprofd, build/jprofctl
#   BENCH_MINUTES=60
#   BENCH_PROBES="2 15 30 45 60"
#   BENCH_PROBE_S=15       seconds of perf per python3 probe
#   BENCH_JPROFD_ARGS      extra daemon options, e.g. "--unwind-max-memory 48M"
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JPROFD=${JPROFD:-$src/build/jprofd}
JPROFCTL=${JPROFCTL:-$src/build/jprofctl}
MINUTES=${BENCH_MINUTES:-60}
PROBES=${BENCH_PROBES:-"2 15 30 45 60"}
PROBE_S=${BENCH_PROBE_S:-15}

[ "$(id -u)" -eq 0 ] || { echo "long_host.sh: run as root" >&2; exit 1; }
for b in "$JPROFD" "$JPROFCTL"; do
	[ -x "$b" ] || { echo "long_host.sh: $b not built" >&2; exit 1; }
done
need=()
command -v perf >/dev/null || need+=(linux-perf)
command -v nginx >/dev/null || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
command -v redis-server >/dev/null || need+=(redis-server)
command -v pgbench >/dev/null || need+=(postgresql)
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
command -v bpftool >/dev/null || need+=(bpftool)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
systemctl stop nginx redis-server postgresql 2>/dev/null || true

work=$(mktemp -d /var/tmp/jprof-long-host.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
	pkill -f "$work" 2>/dev/null || true
	[ -d "$work/pg" ] && setpriv --reuid=nobody --regid=nogroup --clear-groups \
		/usr/lib/postgresql/*/bin/pg_ctl -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
	wait 2>/dev/null || true
	sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
	rm -rf "$work"
}
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1
set -m   # each background job its own process group: cleanup kills the whole job

# As nobody (an array, not a function: bg runs it through nice).
nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
bg() { nice -n 10 "$@" >/dev/null 2>&1 & pids+=($!); }

"$JPROFD" --socket "$work/jprofd.sock" ${BENCH_JPROFD_ARGS:-} >"$work/jprofd.log" 2>&1 &
pids+=($!); dpid=$!
for _ in $(seq 100); do [ -S "$work/jprofd.sock" ] && break; sleep 0.1; done
ctl() { "$JPROFCTL" --socket "$work/jprofd.sock" "$@"; }

# --- the mix -----------------------------------------------------------
cat >"$work/Spin.java" <<'JAVA'
public class Spin {
    static long mix(long x) { for (int i = 0; i < 1000; i++) x = x * 6364136223846793005L + i; return x; }
    public static void main(String[] a) throws Exception {
        long s = 0;
        while (true) { for (int i = 0; i < 20000; i++) s += mix(i); Thread.sleep(50); }
    }
}
JAVA
mkdir -p "$work/jsrc"
for i in $(seq 40); do
	printf 'public class C%d { int f(int x) { return x * %d + new java.util.ArrayList<String>().size(); } }\n' \
		"$i" "$i" >"$work/jsrc/C$i.java"
done
python3 - "$work/big.c" <<-'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(6000):
        f.write("int f%d(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) "
                "s += a[i] * %d ^ (s >> 3); return s + f%d(a, n - 1); }\n"
                % (i, i, max(i - 1, 0)))
PY
printf 'int g(int x) { return x * 3 + 1; }\n' >"$work/small.c"
chmod -R a+rwX "$work"

bg "${nobody[@]}" /usr/bin/java -Xmx256m "$work/Spin.java"
bg bash -c "while :; do cd '$work/jsrc' && setpriv --reuid=nobody --regid=nogroup --clear-groups \
	nice -n 10 javac -d '$work/jout' *.java; sleep 30; done"
bg "${nobody[@]}" /usr/bin/python3 -c '
import json, time
def leaf(n): return json.dumps({"k": list(range(n))})
def mid(n): return sum(len(leaf(i % 50)) for i in range(n))
while True:
    mid(300); time.sleep(0.01)'
bg "${nobody[@]}" /usr/bin/perl -e 'while (1) { my %h; $h{$_} = $_ x 3 for 1..20000; select(undef, undef, undef, 0.05) }'
bg bash -c "while :; do sh -c 'echo x | sed s/x/y/ >/dev/null'; \
	gcc -c -o '$work/small.o' '$work/small.c' 2>/dev/null; /bin/true; sleep 0.3; done"

mkdir -p "$work/nginx/logs" "$work/www"
head -c 4096 /dev/urandom >"$work/www/index.html"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
error_log $work/nginx/logs/error.log;
pid $work/nginx/nginx.pid;
events { worker_connections 256; }
http { access_log off; server { listen 127.0.0.1:18081; root $work/www; } }
CONF
bg nginx -p "$work/nginx" -c "$work/nginx/nginx.conf"
bg bash -c "while :; do wrk -t1 -c4 -d3s http://127.0.0.1:18081/; sleep 12; done"
bg "${nobody[@]}" redis-server --port 16380 --save '' --appendonly no
bg bash -c "sleep 5; while :; do redis-benchmark -p 16380 -q -n 50000 -c 8 -t set,get; sleep 15; done"

pgbin=$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)
if setpriv --reuid=nobody --regid=nogroup --clear-groups "$pgbin/initdb" -D "$work/pg" -A trust >/dev/null 2>&1; then
	setpriv --reuid=nobody --regid=nogroup --clear-groups "$pgbin/pg_ctl" -D "$work/pg" \
		-o "-k $work -p 15433 -c listen_addresses=''" -l "$work/pg.log" start >/dev/null 2>&1 || true
	if setpriv --reuid=nobody --regid=nogroup --clear-groups pgbench -h "$work" -p 15433 -i -s 2 postgres \
		>/dev/null 2>&1; then
		bg bash -c "while :; do setpriv --reuid=nobody --regid=nogroup --clear-groups nice -n 10 \
			pgbench -h '$work' -p 15433 -c 2 -T 5 postgres; sleep 10; done"
	else
		echo "postgres: pgbench init failed; running without it" >&2
	fi
fi

# --- probes ------------------------------------------------------------
roots_py='
import sys
roots = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone3")
mode = sys.argv[1]; tot = root = 0; depths = []
def add(user, c=1):
    global tot, root
    tot += c; depths.extend([len(user)] * c)
    if any(f in roots for f in user[:3]): root += c
if mode == "collapsed":
    for line in sys.stdin:
        s, _, c = line.rstrip("\n").rpartition(" ")
        if not c.isdigit(): continue
        add([f for f in s.split(";") if not f.endswith("_[k]") and not f.startswith("[")], int(c))
else:
    cur = []
    def flush():
        if cur: add([f[0] for f in cur if "kernel.kallsyms" not in f[1]][::-1])
    for line in sys.stdin:
        if not line.strip():
            flush(); cur = []; continue
        if line[0] in " \t":
            p = line.split()
            if len(p) >= 2: cur.append((p[1].split("+")[0], p[-1]))
    flush()
depths.sort()
print("%5.1f%% %3d %6d" % (100.0 * root / max(tot, 1), depths[len(depths) // 2] if depths else 0, tot))'

schedstat_ns() {  # the daemon's threads' CPU time, ns
	cat /proc/"$dpid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}
bpf_ns() {
	local ids
	ids=$(grep -h '^prog_id:' /proc/"$dpid"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
ids = set(int(x) for x in sys.argv[1].split())
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("id") in ids))' "$ids"
}

t0=$(date +%s)
last_cpu=$(schedstat_ns); last_bpf=$(bpf_ns); last_t=$(date +%s.%N)
echo "long_host.sh: $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) cores, daemon pid $dpid"
printf '%-6s | %-20s | %-20s | %-20s | %-20s | %s\n' min "cc1 jprofd root% d n" "cc1 perf dwarf" \
	"python3 jprofd" "python3 perf dwarf" "daemon CPU%(+BPF) RSS, load"
for m in $PROBES; do
	while [ $(( $(date +%s) - t0 )) -lt $((m * 60)) ]; do sleep 5; done
	# cc1: perf follows gcc and its children; the host view is asked for cc1 afterwards.
	s=$(date +%s)
	(cd "$work" && perf record -q -F 99 --call-graph dwarf -o "$work/cc1.data" -- \
		setpriv --reuid=nobody --regid=nogroup --clear-groups gcc -O2 -c big.c -o /dev/null) \
		>/dev/null 2>&1 || true
	secs=$(( $(date +%s) - s + 2 ))
	ctl profile --comm cc1 --last "${secs}s" -f collapsed -o "$work/cc1.collapsed" >/dev/null 2>&1 || true
	c_j=$(python3 -c "$roots_py" collapsed <"$work/cc1.collapsed")
	c_p=$(perf script -i "$work/cc1.data" --comm cc1 -F ip,sym,dso 2>/dev/null | python3 -c "$roots_py" perf)
	p_j=-; p_p=-
	pypid=$(pgrep -n -u nobody -f 'import json, time' || true)
	if [ -n "$pypid" ] && kill -0 "$pypid" 2>/dev/null; then
		perf record -q -F 99 --call-graph dwarf -p "$pypid" -o "$work/py.data" -- sleep "$PROBE_S" \
			>/dev/null 2>&1 || true
		ctl profile --pid "$pypid" --last "$((PROBE_S + 1))s" -f collapsed -o "$work/py.collapsed" \
			>/dev/null 2>&1 || true
		p_j=$(python3 -c "$roots_py" collapsed <"$work/py.collapsed")
		p_p=$(perf script -i "$work/py.data" -F ip,sym,dso 2>/dev/null | python3 -c "$roots_py" perf)
	fi
	now_cpu=$(schedstat_ns); now_bpf=$(bpf_ns); now_t=$(date +%s.%N)
	cost=$(python3 -c "print('%.2f%% (+%.2f%% BPF)' % (($now_cpu - $last_cpu) / 1e7 / ($now_t - $last_t), \
		($now_bpf - $last_bpf) / 1e7 / ($now_t - $last_t)))")
	last_cpu=$now_cpu; last_bpf=$now_bpf; last_t=$now_t
	rss=$(awk '/VmRSS/ {printf "%.1f MB", $2 / 1024}' /proc/"$dpid"/status)
	printf '%-6s | %-20s | %-20s | %-20s | %-20s | %s %s, %s\n' "$m" "$c_j" "$c_p" "$p_j" "$p_p" \
		"$cost" "$rss" "$(cut -d' ' -f1 /proc/loadavg)"
	ctl status 2>/dev/null | sed -n '/unwind/,/^$/p' | sed 's/^/         /' | head -n 14
done 2>&1
while [ $(( $(date +%s) - t0 )) -lt $((MINUTES * 60)) ]; do sleep 5; done
echo "done after $(( ($(date +%s) - t0) / 60 )) minutes; daemon log: $(wc -l <"$work/jprofd.log") lines"
grep -iE "error|fail|refus" "$work/jprofd.log" | sort | uniq -c | sort -rn | head -n 10 || true
