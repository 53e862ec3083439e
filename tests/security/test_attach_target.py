"""Issue 10, point 7: a hostile attach target must not stall the daemon.

nobody runs a fake "JVM" (a process that maps a file named libjvm.so and
catches SIGQUIT) in a mount namespace whose /tmp is a FUSE mount that
never answers. The daemon's attach helper enters that namespace and looks
for the attach socket in /tmp: the FUSE request is read by the server and
never answered, so the helper sleeps uninterruptibly, through SIGTERM and
SIGKILL, until the FUSE server goes away. The daemon must not wait for it:
root's status is answered within 100 ms throughout, the attach times out
(or is cancelled with its recording) on time, the helper is abandoned and
counted, and once the FUSE server is gone it is reaped from the loop: no
zombie is left.

On this machine /dev/fuse is root-only (mode 0600; most distributions make
it 0666 and let users mount FUSE in a user namespace), so the FUSE server
and its mount are staged by root. Everything the attack needs from the
daemon's side is as it would be: the fake JVM runs as nobody, nobody
records it, and the helper meets the FUSE mount in the target's namespace
(at the attach socket, or first at the agent's path when the build is under
/tmp) and sleeps in D state through SIGKILL (asserted). Run against the daemon
before this fix, root's status got no answer for 12 s (until the test
released the FUSE server).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402
import rootwatch as rw  # noqa: E402

NOBODY_PYTHON = "/usr/bin/python3"

# The FUSE server (root, its own mount namespace): mounts /tmp, answers
# INIT, then reads every request and answers none. Prints "ready" and one
# line per request ("op <opcode> pid <requester> <name>").
FUSE_SERVER = r"""
import ctypes, os, struct, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
def check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        print("error %s: %s" % (what, os.strerror(e)), flush=True)
        sys.exit(3)
check(libc.unshare(0x20000), "unshare(CLONE_NEWNS)")
check(libc.mount(None, b"/", None, 16384 | (1 << 18), None), "mount --make-rprivate /")
fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
opts = ("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other" % (fd, uid, gid)).encode()
check(libc.mount(b"jprof-trap", b"/tmp", b"fuse", 2 | 4, opts), "mount fuse on /tmp")
while True:
    buf = os.read(fd, 1 << 20)
    ln, op, unique = struct.unpack_from("<IIQ", buf)
    if op == 26:  # INIT: 7.26, parallel lookups (each helper its own request)
        out = struct.pack("<IIIIHHI", 7, 26, 0, 1 << 18, 0, 0, 4096).ljust(64, b"\0")
        os.write(fd, struct.pack("<IiQ", 16 + len(out), 0, unique) + out)
        print("ready", flush=True)
        continue
    pid = struct.unpack_from("<I", buf, 32)[0]
    name = buf[40:ln].split(b"\0")[0].decode(errors="replace") if op == 1 else ""
    print("op %d pid %d %s" % (op, pid, name), flush=True)
"""

# The fake JVM (nobody): libjvm.so mapped, SIGQUIT caught, nothing else.
FAKE_JVM = r"""
import mmap, signal, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)
signal.signal(signal.SIGQUIT, lambda *a: None)
while True:
    time.sleep(3600)
"""


class FuseTrap:
    """A mount namespace whose /tmp never answers, and fake JVMs in it."""

    def __init__(self, t):
        self.t = t
        self.dir = tempfile.mkdtemp(prefix="jprof-sec-attach-", dir="/var/tmp")
        jt._cleanups.append(lambda: shutil.rmtree(self.dir, ignore_errors=True))
        os.chmod(self.dir, 0o755)
        self.libjvm = os.path.join(self.dir, "libjvm.so")
        with open(self.libjvm, "wb") as f:
            f.write(b"\0" * 4096)
        os.chmod(self.libjvm, 0o644)
        self.log = os.path.join(self.dir, "fuse.log")
        uid, gid = jt.nobody_ids()
        with open(self.log, "wb") as out:
            self.server = jt.Proc(jt.as_user_argv(None, [sys.executable, "-c", FUSE_SERVER,
                                                         str(uid), str(gid)]),
                                  "fuse-trap", stdout=out, stderr=subprocess.STDOUT)
        jt.wait_until(lambda: "ready" in self.text() or "error" in self.text()
                      or not self.server.running(), 10, what="the FUSE server")
        if "ready" not in self.text():
            raise jt.Skip("cannot stage the FUSE /tmp: %s" % self.text().strip())
        jt.log("FUSE trap: pid %d, its /tmp answers nothing" % self.server.pid)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def requests_of(self, pid):
        """The requests process pid made of the trap, each (opcode, name).
        Which path the attach helper meets first depends on the machine: the
        attach socket, or the agent's own path when the build is under /tmp
        (a clone made with mktemp -d)."""
        out = []
        for ln in self.text().splitlines():
            f = ln.split(" ", 4)
            if len(f) >= 4 and f[0] == "op" and f[2] == "pid" and f[3] == str(pid):
                out.append((int(f[1]), f[4] if len(f) > 4 else ""))
        return out

    def fake_jvm(self):
        out = open(os.path.join(self.dir, "jvm-%d.out" % len(os.listdir(self.dir))), "wb")
        argv = ["nsenter", "--mount=/proc/%d/ns/mnt" % self.server.pid, "--"] + \
            jt.as_user_argv("nobody", [NOBODY_PYTHON, "-c", FAKE_JVM, self.libjvm])
        p = jt.Proc(jt.as_user_argv(None, argv), "fake-jvm", stdout=out, stderr=subprocess.STDOUT)
        out.close()

        def ready():
            try:
                with open("/proc/%d/maps" % p.pid) as f:
                    maps = f.read()
                with open("/proc/%d/status" % p.pid) as f:
                    cgt = [ln for ln in f if ln.startswith("SigCgt:")][0].split()[1]
            except (OSError, IndexError):
                return False
            return "libjvm.so" in maps and int(cgt, 16) & (1 << 2)
        jt.wait_until(lambda: ready() or not p.running(), 10, what="the fake JVM")
        jt.check(p.running(), "the fake JVM exited: %r" % p.returncode)
        jt.log("fake JVM as nobody: pid %d, libjvm.so mapped, SIGQUIT caught" % p.pid)
        return p

    def release(self):
        """The FUSE server goes away: its unanswered requests fail."""
        self.server.kill()


def next_message(c, rid, typ, timeout):
    """The next message of record rid of type typ (others are dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        m = c.recv_for(rid, max(0.1, deadline - time.monotonic()))
        jt.check(m is not None and m.get("ok") is not False,
                 "record %d ended before a %s message: %r" % (rid, typ, m))
        if m.get("type") == typ:
            return m


def attach_stats(st):
    jt.check(st is not None, "root has no status yet")
    a = st.get("attach")
    jt.check(isinstance(a, dict), "root's status has no attach member: %r" % sorted(st))
    return a


def new_helper(d, trap, known=()):
    """The daemon's child not in known (the attach helper) once it is stuck
    on the trap, or None: the trap got a request from it, or it sleeps
    uninterruptibly (a second lookup of a name the first helper's request
    holds waits in the kernel for that one, and sends no request)."""
    kids = [k for k in rw.children(d.pid) if k not in known]
    if len(kids) != 1:
        return None
    return kids[0] if trap.requests_of(kids[0]) or rw.proc_state(kids[0]) == "D" else None


def main(t):
    jt.check(os.access(NOBODY_PYTHON, os.X_OK), "%s is needed (nobody runs it)" % NOBODY_PYTHON)
    if not os.path.exists("/dev/fuse"):
        raise jt.Skip("no /dev/fuse: the FUSE attack cannot be staged")
    d = t.start_daemon(*jv.agent_args())
    trap = FuseTrap(t)
    jvm, jvm2 = trap.fake_jvm(), trap.fake_jvm()
    # The daemon symbolizes a new binary on its loop the first time the
    # host view samples it (python here, ~150 ms): not the attack.
    time.sleep(2.5)
    watch = rw.RootWatch(t, d)

    with t.case("attach times out on a helper stuck in the target's FUSE /tmp; root is served"):
        c = d.client(user="nobody")
        rid = c.start_record(pid=jvm.pid, duration_ms=13000, progress=False)
        helper = jt.wait_until(lambda: new_helper(d, trap), 10,
                               what="the attach helper's first request to the FUSE /tmp")
        jt.log("attach helper %d is waiting on the FUSE server (state %s) for %r"
               % (helper, rw.proc_state(helper), trap.requests_of(helper)))
        t0 = time.monotonic()
        # The start gate gives up on the agent first (its 2 s deadline:
        # sampling starts without it), then the attach times out.
        warn = next_message(c, rid, "warning", 15)
        codes = [warn.get("code")]
        if codes[0] == "sampling_not_ready":
            warn = next_message(c, rid, "warning", 15)
            codes.append(warn.get("code"))
        jt.check_eq(warn.get("code"), "timeout", "warning codes (%r, last %r)" % (codes, warn))
        jt.log("attach reported %s after %.1f s more" % (warn.get("code"), time.monotonic() - t0))
        a = jt.wait_until(lambda: attach_stats(watch.status())["helpers_stuck"] == 1 and
                          attach_stats(watch.status()), 3, what="the helper to count as stuck")
        jt.check_eq(a["helpers_abandoned"], 1, "helpers abandoned")
        jt.check_eq(rw.proc_state(helper), "D", "state of the abandoned helper %d" % helper)
        rec = c.collect_record(rid, 15)
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "complete", "profile status")
        java = rec.summary().get("java") or {}
        jt.check_eq(java.get("code"), "timeout", "summary.java.code (%r)" % java)
        jt.check_eq(rw.proc_state(helper), "D", "the helper is still stuck")
        c.close()

    with t.case("a recording that ends mid-attach cancels without waiting for the stuck helper"):
        c = d.client(user="nobody")
        t0 = time.monotonic()
        rid = c.start_record(pid=jvm2.pid, duration_ms=2000, progress=False)
        jt.wait_until(lambda: new_helper(d, trap, (helper,)), 10,
                      what="the second helper's first request to the FUSE /tmp")
        rec = c.collect_record(rid, 15)
        took = time.monotonic() - t0
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        # The start gate waits up to its 2 s deadline for the agent that
        # never comes; the 2 s are counted from there. Not the attach's
        # timeout (10 s), nor the stuck helper.
        jt.check(took < 5.0, "the 2 s recording took %.1f s (2 s of it at the start gate)" % took)
        a = jt.wait_until(lambda: attach_stats(watch.status())["helpers_stuck"] == 2 and
                          attach_stats(watch.status()), 3, what="the second helper to count as stuck")
        jt.check_eq(a["helpers_abandoned"], 2, "helpers abandoned")
        jt.check_eq([rw.proc_state(p) for p in rw.children(d.pid)], ["D", "D"],
                    "states of the daemon's children (both helpers, abandoned)")
        c.close()

    with t.case("root's status stayed fast throughout"):
        watch.check_fast("while two attach helpers were stuck")

    with t.case("the FUSE server goes away: the helpers are reaped, no zombie is left"):
        trap.release()
        jt.wait_until(lambda: attach_stats(d.client().status())["helpers_unreaped"] == 0, 10,
                      what="the stuck helpers to be reaped")
        a = attach_stats(d.client().status())
        jt.check_eq((a["helpers_stuck"], a["helpers_abandoned"]), (0, 2), "stuck, abandoned")
        jt.check_eq(rw.children(d.pid), [], "children of the daemon")
        # nobody does not see how many helpers the daemon has.
        st = d.client(user="nobody").status()
        jt.check("attach" not in st, "nobody sees status.attach: %r" % st.get("attach"))

    watch.stop()
    with t.case("the daemon still serves and stops cleanly"):
        watch.check_fast("the whole test")
        jt.check_eq(d.client().status()["sessions"]["active"], 0, "sessions left")
        d.stop()


jt.run(main)
