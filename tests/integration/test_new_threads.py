"""Threads created after a recording started are sampled; with thread
frames, each thread gets its own "[name tid=N]" root frame with its real
tid."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

# Threads start 2 s after the process, i.e. about 1.5 s into the recording.
SPAWN_AFTER_S = 2
NTHREADS = 3
TOTAL_S = 8


def tasks(pid):
    try:
        return {int(x) for x in os.listdir("/proc/%d/task" % pid)}
    except OSError:
        return set()


def main(t):
    d = t.start_daemon()

    with t.case("worker_spin of threads started mid-recording is sampled"):
        w = t.workload("thread_spawner", SPAWN_AFTER_S, NTHREADS, TOTAL_S, settle=0.5)
        c = d.client(user="nobody")
        meter = jt.CpuMeter(w.pid)
        rec = c.record(pid=w.pid, duration_ms=5000, interval_us=10000, timeout=30)
        cpu = meter.stop()
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        stacks = rec.stacks()
        total = jt.total_samples(stacks)
        workers = jt.samples_matching(stacks, lambda f: "worker_spin" in f)
        # Every thread's CPU, the late ones' included, is in the profile;
        # 3 workers + main on 2 CPUs for ~3.5 s: ~500 of ~850 samples.
        jt.check_recording_cpu(rec.summary(), total, cpu, 10000000, "all threads")
        jt.check(workers >= 0.3 * total,
                 "worker_spin has %d of %d samples, want >= 30%%:\n%s"
                 % (workers, total, jt.top_stacks(stacks)))
        jt.check(jt.samples_matching(stacks, lambda f: "main_spin" in f) > 0,
                 "main thread (main_spin) missing:\n%s" % jt.top_stacks(stacks))
        # The workers run to the end of the recording: all four threads had
        # an event when it ended (the final summary used to say 0).
        jt.check_eq(rec.summary().get("threads"), NTHREADS + 1, "summary.threads at the end")
        c.close()
        w.kill()

    with t.case("jprofctl --threads: one frame per thread with the real tids"):
        w = t.workload("thread_spawner", SPAWN_AFTER_S, NTHREADS, TOTAL_S, settle=0.5)
        out = os.path.join(t.outdir(), "threads.collapsed")
        ctl, ctl_out, ctl_err = t.ctl_popen(
            ["record", "--pid", str(w.pid), "-d", "5s", "-o", out, "--format", "collapsed",
             "--threads", "--no-progress"], user="nobody", socket_path=d.socket)
        real = set()
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            real |= tasks(w.pid)
            time.sleep(0.25)
        code = ctl.wait(30)
        with open(ctl_err) as f:
            err = f.read()
        jt.check_eq(code, 0, "jprofctl exit code (stderr: %r)" % err)
        jt.check(len(real) == NTHREADS + 1, "workload had tids %s, want %d threads"
                 % (sorted(real), NTHREADS + 1))
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        tids = jt.thread_tids(stacks)
        jt.check(len(tids) >= NTHREADS + 1,
                 "want >= %d distinct '[name tid=N]' frames, got %s:\n%s"
                 % (NTHREADS + 1, sorted(tids), jt.top_stacks(stacks)))
        jt.check(set(tids) <= real, "profile tids %s are not the workload's tids %s"
                 % (sorted(tids), sorted(real)))
        jt.check(w.pid in tids, "main thread (tid %d) missing: %s" % (w.pid, sorted(tids)))
        for tid in real - {w.pid}:
            n = jt.samples_matching(
                stacks, lambda f, tid=tid: jt.stack_tid(f) == tid and "worker_spin" in f)
            jt.check(n > 0, "thread %d has no worker_spin samples under its own frame:\n%s"
                     % (tid, jt.top_stacks(stacks, 25)))
        w.kill()


jt.run(main)
