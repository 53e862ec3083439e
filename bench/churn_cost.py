#!/usr/bin/env python3
"""jprofd's own cost and memory on a host that starts processes all the
time, for ten minutes, beside perf's on the same load (issue 27, item 7).

The load, the same in every phase (as bench/churn_vs_perf.sh): a loop that
starts about BENCH_SPAWN_RATE processes a second (sh, sed, gcc -c with cc1
and as, true) and (nproc + 1) / 2 busy programs (xz -9 of random data,
python3 arithmetic).

Phase 1, jprofd: the daemon (host view at BENCH_HZ, 19 by default) runs for
BENCH_SECONDS (600) after BENCH_WARMUP (15) unmeasured seconds. Every
BENCH_INTERVAL (60) s it prints the daemon's RSS (and its heap and anonymous
parts, from smaps), its host view's bytes, and its CPU since the start of
the measured part: user and system time (/proc/PID/stat), per thread (the
main loop, the unwinder, the rest; schedstat) and the time its BPF programs
ran (kernel.bpf_stats_enabled; the kernel charges that to the interrupted
tasks, so it is added here). JPROFD_BASE: a second daemon (say, the build
before a change) run at the same time on the same load, each on its own
socket; both sample the whole host, each other included.

Phase 2, perf: `perf record -a -F 99 -g` (and with BENCH_PERF=fp,dwarf also
`--call-graph dwarf`) for BENCH_PERF_SECONDS (120) on the same load: perf's
own CPU (its threads' schedstat), and afterwards the CPU of `perf script
--no-inline` over what it recorded, per second recorded (the unwinding and
naming that jprofd does as it goes). perf's in-kernel work (the frame-pointer
walk or stack copy in the interrupt) is charged to the interrupted tasks and
not counted; jprofd's BPF time is. So the ratios printed at the end are in
perf's favour.

Prints: jprofd CPU + BPF in % of a core, over the whole measured part and
over its second half (steady state), RSS at start, 5 min and 10 min, and
the ratios to perf's own CPU and to perf's own CPU plus perf script's. Not a
pass/fail test. Run as root.

  JPROFD / JPROFCTL   default build/jprofd, build/jprofctl
  JPROFD_BASE         a second daemon, measured alongside (optional)
  JPROFD_ARGS         more arguments for the daemons
  BENCH_SECONDS=600 BENCH_WARMUP=15 BENCH_INTERVAL=60 BENCH_HZ=19
  BENCH_SPAWN_RATE=25 BENCH_PERF_SECONDS=120 BENCH_PERF=fp (fp,dwarf; "" = none)
"""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import bpf_ns, forks, log, wait_for  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JPROFD = os.environ.get("JPROFD", os.path.join(SRC, "build", "jprofd"))
JPROFCTL = os.environ.get("JPROFCTL", os.path.join(SRC, "build", "jprofctl"))
BASE = os.environ.get("JPROFD_BASE", "")
SECONDS = int(os.environ.get("BENCH_SECONDS", "600"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "15"))
INTERVAL = int(os.environ.get("BENCH_INTERVAL", "60"))
HZ = int(os.environ.get("BENCH_HZ", "19"))
SPAWN = float(os.environ.get("BENCH_SPAWN_RATE", "25"))
PERF_SECONDS = int(os.environ.get("BENCH_PERF_SECONDS", "120"))
PERF = [m for m in os.environ.get("BENCH_PERF", "fp").split(",") if m]
TICK = os.sysconf("SC_CLK_TCK")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def thread_cpu(pid):
    """On-CPU ns of pid's live threads by kind: main, unwind (the table
    worker), other (schedstat)."""
    out = {"main": 0, "unwind": 0, "other": 0}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        st = read("/proc/%d/task/%s/schedstat" % (pid, tid)).split()
        if not st:
            continue
        comm = read("/proc/%d/task/%s/comm" % (pid, tid)).strip()
        kind = "main" if int(tid) == pid else "unwind" if "unw" in comm else "other"
        out[kind] += int(st[0])
    return out


def user_sys(pid):
    """utime, stime of the whole process in s (/proc/PID/stat)."""
    f = read("/proc/%d/stat" % pid).rsplit(")", 1)[-1].split()
    return (int(f[11]) / TICK, int(f[12]) / TICK) if len(f) > 12 else (0.0, 0.0)


def memory(pid):
    """RSS, and the heap's and anonymous mappings' share of it, in KiB."""
    rss = heap = anon = 0
    name = None
    for line in read("/proc/%d/smaps" % pid).splitlines():
        f = line.split()
        if not f:
            continue
        if not f[0].endswith(":"):
            name = f[5] if len(f) > 5 else ""
        elif f[0] == "Rss:":
            kb = int(f[1])
            rss += kb
            if name == "[heap]":
                heap += kb
            elif name == "":
                anon += kb
    return rss, heap, anon


class Daemon:
    def __init__(self, path, name, work):
        self.name = name
        self.sock = os.path.join(work, name + ".sock")
        self.err = open(os.path.join(work, name + ".err"), "ab")
        args = [path, "--socket", self.sock, "--rate", str(HZ)] + \
            shlex.split(os.environ.get("JPROFD_ARGS", ""))
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err)
        self.pid = self.proc.pid
        self.rows = []

    def ready(self):
        return subprocess.run([JPROFCTL, "--socket", self.sock, "status"],
                              capture_output=True).returncode == 0

    def status(self):
        r = subprocess.run([JPROFCTL, "--socket", self.sock, "status", "--json"],
                           capture_output=True, text=True)
        try:
            return json.loads(r.stdout)["status"]
        except (ValueError, KeyError):
            return {}

    def probe(self, t):
        st = self.status()
        row = {"t": t, "cpu": thread_cpu(self.pid), "us": user_sys(self.pid),
               "bpf": bpf_ns(self.pid), "mem": memory(self.pid),
               "hv": st.get("hostview", {}).get("bytes", 0),
               "unwind": st.get("sampler", {}).get("unwind", {}),
               "bpf_us": st.get("sampler", {}).get("bpf_sample_us", {}),
               "samples": st.get("sampler", {}).get("samples", 0)}
        self.rows.append(row)
        return row

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def pct(ns, secs):
    return 100 * ns / 1e9 / secs if secs > 0 else 0.0


def cost(a, b):
    """CPU and BPF between two probes, in % of a core: (total, parts)."""
    secs = b["t"] - a["t"]
    parts = {k: pct(b["cpu"][k] - a["cpu"][k], secs) for k in b["cpu"]}
    parts["user"] = 100 * (b["us"][0] - a["us"][0]) / secs
    parts["sys"] = 100 * (b["us"][1] - a["us"][1]) / secs
    parts["bpf"] = pct(b["bpf"] - a["bpf"], secs)
    return sum(parts[k] for k in ("main", "unwind", "other")) + parts["bpf"], parts


def print_row(d, row):
    first = d.rows[0]
    c, p = cost(first, row) if row is not first else (0.0, None)
    log("  %-5s %4.0f s  RSS %7d KiB (heap %6d, anon %6d)  host view %5.1f MB  "
        "cpu+bpf %5.2f%%%s" % (d.name, row["t"], row["mem"][0], row["mem"][1], row["mem"][2],
                               row["hv"] / 1e6, c,
                               "  (main %.2f, unwind %.2f, other %.2f, user %.2f, sys %.2f, "
                               "bpf %.2f)" % (p["main"], p["unwind"], p["other"], p["user"],
                                              p["sys"], p["bpf"]) if p else ""))


def nearest(rows, t):
    return min(rows, key=lambda r: abs(r["t"] - t))


def jprofd_phase(work):
    daemons = [Daemon(JPROFD, "new", work)]
    if BASE:
        daemons.append(Daemon(BASE, "base", work))
    try:
        for d in daemons:
            wait_for(d.ready, 60, "answer from " + d.name)
        time.sleep(WARMUP)
        t0 = time.monotonic()
        f0 = forks()
        for d in daemons:
            print_row(d, d.probe(0.0))
        while True:
            el = time.monotonic() - t0
            if el >= SECONDS:
                break
            time.sleep(min(INTERVAL - el % INTERVAL, SECONDS - el))
            el = time.monotonic() - t0
            for d in daemons:
                print_row(d, d.probe(el))
        spawned = (forks() - f0) / (time.monotonic() - t0)
    finally:
        for d in daemons:
            d.stop()
    log("  %.1f new processes a second on the host" % spawned)
    out = {}
    for d in daemons:
        first, last = d.rows[0], d.rows[-1]
        half = nearest(d.rows, last["t"] / 2)
        whole, parts = cost(first, last)
        steady, _ = cost(half, last) if half is not last else (whole, None)
        u = last["unwind"]
        log("  %s: cpu+bpf %.2f%% of a core over %.0f s, %.2f%% over the second half; "
            "bpf %.2f%%; RSS %d KiB at start, %d at %.0f s, %d at %.0f s"
            % (d.name, whole, last["t"], steady, parts["bpf"], first["mem"][0],
               nearest(d.rows, 300)["mem"][0], nearest(d.rows, 300)["t"], last["mem"][0],
               last["t"]))
        b = last["bpf_us"]
        log("  %s: %d samples, %.0f a second; BPF per sample p50 %s us, p90 %s, p99 %s"
            % (d.name, last["samples"] - first["samples"],
               (last["samples"] - first["samples"]) / last["t"], b.get("p50"), b.get("p90"),
               b.get("p99")))
        log("  %s unwind: builds %s, process_reads %s, requests %s, rows %s of %s"
            % (d.name, u.get("builds"), u.get("process_reads"), u.get("requests"), u.get("rows"),
               u.get("rows_capacity")))
        out[d.name] = (whole, steady)
    return out


def perf_phase(work, mode):
    data = os.path.join(work, "perf.data")
    cg = ["-g"] if mode == "fp" else ["--call-graph", "dwarf"]
    err = open(os.path.join(work, "perf.err"), "ab")
    proc = subprocess.Popen(["perf", "record", "-a", "-F", "99"] + cg +
                            ["-N", "-o", data, "-q", "--", "sleep", "100000"],
                            stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    try:
        wait_for(lambda: os.path.exists(data) and os.path.getsize(data) > 0, 60, "perf.data")
        time.sleep(WARMUP)
        c0 = sum(thread_cpu(proc.pid).values())
        t0 = time.monotonic()
        time.sleep(PERF_SECONDS)
        own = pct(sum(thread_cpu(proc.pid).values()) - c0, time.monotonic() - t0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()
    recorded = PERF_SECONDS + WARMUP
    p = subprocess.Popen(["perf", "script", "--no-inline", "-F", "comm,tid,time,ip,sym,dso",
                          "-i", data], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, _, ru = os.wait4(p.pid, 0)
    post = 100 * (ru.ru_utime + ru.ru_stime) / recorded
    size = os.path.getsize(data)
    os.unlink(data)
    log("  perf %-5s own %.2f%% of a core, perf script %.2f%% (per second recorded), "
        "perf.data %.0f MB" % (mode, own, post, size / 1e6))
    return own, post


def start_load(work):
    with open(os.path.join(work, "small.c"), "w") as f:
        f.write("int f(int x) { return x * 3 + 1; }\n")
    with open(os.path.join(work, "random"), "wb") as f:
        f.write(os.urandom(64 << 20))
    w = shlex.quote(work)
    churn = ("while :; do sh -c 'echo x | sed s/x/y/ >/dev/null'; "
             "gcc -c -o %s/small.o %s/small.c 2>/dev/null; /bin/true; sleep %.3f; done"
             % (w, w, 4.0 / SPAWN))
    procs = [subprocess.Popen(["bash", "-c", churn], start_new_session=True)]
    for i in range(((os.cpu_count() or 1) + 1) // 2):
        cmd = ("while :; do xz -9 -T1 -c %s/random >/dev/null; done" % w if i % 2 == 0 else
               "exec python3 -c 'while True: sum(i * i for i in range(100000))'")
        procs.append(subprocess.Popen(["bash", "-c", cmd], start_new_session=True))
    return procs


def main():
    if os.geteuid() != 0:
        sys.exit("churn_cost.py: must be run as root")
    for tool in ("perf", "bpftool", "gcc", "xz", "sed", "python3"):
        if not shutil.which(tool):
            sys.exit("churn_cost.py: needs %s" % tool)
    for path in [JPROFD, JPROFCTL] + ([BASE] if BASE else []):
        if not os.access(path, os.X_OK):
            sys.exit("churn_cost.py: %s not found; build first" % path)
    # Stopped early (a background run ignores SIGINT): the daemons, the
    # load and the sysctl are still put back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("churn_cost.py: terminated"))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = tempfile.mkdtemp(prefix="jprof-cost-")
    old_stats = read("/proc/sys/kernel/bpf_stats_enabled").strip() or "0"
    load = []
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
        load = start_load(work)
        log("%s, %d CPUs, load %s; jprofd at %d Hz for %d s, perf at 99 Hz for %d s"
            % (os.uname().release, os.cpu_count(), read("/proc/loadavg").split(" ", 3)[:3],
               HZ, SECONDS, PERF_SECONDS))
        j = jprofd_phase(work)
        perf = {m: perf_phase(work, m) for m in PERF}
        for name, (whole, steady) in j.items():
            for m, (own, post) in perf.items():
                log("%s %d Hz / perf -F 99 %s: %s of perf's own CPU, %s of own + perf script "
                    "(second half: %s, %s)"
                    % (name, HZ, m, "%.1fx" % (whole / own) if own > 0 else "n/a",
                       "%.2fx" % (whole / (own + post)) if own + post > 0 else "n/a",
                       "%.1fx" % (steady / own) if own > 0 else "n/a",
                       "%.2fx" % (steady / (own + post)) if own + post > 0 else "n/a"))
        log("load at the end %s" % read("/proc/loadavg").split(" ", 3)[:3])
    finally:
        for p in load:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            p.wait()
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(old_stats)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
