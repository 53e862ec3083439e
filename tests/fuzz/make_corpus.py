#!/usr/bin/env python3
"""Makes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<name>/)
from real inputs. The committed seeds were made with it, as root, on Debian 12,
after a normal build in build/:

    sudo tests/fuzz/make_corpus.py build

proto     the request lines of proto/examples/*.ndjson
procmaps  /proc/self/maps of cat and /proc/PID/maps of a recorded JVM
kallsyms  slices of /proc/kallsyms (start, around _etext, modules), moved to
          the unrandomized base so that no address of this boot is committed,
          and a slice as a reader without CAP_SYSLOG sees it (all zeros)
elf       the vdso of this process; unit test fixtures with the debug info
          stripped (own .symtab, C++ names, .dynsym only, a .gnu_debuglink
          naming "fuzz.debug", the name fuzz_elf gives its debug file), and
          symfix_stripped given a .symtab of 2048 functions sharing one
          255-byte name (the shape of issue 26's huge-.symtab attack, small)
agent     the bytes a real agent sent to a real jprofd (strace of the daemon)
          while it recorded a JVM, cut at frame boundaries; and a synthetic
          stream of the frames a cpu recording lacks (events, names, signal)
ring      a snapshot of that recording's ring memfd, turned into fuzz_ring
          programs (see fuzz_ring.c): the real records, a BPF record next to
          each, joins, and the agent's real names for the method ids

Only what it writes changes: run it again to refresh the seeds. The JVM part
needs root (BPF, the daemon's memory) and JDK 17."""

import glob
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(SRC, "tests", "fuzz", "corpus")
JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"

HDR = struct.Struct("<IHHII")
JPAG_MAGIC = 0x4741504A
JPAG_METHOD = 3
METHOD = struct.Struct("<QHHHH")
SLOT_BYTES = 4096
HEADER_BYTES = 4096
SLOT_HEAD = struct.Struct("<QQIiQ")

# fuzz_ring.c's opcodes and geometry.
OP_RAW, OP_SLOT, OP_READ, OP_BPF, OP_MAP, OP_RUN, OP_NAMES, OP_METHOD, OP_TICK = range(9)
FUZZ_RING_SLOTS = 4
FUZZ_CLOCK0 = 1000000000000


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    print("  %s/%s: %d bytes" % (harness, name, len(data)))


# ---- proto ----------------------------------------------------------------

def make_proto():
    n = 0
    for path in sorted(glob.glob(os.path.join(SRC, "proto", "examples", "*.ndjson"))):
        base = os.path.splitext(os.path.basename(path))[0]
        with open(path, "rb") as f:
            for line in f:
                if b'"cmd"' in line:
                    n += 1
                    put("proto", "%s-%d" % (base, n), line)


# ---- procmaps -------------------------------------------------------------

def make_procmaps():
    put("procmaps", "cat", subprocess.run(["cat", "/proc/self/maps"], check=True,
                                          capture_output=True).stdout)


# ---- kallsyms -------------------------------------------------------------

def make_kallsyms():
    with open("/proc/kallsyms", "rb") as f:
        lines = f.read().splitlines(keepends=True)
    text = [ln for ln in lines if ln.split()[2:3] == [b"_text"]]
    if not text or int(text[0].split()[0], 16) == 0:
        print("  kallsyms: no addresses (run as root); skipped")
        return
    slide = int(text[0].split()[0], 16) - 0xffffffff81000000

    def moved(chunk, zero=False):
        out = []
        for ln in chunk:
            addr, rest = ln.split(b" ", 1)
            a = int(addr, 16)
            a = 0 if zero or a == 0 else (a - slide) & 0xffffffffffffffff
            out.append(b"%016x %s" % (a, rest))
        return b"".join(out)

    etext = next(i for i, ln in enumerate(lines) if ln.split()[2:3] == [b"_etext"])
    mods = [i for i, ln in enumerate(lines) if b"\t[" in ln]
    put("kallsyms", "start", moved(lines[:200]))
    put("kallsyms", "etext", moved(lines[etext - 60:etext + 60]))
    if mods:
        put("kallsyms", "modules", moved(lines[mods[0] - 20:mods[0] + 180]))
    put("kallsyms", "no-cap-syslog", moved(lines[:100], zero=True))


# ---- elf ------------------------------------------------------------------

def with_shared_symtab(elf, nsyms, name_len):
    """elf (a stripped ELF64 LE) with a .symtab and .strtab appended: nsyms
    global functions over .text, every one named by the same string."""
    sh = struct.Struct("<IIQQQQIIQQ")
    sym = struct.Struct("<IBBHQQ")
    out = bytearray(elf)
    shoff, = struct.unpack_from("<Q", out, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", out, 0x3a)
    hdrs = [list(sh.unpack_from(out, shoff + i * shentsize)) for i in range(shnum)]
    shstr = bytes(out[hdrs[shstrndx][4]:hdrs[shstrndx][4] + hdrs[shstrndx][5]])
    text = [i for i, h in enumerate(hdrs)
            if shstr[h[0]:shstr.index(b"\0", h[0])] == b".text"][0]
    taddr, tsize = hdrs[text][3], hdrs[text][5]
    strtab = b"\0" + b"f" * name_len + b"\0"
    syms = bytes(sym.size) + b"".join(
        sym.pack(1, 0x12, 0, text, taddr + (i * 16) % tsize, 16) for i in range(nsyms))
    new_shstr = shstr + b".symtab\0.strtab\0"

    def add(data):
        out.extend(bytes(-len(out) % 8))
        off = len(out)
        out.extend(data)
        return off
    hdrs[shstrndx][4], hdrs[shstrndx][5] = add(new_shstr), len(new_shstr)
    hdrs.append([len(shstr), 2, 0, 0, add(syms), len(syms), len(hdrs) + 1, 1, 8, sym.size])
    hdrs.append([len(shstr) + 8, 3, 0, 0, add(strtab), len(strtab), 0, 0, 1, 0])
    struct.pack_into("<Q", out, 0x28, add(b"".join(sh.pack(*h) for h in hdrs)))  # e_shoff
    struct.pack_into("<H", out, 0x3c, len(hdrs))  # e_shnum
    return bytes(out)


def make_elf(build):
    with open("/proc/self/maps") as f:
        vdso = [ln for ln in f if ln.rstrip().endswith("[vdso]")][0]
    lo, hi = (int(x, 16) for x in vdso.split()[0].split("-"))
    with open("/proc/self/mem", "rb") as f:
        f.seek(lo)
        put("elf", "vdso", f.read(hi - lo))
    progs = os.path.join(build, "tests", "progs")
    tmp = tempfile.mkdtemp()
    try:
        for name in ("symfix_pie", "symfix_cxx", "symfix_stripped", "libsymfix_dso.so"):
            out = os.path.join(tmp, name)
            subprocess.run(["strip", "--strip-debug", "-o", out, os.path.join(progs, name)],
                           check=True)
            with open(out, "rb") as f:
                put("elf", name, f.read())
            if name == "symfix_stripped":
                with open(out, "rb") as f:
                    put("elf", "shared_names", with_shared_symtab(f.read(), 2048, 255))
        # Stripped, pointing at "fuzz.debug" (objcopy reads it for the CRC).
        debug = os.path.join(tmp, "fuzz.debug")
        shutil.copy(os.path.join(progs, "symfix.debug"), debug)
        out = os.path.join(tmp, "symfix_fuzzlink")
        subprocess.run(["objcopy", "--strip-all", "--add-gnu-debuglink=" + debug,
                        os.path.join(progs, "symfix_pie"), out], check=True)
        with open(out, "rb") as f:
            put("elf", "symfix_fuzzlink", f.read())
    finally:
        shutil.rmtree(tmp)


# ---- a real JVM recording: agent frames, ring, JVM maps --------------------

def children(pid):
    out = []
    for task in glob.glob("/proc/%d/task/*/children" % pid):
        with open(task) as f:
            out += [int(x) for x in f.read().split()]
    return out


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    sys.exit("make_corpus: timed out waiting for %s" % what)


def connectable(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def ring_snapshot(pid):
    """The daemon's mapping of the ring (it keeps no fd of it), or None."""
    with open("/proc/%d/maps" % pid) as f:
        ring = [ln for ln in f if "memfd:jprofd-ring" in ln]
    if not ring:
        return None
    lo, hi = (int(x, 16) for x in ring[0].split()[0].split("-"))
    with open("/proc/%d/mem" % pid, "rb") as f:
        f.seek(lo)
        return f.read(hi - lo)


def record_jvm(build):
    """Records a JVM with a daemon under strace; returns (the daemon's reads
    as (fd, bytes) in order, ring snapshots, the JVM's maps)."""
    tmp = tempfile.mkdtemp(prefix="jprof-corpus-")
    os.chmod(tmp, 0o755)
    classes = os.path.join(tmp, "java")
    os.mkdir(classes)
    os.chmod(classes, 0o755)
    for f in glob.glob(os.path.join(build, "tests", "java", "*.class")):
        shutil.copy(f, classes)
        os.chmod(os.path.join(classes, os.path.basename(f)), 0o644)
    sock = os.path.join(tmp, "jprofd.sock")
    trace = os.path.join(tmp, "trace")
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-xx", "-s", "70000", "-o", trace,
         "-e", "trace=read,recvfrom,close",
         os.path.join(build, "jprofd"), "--socket", sock,
         "--agent", os.path.join(build, "agent", "libjprofagent.so")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jvm, daemon = None, None
    try:
        wait_for(lambda: connectable(sock), 20, "the daemon's socket")
        daemon = wait_for(lambda: children(tracer.pid), 5, "the daemon's pid")[0]
        jvm = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                "--", JAVA, "-cp", classes, "CpuSplit", "8"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: "libjvm.so" in open("/proc/%d/maps" % jvm.pid).read(), 20, "the JVM")
        time.sleep(1.5)
        rec = subprocess.Popen([os.path.join(build, "jprofctl"), "--socket", sock, "record",
                                "--pid", str(jvm.pid), "-d", "4s", "-i", "5ms", "--java",
                                "require", "-o", os.path.join(tmp, "out.collapsed")])
        wait_for(lambda: ring_snapshot(daemon), 20, "the ring")
        time.sleep(2.5)
        snaps = [ring_snapshot(daemon)]
        with open("/proc/%d/maps" % jvm.pid, "rb") as f:
            maps = f.read()
        if rec.wait(60) != 0:
            sys.exit("make_corpus: jprofctl record failed")
        os.kill(daemon, signal.SIGTERM)
        tracer.wait(30)
    finally:
        if jvm:
            jvm.kill()
            jvm.wait()
        if tracer.poll() is None:
            if daemon:
                os.kill(daemon, signal.SIGKILL)
            tracer.kill()
            tracer.wait()
    reads = []
    pat = re.compile(r'^\d+\s+(?:read|recvfrom)\((\d+), "((?:\\x[0-9a-f]{2})*)"')
    closes = re.compile(r'^\d+\s+close\((\d+)\)')
    with open(trace) as f:
        for line in f:
            m = pat.match(line)
            if m and m.group(2):
                reads.append((int(m.group(1)), bytes.fromhex(m.group(2).replace("\\x", ""))))
                continue
            m = closes.match(line)
            if m:
                reads.append((int(m.group(1)), None))
    shutil.rmtree(tmp)
    return reads, snaps, maps


def agent_stream(reads):
    """The bytes of the first connection whose first bytes are an agent's."""
    fd, out = None, b""
    for rfd, data in reads:
        if fd is None:
            if data and data[:4] == struct.pack("<I", JPAG_MAGIC):
                fd, out = rfd, data
        elif rfd == fd:
            if data is None:
                break
            out += data
    if fd is None:
        sys.exit("make_corpus: no agent connection in the trace")
    return out


def frames_of(stream):
    out, off = [], 0
    while off + HDR.size <= len(stream):
        _, _, ftype, length, _ = HDR.unpack_from(stream, off)
        out.append((ftype, stream[off:off + HDR.size + length]))
        off += HDR.size + length
    return out


def make_agent(frames):
    hello, rest = frames[0][1], frames[1:]

    def upto(frs, cap):
        out = hello
        for _, raw in frs:
            if len(out) + len(raw) > cap:
                break
            out += raw
        return out

    put("agent", "hello", hello)
    put("agent", "session-start", upto(rest, 6000))
    put("agent", "methods", upto([f for f in rest if f[0] == JPAG_METHOD], 6000))
    others = [f for f in rest if f[0] != JPAG_METHOD]
    put("agent", "perf-fd-requests", upto(others, 2000))


def make_agent_synthetic():
    """Frames a cpu recording's trace does not have: thread names, a signal
    record, an event status and batches of alloc and lock records (one with
    a class name that needs padding, one with none), events done."""
    hello = struct.pack("<II64s", 1, 4242, b"OpenJDK 64-Bit Server VM 17 (synthetic)")

    def frame(ftype, payload):
        return HDR.pack(JPAG_MAGIC, 1, ftype, len(payload), 0) + payload

    def rec(event, tid, t, value, cls, nframes):
        pad = (len(cls) + 7) & ~7
        frames = b"".join(struct.pack("<iiQ", 10 + i, 0, 0x7f0000001000 + 16 * i)
                          for i in range(nframes))
        return (struct.pack("<IIQQHHI", event, tid, t, value, nframes, len(cls), 0)
                + cls.ljust(pad, b"\0") + frames)

    out = frame(1, hello)
    out += frame(10, struct.pack("<IHH", 4243, 4, 0) + b"main")
    name = "worker-\u00e9t\u00e9-1".encode()
    out += frame(10, struct.pack("<IHH", 4244, len(name), 0) + name)
    out += frame(11, struct.pack("<IIII", 34, 1, 27, 0))
    out += frame(12, struct.pack("<Ii120s", 2, 0, b""))
    batch = [rec(1, 4243, 1000000, 3072, b"[B", 3), rec(2, 4244, 2000000, 20000000,
                                                       b"LLockWait$Box;", 5),
             rec(2, 4244, 3000000, 15000, b"", 1)]
    out += frame(13, struct.pack("<II", len(batch), 0) + b"".join(batch))
    out += frame(12, struct.pack("<Ii120s", 1, -95, b"AddCapabilities: JVMTI_ERROR_NOT_AVAILABLE (98)"))
    out += frame(14, b"")
    put("agent", "events", out)


def method_names(frames):
    names = {}
    for ftype, raw in frames:
        if ftype != JPAG_METHOD:
            continue
        p = raw[HDR.size:]
        mid, cl, nl, sl, nlines = METHOD.unpack_from(p)
        o = METHOD.size
        names[mid] = (p[o:o + cl], p[o + cl:o + cl + nl], p[o + cl + nl:o + cl + nl + sl],
                      p[o + cl + nl + sl:o + cl + nl + sl + 8 * nlines])
    return names


def ring_records(snap):
    nslots = struct.unpack_from("<I", snap, 12)[0]
    recs = []
    for i in range(nslots):
        off = HEADER_BYTES + i * SLOT_BYTES
        seq, t, tid, num, _ = SLOT_HEAD.unpack_from(snap, off)
        if seq:
            n = max(0, min(num, 254))
            recs.append((seq, t, tid, num, snap[off + SLOT_HEAD.size:off + SLOT_HEAD.size + 16 * n]))
    recs.sort()
    return recs


def ring_program(recs, names):
    """A fuzz_ring program replaying recs (seq, time, tid, num, frames)."""
    prog = bytearray([0x31])  # java_lines, default max_pending, 8 ms window
    t0, clock, tids, named, seen = recs[0][1], FUZZ_CLOCK0, {}, set(), []

    def raw(off, data):
        for i in range(0, len(data), 255):
            chunk = data[i:i + 255]
            prog.extend(struct.pack("<BHB", OP_RAW, off + i, len(chunk)) + chunk)

    for k, (_, t, tid, num, frames) in enumerate(recs):
        sel = tids.setdefault(tid, len(tids) % 6)
        when = FUZZ_CLOCK0 + (t - t0)
        while when - clock > 30000000:
            step = min(65535, (when - clock - 20000000) // 10000)
            prog.extend(struct.pack("<BH", OP_TICK, step))
            clock += step * 10000
        # The BPF record of the same sample, 20 us before the agent's.
        dt = max(-32768, min(32767, (when - 20000 - clock) // 1000))
        prog.extend(struct.pack("<BBhBB", OP_BPF, sel, dt,
                                (4 << 3) | 2, 0))
        slot = HEADER_BYTES + (k % FUZZ_RING_SLOTS) * SLOT_BYTES
        raw(slot, SLOT_HEAD.pack(k + 1, when, 100 + sel, num, 0) + frames)
        raw(16, struct.pack("<Q", k + 1))  # write_idx
        seen += [struct.unpack_from("<Q", frames, i + 8)[0] for i in range(0, len(frames), 16)]
        if k % FUZZ_RING_SLOTS == FUZZ_RING_SLOTS - 1:
            prog.extend(struct.pack("<BBB", OP_READ, 0, 0))
            prog.extend(struct.pack("<BHB", OP_RUN, 0, 0))
            for mid in seen:
                if mid in names and mid not in named:
                    named.add(mid)
                    cls, name, sig, lines = names[mid]
                    cls, name, sig, lines = cls[:63], name[:31], sig[:63], lines[:7 * 8]
                    prog.extend(struct.pack("<BQBBBBB", OP_METHOD, mid, 0, len(cls), len(name),
                                            len(sig), len(lines) // 8))
                    prog.extend(cls + name + sig + lines)
    prog.extend(struct.pack("<BHB", OP_RUN, 0, 1))
    return bytes(prog)


def make_ring_synthetic():
    """What a recording meets besides plain samples: the agent's own writer
    (OP_SLOT), ASGCT errors, an uncommitted slot, an agent in another pid
    namespace (OP_MAP), names given as the join asks (OP_NAMES)."""
    prog = bytearray([0x12])  # signatures, 2 ms window
    prog.extend(struct.pack("<BBB", OP_MAP, 0, 1))
    for i in range(6):
        prog.extend(struct.pack("<BBhBB", OP_BPF, 1, -50, (3 << 3) | 1, 0))
        prog.extend(struct.pack("<BBhbBB", OP_SLOT, 0, 0, 3 if i % 3 else -2, i, 0))
        prog.extend(struct.pack("<BH", OP_TICK, 100))
    prog.extend(struct.pack("<BBhbBB", OP_SLOT, 0, 0, 1, 0, 1))
    prog.extend(struct.pack("<BBB", OP_READ, 0, 1))
    prog.extend(struct.pack("<BHB", OP_RUN, 0, 0))
    prog.extend(struct.pack("<BB", OP_NAMES, 7))
    for cls, name, sig in ((b"Lcom/example/Worker;", b"run", b"()V"),
                           (b"Ljava/lang/Thread;", b"run", b"()V"),
                           (b"Lcom/example/\xc3\xa9t\xc3\xa9;", b"<init>", b"(I[J)V")):
        prog.extend(struct.pack("<BBBBB", 0, len(cls), len(name), len(sig), 1))
        prog.extend(cls + name + sig + struct.pack("<ii", 0, 42))
    prog.extend(struct.pack("<BBhBB", OP_BPF, 2, 0, 1, 8))
    prog.extend(struct.pack("<BHB", OP_RUN, 0, 1))
    put("ring", "agent-writer", bytes(prog))


def make_jvm(build):
    reads, snaps, maps = record_jvm(build)
    put("procmaps", "jvm", maps)
    frames = frames_of(agent_stream(reads))
    make_agent(frames)
    names = method_names(frames)
    recs = ring_records([s for s in snaps if s][-1])
    if len(recs) < 48:
        sys.exit("make_corpus: only %d records in the ring" % len(recs))
    put("ring", "jvm-start", ring_program(recs[:24], names))
    put("ring", "jvm-end", ring_program(recs[-24:], names))
    errors = [j for j, r in enumerate(recs) if r[3] < 0]
    if errors:
        j = max(0, errors[0] - 8)
        put("ring", "jvm-asgct-error", ring_program(recs[j:j + 16], names))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py BUILD_DIR (a normal build: daemon, agent, fixtures)")
    build = os.path.abspath(sys.argv[1])
    make_proto()
    make_procmaps()
    make_kallsyms()
    make_elf(build)
    make_ring_synthetic()
    make_agent_synthetic()
    make_jvm(build)


if __name__ == "__main__":
    main()
