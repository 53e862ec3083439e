"""Wall-clock recordings of a JVM (`record -e wall --pid`, JDK 17 and 25,
the JVM as nobody): the agent's wall timer signals the blocked Java
threads, so their time has Java frames. tests/java/WallSplit.java has a
known truth: its thread "sleeper" sleeps 70% of the time in a() and 30% in
b() (measured by the workload), its thread "reader" blocks in readBlocked()
on a socket nobody writes to. The profile must

- split a():b() as the workload measured, within 5 pp, both under
  Thread.sleep and ending in [sleeping];
- show readBlocked() below a JDK socket read method, ending in [sleeping];
- give each of the two threads about the recording's wall time, not twice
  it (the off-CPU collector's intervals of those threads are left out);
- say in summary.java that the wall timer ran and how many records it gave;
- give the JDK's threads that wait inside the VM without Java frames
  (Signal Dispatcher, Attach Listener, Notification Thread) their native
  frames (os::signal_wait, accept, Monitor::wait), not a bare [sleeping];
- show no frame of the agent itself (its signal handler ring_on_signal and
  what it calls: jw_walk_vm, agent_peek...): those are jprofd's work, cut
  at the signal frame with the signal frame (issue 29 item 3).
"""
import re
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402

SECS = 5
INTERVAL_US = 2000


def under(stacks, frame, leaf=None):
    return sum(v for s, v in stacks.items()
               if frame in jt.frames_of(s) and (leaf is None or jt.frames_of(s)[-1] == leaf))


def thread_total(stacks, name):
    """Everything of the thread named name (its root frame "[name tid=N]")."""
    return sum(v for s, v in stacks.items() if jt.frames_of(s)[0].startswith("[%s tid=" % name))


# The agent's own code: its library (libjprofagent.so or its copy
# .jprofagent-<uid>-<hash>.so) and its functions, as frames.
AGENT_FRAME = re.compile(r"jprofagent|^(ring|jw|javawalk|codemap|agent|wall|link|vmstructs)_\w+$")
VM_WAITERS = ("Signal Dispatcher", "Attach Listener", "Notification Thread")


def below(stack, frame):
    """The frames below (called from) frame in stack."""
    frames = jt.frames_of(stack)
    return frames[frames.index(frame) + 1:] if frame in frames else []


def cases(t, d, c, jdk):
    # + 5: the recording's SECS count from its start gate's opening (up to
    # 2 s after the request on a loaded machine).
    jvm = jv.Jvm(t, jdk, "WallSplit", SECS + 5, settle=1.0)

    # Every 2 ms: 2,500 samples of the sleeper put the sampling error of
    # a()'s share near 1 pp (at 10 ms, 500 samples: 2 pp, too near 5).
    rec = c.record(pid=jvm.pid, event="wall", duration_ms=SECS * 1000, interval_us=INTERVAL_US,
                   format="collapsed", thread_frames=True, timeout=SECS + 40)
    truth = jvm.result(30)
    stacks = rec.stacks()
    summ = rec.summary()
    jt.log("JDK %s wall profile (ns):\n%s" % (jdk, jt.top_stacks(stacks, 10)))
    jt.log("summary.java: %r" % summ.get("java"))
    wall = SECS * 1e9

    with t.case("JDK %s: the agent's wall timer ran and gave records; no warning about "
                "missing Java frames" % jdk):
        java = summ.get("java") or {}
        jt.check_eq(java.get("state"), "active", "summary.java.state")
        jt.check_eq(java.get("wall_timer"), True, "summary.java.wall_timer")
        # Two blocked threads, every interval, for most of the recording
        # (the agent attaches first).
        jt.check(java.get("wall_records", 0) >= 2 * SECS * 1e6 / INTERVAL_US * 0.5,
                 "only %r wall records in %d s" % (java.get("wall_records"), SECS))
        warns = [m for m in rec.messages if m.get("type") == "warning"]
        jt.check(not warns, "warnings: %r" % warns)

    with t.case("JDK %s: sleeper: a():b() as measured (70:30) within 5 pp, under "
                "Thread.sleep, [sleeping]" % jdk):
        a = under(stacks, "WallSplit.a")
        b = under(stacks, "WallSplit.b")
        jt.check(a and b, "no a()/b() time:\n%s" % jt.top_stacks(stacks))
        want = truth["a_ns"] / float(truth["a_ns"] + truth["b_ns"])
        share = a / float(a + b)
        jt.log("a() share %.3f, measured %.3f (%d rounds)" % (share, want, truth["rounds"]))
        jt.check(abs(share - want) <= 0.05, "a() has %.1f%% of a() + b(), measured %.1f%%"
                 % (100 * share, 100 * want))
        jt.check(abs(share - 0.70) <= 0.05, "a() has %.1f%%, the workload's design is 70%%"
                 % (100 * share))
        sleeping = under(stacks, "WallSplit.a", "[sleeping]") + \
            under(stacks, "WallSplit.b", "[sleeping]")
        jt.check(sleeping >= 0.9 * (a + b), "only %.1f%% of a() + b() ends in [sleeping]"
                 % (100.0 * sleeping / (a + b)))
        slept = sum(v for s, v in stacks.items()
                    if "WallSplit.a" in s and "java.lang.Thread.sleep" in jt.frames_of(s))
        jt.check(slept >= 0.8 * a, "Thread.sleep is under only %.0f%% of a()" % (100.0 * slept / a))

    with t.case("JDK %s: reader: readBlocked() below a JDK socket read, [sleeping], about "
                "the recording's length" % jdk):
        reads = {s: v for s, v in stacks.items() if "WallSplit.readBlocked" in jt.frames_of(s)}
        jt.check(reads, "no readBlocked() in the profile:\n%s" % jt.top_stacks(stacks))
        socket_read = sum(v for s, v in reads.items()
                          if any(("Socket" in f or "socket" in f) and "read" in f.lower()
                                 for f in below(s, "WallSplit.readBlocked")))
        total = sum(reads.values())
        jt.check(socket_read >= 0.9 * total, "a socket read method is below readBlocked() in "
                 "only %.0f%% of its time:\n%s" % (100.0 * socket_read / total,
                                                   jt.top_stacks(reads, 5)))
        jt.check(under(stacks, "WallSplit.readBlocked", "[sleeping]") >= 0.9 * total,
                 "readBlocked() is not [sleeping]:\n%s" % jt.top_stacks(reads, 5))
        jt.check(total >= 0.7 * wall, "readBlocked() has %.2f s of wall time in %d s"
                 % (total / 1e9, SECS))

    with t.case("JDK %s: threads waiting inside the VM have their native frames" % jdk):
        for name in VM_WAITERS:
            mine = {s: v for s, v in stacks.items() if jt.frames_of(s)[0].startswith("[%s tid=" % name)}
            asleep = {s: v for s, v in mine.items() if jt.frames_of(s)[-1] == "[sleeping]"}
            total = sum(asleep.values())
            # More than the thread frame and the state: frames of the VM
            # (down to libc's wait), as the off-CPU collector would show.
            framed = sum(v for s, v in asleep.items() if len(jt.frames_of(s)) > 4)
            jt.log("JDK %s %s: %.2f s [sleeping], %.2f s with native frames:\n%s"
                   % (jdk, name, total / 1e9, framed / 1e9, jt.top_stacks(asleep, 3)))
            jt.check(total >= 0.7 * wall and framed >= 0.9 * total,
                     "thread %s: %.2f s [sleeping] in %d s, %.2f s of it with native frames:\n%s"
                     % (name, total / 1e9, SECS, framed / 1e9, jt.top_stacks(mine, 4)))

    with t.case("JDK %s: no frame of the agent itself in the profile" % jdk):
        agent = {s: v for s, v in stacks.items()
                 if any(AGENT_FRAME.search(f) for f in jt.frames_of(s))}
        jt.check(not agent, "the agent's own frames in %d stacks:\n%s"
                 % (len(agent), jt.top_stacks(agent, 5)))

    with t.case("JDK %s: each thread has about the recording's wall time, not twice it "
                "(the off-CPU intervals the wall timer covers are left out)" % jdk):
        for name in ("sleeper", "reader"):
            total = thread_total(stacks, name)
            jt.check(0.7 * wall <= total <= 1.1 * wall, "thread %s has %.2f s of wall time in "
                     "%d s:\n%s" % (name, total / 1e9, SECS, jt.top_stacks(
                         {s: v for s, v in stacks.items()
                          if jt.frames_of(s)[0].startswith("[%s " % name)}, 6)))


def main(t):
    d = t.start_daemon(*jv.agent_args())
    c = d.client()
    for jdk, _ in jv.jdks():
        cases(t, d, c, jdk)


jt.run(main)
