"""Helpers the Python benches share (bench/*.py import it from their own
directory): logging without buffering, waiting on a condition with a
deadline, and the host's fork count."""
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
