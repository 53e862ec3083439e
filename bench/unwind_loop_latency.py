#!/usr/bin/env python3
"""Does building unwind tables slow the event loop? Starts jprofd (host view
at 99 Hz, so every new process gets its tables built), asks `status` every
5 ms from a client thread, and meanwhile starts gcc on a generated
6000-function file (cc1: the largest table, ~480,000 rows) and `java
-version` (libjvm.so). Prints the status round-trip times and the daemon's
build counters. Compare with JPROFD_ARGS="--unwind frame-pointers".

  sudo bench/unwind_loop_latency.py [JPROFD]       (default build/jprofd)
"""
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jprofd = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build", "jprofd")
work = tempfile.mkdtemp(prefix="jprof-uwlat-")
sock = os.path.join(work, "s.sock")
with open(os.path.join(work, "big.c"), "w") as f:
    for i in range(6000):
        f.write("int f%d(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) "
                "s += a[i] * %d ^ (s >> 3); return s + f%d(a, n - 1); }\n" % (i, i, max(i - 1, 0)))
d = subprocess.Popen([jprofd, "--socket", sock, "--rate", "99"] +
                     shlex.split(os.environ.get("JPROFD_ARGS", "")),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 10
while not os.path.exists(sock) and time.monotonic() < deadline:
    time.sleep(0.05)


def status():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    t = time.monotonic()
    s.sendall(b'{"v":1,"id":1,"cmd":"status"}\n')
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return time.monotonic() - t, json.loads(buf)


lat, stop = [], False


def pinger():
    while not stop:
        lat.append(status()[0])
        time.sleep(0.005)


try:
    th = threading.Thread(target=pinger)
    th.start()
    time.sleep(1)
    gcc = subprocess.Popen(["gcc", "-O2", "-c", os.path.join(work, "big.c"), "-o", "/dev/null"])
    java = subprocess.Popen(["java", "-Xshare:off", "-version"], stderr=subprocess.DEVNULL)
    time.sleep(6)
    stop = True
    th.join()
    gcc.kill()
    java.wait()
    uw = status()[1]["status"]["sampler"].get("unwind", {})
    lat.sort()
    print("status round trips: %d, median %.1f ms, p99 %.1f ms, max %.1f ms"
          % (len(lat), 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * .99)], 1000 * lat[-1]))
    print("tables built: %s, longest build %s ms" % (uw.get("builds"), uw.get("build_ms_max")))
finally:
    d.terminate()
    d.wait()
    subprocess.run(["rm", "-rf", work])
