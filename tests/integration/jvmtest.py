"""Helpers for the JVM integration tests: JDKs, Java workloads (compiled by
the build from tests/java into JPROF_JAVA_DIR) run as nobody, their output."""

import glob
import json
import os
import shutil
import subprocess

import jproftest as jt

JDKS = {
    "17": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
    "25": "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java",
}


def jdks():
    """The JDKs present (JDK 17 is required)."""
    jt.check(os.access(JDKS["17"], os.X_OK), "JDK 17 not found at %s" % JDKS["17"])
    return [(v, p) for v, p in JDKS.items() if os.access(p, os.X_OK)]


def agent_args():
    agent = os.environ.get("JPROF_AGENT")
    jt.check(agent and os.path.isfile(agent), "JPROF_AGENT (the built agent) not found: %r" % agent)
    return ["--agent", agent]


class Jvm:
    def __init__(self, t, jdk, cls, *args, opts=(), env=None, settle=1.5):
        classes = getattr(t, "_java_classes", None)
        if classes is None:
            src = os.environ.get("JPROF_JAVA_DIR")
            jt.check(src and glob.glob(os.path.join(src, "*.class")),
                     "no compiled workloads in JPROF_JAVA_DIR=%r" % src)
            classes = t.mkdtemp("java-")
            for f in glob.glob(os.path.join(src, "*.class")):
                shutil.copy2(f, classes)
                os.chmod(os.path.join(classes, os.path.basename(f)), 0o644)
            t._java_classes = classes
        self.out_path = os.path.join(t.mkdtemp("jvm-out-"), "%s.out" % cls)
        self.out = open(self.out_path, "wb")
        argv = [JDKS[jdk]] + list(opts) + ["-cp", classes, cls] + [str(a) for a in args]
        e = dict(os.environ)
        e.pop("JAVA_TOOL_OPTIONS", None)
        if env:
            e.update(env)
        self.proc = jt.Proc(jt.as_user_argv("nobody", argv), cls, stdout=self.out,
                            stderr=subprocess.STDOUT, env=e)
        self.pid = self.proc.pid
        jt._cleanups.append(self._cleanup)
        jt.log("started JDK %s %s as nobody: pid %d" % (jdk, " ".join([cls] + list(map(str, args))),
                                                      self.pid))
        # Started once libjvm is mapped (setpriv has exec'd java); then give
        # the workload `settle` seconds to reach its main loop.
        jt.wait_until(lambda: not self.proc.running() or self._has_libjvm(), 20,
                      what="%s to start" % cls)
        jt.time.sleep(settle)
        jt.check(self.proc.running(), "%s exited early (%r): %s"
                 % (cls, self.proc.returncode, self.output()[-2000:]))

    def _cleanup(self):
        """A JVM killed with SIGKILL leaves its attach socket in /tmp; a later
        process with the same pid would inherit it."""
        self.proc.kill()
        for name in (".java_pid%d" % self.pid, ".attach_pid%d" % self.pid):
            try:
                os.unlink(os.path.join("/tmp", name))
            except OSError:
                pass

    def _has_libjvm(self):
        try:
            with open("/proc/%d/maps" % self.pid) as f:
                return "libjvm.so" in f.read()
        except OSError:
            return False

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop_alive(self):
        """Ends a workload whose result the test does not need, sooner than
        waiting for its end: it must still be running (no crash, no early
        exit while it was profiled) and must not have printed a fatal error."""
        text = self.output()
        jt.check(self.proc.running(), "the workload exited while profiled (%r): %s"
                 % (self.proc.returncode, text[-2000:]))
        jt.check("A fatal error has been detected" not in text,
                 "the JVM reported a fatal error: %s" % text[-2000:])
        self._cleanup()

    def result(self, timeout):
        """Waits for the workload to finish; returns its final JSON line."""
        code = self.proc.wait(timeout)
        text = self.output()
        jt.check_eq(code, 0, "workload exit code (output: %s)" % text[-2000:])
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        jt.check(lines, "workload printed no JSON result: %s" % text[-2000:])
        return json.loads(lines[-1])


def java_frames(frames):
    return [f for f in frames if not f.startswith("[") and "." in f and not jt.is_kernel_frame(f)
            and "::" not in f and "(" not in f]
