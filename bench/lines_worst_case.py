#!/usr/bin/env python3
"""What file:line costs on a big binary with debug info. Generates a C
program of FILES x FUNCS functions (each with its own struct type and an
inlined helper), builds it -O2 -g, runs it, starts jprofd (host view off)
and records it twice as pprof while a client thread asks `status` every
5 ms. Prints the size of the binary's debug sections, how long the worker
took to read them (the daemon's log), how much longer than its duration
each recording took to come back (the rendering's wait for lines, bounded
by the daemon's budget), how many of the sampled functions had a line in
each profile, the status round trips (the event loop's latency), and the
daemon's peak RSS. Compare with JPROFD_ARGS="--lines off".

  sudo bench/lines_worst_case.py [JPROFD]      (default build/jprofd)
  BENCH_FILES=8 BENCH_FUNCS=2500 BENCH_SECONDS=3
"""
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jprofd = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "build", "jprofd")
jprofctl = os.path.join(os.path.dirname(jprofd), "jprofctl")
files = int(os.environ.get("BENCH_FILES", "8"))
funcs = int(os.environ.get("BENCH_FUNCS", "2500"))
secs = int(os.environ.get("BENCH_SECONDS", "3"))
work = tempfile.mkdtemp(prefix="jprof-lines-")
sock = os.path.join(work, "s.sock")


def gen():
    srcs = []
    for k in range(files):
        p = os.path.join(work, "big_%d.c" % k)
        with open(p, "w") as f:
            f.write("extern volatile unsigned long big_sink;\n")
            for i in range(funcs):
                f.write("struct s_%d_%d { int a%d; long b; double c; char d[%d]; };\n"
                        "static inline __attribute__((always_inline)) long h_%d_%d(struct s_%d_%d *s, long n)\n"
                        "{ for (long j = 0; j < n; j++) big_sink += (unsigned long)(s->a%d + j * %d); return s->b; }\n"
                        "long f_%d_%d(long n) { struct s_%d_%d s = { %d, n, 0.5, { 0 } };\n"
                        "  return h_%d_%d(&s, n) + s.d[%d]; }\n"
                        % (k, i, i, 1 + i % 7, k, i, k, i, i, i + 3, k, i, k, i, i, k, i, i % 7))
        srcs.append(p)
    with open(os.path.join(work, "main.c"), "w") as f:
        f.write("#include <time.h>\nvolatile unsigned long big_sink;\n")
        for k in range(files):
            for i in range(funcs):
                f.write("long f_%d_%d(long);\n" % (k, i))
        f.write("static long (*const fns[])(long) = {\n")
        for k in range(files):
            for i in range(funcs):
                f.write("f_%d_%d,\n" % (k, i))
        f.write("};\nint main(void) { time_t end = time(0) + 600; for (;;)\n"
                "  for (unsigned i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {\n"
                "    fns[i](200); if (!(i & 1023) && time(0) > end) return 0; } }\n")
    srcs.append(os.path.join(work, "main.c"))
    return srcs


def build(srcs):
    t = time.monotonic()
    objs = [s[:-2] + ".o" for s in srcs]
    procs = []
    for s, o in zip(srcs, objs):
        procs.append(subprocess.Popen(["gcc", "-O2", "-g", "-c", s, "-o", o]))
        if len(procs) == 2:
            procs.pop(0).wait()
    for p in procs:
        p.wait()
    exe = os.path.join(work, "big")
    subprocess.run(["gcc", "-o", exe] + objs, check=True)
    out = subprocess.run(["readelf", "-S", "-W", exe], capture_output=True, text=True).stdout
    dbg = sum(int(m.group(1), 16) for m in
              re.finditer(r"\.debug_\w+\s+PROGBITS\s+\w+\s+\w+\s+(\w+)", out))
    print("binary: %d functions, %.1f MiB file, %.1f MiB of .debug_* sections, built in %.0f s"
          % (files * funcs, os.path.getsize(exe) / 2**20, dbg / 2**20, time.monotonic() - t))
    return exe


class Pinger:
    """One connection asking `status` again and again: each answer's round
    trip is how long the event loop kept it waiting."""

    def __init__(self):
        self.conn = socket.socket(socket.AF_UNIX)
        self.conn.connect(sock)
        self.rd = self.conn.makefile("rb")
        self.lat, self.stop, self.n = [], False, 0

    def run(self):
        while not self.stop:
            self.n += 1
            t = time.monotonic()
            self.conn.sendall(b'{"v":1,"id":%d,"cmd":"status"}\n' % self.n)
            self.rd.readline()
            self.lat.append(time.monotonic() - t)
            time.sleep(0.005)


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        v = dict(ln.split(":", 1) for ln in f if ":" in ln)
    return v["VmRSS"].strip(), v["VmHWM"].strip()


def record(pid, n):
    out = os.path.join(work, "r%d.pb.gz" % n)
    t = time.monotonic()
    subprocess.run([jprofctl, "--socket", sock, "record", "--pid", str(pid), "-d", "%ds" % secs,
                    "-o", out, "-f", "pprof", "--no-progress"], check=True)
    extra = time.monotonic() - t - secs
    top = subprocess.run(["go", "tool", "pprof", "-lines", "-top", "-nodecount=100000", out],
                         capture_output=True, text=True,
                         env=dict(os.environ, HOME=work, GOCACHE=os.path.join(work, "gc"),
                                  GOTOOLCHAIN="local", GOPROXY="off", GOTELEMETRY="off")).stdout
    fn = set(re.findall(r"\b(f_\d+_\d+)\b", top))
    withline = set(re.findall(r"\b(?:f|h)_(\d+_\d+) \S*big_\d+\.c:\d+", top))
    print("recording %d: came back %.2f s after its %d s; %d sampled f_* functions, %d with a line"
          % (n, extra, secs, len(fn), len(withline)))


srcs = gen()
exe = build(srcs)
log = open(os.path.join(work, "jprofd.log"), "w+")
d = subprocess.Popen([jprofd, "--socket", sock, "--rate", "0"] +
                     shlex.split(os.environ.get("JPROFD_ARGS", "")), stdout=log, stderr=log)
deadline = time.monotonic() + 10
while not os.path.exists(sock) and time.monotonic() < deadline:
    time.sleep(0.05)
w = subprocess.Popen([exe])
try:
    print("daemon RSS before: %s (peak %s)" % rss(d.pid))
    pinger = Pinger()
    th = threading.Thread(target=pinger.run)
    th.start()
    record(w.pid, 1)
    time.sleep(2)
    record(w.pid, 2)
    pinger.stop = True
    th.join()
    lat = sorted(pinger.lat)
    print("status round trips: %d, median %.1f ms, p99 %.1f ms, max %.1f ms"
          % (len(lat), 1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * .99)], 1000 * lat[-1]))
    print("daemon RSS after: %s (peak %s)" % rss(d.pid))
    log.flush()
    log.seek(0)
    for ln in log:
        if "lines:" in ln:
            print("daemon: " + ln.strip())
finally:
    w.kill()
    d.terminate()
    d.wait()
    subprocess.run(["rm", "-rf", work])
