"""Issue 29, item 6: the first screen of a host flame graph. A program with a
tall, thin tower (tests/progs/tower.c: recursion 300 deep, cut at the
daemon's depth limit, a fifth of its CPU) beside wide, flat work (four
functions, four fifths) makes a graph thousands of pixels high. Opened in
headless Chromium in a 1400x900 window, the first screen, before any
scrolling, must show the root frame and labelled frames covering at least
80% of the page's width (the page used to open on the empty top of the
graph with the tower's one column). Search, zoom, reset, the icicle switch
and the tooltip still work on that page (flamegraph_check.js --expect)."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

FLAT = ("flat_a", "flat_b", "flat_c", "flat_d")
# Deep enough that the graph is taller than two windows (17 px a row).
MIN_DEPTH = 110


def cpu_seconds(pid):
    """User + system CPU time of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(c, comm, fmt):
    r = c.request("profile", timeout=60, last_s=60, comm=comm, format=fmt)
    jt.check(r.get("ok") and r.get("type") == "profile", "profile failed: %r" % (
        {k: v for k, v in r.items() if k != "data"},))
    return r["data"]


def shape(stacks):
    """(samples, samples through the flat functions, the deepest tower stack)."""
    flat = jt.samples_matching(stacks, lambda f: any(n in f for n in FLAT))
    deepest = max([len(jt.frames_of(s)) for s in stacks if "climb" in jt.frames_of(s)] or [0])
    return jt.total_samples(stacks), flat, deepest


def main(t):
    missing = jt.browser_missing()
    if missing:
        raise jt.Skip("browser check not installed: " + ", ".join(missing))
    d = t.start_daemon("--rate", "99", "--host-bucket", "2")
    c = d.client()
    # Its own name: the comm filter then selects only this process.
    comm = "tower%04x" % random.getrandbits(16)
    w = t.spawn([t._copy_bin(t.prog("tower"), comm), "60"], settle=0.1)

    with t.case("a host flame graph with a tower opens on its root and widest frames"):
        # Its CPU time, not the wall clock: a loaded machine gives it less.
        jt.wait_until(lambda: cpu_seconds(w.pid) >= 2.0, 60, interval=0.2,
                      what="2 s of CPU time of %s" % comm)

        def tall_and_wide():
            n, flat, deepest = shape(jt.parse_collapsed(profile(c, comm, "collapsed")))
            return (n, flat, deepest) if n >= 150 and flat >= 0.5 * n and deepest >= MIN_DEPTH else None
        n, flat, deepest = jt.wait_until(tall_and_wide, 60, interval=0.5,
                                         what="%s's tower and flat work in the host view" % comm)
        jt.log("host view of %s: %d samples, %d in the flat functions, tower %d frames deep"
               % (comm, n, flat, deepest))
        html = os.path.join(t.mkdtemp("flame-"), "host.html")
        with open(html, "w") as f:
            f.write(profile(c, comm, "html"))
        shot = os.path.join(t.mkdtemp("shot-"), "first-screen.png")
        res = jt.browser_run("flamegraph_check.js",
                             ["--html", html, "--first-screen", "--expect", "flat_a",
                              "--screenshot", shot], "first screen of %s" % html)
        fs = res.get("first_screen", {})
        jt.log("first screen: %s" % json.dumps({k: v for k, v in fs.items() if k != "root"}))
        jt.check(fs.get("page_height", 0) > 2 * fs.get("window_height", 1),
                 "the graph is not taller than two windows (%r px): the check proves nothing"
                 % fs.get("page_height"))
    w.kill()


jt.run(main)
