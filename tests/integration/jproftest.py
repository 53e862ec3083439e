"""Harness for the jprofd integration tests (python3 stdlib only).

Each test_*.py is run by ctest as `python3 test_x.py` with JPROFD, JPROFCTL,
JPROF_BUILD_DIR, JPROF_SOURCE_DIR and JPROF_PROGS_DIR in the environment. A
test file looks like:

    import jproftest as jt

    def main(t):
        d = t.start_daemon()
        with t.case("status works"):
            c = d.client()
            r = c.request("status")
            jt.check(r["ok"], "status failed: %r" % r)

    jt.run(main)

run() skips with exit 77 only when not root or when BPF/perf events are
truly unavailable, prints the daemon's stderr on any failure, stops every
daemon with SIGTERM (asserting exit 0 and no leftover BPF programs), kills
every process it started, and exits non-zero on any failure.
"""

import atexit
import ctypes
import errno
import json
import os
import platform
import pwd
import grp
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SKIP = 77
BPF_PROG_NAMES = ("sample_cpu", "sample_thread", "on_fork", "on_exec", "offcpu_switch")
BPFTOOL_PATHS = ("/usr/sbin/bpftool", "/sbin/bpftool", "/usr/bin/bpftool")
SOCKET_WAIT_S = 15.0
STOP_WAIT_S = 5.0
PROGS = ("spin_chain", "read_zero", "thread_spawner", "alternate", "waiter", "unwind_chain_pie",
         "unwind_chain_nopie", "unwind_chain_dbgframe", "short_threads", "wall_split", "line_spin",
         "fp_garbage", "deep_stacks", "sig_spin", "tower")

_cleanups = []


class TestFailure(AssertionError):
    pass


class Skip(Exception):
    pass


def log(msg):
    sys.stdout.write("[%8.3f] %s\n" % (time.monotonic() - _T0, msg))
    sys.stdout.flush()


_T0 = time.monotonic()


def check(cond, msg):
    """Assert that survives python -O."""
    if not cond:
        raise TestFailure(msg)


def check_eq(got, want, what):
    if got != want:
        raise TestFailure("%s: got %r, want %r" % (what, got, want))


def free_port():
    """A TCP port on 127.0.0.1 free right now (for a listener a test starts)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls pred() until truthy; returns its value or raises TestFailure."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestFailure("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


# --------------------------------------------------------------------------
# Users

# A second ordinary user, for tests where one unprivileged user attacks
# another (tests/security/). Created on first use.
SECOND_USER = "jprof-test2"
USERS = ("nobody", SECOND_USER)


def ensure_second_user():
    try:
        pwd.getpwnam(SECOND_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                        "--shell", "/usr/sbin/nologin", SECOND_USER], check=True)


def user_ids(user):
    """(uid, gid) of "nobody" or SECOND_USER."""
    check(user in USERS, "unsupported user %r" % user)
    if user == SECOND_USER:
        ensure_second_user()
        pw = pwd.getpwnam(user)
        return pw.pw_uid, pw.pw_gid
    uid = pwd.getpwnam("nobody").pw_uid
    for name in ("nogroup", "nobody"):
        try:
            return uid, grp.getgrnam(name).gr_gid
        except KeyError:
            pass
    return uid, pwd.getpwnam("nobody").pw_gid


def nobody_ids():
    return user_ids("nobody")


def as_user_argv(user, argv):
    """Prefixes argv so it runs as user ("nobody", or root for None/"root")
    and is killed if this harness dies without cleaning up (e.g. killed by a
    ctest timeout). setpriv execs, so the child's pid is the program's."""
    pre = ["setpriv", "--pdeathsig", "KILL"]
    if user not in (None, "root"):
        uid, gid = user_ids(user)
        pre += ["--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups"]
    return pre + ["--"] + list(argv)


# --------------------------------------------------------------------------
# Collapsed profiles

def parse_collapsed(text):
    """'a;b;c 12' lines -> {"a;b;c": 12}. Malformed lines fail the test."""
    stacks = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, sep, count = line.rpartition(" ")
        check(sep and stack and count.isdigit(),
              "collapsed line %d is not 'frames count': %r" % (n, line))
        stacks[stack] = stacks.get(stack, 0) + int(count)
    return stacks


def frames_of(stack):
    return stack.split(";")


def has_seq(frames, seq):
    """True if the list frames contains seq as consecutive elements."""
    seq = list(seq)
    n = len(seq)
    return any(frames[i:i + n] == seq for i in range(len(frames) - n + 1))


# --------------------------------------------------------------------------
# Real consumers in headless Chromium (tests/browser: node scripts, npm ci)

BROWSER_DIR = os.path.join(os.environ.get("JPROF_SOURCE_DIR",
                                          os.path.join(os.path.dirname(__file__), "..", "..")),
                           "tests", "browser")


def browser_missing(packages=("playwright-core",)):
    """What the browser checks need and this machine lacks (for a Skip)."""
    missing = []
    if not shutil.which("node"):
        missing.append("node (apt-get install nodejs)")
    if not os.path.exists(os.environ.get("JPROF_CHROMIUM", "/usr/bin/chromium")):
        missing.append("/usr/bin/chromium (apt-get install chromium)")
    for pkg in packages:
        if not os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", pkg)):
            missing.append("%s (cd tests/browser && npm ci; tests/run does it)" % pkg)
    return missing


def browser_run(script, args, what):
    """Runs tests/browser/<script> with args; returns its last JSON line.
    Exit 77 skips the test; another failure, or failures it reports, fail."""
    out = subprocess.run(["node", os.path.join(BROWSER_DIR, script)] + list(args),
                         capture_output=True, text=True, timeout=240,
                         stdin=subprocess.DEVNULL, cwd=BROWSER_DIR)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    check(lines, "%s printed no result (exit %d):\n%s%s"
          % (script, out.returncode, out.stdout, out.stderr))
    res = json.loads(lines[-1])
    if out.returncode == 77:
        raise Skip(res.get("skip", "%s skipped" % script))
    check(out.returncode == 0 and not res.get("failures"),
          "%s failed (exit %d): %s\n%s"
          % (what, out.returncode, res.get("failures"), out.stderr[-2000:]))
    return res


# --------------------------------------------------------------------------
# Workload CPU time: what a CPU profile's sample count must match. On this
# shared machine a busy loop may get far less than its wall time, so counts
# are checked against the CPU the workload actually had.

def task_cpu_ns(pid):
    """CPU time (ns) of pid's live threads (/proc/PID/task/*/schedstat);
    None when the process is gone."""
    total, seen = 0, False
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
                seen = True
        except (OSError, ValueError, IndexError):
            pass
    return total if seen else None


class CpuMeter:
    """Measures the CPU time a process gets from now until stop(), polling
    every 10 ms so that a process that exits meanwhile is measured up to its
    last reading (within 10 ms of CPU)."""

    def __init__(self, pid):
        self.pid = pid
        self.first = task_cpu_ns(pid)
        if self.first is None:
            raise TestFailure("pid %d is gone: cannot measure its CPU time" % pid)
        self.last = self.first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self):
        while not self._stop.wait(0.01):
            v = task_cpu_ns(self.pid)
            if v is None:
                return
            self.last = max(self.last, v)

    def stop(self):
        """CPU nanoseconds the process had since the meter started."""
        self._stop.set()
        self._thread.join(5)
        v = task_cpu_ns(self.pid)
        if v is not None:
            self.last = max(self.last, v)
        return self.last - self.first


def check_samples_match_cpu(samples, cpu_ns, interval_ns, what, tolerance=0.2, min_expected=50):
    """A CPU profile's samples of a busy workload match the CPU time it had:
    within tolerance (plus 3 samples for the edges of the window). Fails,
    rather than passing vacuously, if the workload had too little CPU for
    the comparison to mean anything."""
    expected = cpu_ns / interval_ns
    log("%s: %d samples for %.0f ms of workload CPU (%.0f expected)"
        % (what, samples, cpu_ns / 1e6, expected))
    check(expected >= min_expected,
          "%s: the workload had only %.0f ms of CPU (%.0f samples' worth, want >= %d): the "
          "machine is too loaded for this check" % (what, cpu_ns / 1e6, expected, min_expected))
    check(abs(samples - expected) <= tolerance * expected + 3,
          "%s: %d samples, but the workload had %.0f ms of CPU = %.0f samples at %.0f ms "
          "(want within %d%%)" % (what, samples, cpu_ns / 1e6, expected, interval_ns / 1e6,
                                  100 * tolerance))


def check_recording_cpu(summary, samples, meter_ns, interval_ns, what, tolerance=0.1,
                        min_expected=50):
    """A per-process CPU recording lost no samples: its samples match the CPU
    time its per-thread events counted (summary.cpu_ns, the kernel's task
    clock of every recorded thread while sampled; samples_expected is that
    over the interval) within tolerance, plus one per thread for the partial
    periods at the ends. That count, in turn, is within the CPU time the
    workload had over a window around the request (meter_ns: the recording
    starts when its start gate opens and ends before the profile is sent), and
    is most of it. Fails, rather than passing vacuously, if the workload had
    too little CPU for the comparison to mean anything."""
    cpu, expected = summary.get("cpu_ns"), summary.get("samples_expected")
    check(isinstance(cpu, int) and isinstance(expected, int),
          "%s: summary without cpu_ns/samples_expected: %r" % (what, summary))
    threads = summary.get("threads") or 1
    log("%s: %d samples; the events counted %.0f ms of CPU (%d samples expected); the "
        "workload had %.0f ms around the request" % (what, samples, cpu / 1e6, expected,
                                                     meter_ns / 1e6))
    check(expected >= min_expected,
          "%s: the events counted only %.0f ms of CPU (%d samples' worth, want >= %d): the "
          "machine is too loaded for this check" % (what, cpu / 1e6, expected, min_expected))
    check(cpu <= meter_ns * 1.02 + 20e6,
          "%s: the events counted %.0f ms of CPU, more than the workload's %.0f ms"
          % (what, cpu / 1e6, meter_ns / 1e6))
    check(cpu >= 0.5 * meter_ns,
          "%s: the events counted %.0f ms of CPU, under half the workload's %.0f ms"
          % (what, cpu / 1e6, meter_ns / 1e6))
    check(abs(samples - expected) <= tolerance * expected + threads + 2,
          "%s: %d samples, but the events counted %.0f ms of CPU = %d samples at %.0f ms "
          "(want within %d%%): samples were lost" % (what, samples, cpu / 1e6, expected,
                                                    interval_ns / 1e6, 100 * tolerance))


def unix_get(path, url, timeout=30):
    """(status, headers dict, body) of a GET over the HTTP Unix socket at
    path (--http-socket; as root)."""
    r = subprocess.run(["curl", "-sS", "-D", "-", "--max-time", str(timeout), "--unix-socket", path,
                        "http://localhost" + url], capture_output=True, timeout=timeout + 10)
    check(r.returncode == 0, "curl --unix-socket %s %s failed: %s" % (path, url, r.stderr))
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdr = dict(ln.split(": ", 1) for ln in lines[1:] if ": " in ln)
    return int(lines[0].split()[1]), hdr, body


def unix_metrics(path):
    """{series: value} of the daemon's /metrics over its HTTP Unix socket;
    a series with labels is keyed by its whole name, labels included."""
    status, _, body = unix_get(path, "/metrics")
    check_eq(status, 200, "GET /metrics over %s" % path)
    out = {}
    for ln in body.decode().splitlines():
        if ln and not ln.startswith("#"):
            name, _, value = ln.rpartition(" ")
            out[name] = float(value)
    return out


def total_samples(stacks):
    return sum(stacks.values())


def samples_matching(stacks, pred):
    return sum(c for s, c in stacks.items() if pred(frames_of(s)))


def is_kernel_frame(frame):
    return frame.endswith("_[k]")


def readline_within(p, timeout):
    """A line of the Popen p's stdout (text mode), stripped, or "" when none
    comes within timeout seconds."""
    r, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if r else ""


class GoPprof:
    """`go tool pprof` as a consumer of profiles: offline, with a private
    HOME and build cache under the test's temporary directory."""

    def __init__(self, t):
        home = t.mkdtemp("gohome-")
        self.env = dict(os.environ, HOME=home, PPROF_TMPDIR=home,
                        GOCACHE=os.path.join(home, "cache"), GOTOOLCHAIN="local", GOFLAGS="",
                        GOPROXY="off", GOTELEMETRY="off")

    def __call__(self, *args):
        """Its stdout; a failed run fails the test."""
        r = subprocess.run(["go", "tool", "pprof"] + list(args), capture_output=True, text=True,
                           timeout=120, env=self.env, stdin=subprocess.DEVNULL)
        check(r.returncode == 0, "go tool pprof %s failed (%d):\n%s%s"
              % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r.stdout


def top_stacks(stacks, n=15):
    """Human-readable top of a profile for failure messages."""
    items = sorted(stacks.items(), key=lambda kv: -kv[1])[:n]
    return "\n".join("  %6d  %s" % (c, s) for s, c in items) or "  (empty profile)"


THREAD_FRAME_RE = re.compile(r"^\[(.*) tid=(\d+)\]$")


def stack_tid(frames):
    """The tid of the first "[name tid=N]" frame of a stack, or None."""
    for f in frames:
        m = THREAD_FRAME_RE.match(f)
        if m:
            return int(m.group(2))
    return None


def thread_tids(stacks):
    """{tid: samples} from "[name tid=N]" frames (thread_frames profiles)."""
    tids = {}
    for s, c in stacks.items():
        tid = stack_tid(frames_of(s))
        if tid is not None:
            tids[tid] = tids.get(tid, 0) + c
    return tids


# --------------------------------------------------------------------------
# Environment probes

def _env_path(name):
    v = os.environ.get(name)
    if not v:
        raise TestFailure("%s is not set; run the tests through ctest (tests/run)" % name)
    return v


def _find_bpftool():
    for p in BPFTOOL_PATHS:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("bpftool")


class _PerfEventAttr(ctypes.Structure):
    # Only the leading fields matter; size is set to the struct size, which
    # the kernel accepts as PERF_ATTR_SIZE_VER0+ (zeros beyond are fine).
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("config", ctypes.c_uint64), ("sample_period", ctypes.c_uint64),
                ("sample_type", ctypes.c_uint64), ("read_format", ctypes.c_uint64),
                ("flags", ctypes.c_uint64), ("pad", ctypes.c_uint8 * 64)]


class _BpfProgLoadAttr(ctypes.Structure):
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32),
                ("insns", ctypes.c_uint64), ("license", ctypes.c_uint64),
                ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32),
                ("log_buf", ctypes.c_uint64), ("kern_version", ctypes.c_uint32),
                ("pad", ctypes.c_uint8 * 64)]


_SYSCALLS = {"x86_64": {"bpf": 321, "perf_event_open": 298},
             "aarch64": {"bpf": 280, "perf_event_open": 241}}


def _probe_kernel():
    """Returns None if BPF and cpu-clock perf events work, else the reason."""
    nrs = _SYSCALLS.get(platform.machine())
    if nrs is None:
        return None  # unknown syscall numbers: let the daemon be the probe
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # perf_event_open(cpu-clock, pid=-1, cpu=0)
    attr = _PerfEventAttr()
    attr.type = 1  # PERF_TYPE_SOFTWARE
    attr.size = ctypes.sizeof(_PerfEventAttr)
    attr.config = 0  # PERF_COUNT_SW_CPU_CLOCK
    attr.sample_period = 10000000
    attr.flags = 1  # disabled
    fd = libc.syscall(nrs["perf_event_open"], ctypes.byref(attr), -1, 0, -1, 8)  # CLOEXEC
    if fd < 0:
        e = ctypes.get_errno()
        if e in (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ENOENT, errno.ENODEV,
                 errno.EOPNOTSUPP):
            return "perf_event_open(cpu-clock) unavailable: %s" % os.strerror(e)
    else:
        os.close(fd)
    # BPF_PROG_LOAD of "r0 = 0; exit" as a socket filter.
    insns = (ctypes.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)
    lic = ctypes.create_string_buffer(b"GPL")
    pattr = _BpfProgLoadAttr()
    pattr.prog_type = 1  # BPF_PROG_TYPE_SOCKET_FILTER
    pattr.insn_cnt = 2
    pattr.insns = ctypes.addressof(insns)
    pattr.license = ctypes.addressof(lic)
    fd = libc.syscall(nrs["bpf"], 5, ctypes.byref(pattr), ctypes.sizeof(pattr))
    if fd < 0:
        e = ctypes.get_errno()
        if e in (errno.EPERM, errno.EACCES, errno.ENOSYS):
            return "bpf(BPF_PROG_LOAD) unavailable: %s" % os.strerror(e)
    else:
        os.close(fd)
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "kernel has no BTF (/sys/kernel/btf/vmlinux missing)"
    return None


def bpf_prog_ids(names=BPF_PROG_NAMES):
    """{id: name} of loaded BPF programs whose name is one of names."""
    tool = _find_bpftool()
    check(tool, "bpftool not found (checked %s and PATH)" % ", ".join(BPFTOOL_PATHS))
    out = subprocess.run([tool, "-j", "prog", "show"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, "bpftool -j prog show failed (%d): %s"
          % (out.returncode, out.stderr.strip()))
    progs = json.loads(out.stdout or "[]")
    return {p["id"]: p.get("name", "") for p in progs if p.get("name", "") in names}


def held_prog_ids(pids=None):
    """{prog_id: set(pid)} of BPF programs referenced by open fds (prog and
    link fds show "prog_id:" in fdinfo) of pids, or of every process."""
    held = {}
    if pids is None:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        d = "/proc/%d/fdinfo" % pid
        try:
            fds = os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                with open(os.path.join(d, fd)) as f:
                    for line in f:
                        if line.startswith("prog_id:"):
                            held.setdefault(int(line.split()[1]), set()).add(pid)
            except (OSError, ValueError, IndexError):
                continue
    return held


# --------------------------------------------------------------------------
# Processes

def wait_exec(p, timeout=20.0):
    """Waits until p (started through setpriv) has dropped to its user and
    exec'd its program. Until then the pid is root's setpriv, which the
    daemon rightly refuses to show an ordinary user."""
    setpriv = os.path.realpath(shutil.which("setpriv") or "/usr/bin/setpriv")

    def execd():
        if not p.running():
            raise TestFailure("%s exited early with %r" % (p.what, p.returncode))
        try:
            exe = os.readlink("/proc/%d/exe" % p.pid)
        except OSError:
            return False
        return os.path.realpath(exe) != setpriv
    wait_until(execd, timeout, 0.01, "%s (pid %d) to leave setpriv" % (p.what, p.pid))


class Proc:
    """A child process we started; reaped by a background thread so that a
    process that exits is gone (not a zombie) as it would be in real life."""

    def __init__(self, argv, what, stdout=None, stderr=None, env=None):
        self.what = what
        self.argv = argv
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=stdout, stderr=stderr, env=env,
                                      start_new_session=True)
        self.pid = self.popen.pid
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()
        _cleanups.append(self.kill)

    def _reap(self):
        try:
            self.popen.wait()
        except Exception:  # noqa: BLE001 - reaping must never raise
            pass

    @property
    def returncode(self):
        return self.popen.returncode

    def running(self):
        return self.popen.poll() is None

    def wait(self, timeout):
        self._reaper.join(timeout)
        if self._reaper.is_alive():
            raise subprocess.TimeoutExpired(self.argv, timeout)
        return self.popen.returncode

    def signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self):
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
            self._reaper.join(5)


# --------------------------------------------------------------------------
# Client

class Client:
    """One NDJSON connection to the daemon, optionally made as nobody (the
    connect happens in a forked child with nobody's credentials, which stays
    alive as the SO_PEERCRED peer until close())."""

    _next_id = 1

    def __init__(self, path, user=None, timeout=10.0):
        self.path = path
        self.user = user
        self.buf = b""
        self.pending = []  # parsed messages read but not yet consumed
        self.eof = False
        self.helper_pid = None
        self._helper_sock = None
        if user in (None, "root"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        else:
            self.sock = self._connect_as(user, timeout)
        self.sock.setblocking(True)
        self.sock.settimeout(None)
        _cleanups.append(self.close)

    def _connect_as(self, user, timeout):
        uid, gid = user_ids(user)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # child: drop privileges, connect, pass the fd, linger
            code = 0
            try:
                # Drop every inherited fd (other clients' sockets above all:
                # a copy held here would hide their close from the daemon).
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(timeout)
                try:
                    s.connect(self.path)
                    socket.send_fds(child, [b"ok"], [s.fileno()])
                except OSError as e:
                    child.sendall(b"E" + str(e).encode())
                s.close()
                child.recv(1)  # until the parent closes its end
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        child.close()
        self.helper_pid = pid
        self._helper_sock = parent
        parent.settimeout(timeout)
        msg, fds, _, _ = socket.recv_fds(parent, 1024, 1)
        if not fds:
            self._reap_helper()
            raise ConnectionError("connect as %s to %s failed: %s"
                                  % (user, self.path, msg[1:].decode(errors="replace")))
        return socket.socket(fileno=fds[0])

    def _reap_helper(self):
        if self._helper_sock is not None:
            self._helper_sock.close()
            self._helper_sock = None
        if self.helper_pid:
            try:
                os.waitpid(self.helper_pid, 0)
            except ChildProcessError:
                pass
            self.helper_pid = None

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._reap_helper()

    @classmethod
    def new_id(cls):
        cls._next_id += 1
        return cls._next_id

    def send_raw(self, data):
        """Sends bytes as they are; a daemon closing mid-send is not an error."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def send(self, cmd=None, **fields):
        """Sends {"v":1,"id":new,"cmd":cmd,**fields}; returns the id."""
        req = {"v": 1, "id": self.new_id()}
        if cmd is not None:
            req["cmd"] = cmd
        req.update(fields)
        self.send_raw((json.dumps(req) + "\n").encode())
        return req["id"]

    def _read_line(self, deadline):
        while b"\n" not in self.buf:
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no response line within timeout (partial: %r)"
                                   % self.buf[:200])
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
                if self.buf:
                    raise TestFailure("connection closed after a partial line: %r"
                                      % self.buf[:200])
                return None
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def recv(self, timeout=10.0):
        """Next message (dict), or None at EOF. Fails on a non-JSON line."""
        if self.pending:
            return self.pending.pop(0)
        line = self._read_line(time.monotonic() + timeout)
        if line is None:
            return None
        try:
            msg = json.loads(line)
        except ValueError:
            raise TestFailure("daemon sent a line that is not JSON: %r" % line[:300])
        check(isinstance(msg, dict), "daemon sent a non-object line: %r" % line[:300])
        return msg

    def recv_for(self, req_id, timeout=10.0):
        """Next message whose id is req_id; others are kept for later."""
        deadline = time.monotonic() + timeout
        skipped = []
        try:
            while True:
                for i, m in enumerate(self.pending):
                    if m.get("id") == req_id:
                        return self.pending.pop(i)
                line = self._read_line(deadline)
                if line is None:
                    return None
                try:
                    msg = json.loads(line)
                except ValueError:
                    raise TestFailure("daemon sent a line that is not JSON: %r" % line[:300])
                if isinstance(msg, dict) and msg.get("id") == req_id:
                    return msg
                skipped.append(msg)
        finally:
            self.pending.extend(skipped)

    def request(self, cmd, timeout=10.0, **fields):
        """Sends one request and returns its (first) response."""
        rid = self.send(cmd, **fields)
        resp = self.recv_for(rid, timeout)
        check(resp is not None, "connection closed before the response to %s (id %d)"
              % (cmd, rid))
        return resp

    def status(self, timeout=10.0):
        r = self.request("status", timeout=timeout)
        check(r.get("ok") is True and r.get("type") == "status" and
              isinstance(r.get("status"), dict), "bad status response: %r" % r)
        return r["status"]

    def start_record(self, **fields):
        fields.setdefault("format", "collapsed")
        return self.send("record", **fields)

    def collect_record(self, rid, timeout):
        """Reads the messages of record rid until its profile, an error or
        EOF. Returns a Recording."""
        rec = Recording(rid)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestFailure("record %d: no profile within %.0f s; got %s"
                                  % (rid, timeout, rec.describe()))
            m = self.recv_for(rid, left)
            if m is None:
                rec.eof = True
                return rec
            rec.messages.append(m)
            if m.get("ok") is False:
                rec.error = m.get("error") or {}
                return rec
            t = m.get("type")
            if t == "started":
                rec.started = m
            elif t == "progress":
                rec.progress.append(m)
            elif t == "profile":
                rec.profile = m
                return rec

    def record(self, timeout=None, **fields):
        """Records synchronously (see start_record for fields)."""
        rid = self.start_record(**fields)
        if timeout is None:
            timeout = fields.get("duration_ms", 30000) / 1000.0 + 20
        return self.collect_record(rid, timeout)


class Recording:
    def __init__(self, rid):
        self.id = rid
        self.messages = []
        self.started = None
        self.progress = []
        self.profile = None
        self.error = None
        self.eof = False

    @property
    def error_code(self):
        return (self.error or {}).get("code")

    def data(self):
        check(self.profile is not None, "record %d has no profile: %s"
              % (self.id, self.describe()))
        enc = self.profile.get("encoding", "utf-8")
        data = self.profile.get("data")
        check(isinstance(data, str), "profile data is not a string: %r" % (data,))
        if enc == "base64":
            import base64
            return base64.b64decode(data)
        check_eq(enc, "utf-8", "profile encoding")
        return data

    def stacks(self):
        check(self.profile is not None, "record %d has no profile: %s"
              % (self.id, self.describe()))
        check_eq(self.profile.get("format") if self.profile else None, "collapsed",
                 "profile format")
        return parse_collapsed(self.data())

    def summary(self):
        s = (self.profile or {}).get("summary")
        check(isinstance(s, dict), "profile has no summary object: %r" % (self.profile,))
        return s

    def describe(self):
        def short(m):
            m = dict(m)
            if isinstance(m.get("data"), str) and len(m["data"]) > 300:
                m["data"] = m["data"][:300] + "...(%d chars)" % len(m["data"])
            return json.dumps(m)
        return "%d message(s)%s:\n%s" % (len(self.messages), ", then EOF" if self.eof else "",
                                         "\n".join("    " + short(m) for m in self.messages[-8:]))


# --------------------------------------------------------------------------
# Daemon

class Daemon:
    def __init__(self, t, extra_args=(), name="jprofd"):
        self.t = t
        self.name = name
        self.dir = t.mkdtemp("daemon-")
        self.socket = os.path.join(self.dir, "jprofd.sock")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.stopped = False
        self.exit_code = None
        self.bpf_ids = set()
        extra = os.environ.get("JPROF_TEST_DAEMON_ARGS", "").split()
        extra_args = list(extra_args)
        # No disk cache of built unwind tables unless a test asks for one
        # (test_unwind_cache.py): every test sees a fresh daemon's builds,
        # whatever ran before it, and /var/cache is left alone.
        if not any(a.startswith("--unwind-cache-dir") for a in extra_args + extra):
            extra_args += ["--unwind-cache-dir", "off"]
        self.argv = [t.jprofd, "--socket", self.socket] + extra_args + extra
        log("starting %s" % " ".join(self.argv))
        self._err = open(self.stderr_path, "wb")
        self.proc = Proc(as_user_argv(None, self.argv), name, stdout=self._err,
                         stderr=subprocess.STDOUT)
        t.daemons.append(self)
        self._wait_ready()

    @property
    def pid(self):
        return self.proc.pid

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError as e:
            return "(cannot read %s: %s)" % (self.stderr_path, e)

    def _wait_ready(self):
        deadline = time.monotonic() + SOCKET_WAIT_S
        last = None
        while time.monotonic() < deadline:
            if not self.proc.running():
                self.proc.wait(5)
                raise TestFailure("%s exited with %r before its socket accepted connections"
                                  % (self.name, self.proc.returncode))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(1)
                s.connect(self.socket)
                log("%s (pid %d) accepts connections on %s" % (self.name, self.pid, self.socket))
                return
            except OSError as e:
                last = e
            finally:
                s.close()
            time.sleep(0.05)
        raise TestFailure("%s socket %s did not accept connections within %.0f s (last: %s)"
                          % (self.name, self.socket, SOCKET_WAIT_S, last))

    def client(self, user=None):
        return Client(self.socket, user=user)

    def sigterm(self):
        self.proc.signal(signal.SIGTERM)

    def stop(self, timeout=STOP_WAIT_S, check_exit=True, send_sigterm=True):
        """SIGTERM (unless already sent), wait, assert exit 0 within timeout
        and no BPF leftovers."""
        if self.stopped:
            return self.exit_code
        self.stopped = True
        t0 = time.monotonic()
        if send_sigterm:
            self.note_bpf_programs()
            self.proc.signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise TestFailure("%s did not exit within %.1f s of SIGTERM (killed)"
                              % (self.name, timeout))
        self.exit_code = code
        log("%s exited with %d %.2f s after stop()" % (self.name, code, time.monotonic() - t0))
        if check_exit:
            check(code == 0, "%s exited with %d after SIGTERM, want 0" % (self.name, code))
        self.t.check_no_bpf_leftovers(self.bpf_ids)
        return code

    def note_bpf_programs(self):
        """Remembers which jprofd BPF programs this daemon holds (call while
        it runs; other jprofd instances on the host have their own)."""
        named = bpf_prog_ids()
        held = held_prog_ids([self.pid])
        self.bpf_ids |= {i for i in held if i in named}
        log("%s holds BPF programs: %s" % (self.name, ", ".join(
            "%s (id %d)" % (named[i], i) for i in sorted(self.bpf_ids)) or "none"))

    def check_root_answered(self, limit_s=0.1):
        """root's status is answered within limit_s (after an attack: the
        daemon still serves everyone)."""
        c = self.client()
        t0 = time.monotonic()
        c.status()
        took = time.monotonic() - t0
        c.close()
        check(took < limit_s, "root's status took %.3f s (limit %.3f s)" % (took, limit_s))

    def check_socket_mode(self):
        st = os.stat(self.socket)
        check(stat.S_ISSOCK(st.st_mode), "%s is not a socket" % self.socket)
        check_eq(stat.S_IMODE(st.st_mode), 0o666, "socket mode")


# --------------------------------------------------------------------------
# Test context

class T:
    def __init__(self):
        self.jprofd = _env_path("JPROFD")
        self.jprofctl_built = _env_path("JPROFCTL")
        self.progs_dir = _env_path("JPROF_PROGS_DIR")
        self.daemons = []
        self.failures = []
        self.root = tempfile.mkdtemp(prefix="jprof-it-")
        os.chmod(self.root, 0o755)  # nobody must reach sockets and binaries
        _cleanups.append(lambda: shutil.rmtree(self.root, ignore_errors=True))
        self.bin_dir = self.mkdtemp("bin-")
        self.baseline_bpf = bpf_prog_ids()
        self._bins = {}

    def mkdtemp(self, prefix, owner=None):
        d = tempfile.mkdtemp(prefix=prefix, dir=self.root)
        os.chmod(d, 0o755)
        if owner == "nobody":
            uid, gid = nobody_ids()
            os.chown(d, uid, gid)
        return d

    def outdir(self):
        """A directory nobody can write (for jprofctl -o as nobody)."""
        return self.mkdtemp("out-", owner="nobody")

    def _copy_bin(self, src, name):
        check(os.path.isfile(src), "%s not found (is the build complete?)" % src)
        dst = os.path.join(self.bin_dir, name)
        if not os.path.exists(dst):
            shutil.copy2(src, dst)
            os.chmod(dst, 0o755)
        return dst

    def prog(self, name):
        """Path of a test workload copied where nobody can execute it."""
        check(name in PROGS, "unknown workload %r" % name)
        return self._copy_bin(os.path.join(self.progs_dir, name), name)

    @property
    def jprofctl(self):
        return self._copy_bin(self.jprofctl_built, "jprofctl")

    # -- processes -------------------------------------------------------

    def start_daemon(self, *extra_args, name="jprofd"):
        return Daemon(self, extra_args, name=name)

    def spawn(self, argv, user="nobody", what=None, settle=0.3):
        """Starts a workload (as nobody by default); waits settle seconds so
        that it has exec'd and is in its main loop."""
        p = Proc(as_user_argv(user, argv), what or os.path.basename(argv[0]))
        wait_exec(p)
        if settle:
            time.sleep(settle)
        check(p.running(), "%s exited early with %r" % (p.what, p.returncode))
        log("started %s as %s: pid %d" % (" ".join(argv), user or "root", p.pid))
        return p

    def workload(self, name, *args, user="nobody", settle=0.3):
        return self.spawn([self.prog(name)] + [str(a) for a in args], user=user,
                          what=name, settle=settle)

    def ctl(self, args, user=None, socket_path=None, timeout=60, env=None, check_rc=None):
        """Runs jprofctl (as user) and returns CompletedProcess (text)."""
        argv = [self.jprofctl]
        if socket_path:
            argv += ["--socket", socket_path]
        argv += list(args)
        full = as_user_argv(user, argv)
        e = dict(os.environ)
        e.pop("JPROFD_SOCKET", None)
        if env:
            e.update(env)
        log("run as %s: %s" % (user or "root", " ".join(argv)))
        try:
            r = subprocess.run(full, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=timeout, env=e)
        except subprocess.TimeoutExpired as ex:
            raise TestFailure("jprofctl %s did not finish within %d s; stderr so far: %s"
                              % (" ".join(args), timeout, ex.stderr))
        log("  -> exit %d" % r.returncode)
        if check_rc is not None and r.returncode != check_rc:
            raise TestFailure("jprofctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s"
                              % (" ".join(args), r.returncode, check_rc, r.stdout, r.stderr))
        return r

    def ctl_popen(self, args, user=None, socket_path=None):
        """Starts jprofctl in the background; returns (Proc, stdout, stderr paths)."""
        argv = [self.jprofctl]
        if socket_path:
            argv += ["--socket", socket_path]
        argv += list(args)
        d = self.mkdtemp("ctl-")
        out = open(os.path.join(d, "stdout"), "wb")
        err = open(os.path.join(d, "stderr"), "wb")
        e = dict(os.environ)
        e.pop("JPROFD_SOCKET", None)
        log("start as %s: %s" % (user or "root", " ".join(argv)))
        p = Proc(as_user_argv(user, argv), "jprofctl", stdout=out, stderr=err, env=e)
        out.close()
        err.close()
        return p, os.path.join(d, "stdout"), os.path.join(d, "stderr")

    # -- checks ------------------------------------------------------------

    def check_no_bpf_leftovers(self, ours=(), timeout=3.0):
        """After a daemon exited: none of the programs it held (ours) is
        still loaded, and no jprofd-named program that appeared during this
        test is left without any process holding it (pinned or leaked).
        Programs of other jprofd instances on the host are not ours. Freeing
        after the last close is deferred, so poll briefly."""
        def clean():
            named = bpf_prog_ids()
            new = [i for i in named if i not in self.baseline_bpf and i not in ours]
            held = held_prog_ids() if new else {}
            extra = {i: n for i, n in named.items()
                     if i in ours or (i in new and i not in held)}
            self._leftovers = extra
            return not extra
        try:
            wait_until(clean, timeout, 0.2, "BPF programs to be unloaded")
        except TestFailure:
            raise TestFailure("BPF programs left loaded after jprofd exited: %s"
                              % ", ".join("%s (id %d)" % (n, i)
                                          for i, n in sorted(self._leftovers.items())))

    def case(self, name):
        return _Case(self, name)


class _Case:
    def __init__(self, t, name):
        self.t = t
        self.name = name

    def __enter__(self):
        log("=== %s" % self.name)
        return self

    def __exit__(self, typ, val, tb):
        if typ is None:
            log("--- ok: %s" % self.name)
            return False
        if issubclass(typ, (KeyboardInterrupt, SystemExit, Skip)):
            return False
        msg = "".join(traceback.format_exception(typ, val, tb))
        log("--- FAILED: %s\n%s" % (self.name, msg))
        self.t.failures.append(self.name)
        return True  # continue with the next case


# --------------------------------------------------------------------------

def _run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - cleanup must go on
            sys.stderr.write("cleanup: %s\n" % e)


atexit.register(_run_cleanups)


def _dump_daemon_logs(t):
    for d in (t.daemons if t else []):
        sys.stdout.write("\n----- %s (pid %d) stderr, exit %r -----\n%s\n----- end of %s stderr -----\n"
                         % (d.name, d.pid, d.proc.returncode, d.stderr_text(), d.name))
    sys.stdout.flush()


def run(main):
    """Runs main(t) and exits: 0 pass, 1 fail, 77 skip."""
    name = os.path.basename(sys.argv[0])
    if os.geteuid() != 0:
        print("SKIP %s: needs root (loads BPF programs, runs workloads as nobody)" % name)
        sys.exit(SKIP)
    reason = _probe_kernel()
    if reason:
        print("SKIP %s: %s" % (name, reason))
        sys.exit(SKIP)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest timeout: clean up
    t = None
    failed = False
    try:
        t = T()
        main(t)
        for d in t.daemons:
            if not d.stopped:
                with t.case("%s stops cleanly on SIGTERM" % d.name):
                    d.stop()
        failed = bool(t.failures)
    except Skip as e:
        print("SKIP %s: %s" % (name, e))
        _run_cleanups()
        sys.exit(SKIP)
    except BaseException:  # noqa: BLE001 - report everything
        log("FAILED with an exception:\n%s" % traceback.format_exc())
        failed = True
    finally:
        if t is not None:
            for d in t.daemons:  # never leave a daemon behind
                if d.proc.running():
                    d.proc.kill()
    if failed:
        _dump_daemon_logs(t)
        if t is not None and t.failures:
            print("FAILED cases: %s" % "; ".join(t.failures))
        print("FAIL %s" % name)
        sys.stdout.flush()
        _run_cleanups()
        os._exit(1)
    print("PASS %s" % name)
    sys.stdout.flush()
    _run_cleanups()
    sys.exit(0)
