#!/usr/bin/env python3
"""What the sampling programs' self-timing costs (the BPF time per sample
histogram, bpf/sampler.h jp_sample_hist). Two daemons sample the same
processes in the same seconds: TIMED (the default build) and UNTIMED (built
with -DJPROF_BPF_TIMING=OFF). For each run it prints both daemons' mean BPF
time per program run of sample_cpu (bpf_stats: run_time_ns / run_cnt) and
the TIMED daemon's own p50/p90/p99 (status sampler.bpf_sample_us).

bpf_stats is switched on with BPF_ENABLE_STATS (a reference held by this
script for its run), not with the kernel.bpf_stats_enabled sysctl, so it
does not disturb a benchmark that toggles the sysctl at the same time.

  sudo bench/bpf_timing_cost.py build/jprofd build-notiming/jprofd [RUNS [SECONDS]]

RUNS (default 6) alternate which daemon starts first; SECONDS default 20.
UNTIMED "-": the timed daemon alone (its BPF time per sample on this load).

Workload (as nobody, until the end): tests/progs unwind_chain_pie (no frame
pointers: CFI stacks through libc into read(2)) and a pure-Python loop
(deep CFI stacks), plus whatever else the host runs."""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGS = os.environ.get("PROGS", os.path.join(HERE, "..", "build", "tests", "progs"))
JPROFCTL = os.environ.get("JPROFCTL", os.path.join(HERE, "..", "build", "jprofctl"))
SYS_BPF, BPF_ENABLE_STATS, BPF_STATS_RUN_TIME = 321, 32, 0  # x86-64


def enable_stats():
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 4)(BPF_STATS_RUN_TIME, 0, 0, 0)
    fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        sys.exit("BPF_ENABLE_STATS: %s" % os.strerror(ctypes.get_errno()))
    return fd


def prog_ids(pid):
    """Ids of the BPF programs process pid holds an fd of (its fdinfo says)."""
    ids = set()
    for fd in os.listdir("/proc/%d/fdinfo" % pid):
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def prog_stats(pid):
    """{prog name: (run_time_ns, run_cnt)} of the programs daemon pid holds."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, check=True).stdout
    ids = prog_ids(pid)
    res = {}
    for p in json.loads(out):
        if p.get("id") in ids and p.get("name", "").startswith("sample_"):
            t, n = res.get(p["name"], (0, 0))
            res[p["name"]] = (t + p.get("run_time_ns", 0), n + p.get("run_cnt", 0))
    return res


def start_daemon(binary, sock, log):
    p = subprocess.Popen([binary, "--socket", sock, "--rate", "99"], stdout=log, stderr=log)
    for _ in range(200):
        if os.path.exists(sock):
            return p
        time.sleep(0.05)
    p.kill()
    sys.exit("%s did not start" % binary)


def status(sock):
    r = subprocess.run([JPROFCTL, "status", "--json", "--socket", sock], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)["status"]["sampler"]["bpf_sample_us"]


def as_nobody(argv):
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + argv


def one_run(timed, untimed, secs, work, swap):
    """Each daemon's (mean us per sample_cpu run, runs) and the timed one's
    status; swap: the untimed daemon starts first; untimed "-": none."""
    procs, load = [], []
    order = [(n, b) for n, b in (("timed", timed), ("untimed", untimed)) if b != "-"]
    try:
        for name, binary in (order[::-1] if swap else order):
            log = open(os.path.join(work, name + ".log"), "ab")
            procs.append(start_daemon(binary, os.path.join(work, name + ".sock"), log))
        if swap and len(procs) == 2:
            procs.reverse()
        load.append(subprocess.Popen(as_nobody([os.path.join(PROGS, "unwind_chain_pie"), "chain",
                                                str(secs + 10)]), stdout=subprocess.DEVNULL))
        load.append(subprocess.Popen(as_nobody(["/usr/bin/python3", "-c", (
            "import json\n"
            "def leaf(n): return json.dumps({'k': list(range(n))})\n"
            "def mid(n): return sum(len(leaf(i % 50)) for i in range(n))\n"
            "while True: mid(1000)\n")]), stdout=subprocess.DEVNULL))
        time.sleep(2)  # tables built for the workload's binaries
        for _ in range(100):  # the daemons' programs loaded
            before = [prog_stats(p.pid) for p in procs]
            if all("sample_cpu" in b for b in before):
                break
            time.sleep(0.1)
        time.sleep(secs)
        after = [prog_stats(p.pid) for p in procs]
        h1 = status(os.path.join(work, "timed.sock"))
    finally:
        for p in load + procs:
            p.kill()
            p.wait()
    means = []
    for b, a in zip(before, after):
        t = a["sample_cpu"][0] - b["sample_cpu"][0]
        n = a["sample_cpu"][1] - b["sample_cpu"][1]
        means.append((t / n / 1e3 if n else float("nan"), n))
    return means, h1


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    timed, untimed = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    secs = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    stats_fd = enable_stats()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bpftiming-") as work:
        os.chmod(work, 0o755)
        for i in range(runs):
            means, h1 = one_run(timed, untimed, secs, work, i % 2 == 1)
            if untimed == "-":
                print("run %d (%d s): sample_cpu mean per run %.2f us (%d runs); histogram: %r"
                      % (i + 1, secs, means[0][0], means[0][1], h1))
                continue
            (mt, nt), (mu, nu) = means
            ratios.append(mt / mu)
            print("run %d (%d s, %s first): sample_cpu mean per run: timed %.2f us (%d runs), "
                  "untimed %.2f us (%d runs), timed/untimed %.3f"
                  % (i + 1, secs, "untimed" if i % 2 else "timed", mt, nt, mu, nu, mt / mu))
            print("        timed daemon's histogram since start: %r" % h1)
    os.close(stats_fd)
    if not ratios:
        return
    ratios.sort()
    print("timed/untimed over %d runs: median %.3f (min %.3f, max %.3f)"
          % (runs, ratios[len(ratios) // 2], ratios[0], ratios[-1]))


main()
