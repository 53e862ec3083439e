"""SIGTERM during recordings: clients are told (shutting_down), the daemon
exits 0 within 5 s and unloads its BPF programs."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def main(t):
    d = t.start_daemon()
    w = t.workload("spin_chain", 60)

    c = d.client(user="nobody")
    rid = c.start_record(pid=w.pid, duration_ms=30000, interval_us=10000, progress=True)
    m = c.recv_for(rid, 10)
    jt.check(m is not None and m.get("type") == "started", "record did not start: %r" % (m,))
    idle = d.client()
    out = os.path.join(t.outdir(), "shutdown.collapsed")
    ctl, ctl_out, ctl_err = t.ctl_popen(
        ["record", "--pid", str(w.pid), "-d", "30s", "-o", out, "--format", "collapsed",
         "--no-progress"], user="nobody", socket_path=d.socket)
    def both_active():
        jt.check(ctl.running(), "jprofctl ended before the shutdown (exit %r): %s"
                 % (ctl.returncode, open(ctl_err).read()[-500:]))
        return idle.status()["sessions"]["active"] >= 2
    jt.wait_until(both_active, 10, 0.2, "both recordings to be active")
    time.sleep(1.0)
    d.note_bpf_programs()

    jt.log("SIGTERM to jprofd")
    t0 = time.monotonic()
    d.proc.signal(signal.SIGTERM)

    with t.case("the recording client gets shutting_down"):
        msgs = []
        while True:
            m = c.recv(10)
            if m is None:
                break
            msgs.append(m)
        codes = [(m.get("error") or {}).get("code") for m in msgs if m.get("ok") is False]
        jt.check("shutting_down" in codes,
                 "want an error with code shutting_down before EOF; got:\n  %s"
                 % "\n  ".join(repr(m)[:300] for m in msgs[-6:]))

    with t.case("jprofctl exits non-zero with a message"):
        code = ctl.wait(10)
        with open(ctl_err) as f:
            err = f.read()
        jt.check(code != 0, "jprofctl exited 0 although the daemon shut down mid-record")
        jt.check(err.strip(), "jprofctl printed nothing on stderr")
        jt.log("jprofctl: exit %d, stderr: %s" % (code, err.strip()[:300]))

    with t.case("jprofd exits 0 within 5 s and leaves no BPF programs"):
        left = max(0.1, 5.0 - (time.monotonic() - t0))
        d.stop(timeout=left, send_sigterm=False)  # checks exit 0 and BPF leftovers

    with t.case("idle client sees the connection close"):
        m = idle.recv(5)
        while m is not None:
            jt.check(m.get("ok") is False and (m.get("error") or {}).get("code")
                     == "shutting_down", "idle client got %r" % m)
            m = idle.recv(5)

    c.close()
    idle.close()
    w.kill()


jt.run(main)
