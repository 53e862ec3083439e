"""Merged Java + native + kernel stacks of real JVMs (JDK 17 and 25) run as
nobody and recorded by nobody, through the injected agent."""

import json
import os
import re

import jproftest as jt
import jvmtest as jv


def record(t, d, pid, secs, interval="10ms", extra=()):
    out = t.outdir()
    path = out + "/p.collapsed"
    r = t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-i", interval, "-o", path,
               "--no-progress", "--java", "require"] + list(extra), user="nobody",
              socket_path=d.socket, timeout=secs + 60)
    jt.check_eq(r.returncode, 0, "jprofctl exit code (stderr: %s)" % r.stderr)
    with open(path) as f:
        return jt.parse_collapsed(f.read()), r.stderr


SPLIT_SAMPLES = 1000


def record_file(t, d, pid, name, secs):
    path = os.path.join(t.outdir(), name)
    t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-i", "10ms", "-o", path,
           "--no-progress", "--java", "require"], user="nobody", socket_path=d.socket,
          timeout=secs + 60, check_rc=0)
    with open(path) as f:
        return json.load(f)


def native_only(frames):
    """A Java thread's sample without Java frames and without a marker (the
    bench's "(no marker, native [jit] frames)"): its Java part is lost and
    nothing says so."""
    kinds = [f["kind"] for f in frames]
    return not any(k.startswith("java") or k == "marker" for k in kinds) and any(
        f["name"] == "[jit]" or f["name"].startswith("JavaCalls::call_helper") for f in frames)


def samples_with(stacks, frame):
    return jt.samples_matching(stacks, lambda fr: frame in fr)


def main(t):
    d = t.start_daemon(*jv.agent_args())
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: CPU split of two methods within 3 points of the truth" % jdk):
            # Recorded in 8 s parts until alpha and beta have SPLIT_SAMPLES
            # (one part on an idle machine; a loaded one gives the JVM a
            # fraction of a CPU), then the workload is told to stop.
            # The truth counts from the START file on, made just before the
            # first part (CpuSplit: its split moves with the machine's load).
            ctl = t.mkdtemp("split-")
            stop, start = os.path.join(ctl, "stop"), os.path.join(ctl, "start")
            jvm = jv.Jvm(t, jdk, "CpuSplit", 60, stop, start, settle=2.0)
            stacks = {}
            open(start, "w").close()
            for _ in range(4):
                part, _ = record(t, d, jvm.pid, 8, interval="5ms")
                for s, n in part.items():
                    stacks[s] = stacks.get(s, 0) + n
                alpha = samples_with(stacks, "CpuSplit.alpha")
                beta = samples_with(stacks, "CpuSplit.beta")
                if alpha + beta >= SPLIT_SAMPLES:
                    break
            open(stop, "w").close()
            jt.check(alpha + beta >= SPLIT_SAMPLES, "too few samples in alpha/beta (%d + %d):\n%s"
                     % (alpha, beta, jt.top_stacks(stacks)))
            # Root first: main calls alpha.
            jt.check(jt.samples_matching(stacks, lambda fr: jt.has_seq(fr, ["CpuSplit.main", "CpuSplit.alpha"])) > 0,
                     "no CpuSplit.main;CpuSplit.alpha stack:\n%s" % jt.top_stacks(stacks))
            truth = jvm.result(60)
            # The program times each call itself: thread CPU time is what a
            # CPU profiler sees (the wall split also counts run-queue waits
            # on a busy machine; it is logged for comparison).
            want = truth["alpha_cpu_ns"] / float(truth["alpha_cpu_ns"] + truth["beta_cpu_ns"])
            wall = truth["alpha_ns"] / float(truth["alpha_ns"] + truth["beta_ns"])
            got = alpha / float(alpha + beta)
            jt.log("JDK %s: alpha share profiled %.3f, measured CPU %.3f (wall %.3f)"
                   % (jdk, got, want, wall))
            jt.check(abs(got - want) <= 0.03, "alpha share %.3f vs measured %.3f" % (got, want))

        if jdk == "17":
            with t.case("JDK 17: while the agent is attached, the host view has the Java frames"):
                jvm = jv.Jvm(t, jdk, "CpuSplit", 12, settle=1.0)
                record(t, d, jvm.pid, 4)
                c = d.client()
                rid = c.send("profile", pid=jvm.pid, last_s=30, format="collapsed")
                m = c.recv_for(rid, 20)
                jt.check(m and m.get("ok") and m.get("type") == "profile",
                         "profile request failed: %r" % (m,))
                host = jt.parse_collapsed(m["data"])
                jt.check(jt.samples_matching(host, lambda fr: "CpuSplit.alpha" in fr) > 0,
                         "the host view of pid %d has no Java frames:\n%s"
                         % (jvm.pid, jt.top_stacks(host)))
                jvm.proc.kill()

        if jdk == "17":
            with t.case("JDK 17: a short recording samples only once the agent is ready, for its whole duration"):
                # The events start when the agent has armed its threads' fds
                # (the start gate): the spinning main thread has no sample
                # without Java frames, from the first one on; and -d counts
                # from the gate's opening, so 2 s hold 2 s of samples.
                jvm = jv.Jvm(t, jdk, "CpuSplit", 30, settle=1.0)
                raw = record_file(t, d, jvm.pid, "gate.raw.json", 2)
                fr = raw["frames"]
                mains = {th["tid"] for th in raw.get("threads", []) if th.get("name") == "main"}
                jt.check(mains, "no thread named main: %r" % raw.get("threads"))
                on_main = [s for s in raw["stacks"] if s["tid"] in mains]
                total = sum(s["samples"] for s in on_main)
                lost = [s for s in on_main if native_only([fr[i] for i in s["frames"]])]
                jt.log("gate: main thread %d samples, %d native-only" % (total, sum(s["samples"] for s in lost)))
                jt.check(total >= 20, "main thread has %d samples in 2 s" % total)
                jt.check(not lost, "main thread samples without Java frames or marker:\n%s" % "\n".join(
                    "%d %s" % (s["samples"], ";".join(fr[i]["name"] for i in s["frames"])) for s in lost))
                # Again, the agent already bound once: its sample times, from
                # the recording's start (the gate), span its 2 s.
                doc = record_file(t, d, jvm.pid, "gate.trace.json", 2)
                xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
                jt.check(xs, "no slices in the timeline")
                first = min(e["ts"] for e in xs) / 1000.0
                last = max(e["ts"] + e["dur"] for e in xs) / 1000.0
                jt.log("gate: samples from %.0f ms to %.0f ms of a 2000 ms recording" % (first, last))
                jt.check(first < 250, "first sample %.0f ms after the start" % first)
                jt.check(1700 <= last <= 2300, "last sample ends %.0f ms after the start" % last)
                jvm.proc.kill()

        with t.case("JDK %s: I/O stacks read Java -> native -> kernel" % jdk):
            jvm = jv.Jvm(t, jdk, "IoRead", 10)
            stacks, _ = record(t, d, jvm.pid, 3)
            good = 0
            for stack, n in stacks.items():
                fr = jt.frames_of(stack)
                if "java.io.FileInputStream.readBytes" not in fr:
                    continue
                i_java = fr.index("java.io.FileInputStream.readBytes")
                i_read = next((i for i, f in enumerate(fr) if i > i_java and not jt.is_kernel_frame(f)
                               and re.search(r"(^|_)read$", f)), None)
                i_k = next((i for i, f in enumerate(fr) if f in ("ksys_read_[k]", "vfs_read_[k]")), None)
                if i_read is not None and i_k is not None and i_java < i_read < i_k and \
                        all(jt.is_kernel_frame(f) for f in fr[i_k:]):
                    good += n
            jt.check(good > 0, "no stack with FileInputStream.readBytes -> read -> ksys_read/vfs_read:\n%s"
                     % jt.top_stacks(stacks))
            jvm.proc.kill()

        with t.case("JDK %s: GC threads appear with native frames from libjvm" % jdk):
            jvm = jv.Jvm(t, jdk, "Alloc", 12, opts=["-Xmx64m"])
            stacks, _ = record(t, d, jvm.pid, 4, extra=["--threads"])
            gc = jt.samples_matching(stacks, lambda fr: fr and re.match(r"\[(GC Thread|G1 |ParGC|VM Thread)", fr[0])
                                     and any("::" in f for f in fr[1:]))
            jt.check(gc > 0, "no GC/VM thread stack with libjvm frames:\n%s" % jt.top_stacks(stacks, 25))
            jvm.proc.kill()

        with t.case("JDK %s: threads started during the recording appear" % jdk):
            jvm = jv.Jvm(t, jdk, "LateThreads", 14, 2, settle=0.5)
            stacks, _ = record(t, d, jvm.pid, 6, extra=["--threads"])
            late = jt.samples_matching(stacks, lambda fr: "LateThreads.lateWork" in fr
                                       and fr[0].startswith("[late-worker-"))
            jt.check(late > 50, "late threads have %d samples:\n%s" % (late, jt.top_stacks(stacks)))
            jvm.proc.kill()


jt.run(main)
