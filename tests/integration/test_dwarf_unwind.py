"""User stacks of code built without frame pointers (-O2 -fomit-frame-pointer,
as Debian builds) are complete: the daemon compiles the binaries' .eh_frame
into tables and the BPF unwinder walks them. For a client running as nobody:
main;uw_a;uw_b;uw_c;__read;...;ksys_read in >= 90% of samples, PIE and
non-PIE, and through a library dlopen()ed after the recording started; code
without CFI and with a garbage rbp ends its stack cleanly (no [unknown]
chains); status and /metrics report the tables."""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main")


def chain_share(stacks, chain):
    """Samples whose user part runs main;<chain...>;__read (root first) and
    reaches a root frame, over all samples."""
    total = jt.total_samples(stacks)
    good = 0
    for s, c in stacks.items():
        frames = jt.frames_of(s)
        if (jt.has_seq(frames, ["main"] + list(chain)) and
                any(r in frames for r in ROOTS) and
                frames.index("main") > max(frames.index(r) for r in ROOTS if r in frames)):
            good += c
    return good, total


def record(t, d, pid, secs):
    out = os.path.join(t.outdir(), "u.collapsed")
    t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-o", out, "-f", "collapsed",
           "--no-progress"], user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        return jt.parse_collapsed(f.read())


def main(t):
    d = t.start_daemon()

    # dbgframe: uw_* have CFI in .debug_frame only.
    for kind in ("pie", "nopie", "dbgframe"):
        with t.case("%s without frame pointers: main;uw_a;uw_b;uw_c;__read in >= 90%%" % kind):
            w = t.workload("unwind_chain_" + kind, "chain", 60)
            # The process's tables are built on the worker thread as the
            # recording starts (100-300 ms on a loaded machine, under ASan
            # longer); its start gate keeps the events stopped until they
            # are in, so the first recording's first samples unwind too.
            meter = jt.CpuMeter(w.pid)
            stacks = record(t, d, w.pid, 3)
            cpu_ns = meter.stop()
            good, total = chain_share(stacks, ["uw_a", "uw_b", "uw_c"])
            # As many as the CPU the workload had (a loaded machine, ASan
            # beside it, gave it 0.4 s of the 3 s once), and enough for the
            # share to mean something.
            jt.check(total >= 20 and total >= 0.5 * cpu_ns / 10e6,
                     "only %d samples for %d ms of CPU" % (total, cpu_ns // 1000000))
            jt.check(good >= 0.9 * total,
                     "%d of %d samples have _start..main;uw_a;uw_b;uw_c; top stacks:\n%s"
                     % (good, total, jt.top_stacks(stacks)))
            kread = sum(c for s, c in stacks.items()
                        if jt.has_seq(jt.frames_of(s), ["uw_c", "__read"]) and "ksys_read_[k]" in s)
            jt.check(kread > 0, "no stack runs uw_c;__read;...;ksys_read_[k]:\n%s"
                     % jt.top_stacks(stacks))
            w.kill()

    with t.case("a library dlopen()ed after the recording started is unwound too"):
        godir = t.mkdtemp("go-")
        go = os.path.join(godir, "go")
        prog = t.prog("unwind_chain_pie")
        t._copy_bin(os.path.join(t.progs_dir, "libunwind_dso.so"), "libunwind_dso.so")
        w = t.spawn([prog, "dlopen", "60", go], what="unwind_chain dlopen")
        c = d.client(user="nobody")
        rid = c.start_record(pid=w.pid, duration_ms=5000)
        started = None
        deadline = time.monotonic() + 20
        while started is None and time.monotonic() < deadline:
            m = c.recv_for(rid, max(0.1, deadline - time.monotonic()))
            jt.check(m is not None and m.get("ok") is not False,
                     "record failed before it started: %r" % (m,))
            if m.get("type") == "started":
                started = m
        jt.check(started is not None, "no 'started' message within 20 s")
        with open(go, "w"):
            pass
        rec = c.collect_record(rid, 40)
        stacks = rec.stacks()
        good, total = chain_share(stacks, ["run_dso", "dso_a", "dso_b", "dso_c"])
        jt.check(total >= 20, "only %d samples:\n%s" % (total, jt.top_stacks(stacks)))
        jt.check(good >= 0.85 * total,
                 "%d of %d samples have main;run_dso;dso_a;dso_b;dso_c (the library was mapped "
                 "after the recording started); top stacks:\n%s"
                 % (good, total, jt.top_stacks(stacks)))
        c.close()
        w.kill()

    with t.case("code without CFI and a garbage rbp: the stack ends, no [unknown] chains"):
        w = t.workload("unwind_chain_pie", "clobber", 60)
        meter = jt.CpuMeter(w.pid)
        stacks = record(t, d, w.pid, 2)
        # Against the CPU the workload had (a busy machine gives it less
        # than 2 s): each sample's stack is checked below.
        jt.check_samples_match_cpu(jt.total_samples(stacks), meter.stop(), 10000000,
                                   "clobber", tolerance=0.3, min_expected=20)
        for s in stacks:
            frames = jt.frames_of(s)
            user = [f for f in frames if not jt.is_kernel_frame(f)]
            jt.check(len(user) <= 4, "a stack of %d user frames from code with a garbage rbp "
                     "(expected the walk to stop): %s" % (len(user), s))
        w.kill()

    with t.case("a binary on FUSE is not read (its server could stall the daemon)"):
        if not shutil.which("bindfs") or not os.path.exists("/dev/fuse"):
            jt.log("skipped: bindfs or /dev/fuse missing")
        else:
            src = t.mkdtemp("fsrc-")
            mnt = t.mkdtemp("fmnt-")
            shutil.copy2(os.path.join(t.progs_dir, "unwind_chain_pie"), src)
            subprocess.run(["bindfs", "-o", "allow_other", src, mnt], check=True)
            try:
                before = d.client().status()["sampler"]["unwind"]["untrusted_fs"]
                w = t.spawn([os.path.join(mnt, "unwind_chain_pie"), "chain", "60"],
                            what="unwind_chain on FUSE")
                stacks = record(t, d, w.pid, 2)
                w.kill()
                after = d.client().status()["sampler"]["unwind"]["untrusted_fs"]
                jt.check(after > before, "untrusted_fs did not count the FUSE binary: %d -> %d"
                         % (before, after))
                jt.check(jt.total_samples(stacks) > 0, "no samples")
                # libc is walked by CFI up to the binary's frame, which has
                # no table; nor is it symbolized (the loop would read it).
                named = sum(c for s_, c in stacks.items()
                            if {"uw_b", "uw_c"} & set(jt.frames_of(s_)))
                jt.check(named == 0, "a binary on FUSE was read (unwound or symbolized):\n%s"
                         % jt.top_stacks(stacks))
                jt.check(any("unwind_chain_pie+0x" in s_ for s_ in stacks),
                         "no module+offset frame of the binary on FUSE:\n%s" % jt.top_stacks(stacks))
            finally:
                subprocess.run(["fusermount", "-u", mnt])

    with t.case("status and /metrics count tables and CFI stacks"):
        st = d.client().status()
        uw = st["sampler"]["unwind"]
        jt.check(uw.get("enabled") is True, "unwinding not enabled: %r" % uw)
        jt.check(uw.get("tables", 0) >= 2 and uw.get("rows", 0) > 1000,
                 "no tables loaded: %r" % uw)
        jt.check(uw.get("stacks", 0) > 0 and uw.get("stacks_to_root", 0) > 0,
                 "no stack walked to its root with CFI: %r" % uw)
        # The recordings above each waited at their start gate for tables.
        g = st["sessions"].get("gate") or {}
        jt.check(g.get("opened_ready", 0) + g.get("opened_deadline", 0) >= 3 and
                 0 < g.get("wait_ms_max", 0) <= g.get("wait_ms_total", 0),
                 "start gates not counted: %r" % g)
        r = t.ctl(["status"], socket_path=d.socket, check_rc=0)
        jt.check("unwinding:" in r.stdout and "by CFI" in r.stdout,
                 "jprofctl status does not show unwinding:\n%s" % r.stdout)
        jt.check("start gates: " in r.stdout, "jprofctl status does not show start gates:\n%s"
                 % r.stdout)


jt.run(main)
