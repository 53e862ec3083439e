"""Kernel addresses never leave the daemon (issue 10, point 5).

A daemon whose /proc/kallsyms shows only zeros (no CAP_SYSLOG, or
kptr_restrict: a supported state) used to name every kernel frame
"[kernel]+0xffffffff8...", handing any user who profiles their own process
the kernel's load address (KASLR). The attack: nobody records its own
read()-heavy process, and asks the host view for it, in every format that
carries frame names (collapsed, raw, pprof), and looks for addresses.

Each daemon runs in a private mount namespace where /proc/kallsyms is
bind-mounted from a crafted copy: all zeros, or real-looking addresses that
name almost nothing (so every kernel address is "unresolved"). Kernel frames
must then be the fixed marker "[kernel]" (one per run of frames), with no
address and no offset in any output."""
import base64
import gzip
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

# A kernel text address as hex (x86-64 kernel half), with or without 0x, or
# any "[kernel]+..." offset form.
ADDRESS = re.compile(r"(?i)(0x)?ffff[0-9a-f]{12}|\[kernel\]\+|0xffff")
KFRAME = "[kernel]_[k]"


def kallsyms_text(kind):
    """A kallsyms file: this host's symbol names with zero addresses, or one
    symbol far below the kernel so that no kernel address resolves."""
    if kind == "sparse":
        return "0000000000001000 T jprof_only_symbol\n"
    with open("/proc/kallsyms") as f:
        return re.sub(r"(?m)^[0-9a-fA-F]+ ", "0000000000000000 ", f.read())


def start_daemon_with_kallsyms(t, kind):
    """A daemon that reads kallsyms of `kind` as /proc/kallsyms."""
    for tool in ("unshare", "mount"):
        if not shutil.which(tool):
            raise jt.Skip("%s (util-linux) not installed" % tool)
    d = t.mkdtemp("kallsyms-")
    path = os.path.join(d, "kallsyms")
    with open(path, "w") as f:
        f.write(kallsyms_text(kind))
    os.chmod(path, 0o444)
    wrapper = os.path.join(d, "jprofd-ns")
    with open(wrapper, "w") as f:
        # unshare and sh exec: the daemon keeps the pid the harness knows.
        f.write("#!/bin/sh\nexec unshare --mount --propagation private -- /bin/sh -c "
                "'mount --bind \"$0\" /proc/kallsyms && exec \"$@\"' %s %s \"$@\"\n"
                % (path, t.jprofd))
    os.chmod(wrapper, 0o755)
    real = t.jprofd
    t.jprofd = wrapper
    try:
        daemon = t.start_daemon("--rate", "99", name="jprofd-%s-kallsyms" % kind)
    finally:
        t.jprofd = real
    with open("/proc/%d/root/proc/kallsyms" % daemon.pid) as f:
        head = f.readline()
    jt.check(head == kallsyms_text(kind).splitlines(True)[0],
             "the daemon does not see the crafted kallsyms (first line %r)" % head)
    return daemon


def no_addresses(what, text):
    m = ADDRESS.search(text)
    jt.check(m is None, "%s shows a kernel address: ...%s..."
             % (what, text[max(0, m.start() - 80):m.end() + 40] if m else ""))


def check_collapsed(what, text):
    """Kernel frames are "[kernel]" only, never two in a row, and present in
    most samples of a read()-heavy process."""
    no_addresses(what, text)
    stacks = jt.parse_collapsed(text)
    total = jt.total_samples(stacks)
    jt.check(total > 0, "%s: empty profile" % what)
    kernel = 0
    for s, n in stacks.items():
        frames = jt.frames_of(s)
        kf = [f for f in frames if jt.is_kernel_frame(f)]
        jt.check(all(f == KFRAME for f in kf), "%s: a kernel frame other than %s: %s"
                 % (what, KFRAME, s))
        jt.check(all(not (a == KFRAME and b == KFRAME) for a, b in zip(frames, frames[1:])),
                 "%s: a run of unresolved kernel frames is not one frame: %s" % (what, s))
        if kf:
            kernel += n
    # read(64 KiB) from /dev/zero is mostly kernel time.
    jt.check(kernel >= 0.3 * total, "%s: only %d of %d samples have a kernel frame:\n%s"
             % (what, kernel, total, jt.top_stacks(stacks)))


def check_pprof(t, what, data):
    raw = gzip.decompress(data)
    no_addresses(what + " (protobuf strings)", raw.decode("latin-1"))
    jt.check(b"[kernel]" in raw, "%s: no [kernel] frame name in the profile" % what)
    if not shutil.which("go"):
        jt.log("go not installed: %s checked as bytes only" % what)
        return
    home = t.mkdtemp("gohome-")
    path = os.path.join(home, "p.pb.gz")
    with open(path, "wb") as f:
        f.write(data)
    env = dict(os.environ, HOME=home, PPROF_TMPDIR=home, GOCACHE=os.path.join(home, "cache"),
               GOTOOLCHAIN="local", GOFLAGS="", GOPROXY="off", GOTELEMETRY="off")
    r = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True,
                       timeout=120, env=env, stdin=subprocess.DEVNULL)
    jt.check(r.returncode == 0, "go tool pprof -raw %s failed: %s" % (what, r.stderr))
    # -raw lists every location with its address: all must be 0x0.
    no_addresses(what + " (go tool pprof -raw)", r.stdout)
    jt.check("[kernel]" in r.stdout, "%s: go tool pprof -raw shows no [kernel] frame" % what)


def outputs_have_no_kernel_addresses(t, d, kind):
    w = t.workload("read_zero", 60, user="nobody")
    c = d.client(user="nobody")
    try:
        for fmt in ("collapsed", "raw", "pprof"):
            what = "%s kallsyms: nobody's recording (%s)" % (kind, fmt)
            rec = c.record(pid=w.pid, duration_ms=1500, interval_us=5000, format=fmt,
                           progress=False)
            jt.check(rec.profile is not None, "%s: no profile: %s" % (what, rec.describe()))
            data = rec.data()
            if fmt == "collapsed":
                check_collapsed(what, data)
            elif fmt == "raw":
                no_addresses(what, data)
                jt.check('"[kernel]"' in data, "%s: no [kernel] frame" % what)
            else:
                check_pprof(t, what, data)

        # The host view built the same samples (a recorded thread feeds it).
        def host(fmt):
            r = c.request("profile", timeout=60, pid=w.pid, last_s=60, format=fmt)
            jt.check(r.get("ok") and r.get("type") == "profile", "host profile failed: %r"
                     % ({k: v for k, v in r.items() if k != "data"},))
            return r
        r = jt.wait_until(lambda: (lambda r: r if r["summary"]["samples"] > 20 else None)(
            host("collapsed")), 15, 0.5, "host-view samples of read_zero")
        check_collapsed("%s kallsyms: nobody's host profile (collapsed)" % kind, r["data"])
        no_addresses("%s kallsyms: nobody's host profile (raw)" % kind, host("raw")["data"])
        check_pprof(t, "%s kallsyms: nobody's host profile (pprof)" % kind,
                    base64.b64decode(host("pprof")["data"]))
    finally:
        c.close()
        w.kill()


def main(t):
    for kind in ("zero", "sparse"):
        with t.case("%s kallsyms: no output names a kernel address" % kind):
            d = start_daemon_with_kallsyms(t, kind)
            try:
                outputs_have_no_kernel_addresses(t, d, kind)
            finally:
                d.stop()


jt.run(main)
