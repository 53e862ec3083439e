"""Authorization (issue 10, points 4 and 6), attacked as nobody.

Point 4: the kernel's ptrace read rule. nobody's own setgid (and so
non-dumpable) process, and one made non-dumpable with prctl, are refused.
nobody records a shell of its own that then execs a setuid-root program: the
recording ends "access_lost" at once, with none of that program's samples;
an exec of an ordinary program goes on being recorded. Root keeps its rights.

Point 6: refusals do not tell an unprivileged caller whether another user's
process exists: root's process, another user's and a pid nobody has get the
same answer, for record and profile; the audit log keeps the reasons."""
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]
# A busy shell that execs $1 with argument $3 once the file $2 exists.
SHELL = 'while [ ! -e "$2" ]; do :; done; exec "$1" "$3"'
# Makes itself non-dumpable, then says so by creating the file argv[1].
NON_DUMPABLE = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
                "open(sys.argv[1], 'w').close(); time.sleep(120)")


def gone_pid():
    """The pid of another user's process that has just exited."""
    p = jt.Proc(jt.as_user_argv(jt.SECOND_USER, ["true"]), "true")
    jt.check_eq(p.wait(10), 0, "true's exit status")
    jt.check(not os.path.exists("/proc/%d" % p.pid), "pid %d is in use again" % p.pid)
    return p.pid


def status_field(pid, name):
    """The numbers of a /proc/PID/status line ("Uid", "Gid"), or None."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return [int(x) for x in line.split()[1:]]
    except OSError:
        pass
    return None


def denial(c, cmd, pid):
    """(code, message with the pid as "N") of a refused record or profile."""
    if cmd == "record":
        r = c.record(pid=pid, duration_ms=1000, timeout=10).messages[-1]
    else:
        r = c.request("profile", pid=pid, last_s=10, format="collapsed")
    jt.check(r.get("ok") is False, "%s of pid %d was not refused: %r" % (cmd, pid, r))
    err = r["error"]
    # The pid as a whole number only: a low pid (after the pid counter
    # wrapped) is also a piece of "uid 65534".
    return err["code"], re.sub(r"\b%d\b" % pid, "N", err["message"])


def audit(d, pid):
    return [line for line in d.stderr_text().splitlines()
            if "audit: denied" in line and "pid %d:" % pid in line]


def privileged_copy(t, src, name, uid, gid, mode):
    d = t.mkdtemp("setid-")
    path = os.path.join(d, name)
    shutil.copy2(src, path)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def record_through_exec(t, d, target, user="nobody"):
    """nobody's shell, busy until a trigger, then exec target (spin_chain, 5 s).
    Returns (recording, seconds from the trigger to the profile, the pid)."""
    trigger = os.path.join(t.mkdtemp("trigger-", owner="nobody"), "go")
    sh = t.spawn(["/bin/sh", "-c", SHELL, "sh", target, trigger, "5"], user=user, what="sh")
    c = d.client(user=user)
    rid = c.start_record(pid=sh.pid, duration_ms=15000, interval_us=10000, progress=True)
    # Some of the shell's own samples are checked and kept first.
    jt.wait_until(lambda: any(m.get("type") == "progress" and m.get("samples", 0) > 0
                              for m in [c.recv_for(rid, 5) or {}]), 10,
                  what="a progress message with samples of the shell")
    open(trigger, "w").close()
    t0 = time.monotonic()
    rec = c.collect_record(rid, 20)
    took = time.monotonic() - t0
    c.close()
    return rec, took, sh


def main(t):
    d = t.start_daemon()
    nobody_uid, nobody_gid = jt.user_ids("nobody")
    _, other_gid = jt.user_ids(jt.SECOND_USER)

    with t.case("unprivileged denials do not tell whether another user's process exists"):
        root_proc = t.spawn(["sleep", "120"], user="root", what="sleep (root)")
        other_proc = t.spawn(["sleep", "120"], user=jt.SECOND_USER, what="sleep (second user)")
        missing = gone_pid()
        c = d.client(user="nobody")
        for cmd in ("record", "profile"):
            answers = {what: denial(c, cmd, pid) for what, pid in
                       (("root's", root_proc.pid), ("another user's", other_proc.pid),
                        ("no process", missing))}
            jt.log("%s: %r" % (cmd, answers))
            jt.check(len(set(answers.values())) == 1,
                     "%s: the answers tell the cases apart: %r" % (cmd, answers))
            code, message = answers["no process"]
            jt.check_eq(code, "permission_denied", "%s: code" % cmd)
            for uid in {0, jt.user_ids(jt.SECOND_USER)[0]}:
                jt.check(" %d " % uid not in message and "uid %d" % uid not in message,
                         "%s: the message names uid %d: %r" % (cmd, uid, message))
        c.close()
        # The audit log keeps what the caller was not told.
        jt.check(any("uids are" in line for line in audit(d, root_proc.pid)),
                 "no audit line with root's uids: %r" % audit(d, root_proc.pid))
        jt.check(any("no such process" in line for line in audit(d, missing)),
                 "no audit line for the missing pid: %r" % audit(d, missing))
        # Root still learns that a pid does not exist.
        c = d.client()
        jt.check_eq(denial(c, "record", missing)[0], "no_such_process", "root's answer")
        c.close()

    with t.case("nobody's own setgid, non-dumpable process is refused; root may record it"):
        sgid_sleep = privileged_copy(t, shutil.which("sleep"), "sleep-sgid", 0, other_gid, 0o2755)
        p = t.spawn([sgid_sleep, "120"], user="nobody", what="setgid sleep")
        gids = status_field(p.pid, "Gid")
        jt.check(gids and gids[1] == other_gid and gids[0] == nobody_gid,
                 "the setgid copy did not change gids: %r" % (gids,))
        c = d.client(user="nobody")
        code, _ = denial(c, "record", p.pid)
        jt.check_eq(code, "permission_denied", "record of nobody's setgid process")
        c.close()
        jt.check(any("gids are" in line for line in audit(d, p.pid)),
                 "the audit line does not give the gids: %r" % audit(d, p.pid))
        rec = d.client().record(pid=p.pid, duration_ms=500, timeout=15)
        jt.check(rec.profile is not None, "root may not record it: %s" % rec.describe())
        p.kill()

    with t.case("nobody's own process made non-dumpable with prctl is refused"):
        done = os.path.join(t.mkdtemp("prctl-", owner="nobody"), "done")
        p = t.spawn(["python3", "-c", NON_DUMPABLE, done], user="nobody",
                    what="non-dumpable python", settle=0)
        jt.wait_until(lambda: os.path.exists(done), 10, what="prctl(PR_SET_DUMPABLE, 0)")
        c = d.client(user="nobody")
        jt.check_eq(denial(c, "record", p.pid)[0], "permission_denied", "record of it")
        c.close()
        jt.check(any("not dumpable" in line for line in audit(d, p.pid)),
                 "audit: %r" % audit(d, p.pid))
        p.kill()

    with t.case("a recorded shell execs a setuid-root program: access_lost, none of its samples"):
        suid = privileged_copy(t, t.prog("spin_chain"), "spin_chain", 0, 0, 0o4755)
        rec, took, sh = record_through_exec(t, d, suid)
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "access_lost", "profile status")
        jt.check(took < 3, "the recording ended %.1f s after the exec" % took)
        uids = status_field(sh.pid, "Uid")
        jt.check(uids and uids[1] == 0, "the setuid copy did not run as root: %r" % (uids,))
        stacks = rec.stacks()
        leaked = jt.samples_matching(stacks, lambda f: any(x in f for x in CHAIN[1:]))
        jt.check(leaked == 0, "%d samples of the setuid program:\n%s" % (leaked, jt.top_stacks(stacks)))
        jt.check(jt.total_samples(stacks) > 0, "the shell's samples before the exec are missing")
        jt.check([line for line in d.stderr_text().splitlines()
                  if "may no longer record pid %d" % sh.pid in line], "no audit line")
        sh.kill()

    with t.case("jprofctl: access_lost says why and exits 4 (permission)"):
        suid = privileged_copy(t, t.prog("spin_chain"), "spin_chain", 0, 0, 0o4755)
        trigger = os.path.join(t.mkdtemp("trigger-", owner="nobody"), "go")
        sh = t.spawn(["/bin/sh", "-c", SHELL, "sh", suid, trigger, "5"], user="nobody", what="sh")
        outdir = t.mkdtemp("ctl-out-", owner="nobody")
        out = os.path.join(outdir, "lost.collapsed")
        p, stdout, stderr = t.ctl_popen(["record", "--pid", str(sh.pid), "-d", "15s", "-o", out,
                                         "--json-events"], user="nobody", socket_path=d.socket)
        # --json-events writes the events to stderr, one JSON line each.
        jt.wait_until(lambda: any('"type":"progress"' in line.replace(" ", "")
                                  for line in open(stderr, errors="replace")), 10,
                      what="jprofctl's first progress event")
        open(trigger, "w").close()
        jt.check_eq(p.wait(10), 4, "jprofctl exit status after access_lost")
        jt.check('"status":"access_lost"' in open(stderr).read().replace(" ", ""),
                 "no access_lost event from jprofctl")
        sh.kill()

    with t.case("a recorded shell execs an ordinary program: still recorded"):
        rec, took, sh = record_through_exec(t, d, t.prog("spin_chain"))
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check(rec.profile.get("status") in ("complete", "process_exited"),
                 "profile status %r" % rec.profile.get("status"))
        stacks = rec.stacks()
        jt.check(jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN)) > 50,
                 "the exec'd program's samples are missing:\n%s" % jt.top_stacks(stacks))
        sh.kill()

    with t.case("status shows nobody its own recordings and connections, not root's"):
        w = t.workload("spin_chain", 60, user=None)
        root_c = [d.client() for _ in range(3)]
        rid = root_c[0].start_record(pid=w.pid, duration_ms=30000)
        jt.wait_until(lambda: root_c[1].status()["sessions"]["active"] >= 1, 10,
                      what="root's recording to be listed")
        mine = d.client(user="nobody")
        st = mine.status()
        jt.check_eq(st["sessions"]["active"], 0, "nobody's sessions.active beside root's recording")
        jt.check_eq(st["sessions"]["list"], [], "nobody's sessions.list")
        jt.check_eq(st["clients"], 1, "nobody's clients beside root's 3 connections")
        jt.check("gate" not in st["sessions"] and "attach" not in st,
                 "nobody sees the start gates or attach helpers: %r" % sorted(st))
        own = t.workload("spin_chain", 60)
        rid2 = mine.start_record(pid=own.pid, duration_ms=30000)
        jt.wait_until(lambda: mine.status()["sessions"]["active"] == 1, 10,
                      what="nobody's own recording to be counted")
        st = mine.status()
        jt.check_eq([e["uid"] for e in st["sessions"]["list"]], [65534], "nobody's list")
        rst = root_c[1].status()
        jt.check(rst["sessions"]["active"] >= 2 and rst["clients"] >= 4 and
                 "gate" in rst["sessions"], "root's status: %r" % rst["sessions"])
        mine.send("cancel", target=rid2)
        root_c[0].send("cancel", target=rid)
        for c in root_c + [mine]:
            c.close()
        w.kill()
        own.kill()

    with t.case("root is still answered"):
        d.check_root_answered()


jt.run(main)
