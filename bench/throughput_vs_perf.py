#!/usr/bin/env python3
"""What profiling costs the profiled work: jprofd beside perf, measured on the
work's own throughput (issue 27, item 7).

bench/churn_vs_perf.sh counts the profilers' own CPU time; perf's sampling
work (the stack walk in the interrupt, the copy of the stack for dwarf) is
charged by the kernel to the interrupted tasks, so it does not appear there.
Here a fixed workload runs with no profiler, with jprofd (host view, 19 Hz
by default), with `perf record -a -F 99 -g` and with `perf record -a -F 99
--call-graph dwarf`, and what each costs is read off the workload itself:

  ops/s           iterations per second of wall time (noisy on a shared host)
  cpu/op          the workload's CPU time per iteration (its processes' user
                  + system time, wait4's rusage): what the kernel charged to
                  it, sampling interrupts and BPF programs included
  own             the profiler's own CPU time (its threads' schedstat) over
                  the measured part, in % of a core
  post            perf only: the CPU time of `perf script --no-inline` (its
                  children included) over the phase's
                  perf.data (unwinding and naming every sample, which jprofd
                  does as it goes), per second recorded, in % of a core
  cost/op         cpu/op above the no-profiler median, plus the profiler's own
                  CPU per iteration: the CPU that profiling took per unit of
                  work, the number the ratios compare (with post: perf's
                  `perf script` time added, per iteration)

One iteration: sh -c 'echo | sed', gcc -c of a small file (gcc, cc1, as),
/bin/true and xz -1 of 512 KiB of random data: six new processes and some
CPU. BENCH_LOOPS loops (default: one per CPU) run BENCH_ITERS iterations in
all, after BENCH_WARMUP of them that are not measured (the profiler has
started, built what it builds for these programs). The phases are
interleaved (none, jprofd, perf -g, perf dwarf, then again) BENCH_REPS
times, and medians are reported, so that a change in the host's other load
hits every phase alike. Not a pass/fail test. Run as root.

  JPROFD / JPROFCTL   default build/jprofd, build/jprofctl
  JPROFD_ARGS         more daemon arguments (the rate is the mode's: 19 Hz, the
                      default host view, unless jprofd@HZ)
  BENCH_ITERS=200  BENCH_WARMUP=20  BENCH_REPS=3  BENCH_LOOPS=nproc
  BENCH_MODES=none,jprofd,perf-fp,perf-dwarf
                      a mode may name its rate: jprofd@99, perf-fp@999 (a rate
                      well above the default lifts the cost charged to the
                      work above the host's noise; `per sample` then estimates
                      it: the extra cpu/op over the samples that land in one
                      iteration, its CPU time times the rate)
"""
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import bpf_ns, forks, log, wait_for  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JPROFD = os.environ.get("JPROFD", os.path.join(SRC, "build", "jprofd"))
JPROFCTL = os.environ.get("JPROFCTL", os.path.join(SRC, "build", "jprofctl"))
ITERS = int(os.environ.get("BENCH_ITERS", "200"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "20"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
LOOPS = int(os.environ.get("BENCH_LOOPS", str(os.cpu_count() or 1)))
MODES = os.environ.get("BENCH_MODES", "none,jprofd,perf-fp,perf-dwarf").split(",")
START_WAIT_S = 60

ITERATION = ("sh -c 'echo x | sed s/x/y/ >/dev/null'; gcc -c -o {w}/o$L.o {w}/small.c; "
             "/bin/true; xz -1 -T1 -c {w}/random >/dev/null")


def threads_cpu_ns(pid):
    """On-CPU time of pid's live threads (schedstat: user + system, ns)."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def workload(work, iters):
    """Runs iters iterations over LOOPS loops; returns (wall s, CPU s)."""
    per = [iters // LOOPS + (1 if k < iters % LOOPS else 0) for k in range(LOOPS)]
    t0 = time.monotonic()
    procs = []
    for k, n in enumerate(per):
        body = ITERATION.format(w=shlex.quote(work)).replace("$L", str(k))
        script = "for i in $(seq 1 %d); do %s; done" % (n, body)
        procs.append(subprocess.Popen(["bash", "-c", script], stdin=subprocess.DEVNULL))
    cpu = 0.0
    for p in procs:
        # wait4: the loop's rusage with every process it waited for.
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError("workload loop exited %d" % p.returncode)
        cpu += ru.ru_utime + ru.ru_stime
    return time.monotonic() - t0, cpu


def mode_rate(mode):
    """("jprofd", 19) from "jprofd", ("perf-fp", 999) from "perf-fp@999"."""
    name, _, hz = mode.partition("@")
    if hz:
        return name, int(hz)
    return name, {"none": 0, "jprofd": 19}.get(name, 99)


class Profiler:
    def __init__(self, mode, work):
        self.mode, self.hz = mode_rate(mode)
        self.work, self.proc, self.pid, self.status = work, None, None, None
        self.post_pct = 0.0

    def start(self):
        if self.mode == "none":
            return
        if self.mode == "jprofd":
            sock = os.path.join(self.work, "jprofd.sock")
            self.sock = sock
            args = [JPROFD, "--socket", sock, "--rate", str(self.hz)] + \
                shlex.split(os.environ.get("JPROFD_ARGS", ""))
            self.err = open(os.path.join(self.work, "jprofd.err"), "ab")
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.err,
                                         stderr=self.err)
            wait_for(lambda: subprocess.run([JPROFCTL, "--socket", sock, "status"],
                                            capture_output=True).returncode == 0,
                     START_WAIT_S, "answer from jprofd")
        else:
            cg = ["-g"] if self.mode == "perf-fp" else ["--call-graph", "dwarf"]
            # -N: no copies of every binary hit into ~/.debug (perf script
            # reads them where they are).
            data = os.path.join(self.work, "perf.data")
            self.err = open(os.path.join(self.work, "perf.err"), "ab")
            self.proc = subprocess.Popen(["perf", "record", "-a", "-F", str(self.hz)] + cg +
                                         ["-N", "-o", data, "-q", "--", "sleep", "100000"],
                                         stdin=subprocess.DEVNULL, stdout=self.err,
                                         stderr=self.err)
            wait_for(lambda: os.path.exists(data) and os.path.getsize(data) > 0, START_WAIT_S,
                     "perf.data")
        self.pid = self.proc.pid
        self.t0 = time.monotonic()

    def stop(self):
        if not self.proc:
            return 0
        if self.mode == "jprofd":
            # What the daemon did for its CPU time: its unwind counters.
            r = subprocess.run([JPROFCTL, "--socket", self.sock, "status", "--json"],
                               capture_output=True, text=True)
            try:
                self.status = json.loads(r.stdout)["status"]["sampler"].get("unwind", {})
            except (ValueError, KeyError):
                self.status = None
        self.proc.send_signal(signal.SIGINT if self.mode != "jprofd" else signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()
        recorded = time.monotonic() - self.t0
        size = 0
        data = os.path.join(self.work, "perf.data")
        if os.path.exists(data):
            size = os.path.getsize(data)
            # Names, no inlined frames: what jprofd's host view gives. (With
            # inlines, perf 6.1 asks an addr2line child per DSO, for minutes.)
            p = subprocess.Popen(["perf", "script", "--no-inline", "-F", "comm,tid,time,ip,sym,dso",
                                  "-i", data], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, _, ru = os.wait4(p.pid, 0)
            self.post_pct = 100 * (ru.ru_utime + ru.ru_stime) / recorded
            os.unlink(data)
        return size


def phase(mode, work):
    prof = Profiler(mode, work)
    prof.start()
    try:
        workload(work, WARMUP)
        c0 = threads_cpu_ns(prof.pid) if prof.pid else 0
        b0 = bpf_ns(prof.pid) if prof.mode == "jprofd" else 0
        f0 = forks()
        wall, cpu = workload(work, ITERS)
        own = (threads_cpu_ns(prof.pid) - c0) / 1e9 if prof.pid else 0.0
        bpf = (bpf_ns(prof.pid) - b0) / 1e9 if prof.mode == "jprofd" else 0.0
        nproc = forks() - f0
    finally:
        size = prof.stop()
    r = {"mode": mode, "hz": prof.hz, "wall": wall, "ops_s": ITERS / wall,
         "cpu_op_ms": 1e3 * cpu / ITERS, "own_pct": 100 * own / wall, "own_op_ms": 1e3 * own / ITERS,
         "bpf_pct": 100 * bpf / wall, "forks_s": nproc / wall, "data_mb": size / 1e6,
         "post_pct": prof.post_pct, "post_op_ms": 1e3 * prof.post_pct / 100 * wall / ITERS}
    log("  %-14s %6.1f s  %6.2f ops/s  cpu/op %7.2f ms  own %5.2f%% of a core  bpf %5.2f%%  "
        "%5.1f processes/s%s" % (mode, wall, r["ops_s"], r["cpu_op_ms"], r["own_pct"],
                                 r["bpf_pct"], r["forks_s"],
                                 "  perf.data %.0f MB, post %.2f%%" % (r["data_mb"], r["post_pct"])
                                 if size else ""))
    if prof.status:
        keys = ("stacks", "stacks_to_root", "requests", "requests_deferred_exited",
                "process_reads", "builds", "rows", "rows_capacity")
        log("             unwind since start: " +
            ", ".join("%s %s" % (k, prof.status.get(k)) for k in keys))
    return r


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    if os.geteuid() != 0:
        sys.exit("throughput_vs_perf.py: must be run as root")
    for tool in ("perf", "bpftool", "gcc", "xz", "sed"):
        if not shutil.which(tool):
            sys.exit("throughput_vs_perf.py: needs %s" % tool)
    if any(m.startswith("jprofd") for m in MODES) and not os.access(JPROFD, os.X_OK):
        sys.exit("throughput_vs_perf.py: %s not found; build first" % JPROFD)
    work = tempfile.mkdtemp(prefix="jprof-tput-")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        old_stats = f.read().strip()
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
        with open(os.path.join(work, "small.c"), "w") as f:
            f.write("int f(int x) { return x * 3 + 1; }\n")
        with open(os.path.join(work, "random"), "wb") as f:
            f.write(os.urandom(512 * 1024))
        log("%s, %d CPUs, load %s; %d iterations (+%d warm-up) over %d loops, %d rounds"
            % (os.uname().release, os.cpu_count(), loadavg(), ITERS, WARMUP, LOOPS, REPS))
        runs = {m: [] for m in MODES}
        for rep in range(REPS):
            log("round %d (load %s)" % (rep + 1, loadavg()))
            for m in MODES:
                runs[m].append(phase(m, work))
        report(runs)
        log("load at the end %s" % loadavg())
    finally:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(old_stats)
        shutil.rmtree(work, ignore_errors=True)


def report(runs):
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "mode"}
           for m, rs in runs.items()}
    base = med.get("none")
    log("\nmedians of %d rounds" % REPS)
    log("%-14s %8s %9s %9s %9s %9s %9s %11s %9s %13s" % (
        "", "ops/s", "vs none", "cpu/op", "own", "cost/op", "cost", "per sample", "post",
        "cost+post/op"))
    for m, v in med.items():
        rel = v["ops_s"] / base["ops_s"] if base else float("nan")
        extra = v["cpu_op_ms"] - base["cpu_op_ms"] if base else float("nan")
        v["cost_op_ms"] = extra + v["own_op_ms"]
        v["cost_pct"] = 100 * v["cost_op_ms"] / base["cpu_op_ms"] if base else float("nan")
        # Samples in one iteration: its CPU time at the rate (per CPU).
        per = (1e3 * extra / (base["cpu_op_ms"] / 1e3 * v["hz"])
               if base and v["hz"] else float("nan"))
        v["all_op_ms"] = v["cost_op_ms"] + v["post_op_ms"]
        log("%-14s %8.2f %8.3fx %7.2fms %8.2f%% %7.2fms %8.1f%% %11s %8.2f%% %11.2fms"
            % (m, v["ops_s"], rel, v["cpu_op_ms"], v["own_pct"], v["cost_op_ms"], v["cost_pct"],
               "%9.1fus" % per if v["hz"] else "-", v["post_pct"], v["all_op_ms"]))
    log("(cost: the CPU profiling took per iteration, in ms and in % of the work's own CPU "
        "without a profiler; per sample: the extra cpu/op per sample in the work, in us;\n"
        " own+post: the profilers' own CPU, perf's with perf script's, in % of a core, the "
        "steadiest of these on a shared host)")
    for j in (m for m in med if m.startswith("jprofd")):
        for p in (m for m in med if m.startswith("perf")):
            c = med[p]["cost_op_ms"]
            a = med[p]["all_op_ms"]
            op = med[p]["own_pct"] + med[p]["post_pct"]
            log("%s / %-14s own+post CPU %s" % (j, p, "%5.2fx" % (med[j]["own_pct"] / op)
                                                if op > 0 else "n/a"))
            log("%s / %-14s cost %s   with post %s   own CPU %s   throughput %5.3fx"
                % (j, p, "%5.2fx" % (med[j]["cost_op_ms"] / c) if c > 0 else "n/a (perf's <= 0)",
                   "%5.2fx" % (med[j]["all_op_ms"] / a) if a > 0 else "n/a",
                   "%5.2fx" % (med[j]["own_pct"] / med[p]["own_pct"]) if med[p]["own_pct"] > 0
                   else "n/a", med[j]["ops_s"] / med[p]["ops_s"]))


if __name__ == "__main__":
    main()
