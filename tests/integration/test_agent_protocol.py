"""The daemon's side of the agent protocol, driven by a hostile fake agent
(this test process): fds only for the agent's own threads, a garbage ring
reported as corrupt, malformed frames cutting the connection, and the daemon
serving everyone else throughout."""

import errno
import mmap
import os
import random
import socket
import struct
import threading
import time

import jproftest as jt

HDR = struct.Struct("<IHHII")
MAGIC = 0x4741504A
HELLO, PERF_FD_REQ, WELCOME, START, PERF_FD, STOP, ERROR = 1, 2, 64, 65, 66, 68, 69
SIGNAL = 11
THREAD_NAME = 10
RING_HDR = struct.Struct("<IIIIQQQ")
RING_MAGIC = 0x474E5252


def frame(ftype, payload=b""):
    return HDR.pack(MAGIC, 1, ftype, len(payload), 0) + payload


class FakeAgent:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(10)

    def send(self, ftype, payload=b""):
        self.s.sendall(frame(ftype, payload))

    def recv(self, timeout=10):
        """One frame: (type, payload, fds)."""
        self.s.settimeout(timeout)
        data, fds, _, _ = socket.recv_fds(self.s, HDR.size, 4)
        while len(data) < HDR.size:
            more, more_fds, _, _ = socket.recv_fds(self.s, HDR.size - len(data), 4)
            if not more:
                raise jt.TestFailure("agent connection closed mid-header")
            data += more
            fds += more_fds
        magic, version, ftype, length, _ = HDR.unpack(data)
        jt.check_eq(magic, MAGIC, "frame magic from the daemon")
        payload = b""
        while len(payload) < length:
            chunk = self.s.recv(length - len(payload))
            if not chunk:
                raise jt.TestFailure("agent connection closed mid-payload")
            payload += chunk
        return ftype, payload, fds

    def recv_type(self, want, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            ftype, payload, fds = self.recv(max(0.1, deadline - time.monotonic()))
            if ftype == want:
                return payload, fds
            for fd in fds:
                os.close(fd)

    def hello(self):
        self.send(HELLO, struct.pack("<II64s", 1, os.getpid(), b"fake agent"))
        payload, _ = self.recv_type(WELCOME)
        jt.check_eq(struct.unpack("<II", payload)[0], 1, "welcome version")

    def closed_by_peer(self, timeout=5):
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(4096):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def main(t):
    d = t.start_daemon()

    with t.case("an agent gets a ring and fds only for its own threads; a garbage ring is reported"):
        agent = FakeAgent(d.socket)
        agent.hello()
        c = d.client()
        rid = c.start_record(pid=os.getpid(), duration_ms=3000, interval_us=10000)
        payload, fds = agent.recv_type(START)
        interval_ns, sig, ring_bytes, slot_bytes, nslots, max_frames, _ = struct.unpack("<QIIIIII", payload)
        jt.check_eq(interval_ns, 10000000, "START interval")
        jt.check_eq(len(fds), 1, "fds with START (the ring memfd)")
        ring_fd = fds[0]
        jt.check_eq(os.fstat(ring_fd).st_size, ring_bytes, "ring size")
        ring = mmap.mmap(ring_fd, ring_bytes)
        magic, version, sb, ns, w, r, dropped = RING_HDR.unpack_from(ring, 0)
        jt.check_eq((magic, sb, ns), (RING_MAGIC, slot_bytes, nslots), "ring header")
        # The memfd is sealed: the agent cannot shrink it under the daemon.
        try:
            os.ftruncate(ring_fd, 4096)
            jt.check(False, "the agent could shrink the ring")
        except PermissionError:
            pass

        # A thread of another process (the daemon's own): refused, no fd.
        agent.send(PERF_FD_REQ, struct.pack("<II", d.pid, 0))
        payload, fds = agent.recv_type(PERF_FD)
        tid, status = struct.unpack("<Ii", payload)
        jt.check_eq((tid, status), (d.pid, -errno.EPERM), "perf fd for a foreign tid")
        jt.check_eq(fds, [], "fds passed for a foreign tid")
        # Our own thread: an fd to a perf event.
        busy_stop = threading.Event()
        worker_tid = []

        def busy():
            worker_tid.append(threading.get_native_id())
            x = 0
            while not busy_stop.is_set():
                x += 1

        th = threading.Thread(target=busy)
        th.start()
        jt.wait_until(lambda: worker_tid, 5, what="worker thread")
        agent.send(PERF_FD_REQ, struct.pack("<II", worker_tid[0], 0))
        payload, fds = agent.recv_type(PERF_FD)
        jt.check_eq(struct.unpack("<Ii", payload), (worker_tid[0], 0), "perf fd for our thread")
        jt.check_eq(len(fds), 1, "fds passed for our thread")
        jt.check_eq(os.readlink("/proc/self/fd/%d" % fds[0]), "anon_inode:[perf_event]",
                    "the passed fd")
        os.close(fds[0])

        # Now be hostile: garbage slots, absurd counts, indices all over.
        rnd = random.Random(7)
        body = bytearray(rnd.getrandbits(8) for _ in range(64 * slot_bytes))
        ring[4096:4096 + len(body)] = bytes(body)
        struct.pack_into("<Q", ring, 16, 50)            # write_idx: 50 "records"
        time.sleep(1.2)
        struct.pack_into("<I", ring, 12, 1 << 30)       # nslots lie
        struct.pack_into("<Q", ring, 16, 3)             # write index backwards
        rec = c.collect_record(rid, 20)
        busy_stop.set()
        th.join()
        jt.check(rec.profile is not None, "no profile after a hostile ring: %s" % rec.describe())
        summary = rec.summary()
        java = summary.get("java") or {}
        ring_st = java.get("ring") or {}
        jt.check(ring_st.get("corrupt", 0) > 0 or ring_st.get("header_corrupt"),
                 "summary does not report the corrupt ring: %r" % (java,))
        warnings = [m for m in rec.messages if m.get("type") == "warning"]
        jt.check(any(w.get("code") == "ring_corrupt" for w in warnings),
                 "no ring_corrupt warning among %r" % (warnings,))
        jt.check(summary.get("samples", 0) > 0,
                 "the busy thread's samples are missing: %r" % (summary,))
        # The recording's end tells the agent to stop.
        agent.recv_type(STOP, timeout=5)
        ring.close()
        os.close(ring_fd)
        jt.check(d.client().status()["sessions"]["active"] == 0, "a session was left behind")

    with t.case("malformed agent frames cut the connection; the daemon keeps serving"):
        for what, raw in (("bad version", HDR.pack(MAGIC, 9, HELLO, 72, 0) + bytes(72)),
                          ("huge length", HDR.pack(MAGIC, 1, HELLO, 1 << 30, 0)),
                          ("frame before hello", frame(PERF_FD_REQ, struct.pack("<II", 1, 0))),
                          ("short hello", frame(HELLO, b"xx")),
                          ("unknown type", b""),
                          ("thread name longer than its frame", b""),
                          ("thread name over the limit", b""),
                          ("implausible signal record", b"")):
            a = FakeAgent(d.socket)
            if what == "unknown type":
                a.hello()
                raw = frame(200, b"")
            elif what == "thread name longer than its frame":
                a.hello()
                raw = frame(THREAD_NAME, struct.pack("<IHH", os.getpid(), 20, 0) + b"short")
            elif what == "thread name over the limit":
                a.hello()
                raw = frame(THREAD_NAME, struct.pack("<IHH", os.getpid(), 257, 0) + b"x" * 257)
            elif what == "implausible signal record":
                # JPAG_SIGNAL naming signal 9 (SIGKILL), which no agent uses.
                a.hello()
                raw = frame(SIGNAL, struct.pack("<IIII", 9, 1, 27, 0))
            a.s.sendall(raw)
            jt.check(a.closed_by_peer(), "daemon kept an agent connection after %s" % what)
            a.s.close()
        st = d.client().status()
        jt.check_eq(st["sessions"]["active"], 0, "sessions after malformed agents")

    with t.case("an agent that vanishes mid-recording: the recording still completes"):
        agent = FakeAgent(d.socket)
        agent.hello()
        c = d.client()
        rid = c.start_record(pid=os.getpid(), duration_ms=2000, interval_us=10000)
        agent.recv_type(START)
        agent.s.close()
        rec = c.collect_record(rid, 20)
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        java = rec.summary().get("java") or {}
        jt.check_eq(java.get("state"), "agent_gone", "java state after the agent left")


jt.run(main)
