"""Allocation and lock profiles of real JVMs (JDK 17 and 25) run as nobody
and recorded by nobody (`record -e alloc`, `-e lock`):

- alloc: tests/java/AllocSplit.java allocates byte[3072] in big() and
  byte[1024] in small(), as many of each: big() holds 75% of the bytes
  (within 5 points; summing sampled sizes unweighted would give 90%), the
  leaf frame is `byte[]`, the estimated bytes are within 5% of what the
  workload allocated, and `go tool pprof` reads alloc_objects/count and
  alloc_space/bytes;
- lock: tests/java/LockWait.java measures in Java how long waiter() waited
  for a monitor that holder() keeps 20 ms at a time: waiter() and the lock's
  class appear, with a total wait within 20% of the measured one; the same
  for rwaiter() on a ReentrantLock at the same time (Unsafe.park timed by
  the agent), every park of the profile being that one;
- bad input: a native process, sizes and times out of range, options of
  another event, time-ordered formats, the whole host, --java off; and a
  JVM whose capability is taken by another agent (JVMTI's reason named);
- a JVM that exits during the recording: `process_exited`, with its samples;
- several events in one recording (`-e cpu,alloc,lock` of tests/java/AllocLock.java,
  AllocSplit and LockWait in one JVM): one pprof with every sample type, each
  with its truth (cpu in AllocSplit.main, the 3:1 alloc split, waiter() on
  LockWait$Box and rwaiter() on its ReentrantLock), each sample with its own event's values only, the first
  event's value as pprof's default; the html page switches between them;
  and bad lists (duplicate, wall with cpu, unknown, alloc of a native
  process, an option of an event not in the list)."""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402
import jvmtest as jv  # noqa: E402

SECS = 4
# The lock class of a ReentrantLock wait: its synchronizer.
PARK_LEAF = "java.util.concurrent.locks.ReentrantLock$NonfairSync"


def record(t, d, pid, event, *extra, fmt="collapsed", name="p", secs=SECS):
    out = os.path.join(t.outdir(), name + (".pb.gz" if fmt == "pprof" else ".txt"))
    r = t.ctl(["record", "-e", event, "--pid", str(pid), "-d", "%ds" % secs, "-o", out,
               "-f", fmt, "--no-progress"] + list(extra),
              user="nobody", socket_path=d.socket, timeout=secs + 60, check_rc=0)
    return out, r


def value_under(stacks, frame, leaf=None):
    return sum(v for s, v in stacks.items()
               if frame in jt.frames_of(s) and (leaf is None or jt.frames_of(s)[-1] == leaf))


def alloc_cases(t, d, jdk):
    with t.case("JDK %s: -e alloc: big() has 75%% of the bytes (3:1), leaf byte[]" % jdk):
        jvm = jv.Jvm(t, jdk, "AllocSplit", SECS + 12, settle=1.0)
        path, _ = record(t, d, jvm.pid, "alloc")
        with open(path) as f:
            stacks = jt.parse_collapsed(f.read())
        big = value_under(stacks, "AllocSplit.big", "byte[]")
        small = value_under(stacks, "AllocSplit.small", "byte[]")
        jt.log("JDK %s alloc profile (bytes):\n%s" % (jdk, jt.top_stacks(stacks, 6)))
        jt.check(big and small, "no byte[] leaf below big()/small():\n%s" % jt.top_stacks(stacks))
        share = big / float(big + small)
        jt.log("JDK %s: big() share of bytes %.3f (want 0.75), %.0f MB estimated"
               % (jdk, share, (big + small) / 1e6))
        jt.check(abs(share - 0.75) <= 0.05, "big() share %.3f, want 0.75 +- 0.05" % share)
        jvm.proc.kill()

    with t.case("JDK %s: -e alloc: the estimated bytes of big() and small() within 5%% of "
                "what they allocated" % jdk):
        stacks, truth = triggered(t, d, jdk, "AllocSplit", "alloc", "alloc_bytes")
        # Arrays have a 16-byte header the workload does not count.
        want = truth["big_bytes"] * 3088 / 3072.0 + truth["small_bytes"] * 1040 / 1024.0
        got = value_under(stacks, "AllocSplit.big", "byte[]") + \
            value_under(stacks, "AllocSplit.small", "byte[]")
        jt.log("JDK %s: %.0f MB estimated, %.0f MB allocated (%d rounds)"
               % (jdk, got / 1e6, want / 1e6, truth["rounds"]))
        jt.check(abs(got - want) <= 0.05 * want, "estimated %.0f MB vs allocated %.0f MB"
                 % (got / 1e6, want / 1e6))

    if jdk != "17":
        return
    with t.case("JDK 17: -e alloc --alloc 256k as pprof: alloc_objects/count and "
                "alloc_space/bytes, byte[] on top"):
        if not shutil.which("go"):
            raise jt.Skip("go tool pprof not installed (apt-get install golang-go)")
        jvm = jv.Jvm(t, jdk, "AllocSplit", SECS + 12, settle=1.0)
        path, r = record(t, d, jvm.pid, "alloc", "--alloc", "256k", fmt="pprof", name="alloc")
        go_pprof = jt.GoPprof(t)
        raw = go_pprof("-raw", path)
        jt.check(re.search(r"alloc_objects/count\s+alloc_space/bytes", raw),
                 "sample types not alloc_objects/count, alloc_space/bytes:\n%s" % raw[:600])
        top = go_pprof("-top", "-sample_index=alloc_space", path)
        rows = [ln.split() for ln in top.splitlines() if re.match(r"\s+\d", ln)]
        jt.check(rows and rows[0][-1] == "byte[]", "top of alloc_space is not byte[]:\n%s" % top)

        # The same JVM again: the agent gave the capability back and
        # restored the interval, so lock, cpu and alloc all work in turn.
        path, _ = record(t, d, jvm.pid, "lock", secs=1, name="lock")
        path, _ = record(t, d, jvm.pid, "cpu", secs=2, name="cpu")
        with open(path) as f:
            cpu = jt.parse_collapsed(f.read())
        jt.check(value_under(cpu, "AllocSplit.main") > 0, "no CPU samples in AllocSplit.main "
                 "after an alloc recording:\n%s" % jt.top_stacks(cpu))
        c = d.client(user="nobody")
        rec = c.record(pid=jvm.pid, event="alloc", duration_ms=2000, timeout=40)
        stacks = rec.stacks()
        jt.check(value_under(stacks, "AllocSplit.big", "byte[]") > 0,
                 "a second alloc recording of the JVM is empty: %s" % rec.describe())
        jt.check(rec.summary().get("java", {}).get("event_records", 0) > 100,
                 "summary.java.event_records: %r" % rec.summary().get("java"))
        jvm.proc.kill()


def parse_pprof_raw(raw):
    """(column names, default column, [(values, frames leaf first)]) from
    `go tool pprof -raw`."""
    lines = raw.splitlines()
    head = [i for i, ln in enumerate(lines) if ln.strip().startswith("samples/count")]
    jt.check(head, "no sample header in go tool pprof -raw output:\n%s" % raw[:2000])
    cols = lines[head[0]].split()
    dflt = [c.replace("[dflt]", "") for c in cols if c.endswith("[dflt]")]
    cols = [c.replace("[dflt]", "") for c in cols]
    samples, locs, in_locs = [], {}, False
    for ln in lines[head[0] + 1:]:
        if ln.startswith("Locations"):
            in_locs = True
        elif ln.startswith("Mappings"):
            break
        elif not in_locs:
            m = re.match(r"\s+(\d+(?:\s+\d+)*):((?:\s+\d+)*)\s*$", ln)
            if m:
                samples.append(([int(v) for v in m.group(1).split()],
                                [int(x) for x in m.group(2).split()]))
        else:
            m = re.match(r"\s*(\d+): 0x[0-9a-f]+ (?:M=\d+ )?(.*?) \S*:\d+ s=\d+", ln)
            if m:
                locs[int(m.group(1))] = m.group(2)
    return cols, dflt, [(v, [locs.get(i, "?") for i in ids]) for v, ids in samples]


def multi_event_cases(t, d):
    # A Skip would end the whole file: what this machine lacks is only said.
    missing = ([] if shutil.which("go") else ["go tool pprof (apt-get install golang-go)"]) + \
        jt.browser_missing()
    if missing:
        jt.log("several events: not checked, this machine lacks %s" % ", ".join(missing))
        return
    # Contention and allocation go on past every case below however slowly
    # a busy machine runs them (the JVM is stopped at the end): with SECS +
    # 20 the last case's 1 s lock recording could start after the locks were
    # let go (0.00 s waited, seen under load).
    jvm = jv.Jvm(t, "17", "AllocLock", 600, settle=1.0)
    with t.case("JDK 17: -e cpu,alloc,lock as pprof: every sample type, each with its truth"):
        meter = jt.CpuMeter(jvm.pid)
        path, r = record(t, d, jvm.pid, "cpu,alloc,lock", "--json-events", fmt="pprof",
                         name="multi")
        jvm_cpu_ns = meter.stop()
        events = [json.loads(ln) for ln in r.stderr.splitlines() if ln.startswith("{")]
        summary = ([e["summary"] for e in events if e.get("type") == "profile"] or [{}])[-1]
        cols, dflt, samples = parse_pprof_raw(jt.GoPprof(t)("-raw", path))
        want = ["samples/count", "cpu/nanoseconds", "alloc_objects/count", "alloc_space/bytes",
                "lock/count", "lock_wait/nanoseconds"]
        jt.check_eq(cols, want, "sample types")
        jt.check_eq(dflt, ["cpu/nanoseconds"], "default sample type (the first event's)")

        def total(col, pred=lambda f: True):
            i = cols.index(col)
            return sum(v[i] for v, f in samples if pred(f))

        cpu = total("cpu/nanoseconds", lambda f: "AllocSplit.main" in f)
        big = total("alloc_space/bytes", lambda f: "AllocSplit.big" in f and f[0] == "byte[]")
        small = total("alloc_space/bytes", lambda f: "AllocSplit.small" in f and f[0] == "byte[]")
        wait = total("lock_wait/nanoseconds", lambda f: "LockWait.waiter" in f and
                     f[0] == "LockWait$Box")
        parked = total("lock_wait/nanoseconds", lambda f: "LockWait.rwaiter" in f and
                       f[0] == PARK_LEAF)
        share = big / float(big + small) if big + small else 0
        jt.log("cpu,alloc,lock: %.2f s of cpu in AllocSplit.main, big() share of bytes %.3f, "
               "%.2f s waited by waiter() on LockWait$Box and %.2f s by rwaiter() (of %.2f s "
               "of lock_wait)" % (cpu / 1e9, share, wait / 1e9, parked / 1e9,
                                  total("lock_wait/nanoseconds") / 1e9))
        # The cpu values are the JVM's CPU time while sampled (the machine
        # may give it little; the meter also counts the attach and the start
        # gate's wait, seconds on a busy machine, so the events' own count
        # is what the samples are held to), most of it allocating in
        # AllocSplit.main.
        jt.check_recording_cpu(summary, total("cpu/nanoseconds") // 10000000, jvm_cpu_ns,
                               10000000, "cpu of -e cpu,alloc,lock", tolerance=0.2,
                               min_expected=30)
        jt.check(cpu >= 0.5 * total("cpu/nanoseconds"), "cpu: %.2f s in AllocSplit.main of "
                 "%.2f s" % (cpu / 1e9, total("cpu/nanoseconds") / 1e9))
        jt.check(abs(share - 0.75) <= 0.05, "alloc: big() share %.3f, want 0.75 +- 0.05" % share)
        # The holders keep their locks 20 ms of every 22: each waiter waits
        # most of the recording; and every wait is on one of the two locks
        # (by any thread: a holder can wait too, for a waiter preempted
        # while it held the lock on a busy machine).
        li = cols.index("lock_wait/nanoseconds")
        on_locks = total("lock_wait/nanoseconds", lambda f: f[0] in ("LockWait$Box", PARK_LEAF))
        others = sorted(((v[li], ";".join(reversed(f))) for v, f in samples
                         if v[li] and f[0] not in ("LockWait$Box", PARK_LEAF)), reverse=True)[:5]
        jt.check(wait >= 0.5 * SECS * 1e9 and parked >= 0.5 * SECS * 1e9 and
                 on_locks >= 0.9 * total("lock_wait/nanoseconds"),
                 "lock: waiter() on LockWait$Box %.2f s, rwaiter() on %s %.2f s, both locks "
                 "%.2f s, of %.2f s; the other waits: %r" %
                 (wait / 1e9, PARK_LEAF, parked / 1e9, on_locks / 1e9,
                  total("lock_wait/nanoseconds") / 1e9, others))
        # Each sample carries its own event's values, zeros elsewhere.
        groups = ((1,), (2, 3), (4, 5))
        mixed = [(v, f[:3]) for v, f in samples
                 if sum(1 for g in groups if any(v[i] for i in g)) != 1]
        jt.check(not mixed, "samples with the values of several events (or none): %r" % mixed[:3])

    with t.case("JDK 17: -e cpu,alloc,lock as html: the selector switches between the events"):
        path, r = record(t, d, jvm.pid, "cpu,alloc,lock", fmt="html", name="multi-html", secs=1)
        os.rename(path, path + ".html")
        res = jt.browser_run("flamegraph_check.js",
                             ["--html", path + ".html", "--view", "cpu=AllocSplit.main",
                              "--view", "alloc_space=byte[]",
                              "--view", "lock_wait=LockWait$Box"], "multi-event flame graph")
        jt.log("flame graph views %s, totals %s" % (res.get("views"), res.get("view_totals")))
        jt.check_eq(res.get("views"), ["cpu", "alloc_space", "lock_wait"], "selector's values")

    with t.case("JDK 17: -e offcpu,lock (raw JSON): lock waits with Java frames, off-CPU "
                "native, and a warning that says so"):
        c = d.client(user="nobody")
        rec = c.record(pid=jvm.pid, event="offcpu,lock", duration_ms=1000, format="raw")
        prof = json.loads(rec.data())
        names = [f["name"] for f in prof["frames"]]
        types = [st["type"] for st in prof["sample_types"]]
        jt.check_eq(types, ["samples", "offcpu", "lock", "lock_wait"], "sample types")
        off = sum(st["values"][1] for st in prof["stacks"])
        box = sum(st["values"][3] for st in prof["stacks"]
                  if names[st["frames"][-1]] == "LockWait$Box" and
                  "LockWait.waiter" in [names[i] for i in st["frames"]])
        jt.log("offcpu,lock: %.2f s off-CPU, %.2f s waited on LockWait$Box" % (off / 1e9, box / 1e9))
        jt.check(off > 0 and box > 0.3e9, "offcpu %.2f s, waiter() on LockWait$Box %.2f s"
                 % (off / 1e9, box / 1e9))
        warns = [m for m in rec.messages if m.get("type") == "warning"]
        jt.check(any(m.get("code") == "java_frames_unavailable" and "offcpu" in m.get("message", "")
                     for m in warns), "no warning that offcpu has no Java frames: %r" % warns)
    jvm.stop_alive()


def exit_case(t, d):
    with t.case("JDK 17: a JVM that exits during -e alloc: status process_exited (exit 6) with "
                "its samples"):
        jvm = jv.Jvm(t, "17", "AllocSplit", 4, settle=0.5)
        out = os.path.join(t.outdir(), "exit.collapsed")
        r = t.ctl(["record", "-e", "alloc", "--pid", str(jvm.pid), "-d", "60s", "-o", out,
                   "--no-progress"], user="nobody", socket_path=d.socket, timeout=90)
        jt.check_eq(r.returncode, 6, "jprofctl exit code (stderr %r)" % r.stderr)
        jt.check("(process_exited)" in r.stderr, "stderr: %r" % r.stderr)
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        jt.check(value_under(stacks, "AllocSplit.big", "byte[]") > 0,
                 "no samples before the exit:\n%s" % jt.top_stacks(stacks))


def triggered(t, d, jdk, cls, event, started_key):
    """Records event of a workload that starts once the file GO exists and
    prints its measurement after SECS: the work starts only once the agent's
    event is on, and the recording ends only after the workload measured,
    so both cover the same allocations or waits. Returns (stacks, truth)."""
    go = os.path.join(t.mkdtemp("go-"), "go")
    jvm = jv.Jvm(t, jdk, cls, SECS, go, settle=0.5)
    c = d.client(user="nobody")
    rid = c.start_record(pid=jvm.pid, event=event, duration_ms=120000, progress=False)
    jt.wait_until(lambda: re.search(r"pid %d: %s event on" % (jvm.pid, event), d.stderr_text()),
                  30, what="the %s event to be on in pid %d" % (event, jvm.pid))
    open(go, "w").close()
    jt.wait_until(lambda: re.search(r"^\{", jvm.output(), re.M), SECS + 30,
                  what="%s to print its measurement" % cls)
    lines = [ln for ln in jvm.output().splitlines() if ln.startswith("{")]
    truth = json.loads(lines[-1])
    c.send("cancel", target=rid)
    rec = c.collect_record(rid, 30)
    jt.check(rec.started and started_key in rec.started,
             "started message without %s: %r" % (started_key, rec.started))
    stacks = rec.stacks()
    jvm.proc.kill()
    return stacks, truth


def lock_cases(t, d, jdk):
    with t.case("JDK %s: -e lock: waiter() on LockWait$Box, wait within 20%% of the "
                "measured" % jdk):
        stacks, truth = triggered(t, d, jdk, "LockWait", "lock", "threshold_us")
        jt.log("JDK %s lock profile (ns):\n%s" % (jdk, jt.top_stacks(stacks, 6)))
        waited = value_under(stacks, "LockWait.waiter", "LockWait$Box")
        jt.log("JDK %s: waiter() on LockWait$Box %.3f s profiled, %.3f s measured "
               "(%d entries, %d contended)" % (jdk, waited / 1e9, truth["wait_ns"] / 1e9,
                                               truth["entries"], truth["contended"]))
        jt.check(truth["contended"] > 50, "the workload hardly contended: %r" % truth)
        jt.check(abs(waited - truth["wait_ns"]) <= 0.2 * truth["wait_ns"],
                 "profiled wait %.3f s vs measured %.3f s" % (waited / 1e9, truth["wait_ns"] / 1e9))
    # The same recording: a java.util.concurrent lock, timed in Unsafe.park.
    with t.case("JDK %s: -e lock: rwaiter() on a ReentrantLock, wait within 20%% of the "
                "measured" % jdk):
        parked = value_under(stacks, "LockWait.rwaiter", PARK_LEAF)
        jt.log("JDK %s: rwaiter() on %s %.3f s profiled, %.3f s measured (%d entries, "
               "%d contended)" % (jdk, PARK_LEAF, parked / 1e9, truth["park_wait_ns"] / 1e9,
                                  truth["park_entries"], truth["park_contended"]))
        jt.check(truth["park_contended"] > 50, "the workload hardly contended: %r" % truth)
        jt.check(abs(parked - truth["park_wait_ns"]) <= 0.2 * truth["park_wait_ns"],
                 "profiled wait %.3f s vs measured %.3f s" % (parked / 1e9,
                                                              truth["park_wait_ns"] / 1e9))
        # rholder() waits too when it comes back while rwaiter() holds the
        # lock (short waits, tens of us): the only other parks allowed.
        parks = value_under(stacks, "java.util.concurrent.locks.LockSupport.park")
        holder = value_under(stacks, "LockWait.rholder", PARK_LEAF)
        jt.check(parks == parked + holder,
                 "a park under something else than rwaiter()/rholder() and their lock:\n%s"
                 % jt.top_stacks(stacks, 8))


def bad_input(t, d):
    c = d.client(user="nobody")

    def err(what, code, msg_re, **fields):
        with t.case("bad input: %s" % what):
            m = c.request("record", timeout=30, **fields)
            jt.check(m and m.get("ok") is False, "%s: accepted: %r" % (what, m))
            e = m.get("error") or {}
            jt.check_eq(e.get("code"), code, "%s: error code (message %r)" % (what, e.get("message")))
            jt.check(re.search(msg_re, e.get("message", "")), "%s: message %r does not match %r"
                     % (what, e.get("message"), msg_re))

    native = t.workload("spin_chain", 60)
    for ev in ("alloc", "lock"):
        err("-e %s of a native process" % ev, "not_a_jvm", r"%s event records JVMs only" % ev,
            pid=native.pid, event=ev, duration_ms=1000)
        err("-e %s of the whole host" % ev, "bad_request", r"%s event records one JVM" % ev,
            all=True, event=ev, duration_ms=1000)
        err("-e %s with java off" % ev, "bad_request", r"%s event needs the JVM agent" % ev,
            pid=native.pid, event=ev, java="off", duration_ms=1000)
        err("-e %s as a timeline" % ev, "bad_request", r"time-ordered.*%s event" % ev,
            pid=native.pid, event=ev, format="timeline", duration_ms=1000)
    err("alloc_bytes 512 (below 1k)", "bad_request", r"alloc_bytes", pid=native.pid,
        event="alloc", alloc_bytes=512)
    err("alloc_bytes 2^31 (above 1g)", "bad_request", r"alloc_bytes", pid=native.pid,
        event="alloc", alloc_bytes=1 << 31)
    err("alloc_bytes with -e lock", "bad_request", r"alloc_bytes.*alloc event only",
        pid=native.pid, event="lock", alloc_bytes=65536)
    err("threshold_us with -e alloc", "bad_request", r"threshold_us.*offcpu, wall and lock",
        pid=native.pid, event="alloc", threshold_us=100)
    err("threshold_us 0 with -e lock", "bad_request", r"threshold_us", pid=native.pid,
        event="lock", threshold_us=0)
    for what, ev, msg_re in (
            ("a duplicate", "cpu,alloc,cpu", r'event "cpu" is given twice'),
            ("wall with cpu", "wall,cpu", r"wall cannot be combined with cpu: wall already holds"),
            ("wall with offcpu", "offcpu,wall", r"wall cannot be combined with offcpu"),
            ("an unknown event", "cpu,heap", r'unknown event "heap"; known events: cpu, ')):
        err("-e %s (%s)" % (ev, what), "bad_request", msg_re, pid=native.pid, event=ev,
            duration_ms=1000)
    err("-e cpu,alloc of a native process", "not_a_jvm", r"alloc event records JVMs only",
        pid=native.pid, event="cpu,alloc", duration_ms=1000)
    err("-e cpu,lock of the whole host", "bad_request", r"lock event records one JVM",
        all=True, event="cpu,lock", duration_ms=1000)
    err("-e cpu,offcpu as a timeline", "bad_request", r"time-ordered.*offcpu event",
        pid=native.pid, event="cpu,offcpu", format="timeline", duration_ms=1000)
    err("threshold_us with -e cpu,alloc", "bad_request", r"threshold_us.*none is recorded",
        pid=native.pid, event="cpu,alloc", threshold_us=100)
    err("threshold_us with -e alloc,lock", "bad_request", r"lock_threshold_us",
        pid=native.pid, event="alloc,lock", threshold_us=100)
    err("lock_threshold_us with -e cpu,alloc", "bad_request",
        r"lock_threshold_us.*lock event only", pid=native.pid, event="cpu,alloc",
        lock_threshold_us=100)
    err("alloc_bytes with -e cpu,lock", "bad_request", r"alloc_bytes.*alloc event only",
        pid=native.pid, event="cpu,lock", alloc_bytes=65536)

    with t.case("bad input: jprofctl --alloc/--lock checks and record --help"):
        for args, want in ((["-e", "alloc", "--alloc", "100"], r"--alloc size '100'"),
                           (["-e", "alloc", "--alloc", "2g"], r"--alloc size '2g'"),
                           (["-e", "alloc", "--alloc", "12q"], r"--alloc size '12q'"),
                           (["-e", "lock", "--lock", "0us"], r"--lock time '0us'"),
                           (["-e", "lock", "--lock", "20s"], r"--lock time '20s'"),
                           (["-e", "cpu", "--lock", "1ms"], r"--lock applies to -e lock only"),
                           (["-e", "lock", "--alloc", "1m"], r"--alloc applies to -e alloc only"),
                           (["-e", "cpu,lock", "--alloc", "1m"],
                            r"--alloc applies to -e alloc only, and -e cpu,lock has no alloc"),
                           (["-e", "alloc,lock", "--interval", "1ms"],
                            r"--interval applies to -e cpu and -e wall only"),
                           (["-e", "cpu,alloc", "--threshold", "1ms"],
                            r"--threshold applies to -e offcpu and -e wall only"),
                           (["-e", "cpu,alloc", "--lock", "1ms"], r"--lock applies to -e lock"),
                           (["-e", "cpu,lock,cpu"], r'event "cpu" is given twice'),
                           (["-e", "cpu,wall"], r"wall already holds cpu and offcpu")):
            r = t.ctl(["record", "--pid", str(native.pid), "-d", "1s"] + args, user="nobody",
                      socket_path=d.socket)
            jt.check_eq(r.returncode, 2, "jprofctl %s exit code (stderr %r)" % (args, r.stderr))
            jt.check(re.search(want, r.stderr), "jprofctl %s: stderr %r lacks %r"
                     % (args, r.stderr, want))
        r = t.ctl(["record", "--help"], check_rc=0)
        for want in (r"alloc\s+JVM only", r"alloc_space \(bytes\)", r"lock\s+JVM only",
                     r"lock_wait \(nanoseconds\)", r"--alloc SIZE", r"--lock TIME",
                     r"-e cpu,alloc,lock"):
            jt.check(re.search(want, r.stdout), "record --help lacks %r:\n%s" % (want, r.stdout))
    native.kill()


def refused_capability(t, d):
    """Another agent of the JVM (tests/java/attach_test_agent.c with
    hold_alloc=1) holds can_generate_sampled_object_alloc_events, which
    HotSpot grants one environment at a time."""
    lib = os.path.join(os.environ.get("JPROF_JAVA_DIR", ""), "libattach_test_agent.so")
    with t.case("JDK 17: -e alloc when another agent holds the capability: error naming "
                "the event and JVMTI's reason"):
        if not os.path.isfile(lib):
            raise jt.Skip("%s not built" % lib)
        jvm = jv.Jvm(t, "17", "AllocSplit", 60, opts=["-agentpath:%s=hold_alloc" % lib],
                     settle=1.0)
        c = d.client(user="nobody")
        m = c.record(pid=jvm.pid, event="alloc", duration_ms=2000, timeout=40)
        jt.check(m.error, "recording went ahead: %s" % m.describe())
        jt.check_eq(m.error_code, "event_unavailable", "error code (%r)" % (m.error,))
        jt.check(re.search(r"refused the alloc event: AddCapabilities: JVMTI_ERROR_\w+",
                           m.error.get("message", "")), "message %r" % (m.error,))

        # Several events: lock goes on first, then alloc is refused; the
        # error names alloc, and the agent turned lock off again (a lock
        # recording of the same JVM then works).
        m = c.record(pid=jvm.pid, event="lock,alloc", duration_ms=2000, timeout=40)
        jt.check_eq(m.error_code, "event_unavailable", "-e lock,alloc error code (%s)"
                    % m.describe())
        jt.check(re.search(r"refused the alloc event: AddCapabilities", m.error.get("message", "")),
                 "-e lock,alloc message %r" % (m.error,))
        jt.check(re.search(r"pid %d: lock event on" % jvm.pid, d.stderr_text()),
                 "lock was not on before alloc was refused")
        m = c.record(pid=jvm.pid, event="lock", duration_ms=500, timeout=40)
        jt.check(not m.error and m.profile and m.profile.get("status") == "complete",
                 "-e lock after -e lock,alloc was refused: %s" % m.describe())
        jvm.proc.kill()


def main(t):
    d = t.start_daemon(*jv.agent_args())
    bad_input(t, d)
    for jdk, _ in jv.jdks():
        alloc_cases(t, d, jdk)
        lock_cases(t, d, jdk)
    refused_capability(t, d)
    multi_event_cases(t, d)
    exit_case(t, d)


jt.run(main)
