"""A process that exits during a recording: the profile comes back early
with status process_exited and the samples taken so far; jprofctl exits 6
and still writes the file."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]


def main(t):
    d = t.start_daemon()

    with t.case("socket: profile status process_exited"):
        # It lives 3 s: on a busy machine the start gate took 0.7 s and the
        # workload had a quarter of a CPU after it, 280 ms of CPU when it
        # lived 2 s (too few samples to compare).
        w = t.workload("spin_chain", 3, settle=0.1)
        c = d.client(user="nobody")
        t0 = time.monotonic()
        rid = c.start_record(pid=w.pid, duration_ms=9000, interval_us=10000)
        # Sampling starts at the start gate's opening (the process's unwind
        # tables built): its CPU counts from there.
        first = []
        while not any(m.get("type") == "sampling" or m.get("ok") is False for m in first):
            m = c.recv_for(rid, max(0.1, t0 + 5 - time.monotonic()))
            jt.check(m is not None, "no sampling message within 5 s: %r" % first)
            first.append(m)
        meter = jt.CpuMeter(w.pid)
        rec = c.collect_record(rid, 20)
        rec.messages[:0] = first
        cpu = meter.stop()
        took = time.monotonic() - t0
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "process_exited", "profile status")
        jt.check(took < 8.5, "profile came %.1f s after the start of a 9 s recording of a "
                 "process that lived 3 s; want it soon after the exit" % took)
        stacks = rec.stacks()
        chain = jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN))
        jt.check(jt.total_samples(stacks) > 0 and rec.summary().get("samples", 0) > 0,
                 "no samples before the exit: %s" % rec.describe())
        # Up to the exit: every sample of the CPU it had (polled every 10 ms).
        jt.check_samples_match_cpu(jt.total_samples(stacks), cpu, 10000000,
                                   "samples before the exit", min_expected=30)
        jt.check(chain >= 0.8 * jt.total_samples(stacks),
                 "want >= 80%% of the samples with main;a;b;spin, got %d:\n%s"
                 % (chain, jt.top_stacks(stacks)))
        jt.check_eq(w.wait(5), 0, "spin_chain exit code")
        c.close()

    with t.case("jprofctl: exit 6 and the partial profile is written"):
        # 3 s, as above: under load 15 the gate took 2 s of its 2 s life.
        w = t.workload("spin_chain", 3, settle=0.1)
        out = os.path.join(t.outdir(), "exited.collapsed")
        r = t.ctl(["record", "--pid", str(w.pid), "-d", "9s", "-o", out, "--format", "collapsed",
                   "--no-progress"], user="nobody", socket_path=d.socket, timeout=30)
        jt.check_eq(r.returncode, 6, "exit code (stderr: %r)" % r.stderr)
        jt.check(os.path.isfile(out), "no output file after the process exited")
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        jt.check(jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN)) > 0,
                 "partial profile lacks main;a;b;spin:\n%s" % jt.top_stacks(stacks))

    with t.case("no session left behind"):
        c = d.client()
        jt.wait_until(lambda: c.status()["sessions"]["active"] == 0, 5, 0.2,
                      "sessions.active == 0")
        c.close()


jt.run(main)
