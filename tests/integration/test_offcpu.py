"""Off-CPU recordings (`record -e offcpu`): a process whose one thread blocks
in read() on a pipe fed every 100 ms (tests/progs/waiter.c, run as nobody)
shows waiter() with nearly all of its off-CPU time, kernel frames below it,
and a total near the recording's wall time; the threshold skips intervals;
pprof carries offcpu/nanoseconds; a whole-host recording works; bad input
gets errors that name the event. `-e cpu,offcpu` of tests/progs/wall_split.c
(a spinning thread, a thread napping 70:30 in nap_a()/nap_b()) gives one
profile whose cpu values are the spinner's and whose offcpu values split
nap_a:nap_b 70:30."""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

SECS = 3


def offcpu_profile(t, d, pid, *extra, user="nobody", name="off.collapsed"):
    out = os.path.join(t.outdir(), name)
    r = t.ctl(["record", "-e", "offcpu", "--pid", str(pid), "-d", "%ds" % SECS, "-o", out,
               "-f", "collapsed", "--no-progress"] + list(extra),
              user=user, socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        return jt.parse_collapsed(f.read()), r


def waiter_ns(stacks):
    """Off-CPU nanoseconds under waiter() with the read path in the kernel
    below it, and the stacks that have waiter at all."""
    ns = 0
    for s, v in stacks.items():
        frames = jt.frames_of(s)
        if "waiter" not in frames:
            continue
        below = frames[frames.index("waiter") + 1:]
        kernel = [f for f in below if jt.is_kernel_frame(f)]
        if any("schedule" in f for f in kernel) and any("read" in f for f in kernel):
            ns += v
    return ns


def main(t):
    d = t.start_daemon()
    c = d.client()

    with t.case("-e offcpu --pid: waiter() holds >= 90% of the time off the CPU, kernel "
                "frames below it, total near the wall time"):
        w = t.workload("waiter", 60)
        stacks, r = offcpu_profile(t, d, w.pid)
        total = jt.total_samples(stacks)
        jt.log("off-CPU profile (ns):\n%s" % jt.top_stacks(stacks, 5))
        jt.check(total > 0, "empty off-CPU profile; stderr: %s" % r.stderr)
        share = waiter_ns(stacks) / total
        jt.check(share >= 0.9, "waiter with schedule/read kernel frames below it has %.1f%% of "
                 "%.3f s off-CPU; top stacks:\n%s" % (100 * share, total / 1e9,
                                                      jt.top_stacks(stacks)))
        # One thread, blocked all the time but for microseconds per byte;
        # the intervals open at the start and at the end (up to 100 ms
        # each) are not counted.
        jt.check(0.85 * SECS * 1e9 <= total <= 1.02 * SECS * 1e9,
                 "total off-CPU %.3f s for one blocked thread over %d s" % (total / 1e9, SECS))
        for s in stacks:
            frames = jt.frames_of(s)
            kidx = [i for i, f in enumerate(frames) if jt.is_kernel_frame(f)]
            uidx = [i for i, f in enumerate(frames) if not jt.is_kernel_frame(f)]
            jt.check(not (kidx and uidx and max(uidx) > min(kidx)),
                     "user frame below a kernel frame: %s" % s)

    with t.case("the profile message: intervals as samples, offcpu/nanoseconds as the main value"):
        rec = c.record(pid=w.pid, event="offcpu", duration_ms=1500, format="json")
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.started.get("event"), "offcpu", "started.event")
        jt.check_eq(rec.started.get("threshold_us"), 10, "started.threshold_us (default)")
        summ = rec.summary()
        jt.check_eq(summ.get("sample_types"),
                    [{"type": "samples", "unit": "count"},
                     {"type": "offcpu", "unit": "nanoseconds"}], "summary.sample_types")
        n, ns = summ["values"]
        # 100 ms per interval: 1.5 s has 13-15 complete ones.
        jt.check(10 <= n <= 16, "%d off-CPU intervals in 1.5 s of 100 ms reads" % n)
        jt.check(0.08e9 * n <= ns <= 0.12e9 * n, "%d intervals took %.3f s" % (n, ns / 1e9))

    with t.case("--threshold: intervals shorter than it are skipped and counted"):
        before = c.status()["sampler"]["offcpu"]["below_threshold"]
        stacks, _ = offcpu_profile(t, d, w.pid, "--threshold", "200ms", name="thr.collapsed")
        jt.check_eq(jt.total_samples(stacks), 0, "off-CPU time with every 100 ms interval "
                    "below a 200 ms threshold")
        after = c.status()["sampler"]["offcpu"]["below_threshold"]
        jt.check(after - before >= 20, "below_threshold grew by %d over %d s of 100 ms "
                 "intervals" % (after - before, SECS))
        st = t.ctl(["status"], socket_path=d.socket, check_rc=0).stdout
        jt.check(re.search(r"off-CPU: \d+ recordings, \d+ intervals, \d+ below", st),
                 "jprofctl status has no off-CPU line:\n%s" % st)

    if shutil.which("go"):
        with t.case("pprof: offcpu/nanoseconds is the default sample type"):
            path = os.path.join(t.outdir(), "off.pb.gz")
            t.ctl(["record", "-e", "offcpu", "--pid", str(w.pid), "-d", "1500ms", "-o", path,
                   "--no-progress"], user="nobody", socket_path=d.socket, check_rc=0)
            pprof = jt.GoPprof(t)
            raw = pprof("-raw", path)
            jt.check(re.search(r"samples/count\s+offcpu/nanoseconds\[dflt\]", raw),
                     "pprof sample types are not samples/count offcpu/nanoseconds[dflt]:\n%s"
                     % raw[:800])
            top = pprof("-top", path)
            jt.check("waiter" in top, "waiter not in pprof -top:\n%s" % top)

    with t.case("text and html show the time"):
        rec = c.record(pid=w.pid, event="offcpu", duration_ms=1000, format="text")
        txt = rec.data()
        jt.check(re.search(r"s of offcpu", txt) and "waiter" in txt,
                 "text report does not show off-CPU seconds and waiter:\n%s" % txt[:1500])

    with t.case("a second off-CPU recording of the same process is refused clearly"):
        rid = c.start_record(pid=w.pid, event="offcpu", duration_ms=2000)
        rec2 = c.record(pid=w.pid, event="offcpu", duration_ms=500)
        jt.check_eq(rec2.error_code, "limit_exceeded", "second off-CPU recording of a pid")
        jt.check("off-CPU" in rec2.error.get("message", ""), "message: %r" % rec2.error)
        first = c.collect_record(rid, 20)
        jt.check(first.profile is not None, "first recording: %s" % first.describe())
    w.kill()

    with t.case("intervals longer than a drain keep their stacks (held across drains)"):
        w = t.workload("waiter", 60, 1.5)
        # 5 s: the read open when sampling starts is not counted, and two
        # whole ones fit after it (in 4 s, under ASan and load, one 1.3 s
        # interval was all that was counted once).
        rec = c.record(pid=w.pid, event="offcpu", duration_ms=5000)
        stacks = rec.stacks()
        total = jt.total_samples(stacks)
        jt.check(total >= 1.4e9, "%.3f s off-CPU in 5 s of 1.5 s reads" % (total / 1e9))
        jt.check(waiter_ns(stacks) == total, "stacks of 1.5 s intervals without waiter and "
                 "the kernel read path:\n%s" % jt.top_stacks(stacks))
        w.kill()
        lost = c.status()["sampler"]["lost"]
        jt.check_eq(lost["stack_missing"], 0, "stacks missing at delivery")

    with t.case("--all -e offcpu (root): every process, the waiter among them"):
        w = t.workload("waiter", 60)
        out = os.path.join(t.outdir(), "all.collapsed")
        t.ctl(["record", "-e", "offcpu", "--all", "-d", "%ds" % SECS, "-o", out, "-f",
               "collapsed", "--no-progress"], socket_path=d.socket, timeout=60, check_rc=0)
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        mine = {s: v for s, v in stacks.items() if jt.frames_of(s)[0] == "waiter"}
        got = waiter_ns(mine)
        jt.check(got >= 0.85 * SECS * 1e9, "waiter's read under --all: %.3f s of %d s; top:\n%s"
                 % (got / 1e9, SECS, jt.top_stacks(mine)))
        procs = {jt.frames_of(s)[0] for s in stacks}
        jt.check(len(procs) >= 3, "only %r off the CPU in a whole-host recording" % procs)
        w.kill()

    with t.case("bad input: unknown event, bad threshold, threshold with cpu, time-ordered format"):
        r = t.ctl(["record", "-e", "bogus", "--pid", "1", "-d", "1s"], socket_path=d.socket)
        jt.check_eq(r.returncode, 2, "jprofctl -e bogus exit")
        jt.check("unknown event \"bogus\"" in r.stderr and "cpu, offcpu" in r.stderr,
                 "-e bogus stderr: %r" % r.stderr)
        for bad in ("0us", "20s", "10"):
            r = t.ctl(["record", "-e", "offcpu", "--threshold", bad, "--pid", "1"],
                      socket_path=d.socket)
            jt.check_eq(r.returncode, 2, "--threshold %s exit" % bad)
            jt.check("invalid threshold" in r.stderr, "--threshold %s: %r" % (bad, r.stderr))
        r = t.ctl(["record", "--threshold", "1ms", "--pid", "1"], socket_path=d.socket)
        jt.check(r.returncode == 2 and "offcpu and -e wall only" in r.stderr,
                 "--threshold with cpu: %r"
                 % r.stderr)
        r = t.ctl(["record", "-e", "offcpu", "-i", "1ms", "--pid", "1"], socket_path=d.socket)
        jt.check(r.returncode == 2 and "cpu and -e wall only" in r.stderr,
                 "-i with offcpu: %r" % r.stderr)

        rec = c.record(pid=os.getpid(), event="bogus", duration_ms=100)
        jt.check_eq(rec.error_code, "bad_request", "event bogus")
        jt.check("unknown event \"bogus\"" in rec.error["message"]
                 and "cpu, offcpu" in rec.error["message"], "message: %r" % rec.error)
        for thr in (0, 10000001, "10"):
            rec = c.record(pid=os.getpid(), event="offcpu", threshold_us=thr, duration_ms=100)
            jt.check_eq(rec.error_code, "bad_request", "threshold_us %r" % (thr,))
            jt.check("threshold_us" in rec.error["message"], "message: %r" % rec.error)
        rec = c.record(pid=os.getpid(), threshold_us=100, duration_ms=100)
        jt.check_eq(rec.error_code, "bad_request", "threshold_us with the cpu event")
        jt.check("offcpu, wall and lock events only" in rec.error["message"], "message: %r" % rec.error)
        rec = c.record(pid=os.getpid(), event="offcpu", format="speedscope", duration_ms=100)
        jt.check_eq(rec.error_code, "bad_request", "offcpu in a time-ordered format")
        jt.check("offcpu" in rec.error["message"], "message: %r" % rec.error)

    with t.case("-e cpu,offcpu --pid (raw JSON): cpu in spin(), off-CPU nap_a:nap_b = 70:30, "
                "each stack one event's"):
        w = t.workload("wall_split", 60)
        out = os.path.join(t.outdir(), "both.raw.json")
        meter = jt.CpuMeter(w.pid)
        r = t.ctl(["record", "-e", "cpu,offcpu", "--threshold", "100us", "--pid", str(w.pid),
                   "-d", "%ds" % SECS, "-o", out, "--no-progress", "--json-events"],
                  user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
        cpu_ns = meter.stop()
        events = [json.loads(ln) for ln in r.stderr.splitlines() if ln.startswith("{")]
        summary = [e for e in events if e.get("type") == "profile"][-1]["summary"]
        with open(out) as f:
            prof = json.load(f)
        jt.check_eq(prof["meta"]["event"], "cpu,offcpu", "meta.event")
        jt.check_eq([(st["type"], st["unit"]) for st in prof["sample_types"]],
                    [("samples", "count"), ("cpu", "nanoseconds"), ("offcpu", "nanoseconds")],
                    "sample types")
        names = [f["name"] for f in prof["frames"]]
        cpu = {"spin": 0, "all": 0}
        off = {"nap_a": 0, "nap_b": 0, "spin": 0, "all": 0}
        for st in prof["stacks"]:
            fr = [names[i] for i in st["frames"]]
            v = st["values"]
            jt.check((v[1] > 0) != (v[2] > 0), "a stack with both events' values (or none): %r %r"
                     % (fr, v))
            for key, acc, val in (("spin", cpu, v[1]), ("nap_a", off, v[2]),
                                  ("nap_b", off, v[2]), ("spin", off, v[2])):
                if key in fr:
                    acc[key] += val
            cpu["all"] += v[1]
            off["all"] += v[2]
        share = off["nap_a"] / float(off["nap_a"] + off["nap_b"] or 1)
        jt.log("cpu,offcpu: cpu %.2f s (spin %.2f s); off-CPU %.2f s (nap_a share %.3f, "
               "spin %.3f s)" % (cpu["all"] / 1e9, cpu["spin"] / 1e9, off["all"] / 1e9, share,
                                 off["spin"] / 1e9))
        # The cpu values are the CPU time the process had while it was
        # sampled (a loaded machine may give the spinner little, and open
        # the start gate late), nearly all of it in spin().
        jt.check_recording_cpu(summary, cpu["all"] // 10000000, cpu_ns, 10000000,
                               "cpu of -e cpu,offcpu", min_expected=30)
        jt.check(cpu["spin"] >= 0.9 * cpu["all"],
                 "cpu: spin() %.2f s of %.2f s" % (cpu["spin"] / 1e9, cpu["all"] / 1e9))
        jt.check(abs(share - 0.70) <= 0.05, "offcpu: nap_a has %.1f%% of nap_a + nap_b (truth 70%%)"
                 % (100 * share))
        # The napping thread is off the CPU nearly all the recording.
        jt.check(off["nap_a"] + off["nap_b"] >= 0.8 * SECS * 1e9,
                 "offcpu: nap_a + nap_b %.2f s in %d s" % ((off["nap_a"] + off["nap_b"]) / 1e9, SECS))
        w.kill()

    with t.case("no off-CPU program stays attached after the recordings"):
        off = c.status()["sampler"]["offcpu"]
        jt.check_eq(off["recordings"], 0, "off-CPU recordings after all ended")


jt.run(main)
