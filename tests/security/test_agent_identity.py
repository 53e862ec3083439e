"""Agent identity (issue 10, point 2): an agent connection belongs to the
process that connected, not to its pid. Attacks, as nobody: a process
connects as an agent, passes the socket to a longer-lived holder and exits
(the connection is closed, no perf fd or ring is handed out); its pid is then
given to another user's process, which gets recorded (the stale connection
is not bound to it); a second connection of a process tries to take over its
agent bound to a recording (refused, the bound one keeps working)."""
import os
import shutil
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

HDR = struct.Struct("<IHHII")  # magic, version, type, length, reserved
MAGIC, VERSION = 0x4741504A, 1
HELLO, PERF_FD_REQ = 1, 2
WELCOME, START, PERF_FD, ERROR = 64, 65, 66, 69
EBUSY = 16

# The process that connects: on "c" it connects to the daemon and hands the
# connection to the test over its control socket; on "e" it execs the path
# that follows; on anything else it exits.
PEER = r"""
import os, socket, sys
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ctl.connect(sys.argv[2])
while True:
    cmd = ctl.recv(1)
    if cmd == b"c":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        socket.send_fds(ctl, [b"k"], [s.fileno()])
        s.close()
    elif cmd == b"e":
        path = ctl.recv(4096).decode()
        os.execv(path, [path, "30"])
    else:
        break
"""


class Conn:
    """An agent connection made by a Peer and held by this test."""

    def __init__(self, sock):
        self.s = sock
        self.fds_received = 0

    def send(self, ftype, payload=b""):
        try:
            self.s.sendall(HDR.pack(MAGIC, VERSION, ftype, len(payload), 0) + payload)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def _read(self, n, deadline):
        data, fds = b"", []
        while len(data) < n:
            self.s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk, more, _, _ = socket.recv_fds(self.s, n - len(data), 4)
            except ConnectionResetError:
                chunk, more = b"", []
            fds += more
            if not chunk:
                return None, fds
            data += chunk
        return data, fds

    def frame(self, timeout=10):
        """(type, payload) of the next frame, None at EOF; socket.timeout if
        nothing came. Every fd that came with it is counted and closed."""
        deadline = time.monotonic() + timeout
        head, fds = self._read(HDR.size, deadline)
        payload = b""
        if head is not None:
            _, _, ftype, length, _ = HDR.unpack(head)
            payload, more = self._read(length, deadline) if length else (b"", [])
            fds += more
        self.fds_received += len(fds)
        for fd in fds:
            os.close(fd)
        return None if head is None or payload is None else (ftype, payload)

    def expect(self, want, timeout=10):
        while True:
            f = self.frame(timeout)
            jt.check(f is not None, "connection closed while waiting for frame %d" % want)
            if f[0] == want:
                return f[1]

    def hello(self):
        self.send(HELLO, struct.pack("<II64s", VERSION, 0, b"identity test"))
        self.expect(WELCOME)

    def closed_by_daemon(self, timeout=5):
        """True once the daemon closes the connection (frames are skipped)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.frame(deadline - time.monotonic()) is None:
                    return True
        except socket.timeout:
            pass
        return False

    def close(self):
        self.s.close()


class Peer:
    """A process (as user) that makes agent connections for the test."""

    def __init__(self, t, d, user):
        self.dir = t.mkdtemp("peer-")
        path = os.path.join(self.dir, "ctl")
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(path)
        os.chmod(path, 0o777)
        lsock.listen(1)
        lsock.settimeout(15)
        self.proc = t.spawn(["python3", "-c", PEER, d.socket, path], user=user,
                            what="agent peer", settle=0)
        self.ctl, _ = lsock.accept()
        lsock.close()
        self.pid = self.proc.pid

    def connect(self):
        self.ctl.sendall(b"c")
        self.ctl.settimeout(15)
        _, fds, _, _ = socket.recv_fds(self.ctl, 1, 1)
        jt.check(len(fds) == 1, "the peer did not hand over its connection")
        return Conn(socket.socket(fileno=fds[0]))

    def exec_(self, path):
        """The connecting process execs path (its connections live on here)."""
        self.ctl.sendall(b"e" + path.encode())

    def exit(self):
        """The connecting process exits (and is reaped); its connections live on here."""
        self.ctl.sendall(b"x")
        self.ctl.close()
        jt.check_eq(self.proc.wait(10), 0, "agent peer exit status")


def bound_agent(t, d, duration_ms):
    """nobody's peer, its agent connection (held here) bound to nobody's
    recording of it: (peer, connection, client, record id)."""
    peer = Peer(t, d, "nobody")
    conn = peer.connect()
    conn.hello()
    c = d.client(user="nobody")
    rid = c.start_record(pid=peer.pid, duration_ms=duration_ms, interval_us=10000)
    conn.expect(START)
    jt.check_eq(conn.fds_received, 1, "fds with START (the ring)")
    return peer, conn, c, rid


def audit_lines(d, text):
    return [line for line in d.stderr_text().splitlines() if "audit:" in line and text in line]


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def spawn_at_pid(t, pid, user):
    """Starts spin_chain as user with exactly this pid, through
    /proc/sys/kernel/ns_last_pid (root); None if other processes on the
    host keep taking it first."""
    for _ in range(200):
        if os.path.exists("/proc/%d" % pid):
            return None  # taken for good by someone else
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = t.workload("spin_chain", 30, user=user, settle=0)
        if p.pid == pid:
            return p
        p.kill()
    return None


def main(t):
    d = t.start_daemon()
    victim_user = jt.SECOND_USER
    jt.user_ids(victim_user)  # created on first use

    with t.case("a connection whose process exited is closed, with nothing handed out"):
        peer = Peer(t, d, "nobody")
        early = peer.connect()   # not a word before its process is gone
        late = peer.connect()
        late.hello()
        peer.exit()
        jt.check(late.closed_by_daemon(), "the daemon kept the agent connection of an exited process")
        early.send(HELLO, struct.pack("<II64s", VERSION, 0, b"identity test"))
        jt.check(early.closed_by_daemon(), "an agent whose process had exited was welcomed")
        for c in (early, late):
            jt.check_eq(c.fds_received, 0, "fds passed over a connection of an exited process")
            c.close()
        jt.wait_until(lambda: len(audit_lines(d, "the process that connected has exited")) >= 2, 5,
                      what="audit lines for both connections")

    with t.case("a stale connection is not bound to the next process with its pid"):
        victim = None
        for attempt in range(5):
            peer = Peer(t, d, "nobody")
            stale = peer.connect()
            stale.hello()
            pid = peer.pid
            peer.exit()
            victim = spawn_at_pid(t, pid, victim_user)
            if victim:
                break
            stale.close()
            jt.log("pid %d was taken by another process; again" % pid)
        jt.check(victim is not None, "could not start a process at a freed pid in 5 attempts")
        jt.log("pid %d: the attacker's agent before, %s's spin_chain now" % (pid, victim_user))
        jt.wait_until(lambda: comm(pid) == "spin_chain", 5, what="the victim to exec spin_chain")
        c = d.client(user=victim_user)
        rec = c.record(pid=pid, duration_ms=1500, interval_us=10000, timeout=20)
        jt.check(rec.profile is not None, "the victim's recording failed: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "complete", "the victim's recording status")
        java = rec.summary().get("java")
        jt.check(java is None or java.get("state") != "active",
                 "the victim's recording was bound to an agent: %r" % (java,))
        jt.check(jt.samples_matching(rec.stacks(), lambda f: jt.has_seq(f, ["main", "a", "b", "spin"]))
                 > 0, "the victim's own stacks are missing:\n%s" % jt.top_stacks(rec.stacks()))
        jt.check(stale.closed_by_daemon(1), "the stale agent connection is still open")
        jt.check_eq(stale.fds_received, 0, "fds (ring or perf events) passed to the stale connection")
        stale.close()
        c.close()
        victim.kill()

    with t.case("a newer connection does not replace an agent bound to a recording"):
        peer, bound, c, rid = bound_agent(t, d, 20000)
        newer = peer.connect()
        newer.send(HELLO, struct.pack("<II64s", VERSION, 0, b"usurper"))
        code, = struct.unpack_from("<i", newer.expect(ERROR))
        jt.check_eq(code, -EBUSY, "error code to the second connection")
        jt.check(newer.closed_by_daemon(), "the second connection was kept")
        jt.check_eq(newer.fds_received, 0, "fds passed to the second connection")
        newer.close()
        # The bound one still gets its perf fd (the peer's main thread).
        bound.send(PERF_FD_REQ, struct.pack("<II", peer.pid, 0))
        tid, status = struct.unpack("<Ii", bound.expect(PERF_FD))
        jt.check_eq((tid, status), (peer.pid, 0), "perf fd answer to the bound agent")
        jt.check_eq(bound.fds_received, 2, "fds after the perf fd request")
        jt.check(audit_lines(d, "a second connection refused"), "no audit line for the refusal")
        peer.exit()
        rec = c.collect_record(rid, 20)
        jt.check(rec.profile is not None, "recording after the peer exited: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "process_exited", "recording status")
        jt.check(bound.closed_by_daemon(), "the agent connection of the exited peer stays open")
        bound.close()
        c.close()

    with t.case("an agent's binding ends when its process execs a setuid program"):
        # Issue 26, point 4: nobody's process connects as an agent, keeps
        # the socket elsewhere (here: the test), then execs a setuid-root
        # program; root records that process. Before, the agent was bound:
        # nobody got the ring and root's perf fds, and wrote root's stacks.
        suid = os.path.join(t.mkdtemp("suid-"), "spin_suid")
        shutil.copy2(t.prog("spin_chain"), suid)
        os.chown(suid, 0, 0)
        os.chmod(suid, 0o4755)
        peer = Peer(t, d, "nobody")
        conn = peer.connect()
        conn.hello()
        peer.exec_(suid)
        jt.wait_until(lambda: comm(peer.pid) == "spin_suid", 10, what="the peer to exec spin_suid")
        with open("/proc/%d/status" % peer.pid) as f:
            euid = [ln.split()[2] for ln in f if ln.startswith("Uid:")][0]
        jt.check_eq(euid, "0", "effective uid of the peer after the setuid exec")
        c = d.client()
        rec = c.record(pid=peer.pid, duration_ms=1500, interval_us=10000, timeout=20)
        jt.check(rec.profile is not None, "root's recording failed: %s" % rec.describe())
        java = rec.summary().get("java")
        jt.check(java is None or java.get("state") != "active",
                 "root's recording was bound to nobody's agent: %r" % (java,))
        conn.send(PERF_FD_REQ, struct.pack("<II", peer.pid, 0))
        jt.check(conn.closed_by_daemon(), "the agent connection is still open after the exec")
        jt.check_eq(conn.fds_received, 0, "fds (ring or perf events) passed to nobody's agent")
        jt.check(audit_lines(d, "exec'd or changed credentials"), "no audit line for the exec")
        conn.close()
        c.close()
        os.kill(peer.pid, 9)

    with t.case("a perf-fd flood from a bound agent is bounded by the uid's perf-event quota"):
        # Issue 26, point 5: every perf fd reply queued for an agent that
        # does not read holds a dup'd fd of the daemon's; 30,000 requests
        # took the daemon to 19,996 of 20,000 fds. They count in the uid's
        # perf events (4096 by default) now.
        peer, flood, c, rid = bound_agent(t, d, 60000)
        base = len(os.listdir("/proc/%d/fd" % d.pid))
        flood.s.sendall(b"".join(
            HDR.pack(MAGIC, VERSION, PERF_FD_REQ, 8, 0) + struct.pack("<II", peer.pid, 0)
            for _ in range(10000)))
        seen = []

        def settled():
            seen.append(len(os.listdir("/proc/%d/fd" % d.pid)))
            return len(seen) > 5 and seen[-1] == seen[-6]
        jt.wait_until(settled, 30, 0.2, "the daemon's fd count to settle after the flood")
        grew = seen[-1] - base
        jt.log("10,000 perf fd requests not read: the daemon's fds %d -> %d" % (base, seen[-1]))
        jt.check(grew <= 4096 + 64, "the daemon holds %d more fds for one agent's unread "
                 "perf fd replies (the uid's perf events are 4096)" % grew)
        # Another user is still served.
        w = t.workload("spin_chain", 30, user=victim_user)
        c2 = d.client(user=victim_user)
        rec = c2.record(pid=w.pid, duration_ms=1000, interval_us=10000, timeout=20)
        jt.check(rec.profile is not None and jt.total_samples(rec.stacks()) > 0,
                 "another user's recording during the flood: %s" % rec.describe())
        c2.close()
        w.kill()
        # Closing the connection gives them all back.
        flood.close()
        c.send("cancel", target=rid)
        c.collect_record(rid, 20)
        c.close()
        jt.wait_until(lambda: len(os.listdir("/proc/%d/fd" % d.pid)) <= base + 16, 10, 0.2,
                      "the queued fds to be closed with the connection")
        peer.exit()

    with t.case("root is still answered"):
        d.check_root_answered()


jt.run(main)
