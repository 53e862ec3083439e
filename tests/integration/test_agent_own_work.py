"""The JVM agent's own work is not in the profile (JDK 17 and 25, JVM run as
nobody): a --threads recording at 1 ms of a JVM the agent is injected into
during the recording (so its start-up scan of the loaded classes, JVMTI
GetClassMethods on its own thread, happens inside it, as does its socket
I/O) has no thread labelled "jprofagent" and no frame of the agent's thread
work, while the JVM's own threads are there with Java frames."""
import os

import jproftest as jt
import jvmtest as jv

RECORD_S = 4
# Frames only the agent's thread runs (JVMTI's GetClassMethods, the agent's
# own functions).
AGENT_WORK = ("GetClassMethods", "jvmti_GetClassMethods", "methods_add_loaded", "link_main",
              "link_session", "link_rescan")


def main(t):
    d = t.start_daemon(*jv.agent_args())
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: no jprofagent thread and no agent work in --threads" % jdk):
            jvm = jv.Jvm(t, jdk, "CpuSplit", RECORD_S + 10, settle=0.5)
            path = os.path.join(t.outdir(), "own-%s.collapsed" % jdk)
            r = t.ctl(["record", "--pid", str(jvm.pid), "-d", "%ds" % RECORD_S, "-i", "1ms",
                       "-o", path, "--threads", "--no-progress", "--java", "require"],
                      user="nobody", socket_path=d.socket, timeout=RECORD_S + 60)
            jt.check_eq(r.returncode, 0, "jprofctl exit code (stderr: %s)" % r.stderr)
            with open(path) as f:
                stacks = jt.parse_collapsed(f.read())
            # The agent thread exists (the recording went through it).
            names = set()
            for task in os.listdir("/proc/%d/task" % jvm.pid):
                try:
                    with open("/proc/%d/task/%s/comm" % (jvm.pid, task)) as f:
                        names.add(f.read().strip())
                except OSError:
                    pass
            jt.check("jprofagent" in names, "no jprofagent thread in the JVM: %s" % sorted(names))
            labels = set()
            for s in stacks:
                m = jt.THREAD_FRAME_RE.match(jt.frames_of(s)[0])
                if m:
                    labels.add(m.group(1))
            jt.log("JDK %s thread labels: %s" % (jdk, sorted(labels)))
            jt.check("jprofagent" not in labels,
                     "the agent's thread is in the profile:\n%s" % jt.top_stacks(
                         {s: n for s, n in stacks.items() if "[jprofagent tid=" in s}))
            own = jt.samples_matching(stacks, lambda fr: any(
                any(w in f for w in AGENT_WORK) for f in fr))
            jt.check_eq(own, 0, "samples with the agent's own work")
            java = jt.samples_matching(stacks, lambda fr: any(f.startswith("CpuSplit.alpha")
                                                              for f in fr))
            jt.check(java >= 500, "only %d CpuSplit.alpha samples:\n%s"
                     % (java, jt.top_stacks(stacks)))
            jvm.stop_alive()


jt.run(main)
