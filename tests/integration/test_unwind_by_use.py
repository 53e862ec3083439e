"""Unwind tables go to the binaries being sampled, not to whichever were
mapped first (issue 27, item 1). A daemon whose table memory holds exactly
python3's tables: while python3 is sampled, a second program (unwind_chain,
without frame pointers) gets no rows and status names it (no_room); once
python3 has gone unsampled for unwind_cold_s, a recording of unwind_chain
takes python3's rows at once and its stacks are complete; a recording of
python3 gets its tables back at once the same way. Before, unwind_chain stayed without rows for as long as python3
lived. status.sampler.unwind counts it (evicted_cold, cold_reloads,
sampled_without_tables) and /metrics has the gauge."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

COLD_S = 2
ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main")
PY = ["/usr/bin/python3", "-c", "while True: sum(i * i for i in range(2000))"]


def record(t, d, pid, secs, name):
    out = os.path.join(t.outdir(), name + ".collapsed")
    t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-o", out, "-f", "collapsed",
           "--no-progress"], socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        return jt.parse_collapsed(f.read())


def rooted(stacks, chain=()):
    """Samples whose user stack reaches a root frame (and runs chain)."""
    good = 0
    for s, c in stacks.items():
        frames = jt.frames_of(s)
        if any(r in frames for r in ROOTS) and (not chain or jt.has_seq(frames, list(chain))):
            good += c
    return good, jt.total_samples(stacks)


_clients = {}


def unwind_status(d, user=None):
    """status.sampler.unwind, asked as user (one connection each)."""
    key = (d.socket, user)
    if key not in _clients:
        _clients[key] = d.client(user=user)
    return _clients[key].status()["sampler"]["unwind"]


def missing(uw, name):
    """The entry of binaries_without_tables whose path ends in name, or None."""
    for b in uw.get("binaries_without_tables", []):
        if b["path"].endswith("/" + name):
            return b
    return None


def main(t):
    # What python3's tables take: a daemon with room to spare, host view
    # off, so that only the recorded process has tables.
    d0 = t.start_daemon("--rate", "0")
    # As root: a user other than root may hold only half the rows (its
    # share), which is not what is tested here.
    py = t.spawn(PY, user=None, what="python3 loop")
    record(t, d0, py.pid, 1, "measure")
    rows = unwind_status(d0)["rows"]
    jt.check(rows > 87381, "python3's tables took %d rows; the test needs more than 1M bytes'" % rows)
    d0.stop()

    conf = os.path.join(t.mkdtemp("conf-"), "jprofd.conf")
    with open(conf, "w") as f:
        f.write("unwind_cold_s = %d\n" % COLD_S)
    usock = os.path.join(t.mkdtemp("http-"), "http.sock")
    d = t.start_daemon("--rate", "0", "--unwind-max-memory", str(rows * 12), "--config", conf,
                       "--http-socket", usock)
    chain = t.workload("unwind_chain_pie", "chain", 120, user=None)

    with t.case("while python3 is sampled, unwind_chain gets no rows; status names it"):
        c = d.client()
        rid = c.start_record(pid=py.pid, duration_ms=4000)
        stacks = record(t, d, chain.pid, 2, "chain-full")
        c.collect_record(rid, 30)
        py_end = time.monotonic()
        # Counted at the worker's sweep, every 5 s.
        jt.wait_until(lambda: missing(unwind_status(d), "unwind_chain_pie") is not None, 15,
                      interval=0.3, what="unwind_chain_pie listed without a table")
        uw = unwind_status(d)
        m = missing(uw, "unwind_chain_pie")
        jt.check(m is not None and m["why"] == "no_room",
                 "unwind_chain_pie not listed as no_room: %r (rows %d of %d)"
                 % (uw.get("binaries_without_tables"), uw["rows"], uw["rows_capacity"]))
        jt.check(uw["sampled_without_tables"]["no_room"] >= 1, "no_room count: %r"
                 % uw["sampled_without_tables"])
        jt.check(uw["evicted_cold"] == 0, "a table of sampled python3 went: %r" % uw)
        met = jt.unix_metrics(usock)
        jt.check(met.get('jprofd_unwind_sampled_without_tables{cause="no_room"}', 0) >= 1,
                 "metrics gauge: %r" % {k: v for k, v in met.items() if "without" in k})
        # Other users see how many, not which (paths of others' programs).
        jt.check("binaries_without_tables" not in unwind_status(d, "nobody"),
                 "paths shown to an unprivileged caller")

    with t.case("python3 unsampled for unwind_cold_s: a recording of unwind_chain takes its rows "
                "at once (>= 90% complete)"):
        # The condition is time itself: python3 unsampled for unwind_cold_s
        # (BPF stamps whole seconds: one more).
        time.sleep(max(0.0, py_end + COLD_S + 1.5 - time.monotonic()))
        stacks = record(t, d, chain.pid, 2, "chain-cold")
        chain_end = time.monotonic()
        good, total = rooted(stacks, ("main", "uw_a", "uw_b", "uw_c"))
        jt.check(total >= 30, "only %d samples" % total)
        jt.check(good >= 0.9 * total, "%d of %d samples run _start..main;uw_a;uw_b;uw_c:\n%s"
                 % (good, total, jt.top_stacks(stacks)))
        uw = unwind_status(d)
        jt.check(uw["evicted_cold"] >= 1, "evicted_cold %d" % uw["evicted_cold"])

    with t.case("a recording of python3 gets its tables back at once (>= 90% reach the root)"):
        time.sleep(max(0.0, chain_end + COLD_S + 1.5 - time.monotonic()))
        before = unwind_status(d)["cold_reloads"]
        stacks = record(t, d, py.pid, 2, "py-back")
        good, total = rooted(stacks)
        jt.check(total >= 30, "only %d samples" % total)
        jt.check(good >= 0.9 * total, "%d of %d python3 samples reach a root frame:\n%s"
                 % (good, total, jt.top_stacks(stacks)))
        jt.check(unwind_status(d)["cold_reloads"] > before, "cold_reloads did not grow")
    chain.kill()
    py.kill()
    d.stop()


if __name__ == "__main__":
    jt.run(main)
