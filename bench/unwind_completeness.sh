#!/bin/bash
# Stack completeness and cost of CFI unwinding on Debian's own programs,
# side by side in one run: two jprofd daemons (unwind = cfi, and unwind =
# frame-pointers) and `perf record --call-graph dwarf` (the reference)
# record the same process over the same seconds. Per workload it prints the
# share of samples whose user stack reaches a root frame (_start,
# __libc_start_*, start_thread, clone*) among its outermost three frames, the
# median user depth, and at the end the BPF time per sample of each daemon
# (bpf_stats) and the cfi daemon's table memory. See bench/README.md.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JPROFD=${JPROFD:-$src/build/jprofd}
JPROFCTL=${JPROFCTL:-$src/build/jprofctl}
SECS=${BENCH_SECONDS:-10}
RATE=${BENCH_RATE_HZ:-99}
WORKLOADS=${BENCH_WORKLOADS:-"nginx redis python3 xz cc1"}

[ "$(id -u)" -eq 0 ] || { echo "unwind_completeness.sh: run as root" >&2; exit 1; }
for b in "$JPROFD" "$JPROFCTL"; do
	[ -x "$b" ] || { echo "unwind_completeness.sh: $b not built" >&2; exit 1; }
done

need=()
command -v perf >/dev/null || need+=(linux-perf)
command -v nginx >/dev/null || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
command -v redis-server >/dev/null || need+=(redis-server)
command -v xz >/dev/null || need+=(xz-utils)
command -v bpftool >/dev/null || need+=(bpftool)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
systemctl stop nginx redis-server 2>/dev/null || true

work=$(mktemp -d /var/tmp/jprof-unwind-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

sysctl -qw kernel.bpf_stats_enabled=1
"$JPROFD" --socket "$work/cfi.sock" --rate 0 --unwind cfi >"$work/cfi.log" 2>&1 &
pids+=($!); cfi_pid=$!
"$JPROFD" --socket "$work/fp.sock" --rate 0 --unwind frame-pointers >"$work/fp.log" 2>&1 &
pids+=($!); fp_pid=$!
for s in cfi fp; do
	for _ in $(seq 100); do [ -S "$work/$s.sock" ] && break; sleep 0.1; done
done

# exec: a backgrounded call's $! is then the workload itself, not a subshell.
as_nobody() { exec setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

start_workload() {  # sets wpid: the pid to record
	wpid=
	case $1 in
	nginx)
		mkdir -p "$work/nginx/logs" "$work/www"
		head -c 4096 /dev/urandom >"$work/www/index.html"
		cat >"$work/nginx/nginx.conf" <<-CONF
		worker_processes 1;
		daemon off;
		error_log $work/nginx/logs/error.log;
		pid $work/nginx/nginx.pid;
		events { worker_connections 256; }
		http { access_log off;
		       server { listen 127.0.0.1:18080; root $work/www; } }
		CONF
		nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" >/dev/null 2>&1 &
		pids+=($!)
		sleep 1
		wrk -t1 -c32 -d$((SECS + 5))s http://127.0.0.1:18080/ >/dev/null 2>&1 &
		pids+=($!)
		wpid=$(pgrep -n -f "nginx: worker process") ;;
	redis)
		redis-server --port 16379 --save '' --appendonly no >/dev/null 2>&1 &
		pids+=($!)
		wpid=$!
		sleep 1
		redis-benchmark -p 16379 -q -n 100000000 -c 32 -P 8 -t set,get >/dev/null 2>&1 &
		pids+=($!) ;;
	python3)
		as_nobody /usr/bin/python3 -c '
import json
def leaf(n):
    return json.dumps({"k": list(range(n))})
def mid(n):
    return sum(len(leaf(i % 50)) for i in range(n))
while True: mid(1000)' >/dev/null 2>&1 &
		pids+=($!); wpid=$! ;;
	xz)
		head -c 300000000 /dev/urandom >"$work/rand.bin"
		chmod 644 "$work/rand.bin"
		as_nobody xz -9 -T1 -c "$work/rand.bin" >/dev/null 2>&1 &
		pids+=($!); wpid=$! ;;
	cc1)
		python3 - "$work/big.c" <<-'PY'
		import sys
		with open(sys.argv[1], "w") as f:
		    for i in range(6000):
		        f.write("int f%d(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) "
		                "s += a[i] * %d ^ (s >> 3); return s + f%d(a, n - 1); }\n"
		                % (i, i, max(i - 1, 0)))
		PY
		chmod 644 "$work/big.c"
		(cd "$work" && as_nobody gcc -O2 -c big.c -o /dev/null) >/dev/null 2>&1 &
		pids+=($!)
		# gcc's own cc1 (not another build's on this machine)
		for _ in $(seq 50); do wpid=$(pgrep -P "$!" -x cc1 || true); [ -n "$wpid" ] && break; sleep 0.1; done
		[ -n "$wpid" ] && pids+=("$wpid") ;;
	esac
}

# Reads collapsed stacks (jprofd) on stdin: root %, median user depth.
summarize_collapsed() {
	python3 -c '
import sys
roots = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone3")
tot = root = 0; depths = []; leaves = {}
for line in sys.stdin:
    s, _, c = line.rstrip("\n").rpartition(" ")
    if not c.isdigit(): continue
    c = int(c)
    user = [f for f in s.split(";") if not f.endswith("_[k]")]
    tot += c; depths += [len(user)] * c
    if any(f in roots for f in user[:3]): root += c
    leaf = s.split(";")[-1]
    leaf = leaf[:-4] if leaf.endswith("_[k]") else leaf
    leaves[leaf] = leaves.get(leaf, 0) + c
depths.sort()
top = ",".join("%s:%d%%" % (k[:24], 100 * v // max(tot, 1)) for k, v in
               sorted(leaves.items(), key=lambda kv: -kv[1])[:3])
print("%5.1f%% %3d %6d" % (100.0 * root / max(tot, 1), depths[len(depths) // 2] if depths else 0, tot))
print(top, file=sys.stderr)'
}

# perf script output on stdin: the same numbers for perf's samples.
summarize_perf() {
	python3 -c '
import sys
roots = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone3")
tot = root = 0; depths = []; cur = []; leaves = {}
def flush():
    global tot, root
    if not cur: return
    leaves[cur[0][0]] = leaves.get(cur[0][0], 0) + 1
    user = [f for f in cur if "kernel.kallsyms" not in f[1]]
    names = [f[0] for f in user][::-1]   # outermost first
    tot += 1; depths.append(len(user))
    if any(n in roots for n in names[:3]): root += 1
for line in sys.stdin:
    if not line.strip():
        flush(); cur = []; continue
    if line[0] in " \t":
        parts = line.split()
        if len(parts) >= 2:
            sym = parts[1].split("+")[0]
            cur.append((sym, parts[-1]))
flush()
depths.sort()
top = ",".join("%s:%d%%" % (k[:24], 100 * v // max(tot, 1)) for k, v in
               sorted(leaves.items(), key=lambda kv: -kv[1])[:3])
print("%5.1f%% %3d %6d" % (100.0 * root / max(tot, 1), depths[len(depths) // 2] if depths else 0, tot))
print(top, file=sys.stderr)'
}

printf '%-8s | %-22s | %-22s | %-22s\n' workload "jprofd cfi root% depth n" "jprofd fp root% depth n" "perf dwarf root% depth n"
for w in $WORKLOADS; do
	start_workload "$w"
	pid=$wpid
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "$w: did not start" >&2
		continue
	fi
	sleep 1
	"$JPROFCTL" --socket "$work/cfi.sock" record --pid "$pid" -d "${SECS}s" -i "$((1000000 / RATE))us" \
		-o "$work/$w.cfi.collapsed" --no-progress >/dev/null 2>&1 &
	a=$!
	"$JPROFCTL" --socket "$work/fp.sock" record --pid "$pid" -d "${SECS}s" -i "$((1000000 / RATE))us" \
		-o "$work/$w.fp.collapsed" --no-progress >/dev/null 2>&1 &
	b=$!
	perf record -q -F "$RATE" --call-graph dwarf -p "$pid" -o "$work/$w.perf.data" \
		-- sleep "$SECS" >/dev/null 2>&1 || true
	wait $a $b || true
	c=$(summarize_collapsed <"$work/$w.cfi.collapsed" 2>"$work/top.cfi")
	f=$(summarize_collapsed <"$work/$w.fp.collapsed" 2>/dev/null)
	p=$(perf script -i "$work/$w.perf.data" -F ip,sym,dso 2>/dev/null | summarize_perf 2>"$work/top.perf")
	printf '%-8s | %-22s | %-22s | %-22s\n' "$w" "$c" "$f" "$p"
	printf '%-8s   top self, jprofd cfi: %s\n' "" "$(cat "$work/top.cfi")"
	printf '%-8s   top self, perf dwarf: %s\n' "" "$(cat "$work/top.perf")"
	for q in "${pids[@]:2}"; do kill "$q" 2>/dev/null || true; done
	pkill -f "nginx -p $work" 2>/dev/null || true
	pids=("${pids[@]:0:2}")
	sleep 1
done

bpf_cost() {  # daemon pid -> "ns per run, runs" of its perf_event programs
	local ids
	# The daemon's programs: the prog_id of each of its bpf fds.
	ids=$(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
ids = set(int(x) for x in sys.argv[1].split()); ns = cnt = 0
for p in json.load(sys.stdin):
    if p.get("type") != "perf_event" or p.get("id") not in ids: continue
    ns += p.get("run_time_ns", 0); cnt += p.get("run_cnt", 0)
print("%.1f us per sample over %d samples" % (ns / 1000.0 / max(cnt, 1), cnt))' "$ids"
}
echo
echo "BPF time, cfi daemon:            $(bpf_cost "$cfi_pid")"
echo "BPF time, frame-pointer daemon:  $(bpf_cost "$fp_pid")"
"$JPROFCTL" --socket "$work/cfi.sock" status | grep unwinding || true
for s in cfi fp; do
	p=$([ $s = cfi ] && echo "$cfi_pid" || echo "$fp_pid")
	echo "$s daemon: RSS $(awk '/VmRSS/ {print $2, $3}' /proc/$p/status), CPU $(awk '{print ($14 + $15) / 100 " s"}' /proc/$p/stat)"
done
