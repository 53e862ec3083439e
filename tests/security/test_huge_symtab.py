"""Issue 26, point 7: a binary with a huge .symtab must cost the daemon
bounded memory and leave its loop free.

The daemon reads the symbol table of every binary a profiled process maps,
and a user can map any file it wrote. nobody runs copies of spin_chain
given a .symtab of 200,000 and of 1,000,000 functions sharing one 255-byte
name (4.8 and 24 MB files, written here by rewriting the ELF) and records
them. Before, each symbol copied its name (+57 MB of RSS for the first file,
+280 MB for the second, for as long as the table was cached) and the tables
were read on the event loop (0.4 s and 1.5 s of wall time on this machine,
root's `status` waiting as long). Now a name is copied once however many
symbols share it, a table of more than 65,536 entries is read on a worker
thread, and the memory of all tables is budgeted (symbols_max_memory) with a
quarter per uid other than root: a second daemon with a 16 MiB budget gives
nobody's copy with 200,000 distinct names (7 MB of table) module+offset
names and counts it, while root's process mapping the same file gets names.

Asserted: RSS growth (the robust part: old +321 MiB, new +4 to +27 MiB), root's
status (SCHED_RR watcher, rootwatch.py: p95 under 100 ms, none over 500 ms),
both recordings complete with samples in the hostile binary, named by the
shared name once the worker has read the table.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402
import rootwatch as rw  # noqa: E402

MiB = 2**20
SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
NAME_LEN = 255
# The daemon stops within jproftest's limit (a table build or symbol load
# in flight is cancelled).
STOP_S = jt.STOP_WAIT_S


def add_symtab(src, dst, nsyms, distinct):
    """Copies the stripped ELF64 src to dst with a .symtab and .strtab
    appended: nsyms global functions of 16 bytes spread over .text (so that
    every address there has a covering symbol), all named by one 255-byte
    string, or each by its own 16-byte name when distinct."""
    with open(src, "rb") as f:
        out = bytearray(f.read())
    shoff, = struct.unpack_from("<Q", out, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", out, 0x3a)
    hdrs = [list(SHDR.unpack_from(out, shoff + i * shentsize)) for i in range(shnum)]
    shstr = bytes(out[hdrs[shstrndx][4]:hdrs[shstrndx][4] + hdrs[shstrndx][5]])
    text = [i for i, h in enumerate(hdrs) if shstr[h[0]:shstr.index(b"\0", h[0])] == b".text"][0]
    taddr, tsize = hdrs[text][3], hdrs[text][5]
    slots = max(1, tsize // 16)
    info = (1 << 4) | 2  # STB_GLOBAL, STT_FUNC
    if distinct:
        strtab = b"\0" + b"".join(b"f%014d\0" % i for i in range(nsyms))
        syms = b"".join(SYM.pack(1 + 16 * i, info, 0, text, taddr + (i % slots) * 16, 16)
                        for i in range(nsyms))
    else:
        strtab = b"\0" + b"f" * NAME_LEN + b"\0"
        # One entry per slot, repeated: fast to build for a million.
        block = b"".join(SYM.pack(1, info, 0, text, taddr + i * 16, 16) for i in range(slots))
        syms = (block * (nsyms // slots + 1))[:nsyms * SYM.size]
    syms = bytes(SYM.size) + syms
    new_shstr = shstr + b".symtab\0.strtab\0"

    def append(data):
        out.extend(bytes(-len(out) % 8))
        off = len(out)
        out.extend(data)
        return off
    hdrs[shstrndx][4], hdrs[shstrndx][5] = append(new_shstr), len(new_shstr)
    hdrs.append([len(shstr), 2, 0, 0, append(syms), len(syms), len(hdrs) + 1, 1, 8, SYM.size])
    hdrs.append([len(shstr) + 8, 3, 0, 0, append(strtab), len(strtab), 0, 0, 1, 0])
    struct.pack_into("<Q", out, 0x28, append(b"".join(SHDR.pack(*h) for h in hdrs)))
    struct.pack_into("<H", out, 0x3c, len(hdrs))
    with open(dst, "wb") as f:
        f.write(out)
    os.chown(dst, *jt.nobody_ids())
    os.chmod(dst, 0o755)
    jt.log("%s: %d symbols, %.1f MB" % (os.path.basename(dst), nsyms, len(out) / 1e6))
    return dst


def stripped_spin(t, d):
    src = t.prog("spin_chain")
    dst = os.path.join(d, "spin_stripped")
    jt.check(os.system("strip -o %s %s" % (dst, src)) == 0, "strip %s" % src)
    return dst


def rss_bound(t, normal):
    """As test_ring.py: under ASan freed memory waits in a 256 MiB
    quarantine and every block carries redzones."""
    with open(t.jprofd, "rb") as f:
        if b"__asan_init" not in f.read():
            return normal
    return 2 * normal + 256 * MiB


def record(t, d, path, user, ms=3000):
    w = t.spawn([path, "30"], user=user, what=os.path.basename(path), settle=0.3)
    c = d.client(user=user)
    rec = c.record(pid=w.pid, duration_ms=ms, interval_us=5000, timeout=60)
    c.close()
    w.kill()
    jt.check(rec.profile is not None, "recording of %s failed: %s" % (path, rec.describe()))
    jt.check_eq(rec.profile.get("status"), "complete", "profile status")
    return rec.stacks()


def frames_in(stacks, module):
    """{frame: samples} of the frames in module: module+0x.., or one of the
    names add_symtab gives."""
    out = {}
    for stack, n in stacks.items():
        for f in set(jt.frames_of(stack)):
            if (f.startswith(module + "+0x") or f == "f" * NAME_LEN or
                    (f.startswith("f0") and f[1:].isdigit())):
                out[f] = out.get(f, 0) + n
    return out


def main(t):
    mine = t.mkdtemp("nobody-", owner="nobody")
    base = stripped_spin(t, mine)
    shared_200k = add_symtab(base, os.path.join(mine, "shared_200k"), 200000, False)
    shared_1m = add_symtab(base, os.path.join(mine, "shared_1m"), 1000000, False)
    distinct = add_symtab(base, os.path.join(mine, "distinct_200k"), 200000, True)
    name = "f" * NAME_LEN

    d = t.start_daemon()
    # spin_chain's libc, read before the watch starts.
    record(t, d, base, "nobody", ms=1000)
    watch = rw.RootWatch(t, d)

    with t.case("200k and 1M symbols sharing a name: bounded memory, the loop free"):
        for path in (shared_200k, shared_1m):
            stacks = record(t, d, path, "nobody")
            got = frames_in(stacks, os.path.basename(path))
            jt.log("%s: frames %r" % (os.path.basename(path),
                                      {k[:40]: v for k, v in got.items()}))
            jt.check(got, "no samples in %s:\n%s" % (path, jt.top_stacks(stacks)))
            jt.check(name in got, "%s's frames never got its functions' name (the table was "
                     "not read):\n%s" % (path, jt.top_stacks(stacks)))
        growth = watch.rss_peak() - watch.rss_base
        jt.log("daemon RSS grew by %.1f MiB" % (growth / MiB))
        # The tables hold a few hundred entries and one name; what libelf
        # reads (24 MB of symbols for the second file) is freed after.
        jt.check(growth < rss_bound(t, 40 * MiB),
                 "the daemon's RSS grew by %.0f MiB (a name copied per symbol: 321 MiB)"
                 % (growth / MiB))
    watch.stop()
    with t.case("root's status stayed fast while the tables were read"):
        watch.check_fast("during the huge .symtab loads")
    d.stop(timeout=STOP_S)

    with t.case("over nobody's share: module+offset names, counted; root's process named"):
        conf = os.path.join(t.mkdtemp("conf-"), "jprofd.conf")
        with open(conf, "w") as f:
            f.write("symbols_max_memory = 16M\n")
        usock = os.path.join(t.mkdtemp("http-"), "http.sock")
        d = t.start_daemon("--config", conf, "--http-socket", usock)
        stacks = record(t, d, distinct, "nobody")
        got = frames_in(stacks, "distinct_200k")
        jt.log("nobody's frames: %r" % got)
        jt.check(got, "no samples in nobody's binary:\n%s" % jt.top_stacks(stacks))
        jt.check(all(f.startswith("distinct_200k+0x") for f in got),
                 "nobody's table (7 MB, over its 4 MiB share) was read: %r" % got)
        m = jt.unix_metrics(usock)
        jt.check(m.get("jprofd_symbols_over_budget_total", 0) >= 1,
                 "no table counted over budget: %r"
                 % {k: v for k, v in m.items() if "symbols" in k})
        stacks = record(t, d, distinct, None)
        got = frames_in(stacks, "distinct_200k")
        jt.log("root's frames: %r" % got)
        named = sum(n for f, n in got.items() if not f.startswith("distinct_200k+0x"))
        jt.check(named > 0, "root's process mapping the same file got no names: %r" % got)
        m = jt.unix_metrics(usock)
        jt.check(m["jprofd_symbols_memory_bytes"] <= 16 * MiB,
                 "symbol tables hold %d bytes" % m["jprofd_symbols_memory_bytes"])
        d.stop(timeout=STOP_S)


if __name__ == "__main__":
    jt.run(main)
