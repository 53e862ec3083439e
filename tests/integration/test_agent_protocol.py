"""The daemon's side of the agent protocol, driven by a hostile fake agent
(this test process): fds only for the agent's own threads, a garbage ring
reported as corrupt, malformed frames cutting the connection, alloc event
records becoming weighted samples (and their lengths checked), and the
daemon serving everyone else throughout."""
import math

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
METHOD, RESOLVE = 3, 67
EVENT_STATUS, EVENTS, EVENTS_DONE, EVENT_ON, EVENT_OFF = 12, 13, 14, 70, 71
THREADS_ARMED = 15
FEATURE_ARMED = 4
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

    with t.case("-e alloc through a fake agent: EVENT_ON, records as weighted samples with the "
                "class leaf, EVENT_OFF waits for the last ones; bad record lengths cut the connection"):
        agent = FakeAgent(d.socket)
        agent.hello()
        c = d.client()
        rid = c.start_record(pid=os.getpid(), event="alloc", alloc_bytes=65536, duration_ms=60000)
        agent.recv_type(START)
        payload, _ = agent.recv_type(EVENT_ON)
        jt.check_eq(struct.unpack("<IIQ", payload), (1, 0, 65536), "EVENT_ON {alloc, 0, interval}")
        agent.send(EVENT_STATUS, struct.pack("<Ii120s", 1, 0, b""))

        def rec(size, cls, mid):
            pad = cls + bytes(-len(cls) % 8)
            return (struct.pack("<IIQQHHI", 1, os.getpid(), time.monotonic_ns(), size, 1, len(cls), 0)
                    + pad + struct.pack("<iiQ", 5, 0, mid))

        agent.send(EVENTS, struct.pack("<II", 2, 0) + rec(1024, b"[B", 0x1234) + rec(1024, b"[B", 0x1234))
        payload, _ = agent.recv_type(RESOLVE)
        count, _ = struct.unpack_from("<II", payload)
        jt.check_eq((count, struct.unpack_from("<Q", payload, 8)[0]), (1, 0x1234), "RESOLVE of the frame")
        agent.send(METHOD, struct.pack("<QHHHH", 0x1234, 6, 5, 3, 0) + b"LFake;" + b"alloc" + b"()V")
        c.send("cancel", target=rid)
        agent.recv_type(EVENT_OFF)
        # The last records come after EVENT_OFF and still count.
        agent.send(EVENTS, struct.pack("<II", 1, 0) + rec(2048, b"Ljava/lang/String;", 0x1234))
        agent.send(EVENTS_DONE)
        r = c.collect_record(rid, 20)
        stacks = r.stacks()
        want = {"Fake.alloc;byte[]": 2 * round(1024 / -math.expm1(-1024 / 65536)),
                "Fake.alloc;java.lang.String": round(2048 / -math.expm1(-2048 / 65536))}
        got = {";".join(jt.frames_of(k)[-2:]): v for k, v in stacks.items()}
        jt.check_eq(got, want, "alloc_space per stack")
        jt.check_eq(r.summary().get("java", {}).get("event_records"), 3, "summary.java.event_records")
        agent.recv_type(STOP, timeout=5)
        agent.s.close()

        agent = FakeAgent(d.socket)
        agent.hello()
        rid = c.start_record(pid=os.getpid(), event="alloc", duration_ms=60000)
        agent.recv_type(START)
        agent.recv_type(EVENT_ON)
        agent.send(EVENT_STATUS, struct.pack("<Ii120s", 1, 0, b""))
        bad = struct.pack("<IIQQHHI", 1, os.getpid(), time.monotonic_ns(), 64, 129, 0, 0)
        agent.send(EVENTS, struct.pack("<II", 1, 0) + bad + bytes(129 * 16))
        jt.check(agent.closed_by_peer(), "daemon kept an agent that sent 129 frames in a record")
        agent.s.close()
        # Nothing more can come: the recording ends with what it has.
        r = c.collect_record(rid, 20)
        jt.check(r.profile is not None, "no profile after the agent was dropped: %s" % r.describe())
        jt.check_eq(r.profile.get("status"), "agent_gone", "status")

    with t.case("-e lock refused by the agent: event_unavailable with its reason"):
        agent = FakeAgent(d.socket)
        agent.hello()
        c = d.client()
        rid = c.start_record(pid=os.getpid(), event="lock", duration_ms=60000)
        agent.recv_type(START)
        payload, _ = agent.recv_type(EVENT_ON)
        jt.check_eq(struct.unpack("<IIQ", payload), (2, 0, 10000), "EVENT_ON {lock, 0, 10 us in ns}")
        agent.send(EVENT_STATUS, struct.pack("<Ii120s", 2, -errno.ENOTSUP,
                                             b"AddCapabilities: JVMTI_ERROR_NOT_AVAILABLE (98)"))
        r = c.collect_record(rid, 20)
        jt.check_eq(r.error_code, "event_unavailable", "error code (%s)" % r.describe())
        jt.check("refused the lock event: AddCapabilities: JVMTI_ERROR_NOT_AVAILABLE" in
                 r.error.get("message", ""), "message %r" % (r.error,))
        agent.s.close()

    with t.case("the start gate: THREADS_ARMED starts sampling at once (twice is harmless); "
                "an agent that never sends it, at the 2 s deadline with a warning"):
        def gated(send_armed):
            agent = FakeAgent(d.socket)
            agent.send(HELLO, struct.pack("<II64s", 1, os.getpid(), b"fake agent"))
            payload, _ = agent.recv_type(WELCOME)
            jt.check(struct.unpack("<II", payload)[1] & FEATURE_ARMED, "WELCOME without FEATURE_ARMED")
            # Before any recording: nothing to start, and no reason to drop us.
            agent.send(THREADS_ARMED)
            c = d.client()
            t0 = time.monotonic()
            rid = c.start_record(pid=os.getpid(), duration_ms=1000, interval_us=10000)
            agent.recv_type(START)
            if send_armed:
                agent.send(THREADS_ARMED)
                agent.send(THREADS_ARMED)
            rec = c.collect_record(rid, 20)
            took = time.monotonic() - t0
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            agent.recv_type(STOP, timeout=5)   # still connected: nothing was refused
            agent.s.close()
            samp = [m for m in rec.messages if m.get("type") == "sampling"]
            warn = [m for m in rec.messages if m.get("type") == "warning"
                    and m.get("code") == "sampling_not_ready"]
            jt.check_eq(len(samp), 1, "sampling messages")
            jt.log("gate: sampling %r, %.2f s in all, profile duration %s ms"
                   % (samp[0], took, rec.summary().get("duration_ms")))
            # -d counts from the gate's opening, whenever that was.
            jt.check(900 <= rec.summary().get("duration_ms", 0) <= 1500,
                     "duration_ms %r" % rec.summary().get("duration_ms"))
            return samp[0], warn, took

        samp, warn, took = gated(True)
        # Opened by THREADS_ARMED, before the 2 s deadline ("ready"); how
        # soon depends on the machine (1.5 s under load 15, the fake
        # agent's unwind tables being built too).
        jt.check(samp["ready"] is True and samp["wait_ms"] < 2000, "sampling %r" % samp)
        jt.check(not warn, "sampling_not_ready after THREADS_ARMED: %r" % warn)
        samp, warn, took = gated(False)
        jt.check(samp["ready"] is False and 2000 <= samp["wait_ms"] < 2500, "sampling %r" % samp)
        jt.check(warn, "no sampling_not_ready warning")
        jt.check(took >= 3.0, "the recording took %.2f s: -d did not count from the deadline" % took)

    with t.case("a client that leaves while its recording waits at the gate: nothing left behind"):
        agent = FakeAgent(d.socket)
        agent.hello()
        c = d.client()
        c.start_record(pid=os.getpid(), duration_ms=1000, interval_us=10000)
        agent.recv_type(START)
        c.close()
        agent.recv_type(STOP, timeout=5)
        agent.s.close()
        st = d.client().status()
        jt.check_eq(st["sessions"]["active"], 0, "sessions after the client left")
        jt.check_eq(st["sampler"]["thread_events"], 0, "per-thread events after the client left")

    with t.case("THREADS_ARMED with a payload cuts the connection"):
        agent = FakeAgent(d.socket)
        agent.hello()
        agent.send(THREADS_ARMED, b"x" * 8)
        jt.check(agent.closed_by_peer(), "the daemon kept a connection that sent a bad THREADS_ARMED")

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
