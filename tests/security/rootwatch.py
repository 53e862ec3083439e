"""Watching a daemon from root while an unprivileged user attacks it: how
long root's `status` takes, and the daemon's RSS and CPU time.

The watcher is a process of its own (a thread of the test would wait for
the test's GIL). This machine is shared: other tests' workloads keep both
CPUs busy (load 4-7 on 2 CPUs), and a status request then waits for a CPU
whatever the daemon does; nice -10 was not enough (rounds of the daemon's
loop took three times their CPU time in wall time). So the daemon and the
watcher run with the lowest real-time priority (SCHED_RR 1, reset on
fork): other processes, the attacker's included, cannot delay them, while
anything the daemon does on its own loop (blocking, or burning CPU on
hostile input) still shows in full.

One wait of the daemon is not an attacker's doing: every pipeline drain
(once a second) the sampler waits for an RCU grace period
(membarrier(MEMBARRIER_CMD_GLOBAL), daemon/collect/sampler.c), which on
this loaded machine took up to 1.6 s once in about a dozen runs. While a
status request is slow, the watcher looks at the daemon's
/proc/PID/syscall; answers that waited on that membarrier are reported
and bounded separately (MEMBARRIER_LIMIT_MS), not counted against the
100 ms that the daemon's own handling of hostile input must meet.

That 100 ms holds for the 95th percentile of the answers, and no answer
may take 5x as long: one answer delayed by a preemption on a busy
machine (129 ms once, in the ASan build during CI) is not a stall, while
each stall these tests reproduce slowed most answers to 0.7-2 s.
"""

import json
import os
import subprocess
import sys
import time

import jproftest as jt

RT = ["chrt", "--reset-on-fork", "--rr", "1"]
MEMBARRIER_LIMIT_MS = 5000


def make_realtime(pid):
    """SCHED_RR 1 for every thread of pid; its children start as normal tasks."""
    for tid in os.listdir("/proc/%d/task" % pid):
        os.sched_setscheduler(int(tid), os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(1))

# Prints "> <CLOCK_MONOTONIC s>" before each status request and, once
# answered, "<sent at> <ms> <m> <daemon RSS bytes> <daemon CPU s> <json status>"
# where m is 1 when the daemon was seen in membarrier while we waited.
WATCHER = r"""
import json, os, select, socket, sys, time
path, pid, period = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
tck = os.sysconf("SC_CLK_TCK")
def rss():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
def cpu():
    with open("/proc/%d/stat" % pid) as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) / tck
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
buf = b""
n = 0
while True:
    n += 1
    t0 = time.monotonic()
    print("> %.3f" % t0, flush=True)
    s.sendall(json.dumps({"v": 1, "id": n, "cmd": "status"}).encode() + b"\n")
    mb = 0
    while b"\n" not in buf:
        if not select.select([s], [], [], 0.005)[0]:
            try:
                with open("/proc/%d/syscall" % pid) as f:
                    mb |= f.read().split()[0] == "324"  # x86_64 membarrier
            except (OSError, IndexError):
                pass
            continue
        data = s.recv(1 << 20)
        if not data:
            sys.exit(1)
        buf += data
    line, _, buf = buf.partition(b"\n")
    ms = 1000 * (time.monotonic() - t0)
    print("%.3f %.3f %d %d %.2f %s" % (t0, ms, mb, rss(), cpu(), line.decode()), flush=True)
    time.sleep(period)
"""


def rss_bytes(pid):
    """VmRSS of pid (anonymous, file and shared pages)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def children(pid):
    """The pids of pid's children (its main thread's: the daemon forks there)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def proc_state(pid):
    """One-letter state of pid ("R", "S", "D", "Z", ...), or None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


class RootWatch:
    """Root asks the daemon for its status every `period` seconds until stop()."""

    def __init__(self, t, d, period=0.05):
        self.d = d
        make_realtime(d.pid)
        self.out_path = os.path.join(t.mkdtemp("rootwatch-"), "watch.log")
        self._out = open(self.out_path, "wb")
        self.proc = jt.Proc(jt.as_user_argv(None, RT + [sys.executable, "-c", WATCHER, d.socket,
                                                        str(d.pid), str(period)]),
                            "rootwatch", stdout=self._out, stderr=subprocess.STDOUT)
        self._pos = 0
        self._partial = b""
        self.latencies = []
        self.membarrier = []  # answers that waited on the sampler's membarrier
        self.sent = []
        self.rss = []
        self.cpu = []
        self.last_status = None
        self.pending_since = None
        self.t_base = time.monotonic()
        jt.wait_until(lambda: self.status() is not None, 10, what="the first status")
        self.rss_base = self.rss[0]
        self.cpu_base = self.cpu[0]
        jt.log("root watch: daemon RSS %.1f MiB at the start" % (self.rss_base / 2**20))

    def _read(self):
        with open(self.out_path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        self._pos += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(b"> "):
                self.pending_since = float(line[2:])
                continue
            self.pending_since = None
            sent, ms, mb, rss, cpu, st = line.decode().split(" ", 5)
            try:
                st = json.loads(st)
            except ValueError:
                raise jt.TestFailure("root watch: not a status: %r" % line[:200])
            if mb == "1":
                self.membarrier.append(float(ms))
            else:
                self.sent.append(float(sent))
                self.latencies.append(float(ms))
            self.rss.append(int(rss))
            self.cpu.append(float(cpu))
            self.last_status = st.get("status")

    def status(self):
        """The latest status root got (None before the first)."""
        self._read()
        return self.last_status

    def rss_peak(self):
        self._read()
        return max(self.rss)

    def stop(self):
        self._read()
        self.proc.kill()
        t_stop = time.monotonic()
        self._out.close()
        self._read()
        if self.pending_since is not None:  # in flight when stopped: waited at least this long
            self.latencies.append(1000 * (t_stop - self.pending_since))
            self.sent.append(self.pending_since)
            self.pending_since = None
        took = time.monotonic() - self.t_base
        lat = sorted(self.latencies)
        self.cpu_share = (self.cpu[-1] - self.cpu_base) / took
        jt.log("root watch: %d status requests, median %.1f ms, p99 %.1f ms, worst %.1f ms; "
               "daemon RSS %.1f -> peak %.1f MiB; daemon CPU %.0f %% of one CPU"
               % (len(lat), lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1],
                  self.rss_base / 2**20, max(self.rss) / 2**20, 100 * self.cpu_share))
        if self.membarrier:
            jt.log("root watch: %d answers waited on the sampler's membarrier (not the attack), "
                   "up to %.1f ms" % (len(self.membarrier), max(self.membarrier)))
        slow = sorted(zip(self.latencies, self.sent), reverse=True)[:5]
        jt.log("root watch: slowest at (test time) %s" % ", ".join(
            "%.1f ms (%.1f s)" % (ms, sent - jt._T0) for ms, sent in slow))

    def check_fast(self, what, limit_ms=100, min_requests=10):
        self._read()
        jt.check(self.proc.running() or self._out.closed,
                 "%s: root's status watcher died (the daemon closed its connection?)" % what)
        jt.check(len(self.latencies) >= min_requests,
                 "%s: only %d status answers" % (what, len(self.latencies)))
        if self.pending_since is not None:  # (it might be a membarrier wait)
            waiting = 1000 * (time.monotonic() - self.pending_since)
            jt.check(waiting < MEMBARRIER_LIMIT_MS, "%s: root's status has had no answer for %.0f ms"
                     % (what, waiting))
        longest = max(self.membarrier, default=0)
        jt.check(longest < MEMBARRIER_LIMIT_MS,
                 "%s: an answer waited %.0f ms on the sampler's membarrier" % (what, longest))
        # A stalled or starved loop makes most answers slow (the bugs these
        # tests guard against took 0.7-2 s per answer); one preemption on a
        # busy 2-CPU machine delays a single answer. So: the 95th
        # percentile within limit_ms, and no answer over 5x that.
        lat = sorted(self.latencies)
        p95 = lat[min(len(lat) - 1, (95 * len(lat)) // 100)]
        worst = lat[-1]
        jt.log("%s: root's status p95 %.1f ms, worst %.1f ms (%d requests)"
               % (what, p95, worst, len(lat)))
        jt.check(p95 < limit_ms, "%s: root's status p95 %.0f ms (want < %d ms; %d requests)"
                 % (what, p95, limit_ms, len(lat)))
        jt.check(worst < 5 * limit_ms, "%s: root's status took up to %.0f ms (want < %d ms; "
                 "%d requests)" % (what, worst, 5 * limit_ms, len(lat)))
