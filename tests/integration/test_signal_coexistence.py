"""Another profiler in the JVM keeps its signals while jprofd records it, and
jprofd keeps its Java frames (JDK 17 and 25, JVM run as nobody).

The other profiler is tests/java/sigprof_test_agent.c: it owns SIGPROF like
async-profiler and sends itself one SIGPROF per millisecond to the main thread,
the next one only once its handler saw the last (async-profiler re-enables its
perf event only from its handler: one lost signal stops its samples). It
writes "sent received lost foreign ms" to a file.

- other profiler first: jprofd must not install over it; its signals keep
  their rate during the recording and none is lost; jprofd records with
  another signal (summary.java.signal) and still has Java frames.
- jprofd first, the other profiler installs over jprofd's handler during the
  recording: jprofd moves to a free signal (summary.java.signal.taken_over,
  a java_signal_taken warning) and the rest of the recording has Java frames.
"""
import os
import shutil
import signal

import jproftest as jt
import jvmtest as jv

RECORD_S = 6
INTERVAL_US = 1000


def test_agent(t):
    src = os.path.join(os.environ["JPROF_JAVA_DIR"], "libsigprof_test_agent.so")
    jt.check(os.path.isfile(src), "test agent not built: %s" % src)
    d = t.mkdtemp("sigagent-")
    dst = os.path.join(d, "libsigprof_test_agent.so")
    shutil.copy2(src, dst)
    os.chmod(dst, 0o755)
    os.chmod(d, 0o777)
    return dst, d


def counts(path):
    """(sent, received, lost, foreign, ms) or None before the first report."""
    try:
        with open(path) as f:
            v = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None
    return tuple(v) if len(v) == 5 else None


def rate(a, b):
    """Signals received per second between two reports."""
    return (b[1] - a[1]) * 1000.0 / max(1, b[4] - a[4])


def wait_counts(path, after_ms, what):
    got = []

    def ready():
        c = counts(path)
        if c and c[4] >= after_ms:
            got.append(c)
            return True
        return False
    jt.wait_until(ready, 30, interval=0.05, what=what)
    return got[-1]


def java_share(stacks, tid):
    """Share of thread tid's samples with a CpuSplit frame."""
    mine = {s: n for s, n in stacks.items() if jt.stack_tid(jt.frames_of(s)) == tid}
    total = sum(mine.values())
    java = jt.samples_matching(mine, lambda fr: any(f.startswith("CpuSplit.") for f in fr))
    return java, total


def main_tid(stacks):
    for s in stacks:
        fr = jt.frames_of(s)
        if any(f.startswith("CpuSplit.alpha") for f in fr):
            return jt.stack_tid(fr)
    return None


def check_java_frames(rec, jdk, min_share):
    """The main thread's samples have Java frames (at least min_share)."""
    stacks = rec.stacks()
    tid = main_tid(stacks)
    jt.check(tid is not None, "no CpuSplit.alpha frame:\n%s" % jt.top_stacks(stacks))
    java, total = java_share(stacks, tid)
    jt.log("JDK %s main thread: %d of %d samples with Java frames" % (jdk, java, total))
    jt.check(total >= 500 and java >= min_share * total,
             "main thread: %d of %d samples with Java frames" % (java, total))


def record(d, jvm):
    c = d.client()
    rid = c.start_record(pid=jvm.pid, duration_ms=RECORD_S * 1000, interval_us=INTERVAL_US,
                         java="require", thread_frames=True)
    return c, rid


def main(t):
    d = t.start_daemon(*jv.agent_args())
    agent, tmp = test_agent(t)
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: a profiler already on SIGPROF keeps every signal" % jdk):
            out = os.path.join(tmp, "first-%s.txt" % jdk)
            jvm = jv.Jvm(t, jdk, "CpuSplit", RECORD_S + 14, settle=0.5,
                         opts=["-agentpath:%s=out=%s" % (agent, out)])
            base0 = wait_counts(out, 500, "the test agent's first report")
            base1 = wait_counts(out, base0[4] + 1500, "the test agent's baseline")
            c, rid = record(d, jvm)
            rec = c.collect_record(rid, RECORD_S + 40)
            after = counts(out)
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            before_rate, during_rate = rate(base0, base1), rate(base1, after)
            lost = after[2] - base1[2]
            jt.log("JDK %s other profiler: %.0f/s before, %.0f/s during; lost %d, foreign %d"
                   % (jdk, before_rate, during_rate, lost, after[3]))
            # Stolen, its stream stops at the first SIGPROF of jprofd's it
            # does not get back: then it sees ~1/s (one per lost-timeout).
            jt.check(during_rate >= 0.5 * before_rate,
                     "the other profiler's signal rate fell from %.0f/s to %.0f/s while jprofd "
                     "recorded" % (before_rate, during_rate))
            jt.check_eq(lost, 0, "signals the other profiler lost during the recording")
            jt.check_eq(after[3], 0, "jprofd signals delivered to the other profiler")
            sig = (rec.summary().get("java") or {}).get("signal") or {}
            jt.check(sig.get("number") not in (None, signal.SIGPROF) and sig.get("foreign_at_start"),
                     "summary.java.signal does not report another signal: %r" % (sig,))
            check_java_frames(rec, jdk, 0.8)
            jvm.stop_alive()

        with t.case("JDK %s: a profiler taking SIGPROF over mid-recording: jprofd moves" % jdk):
            out = os.path.join(tmp, "second-%s.txt" % jdk)
            go = os.path.join(tmp, "go-%s" % jdk)
            jvm = jv.Jvm(t, jdk, "CpuSplit", RECORD_S + 14, settle=0.5,
                         opts=["-agentpath:%s=out=%s,after=%s" % (agent, out, go)])
            c, rid = record(d, jvm)
            # Take SIGPROF over once jprofd's agent has its handler there
            # (nothing else in this JVM catches SIGPROF) and its samples
            # flow.
            jt.wait_until(lambda: catches(jvm.pid, signal.SIGPROF), 20, interval=0.02,
                          what="jprofd's agent to catch SIGPROF")
            jt.wait_until(lambda: session_samples(d, jvm.pid) >= 500, 20, interval=0.05,
                          what="500 samples recorded")
            open(go, "w").close()
            rec = c.collect_record(rid, RECORD_S + 40)
            after = counts(out)
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            jt.check(after is not None, "the test agent never reported")
            jt.log("JDK %s late profiler (sent received lost foreign ms): %r" % (jdk, after))
            # Until the agent notices (it looks every 100 ms) both streams
            # share SIGPROF, and one pending SIGPROF swallows the next: a
            # loss or two there, none after the move.
            jt.check(after[2] <= 2, "the late profiler lost %d signals" % after[2])
            # jprofd's signals reach the late profiler in that window:
            # some, not a stream.
            jt.check(after[3] <= 500, "the late profiler got %d of jprofd's signals: jprofd did "
                     "not move away" % after[3])
            sig = (rec.summary().get("java") or {}).get("signal") or {}
            jt.check(sig.get("taken_over") == 1 and sig.get("number") != signal.SIGPROF,
                     "summary.java.signal does not report the move: %r" % (sig,))
            warns = [m.get("code") for m in rec.messages if m.get("type") == "warning"]
            jt.check("java_signal_taken" in warns, "no java_signal_taken warning: %r" % warns)
            # Without the move, only the time before the takeover (< 1/4)
            # has Java frames.
            check_java_frames(rec, jdk, 0.6)
            jvm.stop_alive()


def session_samples(d, pid):
    for s in d.client().status().get("sessions", {}).get("list", []):
        if s.get("pid") == pid:
            return s.get("samples", 0)
    return 0


def catches(pid, sig):
    """True when the process has a handler for sig (/proc's SigCgt)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except OSError:
        pass
    return False


jt.run(main)
