"""jprofctl and jprofd command lines: help, usage errors (exit 2), daemon
not running (exit 3), status as an unprivileged user, JPROFD_SOCKET,
--format json, Ctrl-C writing the partial profile, jprofctl formats and the
bash completion of --format."""
import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def out_of(r):
    return (r.stdout or "") + (r.stderr or "")


def contains_value(obj, value):
    if obj == value:
        return True
    if isinstance(obj, dict):
        return any(contains_value(v, value) for v in obj.values())
    if isinstance(obj, list):
        return any(contains_value(v, value) for v in obj)
    return False


def main(t):
    missing = os.path.join(t.mkdtemp("nosock-"), "absent.sock")

    with t.case("--help on every command exits 0 with usage"):
        for args in (["--help"], ["record", "--help"], ["status", "--help"]):
            r = t.ctl(args, user="nobody", timeout=10)
            jt.check_eq(r.returncode, 0, "jprofctl %s exit code" % " ".join(args))
            jt.check("usage" in out_of(r).lower(), "jprofctl %s does not mention usage:\n%s"
                     % (" ".join(args), out_of(r)))
        r = t.ctl(["record", "--help"], timeout=10)
        for opt in ("--pid", "--all", "--format", "--threads", "--no-progress"):
            jt.check(opt in out_of(r), "record --help does not mention %s" % opt)

    with t.case("usage errors exit 2 before contacting the daemon"):
        for args in (["record", "--pid", "1", "-d", "banana"],
                     ["record", "--pid", "1", "-d", "-5s"],
                     ["record", "--pid", "1", "-i", "fast"],
                     ["record", "--pid", "notapid"],
                     ["record", "-d", "1s"],
                     ["record", "--pid", "1", "--all"],
                     ["record", "--pid", "1", "--bogus-option"],
                     ["frobnicate"]):
            r = t.ctl(args, socket_path=missing, timeout=10)
            jt.check_eq(r.returncode, 2, "jprofctl %s exit code (stderr: %r)"
                        % (" ".join(args), r.stderr))
            jt.check(r.stderr.strip(), "jprofctl %s: no message on stderr" % " ".join(args))

    with t.case("daemon not running: exit 3 with a message"):
        for args in (["status"], ["record", "--pid", "1", "-d", "1s"]):
            r = t.ctl(args, socket_path=missing, timeout=10)
            jt.check_eq(r.returncode, 3, "jprofctl %s on a missing socket" % " ".join(args))
            jt.check(r.stderr.strip(), "no message on stderr")
        r = t.ctl(["status"], env={"JPROFD_SOCKET": missing}, timeout=10)
        jt.check_eq(r.returncode, 3, "jprofctl status with JPROFD_SOCKET=<missing>")

    with t.case("formats: the table, --names, and --format takes exactly those names"):
        r = t.ctl(["formats", "--names"], user="nobody", socket_path=missing, timeout=10,
                  check_rc=0)
        names = r.stdout.split()
        for want in ("collapsed", "raw", "json", "html", "pprof", "text"):
            jt.check(want in names, "formats --names lacks %s: %r" % (want, names))
        jt.check_eq(len(set(names)), len(names), "formats --names: names listed twice")
        r = t.ctl(["formats"], user="nobody", socket_path=missing, timeout=10, check_rc=0)
        lines = r.stdout.splitlines()
        jt.check(lines and lines[0].split()[0] == "NAME", "formats: no header:\n%s" % r.stdout)
        rows = {ln.split()[0]: ln.split() for ln in lines[1:] if ln.strip()}
        jt.check_eq(sorted(rows), sorted(names), "formats table rows vs formats --names")
        jt.check(".pb.gz" in rows["pprof"] and "binary" in rows["pprof"],
                 "formats: pprof row %r" % rows["pprof"])
        for name in ("html", "json", "collapsed"):
            jt.check("text" in rows[name] and "binary" not in rows[name],
                     "formats: %s row %r" % (name, rows[name]))
        jt.check(".raw.json" in rows["raw"], "formats: raw row %r" % rows["raw"])
        r = t.ctl(["record", "--help"], timeout=10, check_rc=0)
        for name in names:
            jt.check(name in r.stdout, "record --help does not name format %s" % name)
        r = t.ctl(["--help"], timeout=10, check_rc=0)
        jt.check("formats" in r.stdout, "jprofctl --help does not list the formats command")
        # Every listed name (and the alias folded) passes the usage check and
        # the client goes on to connect (exit 3 on the missing socket).
        for name in names + ["folded"]:
            r = t.ctl(["record", "--pid", "1", "-d", "1s", "--format", name],
                      socket_path=missing, timeout=10)
            jt.check_eq(r.returncode, 3, "record --format %s exit code (stderr %r)"
                        % (name, r.stderr))
        for args in (["record", "--pid", "1", "--format", "svg"],
                     ["profile", "-f", "PPROF"],
                     ["formats", "--bogus"],
                     ["formats", "extra"]):
            r = t.ctl(args, socket_path=missing, timeout=10)
            jt.check_eq(r.returncode, 2, "jprofctl %s exit code (stderr %r)"
                        % (" ".join(args), r.stderr))
        r = t.ctl(["record", "--pid", "1", "--format", "svg"], socket_path=missing, timeout=10)
        jt.check("svg" in r.stderr and "pprof" in r.stderr,
                 "unknown format: the message names neither it nor the known ones: %r"
                 % r.stderr)

    with t.case("bash completion offers the names of jprofctl formats --names"):
        comp = os.path.join(os.environ.get("JPROF_SOURCE_DIR", os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..")),
            "packaging", "completion", "jprofctl.bash")
        names = t.ctl(["formats", "--names"], timeout=10, check_rc=0).stdout.split()

        def complete(*words):
            script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                      '_jprofctl; printf "%s\\n" "${COMPREPLY[@]}"')
            r = jt.subprocess.run(["bash", "-c", script, "bash", comp, t.jprofctl] + list(words),
                                  stdin=jt.subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=20)
            jt.check_eq(r.returncode, 0, "completion of %r (stderr %r)" % (words, r.stderr))
            return r.stdout.split()

        jt.check_eq(complete("record", "--pid", "1", "--format", ""), names,
                    "completion of record --format")
        jt.check_eq(complete("profile", "-f", "p"), [n for n in names if n.startswith("p")],
                    "completion of profile -f p")
        jt.check("formats" in complete("f"), "completion of commands lacks formats")
        jt.check_eq(sorted(complete("formats", "--")), ["--help", "--names"],
                    "completion of formats options")

    with t.case("jprofd --help and --version exit 0"):
        for arg in ("--help", "--version"):
            r = jt.subprocess.run([t.jprofd, arg], stdin=jt.subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=10)
            jt.check_eq(r.returncode, 0, "jprofd %s exit code (stderr %r)" % (arg, r.stderr))
            jt.check(out_of(r).strip(), "jprofd %s printed nothing" % arg)

    d = t.start_daemon()

    with t.case("status over the socket has the documented shape"):
        c = d.client()
        st = c.status()
        for key, typ in (("version", str), ("protocol", int), ("pid", int), ("uptime_ms", int),
                         ("sampler", dict), ("sessions", dict), ("clients", int),
                         ("peer", dict)):
            jt.check(isinstance(st.get(key), typ), "status.%s is %r, want %s"
                     % (key, st.get(key), typ.__name__))
        jt.check_eq(st["protocol"], 1, "status.protocol")
        jt.check_eq(st["pid"], d.pid, "status.pid")
        jt.check(isinstance(st["sessions"].get("active"), int) and
                 isinstance(st["sessions"].get("list"), list),
                 "status.sessions: %r" % st["sessions"])
        jt.check(isinstance(st["sampler"].get("rate_hz"), int), "status.sampler: %r"
                 % st["sampler"])
        version = st["version"]
        c.close()

    with t.case("jprofctl status as nobody shows the version"):
        r = t.ctl(["status"], user="nobody", socket_path=d.socket, timeout=20, check_rc=0)
        jt.check(version in r.stdout, "version %r not in status output:\n%s"
                 % (version, r.stdout))
        r = t.ctl(["status", "--json"], user="nobody", socket_path=d.socket, timeout=20,
                  check_rc=0)
        try:
            obj = json.loads(r.stdout)
        except ValueError as e:
            raise jt.TestFailure("status --json is not JSON (%s):\n%s" % (e, r.stdout))
        jt.check(contains_value(obj, version), "status --json lacks version %r" % version)

    with t.case("JPROFD_SOCKET selects the socket"):
        r = t.ctl(["status"], user="nobody", env={"JPROFD_SOCKET": d.socket}, timeout=20,
                  check_rc=0)
        jt.check(version in r.stdout, "version not in output:\n%s" % r.stdout)

    with t.case("--format json writes a JSON profile"):
        w = t.workload("spin_chain", 30)
        out = os.path.join(t.outdir(), "p.json")
        t.ctl(["record", "--pid", str(w.pid), "-d", "2s", "-i", "10ms", "--format", "json",
               "-o", out, "--no-progress"], user="nobody", socket_path=d.socket, timeout=30,
              check_rc=0)
        with open(out) as f:
            text = f.read()
        try:
            json.loads(text)
        except ValueError as e:
            raise jt.TestFailure("%s is not JSON (%s): %s" % (out, e, text[:300]))
        for name in ("main", "spin"):
            jt.check(re.search(r'"%s"' % name, text), "JSON profile lacks frame %r" % name)
        w.kill()

    with t.case("-o FILE.raw.json chooses raw (the longest extension), --format folded collapsed"):
        w = t.workload("spin_chain", 30)
        out = os.path.join(t.outdir(), "p.raw.json")
        t.ctl(["record", "--pid", str(w.pid), "-d", "1s", "-i", "10ms", "-o", out,
               "--no-progress"], user="nobody", socket_path=d.socket, timeout=30, check_rc=0)
        with open(out) as f:
            obj = json.load(f)
        jt.check_eq(obj.get("format"), "jprofd-profile", "format of %s" % out)
        r = t.ctl(["record", "--pid", str(w.pid), "-d", "1s", "-i", "10ms", "--format", "folded",
                   "--no-progress"], user="nobody", socket_path=d.socket, timeout=30, check_rc=0)
        stacks = jt.parse_collapsed(r.stdout)
        jt.check(jt.samples_matching(stacks, lambda f: jt.has_seq(f, ["main", "a", "b", "spin"])),
                 "--format folded: no main;a;b;spin stack in:\n%s" % r.stdout[:500])
        w.kill()

    with t.case("Ctrl-C: exit 0 and the partial profile is written"):
        w = t.workload("spin_chain", 60)
        out = os.path.join(t.outdir(), "interrupted.collapsed")
        ctl, _, ctl_err = t.ctl_popen(["record", "--pid", str(w.pid), "-d", "30s", "-o", out,
                                       "--format", "collapsed"],
                                      user="nobody", socket_path=d.socket)
        # Past 100 samples in the daemon (the recording samples from its
        # start gate's opening, not from the request).
        watch = d.client()
        jt.wait_until(lambda: any(s.get("samples", 0) >= 130 for s in
                                  watch.status()["sessions"].get("list", [])), 20, 0.2,
                      "the recording to hold 130 samples")
        watch.close()
        jt.check(ctl.running(), "jprofctl ended early (exit %r)" % ctl.returncode)
        t0 = time.monotonic()
        ctl.signal(signal.SIGINT)
        code = ctl.wait(10)
        with open(ctl_err) as f:
            err = f.read()
        jt.check_eq(code, 0, "jprofctl exit code after SIGINT (stderr %r)" % err[-500:])
        jt.check(time.monotonic() - t0 < 5, "jprofctl took > 5 s to stop after SIGINT")
        jt.check(os.path.isfile(out), "no profile written after SIGINT")
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        n = jt.samples_matching(stacks, lambda f: jt.has_seq(f, ["main", "a", "b", "spin"]))
        jt.check(n >= 100, "partial profile has %d main;a;b;spin samples (want >= 100 "
                 "after ~2 s):\n%s" % (n, jt.top_stacks(stacks)))
        w.kill()
        c = d.client()
        jt.wait_until(lambda: c.status()["sessions"]["active"] == 0, 5, 0.2,
                      "the interrupted session to end")
        c.close()


jt.run(main)
