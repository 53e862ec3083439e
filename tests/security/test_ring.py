"""Issue 10, point 8: hostile ring contents must cost the daemon bounded
memory and bounded CPU.

A fake agent runs as nobody (a process of nobody's that speaks the agent
protocol, as tests/integration/test_agent_protocol.py does), and nobody
records it. Its ring, which the profiled process writes, gets
- records that join real samples of two busy threads, each with 254 new
  method ids (the method table grew without limit: 2 M ids, +240 MiB),
- records stamped an hour in the future (they used to queue until the end
  of the recording: RSS 58 MiB -> 3.9 GiB in 24 s),
- then, for the last seconds, records on one thread in descending time as
  fast as the daemon reads them (the sorted insert was quadratic: 100 % CPU,
  root's status 1-2 s; they also fill the recording's byte bound),
over half a million records carrying 2 M distinct method ids. A second case
has three agents flood descending times at once (one uid's recordings: the
per-uid bound). Root's status must stay fast throughout, the daemon's RSS
must stay within the bounds (asserted in MiB), and every recording must
complete with what was refused counted in summary.java.limits. Run against
the daemon before these bounds, the same test saw RSS reach 742 MiB and
root's status take 671 ms.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402
import rootwatch as rw  # noqa: E402

NOBODY_PYTHON = "/usr/bin/python3"
MiB = 2**20
# The daemon's bounds (daemon/record/session_int.h).
SESSION_BYTES = 64 * MiB
UID_BYTES = 128 * MiB
METHODS = 131072
RING_BYTES = 4096 + 4096 * 4096

# The fake agent: argv socket, seconds, mode ("all": the three attacks and two
# busy threads; "flood": descending records only, as fast as the daemon reads).
AGENT = r"""
import array, hashlib, mmap, os, select, socket, struct, sys, threading, time
path, seconds, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
HDR = struct.Struct("<IHHII")
MAGIC = 0x4741504A
HELLO, PERF_FD_REQ, WELCOME, START, PERF_FD, RESOLVE, STOP = 1, 2, 64, 65, 66, 67, 68
NFR = 254
GATE_NS = 2500 * 10**6
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
def send(t, p=b""):
    s.sendall(HDR.pack(MAGIC, 1, t, len(p), 0) + p)
buf = b""
def frames(block):
    # Complete frames read so far: [(type, payload, fds)]; block waits for one.
    global buf
    out, fds = [], []
    while True:
        r, _, _ = select.select([s], [], [], None if block and not out else 0)
        if not r:
            break
        data, more, _, _ = socket.recv_fds(s, 1 << 20, 8)
        if not data:
            sys.exit(0)
        buf += data
        fds += more
        while len(buf) >= 16:
            magic, ver, t, ln, _ = HDR.unpack_from(buf)
            if len(buf) < 16 + ln:
                break
            out.append((t, buf[16:16 + ln], fds))
            fds = []
            buf = buf[16 + ln:]
        if out:
            block = False
    return out
send(HELLO, struct.pack("<II64s", 1, os.getpid(), b"hostile"))
while not any(t == WELCOME for t, _, _ in frames(True)):
    pass
print("hello", flush=True)
ring = None
while ring is None:
    for t, p, fds in frames(True):
        if t == START:
            ring_bytes, nslots = struct.unpack_from("<QIIII", p)[2], struct.unpack_from("<QIIII", p)[4]
            ring = mmap.mmap(fds[0], ring_bytes)
t_start = time.monotonic_ns()
print("start", flush=True)
stop = threading.Event()
busy_tid = []
def busy():
    busy_tid.append(threading.get_native_id())
    data = b"x" * (1 << 20)
    while not stop.is_set():
        hashlib.sha256(data).digest()  # releases the GIL: real CPU on this thread
if mode == "all":
    for _ in range(2):
        threading.Thread(target=busy, daemon=True).start()
    while len(busy_tid) < 2:
        time.sleep(0.01)
    for bt in busy_tid:
        send(PERF_FD_REQ, struct.pack("<II", bt, 0))
tid = busy_tid[0] if busy_tid else threading.get_native_id()
# 2 M distinct method ids, one slot's worth (254 frames) per record.
POOL = 8192
ids = array.array("Q", bytes(16 * NFR * POOL))
ids[1::2] = array.array("Q", range(1, NFR * POOL + 1))
pool = ids.tobytes()
ids = None
slot_hdr = struct.Struct("<QIiQ")
n = 0
desc = time.monotonic_ns()
kept = []
counts = {"future": 0, "descending": 0, "joinable": 0}
last_join = t_start
end = time.monotonic() + seconds
while time.monotonic() < end:
    for t, p, fds in frames(False):
        kept += fds  # perf fds: keep them open
        if t == STOP:
            end = 0
    w = struct.unpack_from("<Q", ring, 16)[0]
    r = struct.unpack_from("<Q", ring, 24)[0]
    free = nslots - (w - r)
    now = time.monotonic_ns()
    todo = []
    if mode == "all":
        # Every 0.2 ms since the last round, on each busy thread: each of
        # their BPF samples finds an agent record just after it.
        while last_join < now and len(todo) + len(busy_tid) <= free:
            last_join += 200000
            todo += [("joinable", last_join, bt) for bt in busy_tid]
    # The first 9 s: method ids, and a quarter of the room for the future
    # (a lighter writer leaves the busy threads more CPU, so more samples
    # join until the method bound is reached); then the descending flood
    # fills the session's bytes.
    if mode == "all" and now - t_start < 9 * 10**9:
        todo += [("future", now + 3600 * 10**9, tid)] * ((free - len(todo)) // 4)
    # The recording starts when the daemon's start gate opens: this agent
    # never says its threads are armed, so at the gate's 2 s deadline.
    # Records stamped before it are outside the recording (dropped), so the
    # descending ones stay after it.
    while len(todo) < free and now - t_start >= GATE_NS and (
            mode == "flood" or now - t_start >= 9 * 10**9):
        desc = max(desc - 1000, t_start + GATE_NS)
        todo.append(("descending", min(desc, now), tid))
    for kind, ts, rtid in todo:
        off = 4096 + ((w % nslots) * 4096)
        k = n % POOL
        ring[off + 8:off + 32] = slot_hdr.pack(ts, rtid, NFR, 0)
        ring[off + 32:off + 32 + 16 * NFR] = pool[k * 16 * NFR:(k + 1) * 16 * NFR]
        struct.pack_into("<Q", ring, off, w + 1)
        w += 1
        n += 1
        counts[kind] += 1
    struct.pack_into("<Q", ring, 16, w)
    time.sleep(0.01)
stop.set()
print("wrote %d records: %r" % (n, counts), flush=True)
time.sleep(3600)
"""


# What the fake agent runs, for 3 s: so that the daemon knows its binaries.
WARM_UP = r"""
import hashlib, time
end = time.monotonic() + 3
while time.monotonic() < end:
    hashlib.sha256(b"x" * (1 << 20)).digest()
"""


class FakeAgent:
    def __init__(self, t, d, seconds, mode):
        self.out_path = os.path.join(t.mkdtemp("agent-"), "agent.out")
        out = open(self.out_path, "wb")
        self.proc = jt.Proc(jt.as_user_argv("nobody", [NOBODY_PYTHON, "-c", AGENT, d.socket,
                                                       str(seconds), mode]),
                            "fake-agent", stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.pid = self.proc.pid
        self.wait_for("hello", 10)

    def text(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def wait_for(self, word, timeout):
        jt.wait_until(lambda: word in self.text() or not self.proc.running(), timeout,
                      what="the fake agent to say %r" % word)
        jt.check(word in self.text(), "the fake agent exited: %s" % self.text()[-2000:])


def rss_bound(t, normal):
    """The RSS growth allowed. Under AddressSanitizer freed memory waits in
    a 256 MiB quarantine and every block carries redzones and shadow: twice
    the bound plus the quarantine (unbounded growth still fails by GiBs)."""
    with open(t.jprofd, "rb") as f:
        if b"__asan_init" not in f.read():
            return normal
    return 2 * normal + 256 * MiB


def limits(rec):
    java = rec.summary().get("java") or {}
    lim = java.get("limits")
    jt.check(isinstance(lim, dict), "summary.java has no limits: %r" % java)
    return java, lim


def main(t):
    jt.check(os.access(NOBODY_PYTHON, os.X_OK), "%s is needed (nobody runs it)" % NOBODY_PYTHON)
    d = t.start_daemon()
    # The daemon symbolizes a binary (reading its ELF file) the first time
    # the host view samples it: python and libcrypto here, before the watch.
    warm = t.spawn([NOBODY_PYTHON, "-c", WARM_UP], settle=0)
    jt.wait_until(lambda: not warm.running(), 15, what="the warm-up")
    watch = rw.RootWatch(t, d)

    with t.case("future-stamped, descending and method-id floods: bounded, counted, completed"):
        agent = FakeAgent(t, d, 15, "all")
        c = d.client(user="nobody")
        rid = c.start_record(pid=agent.pid, duration_ms=13000, interval_us=2500, progress=False)
        agent.wait_for("start", 10)
        rec = c.collect_record(rid, 40)
        growth = watch.rss_peak() - watch.rss_base
        jt.log("daemon RSS grew by %.0f MiB" % (growth / MiB))
        # One ring (16 MiB, shared with the agent) and one session's bytes,
        # plus what malloc keeps around them.
        jt.check(growth < rss_bound(t, RING_BYTES + SESSION_BYTES + 48 * MiB),
                 "the daemon's RSS grew by %.0f MiB" % (growth / MiB))
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "complete", "profile status")
        java, lim = limits(rec)
        ref = lim["refused"]
        jt.log("summary.java: %r" % java)
        jt.check_eq(java.get("state"), "active", "java state")
        jt.check(java["ring"]["records"] > 200000,
                 "the agent wrote only %d records" % java["ring"]["records"])
        jt.check(ref["future_time"] > 20000, "future records refused: %d" % ref["future_time"])
        jt.check(ref["session_bytes"] > 0, "nothing refused at the session's bytes: %r" % ref)
        jt.check(lim["session_bytes_peak"] <= SESSION_BYTES,
                 "session bytes peaked at %d" % lim["session_bytes_peak"])
        jt.check(java["joined"] > 100, "too few joined samples (%d) to test the method bound"
                 % java["joined"])
        jt.check_eq(lim["methods_tracked"], METHODS, "method ids tracked")
        jt.check(ref["frames_over_methods"] > 0, "no frame past the method bound: %r" % ref)
        jt.check(any(m.get("type") == "warning" and m.get("code") == "java_limit"
                     for m in rec.messages), "no java_limit warning")
        c.close()
        agent.wait_for("wrote", 10)
        jt.log("fake agent: %s" % agent.text().strip().splitlines()[-1])
        agent.proc.kill()

    with t.case("three flooding recordings of one uid: bounded per uid"):
        agents = [FakeAgent(t, d, 10, "flood") for _ in range(3)]
        clients = [d.client(user="nobody") for _ in agents]
        rss0 = watch.rss_peak()
        rids = [c.start_record(pid=a.pid, duration_ms=7000, progress=False)
                for a, c in zip(agents, clients)]
        recs = [c.collect_record(rid, 40) for c, rid in zip(clients, rids)]
        growth = watch.rss_peak() - watch.rss_base
        jt.log("daemon RSS grew by %.0f MiB" % (growth / MiB))
        jt.check(growth < rss_bound(t, 3 * RING_BYTES + UID_BYTES + 64 * MiB),
                 "the daemon's RSS grew by %.0f MiB (%.0f MiB before this case)"
                 % (growth / MiB, (rss0 - watch.rss_base) / MiB))
        lims = []
        for a, c, rec in zip(agents, clients, recs):
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            jt.check_eq(rec.profile.get("status"), "complete", "profile status")
            lims.append(limits(rec)[1])
            c.close()
            a.proc.kill()
        jt.log("limits: %r" % lims)
        for lim in lims:
            jt.check(lim["session_bytes_peak"] <= SESSION_BYTES, "session peak %r" % lim)
            jt.check(lim["uid_bytes_peak"] <= UID_BYTES, "uid peak %r" % lim)
        jt.check(max(lim["uid_bytes_peak"] for lim in lims) > UID_BYTES - 8 * MiB,
                 "the uid's budget was never filled: %r" % lims)
        jt.check(sum(lim["refused"]["uid_bytes"] for lim in lims) > 0,
                 "nothing refused at the uid's bytes: %r" % lims)

    watch.stop()
    with t.case("root's status stayed fast throughout; the daemon still serves"):
        watch.check_fast("during the ring floods")
        jt.check_eq(d.client().status()["sessions"]["active"], 0, "sessions left")


if __name__ == "__main__":
    jt.run(main)
