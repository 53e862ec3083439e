"""Issue 27, point 4: Go programs are named and reach the Go runtime's
roots. A default `go build` binary has .symtab; one built with -ldflags=-s
(as Debian builds go and link) has only .gopclntab, the table the Go
runtime names its own frames with, which the daemon reads when .symtab is
missing: before, every frame of such a binary was `gospin_stripped+0x...`.
Go keeps frame pointers but emits no .eh_frame: the stripped binary is
walked by frame pointers (a frameless leaf hides its caller there, as it
does for perf), the other by its .debug_frame."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def build(t, out_dir, name, *flags):
    src = os.path.join(os.environ.get("JPROF_SOURCE_DIR", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")), "tests", "progs", "gospin")
    work = t.mkdtemp("gobuild-")
    env = dict(os.environ, HOME=work, GOCACHE=os.path.join(work, "cache"),
               GOPATH=os.path.join(work, "gopath"), CGO_ENABLED="0", GOFLAGS="-mod=mod")
    out = os.path.join(out_dir, name)
    r = subprocess.run(["go", "build"] + list(flags) + ["-o", out, "."], cwd=src, env=env,
                       capture_output=True, text=True, timeout=300)
    jt.check(r.returncode == 0, "go build %s: %s" % (" ".join(flags), r.stderr))
    os.chmod(out, 0o755)
    return out


def sections(path):
    r = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True)
    return {f for line in r.stdout.splitlines() for f in line.split() if f.startswith(".")}


def record(t, d, pid):
    out = os.path.join(t.outdir(), "go.collapsed")
    t.ctl(["record", "--pid", str(pid), "-d", "3s", "-o", out, "-f", "collapsed",
           "--no-progress"], user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        return jt.parse_collapsed(f.read())


def main(t):
    if not shutil.which("go"):
        raise jt.Skip("go (Debian package golang-go) is not installed")
    bindir = t.mkdtemp("gobin-", owner="nobody")
    full = build(t, bindir, "gospin")
    stripped = build(t, bindir, "gospin_stripped", "-ldflags=-s")
    jt.check(".symtab" in sections(full) and ".symtab" not in sections(stripped) and
             ".gopclntab" in sections(stripped),
             "the builds: %s / %s" % (sorted(sections(full)), sorted(sections(stripped))))
    d = t.start_daemon()

    for path, chain in ((full, ["main.main", "main.outer", "main.middle", "main.leaf"]),
                        (stripped, ["main.main", "main.outer"])):
        name = os.path.basename(path)
        with t.case("%s: main.main;main.outer...main.leaf under runtime.main" % name):
            w = t.spawn([path, "60s"], what=name)
            stacks = record(t, d, w.pid)
            total = jt.total_samples(stacks)
            good = jt.samples_matching(
                stacks, lambda f: jt.has_seq(f, chain) and "main.leaf" in f and
                "runtime.main" in f and f[0].startswith("runtime.goexit"))
            raw = jt.samples_matching(stacks, lambda f: any(x.startswith(name + "+") for x in f))
            jt.log("%s: %d of %d samples named down from runtime.goexit;runtime.main; "
                   "%d with an unnamed frame" % (name, good, total, raw))
            jt.check(total >= 20 and good >= 0.8 * total,
                     "%s: %d of %d samples have runtime.goexit..runtime.main..%s..main.leaf:\n%s"
                     % (name, good, total, ";".join(chain), jt.top_stacks(stacks)))
            w.kill()


jt.run(main)
