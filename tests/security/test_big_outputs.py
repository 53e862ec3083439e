"""Issue 26, point 9: big outputs rendered on the event loop.

nobody records its own CPU burner whose every sample is a distinct stack
about 90 frames deep (tests/progs/deep_stacks.c, two threads), twice at
once, every 1 ms of CPU, as HTML flame graphs, and cancels both together
once each holds TARGET samples: two profiles of some 12 MiB whose call
trees are rendered at once. Rendered on the loop, one after the other, each
held every other client's answer while it was built: root's `status`
waited about 1.7 s here (eight JFR recordings ending together held it
4.2 s on the machine of the report). Now a render worker thread renders
them, and root's `status` (the daemon and the watcher at SCHED_RR 1, as
in rootwatch.py) must be answered within LIMIT_MS from the cancel until both
profiles arrived, while each profile still arrives whole: the flame graph
data the page reads holds every sample the summary counts. The end of a
recording still waits for an RCU grace period on the loop (membarrier, a
known gap: docs/security.md); the watcher here times how long the daemon's
loop sat in that call during each answer and leaves that part out, so
what is bounded is the rest: the renderings.

Then the lifetimes of a rendering: a client that cancels its big
recordings and hangs up at once (their renderings are queued or running
when it goes), and a daemon stopped (SIGTERM) while renderings are queued:
the daemon keeps serving after the first and exits cleanly after the
second (in the ASan build, with no leak or use after free reported).
"""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402
import rootwatch as rw  # noqa: E402

INTERVAL_US = 1000
NREC = 2                # recordings ending together, on one connection
TARGET = 12000          # samples (nearly all distinct stacks) per recording
LIMIT_MS = 1000         # root's status during the renderings
DATA_RE = re.compile(r'<script type="application/json" id="profile-data">(.*?)</script>', re.S)


# Root's status every 20 ms on one connection; while it waits, the daemon's
# main thread is looked at every 2 ms and the time it sat in membarrier()
# is added up. One line per answer: "<sent, monotonic s> <ms> <ms in membarrier>".
WATCHER = r"""
import json, os, select, socket, sys, time
path, pid = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
buf = b""
while True:
    t0 = time.monotonic()
    s.sendall(b'{"v":1,"id":1,"cmd":"status"}\n')
    mb, last = 0.0, t0
    while b"\n" not in buf:
        ready = select.select([s], [], [], 0.002)[0]
        now = time.monotonic()
        try:
            with open("/proc/%d/syscall" % pid) as f:
                if f.read().split()[0] == "324":  # x86_64 membarrier
                    mb += now - last
        except (OSError, IndexError):
            pass
        last = now
        if ready:
            data = s.recv(1 << 20)
            if not data:
                sys.exit(1)
            buf += data
    buf = buf.split(b"\n", 1)[1]
    print("%.4f %.3f %.3f" % (t0, 1000 * (time.monotonic() - t0), 1000 * mb), flush=True)
    time.sleep(0.02)
"""


class Watch:
    """Root's status round trips, at SCHED_RR 1 like the daemon."""

    def __init__(self, t, d):
        self.path = os.path.join(t.mkdtemp("bigwatch-"), "watch.log")
        self.out = open(self.path, "w")
        self.proc = jt.Proc(jt.as_user_argv(None, rw.RT + [sys.executable, "-c", WATCHER, d.socket,
                                                         str(d.pid)]),
                            "status watcher", stdout=self.out, stderr=subprocess.STDOUT)
        jt.wait_until(lambda: self.answers(0), 10, what="the first status answer")

    def answers(self, since):
        """[(sent, ms, ms in membarrier)] of the answers sent since."""
        with open(self.path) as f:
            rows = [tuple(float(x) for x in line.split()) for line in f if line.endswith("\n")]
        rows = [r for r in rows if len(r) == 3 and r[0] >= since]
        return rows

    def stop(self):
        self.proc.kill()
        self.out.close()


def start_recordings(c, pid, n):
    """n long recordings of pid on client c: their request ids."""
    return [c.start_record(pid=pid, duration_ms=600000, interval_us=INTERVAL_US, format="html",
                           progress=False)
            for _ in range(n)]


def flame_data(html):
    """The data the flame graph page reads (JSON.parse of #profile-data)."""
    m = DATA_RE.search(html)
    jt.check(m, "no profile-data in the page (%d bytes)" % len(html))
    return json.loads(m.group(1))


def wait_samples(root, n, samples):
    """Until n recordings run, each with at least samples samples."""
    def ready():
        lst = root.status()["sessions"]["list"]
        return len(lst) == n and all(e["samples"] >= samples for e in lst)
    jt.wait_until(ready, 180, interval=0.2, what="%d recordings of %d samples" % (n, samples))


def main(t):
    d = t.start_daemon()
    burner = t.workload("deep_stacks", 3600, 2)
    rw.make_realtime(d.pid)
    watch = Watch(t, d)
    root = d.client()

    with t.case("big profiles end together: root is answered while they render, each whole"):
        c = d.client(user="nobody")
        rids = start_recordings(c, burner.pid, NREC)
        wait_samples(root, NREC, TARGET)
        t0 = time.monotonic()
        for rid in rids:
            c.send("cancel", target=rid)
        got = [c.collect_record(rid, 180) for rid in rids]
        jt.log("the last profile arrived %.1f s after the cancel" % (time.monotonic() - t0))
        t_last = time.monotonic()
        # An answer sent after the profiles came in: every earlier one is in.
        jt.wait_until(lambda: watch.answers(t_last), 10, what="a status answer after the profiles")
        rows = watch.answers(t0 - 0.5)
        jt.check(len(rows) >= 3, "only %d status answers during the renderings" % len(rows))
        worst = max(ms - mb for _, ms, mb in rows)
        jt.log("root's status during the ends and renderings: %d answers, worst %.1f ms "
               "(%.1f ms of it in membarrier), %.1f ms without membarrier waits"
               % (len(rows), max(ms for _, ms, _ in rows), max(mb for _, _, mb in rows), worst))
        for rec in got:
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            jt.check_eq(rec.profile.get("status"), "cancelled", "profile status")
            sm = rec.summary()
            data = flame_data(rec.data())
            nodes = data["nodes"]
            jt.log("profile: %d samples, %d stacks, %.1f MiB, %d flame graph nodes"
                   % (sm["samples"], sm["stacks"], len(rec.profile["data"]) / 2**20,
                      len(nodes) // 5))
            jt.check(sm["samples"] >= TARGET and sm["stacks"] >= TARGET // 2,
                     "%d samples in %d stacks only: too small an attack"
                     % (sm["samples"], sm["stacks"]))
            jt.check_eq(len(nodes) % 5, 0, "numbers per node")
            jt.check_eq(data["meta"]["samples"], sm["samples"], "samples in the page")
            jt.check_eq(nodes[3], sm["samples"], "the root's total in the page")
        jt.check(worst < LIMIT_MS, "root's status waited %.0f ms (membarrier not counted) while "
                 "the profiles were rendered (want < %d ms)" % (worst, LIMIT_MS))
        c.close()

    with t.case("a client hangs up while its profiles are rendered: the daemon serves on"):
        c = d.client(user="nobody")
        rids = start_recordings(c, burner.pid, NREC)
        wait_samples(root, NREC, TARGET // 2)
        for rid in rids:
            c.send("cancel", target=rid)
        c.close()
        jt.wait_until(lambda: root.status()["sessions"]["active"] == 0, 30,
                      what="the recordings gone")
        d.check_root_answered(1.0)
        jt.log("renderings dropped with their client: %d"
               % d.stderr_text().count("client gone before its profile was rendered"))

    watch.stop()

    with t.case("SIGTERM while profiles are rendered: a clean exit"):
        c = d.client(user="nobody")
        rids = start_recordings(c, burner.pid, NREC)
        wait_samples(root, NREC, TARGET // 2)
        root.close()
        for rid in rids:
            c.send("cancel", target=rid)
        d.stop()  # checks the exit status (and, in the ASan build, the report)
        # The client's connection is closed (what it got before is not
        # the point: a reply cut by the shutdown is possible).
        c.sock.settimeout(30)
        while c.sock.recv(1 << 20):
            pass
        c.close()


if __name__ == "__main__":
    jt.run(main)
