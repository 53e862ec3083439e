"""A CPU-bound process with a known call chain, recorded by its owner
(nobody): the frames are right, the sample count matches duration/interval,
progress is reported, and a cancelled recording still returns its profile."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]


def check_chain(stacks, min_fraction, what):
    total = jt.total_samples(stacks)
    chain = jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN))
    jt.check(total > 0, "%s: empty profile" % what)
    jt.check(chain >= min_fraction * total,
             "%s: only %d of %d samples (%.0f%%) contain %s, want >= %.0f%%; top stacks:\n%s"
             % (what, chain, total, 100.0 * chain / total, ";".join(CHAIN),
                100 * min_fraction, jt.top_stacks(stacks)))
    return total


def main(t):
    d = t.start_daemon()
    nobody_uid, _ = jt.nobody_ids()

    with t.case("socket is mode 0666"):
        d.check_socket_mode()

    with t.case("jprofctl record as nobody: 5 s at 10 ms"):
        w = t.workload("spin_chain", 30)
        out = os.path.join(t.outdir(), "out.collapsed")
        meter = jt.CpuMeter(w.pid)
        r = t.ctl(["record", "--pid", str(w.pid), "-d", "5s", "-i", "10ms", "-o", out,
                   "--format", "collapsed", "--json-events"],
                  user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
        cpu = meter.stop()
        events = [json.loads(ln) for ln in r.stderr.splitlines() if ln.startswith("{")]
        summary = ([e["summary"] for e in events if e.get("type") == "profile"] or [{}])[-1]
        jt.check(os.path.isfile(out), "jprofctl exited 0 but did not write %s" % out)
        jt.check_eq(os.stat(out).st_uid, nobody_uid, "owner of the output file (the client writes it)")
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        total = check_chain(stacks, 0.80, "jprofctl profile")
        jt.check_recording_cpu(summary, total, cpu, 10000000, "jprofctl record, 5 s at 10 ms")
        w.kill()

    with t.case("socket record as nobody: started, progress, complete profile"):
        w = t.workload("spin_chain", 30)
        c = d.client(user="nobody")
        meter = jt.CpuMeter(w.pid)
        rec = c.record(pid=w.pid, duration_ms=3000, interval_us=10000,
                       format="collapsed", progress=True)
        cpu = meter.stop()
        jt.check(rec.error is None and rec.profile is not None,
                 "record did not produce a profile: %s" % rec.describe())
        jt.check(rec.started is not None, "no 'started' message before the profile: %s"
                 % rec.describe())
        jt.check(rec.messages[0].get("type") == "started",
                 "first message is not 'started': %s" % rec.describe())
        jt.check(len(rec.progress) >= 2, "want >= 2 progress messages in 3 s, got %d: %s"
                 % (len(rec.progress), rec.describe()))
        elapsed = [p.get("elapsed_ms") for p in rec.progress]
        jt.check(all(isinstance(e, int) for e in elapsed) and elapsed == sorted(elapsed),
                 "progress elapsed_ms not increasing integers: %r" % elapsed)
        for p in rec.progress:
            jt.check_eq(p.get("duration_ms"), 3000, "progress duration_ms")
            jt.check(isinstance(p.get("samples"), int), "progress without samples: %r" % p)
        jt.check(rec.progress[-1]["samples"] > 0, "progress never counted samples: %s"
                 % rec.describe())
        jt.check_eq(rec.profile.get("ok"), True, "profile ok")
        jt.check_eq(rec.profile.get("status"), "complete", "profile status")
        stacks = rec.stacks()
        total = check_chain(stacks, 0.80, "socket profile")
        jt.check_recording_cpu(rec.summary(), total, cpu, 10000000, "socket record, 3 s at 10 ms")
        jt.check_eq(rec.summary().get("samples"), total,
                    "summary.samples vs the sum of the collapsed counts")
        # Typed totals: the CPU event's sample types, one total per type.
        jt.check_eq(rec.summary().get("sample_types"),
                    [{"type": "samples", "unit": "count"}, {"type": "cpu", "unit": "nanoseconds"}],
                    "summary.sample_types of a cpu recording")
        jt.check_eq(rec.summary().get("values"),
                    [total, rec.summary().get("weight_ns")], "summary.values")
        jt.check_eq(rec.summary()["values"][1], total * 10000000,
                    "cpu nanoseconds = samples x the 10 ms interval")
        jt.check_eq(c.status()["sessions"]["active"], 0, "active sessions after the profile")
        c.close()
        w.kill()

    with t.case("cancel returns the partial profile"):
        w = t.workload("spin_chain", 30)
        c = d.client(user="nobody")
        rid = c.start_record(pid=w.pid, duration_ms=30000, interval_us=10000, progress=True)
        m = c.recv_for(rid, 10)
        jt.check(m is not None and m.get("type") == "started", "want started, got %r" % (m,))
        # Cancelled once it has samples to return: sampling starts when the
        # start gate opens (the process's unwind tables), which a busy
        # machine can delay past any fixed wait.
        deadline = time.monotonic() + 30
        while True:
            m = c.recv_for(rid, max(0.1, deadline - time.monotonic()))
            jt.check(m is not None and m.get("ok") is not False and time.monotonic() < deadline,
                     "no progress with 20 samples within 30 s: %r" % (m,))
            if m.get("type") == "progress" and m.get("samples", 0) >= 20:
                break
        cid = c.send("cancel", target=rid)
        t0 = time.monotonic()
        cr = c.recv_for(cid, 10)
        jt.check(cr is not None and cr.get("ok") is True and cr.get("type") == "cancelled",
                 "cancel response: %r" % (cr,))
        rec = c.collect_record(rid, 10)
        jt.check(rec.profile is not None, "no profile after cancel: %s" % rec.describe())
        jt.check(time.monotonic() - t0 < 5, "profile took more than 5 s after cancel")
        jt.check_eq(rec.profile.get("status"), "cancelled", "profile status after cancel")
        check_chain(rec.stacks(), 0.5, "cancelled profile")
        c.close()
        w.kill()

    with t.case("cancel of an unknown session"):
        c = d.client(user="nobody")
        r = c.request("cancel", target=999999)
        jt.check(r.get("ok") is False and (r.get("error") or {}).get("code") == "no_such_session",
                 "cancel of unknown target: %r" % r)
        c.close()


jt.run(main)
