"""Java stacks reach their root past a compiled frame marked for
deoptimization (JDK 17 and 25, the JVM as nobody, agent attached at run
time; issue 29 item 1).

A JFR recording (`jcmd JFR.start` / `JFR.stop`) loads classes that
invalidate compiled code; a frame of such code that has a long-running
callee keeps returning to its nmethod's deopt handler until that callee
ends, and AsyncGetCallTrace stops at it (HotSpot's frame::safe_for_sender
refuses a deopt entry as a sender pc): JRuby on JDK 17 lost the 12 frames
below its script that way, 2.1-2.6 % of its samples reaching the root.
tests/java/DeoptRoots.java makes the same frame on purpose: outer(),
compiled with a class-hierarchy dependency, calls run(), which loops until
the end; loading a second Shape invalidates outer(). The agent completes
the walk below where ASGCT stopped (javawalk_extend, with the pc the frame
kept at nmethod::_orig_pc_offset). Before the invalidation and after it,
at least 90 % of inner()'s samples must reach DeoptRoots.main, with outer()
between (before: 0 % after the invalidation)."""
import os

import jproftest as jt
import jvmtest as jv

RECORD_S = 3
JVM_S = 120
OPTS = ["-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,DeoptRoots::inner",
        "-XX:CompileCommand=dontinline,DeoptRoots::run"]


def record(t, d, jvm, tag):
    path = os.path.join(t.outdir(), "deopt-%d-%s.collapsed" % (jvm.pid, tag))
    r = t.ctl(["record", "--pid", str(jvm.pid), "-d", "%ds" % RECORD_S, "-o", path,
               "--format", "collapsed", "--no-progress", "--java", "require", "--java-types"],
              user="nobody", socket_path=d.socket, timeout=RECORD_S + 60)
    jt.check_eq(r.returncode, 0, "jprofctl exit code (stderr: %s)" % r.stderr)
    with open(path) as f:
        return jt.parse_collapsed(f.read())


def plain(frames):
    """Frame names without their type suffix (--java-types)."""
    return [f.split("_[")[0] for f in frames]


def rooted(stacks):
    """(inner()'s samples, those reaching main through outer and run, the
    stacks with inner())."""
    inner = {s: n for s, n in stacks.items() if "DeoptRoots.inner" in plain(jt.frames_of(s))}
    whole = sum(n for s, n in inner.items()
                if plain(jt.frames_of(s))[:3] == ["DeoptRoots.main", "DeoptRoots.outer",
                                                  "DeoptRoots.run"])
    return sum(inner.values()), whole, inner


def main(t):
    d = t.start_daemon(*jv.agent_args())
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: stacks reach main past a frame marked for deoptimization" % jdk):
            work = t.mkdtemp("deopt-", owner="nobody")
            trigger = os.path.join(work, "trigger")
            jvm = jv.Jvm(t, jdk, "DeoptRoots", JVM_S, trigger, opts=OPTS, settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 30, what="DeoptRoots to warm up")
            total, whole, inner = rooted(record(t, d, jvm, "before"))
            jt.log("JDK %s before: %d of %d samples reach main" % (jdk, whole, total))
            jt.check(total >= 20 and whole >= 0.9 * total,
                     "before the invalidation %d of %d reach main:\n%s"
                     % (whole, total, jt.top_stacks(inner, 4)))
            open(trigger, "w").close()
            jt.wait_until(lambda: "loaded" in jvm.output(), 30, what="DeoptRoots to load B")
            total, whole, inner = rooted(record(t, d, jvm, "after"))
            jt.log("JDK %s after: %d of %d samples reach main" % (jdk, whole, total))
            jt.check(total >= 20 and whole >= 0.9 * total,
                     "past the frame marked for deoptimization %d of %d reach main:\n%s"
                     % (whole, total, jt.top_stacks(inner, 4)))
            jvm.stop_alive()


jt.run(main)
