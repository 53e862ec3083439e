"""Stripped binaries are symbolized from a debuginfod server: a real
`debuginfod` (Debian's) on loopback serves the separate debug file of a
stripped copy of unwind_chain; jprofd, started with DEBUGINFOD_URLS, names
its functions (main;uw_a;uw_b;uw_c) once the worker has fetched the file,
without the binary or the daemon knowing any local debug directory."""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split()[-1]
    return None


def main(t):
    if not shutil.which("debuginfod"):
        raise jt.Skip("debuginfod (Debian package debuginfod) is not installed")
    srv = t.mkdtemp("dbgsrv-")
    bindir = t.mkdtemp("dbgbin-")
    exe = os.path.join(bindir, "chain_stripped")
    shutil.copy2(os.path.join(t.progs_dir, "unwind_chain_pie"), exe)
    subprocess.run(["objcopy", "--only-keep-debug", exe, os.path.join(srv, "chain.debug")],
                   check=True)
    subprocess.run(["strip", "--strip-all", exe], check=True)
    os.chmod(exe, 0o755)
    bid = build_id(exe)
    jt.check(bid, "no build-id in %s" % exe)

    port = free_port()
    server = jt.Proc(["debuginfod", "-F", srv, "-p", str(port), "-d",
                      os.path.join(srv, "index.sqlite")], "debuginfod",
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % port
    try:
        run_with_server(t, url, exe, bid)
    finally:
        server.kill()


def run_with_server(t, url, exe, bid):
    def served():
        try:
            with urllib.request.urlopen("%s/buildid/%s/debuginfo" % (url, bid), timeout=5) as r:
                return r.status == 200
        except OSError:
            return False
    jt.wait_until(served, 60, interval=0.2, what="debuginfod to index the debug file")

    os.environ["DEBUGINFOD_URLS"] = url
    os.environ["DEBUGINFOD_CACHE_PATH"] = t.mkdtemp("dbgcache-")
    d = t.start_daemon()

    with t.case("a stripped binary's functions are named from debuginfod"):
        w = t.spawn([exe, "chain", "120"], what="chain_stripped")
        chain = ["main", "uw_a", "uw_b", "uw_c"]
        stacks, good, total = {}, 0, 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = os.path.join(t.outdir(), "s.collapsed")
            t.ctl(["record", "--pid", str(w.pid), "-d", "2s", "-o", out, "-f", "collapsed",
                   "--no-progress"], user="nobody", socket_path=d.socket, timeout=60,
                  check_rc=0)
            with open(out) as f:
                stacks = jt.parse_collapsed(f.read())
            total = jt.total_samples(stacks)
            good = sum(c for s, c in stacks.items() if jt.has_seq(jt.frames_of(s), chain))
            if total and good >= 0.9 * total:
                break
        jt.check(total > 0 and good >= 0.9 * total,
                 "%d of %d samples name main;uw_a;uw_b;uw_c within 60 s; top stacks:\n%s"
                 % (good, total, jt.top_stacks(stacks)))
        w.kill()


jt.run(main)
