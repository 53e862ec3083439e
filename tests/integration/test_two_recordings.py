"""Several recordings of one JVM at once (issue 29 item 2). A fresh JDK 17
JVM (CpuSplit, as nobody) is recorded by nobody twice at the same moment:

- cpu every 5 ms and wall every 10 ms (2.5 s), started together on a JVM with no
  agent yet: the JVM is attached once (the second recording waits for the
  first one's attach), and one agent serves both;
- then cpu every 4 ms (2 s) and cpu every 10 ms (3.5 s), started together on
  the JVM whose agent is loaded: no new attach; the shorter one ending
  does not stop the other.

Each recording exits with its profile, its main thread (always running
Java code) has Java frames in at least 90 % of its samples, and each cpu
recording's samples match the CPU time its events counted and the CPU time
the JVM had (its own interval, its own samples only: none of the other
recording's). Before, the second recording of a fresh JVM attached again,
waited 2 s, said agent_silent and had no Java frames.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402


def main_thread(stacks):
    """The samples of the thread named main (its root frame "[main tid=N]")."""
    return {s: v for s, v in stacks.items() if jt.frames_of(s)[0].startswith("[main tid=")}


def java_share(stacks, running=False):
    """(with Java frames, all) of the main thread's samples; running: its
    on-CPU time only (a wall profile's [running] leaf: its waits for a CPU,
    [runnable], come from the off-CPU collector, without Java frames, as in
    any wall recording of a JVM)."""
    main = main_thread(stacks)
    if running:
        main = {s: v for s, v in main.items() if jt.frames_of(s)[-1] == "[running]"}
    total = sum(main.values())
    java = sum(v for s, v in main.items() if jv.java_frames(jt.frames_of(s)))
    return java, total


def attaches(d, pid):
    return len(re.findall(r"attach: loaded agent into pid %d " % pid, d.stderr_text()))


def together(d, jvm, specs):
    """Starts one recording per spec (shortest first), each on its own
    connection as nobody, back to back; returns (Recording, the JVM's CPU
    time from the requests to its profile) per spec."""
    clients = [d.client(user="nobody") for _ in specs]
    meters = [jt.CpuMeter(jvm.pid) for _ in specs]
    rids = [c.start_record(format="collapsed", thread_frames=True, java="auto", **spec)
            for c, spec in zip(clients, specs)]
    out = []
    for c, rid, spec, meter in zip(clients, rids, specs, meters):
        rec = c.collect_record(rid, spec["duration_ms"] / 1000.0 + 30)
        out.append((rec, meter.stop()))
    return out


def check_one(name, rec, interval_ms, meter_ns, cpu=True):
    jt.check(rec.profile is not None, "%s: no profile: %s" % (name, rec.describe()))
    summ = rec.summary()
    java = summ.get("java") or {}
    warns = [m.get("code") for m in rec.messages if m.get("type") == "warning"]
    stacks = rec.stacks()
    got, total = java_share(stacks, running=not cpu)
    jt.log("%s: main thread %d samples, %d with Java frames (%.1f %%); java %r; warnings %r"
           % (name, total, got, 100.0 * got / max(total, 1), java, warns))
    jt.check_eq(java.get("state"), "active", "%s: summary.java.state" % name)
    # (sampling_not_ready is allowed: a fresh process's unwind tables may
    # take longer than the start gate's 2 s on a loaded machine.)
    jt.check(not any(w in ("agent_silent", "agent_busy", "java_wall_unavailable") for w in warns),
             "%s: warnings %r" % (name, warns))
    # (A loaded machine may give the JVM a sixth of a CPU.)
    jt.check(total >= (30 if cpu else 30 * interval_ms * 1e6),
             "%s: main thread has only %d samples:\n%s" % (name, total, jt.top_stacks(stacks)))
    jt.check(got >= 0.9 * total, "%s: main thread samples with Java frames %d of %d:\n%s"
             % (name, got, total, jt.top_stacks(main_thread(stacks))))
    if not cpu:
        jt.check_eq(java.get("wall_timer"), True, "%s: summary.java.wall_timer" % name)
    else:
        check_cpu(name, summ, jt.total_samples(stacks), meter_ns, interval_ms)


def check_cpu(name, summ, samples, meter_ns, interval_ms):
    """Its own samples, at its own interval: as many as the CPU time its
    events counted (summary.cpu_ns, the recorded threads' task clock while
    sampled) calls for, which is within the CPU time the JVM had from the
    request to the profile (the recording is a part of that window: its
    start gate, its end)."""
    cpu, expected = summ.get("cpu_ns"), summ.get("samples_expected")
    threads = summ.get("threads") or 1
    jt.log("%s: %d samples; its events counted %.0f ms of CPU (%d samples at %d ms); the JVM "
           "had %.0f ms from the request to the profile" % (name, samples, cpu / 1e6, expected,
                                                           interval_ms, meter_ns / 1e6))
    jt.check(expected >= 30, "%s: the events counted only %.0f ms of CPU: the machine is too "
             "loaded for this check" % (name, cpu / 1e6))
    jt.check(0.2 * meter_ns <= cpu <= meter_ns * 1.02 + 20e6,
             "%s: the events counted %.0f ms of CPU, the JVM had %.0f ms"
             % (name, cpu / 1e6, meter_ns / 1e6))
    jt.check(abs(samples - expected) <= 0.15 * expected + threads + 2,
             "%s: %d samples, but its events counted %.0f ms of CPU = %d samples at %d ms"
             % (name, samples, cpu / 1e6, expected, interval_ms))


def main(t):
    d = t.start_daemon(*jv.agent_args())
    jvm = jv.Jvm(t, "17", "CpuSplit", 60, settle=1.0)

    with t.case("a fresh JVM recorded twice at once (cpu 5 ms + wall 10 ms): one attach, "
                "Java frames in both"):
        (cpu, used), (wall, _) = together(d, jvm, [
            dict(pid=jvm.pid, event="cpu", interval_us=5000, duration_ms=2500),
            dict(pid=jvm.pid, event="wall", interval_us=10000, duration_ms=2500)])
        check_one("cpu 5 ms", cpu, 5, used)
        check_one("wall 10 ms", wall, 10, 0, cpu=False)
        jt.check_eq(attaches(d, jvm.pid), 1, "attaches of pid %d in the daemon's log" % jvm.pid)

    with t.case("the loaded agent serves cpu 4 ms (2 s) and cpu 10 ms (3.5 s) at once; no new "
                "attach; the first ending does not stop the second"):
        (short, used_short), (long_, used_long) = together(d, jvm, [
            dict(pid=jvm.pid, event="cpu", interval_us=4000, duration_ms=2000),
            dict(pid=jvm.pid, event="cpu", interval_us=10000, duration_ms=3500)])
        check_one("cpu 4 ms", short, 4, used_short)
        check_one("cpu 10 ms", long_, 10, used_long)
        jt.check_eq(attaches(d, jvm.pid), 1, "attaches of pid %d in the daemon's log" % jvm.pid)

    jvm.stop_alive()


jt.run(main)
