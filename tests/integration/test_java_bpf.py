"""Java frames without an agent (issue 30): the host view of a JVM run as
nobody names its Java methods, walked in BPF (bpf/hotspot.bpf.c) with what
the daemon read from the JVM's VMStructs (daemon/hotspot/hs_proc.c), down
to the thread's native root; nothing is attached. Compiled frames (JDK 17,
and Temurin 25 when installed) and interpreted ones (-Xint). A process
mapping a forged libjvm.so gets no entry, at bounded cost."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest  # noqa: E402

HOT = "Hot.spin"
CPU_S = 2.0  # of each JVM's CPU time before its profile is read


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hotspot_status(c):
    return c.status()["sampler"]["unwind"]["hotspot"]


def walked(d, pid):
    return "hotspot: pid %d: JVM " % pid in d.stderr_text()


def is_java(frame):
    """A Java method's name as the walk gives it (package.Class.method), or
    an unnamed JIT frame."""
    return frame == "[jit]" or (frame.startswith("Hot.") or frame.startswith("java."))


def java_share(stacks):
    """(samples in Java code, of which naming Hot.spin, of which rooted in a
    native frame) of one JVM's collapsed stacks."""
    in_java = named = rooted = 0
    for st, n in stacks.items():
        f = jt.frames_of(st)
        if not any(is_java(x) for x in f):
            continue
        in_java += n
        if HOT in f:
            named += n
            # The outermost frame is the thread's native start (clone3 /
            # start_thread / _start), not a Java frame cut off mid-stack.
            if not is_java(f[0]) and not f[0].startswith("["):
                rooted += n
    return in_java, named, rooted


def main(t):
    d = t.start_daemon("--rate", "99", "--host-bucket", "1")
    c = d.client()
    jvms = [("17", (), "compiled")]
    jvms.append(("17", ("-Xint",), "interpreted"))
    if os.access(jvmtest.JDKS["25"], os.X_OK):
        jvms.append(("25", (), "compiled"))
    else:
        jt.log("no Temurin 25 at %s: JDK 17 only" % jvmtest.JDKS["25"])
    # spin stays a method of its own (C2 would inline it into main's OSR
    # compilation, and inlined frames are not told apart yet).
    opts = ("-XX:-UsePerfData", "-Xmx64m", "-XX:+DisableAttachMechanism",
            "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,Hot::spin")

    with t.case("a JVM's host-view samples in Java code name its hot method, no agent"):
        running = [(v, mode, jvmtest.Jvm(t, v, "Hot", opts=opts + extra, settle=0))
                   for v, extra, mode in jvms]
        # Other tests' JVMs may run on this host too: ours are told by pid.
        # Their first samples (before the daemon read the JVM, within a
        # second or two of its start) have the leaf frame only: the profile
        # starts a second after the entry was written.
        since = {}
        for v, mode, j in running:
            jt.wait_until(lambda: walked(d, j.pid), 20, interval=0.1,
                          what="JDK %s (%s) in the BPF walk's map" % (v, mode))
            since[j.pid] = (jt.time.monotonic() + 1.0, cpu_seconds(j.pid))
        for v, mode, j in running:
            jt.wait_until(lambda: cpu_seconds(j.pid) >= since[j.pid][1] + CPU_S, 60, interval=0.2,
                          what="%.1f s of CPU of JDK %s (%s)" % (CPU_S, v, mode))
        for v, mode, j in running:
            from_ms = -int((jt.time.monotonic() - since[j.pid][0]) * 1000)
            r = c.request("profile", timeout=60, format="collapsed", from_ms=from_ms, pid=j.pid)
            jt.check(r.get("ok"), "profile of pid %d: %r" % (j.pid, r))
            stacks = jt.parse_collapsed(r["data"])
            in_java, named, rooted = java_share(stacks)
            jt.log("JDK %s %s: %d samples in Java code, %d (%.0f%%) name %s, %d of those "
                   "rooted natively" % (v, mode, in_java, named, 100.0 * named / max(in_java, 1),
                                        HOT, rooted))
            unrooted = {st: n for st, n in stacks.items() if HOT in jt.frames_of(st)
                        and (is_java(jt.frames_of(st)[0]) or jt.frames_of(st)[0].startswith("["))}
            if unrooted:
                jt.log("... not rooted natively:\n%s" % jt.top_stacks(unrooted))
            jt.check(in_java >= 20, "JDK %s %s: %d samples in Java code:\n%s"
                     % (v, mode, in_java, jt.top_stacks(stacks)))
            jt.check(named * 2 > in_java, "JDK %s %s: %s in %d of %d samples in Java code:\n%s"
                     % (v, mode, HOT, named, in_java, jt.top_stacks(stacks)))
            jt.check(rooted * 2 > named, "JDK %s %s: %d of %d samples of %s reach a native "
                     "root:\n%s" % (v, mode, rooted, named, HOT, jt.top_stacks(stacks)))
        st = hotspot_status(c)
        smp = c.status()["sampler"]
        jt.log("hotspot status: %r; BPF time of samples that walked Java frames %r, of all %r"
               % (st, smp["bpf_java_sample_us"], smp["bpf_sample_us"]))
        jt.check(st["stacks"] > 0 and st["frames_named"] > 0, "hotspot counters: %r" % st)
        log = d.stderr_text()
        jt.check("attach:" not in log and "agent of pid" not in log,
                 "the daemon attached or talked to an agent:\n%s" % log[-3000:])
        for _, _, j in running:
            j.stop_alive()
        jt.wait_until(lambda: all("hotspot: pid %d: JVM no longer walked" % j.pid
                                  in d.stderr_text() for _, _, j in running), 20, interval=0.2,
                      what="the exited JVMs' entries dropped")

    with t.case("a process mapping a forged libjvm.so gets no entry, at bounded cost"):
        prog = os.path.join(t.progs_dir, "hs_forged")
        lib = os.path.join(t.progs_dir, "fakejvm", "libjvm.so")
        cpu0 = hotspot_status(c)["try_cpu_us"]
        forged = []
        for mode in ("valid", "heap_hops", "heap_block_huge", "stride_huge"):
            p = jt.Proc(jt.as_user_argv("nobody", ["env", "HS_FORGE=" + mode, prog, lib, "spin"]),
                        "hs_forged " + mode)
            forged.append(p)
        # Each is tried a few times, then left alone, and says so once.
        jt.wait_until(lambda: all("hotspot: pid %d: a libjvm.so whose JVM is not walked" % p.pid
                                  in d.stderr_text() for p in forged), 30, interval=0.2,
                      what="every forged process tried and given up on")
        # What trying processes cost the daemon meanwhile: the forgeries',
        # and the looks at every other process this host started.
        cpu = (hotspot_status(c)["try_cpu_us"] - cpu0) / 1e6
        jt.log("forged: %r; %.3f s of CPU in tries meanwhile" % (hotspot_status(c), cpu))
        for p in forged:
            jt.check(not walked(d, p.pid), "forged process %d walked as a JVM" % p.pid)
        jt.check(cpu < 1.0, "the daemon spent %.2f s of CPU trying 4 forged JVMs" % cpu)
        for p in forged:
            p.kill()
    d.stop()


jt.run(main)
