"""Wall-clock recordings (`record -e wall`): CPU samples and off-CPU
intervals of the same threads together, each stack ending in the thread's
state. tests/progs/wall_split.c (as nobody) has a known truth: its main
thread sleeps 70 ms in nap_a() and 30 ms in nap_b() in turn, a second thread
spins in spin() all the time. The profile must split nap_a:nap_b 70:30
within 5 pp under [sleeping], give each thread about the recording's wall
time, and carry wall/nanoseconds in JSON and pprof; bad input gets errors
that name the event."""
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

SECS = 4


def task_cpu(pid):
    """{tid: user + system CPU seconds} of pid's threads."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def split(stacks):
    """(nap_a ns, nap_b ns, spinner ns, other ns, ns by leaf state)."""
    a = b = spin = other = 0
    states = {}
    for s, v in stacks.items():
        frames = jt.frames_of(s)
        leaf = frames[-1] if frames else ""
        states[leaf] = states.get(leaf, 0) + v
        if "nap_a" in frames:
            a += v
        elif "nap_b" in frames:
            b += v
        elif "spin" in frames:
            spin += v
        else:
            other += v
    return a, b, spin, other, states


def main(t):
    d = t.start_daemon()
    c = d.client()
    w = t.workload("wall_split", 120)

    with t.case("-e wall --pid (client as nobody): nap_a:nap_b = 70:30 within 5 pp, both "
                "[sleeping]; each thread has about the recording's wall time"):
        out = os.path.join(t.outdir(), "wall.collapsed")
        cpu0, t0 = task_cpu(w.pid), time.monotonic()
        t.ctl(["record", "-e", "wall", "--pid", str(w.pid), "-d", "%ds" % SECS, "-o", out,
               "-f", "collapsed", "--no-progress"], user="nobody", socket_path=d.socket,
              timeout=60, check_rc=0)
        cpu1, t1 = task_cpu(w.pid), time.monotonic()
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        jt.log("wall profile (ns):\n%s" % jt.top_stacks(stacks, 8))
        a, b, spin, other, states = split(stacks)
        jt.check(a + b > 0, "no nap_a/nap_b time in the wall profile:\n%s"
                 % jt.top_stacks(stacks))
        share = a / (a + b)
        jt.check(abs(share - 0.70) <= 0.05, "nap_a has %.1f%% of nap_a + nap_b (truth 70%%)"
                 % (100 * share))
        sleeping = sum(v for s, v in stacks.items()
                       if ("nap_a" in s or "nap_b" in s) and jt.frames_of(s)[-1] == "[sleeping]")
        jt.check(sleeping >= 0.95 * (a + b), "only %.1f%% of the naps end in [sleeping]; "
                 "leaves: %r" % (100 * sleeping / (a + b), states))
        # The main thread: off-CPU intervals cut at the start and the end
        # (up to 70 ms each) are not counted; the spinner: CPU samples of
        # 10 ms each plus the intervals it waited for a CPU.
        wall = SECS * 1e9
        jt.check(0.85 * wall <= a + b + other <= 1.05 * wall,
                 "main thread has %.3f s of wall time in %d s" % ((a + b + other) / 1e9, SECS))
        jt.check(0.85 * wall <= spin <= 1.1 * wall,
                 "spinner has %.3f s of wall time in %d s" % (spin / 1e9, SECS))
        # [running] is the spinner's CPU time: what the kernel counted for
        # its thread while the recording ran (a loaded machine leaves it
        # [runnable] for the rest).
        running = sum(v for s, v in stacks.items()
                      if "spin" in jt.frames_of(s) and jt.frames_of(s)[-1] == "[running]")
        spin_cpu = max(cpu1.get(tid, 0) - c for tid, c in cpu0.items())
        expect = spin_cpu * SECS / (t1 - t0)
        jt.log("spinner: [running] %.3f s, CPU time %.3f s in %.3f s (%.3f s expected in %d s)"
               % (running / 1e9, spin_cpu, t1 - t0, expect, SECS))
        jt.check(0.75 * expect * 1e9 <= running <= 1.25 * expect * 1e9 + 0.05e9,
                 "the spinner is [running] for %.3f s; it ran %.3f s of CPU (%.3f s expected)"
                 % (running / 1e9, spin_cpu, expect))
        jt.check(set(states) <= {"[running]", "[runnable]", "[sleeping]", "[uninterruptible]"},
                 "a stack does not end in a thread state: %r" % sorted(states))

    with t.case("the protocol: started.event wall with its interval and threshold; "
                "wall/nanoseconds is the main value"):
        rec = c.record(pid=w.pid, event="wall", duration_ms=1500, format="json")
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.started.get("event"), "wall", "started.event")
        jt.check_eq(rec.started.get("threshold_us"), 10, "started.threshold_us (default)")
        jt.check_eq(rec.started.get("interval_us"), 10000, "started.interval_us (default)")
        summ = rec.summary()
        jt.check_eq(summ.get("sample_types"),
                    [{"type": "samples", "unit": "count"},
                     {"type": "wall", "unit": "nanoseconds"}], "summary.sample_types")
        n, ns = summ["values"]
        # Two threads for 1.5 s.
        jt.check(2.4e9 <= ns <= 3.2e9, "%.3f s of wall time for two threads over 1.5 s"
                 % (ns / 1e9))

    if shutil.which("go"):
        with t.case("pprof: wall/nanoseconds is the default sample type, nap_a on top"):
            path = os.path.join(t.outdir(), "wall.pb.gz")
            t.ctl(["record", "-e", "wall", "--pid", str(w.pid), "-d", "1500ms", "-o", path,
                   "--no-progress"], user="nobody", socket_path=d.socket, check_rc=0)
            pprof = jt.GoPprof(t)
            raw = pprof("-raw", path)
            jt.check(re.search(r"samples/count\s+wall/nanoseconds\[dflt\]", raw),
                     "pprof sample types are not samples/count wall/nanoseconds[dflt]:\n%s"
                     % raw[:800])
            top = pprof("-top", "-cum", path)
            jt.check("nap_a" in top and "[sleeping]" in top,
                     "nap_a or [sleeping] not in pprof -top:\n%s" % top)

    with t.case("whole host (-e wall --all) has the spinner [running]"):
        rec = c.record(all=True, event="wall", duration_ms=1000, format="collapsed")
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        stacks = jt.parse_collapsed(rec.data())
        spin = sum(v for s, v in stacks.items()
                   if "spin" in jt.frames_of(s) and jt.frames_of(s)[-1] in ("[running]",
                                                                          "[runnable]"))
        jt.check(spin >= 0.5e9, "the spinner has %.3f s of wall time in a 1 s host recording"
                 % (spin / 1e9))

    with t.case("bad input names the event"):
        rec = c.record(pid=w.pid, event="wall", duration_ms=500, format="speedscope")
        jt.check_eq(rec.error_code, "bad_request", "wall + speedscope")
        jt.check("wall" in rec.error.get("message", ""), "message: %r" % rec.error)
        rec = c.record(pid=w.pid, event="cpu", duration_ms=500, threshold_us=50)
        jt.check_eq(rec.error_code, "bad_request", "cpu + threshold_us")
        jt.check("wall" in rec.error.get("message", ""), "message: %r" % rec.error)
        r = t.ctl(["record", "-e", "offcpu", "-i", "1ms", "--pid", str(w.pid)],
                  socket_path=d.socket)
        jt.check(r.returncode == 2 and "wall" in r.stderr,
                 "offcpu + --interval: exit %d, stderr %r" % (r.returncode, r.stderr))
        rid = c.start_record(pid=w.pid, event="wall", duration_ms=2000)
        rec2 = c.record(pid=w.pid, event="offcpu", duration_ms=500)
        jt.check_eq(rec2.error_code, "limit_exceeded",
                    "an off-CPU recording of a pid a wall recording holds")
        first = c.collect_record(rid, 30)
        jt.check(first.profile is not None, "the wall recording: %s" % first.describe())
    w.kill()


jt.run(main)
