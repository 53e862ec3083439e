"""Java thread names (JDK 17 and 25, JVM run as nobody): per-thread output
labels a JVM's threads with their java.lang.Thread names, not /proc's
15-byte comm, both for a thread that existed when the agent came and for one
started during the recording; the main thread is "main", not "java"."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402

FIRST = "worker-with-a-very-long-name-1"
LATE = "late-worker-with-a-long-name-2"
DELAY_S = 4      # the late worker starts this long after "ready"
RECORD_S = 8
TOTAL_S = 14


def start(t, jdk):
    jvm = jv.Jvm(t, jdk, "ThreadNames", TOTAL_S, DELAY_S, settle=0.1)
    jt.wait_until(lambda: "ready" in jvm.output(), 20, what="ThreadNames to print ready")
    return jvm


def tasks(pid):
    try:
        return {int(x) for x in os.listdir("/proc/%d/task" % pid)}
    except OSError:
        return set()


def record(t, d, jvm, fmt, extra=()):
    path = os.path.join(t.outdir(), "names-%d.%s" % (jvm.pid, fmt))
    ctl, _, ctl_err = t.ctl_popen(
        ["record", "--pid", str(jvm.pid), "-d", "%ds" % RECORD_S, "-o", path, "--format", fmt,
         "--java", "require", "--no-progress"] + list(extra), user="nobody", socket_path=d.socket)
    seen = set()
    jt.wait_until(lambda: seen.update(tasks(jvm.pid)) or not ctl.running(), RECORD_S + 60,
                  interval=0.25, what="the recording to end")
    code = ctl.wait(10)
    with open(ctl_err) as f:
        err = f.read()
    jt.check_eq(code, 0, "jprofctl exit code (stderr: %r)" % err)
    with open(path) as f:
        return f.read(), seen


def main(t):
    d = t.start_daemon(*jv.agent_args())
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: --threads labels threads with their full Java names" % jdk):
            jvm = start(t, jdk)
            text, seen = record(t, d, jvm, "collapsed", ["--threads"])
            stacks = jt.parse_collapsed(text)
            names = {}
            for s, c in stacks.items():
                m = jt.THREAD_FRAME_RE.match(jt.frames_of(s)[0])
                if m:
                    names.setdefault(m.group(1), set()).add(int(m.group(2)))
            jt.log("JDK %s thread labels: %s" % (jdk, sorted(names)))
            for name, method in ((FIRST, "ThreadNames.spin"), (LATE, "ThreadNames.spin"),
                                 ("main", "ThreadNames.mainSpin")):
                jt.check(len(names.get(name, ())) == 1,
                         "want one thread labelled %r, got %s:\n%s"
                         % (name, sorted(names), jt.top_stacks(stacks)))
                tid = next(iter(names[name]))
                jt.check(tid in seen, "%s: tid %d is not a thread of pid %d (%s)"
                         % (name, tid, jvm.pid, sorted(seen)))
                n = jt.samples_matching(
                    stacks, lambda fr, tid=tid, method=method: jt.stack_tid(fr) == tid
                    and method in fr)
                jt.check(n > 0, "no %s samples under thread %r:\n%s"
                         % (method, name, jt.top_stacks(stacks)))
            jt.check(not any(n.startswith("worker-with-a-v") and n != FIRST for n in names),
                     "a truncated /proc name is left: %s" % sorted(names))
            jvm.stop_alive()

    with t.case("JDK 17: the timeline's thread tracks carry the Java names"):
        jvm = start(t, "17")
        text, _ = record(t, d, jvm, "timeline")
        doc = json.loads(text)
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        # Tracks are named "<thread> tid=<tid>".
        tnames = {e["tid"]: re.sub(r" tid=\d+$", "", e["args"]["name"]) for e in evs
                  if e.get("ph") == "M" and e.get("name") == "thread_name"}
        jt.log("timeline thread names: %s" % sorted(tnames.values()))
        for name in (FIRST, LATE, "main"):
            jt.check(name in tnames.values(), "no timeline track named %r: %s"
                     % (name, sorted(tnames.values())))
        jvm.stop_alive()


jt.run(main)
