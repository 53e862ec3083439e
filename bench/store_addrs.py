#!/usr/bin/env python3
"""What pprof's per-address frames cost a store, on a whole-host recording
of a busy machine: starts jprofd, keeps gcc compiling (a generated C file
of BENCH_FUNCS functions, -O2, in a loop) and a pure-Python loop running,
records the whole host as pprof for BENCH_SECONDS, converts the profile's
samples to store_addrs' input and replays them into stores keyed per
function and per address (caps 0, 16, 64 and unbounded; build/bench/
store_addrs). The cap of the daemon that records is its own
STORE_PPROF_ADDRS: build it with -DSTORE_PPROF_ADDRS=1000000 in CFLAGS to
see how many addresses an unbounded store keeps.

Usage (root): bench/store_addrs.py BUILD_DIR [SECONDS]

--hostview: the host view's buckets, which keep addresses too (hostview.c
HOSTVIEW_ADDRS), side by side with a daemon built without them: both
daemons sample the host at 99 Hz under the same load (the gcc loop and the
Python loop) for SECONDS; every 30 s each one's `status` hostview bytes,
buckets and samples and its VmRSS are printed, then each one's `profile
--last` as pprof (locations, bytes) and as collapsed (lines).

Usage (root): bench/store_addrs.py --hostview BUILD_DIR BUILD_DIR_NOADDRS [SECONDS]
(BUILD_DIR_NOADDRS: cmake ... -DCMAKE_C_FLAGS=-DHOSTVIEW_ADDRS=0; its
jprofd only)"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def gen_c(path, nfuncs):
    with open(path, "w") as f:
        for i in range(nfuncs):
            f.write("long f%d(long x) { long s = 0; for (long i = 0; i < x; i++) "
                    "s += (i * %d) ^ (s >> 3); return s; }\n" % (i, i + 1))


def convert(raw, out):
    """`go tool pprof -raw` text -> store_addrs input (frames root first)."""
    parts = re.split(r"^(Samples|Locations|Mappings)\b.*$", raw, flags=re.M)
    sect = dict(zip(parts[1::2], (p.splitlines() for p in parts[2::2])))
    samples, cur, locs, maps = [], None, {}, {}
    for ln in sect.get("Samples", []):
        m = re.match(r"\s*(\d+)\s+\d+:\s+([\d ]+)$", ln)
        if m:
            cur = [int(m.group(1)), 0, [int(x) for x in m.group(2).split()]]
            samples.append(cur)
        m = re.search(r"pid:\[(\d+)\]", ln)
        if m and cur:
            cur[1] = int(m.group(1))
    for ln in sect.get("Locations", []):
        m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)\s+(?:M=(\d+)\s+)?(.*)$", ln)
        if m:
            cur = int(m.group(1))
            locs[cur] = [int(m.group(2), 16), int(m.group(3) or 0), m.group(4)]
        elif ln.strip():
            locs[cur][2] = ln.strip()   # the location's own function is the last line
    for ln in sect.get("Mappings", []):
        m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+)\s+(\S+)\s*(\S*)", ln)
        if m:
            bid = m.group(6) if m.group(6) and m.group(6) != "[FN]" else "-"
            maps[int(m.group(1))] = (m.group(2), m.group(3), m.group(4), m.group(5), bid)
    per = {}   # (pid, function) -> sampled addresses
    for count, pid, ids in samples:
        for lid in ids:
            addr, mid, text = locs[lid]
            mm = re.match(r"(.*) \S*:\d+ s=\d+", text)
            if addr:
                per.setdefault((pid, mm.group(1) if mm else text), set()).add(addr)
    most = sorted(((len(a), fn) for fn, a in per.items()), reverse=True)[:3]
    print("addresses per function and process: %d pairs, %d with > 16, %d with > 64; most: %s"
          % (len(per), sum(1 for a in per.values() if len(a) > 16),
             sum(1 for a in per.values() if len(a) > 64), most))
    with open(out, "w") as f:
        for count, pid, ids in samples:
            f.write("S\t%d\t%d\n" % (count, pid))
            for lid in reversed(ids):
                addr, mid, text = locs[lid]
                mm = re.match(r"(.*) \S*:\d+ s=\d+", text)
                name = mm.group(1) if mm else text
                mp = maps.get(mid, ("0x0", "0x0", "0x0", "-", "-"))
                kind = "k" if mp[3].startswith("[kernel") else ("n" if addr else "m")
                f.write("F\t%s\t%x\t%s\t%s\t%s\t%s\t%s\t%s\n"
                        % (kind, addr, mp[0][2:], mp[1][2:], mp[2][2:], mp[4], mp[3], name))
    return sum(s[0] for s in samples)


@contextlib.contextmanager
def bench_dir():
    """A temporary directory and a list of processes, ended and removed
    afterwards (kept with BENCH_KEEP set)."""
    d = tempfile.mkdtemp(prefix="jprof-bench-")
    os.chmod(d, 0o755)
    procs = []
    try:
        yield d, procs
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait()
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(d, ignore_errors=True)


def go_env(d):
    return dict(os.environ, HOME=d, PPROF_TMPDIR=d, GOTOOLCHAIN="local", GOPROXY="off",
                GOTELEMETRY="off")


def start_daemon(build, d, name, *args):
    sock = os.path.join(d, name + ".sock")
    p = subprocess.Popen([os.path.join(build, "jprofd"), "--socket", sock, "--rate", "99"] +
                         list(args), stderr=open(os.path.join(d, name + ".log"), "w"))
    for _ in range(600):   # up to 60 s on a loaded machine
        if os.path.exists(sock):
            break
        time.sleep(0.1)
    return p, sock


def start_load(d, nfuncs):
    src = os.path.join(d, "gen.c")
    gen_c(src, nfuncs)
    return [subprocess.Popen(["sh", "-c", "while :; do gcc -O2 -c -o %s/gen.o %s; done"
                              % (d, src)]),
            subprocess.Popen(["python3", "-c", "while True: sum(i * i for i in range(1000))"])]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def hostview_main(build, build_no, secs, nfuncs):
    import json
    daemons = []
    ctl = os.path.join(build, "jprofctl")
    with bench_dir() as (d, procs):
        for name, b in (("addrs", build), ("noaddrs", build_no)):
            p, sock = start_daemon(b, d, name)
            procs.append(p)
            daemons.append((name, p, sock))
        procs += start_load(d, nfuncs)
        print("%8s %8s %12s %8s %9s %10s" % ("t_s", "daemon", "hv_bytes", "buckets", "samples",
                                             "rss_kib"))
        t0 = time.monotonic()
        while True:
            time.sleep(min(30, max(0, secs - (time.monotonic() - t0))))
            for name, p, sock in daemons:
                st = json.loads(subprocess.run([ctl, "--socket", sock, "status", "--json"],
                                               capture_output=True, text=True, check=True).stdout)
                hv = st["status"]["hostview"]
                print("%8.0f %8s %12d %8d %9d %10d" % (time.monotonic() - t0, name, hv["bytes"],
                                                      hv["buckets"], hv["samples"], rss_kib(p.pid)))
            sys.stdout.flush()
            if time.monotonic() - t0 >= secs:
                break
        env = go_env(d)
        for name, p, sock in daemons:
            pb = os.path.join(d, name + ".pb.gz")
            subprocess.run([ctl, "--socket", sock, "profile", "--last", "%ds" % secs, "-f",
                            "pprof", "-o", pb], check=True)
            # -symbolize=none: pprof would run addr2line over every binary.
            raw = subprocess.run(["go", "tool", "pprof", "-symbolize=none", "-raw", pb],
                                 capture_output=True, text=True, env=env, check=True).stdout
            nlocs = len(re.findall(r"^\s*\d+: 0x", raw.split("Locations", 1)[-1], re.M))
            col = subprocess.run([ctl, "--socket", sock, "profile", "--last", "%ds" % secs, "-f",
                                  "collapsed"], capture_output=True, text=True, check=True).stdout
            print("%s: profile --last %ds: pprof %d bytes, %d locations; collapsed %d stacks"
                  % (name, secs, os.path.getsize(pb), nlocs, len(col.splitlines())))


def main():
    if sys.argv[1] == "--hostview":
        hostview_main(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 300,
                      int(os.environ.get("BENCH_FUNCS", "3000")))
        return
    build = sys.argv[1]
    secs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    nfuncs = int(os.environ.get("BENCH_FUNCS", "3000"))
    with bench_dir() as (d, procs):
        p, sock = start_daemon(build, d, "jprofd")
        procs.append(p)
        procs += start_load(d, nfuncs)
        time.sleep(2)
        pb = os.path.join(d, "host.pb.gz")
        subprocess.run([os.path.join(build, "jprofctl"), "--socket", sock, "record", "--all",
                        "-d", "%ds" % secs, "-i", "10ms", "-o", pb], check=True,
                       stdout=subprocess.DEVNULL)
        env = go_env(d)
        raw = subprocess.run(["go", "tool", "pprof", "-raw", pb], capture_output=True, text=True,
                             env=env, check=True).stdout
        top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=5", pb],
                             capture_output=True, text=True, env=env, check=True).stdout
        with open(os.path.join(d, "raw.txt"), "w") as f:
            f.write(raw)
        rep = os.path.join(d, "replay.tsv")
        n = convert(raw, rep)
        print("recorded %d s of the whole host: %d samples, pprof %d bytes; go tool pprof -top:"
              % (secs, n, os.path.getsize(pb)))
        print("\n".join(top.splitlines()[:12]))
        sys.stdout.flush()
        subprocess.run([os.path.join(build, "bench", "store_addrs"), rep], check=True)


main()
