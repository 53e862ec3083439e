"""The directory reporter (report_dir, daemon/report/): every closed
host-view window becomes a gzipped pprof file that `go tool pprof` reads,
holding that window's samples (a busy program's frames, a duration near the
window's length, at most 100% per CPU), written 0600 without leftovers; a
directory other users could change is refused at start."""
import gzip
import os
import re
import stat
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

NCPU = os.cpu_count()
WINDOW_S = 2
# A window's samples are those its drains delivered; a sample the pipeline
# held back (a symbol table loading) lands in the next window, so one short
# window may show a little more than its CPUs; over three the shifts cancel.
SLACK_ONE = 1.3
SLACK_ALL = 1.1


def reports(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".pb.gz") and not n.startswith("."))


def duration_s(path):
    """The profile's duration_nanos (field 10), read from the protobuf:
    `go tool pprof -raw` prints durations under a second without a unit."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    pos = 0

    def varint():
        nonlocal pos
        v = shift = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7f) << shift
            shift += 7
            if b < 0x80:
                return v

    while pos < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            v = varint()
            if field == 10:
                return v / 1e9
        elif wire == 2:
            n = varint()  # before pos is read again
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            jt.check(False, "%s: wire type %d" % (path, wire))
    return 0.0


def raw(gp, path):
    """(duration s, total cpu seconds, text) of `go tool pprof -raw`."""
    out = gp("-raw", path)
    lines = out.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.strip().startswith("samples/count")]
    jt.check(head, "no sample header:\n%s" % out[:2000])
    cols = [c.replace("[dflt]", "") for c in lines[head[0]].split()]
    ci = cols.index("cpu/nanoseconds")
    cpu_ns = 0
    for ln in lines[head[0] + 1:]:
        m = re.match(r"\s+(\d+(?:\s+\d+)*):", ln)
        if m:
            cpu_ns += int(m.group(1).split()[ci])
        elif ln and not ln.startswith(" "):
            break
    return duration_s(path), cpu_ns / 1e9, out


def main(t):
    with t.case("a directory others can write is refused at start"):
        bad = t.mkdtemp("report-bad-")
        os.chmod(bad, 0o777)
        sock = os.path.join(t.mkdtemp("sock-"), "s")
        r = subprocess.run([t.jprofd, "--socket", sock, "--report-dir", bad, "--rate", "19"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        jt.check(r.returncode != 0, "jprofd started with a world-writable report_dir")
        jt.check("not writable by group or others" in r.stderr, "no reason given:\n%s" % r.stderr)
        jt.check(reports(bad) == [], "files written into the refused directory")

    rdir = t.mkdtemp("report-")
    os.chmod(rdir, 0o700)
    d = t.start_daemon("--rate", "99", "--host-bucket", str(WINDOW_S), "--report-dir", rdir)
    spin = t.workload("spin_chain", 60, settle=0.1)
    gp = jt.GoPprof(t)

    with t.case("each closed window is a pprof file go tool pprof reads, with its samples"):
        jt.wait_until(lambda: len(reports(rdir)) >= 4, 30, interval=0.1,
                      what="four closed windows in the report directory")
        names = reports(rdir)
        jt.log("reports: %r" % names)
        seqs = [int(re.match(r"jprofd-\d+-(\d+)\.pb\.gz$", n).group(1)) for n in names]
        jt.check(seqs == list(range(1, len(seqs) + 1)), "windows missing or repeated: %r" % names)
        seen_spin = 0
        tot_dur = tot_cpu = 0.0
        # The first window opened before the sampler ran: look at the others.
        for n in names[1:4]:
            path = os.path.join(rdir, n)
            st = os.stat(path)
            jt.check(stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0,
                     "%s: mode %o uid %d" % (n, stat.S_IMODE(st.st_mode), st.st_uid))
            dur, cpu_s, out = raw(gp, path)
            jt.log("%s: Duration %.2f s, sampled CPU %.2f s" % (n, dur, cpu_s))
            jt.check(0.5 * WINDOW_S <= dur <= 3 * WINDOW_S,
                     "%s: a %d s window says it lasted %.2f s" % (n, WINDOW_S, dur))
            jt.check(cpu_s <= NCPU * dur * SLACK_ONE,
                     "%s: %.2f s of CPU in %.2f s is more than 100%% per CPU" % (n, cpu_s, dur))
            tot_dur += dur
            tot_cpu += cpu_s
            if re.search(r"\bspin\b", out) and re.search(r"\bb\b", out):
                seen_spin += 1
        jt.check(seen_spin >= 2, "spin_chain's frames in %d of 3 windows" % seen_spin)
        jt.check(tot_cpu <= NCPU * tot_dur * SLACK_ALL,
                 "%.2f s of CPU in three windows of %.2f s: more than 100%% per CPU"
                 % (tot_cpu, tot_dur))

    spin.kill()
    d.stop()
    with t.case("nothing half-written is left behind"):
        left = [n for n in os.listdir(rdir) if not re.match(r"jprofd-\d+-\d+\.pb\.gz$", n)]
        jt.check(left == [], "left in the report directory: %r" % left)


jt.run(main)
