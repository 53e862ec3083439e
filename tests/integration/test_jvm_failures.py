"""JVM recordings when things go wrong: not a JVM, attach disabled, a JVM
recorded while it is still starting up (the daemon waits for it: Java
frames), the JVM killed mid-recording, the daemon killed mid-recording.
Each gives a clear result and nothing else is disturbed."""

import os
import signal
import time

import jproftest as jt
import jvmtest as jv


def sampling_then_1s(d, pid):
    """Returns 1 s after daemon d started sampling pid (its log says so)."""
    jt.wait_until(lambda: "sampling pid %d " % pid in d.stderr_text(), 60, interval=0.1,
                  what="the daemon sampling pid %d" % pid)
    time.sleep(1)  # a second of samples (not a wait for a condition)


def main(t):
    d = t.start_daemon(*jv.agent_args())

    with t.case("--java require on a process that is not a JVM: not_a_jvm"):
        p = t.workload("spin_chain", 30)
        c = d.client(user="nobody")
        rec = c.record(pid=p.pid, duration_ms=2000, java="require")
        jt.check_eq(rec.error_code, "not_a_jvm", "error for a non-JVM (%s)" % rec.describe())
        r = t.ctl(["record", "--pid", str(p.pid), "-d", "1s", "--java", "require"], user="nobody",
                  socket_path=d.socket, timeout=30)
        jt.check_eq(r.returncode, 1, "jprofctl exit code for a non-JVM")
        jt.check("JVM" in r.stderr, "jprofctl says nothing about the JVM: %r" % r.stderr)
        # auto on a non-JVM is a plain native recording.
        rec = c.record(pid=p.pid, duration_ms=2000)
        jt.check(rec.profile is not None and
                 jt.samples_matching(rec.stacks(), lambda fr: jt.has_seq(fr, ["main", "a", "b", "spin"])) > 0,
                 "native recording of a non-JVM: %s" % rec.describe())
        p.kill()

    with t.case("a JVM with -XX:+DisableAttachMechanism: a clear refusal, no thread dump"):
        jvm = jv.Jvm(t, "17", "Idle", 30, opts=["-XX:+DisableAttachMechanism"])
        c = d.client(user="nobody")
        rec = c.record(pid=jvm.pid, duration_ms=1500)
        jt.check(rec.profile is not None, "auto mode gives a native profile: %s" % rec.describe())
        java = rec.summary().get("java") or {}
        jt.check_eq(java.get("code"), "attach_disabled", "java code in the summary (%r)" % java)
        warnings = [m for m in rec.messages if m.get("type") == "warning"]
        jt.check(warnings and "DisableAttachMechanism" in warnings[0].get("message", ""),
                 "warning names the flag: %r" % warnings)
        rec = c.record(pid=jvm.pid, duration_ms=1500, java="require")
        jt.check_eq(rec.error_code, "attach_failed", "require on an unattachable JVM")
        time.sleep(0.5)
        jt.check("Full thread dump" not in jvm.output(),
                 "the JVM printed a thread dump: it got SIGQUIT")
        jt.check(jvm.proc.running(), "the JVM died")
        jvm.proc.kill()

    # Two runs (one per JDK) in the suite; the start-up race was checked
    # with 45 runs when the retry was written: JPROF_STARTUP_RUNS=N for more.
    jdks = [v for v, _ in jv.jdks()]
    runs = int(os.environ.get("JPROF_STARTUP_RUNS", "2"))
    for run in range(1, runs + 1):
        jdk = jdks[(run - 1) % len(jdks)]
        with t.case("a JDK %s JVM recorded as soon as it maps libjvm.so (run %d): Java frames"
                    % (jdk, run)):
            # No settle time: the attach meets the JVM in its start-up
            # (SIGQUIT not handled yet, or JVMTI not live: Agent_OnAttach
            # fails), and the daemon retries until the JVM can take it.
            jvm = jv.Jvm(t, jdk, "CpuSplit", 30, settle=0)
            c = d.client(user="nobody")
            rec = c.record(pid=jvm.pid, duration_ms=6000, java="require")
            jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
            java = rec.summary().get("java") or {}
            jt.log("java summary %r; warnings %r" % (
                java, [m for m in rec.messages if m.get("type") == "warning"]))
            jt.log("tries the JVM refused: %r; the daemon waited: %r" % (
                [ln for ln in jvm.output().splitlines() if "JVMTI" in ln],
                [ln for ln in d.stderr_text().splitlines()
                 if "pid %d is starting up" % jvm.pid in ln]))
            stacks = rec.stacks()
            jt.check(jt.samples_matching(stacks, lambda fr: "CpuSplit.alpha" in fr) > 0,
                     "no Java frames:\n%s" % jt.top_stacks(stacks))
            jvm.stop_alive()

    with t.case("the JVM killed mid-recording: partial profile, status process_exited"):
        jvm = jv.Jvm(t, "17", "CpuSplit", 30, settle=2.0)
        c = d.client(user="nobody")
        rid = c.start_record(pid=jvm.pid, duration_ms=8000)
        sampling_then_1s(d, jvm.pid)
        jvm.proc.signal(signal.SIGKILL)
        rec = c.collect_record(rid, 20)
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "process_exited", "profile status")
        stacks = rec.stacks()
        # Java frames of the workload's class: which of its methods were
        # named before the kill depends on how far the agent got (a busy
        # machine left alpha as [unknown_java_method] once).
        jt.check(jt.samples_matching(stacks, lambda fr: any(f.startswith("CpuSplit.") for f in fr))
                 > 0, "the partial profile has no Java frames:\n%s" % jt.top_stacks(stacks))
        jt.check_eq(d.client().status()["sessions"]["active"], 0, "sessions left")

    with t.case("the daemon SIGKILLed mid-recording: the JVM finishes; a new daemon records it"):
        # Both daemons first: each takes seconds to load its BPF programs on
        # a loaded machine, and the JVM must still run when the second records.
        d1 = t.start_daemon(*jv.agent_args(), name="jprofd-doomed")
        d2 = t.start_daemon(*jv.agent_args(), name="jprofd-new")
        # It runs until told to stop (STOP file), once the new daemon has
        # recorded it: then it must finish normally at once.
        stop = os.path.join(t.mkdtemp("doomed-"), "stop")
        jvm = jv.Jvm(t, "17", "CpuSplit", 60, stop, settle=2.0)
        c = d1.client(user="nobody")
        c.start_record(pid=jvm.pid, duration_ms=10000)
        sampling_then_1s(d1, jvm.pid)
        d1.note_bpf_programs()
        d1.proc.signal(signal.SIGKILL)
        d1.proc.wait(5)
        d1.stopped = True
        time.sleep(1)
        jt.check(jvm.proc.running(), "the JVM died with the daemon: %s" % jvm.output()[-2000:])
        rec = d2.client(user="nobody").record(pid=jvm.pid, duration_ms=3000, java="require")
        jt.check(rec.profile is not None, "a new daemon cannot record the JVM: %s" % rec.describe())
        stacks = rec.stacks()
        jt.check(jt.samples_matching(stacks, lambda fr: "CpuSplit.alpha" in fr) > 0,
                 "no Java frames from the new daemon:\n%s" % jt.top_stacks(stacks))
        open(stop, "w").close()
        result = jvm.result(60)
        jt.check(result.get("alpha_ns", 0) > 0, "the workload did not finish normally: %r" % result)
        d2.stop()
        t.check_no_bpf_leftovers(d1.bpf_ids)

    with t.case("the daemon still serves"):
        jt.check_eq(d.client().status()["sessions"]["active"], 0, "sessions")


jt.run(main)
