"""Host-view windows as `go tool pprof` reads them: the host view merges
whole windows (1 s ones for the newest 10 buckets, issue 27 item 8: a
profile of the last 10 s held 10 to 20 s of samples with 10 s windows; now
within 10% of 10 s). Its duration must say what it holds: with every CPU busy, `go tool pprof` must show at
most 100% per CPU (total sampled CPU time / duration <= number of CPUs),
and the duration must be the span the summary reports (the merged
buckets' real start to their last drain). Same for an HTTP scrape."""
import base64
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

NCPU = os.cpu_count()
# Sampling noise at 99 Hz (ticks land on a CPU or not) and a drain's jitter.
SLACK = 1.06


def go_env(t):
    home = t.mkdtemp("gohome-")
    return dict(os.environ, HOME=home, PPROF_TMPDIR=home, GOCACHE=os.path.join(home, "cache"),
                GOTOOLCHAIN="local", GOFLAGS="", GOPROXY="off", GOTELEMETRY="off")


def pprof_raw(path, env):
    """(duration s, total of the cpu/nanoseconds values, raw text) as
    `go tool pprof -raw` reads the file."""
    r = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True,
                       timeout=120, env=env, stdin=subprocess.DEVNULL)
    jt.check(r.returncode == 0, "go tool pprof -raw %s failed:\n%s" % (path, r.stderr))
    m = re.search(r"^Duration: (.*)$", r.stdout, re.M)
    jt.check(m, "no Duration in go tool pprof -raw output:\n%s" % r.stdout[:2000])
    # "13.0 s", "19.52s", "1m2.5s", "950ms"
    parts = re.findall(r"([\d.]+)\s*(h|ms|m|s)?", m.group(1))
    jt.check(parts, "Duration %r" % m.group(1))
    dur = sum(float(v) * {"h": 3600, "m": 60, "s": 1, "": 1, "ms": 0.001}[u] for v, u in parts)
    lines = r.stdout.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.strip().startswith("samples/count")]
    jt.check(head, "no sample header in go tool pprof -raw output:\n%s" % r.stdout[:2000])
    cols = [c.replace("[dflt]", "") for c in lines[head[0]].split()]
    ci = cols.index("cpu/nanoseconds")
    cpu_ns = 0
    for ln in lines[head[0] + 1:]:
        m = re.match(r"\s+(\d+(?:\s+\d+)*):", ln)
        if m:
            cpu_ns += int(m.group(1).split()[ci])
        elif ln and not ln.startswith(" "):
            break
    return dur, cpu_ns / 1e9, r.stdout


def check_per_cpu(what, dur, cpu_s):
    pct = 100.0 * cpu_s / dur if dur else float("inf")
    jt.log("%s: Duration %.2f s, total sampled CPU %.2f s = %.0f%% (%d CPUs)"
           % (what, dur, cpu_s, pct, NCPU))
    jt.check(cpu_s > 0.5 * dur, "%s: only %.2f s of CPU in %.2f s with every CPU busy"
             % (what, cpu_s, dur))
    jt.check(cpu_s <= NCPU * dur * SLACK,
             "%s: %.2f s of CPU in a %.2f s profile is %.0f%%, more than 100%% per CPU (%d CPUs)"
             % (what, cpu_s, dur, pct, NCPU))


def main(t):
    usock = os.path.join(t.mkdtemp("http-"), "http.sock")
    d = t.start_daemon("--rate", "99", "--http-socket", usock)
    c = d.client()
    env = go_env(t)
    spin = t.prog("spin_chain")
    busy = [t.spawn([spin, "120"], settle=0.1) for _ in range(NCPU)]

    with t.case("profile --last 10s: duration within 10% of 10 s = merged span, <= 100% per CPU"):
        # Enough data that the last 10 s reach into the previous bucket.
        jt.wait_until(lambda: c.status()["hostview"]["span_ms"] >= 13000, 40,
                      interval=0.5, what="13 s in the host view")
        jt.log("host view: %r" % c.status()["hostview"])
        out = os.path.join(t.mkdtemp("out-"), "x.pb.gz")
        t.ctl(["profile", "--last", "10s", "-o", out], socket_path=d.socket, check_rc=0)
        dur, cpu_s, _ = pprof_raw(out, env)
        check_per_cpu("profile --last 10s", dur, cpu_s)
        # The windows mostly in the last 10 s: within 10% of 10 s (a drain's
        # lag and half a 1 s window at either end).
        jt.check(9.0 <= dur <= 11.0, "Duration %.2f s for the 10 s asked for" % dur)

    with t.case("the pprof duration is the span the summary reports"):
        r = c.request("profile", timeout=60, last_s=10, format="pprof")
        jt.check(r.get("ok"), "profile failed: %r" % {k: v for k, v in r.items() if k != "data"})
        s = r["summary"]
        jt.log("summary: %r" % {k: v for k, v in s.items() if k.endswith("_ms")})
        path = os.path.join(t.mkdtemp("out-"), "y.pb.gz")
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        dur, cpu_s, _ = pprof_raw(path, env)
        check_per_cpu("profile request", dur, cpu_s)
        # go tool pprof prints the duration to 0.1 s
        jt.check(abs(dur * 1000 - s["span_ms"]) <= 100,
                 "pprof Duration %.3f s, summary span_ms %d" % (dur, s["span_ms"]))
        jt.check_eq(s["duration_ms"], s["span_ms"], "summary duration_ms")
        jt.check(abs(s["to_ms"] - s["from_ms"] - s["span_ms"]) <= 1,  # each rounded to ms
                 "to_ms - from_ms is not span_ms: %r" % s)
        # The open window ends at the last drain (every second), and the data
        # starts about when the 10 s asked for do.
        jt.check(-2000 <= s["to_ms"] <= 0 and s["from_ms"] <= -9000, "summary: %r" % s)

    with t.case("an HTTP scrape of 5 s: duration = its drains, <= 100% per CPU"):
        r = subprocess.run(["curl", "-sS", "-f", "--max-time", "60", "--unix-socket", usock,
                            "-o", os.path.join(d.dir, "scrape.pb.gz"),
                            "http://localhost/debug/pprof/profile?seconds=5"],
                           capture_output=True, timeout=70)
        jt.check(r.returncode == 0, "curl of the scrape failed: %s" % r.stderr)
        dur, cpu_s, _ = pprof_raw(os.path.join(d.dir, "scrape.pb.gz"), env)
        check_per_cpu("scrape of 5 s", dur, cpu_s)
        # From the drain before the scrape began to the last drain before it
        # ended: 5 s give or take a drain interval (1 s).
        jt.check(4.0 <= dur <= 6.0, "Duration %.2f s of a 5 s scrape" % dur)

    for w in busy:
        w.kill()
    c.close()


jt.run(main)
