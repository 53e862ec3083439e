"""Every output format of a real recording (tests/progs/spin_chain, run and
recorded as nobody), read by its real consumer:

- pprof: `go tool pprof -top` and `-raw` (Debian golang-go): sample count,
  hottest function `spin`, thread/tid labels;
- html: headless Chromium via playwright-core (tests/browser): no console
  errors, no network, root and `spin` drawn, search highlights, screenshot
  not blank; also the empty page, hostile names and 100,000 stacks;
- json: the call tree's totals against the daemon's summary and collapsed;
- text: the top self entry is `spin`; the default on a terminal.

Counts inside one recording are compared exactly (a format against the
daemon's own summary of the same recording); across recordings only
fractions can be compared, since two recordings never hold the same samples.

JPROF_UPDATE_DOCS=1 copies the flame graph screenshot to
docs/images/flamegraph.png."""
import base64
import gzip
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]
SRC = os.environ.get("JPROF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
WROTE_RE = re.compile(r"wrote (.+): (\d+) samples, (\d+) stacks \((\w+)\)")


def consumers():
    """Skip (77) only when a consumer is truly missing, and say which."""
    missing = [] if shutil.which("go") else ["go (apt-get install golang-go)"]
    missing += jt.browser_missing()
    if missing:
        raise jt.Skip("consumers not installed: " + ", ".join(missing))


class Go:
    """go tool pprof, offline, writing nothing outside a temp dir."""

    def __init__(self, t):
        home = t.mkdtemp("gohome-")
        self.env = dict(os.environ, HOME=home, PPROF_TMPDIR=home, GOCACHE=os.path.join(home, "cache"),
                        GOTOOLCHAIN="local", GOFLAGS="", GOPROXY="off", GOTELEMETRY="off")

    def pprof(self, *args):
        r = subprocess.run(["go", "tool", "pprof"] + list(args), capture_output=True, text=True,
                           timeout=120, env=self.env, stdin=subprocess.DEVNULL)
        jt.check(r.returncode == 0, "go tool pprof %s failed (%d):\n%s%s"
                 % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout

    def read(self, path):
        """(total samples, hottest function, {label: set(values)}) from -top and -raw."""
        top = self.pprof("-top", "-sample_index=samples", path)
        m = re.search(r"of (\d+) total", top)
        jt.check(m, "no total in go tool pprof -top output:\n%s" % top)
        total = int(m.group(1))
        rows = [ln.split() for ln in top.splitlines() if re.match(r"\s+\d+\s+[\d.]+%", ln)]
        jt.check(rows, "no rows in go tool pprof -top output:\n%s" % top)
        hottest = rows[0][5] if len(rows[0]) > 5 else None
        raw = self.pprof("-raw", path)
        raw_total = 0
        labels = {}
        in_samples = False
        for ln in raw.splitlines():
            if ln.startswith("Samples:"):
                in_samples = True
                continue
            if ln.startswith("Locations"):
                break
            if not in_samples:
                continue
            sm = re.match(r"\s+(\d+)\s+(\d+):", ln)
            if sm:
                raw_total += int(sm.group(1))
            for k, v in re.findall(r"(\w+):\[([^\]]*)\]", ln):
                labels.setdefault(k, set()).add(v)
        jt.check_eq(raw_total, total, "samples in -raw vs -top")
        return total, hottest, labels, top


def browser_check(t, html, *args):
    res = jt.browser_run("flamegraph_check.js", ["--html", html] + list(args),
                         "browser check of %s" % html)
    jt.log("browser: %s" % json.dumps({k: v for k, v in res.items() if k not in ("tooltip",)}))
    return res


# 2 s at 10 ms: ~200 samples of the spinning chain, its share known to ~2
# points, well inside the 10 points the formats must agree within.
def record_file(t, d, pid, name, fmt=None, secs=2):
    out = os.path.join(t.outdir(), name)
    args = ["record", "--pid", str(pid), "-d", "%ds" % secs, "-i", "10ms", "-o", out, "--no-progress"]
    if fmt:
        args += ["--format", fmt]
    r = t.ctl(args, user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
    m = WROTE_RE.search(r.stderr)
    jt.check(m, "jprofctl did not report what it wrote: %r" % r.stderr)
    jt.check(os.path.isfile(out), "jprofctl exited 0 but did not write %s" % out)
    return out, int(m.group(2))


def spin_fraction(stacks):
    total = jt.total_samples(stacks)
    return jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN)) / max(total, 1)


def tree_total_ok(node):
    """Every node: total == self + sum(children totals)."""
    s = sum(tree_total_ok(c) for c in node["children"])
    jt.check(node["total"] == node["self"] + s, "node %r: total %d != self %d + children %d"
             % (node["name"], node["total"], node["self"], s))
    return node["total"]


def tree_path_total(node, path):
    for name in path:
        kids = [c for c in node["children"] if c["name"] == name]
        if not kids:
            return 0
        node = kids[0]
    return node["total"]


def tree_path_anywhere(node, path):
    """Total of path (names, root first) starting at any node below node:
    the user frames above main depend on how far the unwinder got (_start,
    __libc_start_main, __libc_start_call_main)."""
    return tree_path_total(node, path) or max(
        [tree_path_anywhere(c, path) for c in node["children"]] or [0])


def main(t):
    consumers()
    d = t.start_daemon()
    go = Go(t)
    w = t.workload("spin_chain", 120)
    with open("/proc/%d/comm" % w.pid) as f:
        thread_name = f.read().strip()

    ref = {}
    with t.case("collapsed (the reference)"):
        path, n = record_file(t, d, w.pid, "p.collapsed")
        with open(path) as f:
            stacks = jt.parse_collapsed(f.read())
        jt.check_eq(jt.total_samples(stacks), n, "collapsed total vs jprofctl's summary")
        ref["fraction"] = spin_fraction(stacks)
        ref["total"] = n
        jt.check(ref["fraction"] >= 0.8, "spin chain only %.0f%% of collapsed:\n%s"
                 % (100 * ref["fraction"], jt.top_stacks(stacks)))

    with t.case("pprof .pb.gz: go tool pprof -top and -raw"):
        path, n = record_file(t, d, w.pid, "p.pb.gz")
        with open(path, "rb") as f:
            jt.check(f.read(2) == b"\x1f\x8b", "%s is not gzip" % path)
        total, hottest, labels, top = go.read(path)
        jt.log("go tool pprof -top:\n%s" % top)
        jt.check_eq(total, n, "pprof total samples vs the daemon's summary of the same recording")
        jt.check_eq(hottest, "spin", "hottest function in go tool pprof -top")
        jt.check_eq(labels.get("thread"), {thread_name}, "thread label")
        jt.check_eq(labels.get("tid"), {str(w.pid)}, "tid label")
        jt.check_eq(labels.get("pid"), {str(w.pid)}, "pid label")
        jt.check_eq(labels.get("comm"), {thread_name}, "comm label")
        # spin's share (flat) agrees with collapsed's, recording to recording
        m = re.search(r"^\s+(\d+)\s+[\d.]+%.*\sspin$", top, re.M)
        jt.check(m, "no flat row for spin")
        frac = int(m.group(1)) / total
        jt.check(abs(frac - ref.get("fraction", frac)) < 0.1,
                 "spin is %.0f%% in pprof but %.0f%% in collapsed" % (100 * frac, 100 * ref["fraction"]))

    with t.case(".pprof extension and the header go tool pprof shows"):
        path, n = record_file(t, d, w.pid, "p.pprof", secs=1)
        raw = go.pprof("-raw", path)
        jt.check("PeriodType: cpu nanoseconds" in raw and "Period: 10000000" in raw,
                 "period type/period missing:\n%s" % raw[:800])
        jt.check("samples/count cpu/nanoseconds" in raw, "sample types missing:\n%s" % raw[:800])
        jt.check("[FN]" in raw, "mappings without has_functions:\n%s" % raw[-800:])

    with t.case("json tree: totals"):
        path, n = record_file(t, d, w.pid, "p.json")
        with open(path) as f:
            doc = json.load(f)
        jt.check_eq(doc.get("format"), "jprofd-tree", "json format name")
        tree = doc["tree"]
        jt.check_eq(tree_total_ok(tree), n, "tree root total vs the daemon's summary")
        jt.check_eq(doc["meta"]["samples"], n, "meta.samples")
        spin = tree_path_anywhere(tree, ["main", "a", "b", "spin"])
        jt.check(abs(spin / n - ref.get("fraction", spin / n)) < 0.1,
                 "main;a;b;spin is %d of %d in the tree, %.0f%% in collapsed"
                 % (spin, n, 100 * ref.get("fraction", 0)))

    with t.case("text: top self entry is spin"):
        path, n = record_file(t, d, w.pid, "p.txt")
        with open(path) as f:
            text = f.read()
        jt.log("text output:\n%s" % text)
        jt.check(("total: %d samples" % n) in text, "total line missing or wrong (want %d)" % n)
        m = re.search(r"percent  function\n\s+(\d+)\s+([\d.]+)%\s+(\S+)\n", text)
        jt.check(m, "no self table")
        jt.check_eq(m.group(3), "spin", "top self function")
        jt.check(re.search(r"--- 1: \d+ samples \([\d.]+%\)\n  spin\n  b\n  a\n  main\n", text),
                 "the top stack is not spin;b;a;main leaf first")

    with t.case("text is the default on a terminal, collapsed on a pipe"):
        jt.check(shutil.which("script"), "script(1) (bsdutils) is needed for a pty")
        argv = [t.jprofctl, "--socket", d.socket, "record", "--pid", str(w.pid), "-d", "1s",
                "--no-progress"]
        r = subprocess.run(["script", "-qec", " ".join(argv), "/dev/null"], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        jt.check(r.returncode == 0 and "jprofd profile: spin_chain" in r.stdout and
                 "top functions by self samples" in r.stdout,
                 "no text summary on a terminal (exit %d):\n%s" % (r.returncode, r.stdout[-1500:]))
        r = t.ctl(argv[1:], socket_path=None, timeout=60, check_rc=0)
        stacks = jt.parse_collapsed(r.stdout)
        jt.check(jt.total_samples(stacks) > 0, "stdout to a pipe is not collapsed: %r" % r.stdout[:300])

    with t.case("html: Chromium renders the recording"):
        path, n = record_file(t, d, w.pid, "flame.html")
        shot = os.path.join(t.mkdtemp("shot-"), "flamegraph.png")
        res = browser_check(t, path, "--expect", "spin", "--screenshot", shot)
        jt.check_eq(res.get("total"), n, "page total vs the daemon's summary")
        jt.check("spin_chain (pid %d)" % w.pid in res.get("title", ""), "title: %r" % res.get("title"))
        jt.check("%d samples" % n in res.get("title", ""), "title lacks the sample count")
        if os.environ.get("JPROF_UPDATE_DOCS") == "1":
            dst = os.path.join(SRC, "docs", "images", "flamegraph.png")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(shot, dst)
            jt.log("updated %s" % dst)

    with t.case("every format over the socket"):
        c = d.client(user="nobody")
        for fmt, check in (("collapsed", lambda b: jt.parse_collapsed(b)),
                           ("folded", lambda b: jt.parse_collapsed(b)),
                           ("raw", lambda b: json.loads(b)["format"] == "jprofd-profile" or 1 / 0),
                           ("json", lambda b: json.loads(b)["tree"]["total"]),
                           ("html", lambda b: b.startswith("<!DOCTYPE html>") or 1 / 0),
                           ("text", lambda b: "total: " in b or 1 / 0),
                           ("pprof", None)):
            rec = c.record(pid=w.pid, duration_ms=1000, interval_us=10000, format=fmt, progress=False)
            jt.check(rec.profile is not None, "%s: no profile: %s" % (fmt, rec.describe()))
            want_enc = "base64" if fmt == "pprof" else "utf-8"
            jt.check_eq(rec.profile.get("encoding"), want_enc, "%s encoding" % fmt)
            data = rec.data()
            if fmt == "pprof":
                p = os.path.join(t.mkdtemp("sock-"), "s.pb.gz")
                with open(p, "wb") as f:
                    f.write(data)
                gzip.decompress(data)
                total, hottest, _, _ = go.read(p)
                jt.check_eq(total, rec.summary()["samples"], "socket pprof total vs summary")
                jt.check_eq(hottest, "spin", "socket pprof hottest")
            else:
                check(data)
        r = c.request("record", pid=w.pid, duration_ms=1000, format="svg")
        jt.check((r.get("error") or {}).get("code") == "bad_request" and
                 "pprof" in r["error"].get("message", ""),
                 "unknown format: %r" % r)
        c.close()
    w.kill()

    mk = os.environ.get("JPROF_MAKE_PROFILE")
    jt.check(mk and os.access(mk, os.X_OK), "JPROF_MAKE_PROFILE not set (run through ctest)")
    tmp = t.mkdtemp("synth-")

    with t.case("empty profile: every format is valid and says so"):
        for fmt in ("html", "pprof", "json", "text", "collapsed"):
            subprocess.run([mk, fmt, os.path.join(tmp, "empty." + fmt), "empty"], check=True,
                           timeout=60)
        browser_check(t, os.path.join(tmp, "empty.html"), "--empty")
        raw = go.pprof("-raw", os.path.join(tmp, "empty.pprof"))
        jt.check("no samples" in raw, "empty pprof lacks its 'no samples' comment:\n%s" % raw)
        with open(os.path.join(tmp, "empty.json")) as f:
            jt.check_eq(json.load(f)["tree"]["total"], 0, "empty tree total")
        with open(os.path.join(tmp, "empty.text")) as f:
            jt.check("no samples" in f.read(), "empty text lacks 'no samples'")
        jt.check_eq(os.path.getsize(os.path.join(tmp, "empty.collapsed")), 0, "empty collapsed size")

    with t.case("hostile names: Chromium and go tool pprof show them intact"):
        names = os.path.join(tmp, "names.json")
        for fmt in ("html", "pprof"):
            subprocess.run([mk, fmt, os.path.join(tmp, "hostile." + fmt), "hostile", names],
                           check=True, timeout=60)
        browser_check(t, os.path.join(tmp, "hostile.html"), "--names-json", names,
                      "--expect", "</script><script>alert(1)</script>")
        with open(names) as f:
            want = json.load(f)
        # -top shortens C++-looking names ("List<...>" -> "List"); -raw
        # also prints each location's full name.
        raw = go.pprof("-raw", os.path.join(tmp, "hostile.pprof"))
        for n in want:
            jt.check(n in raw, "go tool pprof -raw lacks %r:\n%s" % (n, raw))

    with t.case("100,000 distinct stacks: the page renders (timings measured, not asserted)"):
        subprocess.run([mk, "html", os.path.join(tmp, "big.html"), "big", "100000"], check=True,
                       timeout=120)
        res = browser_check(t, os.path.join(tmp, "big.html"), "--expect", "hot_loop")
        jt.log("100k stacks: %d bytes, %d nodes, load %d ms, search %d ms, zoom %d ms"
               % (res["bytes"], res["nodes"], res["load_ms"], res["search_ms"], res["zoom_ms"]))


jt.run(main)
