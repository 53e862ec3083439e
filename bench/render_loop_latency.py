#!/usr/bin/env python3
"""Do big profiles stall the event loop while they are rendered? Starts
jprofd, a CPU-bound workload (deep_stacks: every sample a distinct stack of
~90 frames), and N recordings of it that end together (jprofctl record,
each its own client), while a separate process asks `status` every 10 ms
on its own connection. The daemon and the poller run at SCHED_RR 1 (as the
security tests do), so that the machine's other load does not decide the
round trips. Prints the status round trips during the last seconds of the
recordings and until every profile has arrived, the profiles' sizes, and
how long the last one took to arrive after the recordings' end.

  sudo bench/render_loop_latency.py [JPROFD]      (default build/jprofd)
  env: N=2 FORMAT=html INTERVAL=1ms SECONDS=20 THREADS=2 (spinning threads)
       WORKLOAD=deep_stacks (distinct deep stacks) or thread_spawner (a few)

Run it with the daemon before and after a change, one after the other on
the same machine, and compare the worst and the p99 latencies.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jprofd = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build", "jprofd")
jprofctl = os.path.join(src, "build", "jprofctl")
progs = os.path.join(src, "build", "tests", "progs")
n = int(os.environ.get("N", "2"))
fmt = os.environ.get("FORMAT", "html")
interval = os.environ.get("INTERVAL", "1ms")
secs = int(os.environ.get("SECONDS", "20"))
threads = int(os.environ.get("THREADS", "2"))
workload = os.environ.get("WORKLOAD", "deep_stacks")
work = tempfile.mkdtemp(prefix="jprof-renderlat-")
sock = os.path.join(work, "s.sock")

# The poller: its own process, so that nothing here (reading files, the
# GIL) delays it. Prints "<monotonic s> <ms>" per answer.
POLLER = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
buf = b""
while True:
    t = time.monotonic()
    s.sendall(b'{"v":1,"id":1,"cmd":"status"}\n')
    while b"\n" not in buf:
        d = s.recv(1 << 20)
        if not d:
            sys.exit(0)
        buf += d
    buf = buf.split(b"\n", 1)[1]
    print("%.4f %.3f" % (t, 1000 * (time.monotonic() - t)), flush=True)
    time.sleep(0.01)
"""

RT = ["chrt", "--reset-on-fork", "--rr", "1"]
d = subprocess.Popen(RT + [jprofd, "--socket", sock] + shlex.split(os.environ.get("JPROFD_ARGS", "")),
                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "jprofd.log"), "w"))
deadline = time.monotonic() + 10
while not os.path.exists(sock) and time.monotonic() < deadline:
    time.sleep(0.05)
# deep_stacks S K: K threads whose every sample is a distinct stack of ~90
# frames; thread_spawner 0 K-1 S: K threads on one short stack.
if workload == "deep_stacks":
    w = subprocess.Popen([os.path.join(progs, "deep_stacks"), str(secs + 30), str(threads)])
else:
    w = subprocess.Popen([os.path.join(progs, "thread_spawner"), "0", str(threads - 1),
                          str(secs + 30)])
time.sleep(0.5)
poll_log = os.path.join(work, "poll.log")
poller = subprocess.Popen(RT + [sys.executable, "-c", POLLER, sock], stdout=open(poll_log, "w"))
outs = [os.path.join(work, "p%d.%s" % (i, fmt)) for i in range(n)]
recs = [subprocess.Popen([jprofctl, "--socket", sock, "record", "--pid", str(w.pid), "-i", interval,
                          "-d", "%ds" % secs, "-f", fmt, "-o", o, "--no-progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for o in outs]
t_start = time.monotonic()
rcs = [r.wait() for r in recs]
t_done = time.monotonic()
poller.kill()
w.kill()
d.terminate()
d.wait()

lat = []
with open(poll_log) as f:
    for line in f:
        t, ms = line.split()
        if float(t) >= t_start + secs - 3:   # the ends and the renderings
            lat.append(float(ms))
lat.sort()
sizes = [os.path.getsize(o) if os.path.exists(o) else 0 for o in outs]
print("jprofd %s: %d x record -i %s -d %ds -f %s" % (jprofd, n, interval, secs, fmt))
print("  exit codes %s; outputs %.1f MiB each on average" % (rcs, sum(sizes) / max(n, 1) / 2**20))
print("  last profile written %.1f s after the recordings' end" % (t_done - t_start - secs))
if lat:
    print("  status during the ends: %d answers, median %.1f ms, p99 %.1f ms, worst %.1f ms"
          % (len(lat), lat[len(lat) // 2], lat[min(len(lat) - 1, len(lat) * 99 // 100)], lat[-1]))
print("  (files in %s)" % work)
