"""The BPF programs time each sample themselves: with a process spinning
under the host view, /metrics carries the histogram
jprofd_bpf_sample_duration_seconds (buckets cumulative in le, the +Inf
bucket equal to _count, counts growing between scrapes, a plausible mean),
and status reports sampler.bpf_sample_us with ordered quantiles that
`jprofctl status` prints. A recording's per-thread events (the other
program) are timed as well."""
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

NAME = "jprofd_bpf_sample_duration_seconds"


def histogram(base):
    """([(le, cumulative count)] in exposition order, _sum, _count) from /metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        jt.check_eq(r.status, 200, "GET /metrics status")
        text = r.read().decode()
    jt.check(re.search(r"^# TYPE %s histogram$" % NAME, text, re.M),
             "no histogram %s in /metrics:\n%s" % (NAME, text))
    buckets = [(float(le), int(v)) for le, v in
               re.findall(r'^%s_bucket\{le="([^"]+)"\} (\d+)$' % NAME, text, re.M)]
    total = re.search(r"^%s_sum (\S+)$" % NAME, text, re.M)
    count = re.search(r"^%s_count (\d+)$" % NAME, text, re.M)
    jt.check(buckets and total and count, "histogram %s incomplete:\n%s" % (NAME, text))
    return buckets, float(total.group(1)), int(count.group(1))


def check_shape(h):
    buckets, total, count = h
    les = [le for le, _ in buckets]
    jt.check(les == sorted(les) and len(set(les)) == len(les) and les[-1] == float("inf"),
             "le bounds not strictly increasing up to +Inf: %r" % les)
    vals = [v for _, v in buckets]
    jt.check(all(a <= b for a, b in zip(vals, vals[1:])), "buckets not cumulative: %r" % buckets)
    jt.check_eq(vals[-1], count, "+Inf bucket vs _count")
    # A sample's BPF time: well above 100 ns (two clock reads and a stack
    # walk) and far below a millisecond on any host.
    jt.check(count == 0 or 1e-7 < total / count < 1e-3,
             "mean BPF time per sample %.3g s is implausible (%d samples, sum %.6g s)"
             % (total / count, count, total))


def main(t):
    port = jt.free_port()
    base = "http://127.0.0.1:%d" % port
    d = t.start_daemon("--http", "127.0.0.1:%d" % port, "--rate", "99")
    w = t.workload("spin_chain", 300)

    with t.case("/metrics: the BPF time histogram is cumulative and grows while sampling"):
        h1 = histogram(base)
        check_shape(h1)
        h2 = jt.wait_until(lambda: (lambda h: h if h[2] >= h1[2] + 50 else None)(histogram(base)),
                           30, 0.5, "50 more timed samples in %s_count" % NAME)
        check_shape(h2)
        jt.log("%s: %d -> %d samples, mean %.2f us" % (NAME, h1[2], h2[2], h2[1] / h2[2] * 1e6))
        jt.check(all(b2 >= b1 for (_, b1), (_, b2) in zip(h1[0], h2[0])),
                 "a bucket shrank between scrapes:\n%r\n%r" % (h1[0], h2[0]))
        jt.check(h2[1] > h1[1], "_sum did not grow: %r -> %r" % (h1[1], h2[1]))
        # Not all in the open top bucket: the quantiles would say nothing.
        jt.check(h2[0][-2][1] > 0, "every sample took >= 63 us: %r" % h2[0])

    with t.case("status sampler.bpf_sample_us: count grows, p50 <= p90 <= p99; jprofctl status"):
        bt = d.client().status()["sampler"]["bpf_sample_us"]
        jt.log("status bpf_sample_us: %r" % bt)
        jt.check(bt["count"] >= h2[2], "status count %d below the earlier /metrics %d"
                 % (bt["count"], h2[2]))
        jt.check(0 < bt["p50"] <= bt["p90"] <= bt["p99"] <= 63,
                 "quantiles out of order or range: %r" % bt)
        jt.check(0 < bt["mean"] < 1000, "mean %r us" % bt["mean"])
        r = t.ctl(["status"], socket_path=d.socket, check_rc=0)
        m = re.search(r"^BPF time per sample: p50 ([0-9.]+) us, p90 ([0-9.]+) us, p99 ([0-9.]+) us",
                      r.stdout, re.M)
        jt.check(m, "jprofctl status does not show the BPF time per sample:\n%s" % r.stdout)
        jt.check(0 < float(m.group(1)) <= float(m.group(3)), "jprofctl status line: %s" % m.group(0))

    with t.case("per-thread recording events are timed too (host view off)"):
        # Only the recording's per-thread events run: every timed sample
        # is one of sample_thread's.
        d2 = t.start_daemon("--rate", "0", name="jprofd-rate0")
        before = d2.client().status()["sampler"]["bpf_sample_us"]["count"]
        rec = d2.client().record(pid=w.pid, duration_ms=2000, interval_us=10000)
        got = jt.total_samples(rec.stacks())
        after = d2.client().status()["sampler"]["bpf_sample_us"]
        jt.log("recording: %d samples; status bpf_sample_us %r (before: %d)" % (got, after, before))
        jt.check(got >= 20, "the recording of the spinner has %d samples" % got)
        jt.check(after["count"] - before >= got,
                 "%d samples recorded but only %d timed" % (got, after["count"] - before))
    w.kill()


jt.run(main)
