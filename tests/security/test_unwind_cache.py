"""Built unwind tables kept on disk (issue 29 item 7, docs/security.md 16).

A `record --pid` waits at its start gate until the process's unwind tables
are in BPF; after a restart the daemon built every table again (python3:
1.1 s and more on a busy host). With unwind_cache_dir the tables built by
one daemon are loaded by the next from disk, found by a SHA-256 of what the
build reads, and an entry that is not intact is refused and built again.

One daemon records python3 (as nobody, host view off so that only the
recorded process's tables are built) and writes its tables; a second
daemon on the same directory records another python3: its gate opens ready,
every table comes from the cache, none is built. Then the largest entry
(python3's own) gets one byte changed and a third daemon records again: that
entry is refused, its table built again, the others still served. Assertions
are on counters and the `sampling` reply, not on time (bench/start_latency.sh
measures that)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

SPIN = "/usr/bin/python3"


def unwind(c):
    return c.status()["sampler"]["unwind"]


def record_once(t, d, c):
    """Records a fresh python3 for 300 ms; returns its `sampling` message."""
    p = t.spawn([SPIN, "-c", "while True: pass"], settle=0)
    try:
        # Its libraries mapped (libm is among the last), so that one read of
        # its maps finds every table it needs.
        jt.wait_until(lambda: "libm.so" in open("/proc/%d/maps" % p.pid).read(), 10,
                      what="python3 mapped libm")
        rid = c.start_record(pid=p.pid, duration_ms=300)
        rec = c.collect_record(rid, 60)
        jt.check(rec.profile is not None, "record: %s" % rec.describe())
        sampling = [m for m in rec.messages if m.get("type") == "sampling"]
        jt.check(len(sampling) == 1, "no sampling message: %s" % rec.describe())
        return sampling[0]
    finally:
        p.kill()
        p.wait(10)


def main(t):
    cache = os.path.join(t.mkdtemp("unwcache-"), "unwind")
    args = ("--rate", "0", "--unwind-cache-dir", cache)

    with t.case("a first daemon builds python3's tables and writes them"):
        d = t.start_daemon(*args)
        c = d.client()
        record_once(t, d, c)
        # The tables are written by the build, before the gate opens.
        u = unwind(c)
        jt.log("first daemon: %r" % {k: v for k, v in u.items() if k.startswith(("cache", "builds"))})
        jt.check(u["builds"] >= 2, "python3 and its libraries built: %r" % u)
        jt.check_eq(u["cache_hits"], 0, "cache hits of the first daemon")
        rejected = sum(u["rejected"].values())
        jt.check_eq(u["cache_writes"], u["builds"] - rejected,
                    "entries written (one per table built)")
        st = os.stat(cache)
        jt.check_eq(st.st_mode & 0o7777, 0o700, "the cache directory's mode")
        names = os.listdir(cache)
        jt.check_eq(len(names), u["cache_writes"], "entries in %s: %r" % (cache, names))
        for n in names:
            s = os.stat(os.path.join(cache, n))
            jt.check(s.st_uid == 0 and s.st_mode & 0o077 == 0, "%s: uid %d mode %o"
                     % (n, s.st_uid, s.st_mode))
        built = u["cache_writes"]
        d.stop()

    with t.case("after a restart every table comes from the cache: no build, the gate ready"):
        d = t.start_daemon(*args)
        c = d.client()
        m = record_once(t, d, c)
        u = unwind(c)
        jt.log("restarted daemon: sampling %r, %r" % (m, {k: v for k, v in u.items()
                                                          if k.startswith(("cache", "builds"))}))
        jt.check(m.get("ready") is True, "the gate opened at its deadline: %r" % m)
        jt.check_eq(u["builds"], 0, "tables built after the restart")
        jt.check_eq(u["cache_hits"], built, "tables loaded from the cache")
        d.stop()

    with t.case("an entry changed on disk is refused and its table built again"):
        names = sorted(os.listdir(cache), key=lambda n: os.path.getsize(os.path.join(cache, n)))
        victim = os.path.join(cache, names[-1])
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x40]))
        d = t.start_daemon(*args)
        c = d.client()
        m = record_once(t, d, c)
        u = unwind(c)
        jt.check(m.get("ready") is True, "the gate opened at its deadline: %r" % m)
        jt.check_eq(u["cache_rejected"], 1, "entries refused")
        jt.check_eq(u["builds"], 1, "tables built (the refused one)")
        jt.check_eq(u["cache_hits"], built - 1, "tables loaded from the cache")
        jt.check_eq(u["cache_writes"], 1, "entries written (the rebuilt one)")
        d.stop()


jt.run(main)
