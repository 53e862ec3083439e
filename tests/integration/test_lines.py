"""pprof carries source file and line where debug info has them: for a
program built -O2 -g whose hot loop is an inlined function on a known line,
`go tool pprof -traces` shows the loop's line in line_hot, inlined at the
call's line in line_work, for most samples; a stripped copy whose debug file
lies under the daemon's --debug-root shows the same; with --lines off no
frame has a line."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "progs", "line_spin.c")


def marker_line(marker):
    with open(SRC) as f:
        for i, ln in enumerate(f, 1):
            if marker in ln:
                return i
    raise jt.TestFailure("marker %s not in %s" % (marker, SRC))


def traces(t, d, pid, gp):
    """`go tool pprof -traces` of a 1.5 s pprof recording of pid, as the
    list of (samples, [frame lines, leaf first])."""
    c = d.client(user="nobody")
    rec = c.record(pid=pid, duration_ms=1500, interval_us=5000, format="pprof", progress=False)
    path = os.path.join(t.mkdtemp("pp-"), "%d.pb.gz" % pid)
    with open(path, "wb") as f:
        f.write(rec.data())
    out = gp("-lines", "-traces", path)
    res, cur = [], None
    for ln in out.splitlines():
        if ln.startswith("---"):
            cur = None
            continue
        m = re.match(r"\s*(\d+(?:\.\d+)?)(ms|s|us|ns)?\s{2,}(\S.*)$", ln)
        if m and cur is None:
            scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1, None: 1}[m.group(2)]
            cur = [float(m.group(1)) * scale, [m.group(3).strip()]]
            res.append(cur)
        elif cur is not None and ln.strip():
            cur[1].append(ln.strip())
    jt.check(res, "no traces in go tool pprof -lines -traces:\n%s" % out)
    return res, out


def check_most(tr, out, pred, what):
    """Most of the CPU time of the traces tr satisfies pred."""
    total = sum(n for n, _ in tr)
    good = sum(n for n, fr in tr if pred(fr))
    jt.check(total >= 100e6, "only %d ns of samples" % total)
    jt.check(good >= 0.8 * total, "%d of %d ns of samples start %s:\n%s"
             % (good, total, what, out[:3000]))


def main(t):
    hot, call = marker_line("LINES_HOT"), marker_line("LINES_CALL")
    gp = jt.GoPprof(t)
    want_leaf = r"line_hot \S*/line_spin\.c:%d \(inline\)" % hot
    want_caller = r"line_work \S*/line_spin\.c:%d" % call

    def has_lines(fr):
        # -lines -traces prints "function file:line", the inlined function
        # first, marked "(inline)".
        return (len(fr) >= 2 and re.fullmatch(want_leaf, fr[0]) and
                re.fullmatch(want_caller, fr[1]))

    d = t.start_daemon()
    with t.case("-g binary: the hot loop's line, inlined at the call's line"):
        w = t.workload("line_spin", 60)
        tr, out = traces(t, d, w.pid, gp)
        check_most(tr, out, has_lines, want_leaf + "; " + want_caller)
        w.kill()

    with t.case("stripped binary, debug file under --debug-root: the same lines"):
        root = t.mkdtemp("dbgroot-")
        os.chmod(root, 0o755)
        built = t.prog("line_spin")
        stripped = os.path.join(t.bin_dir, "line_spin_stripped")
        shutil.copy2(built, stripped)
        r = subprocess.run(["readelf", "-n", built], capture_output=True, text=True, timeout=30)
        bid = re.search(r"Build ID: ([0-9a-f]+)", r.stdout).group(1)
        os.makedirs(os.path.join(root, ".build-id", bid[:2]))
        dbg = os.path.join(root, ".build-id", bid[:2], bid[2:] + ".debug")
        subprocess.run(["objcopy", "--only-keep-debug", built, dbg], check=True, timeout=30)
        subprocess.run(["strip", "--strip-all", stripped], check=True, timeout=30)
        os.chmod(stripped, 0o755)
        r = subprocess.run(["readelf", "-S", stripped], capture_output=True, text=True, timeout=30)
        jt.check(".debug_line" not in r.stdout and ".symtab" not in r.stdout,
                 "strip left debug info or symbols:\n%s" % r.stdout)
        d2 = t.start_daemon("--debug-root", root, name="jprofd-dbgroot")
        w = t.spawn([stripped, "60"], what="line_spin_stripped")
        tr, out = traces(t, d2, w.pid, gp)
        check_most(tr, out, has_lines, want_leaf + "; " + want_caller)
        w.kill()
        d2.stop()

    with t.case("--lines off: no file:line"):
        d3 = t.start_daemon("--lines", "off", name="jprofd-nolines")
        w = t.workload("line_spin", 60)
        tr, out = traces(t, d3, w.pid, gp)
        jt.check(not re.search(r"line_spin\.c:\d", out), "lines despite --lines off:\n%s"
                 % out[:3000])
        jt.check(re.search(r"\bline_work\b", out), "line_work missing:\n%s" % out[:3000])
        w.kill()
        d3.stop()


jt.run(main)
