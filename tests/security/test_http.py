"""Attacks on the HTTP listeners by unprivileged users (issue 10, points 1 and 10).

Point 1, profile data needs authorization everywhere, loopback included:
- the old README setup (loopback, no token): `nobody` asks for the host's
  profile and gets 403 with a message saying how to configure a token, not
  stacks; root over TCP gets the same (TCP has no identity); /metrics stays
  readable and carries no pid, comm, cgroup or other label naming a process;
- with a token and the Unix socket listener: `nobody` and the second user
  get 401 over TCP without the token or with a wrong one, and 401 over the
  Unix socket (not root, not in the group); root over the Unix socket gets
  the profile without a token;
- denials are audit lines, at most a few per second however fast a peer
  asks.

Point 10, HTTP profile slots:
- `nobody`, holding the valid token, opens ten `seconds=600` scrapes with
  distinct filters (eight take every window, the other two get 503) and
  holds them; meanwhile root's `status` on the control socket answers within
  100 ms and root's scrape over the Unix socket is served from the reserve;
- `nobody` hangs up (the process dies): every window and waiting slot is
  free at once (metrics), and a new scrape as `nobody` succeeds promptly;
- `nobody` opens 40 idle connections to the Unix socket listener: it keeps
  16 (the rest are closed at once), and the second user and root are still
  served."""
import base64
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import jproftest as jt  # noqa: E402

TOKEN = "sec-test-token-0123456789abcdef"

# Runs as the attacking user: raw HTTP/1.1 over TCP ("HOST:PORT") or a Unix
# socket ("/path"), so the peer credentials are the attacker's.
ATTACKER = r'''
import base64, json, socket, sys, time

def connect(target):
    if target.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(target)
        return s
    host, port = target.rsplit(":", 1)
    return socket.create_connection((host, int(port)))

def send(target, url, token):
    s = connect(target)
    req = "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" % url
    if token != "-":
        req += "Authorization: Bearer %s\r\n" % token
    s.sendall((req + "\r\n").encode())
    return s

def get(target, url, token):
    s = send(target, url, token)
    s.settimeout(60)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    return {"status": int(lines[0].split()[1]),
            "headers": dict(l.split(": ", 1) for l in lines[1:] if ": " in l),
            "body": base64.b64encode(body).decode()}

mode, target, url, token = sys.argv[1:5]
if mode == "get":
    print(json.dumps(get(target, url, token)))
elif mode == "flood":  # n requests one after the other; statuses counted
    counts = {}
    for _ in range(int(sys.argv[5])):
        st = get(target, url, token)["status"]
        counts[st] = counts.get(st, 0) + 1
    print(json.dumps(counts))
elif mode == "hang":  # n requests (url has %d) held open until killed
    socks = [send(target, url % i, token) for i in range(int(sys.argv[5]))]
    print("sent", flush=True)
    time.sleep(3600)
elif mode == "idle":  # n connections that send nothing; says how many the server closed
    import select
    socks = [connect(target) for _ in range(int(sys.argv[5]))]
    closed = set()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        ready, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.2)
        for s in ready:
            if not s.recv(1):
                closed.add(s)
    print(json.dumps({"open": len(socks) - len(closed), "closed": len(closed)}), flush=True)
    time.sleep(3600)
'''


def tcp_target(d):
    """The daemon listens on port 0 (no race for a free port); its log says which."""
    m = jt.wait_until(lambda: re.search(r"http: listening on 127\.0\.0\.1:0 \(port (\d+)\)",
                                        d.stderr_text()), 10, 0.05, "the HTTP port in the log")
    return "127.0.0.1:%s" % m.group(1)


class Http:
    """HTTP requests made as a given user (root for None)."""

    def __init__(self, t):
        d = t.mkdtemp("attacker-")
        self.script = os.path.join(d, "attacker.py")
        with open(self.script, "w") as f:
            f.write(ATTACKER)
        os.chmod(self.script, 0o644)

    def argv(self, user, mode, target, url, token, *extra):
        return jt.as_user_argv(user, [sys.executable, self.script, mode, target, url, token or "-"]
                               + [str(e) for e in extra])

    def get(self, user, target, url, token=None):
        r = subprocess.run(self.argv(user, "get", target, url, token), capture_output=True,
                           text=True, timeout=90, stdin=subprocess.DEVNULL)
        jt.check(r.returncode == 0, "GET %s%s as %s failed: %s" % (target, url, user or "root",
                                                                 r.stderr))
        doc = json.loads(r.stdout)
        doc["body"] = base64.b64decode(doc["body"])
        jt.log("as %s: GET %s%s -> %d %s" % (user or "root", target, url, doc["status"],
                                            "(%d bytes)" % len(doc["body"])
                                            if doc["body"][:2] == b"\x1f\x8b"
                                            else doc["body"][:300].decode(errors="replace").strip()))
        return doc

    def flood(self, user, target, url, n, token=None):
        r = subprocess.run(self.argv(user, "flood", target, url, token, n), capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
        jt.check(r.returncode == 0, "flood as %s failed: %s" % (user, r.stderr))
        return {int(k): v for k, v in json.loads(r.stdout).items()}


def metrics(http, target, token):
    """The jprofd_http_* numbers, read as root."""
    doc = http.get(None, target, "/metrics", token)
    jt.check_eq(doc["status"], 200, "root's /metrics")
    return {k: int(v) for k, v in re.findall(r"^(jprofd_http_\w+) (\d+)$", doc["body"].decode(), re.M)}


METRIC_LABELS = {"cause", "map", "reason", "mode", "version", "le"}  # le: histogram bounds


def check_metrics_anonymous(body, victim):
    """Counters only: no label but the fixed ones, nothing naming a process."""
    text = body.decode()
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r"^(jprofd_\w+)(\{([^}]*)\})? [0-9.e+-]+$", ln)
        jt.check(m, "unexpected /metrics line %r" % ln)
        for kv in filter(None, (m.group(3) or "").split(",")):
            key = kv.split("=", 1)[0]
            jt.check(key in METRIC_LABELS, "/metrics label %r in %r may identify something" % (key, ln))
    for word in ("spin_chain", "pid=", "comm", "cgroup", ".slice", ".scope", str(victim.pid) + "\""):
        jt.check(word not in text, "/metrics shows %r:\n%s" % (word, text))


def assert_root_status_fast(d, what):
    c = d.client()
    try:
        for _ in range(5):
            t0 = time.monotonic()
            c.status()
            took = time.monotonic() - t0
            jt.check(took < 0.1, "root's status took %.0f ms %s" % (took * 1000, what))
        jt.log("root's status answered within 100 ms %s" % what)
    finally:
        c.close()


def main(t):
    http = Http(t)
    # The victim: another user's process, whose stacks and labels nobody
    # must not read.
    victim = t.workload("spin_chain", 300, user=jt.SECOND_USER)

    with t.case("no token configured (the old README setup): nobody gets 403, not stacks"):
        d1 = t.start_daemon("--http", "127.0.0.1:0", "--rate", "99", name="jprofd-notoken")
        tcp = tcp_target(d1)
        for user in ("nobody", None):
            for url in ("/debug/pprof/profile?seconds=1", "/debug/pprof/profile?seconds=1&pid=%d"
                        % victim.pid):
                r = http.get(user, tcp, url)
                jt.check_eq(r["status"], 403, "%s as %s without a token" % (url, user or "root"))
                jt.check(r["body"][:2] != b"\x1f\x8b", "a profile was served without a token")
                jt.check_eq(r["headers"].get("X-Go-Pprof"), "1", "X-Go-Pprof of the 403")
                msg = r["body"].decode()
                jt.check("http_token_file" in msg and "Authorization: Bearer" in msg,
                         "the 403 does not say how to configure a token: %r" % msg)
        r = http.get("nobody", tcp, "/debug/pprof/heap")
        jt.check_eq(r["status"], 403, "another /debug/pprof/ path without a token")
        r = http.get("nobody", tcp, "/metrics")
        jt.check_eq(r["status"], 200, "/metrics without a token on loopback")
        check_metrics_anonymous(r["body"], victim)
        jt.check("audit: denied: http GET /debug/pprof/profile from 127.0.0.1: 403" in d1.stderr_text(),
                 "no audit line for the denial")
        d1.stop()

    tok = os.path.join(t.mkdtemp("token-"), "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tok, 0o600)
    usock = os.path.join(t.mkdtemp("http-"), "http.sock")
    d = t.start_daemon("--http", "127.0.0.1:0", "--http-token-file", tok,
                       "--http-socket", usock, "--rate", "99")
    tcp = tcp_target(d)

    with t.case("with a token: no or a wrong token gets 401 over TCP, for every path"):
        for url in ("/debug/pprof/profile?seconds=1", "/metrics", "/"):
            for token in (None, TOKEN[:-1] + "X", TOKEN + "X"):
                r = http.get("nobody", tcp, url, token)
                jt.check_eq(r["status"], 401, "%s as nobody with token %r" % (url, token))
                jt.check(r["body"][:2] != b"\x1f\x8b", "a profile was served without the token")

    with t.case("Unix socket: other users get 401 for profiles, /metrics only; root the profile"):
        for user in ("nobody", jt.SECOND_USER):
            r = http.get(user, usock, "/debug/pprof/profile?seconds=1&pid=%d" % victim.pid)
            jt.check_eq(r["status"], 401, "profile as %s over the Unix socket" % user)
            jt.check(r["body"][:2] != b"\x1f\x8b", "a profile was served to %s" % user)
            jt.check("root" in r["body"].decode(), "the 401 does not say who may: %r" % r["body"])
            r = http.get(user, usock, "/metrics")
            jt.check_eq(r["status"], 200, "/metrics as %s over the Unix socket" % user)
            check_metrics_anonymous(r["body"], victim)
        r = http.get(None, usock, "/debug/pprof/profile?seconds=1")
        jt.check_eq(r["status"], 200, "root's profile over the Unix socket")
        jt.check(r["body"][:2] == b"\x1f\x8b", "root's profile is not gzipped pprof")

    with t.case("a flood of denied requests: counted, logged a few lines a second"):
        before = d.stderr_text().count("audit: denied: http")
        m0 = metrics(http, tcp, TOKEN)["jprofd_http_unauthorized_total"]
        t0 = time.monotonic()
        counts = http.flood("nobody", tcp, "/debug/pprof/profile?seconds=1", 300)
        took = time.monotonic() - t0
        jt.check_eq(counts, {401: 300}, "statuses of 300 requests without the token")
        lines = d.stderr_text().count("audit: denied: http") - before
        jt.log("300 denials in %.1f s: %d audit lines" % (took, lines))
        jt.check_eq(metrics(http, tcp, TOKEN)["jprofd_http_unauthorized_total"] - m0, 300,
                    "denials counted")
        jt.check(lines <= 5 * (int(took) + 2), "%d audit lines for 300 denials in %.1f s" % (lines, took))

    with t.case("nobody's hung-up seconds=600 scrapes: slots freed at once, root answered"):
        attacker = jt.Proc(http.argv("nobody", "hang", tcp, "/debug/pprof/profile?seconds=600&comm=hang%d",
                                     TOKEN, 10), "attacker", stdout=subprocess.PIPE)
        jt.check_eq(attacker.popen.stdout.readline().strip(), b"sent", "attacker started")
        jt.wait_until(lambda: metrics(http, tcp, TOKEN).get("jprofd_http_profile_windows") == 8,
                      10, 0.1, "nobody's requests to take all 8 windows")
        m = metrics(http, tcp, TOKEN)
        jt.check_eq(m["jprofd_http_profiles_in_flight"], 8, "waiting requests (2 more got 503)")
        r = http.get("nobody", tcp, "/debug/pprof/profile?seconds=1&comm=another", TOKEN)
        jt.check_eq(r["status"], 503, "a 9th window while 8 are held")
        jt.check("too many profile requests" in r["body"].decode(), "503 message %r" % r["body"])
        assert_root_status_fast(d, "while nobody holds every HTTP window")
        r = http.get(None, usock, "/debug/pprof/profile?seconds=1&comm=root")
        jt.check_eq(r["status"], 200, "root's scrape over the Unix socket while nobody holds 8 windows")

        t0 = time.monotonic()
        attacker.kill()
        jt.wait_until(lambda: (lambda m: m["jprofd_http_profile_windows"] == 0 and
                               m["jprofd_http_profiles_in_flight"] == 0)(metrics(http, tcp, TOKEN)),
                      2, 0.02, "the hung-up requests' windows to be freed")
        freed = time.monotonic() - t0
        m = metrics(http, tcp, TOKEN)
        jt.log("slots freed %.0f ms after nobody hung up; cancelled %d"
               % (freed * 1000, m["jprofd_http_profiles_cancelled_total"]))
        jt.check(m["jprofd_http_profiles_cancelled_total"] >= 8, "cancelled counter %r" % m)
        t0 = time.monotonic()
        r = http.get("nobody", tcp, "/debug/pprof/profile?seconds=1&comm=after", TOKEN)
        took = time.monotonic() - t0
        jt.check_eq(r["status"], 200, "a new scrape as nobody after the hang-up")
        jt.check(took < 5, "the new 1 s scrape took %.1f s" % took)
        assert_root_status_fast(d, "after the hang-up")

    with t.case("nobody's idle connections to the Unix socket: 16 kept, others still served"):
        idle = jt.Proc(http.argv("nobody", "idle", usock, "-", None, 40), "idle attacker",
                       stdout=subprocess.PIPE)
        counts = json.loads(idle.popen.stdout.readline())
        jt.log("nobody's 40 idle connections: %r" % counts)
        jt.check_eq(counts, {"open": 16, "closed": 24}, "nobody's idle connections kept and closed")
        for user in (jt.SECOND_USER, None):
            t0 = time.monotonic()
            r = http.get(user, usock, "/metrics")
            jt.check_eq(r["status"], 200, "/metrics as %s while nobody holds 16 connections"
                        % (user or "root"))
            jt.log("answered in %.0f ms (with the client's start)" % ((time.monotonic() - t0) * 1000))
        r = http.get(None, usock, "/debug/pprof/profile?seconds=1")
        jt.check_eq(r["status"], 200, "root's profile while nobody holds 16 connections")
        idle.kill()


jt.run(main)
