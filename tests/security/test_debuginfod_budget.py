"""Issue 26, point 8: one user cannot use up debuginfod lookups. nobody runs
a program that maps 300 stripped libraries, each with a build-id of its own,
and records it: every library is a debuginfod lookup. Before, the daemon
asked for all of them, in the order asked, so root's stripped program waited
behind nobody's whole queue (0.1 s a lookup here: 30 s), and after 4,096
build-ids no binary was ever looked up again. Now lookups are charged to the
uid whose process maps the file (a burst of 128, then one per 30 s) and
waiting uids take turns: root's program is named within seconds while
nobody's queue drains, and the server sees at most nobody's budget.

The server is a small HTTP server in this test (the protocol libdebuginfod
speaks: GET /buildid/HEX/debuginfo) that logs every lookup, serves the
debug file of root's program and answers everything else 404 after 0.1 s."""
import http.server
import os
import random
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

NLIBS = 300
BURST = 128          # DBGINFOD_UID_BURST
REFILL_S = 30        # DBGINFOD_UID_REFILL_S
MISS_DELAY_S = 0.1
CHAIN = ["main", "uw_a", "uw_b", "uw_c"]

LIB_C = r"""
void jp_spin(long n)
{
	volatile long x = 0;

	for (long i = 0; i < n; i++)
		x += i;
}
"""

WORKLOAD = r"""
import ctypes, sys, time
libs = [ctypes.CDLL(p) for p in sys.argv[2:]]
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for lib in libs:
        lib.jp_spin(200000)
"""


def build_id(path):
    r = subprocess.run(["readelf", "-n", path], capture_output=True, text=True)
    ids = [ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines() if "Build ID" in ln]
    return ids[0] if ids else None


class Server:
    """Logs each build-id asked for; serves the files it has."""

    def __init__(self, files):
        self.files = files      # build-id hex -> path
        self.log = []           # (monotonic time, build-id hex)
        self.mu = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                parts = self.path.split("/")
                bid = parts[2] if len(parts) > 3 and parts[1] == "buildid" else ""
                with outer.mu:
                    outer.log.append((time.monotonic(), bid))
                path = outer.files.get(bid) if parts[-1] == "debuginfo" else None
                if not path:
                    time.sleep(MISS_DELAY_S)
                    self.send_error(404)
                    return
                with open(path, "rb") as f:
                    data = f.read()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def asked(self, ids):
        with self.mu:
            return [b for _, b in self.log if b in ids]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def make_libs(t, d):
    src = os.path.join(d, "spinlib.c")
    with open(src, "w") as f:
        f.write(LIB_C)
    base = os.path.join(d, "spinlib.so")
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-Wl,--build-id=sha1", "-o", base, src],
                   check=True)
    subprocess.run(["strip", "--strip-all", base], check=True)
    old = bytes.fromhex(build_id(base))
    image = open(base, "rb").read()
    jt.check(image.count(old) == 1, "the build-id is not found once in %s" % base)
    paths, ids = [], set()
    for i in range(NLIBS):
        new = random.getrandbits(160).to_bytes(20, "big")
        p = os.path.join(d, "lib%03d.so" % i)
        with open(p, "wb") as f:
            f.write(image.replace(old, new))
        os.chmod(p, 0o755)
        paths.append(p)
        ids.add(new.hex())
    jt.check(build_id(paths[0]) in ids, "the patched copy has build-id %s" % build_id(paths[0]))
    return paths, ids


def chain_named(t, d, pid):
    out = os.path.join(t.outdir(), "victim.collapsed")
    t.ctl(["record", "--pid", str(pid), "-d", "2s", "-o", out, "-f", "collapsed",
           "--no-progress"], socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        stacks = jt.parse_collapsed(f.read())
    total = jt.total_samples(stacks)
    good = jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN))
    return good, total, stacks


def main(t):
    libdir = t.mkdtemp("dbglibs-", owner="nobody")
    paths, ids = make_libs(t, libdir)
    for p in paths:
        os.chown(p, *jt.nobody_ids())

    # Root's stripped program and its debug file, which the server has.
    vdir = t.mkdtemp("dbgvictim-")
    victim = os.path.join(vdir, "chain_stripped")
    shutil.copy2(os.path.join(t.progs_dir, "unwind_chain_pie"), victim)
    debug = os.path.join(vdir, "chain.debug")
    subprocess.run(["objcopy", "--only-keep-debug", victim, debug], check=True)
    subprocess.run(["strip", "--strip-all", victim], check=True)
    vbid = build_id(victim)
    jt.check(vbid, "no build-id in %s" % victim)

    srv = Server({vbid: debug})
    jt._cleanups.append(srv.stop)
    os.environ["DEBUGINFOD_URLS"] = srv.url
    os.environ["DEBUGINFOD_CACHE_PATH"] = t.mkdtemp("dbgcache-")
    d = t.start_daemon()

    with t.case("nobody's 300 build-ids do not hold back root's lookup"):
        script = os.path.join(libdir, "workload.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        t0 = time.monotonic()
        w = t.spawn(["python3", script, "300"] + paths, what="300 libraries", settle=0.5)
        rec, _, _ = t.ctl_popen(["record", "--pid", str(w.pid), "-d", "120s", "-i", "1ms", "-o",
                           os.path.join(t.outdir(), "nobody.collapsed"), "--no-progress"],
                          user="nobody", socket_path=d.socket)
        # The recording names its frames as it drains (every second): once
        # its program has had 3 s of CPU, most libraries have been asked for.
        cpu0 = jt.task_cpu_ns(w.pid)
        jt.wait_until(lambda: jt.task_cpu_ns(w.pid) - cpu0 >= 3e9, 120, interval=0.2,
                      what="3 s of CPU of nobody's workload")
        jt.wait_until(lambda: len(srv.asked(ids)) >= 3, 60, interval=0.1,
                      what="the server to see nobody's lookups")
        queued_at = len(srv.asked(ids))
        v = t.spawn([victim, "chain", "120"], user=None, what="chain_stripped")
        start = time.monotonic()
        good = total = 0
        stacks = {}
        while time.monotonic() - start < 20:
            good, total, stacks = chain_named(t, d, v.pid)
            if total and good >= 0.9 * total:
                break
        took = time.monotonic() - start
        served_before = [b for b in srv.asked(ids | {vbid})]
        pos = served_before.index(vbid) if vbid in served_before else -1
        jt.log("root's program named after %.1f s; nobody had %d lookups served when it "
               "started, %d before root's" % (took, queued_at, pos))
        jt.check(total > 0 and good >= 0.9 * total,
                 "root's stripped program: %d of %d samples named main;uw_a;uw_b;uw_c within "
                 "20 s while nobody's lookups waited (root's lookup came after %d of nobody's):"
                 "\n%s" % (good, total, pos, jt.top_stacks(stacks)))
        v.kill()

    with t.case("nobody's lookups stop at its budget"):
        # Wait for nobody's queue to drain: no new lookup for 3 s.
        state = {"n": -1, "since": time.monotonic()}

        def drained():
            n = len(srv.asked(ids))
            if n != state["n"]:
                state["n"], state["since"] = n, time.monotonic()
            return time.monotonic() - state["since"] >= 3
        jt.wait_until(drained, 120, interval=0.2, what="nobody's lookups to stop")
        asked = srv.asked(ids)
        # The burst, and one more per 30 s since nobody's program started.
        allowed = BURST + int((time.monotonic() - t0) / REFILL_S) + 1
        jt.log("the server saw %d lookups of nobody's %d build-ids (budget %d)"
               % (len(asked), NLIBS, allowed))
        jt.check(len(asked) <= allowed,
                 "nobody's build-ids looked up %d times, budget %d" % (len(asked), allowed))
        jt.check_eq(len(asked), len(set(asked)), "each build-id asked once")
        rec.kill()
        w.kill()


jt.run(main)
