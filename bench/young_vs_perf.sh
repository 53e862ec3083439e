#!/bin/bash
# Young processes: a `make -j2` of a C project of many small files (as
# nobody), in the host view of jprofd and in `perf record -a --call-graph
# dwarf`, side by side in one run. Most of a build's processes (cc1, as, the
# gcc driver, ld, sh) live well under a second and are sampled before their
# unwind tables are in BPF; jprofd copies their stacks and walks them once
# the tables exist (docs/architecture.md, "Young processes"). JPROFD_OLD (a
# build without that, optional) runs beside it for the before/after.
#
# Prints, per profiler, the share of the build's samples (comm cc1, as, gcc,
# cc, collect2, ld, make, sh) whose user stack reaches a root frame (_start,
# __libc_start_*, clone*, start_thread, _dl_start) and the count; then each
# daemon's BPF time per sample (bpf_stats over the run) and status counters.
#
#   sudo bench/young_vs_perf.sh            (BENCH_FILES=40 BENCH_RATE_HZ=99
#                                           BENCH_RUNS=3 JPROFD_OLD=...)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JPROFD=${JPROFD:-$src/build/jprofd}
JPROFD_OLD=${JPROFD_OLD:-}
JPROFCTL=${JPROFCTL:-$src/build/jprofctl}
FILES=${BENCH_FILES:-40}
RATE=${BENCH_RATE_HZ:-99}
RUNS=${BENCH_RUNS:-3}
UNWIND_MEM=${BENCH_UNWIND_MEMORY:-64M}

[ "$(id -u)" -eq 0 ] || { echo "young_vs_perf.sh: run as root" >&2; exit 1; }
command -v perf >/dev/null || { echo "young_vs_perf.sh: needs perf (linux-perf)" >&2; exit 1; }

work=$(mktemp -d /var/tmp/jprof-young-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

sysctl -qw kernel.bpf_stats_enabled=1
daemons=(new)
[ -n "$JPROFD_OLD" ] && daemons+=(old)
for d in "${daemons[@]}"; do
	bin=$JPROFD
	[ "$d" = old ] && bin=$JPROFD_OLD
	"$bin" --socket "$work/$d.sock" --rate "$RATE" --unwind-max-memory "$UNWIND_MEM" \
		>"$work/$d.log" 2>&1 &
	pids+=($!)
	eval "${d}_pid=$!"
	for _ in $(seq 100); do [ -S "$work/$d.sock" ] && break; sleep 0.1; done
done

# The project: FILES small translation units and a Makefile.
proj=$work/proj
mkdir "$proj"
python3 - "$proj" "$FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "u%d.c" % i), "w") as f:
        f.write("""#include <stdio.h>
#include <string.h>
struct s%(i)d { int a[16]; double d; const char *n; };
static int f%(i)d_a(struct s%(i)d *s, int k)
{ int r = 0; for (int i = 0; i < 16; i++) r += s->a[i] * (k ^ i) + (int)(s->d * i); return r; }
static double f%(i)d_b(const double *v, int n)
{ double acc = 0; for (int i = 0; i < n; i++) acc += v[i] * v[(i * 7) %% n] / (1.0 + i); return acc; }
int unit%(i)d(int argc, char **argv)
{
	struct s%(i)d s = { .d = argc, .n = argv[0] }; double v[32];
	for (int i = 0; i < 32; i++) v[i] = i * 0.5 + strlen(s.n);
	for (int i = 0; i < 16; i++) s.a[i] = i * argc;
	switch (argc %% 5) {
	case 0: return f%(i)d_a(&s, 3);
	case 1: return (int)f%(i)d_b(v, 32);
	case 2: printf("%%s %%d\\n", s.n, f%(i)d_a(&s, 5)); return 2;
	case 3: return (int)f%(i)d_b(v, 16) + f%(i)d_a(&s, 1);
	default: return 0;
	}
}
""" % {"i": i})
with open(os.path.join(d, "main.c"), "w") as f:
    f.write("int unit0(int, char **);\nint main(int c, char **v) { return unit0(c, v); }\n")
objs = " ".join(["u%d.o" % i for i in range(n)] + ["main.o"])
with open(os.path.join(d, "Makefile"), "w") as f:
    f.write("CFLAGS = -O2 -g\nOBJS = %s\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n"
            "%%.o: %%.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\nclean:\n\trm -f prog *.o\n" % objs)
PY
chown -R nobody:nogroup "$proj"
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

# Collapsed stacks (group comm: the first frame) on stdin: root %, samples.
summarize_collapsed() {
	python3 -c '
import sys
comms = ("cc1", "as", "gcc", "cc", "collect2", "ld", "make", "sh")
roots = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
         "clone3", "__clone3", "_dl_start")
tot = root = 0
for line in sys.stdin:
    s, _, c = line.rstrip("\n").rpartition(" ")
    if not c.isdigit(): continue
    f = s.split(";")
    if f[0] not in comms: continue
    tot += int(c)
    if any(x in roots for x in f[1:] if not x.endswith("_[k]")): root += int(c)
print("%5.1f%% of %5d" % (100.0 * root / max(tot, 1), tot))'
}

# perf script (comm, then frames) on stdin: the same for perf -a.
summarize_perf() {
	python3 -c '
import sys
comms = ("cc1", "as", "gcc", "cc", "collect2", "ld", "make", "sh")
roots = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
         "clone3", "__clone3", "_dl_start")
tot = root = 0; comm = None; ok = False
def flush():
    global tot, root
    if comm in comms:
        tot += 1; root += ok
for line in sys.stdin:
    if not line.strip():
        flush(); comm = None; ok = False; continue
    if line[0] not in " \t":
        comm = line.split()[0]; continue
    parts = line.split()
    if len(parts) >= 2 and "kernel.kallsyms" not in parts[-1] and parts[1].split("+")[0] in roots:
        ok = True
flush()
print("%5.1f%% of %5d" % (100.0 * root / max(tot, 1), tot))'
}

status() {  # socket -> status JSON on stdout
	python3 - "$1" <<-'PY'
	import json, socket, sys
	c = socket.socket(socket.AF_UNIX)
	c.connect(sys.argv[1])
	c.sendall(b'{"v":1,"id":1,"cmd":"status"}\n')
	buf = b""
	while not buf.endswith(b"\n"):
	    buf += c.recv(65536)
	print(json.dumps(json.loads(buf)["status"]))
	PY
}

wait_resolved() {  # socket: until the copies made so far are resolved (30 s at most)
	local want
	want=$(status "$1" | python3 -c '
import json, sys
y = json.load(sys.stdin)["sampler"]["unwind"].get("young", {})
print(y.get("copied", 0) - y.get("copy_failed", 0) - y.get("dropped_memory", 0))')
	for _ in $(seq 300); do
		status "$1" | python3 -c '
import json, sys
y = json.load(sys.stdin)["sampler"]["unwind"].get("young", {})
sys.exit(0 if y.get("unwound", 0) + y.get("dropped_exited", 0) + y.get("dropped_expired", 0) >= int(sys.argv[1]) else 1)' "$want" && return 0
		sleep 0.1
	done
}

bpf_cost() {  # daemon pid -> BPF ns per run of its perf_event programs (cumulative)
	local ids
	ids=$(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
ids = set(int(x) for x in sys.argv[1].split()); ns = cnt = 0
for p in json.load(sys.stdin):
    if p.get("type") != "perf_event" or p.get("id") not in ids: continue
    ns += p.get("run_time_ns", 0); cnt += p.get("run_cnt", 0)
print("%.2f us per sample over %d samples" % (ns / 1000.0 / max(cnt, 1), cnt))' "$ids"
}

printf '%-4s | %-8s | %-18s | %-18s | %-18s\n' run build "jprofd root% of n" "old jprofd" "perf dwarf"
for run in $(seq "$RUNS"); do
	as_nobody make -s -C "$proj" clean >/dev/null
	t0=$(date +%s.%N)
	perf record -q -a -F "$RATE" --call-graph dwarf -o "$work/perf.data" \
		-- setpriv --reuid=nobody --regid=nogroup --clear-groups make -s -j2 -C "$proj" \
		>/dev/null 2>&1
	t1=$(date +%s.%N)
	# Every copy made by the build's end walked (or given up), then two
	# drains, before the build's span is taken.
	for d in "${daemons[@]}"; do wait_resolved "$work/$d.sock"; done
	sleep 2.5
	ago=$(python3 -c "import time; print(int(time.time() - $t0) + 2)")
	res=()
	for d in new old; do
		if [ ! -S "$work/$d.sock" ]; then res+=("-"); continue; fi
		"$JPROFCTL" --socket "$work/$d.sock" profile --from "${ago}s" -f collapsed \
			-o "$work/$d.collapsed" >/dev/null 2>&1 || true
		res+=("$(summarize_collapsed <"$work/$d.collapsed")")
	done
	p=$(perf script -i "$work/perf.data" -F comm,ip,sym,dso 2>/dev/null | summarize_perf)
	printf '%-4s | %6.1f s | %-18s | %-18s | %-18s\n' "$run" \
		"$(python3 -c "print($t1 - $t0)")" "${res[0]}" "${res[1]}" "$p"
done
echo
for d in "${daemons[@]}"; do
	pid_var=${d}_pid
	echo "$d daemon: BPF $(bpf_cost "${!pid_var}")"
	status "$work/$d.sock" | python3 -c '
import json, sys
s = json.load(sys.stdin)["sampler"]
print("  bpf_sample_us:", s.get("bpf_sample_us"))
print("  unwind.young:", s["unwind"].get("young"))
print("  unwind: rows %d of %d, rows_full %d, builds %d" % (s["unwind"]["rows"],
      s["unwind"]["rows_capacity"], s["unwind"]["rows_full"], s["unwind"]["builds"]))' || true
done
