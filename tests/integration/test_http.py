"""The HTTP listeners, read by the real scrapers (only 127.0.0.1 is contacted),
set up as docs/operations.md says (a bearer token, also on loopback):

- a real Prometheus server (Debian prometheus) scrapes /metrics every second
  with the token from a credentials_file; its query API shows up == 1 for
  the target and jprofd_samples_total increasing; `promtool check metrics`
  accepts the exposition;
- `go tool pprof -top http://jprof:TOKEN@127.0.0.1:PORT/debug/pprof/profile?seconds=3`
  (the real Go client of the pprof scrape contract; the token as the Basic
  password) prints a profile with the busy workload's `spin` at 99 Hz of its CPU;
  the pid filter keeps only it;
- the contract's errors: text/plain with X-Go-Pprof: 1 (bad seconds, bad
  pid); 503 once 8 distinct profile windows are open, while identical
  requests share one window;
- the Unix socket listener serves root a profile without a token;
- the index page lists the endpoints;
- a non-loopback listener without a token refuses to start, naming the
  flag; a world-readable token file refuses to start; with a token, no or a
  wrong Authorization header gets 401 and the right one 200.

Unprivileged users attacking the listeners: tests/security/test_http.py."""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

TOKEN = "test-token-0123456789abcdef"


def consumers():
    """Skip (77) only when a consumer is truly missing, and say which."""
    missing = []
    for tool, pkg in (("go", "golang-go"), ("prometheus", "prometheus"), ("promtool", "prometheus")):
        if not shutil.which(tool):
            missing.append("%s (apt-get install %s; packaging/install-deps.sh does it)" % (tool, pkg))
    if missing:
        raise jt.Skip("consumers not installed: " + ", ".join(missing))


def get(url, headers=None, timeout=30):
    """(status, headers, body bytes); HTTP errors are results, not exceptions."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def go_env(t):
    home = t.mkdtemp("gohome-")
    return dict(os.environ, HOME=home, PPROF_TMPDIR=home, GOCACHE=os.path.join(home, "cache"),
                GOTOOLCHAIN="local", GOFLAGS="", GOPROXY="off", GOTELEMETRY="off")


def cpu_seconds(pid):
    """User + system CPU time of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pprof_top(t, url, env):
    r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=samples", url],
                       capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    jt.check(r.returncode == 0, "go tool pprof -top %s failed (%d):\n%s%s"
             % (url, r.returncode, r.stdout, r.stderr))
    m = re.search(r"of (\d+) total", r.stdout)
    jt.check(m, "no total in go tool pprof -top output:\n%s%s" % (r.stdout, r.stderr))
    rows = [ln.split() for ln in r.stdout.splitlines() if re.match(r"\s+\d+\s+[\d.]+%", ln)]
    jt.check(rows, "no rows in go tool pprof -top output:\n%s" % r.stdout)
    return int(m.group(1)), rows, r.stdout


class Prometheus:
    def __init__(self, t, target_port, token_file):
        self.dir = t.mkdtemp("prometheus-")
        self.port = jt.free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: jprofd\n"
                    "    authorization:\n      credentials_file: %s\n"
                    "    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % (token_file, target_port))
        self.log = os.path.join(self.dir, "prometheus.log")
        argv = ["prometheus", "--config.file=" + cfg,
                "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                "--web.listen-address=127.0.0.1:%d" % self.port]
        jt.log("starting %s" % " ".join(argv))
        with open(self.log, "wb") as out:
            self.proc = jt.Proc(jt.as_user_argv(None, argv), "prometheus", stdout=out,
                                stderr=subprocess.STDOUT)

    def logs(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-3000:]

    def query(self, q):
        """Instant query: [(labels, float value)]; [] while not ready."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port, urllib.parse.urlencode({"query": q}))
        try:
            status, _, body = get(url, timeout=5)
        except OSError:
            return []
        if status != 200:
            return []
        doc = json.loads(body)
        jt.check_eq(doc.get("status"), "success", "prometheus query status for %s" % q)
        return [(r["metric"], float(r["value"][1])) for r in doc["data"]["result"]]


def main(t):
    consumers()
    port = jt.free_port()
    base = "http://127.0.0.1:%d" % port
    tokdir = t.mkdtemp("token-")
    tok = os.path.join(tokdir, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tok, 0o600)
    auth = {"Authorization": "Bearer " + TOKEN}
    usock = os.path.join(t.mkdtemp("http-"), "http.sock")
    d = t.start_daemon("--http", "127.0.0.1:%d" % port, "--http-token-file", tok,
                       "--http-socket", usock, "--rate", "99")
    w = t.workload("spin_chain", 300)
    env = go_env(t)
    # go tool pprof sends no headers: the token goes as the Basic password.
    gobase = "http://jprof:%s@127.0.0.1:%d" % (TOKEN, port)

    with t.case("index page lists the endpoints"):
        status, hdr, body = get(base + "/", auth)
        jt.check_eq(status, 200, "GET / status")
        jt.check(hdr["Content-Type"].startswith("text/html"), "index Content-Type %r" % hdr["Content-Type"])
        text = body.decode()
        jt.check("/metrics" in text and "/debug/pprof/profile" in text, "index page:\n%s" % text)
        status, _, _ = get(base + "/nope", auth)
        jt.check_eq(status, 404, "GET /nope status")

    with t.case("/metrics: promtool check metrics accepts it"):
        status, hdr, body = get(base + "/metrics", auth)
        jt.check_eq(status, 200, "GET /metrics status")
        jt.check(hdr["Content-Type"].startswith("text/plain; version=0.0.4"),
                 "metrics Content-Type %r" % hdr["Content-Type"])
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                           timeout=60)
        jt.check(r.returncode == 0, "promtool check metrics failed (%d):\n%s%s"
                 % (r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")))
        text = body.decode()
        for fam in ("jprofd_samples_total", "jprofd_samples_lost_total{cause=\"map_full\"}",
                    "jprofd_sessions", "jprofd_agents", "jprofd_hostview_buckets",
                    "jprofd_symbols_cache_hits_total", "jprofd_process_resident_memory_bytes",
                    "jprofd_process_cpu_seconds_total{mode=\"user\"}", "jprofd_drain_seconds_total",
                    "jprofd_bpf_sample_duration_seconds_count"):
            jt.check(re.search(r"^%s [0-9.e+]+$" % re.escape(fam), text, re.M),
                     "%s missing from /metrics:\n%s" % (fam, text))

    with t.case("a real Prometheus scrapes it: up == 1, samples counter increases"):
        prom = Prometheus(t, port, tok)
        try:
            up = jt.wait_until(lambda: [v for m, v in prom.query('up{job="jprofd"}') if v == 1.0],
                               60, 0.5, "prometheus to report up == 1 for jprofd")
            jt.log("prometheus: up = %r" % up)
            first = jt.wait_until(lambda: prom.query("jprofd_samples_total"), 30, 0.5,
                                  "jprofd_samples_total in prometheus")
            v1 = first[0][1]
            jt.log("prometheus: jprofd_samples_total = %d" % v1)
            v2 = jt.wait_until(lambda: [v for _, v in prom.query("jprofd_samples_total") if v > v1],
                               30, 0.5, "jprofd_samples_total to increase in prometheus")[0]
            jt.log("prometheus: jprofd_samples_total then = %d" % v2)
            h = prom.query('jprofd_hostview_buckets')
            jt.check(h and h[0][1] >= 1, "prometheus shows no host view buckets: %r" % h)
        except jt.TestFailure:
            jt.log("prometheus log:\n%s" % prom.logs())
            raise
        finally:
            prom.proc.kill()

    with t.case("go tool pprof fetches /debug/pprof/profile?seconds=3: the spinner's samples"):
        t0 = time.monotonic()
        cpu0 = cpu_seconds(w.pid)
        total, rows, out = pprof_top(t, gobase + "/debug/pprof/profile?seconds=3", env)
        cpu_s = cpu_seconds(w.pid) - cpu0
        took = time.monotonic() - t0
        jt.log("go tool pprof -top (%.1f s; the spinner had %.2f s of CPU):\n%s" % (took, cpu_s, out))
        jt.check(took >= 3, "the profile request returned after %.1f s, before its 3 s" % took)
        # Not "on top": on a loaded machine other processes may outrank it.
        # It gets 99 samples per second of its CPU time (some of its time
        # falls outside the 3 s window: half at least).
        spin = sum(int(r[0]) for r in rows if len(r) > 5 and r[5] == "spin")
        jt.check(cpu_s > 0.5 and spin >= 0.5 * 99 * cpu_s,
                 "%d samples in spin for %.2f s of the spinner's CPU at 99 Hz" % (spin, cpu_s))

    with t.case("pid filter: only the workload's samples"):
        status, hdr, body = get(base + "/debug/pprof/profile?seconds=1&pid=%d" % w.pid, auth)
        jt.check_eq(status, 200, "status of a pid-filtered profile")
        path = os.path.join(t.mkdtemp("pprof-"), "pid.pb.gz")
        with open(path, "wb") as f:
            f.write(body)
        total, rows, out = pprof_top(t, path, env)
        jt.log("go tool pprof -top, pid %d:\n%s" % (w.pid, out))
        jt.check_eq(rows[0][5], "spin", "top entry of the pid-filtered profile")
        r = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True,
                           timeout=120, env=env, stdin=subprocess.DEVNULL)
        jt.check(r.returncode == 0, "go tool pprof -raw failed:\n%s" % r.stderr)
        pids = set(re.findall(r"pid:\[(\d+)\]", r.stdout))
        jt.check_eq(pids, {str(w.pid)}, "pid labels of a profile filtered to pid %d" % w.pid)

    with t.case("pprof contract errors: text/plain with X-Go-Pprof: 1"):
        for q, code in (("seconds=abc", 400), ("pid=-3", 400), ("pid=x", 400)):
            status, hdr, body = get(base + "/debug/pprof/profile?" + q, auth)
            jt.check_eq(status, code, "status for ?%s" % q)
            jt.check_eq(hdr.get("X-Go-Pprof"), "1", "X-Go-Pprof header for ?%s" % q)
            jt.check(hdr["Content-Type"].startswith("text/plain"), "Content-Type %r" % hdr["Content-Type"])
            jt.log("?%s -> %d %s" % (q, status, body.decode().strip()))

    def metric(name):
        text = get(base + "/metrics", auth)[2].decode()
        m = re.search(r"^%s (\d+)$" % name, text, re.M)
        return int(m.group(1)) if m else None

    with t.case("at most 8 distinct profile windows, then 503"):
        results = []

        def fetch(q):
            results.append(get(base + "/debug/pprof/profile?seconds=3&" + q, auth, timeout=60))
        threads = [threading.Thread(target=fetch, args=("comm=w%d" % i,)) for i in range(8)]
        for th in threads:
            th.start()
        jt.wait_until(lambda: metric("jprofd_http_profile_windows") == 8, 20, 0.1,
                      "8 profile windows open")
        status, hdr, body = get(base + "/debug/pprof/profile?seconds=1&comm=ninth", auth)
        jt.log("9th window -> %d %s" % (status, body.decode().strip()))
        jt.check_eq(status, 503, "status of a 9th distinct profile request")
        jt.check_eq(hdr.get("X-Go-Pprof"), "1", "X-Go-Pprof of the 503")
        jt.check("too many profile requests" in body.decode(), "503 message: %r" % body)
        for th in threads:
            th.join(60)
        jt.check_eq(sorted(r[0] for r in results), [200] * 8, "statuses of the 8 waiting requests")
        for r in results:
            jt.check_eq(r[1]["Content-Type"], "application/octet-stream", "profile Content-Type")
            jt.check(r[2][:2] == b"\x1f\x8b", "profile is not gzip")

    with t.case("identical requests share one window: 16 at once, all answered alike"):
        results = []
        shared0 = metric("jprofd_http_profiles_shared_total")
        threads = [threading.Thread(target=fetch, args=("pid=%d" % w.pid,)) for _ in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        jt.check_eq(sorted(r[0] for r in results), [200] * 16, "statuses of 16 identical requests")
        shared = metric("jprofd_http_profiles_shared_total") - shared0
        jt.log("16 identical requests: %d joined an open window, %d distinct bodies"
               % (shared, len({r[2] for r in results})))
        # They start within a drain or two of each other: most share.
        jt.check(shared >= 8, "only %d of 16 identical requests shared a window" % shared)
        jt.check(len({r[2] for r in results}) <= 16 - shared, "shared requests got different bytes")

    with t.case("the Unix socket listener: root gets a profile without a token"):
        status, hdr, body = jt.unix_get(usock, "/debug/pprof/profile?seconds=1&pid=%d" % w.pid)
        jt.check_eq(status, 200, "root's profile over %s" % usock)
        path = os.path.join(t.mkdtemp("pprof-"), "unix.pb.gz")
        with open(path, "wb") as f:
            f.write(body)
        total, rows, out = pprof_top(t, path, env)
        jt.check_eq(rows[0][5], "spin", "top entry of the profile read over the Unix socket")

    with t.case("non-loopback without a token refuses to start"):
        p2 = jt.free_port()
        argv = [t.jprofd, "--socket", os.path.join(t.mkdtemp("d2-"), "s.sock"),
                "--http", "0.0.0.0:%d" % p2]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        jt.log("exit %d: %s" % (r.returncode, r.stderr.strip()))
        jt.check(r.returncode != 0, "jprofd started on 0.0.0.0 without a token")
        jt.check("--http 0.0.0.0:%d is not a loopback address" % p2 in r.stderr and
                 "--http-token-file" in r.stderr, "unclear message: %r" % r.stderr)

    with t.case("a token file readable by others refuses to start"):
        os.chmod(tok, 0o644)
        r = subprocess.run([t.jprofd, "--socket", os.path.join(t.mkdtemp("d3-"), "s.sock"),
                            "--http", "127.0.0.1:%d" % jt.free_port(), "--http-token-file", tok],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        jt.log("exit %d: %s" % (r.returncode, r.stderr.strip()))
        jt.check(r.returncode != 0, "jprofd started with a world-readable token file")
        jt.check(tok in r.stderr and "other users" in r.stderr, "unclear message: %r" % r.stderr)
        os.chmod(tok, 0o600)

    with t.case("with a token: none or wrong -> 401, right -> 200"):
        p4 = jt.free_port()
        d4 = t.start_daemon("--http", "0.0.0.0:%d" % p4, "--http-token-file", tok, name="jprofd-token")
        b4 = "http://127.0.0.1:%d" % p4
        for path in ("/metrics", "/", "/debug/pprof/profile?seconds=1"):
            status, hdr, _ = get(b4 + path)
            jt.check_eq(status, 401, "%s without Authorization" % path)
            jt.check(hdr.get("WWW-Authenticate", "").startswith("Bearer"), "no WWW-Authenticate")
            status, _, _ = get(b4 + path, {"Authorization": "Bearer " + TOKEN[:-1] + "X"})
            jt.check_eq(status, 401, "%s with a wrong token" % path)
            status, _, _ = get(b4 + path, {"Authorization": "Bearer " + TOKEN + "X"})
            jt.check_eq(status, 401, "%s with a longer token" % path)
        status, _, _ = get(b4 + "/metrics", {"Authorization": "Basic " + base64.b64encode(
            ("jprof:" + TOKEN + "X").encode()).decode()})
        jt.check_eq(status, 401, "/metrics with a wrong Basic password")
        status, _, _ = get(b4 + "/metrics", {"Authorization": "Basic " + base64.b64encode(
            ("jprof:" + TOKEN).encode()).decode()})
        jt.check_eq(status, 200, "/metrics with the token as the Basic password")
        status, _, body = get(b4 + "/metrics", {"Authorization": "Bearer " + TOKEN})
        jt.check_eq(status, 200, "/metrics with the token")
        jt.check(re.search(r"^jprofd_http_unauthorized_total 10$", body.decode(), re.M),
                 "unauthorized counter:\n%s" % body.decode())
        jt.check("audit: denied: http GET /metrics from 127.0.0.1" in d4.stderr_text(),
                 "no audit line for the denial")
        d4.stop()

    with t.case("SIGTERM with a profile request waiting: answered, clean exit"):
        results = []
        th = threading.Thread(target=lambda: results.append(
            get(base + "/debug/pprof/profile?seconds=60", auth, timeout=60)))
        th.start()
        jt.wait_until(lambda: metric("jprofd_http_profiles_in_flight") == 1, 20, 0.1,
                      "the profile request to wait")
        d.stop()
        th.join(30)
        jt.check(results, "the waiting request got no answer")
        jt.check_eq(results[0][0], 503, "status of a profile request cut by shutdown")


jt.run(main)
