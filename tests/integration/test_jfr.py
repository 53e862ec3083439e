"""The jfr format read by the JDK's own `jfr` tool (JDK 17 and JDK 25):
`jfr summary`, `jfr print`, `jfr print --json` and `jfr metadata` on
recordings of a JVM (tests/java/CpuSplit, run and recorded as nobody), of a
native process (tests/progs/spin_chain), of an idle process (no samples) and
of a process that exits during the recording.

Exact counts, within one recording: every sample of the recording is one
event (jprofctl's "wrote ...: N samples" is the daemon's own total), so
jdk.ExecutionSample + jdk.NativeMethodSample == N as `jfr summary` counts
them; and jdk.ExecutionSample == the events whose stack has a Java frame
type, as `jfr print --json` shows them (the split is the renderer's, read
back through the JDK's parser).

Threads and frames as JMC and IntelliJ read them: the sampled thread's
javaThreadId is java.lang.Thread's id (as the JVM's own `jcmd Thread.print`
shows it: main is 1 on JDK 17, 3 on JDK 25), osThreadId its OS tid; Java
frames carry their line number and bytecode index, with or without
--java-lines (issue 29 item 5)."""
import collections
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402

JFR_TOOLS = {
    "17": "/usr/lib/jvm/java-17-openjdk-amd64/bin/jfr",
    "25": "/usr/lib/jvm/temurin-25-jdk-amd64/bin/jfr",
}
WROTE_RE = re.compile(r"wrote (.+): (\d+) samples, (\d+) stacks \((\w+)\)")
JAVA_TYPES = ("Interpreted", "JIT compiled", "Inlined", "Java")
EXEC, NATIVE = "jdk.ExecutionSample", "jdk.NativeMethodSample"


def tools():
    have = [(v, p) for v, p in JFR_TOOLS.items() if os.access(p, os.X_OK)]
    jt.check(any(v == "17" for v, _ in have), "JDK 17's jfr not found at %s" % JFR_TOOLS["17"])
    return have


def jfr(tool, *args):
    r = subprocess.run([tool] + list(args), capture_output=True, text=True, timeout=120)
    jt.check(r.returncode == 0 and "error" not in r.stderr.lower(),
             "%s %s failed (exit %d): %s%s" % (tool, " ".join(args), r.returncode, r.stderr[-2000:],
                                                r.stdout[-1000:]))
    return r.stdout


def summary_counts(text):
    """Event type -> count from `jfr summary`."""
    counts = {}
    for line in text.splitlines():
        m = re.match(r"\s+([\w.]+)\s+(\d+)\s+(\d+)\s*$", line)
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def record(t, d, pid, name, secs, extra=(), rc=0):
    out = os.path.join(t.outdir(), name)
    r = t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-i", "10ms", "-o", out,
               "--no-progress"] + list(extra), user="nobody", socket_path=d.socket,
              timeout=secs + 60)
    jt.check_eq(r.returncode, rc, "jprofctl exit code (stderr: %s)" % r.stderr)
    m = WROTE_RE.search(r.stderr)
    jt.check(m, "jprofctl did not report what it wrote: %r" % r.stderr)
    jt.check(os.path.isfile(out), "jprofctl did not write %s" % out)
    jt.check("truncated" not in r.stderr, "unexpected truncation: %s" % r.stderr)
    return out, int(m.group(2))


def java_thread_ids(jdk, pid):
    """{thread name: Java id} as the JVM itself tells (jcmd Thread.print,
    run as the JVM's user): `"main" #1 ...`."""
    jcmd = os.path.join(os.path.dirname(jv.JDKS[jdk]), "jcmd")
    r = subprocess.run(jt.as_user_argv("nobody", [jcmd, str(pid), "Thread.print"]),
                       capture_output=True, text=True, timeout=60)
    jt.check(r.returncode == 0, "jcmd Thread.print failed: %s" % r.stderr[-1000:])
    return {m.group(1): int(m.group(2)) for m in re.finditer(r'^"([^"]*)" #(\d+) ', r.stdout, re.M)}


def frame_name(f):
    m = f["method"]
    cls = (m.get("type") or {}).get("name") or ""
    return cls.replace("/", ".") + "." + m["name"]


def is_java(f):
    """A Java method's frame: a Java frame type and a real class (jprofd's
    "[jit]" frames, JIT code without a method, are "JIT compiled" too)."""
    cls = (f["method"].get("type") or {}).get("name") or ""
    return f["type"] in JAVA_TYPES and not cls.startswith("[")


def read_all(path, samples):
    """Every JDK's jfr on path: summary, metadata, print, print --json.
    Checks the exact counts; returns the JSON events (JDK 17's reading)."""
    events = None
    for v, tool in tools():
        counts = summary_counts(jfr(tool, "summary", path))
        n_exec, n_native = counts.get(EXEC, 0), counts.get(NATIVE, 0)
        jt.log("JDK %s jfr summary: %d %s, %d %s, %d samples recorded"
               % (v, n_exec, EXEC, n_native, NATIVE, samples))
        jt.check_eq(n_exec + n_native, samples, "JDK %s: sample events vs the recording's samples" % v)
        meta = jfr(tool, "metadata", path)
        jt.check('@Name("jdk.ExecutionSample")' in meta and '@Name("jdk.NativeMethodSample")' in meta,
                 "JDK %s jfr metadata lacks the sample events:\n%s" % (v, meta[:2000]))
        text = jfr(tool, "print", path)
        jt.check_eq(text.count(EXEC + " {") + text.count(NATIVE + " {"), samples,
                    "JDK %s: events in jfr print" % v)
        evs = json.loads(jfr(tool, "print", "--json", "--stack-depth", "500", path))["recording"]["events"]
        java = [e for e in evs if e["type"] in (EXEC, NATIVE)
                and any(is_java(f) for f in e["values"]["stackTrace"]["frames"])]
        odd = [[(frame_name(f), f["type"]) for f in e["values"]["stackTrace"]["frames"]]
               for e in evs if e["type"] == EXEC and e not in java][:3]
        jt.check(n_exec == len(java), "JDK %s: %d %s vs %d events with a Java frame; without: %s"
                 % (v, n_exec, EXEC, len(java), odd))
        jt.check(all(e["type"] == EXEC for e in java), "JDK %s: a Java stack in a native event" % v)
        times = [e["values"]["startTime"] for e in evs if e["type"] in (EXEC, NATIVE)]
        jt.check(times == sorted(times), "JDK %s: events not in time order" % v)
        if events is None:
            events = evs
    return events


def main(t):
    tools()
    d = t.start_daemon(*jv.agent_args())

    for jdk, _ in jv.jdks():
        lines = jdk == "25"
        with t.case("JDK %s JVM%s: jdk.ExecutionSample events with CpuSplit.alpha on top"
                    % (jdk, " with --java-lines" if lines else "")):
            jvm = jv.Jvm(t, jdk, "CpuSplit", 40, settle=2.0)
            # The JVM's own thread ids, now: a loaded machine's recordings
            # may outlast the workload.
            ids = java_thread_ids(jdk, jvm.pid)
            # 4 s give 300+ samples on a quiet machine; a loaded one gives
            # the JVM less CPU, so it is recorded longer until it has them.
            for secs in (4, 8, 16):
                path, n = record(t, d, jvm.pid, "cpu-%ds.jfr" % secs, secs,
                                 ["--java", "require"] + (["--java-lines"] if lines else []))
                evs = read_all(path, n)
                execs = [e for e in evs if e["type"] == EXEC]
                if len(execs) > 100:
                    break
                jt.log("%d %s events in %d s: recording longer" % (len(execs), EXEC, secs))
            jt.check(len(execs) > 100, "only %d %s events" % (len(execs), EXEC))
            tops = collections.Counter(frame_name(e["values"]["stackTrace"]["frames"][0]) for e in execs)
            jt.log("top frames: %s" % tops.most_common(5))
            alpha = tops.get("CpuSplit.alpha", 0)
            jt.check(alpha * 2 > len(execs) and tops.most_common(1)[0][0] == "CpuSplit.alpha",
                     "CpuSplit.alpha is on top of %d of %d stacks: %s" % (alpha, len(execs), tops.most_common(5)))
            # Leaf first: alpha, then main below it.
            st = next(e["values"]["stackTrace"]["frames"] for e in execs
                      if frame_name(e["values"]["stackTrace"]["frames"][0]) == "CpuSplit.alpha")
            names = [frame_name(f) for f in st]
            jt.check("CpuSplit.main" in names and names.index("CpuSplit.main") > 0,
                     "no CpuSplit.main below alpha: %s" % names)
            thread = next(e["values"]["sampledThread"] for e in execs
                          if frame_name(e["values"]["stackTrace"]["frames"][0]) == "CpuSplit.alpha")
            jt.check(thread["osName"] and thread["osThreadId"] > 0, "sampled thread: %r" % thread)
            # The JVM's own id of main (not its OS tid).
            jt.log("sampled thread %r; the JVM's ids: %s" % (thread, sorted(ids.items())[:8]))
            jt.check(thread["javaName"] == "main" and thread["javaThreadId"] == ids.get("main")
                     and thread["osThreadId"] != thread["javaThreadId"],
                     "main's javaThreadId is not its Java id %r: %r" % (ids.get("main"), thread))
            # Every Java frame its line and bytecode index, --java-lines or not.
            top = [e["values"]["stackTrace"]["frames"][0] for e in execs]
            alphas = [f for f in top if frame_name(f) == "CpuSplit.alpha"]
            placed = [f for f in alphas if f["lineNumber"] > 0 and f["bytecodeIndex"] >= 0]
            jt.log("CpuSplit.alpha frames with line and bci: %d of %d, e.g. %s"
                   % (len(placed), len(alphas), sorted({(f["lineNumber"], f["bytecodeIndex"])
                                                        for f in placed})[:5]))
            jt.check(len(placed) * 10 >= len(alphas) * 9,
                     "CpuSplit.alpha has a line and bci in %d of %d frames: %s"
                     % (len(placed), len(alphas), alphas[:2]))
            mains = [f for e in execs for f in e["values"]["stackTrace"]["frames"]
                     if frame_name(f) == "CpuSplit.main"]
            jt.check(mains and all(f["lineNumber"] > 0 and f["bytecodeIndex"] >= 0 for f in mains),
                     "CpuSplit.main without its line or bci: %s" % mains[:2])
            jvm.proc.kill()

    with t.case("native process: jdk.NativeMethodSample events, spin <- b <- a <- main"):
        w = t.workload("spin_chain", 60)
        path, n = record(t, d, w.pid, "native.jfr", 3)
        evs = read_all(path, n)
        natives = [e for e in evs if e["type"] == NATIVE]
        # (3 s of a spinner: ~300 samples on an idle machine, 78 seen at load 10)
        jt.check(n >= 20 and len(natives) == n, "%d native events of %d samples" % (len(natives), n))
        chain = 0
        for e in natives:
            names = [f["method"]["name"] for f in e["values"]["stackTrace"]["frames"]
                     if f["type"] == "Native"]
            if names[:4] == ["spin", "b", "a", "main"]:
                chain += 1
        jt.check(chain * 2 > n, "only %d of %d stacks read spin, b, a, main leaf first" % (chain, n))
        w.kill()

    with t.case("a recording without samples is a valid file"):
        idle = t.spawn(["/bin/sleep", "60"], what="sleep")
        path, n = record(t, d, idle.pid, "idle.jfr", 1)
        jt.check_eq(n, 0, "samples of a sleeping process")
        read_all(path, 0)
        idle.kill()

    with t.case("a process that exits during the recording leaves a valid file"):
        w = t.workload("spin_chain", 1)
        path, n = record(t, d, w.pid, "exit.jfr", 10, rc=6)
        jt.check(n > 0, "no samples before the exit")
        read_all(path, n)


jt.run(main)
