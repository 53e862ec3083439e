"""Java frames of samples taken while the JVM is in a GC pause (JDK 17 and
25, JVM run as nobody). AsyncGetCallTrace refuses every walk during a pause
(-2: [gc_active]); a thread that runs native code meanwhile (zlib through
JNI here, while another thread allocates and collects a large graph: pauses
take most of the time) is walked by the agent from its frame anchor
(agent/javawalk.c). Its Java frames are then there in nearly all its
samples, pauses or not: without the walk 35-65 % of them are [gc_active]
(JPROF_TEST_AGENT_ENV="JPROF_AGENT_RECOVER=0" shows that failure).
Also from the anchor: Java threads in the VM called from a runtime stub or
the interpreter (RtStubs: large arrays allocated and zeroed in the VM), for
which AsyncGetCallTrace answers "not Java" (-3/-4): without that walk
(JPROF_AGENT_VM_WALK=0) their samples have no Java frame and no marker.
Under -Xint the walked frames are interpreted: each keeps its line."""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402

RECORD_S = 4
# One GC thread stopping the world: the zlib thread has the other CPU
# during pauses (with G1's two workers on 2 CPUs it barely runs then).
OPTS = ["-Xmx128m", "-XX:+UseSerialGC"]
HOT = "GcNative.zlibLoop"


def record(t, d, jdk, cls, env, opts=(), args=(), ctl_args=()):
    """Records the workload cls RECORD_S seconds from its "ready" line."""
    jvm = jv.Jvm(t, jdk, cls, RECORD_S + 8, *args, opts=opts, env=env, settle=0.1)
    jt.wait_until(lambda: "ready" in jvm.output(), 20, what="%s to print ready" % cls)
    path = os.path.join(t.outdir(), "%s-%s.collapsed" % (cls.lower(), jdk))
    r = t.ctl(["record", "--pid", str(jvm.pid), "-d", "%ds" % RECORD_S, "-i", "5ms", "-o", path,
               "--threads", "--java", "require", "--no-progress", *ctl_args], user="nobody",
              socket_path=d.socket, timeout=RECORD_S + 60)
    jt.check_eq(r.returncode, 0, "jprofctl exit code (stderr: %s)" % r.stderr)
    with open(path) as f:
        stacks = jt.parse_collapsed(f.read())
    jvm.stop_alive()
    return stacks


def check_zlib(jdk, stacks):
    def of_zlib(fr):
        m = jt.THREAD_FRAME_RE.match(fr[0])
        return bool(m) and m.group(1) == "zlib"

    zlib = {s: n for s, n in stacks.items() if of_zlib(jt.frames_of(s))}
    total = jt.total_samples(zlib)
    hot = jt.samples_matching(zlib, lambda fr: HOT in fr)
    gc_active = jt.samples_matching(zlib, lambda fr: "[gc_active]" in fr)
    gc_threads = jt.samples_matching(stacks, lambda fr: any("GC Thread" in f or "VM Thread" in f
                                                          for f in fr[:1]))
    # The walked stacks are whole: the loop under the lambda the thread runs.
    whole = jt.samples_matching(zlib, lambda fr: jt.has_seq(
        [f for f in fr if f.startswith("GcNative")], ["GcNative.lambda$main$0", HOT]))
    jt.log("zlib samples without %s:\n%s" % (HOT, jt.top_stacks(
        {s: n for s, n in zlib.items() if HOT not in jt.frames_of(s)}, 6)))
    jt.log("JDK %s: zlib thread %d samples, %d in %s (%d under its caller), %d [gc_active]; "
           "GC threads %d of %d" % (jdk, total, hot, HOT, whole, gc_active, gc_threads,
                                    jt.total_samples(stacks)))
    # 4 s at 5 ms of one thread sharing 2 CPUs with the collector and the
    # allocating thread (22-130 seen on a host loaded by other work).
    jt.check(total >= 20, "too few samples of the zlib thread (%d):\n%s"
             % (total, jt.top_stacks(stacks)))
    # Without the walk 35-65 % of its samples are [gc_active] (none carries
    # a Java frame); with it none are. Samples the daemon could not join
    # with an agent record ([java_stack_missing]) or whose agent record had
    # no Java part (libz under [jit] frames, no marker) are another matter:
    # 20-70 % of this thread's samples on a host at load 20, with the walk
    # on or off, outside pauses (not looked into); the loose bound only
    # catches a collapse.
    jt.check(gc_active <= 0.03 * total, "[gc_active] in %d of the zlib thread's %d samples:\n%s"
             % (gc_active, total, jt.top_stacks(zlib)))
    jt.check(hot >= 10 and hot >= 0.9 * (hot + gc_active) and hot >= 0.2 * total,
             "%s in %d of the zlib thread's %d samples:\n%s"
             % (HOT, hot, total, jt.top_stacks(zlib)))
    jt.check(whole >= 0.9 * hot, "%s under its caller in %d of %d samples:\n%s"
             % (HOT, whole, hot, jt.top_stacks(zlib)))

# Native frames of the VM entered from Java code through a runtime stub or
# the interpreter: the samples AsyncGetCallTrace answers "not Java" for.
VM_CALLS = ("Runtime1::", "InterpreterRuntime::", "OptoRuntime::",
            "SharedRuntime::complete_monitor_locking_C")


def check_rtstubs(jdk, stacks):
    def in_vm(fr):
        return any(f.startswith(VM_CALLS) for f in fr)

    counts = {}
    for thread, caller, loop in (("alloc", "RtStubs.lambda$main$0", "RtStubs.allocLoop"),
                                 ("lock-1", "RtStubs.lambda$main$1", "RtStubs.lockLoop"),
                                 ("lock-2", "RtStubs.lambda$main$2", "RtStubs.lockLoop")):
        mine = {s: n for s, n in stacks.items()
                if (lambda m: bool(m) and m.group(1) == thread)(
                    jt.THREAD_FRAME_RE.match(jt.frames_of(s)[0]))}
        vm = {s: n for s, n in mine.items() if in_vm(jt.frames_of(s))}
        # Whole: the loop under the lambda its thread runs, above the VM.
        whole = jt.samples_matching(vm, lambda fr: jt.has_seq(
            [f for f in fr if f.startswith("RtStubs")], [caller, loop]))
        counts[thread] = (jt.total_samples(mine), jt.total_samples(vm), whole)
        jt.log("JDK %s thread %s: %d samples, %d in the VM from Java, %d of them under %s:\n%s"
               % (jdk, thread, jt.total_samples(mine), jt.total_samples(vm), whole, loop,
                  jt.top_stacks(vm, 8)))
    total, vm, whole = counts["alloc"]
    # The allocating thread spends nearly all its time zeroing arrays in
    # the VM (Runtime1::new_type_array, InterpreterRuntime::newarray). Without
    # the walk (JPROF_AGENT_VM_WALK=0) none of those samples carries a Java
    # frame ([jit] frames, no marker: 0 of 94 and 1 of 262 seen); with it
    # 94-98 % in 18 runs, 99.8-100 % in 3 with main's start gate. The rest
    # are native only with no marker too, as the lock
    # threads' few [jit]-only samples in Java code: the recording's first
    # samples, taken on the plain per-thread events before the agent's fd
    # replaced them (docs/benchmarks.md), not the walk's.
    jt.check(vm >= 20 and vm >= 0.3 * total, "alloc thread: %d of %d samples in the VM" % (vm, total))
    jt.check(whole >= 0.85 * vm, "alloc thread: Java frames in %d of its %d samples in the VM"
             % (whole, vm))
    # The lock threads are only logged: on JDK 25 most of their samples in
    # complete_monitor_locking_C spin in Java state (ObjectMonitor::try_spin,
    # [not_walkable_java]: AsyncGetCallTrace's -6, not a "not Java" answer).


def check_zlib_lines(jdk, stacks):
    # -Xint: the zlib thread's Java frames are all interpreted, and those
    # walked in GC pauses (javawalk.c) take their bci from the frame's bcp
    # slot. A wrong slot left half of them without a line (bci -1).
    loop = collections.Counter()
    for s, n in stacks.items():
        for f in jt.frames_of(s):
            if f.split(":")[0] == HOT:
                loop[f] += n
    jt.log("JDK %s -Xint: %s frames by line: %r" % (jdk, HOT, dict(loop)))
    lined = sum(n for f, n in loop.items() if f != HOT)
    jt.check(lined >= 10, "too few samples in %s with a line:\n%s" % (HOT, jt.top_stacks(stacks)))
    # (Before the fix: 101 of 213 on JDK 17. A frame whose line table had
    # not come yet may lack one: a little slack.)
    jt.check(loop[HOT] <= 0.02 * (loop[HOT] + lined), "%d of %d samples in %s have no line:\n%s"
             % (loop[HOT], loop[HOT] + lined, HOT, jt.top_stacks(stacks)))


LOST = ("[not_walkable_java]", "[unknown_java]")


def check_xint(jdk, stacks):
    # Deep recursion of small methods, all interpreted: much of the time is
    # in the interpreter's method entry, building the callee's frame, where
    # AsyncGetCallTrace refuses the walk (-6); the agent resumes from the
    # frame's layout (agent/javawalk.c, javawalk_resume). The retry from the
    # word at sp (the frame's Method*) lost them:
    # JPROF_TEST_AGENT_ENV="JPROF_AGENT_RECOVER=0" shows that failure.
    fib = jt.samples_matching(stacks, lambda fr: "HardWalks.fib" in fr)
    lost = jt.samples_matching(stacks, lambda fr: any(f in LOST for f in fr))
    whole = jt.samples_matching(stacks, lambda fr: jt.has_seq(
        [f for f in fr if f.startswith("HardWalks")], ["HardWalks.main", "HardWalks.recurse", "HardWalks.fib"]))
    jt.log("JDK %s -Xint: %d samples in HardWalks.fib (%d under main), %d lost:\n%s"
           % (jdk, fib, whole, lost, jt.top_stacks(
               {s: n for s, n in stacks.items() if any(f in LOST for f in jt.frames_of(s))}, 6)))
    jt.check(fib >= 50, "too few samples in HardWalks.fib (%d):\n%s" % (fib, jt.top_stacks(stacks)))
    jt.check(lost <= 0.02 * (fib + lost), "%d of %d samples lost their Java frames:\n%s"
             % (lost, fib + lost, jt.top_stacks(stacks)))
    jt.check(whole >= 0.95 * fib, "HardWalks.fib under main in %d of %d samples:\n%s"
             % (whole, fib, jt.top_stacks(stacks)))


def main(t):
    d = t.start_daemon(*jv.agent_args())
    env = dict(kv.split("=", 1) for kv in os.environ.get("JPROF_TEST_AGENT_ENV", "").split()
               if "=" in kv)
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: a thread in native code keeps its Java frames in GC pauses" % jdk):
            check_zlib(jdk, record(t, d, jdk, "GcNative", env, OPTS))
        with t.case("JDK %s: interpreted frames walked in GC pauses keep their lines" % jdk):
            check_zlib_lines(jdk, record(t, d, jdk, "GcNative", env, OPTS + ["-Xint"],
                                         ctl_args=["--java-lines"]))
        with t.case("JDK %s: threads in the VM called from runtime stubs keep their Java frames"
                    % jdk):
            check_rtstubs(jdk, record(t, d, jdk, "RtStubs", env))
        with t.case("JDK %s: interpreted calls keep their Java frames while the interpreter "
                    "builds the callee's frame" % jdk):
            check_xint(jdk, record(t, d, jdk, "HardWalks", env, ["-Xint"], ["recurse"]))

jt.run(main)
