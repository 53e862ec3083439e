"""Authorization and hostile input: a user cannot record another user's
process or the whole host; bad requests get the right error code on their
own connection while another client's recording completes undisturbed; a
client that disconnects mid-record leaves the daemon healthy."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def expect_error(msg, code, what, req_id=None):
    jt.check(msg is not None, "%s: connection closed instead of a %s error" % (what, code))
    jt.check(msg.get("ok") is False and isinstance(msg.get("error"), dict),
             "%s: want an error response, got %r" % (what, msg))
    jt.check_eq(msg["error"].get("code"), code, "%s: error code" % what)
    jt.check(isinstance(msg["error"].get("message"), str) and msg["error"]["message"],
             "%s: error without a message: %r" % (what, msg))
    if req_id is not None:
        jt.check_eq(msg.get("id"), req_id, "%s: echoed id" % what)


def free_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists("/proc/%d" % pid):
        pid -= 1
    return pid


def main(t):
    d = t.start_daemon()

    root_proc = t.spawn(["sleep", "120"], user="root", what="sleep (root)")

    with t.case("nobody recording a root process: permission_denied"):
        c = d.client(user="nobody")
        rec = c.record(pid=root_proc.pid, duration_ms=1000, timeout=10)
        expect_error(rec.messages[-1] if rec.messages else None, "permission_denied",
                     "record root pid as nobody", rec.id)
        c.close()

    with t.case("jprofctl as nobody on a root process: exit 4"):
        out = os.path.join(t.outdir(), "denied.collapsed")
        r = t.ctl(["record", "--pid", str(root_proc.pid), "-d", "1s", "-o", out],
                  user="nobody", socket_path=d.socket, timeout=30)
        jt.check_eq(r.returncode, 4, "exit code (stderr: %r)" % r.stderr)
        jt.check(r.stderr.strip(), "no message on stderr")
        jt.check(not os.path.exists(out), "a denied recording wrote %s" % out)

    with t.case("nobody asking for all: permission_denied"):
        c = d.client(user="nobody")
        rec = c.record(all=True, duration_ms=1000, timeout=10)
        expect_error(rec.messages[-1] if rec.messages else None, "permission_denied",
                     "record all as nobody", rec.id)
        c.close()
        r = t.ctl(["record", "--all", "-d", "1s", "-o", os.path.join(t.outdir(), "all.out")],
                  user="nobody", socket_path=d.socket, timeout=30)
        jt.check_eq(r.returncode, 4, "jprofctl record --all as nobody: exit code (stderr: %r)"
                    % r.stderr)

    with t.case("pid that does not exist: no_such_process, jprofctl exit 5"):
        pid = free_pid()
        c = d.client()
        rec = c.record(pid=pid, duration_ms=1000, timeout=10)
        expect_error(rec.messages[-1] if rec.messages else None, "no_such_process",
                     "record pid %d" % pid, rec.id)
        c.close()
        r = t.ctl(["record", "--pid", str(pid), "-d", "1s", "-o",
                   os.path.join(t.outdir(), "none.out")], socket_path=d.socket, timeout=30)
        jt.check_eq(r.returncode, 5, "exit code (stderr: %r)" % r.stderr)
        jt.check(r.stderr.strip(), "no message on stderr")

    with t.case("bad input gets error responses while another recording completes"):
        w = t.workload("spin_chain", 60)
        rc = d.client(user="nobody")
        meter = jt.CpuMeter(w.pid)
        rid = rc.start_record(pid=w.pid, duration_ms=4000, interval_us=10000, progress=True)
        started = rc.recv_for(rid, 10)
        jt.check(started is not None and started.get("type") == "started",
                 "concurrent recording did not start: %r" % (started,))

        bad = d.client()
        cases = [
            (b'{"v":1,"id":1,"cmd":"status"\n', "bad_json", None, "truncated JSON"),
            (b"\x00\xff\xfe garbage\n", "bad_json", None, "binary garbage"),
            (b"[1,2,3]\n", "bad_json", None, "an array, not an object"),
            (b'"status"\n', "bad_json", None, "a string, not an object"),
            (b'{"v":1,"id":11,"cmd":"frobnicate"}\n', "unknown_command", 11, "unknown command"),
            (b'{"v":1,"id":12,"cmd":"status","bogus":true}\n', "unknown_field", 12,
             "unknown field"),
            (b'{"v":1,"id":13,"cmd":"record","pid":"self","duration_ms":1000}\n',
             "bad_request", 13, "pid of the wrong type"),
            (b'{"v":1,"id":14,"cmd":"record","pid":1,"duration_ms":-5}\n',
             "bad_request", 14, "negative duration"),
            (b'{"v":1,"id":15}\n', "bad_request", 15, "no cmd"),
            (b'{"v":2,"id":16,"cmd":"status"}\n', "unsupported_version", 16, "v=2"),
            (b'{"v":1,"id":17,"cmd":"record","pid":1,"format":"xml"}\n', "bad_request", 17,
             "unknown format"),
        ]
        for data, code, req_id, what in cases:
            jt.log("sending %s" % what)
            bad.send_raw(data)
            expect_error(bad.recv(10), code, what, req_id)
        st = bad.status()
        jt.check(st["sessions"]["active"] >= 1,
                 "status during the concurrent recording: sessions.active = %r"
                 % st["sessions"]["active"])

        # 100 KiB on one line (limit 64 KiB). The daemon may close after
        # answering; the error must come first.
        line = json.dumps({"v": 1, "id": 17, "cmd": "status", "pad": "x" * (100 * 1024)})
        bad.send_raw(line.encode() + b"\n")
        expect_error(bad.recv(10), "line_too_long", "a 100 KiB request line")
        bad.close()

        rec = rc.collect_record(rid, 20)
        cpu = meter.stop()
        jt.check(rec.profile is not None, "concurrent recording: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "complete", "concurrent recording status")
        stacks = rec.stacks()
        chain = jt.samples_matching(stacks, lambda f: jt.has_seq(f, ["main", "a", "b", "spin"]))
        jt.check_recording_cpu(rec.summary(), jt.total_samples(stacks), cpu, 10000000,
                               "concurrent recording")
        jt.check(chain >= 0.8 * jt.total_samples(stacks),
                 "concurrent recording: %d samples with main;a;b;spin of %d; top stacks:\n%s"
                 % (chain, jt.total_samples(stacks), jt.top_stacks(stacks)))
        rc.close()
        w.kill()

    with t.case("client disconnecting mid-record does not disturb the daemon"):
        w = t.workload("spin_chain", 60)
        c = d.client(user="nobody")
        rid = c.start_record(pid=w.pid, duration_ms=20000, progress=True)
        m = c.recv_for(rid, 10)
        jt.check(m is not None and m.get("type") == "started", "record did not start: %r" % (m,))
        observer = d.client()
        jt.check(observer.status()["sessions"]["active"] >= 1, "session not listed as active")
        time.sleep(1.2)
        c.close()
        jt.wait_until(lambda: observer.status()["sessions"]["active"] == 0, 5,
                      0.2, "sessions.active to return to 0 after the client disconnected")
        # Still serving: a new short recording works.
        c2 = d.client(user="nobody")
        rec = c2.record(pid=w.pid, duration_ms=1000, timeout=15)
        jt.check(rec.profile is not None and jt.total_samples(rec.stacks()) > 0,
                 "recording after the disconnect: %s" % rec.describe())
        c2.close()
        observer.close()
        w.kill()

    root_proc.kill()


jt.run(main)
