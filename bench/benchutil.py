"""Helpers the Python benches share (bench/*.py import it from their own
directory): logging without buffering, waiting on a condition with a
deadline, the host's fork count and a process's BPF programs' run time."""
import json
import os
import subprocess
import sys
import time


def log(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("no %s within %d s" % (what, timeout))
        time.sleep(0.1)


def forks():
    """Processes forked since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("processes "):
                return int(line.split()[1])
    return 0


def bpf_ns(pid):
    """Run time of the BPF programs pid holds (kernel.bpf_stats_enabled)."""
    ids = set()
    fdinfo = "/proc/%d/fdinfo" % pid
    try:
        fds = os.listdir(fdinfo)
    except OSError:
        return 0
    for fd in fds:
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except (OSError, ValueError):
            pass
    total = 0
    for i in ids:
        r = subprocess.run(["bpftool", "prog", "show", "id", str(i), "-j"], capture_output=True,
                           text=True)
        if r.returncode == 0:
            total += json.loads(r.stdout).get("run_time_ns", 0)
    return total
