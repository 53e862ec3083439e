"""Pid reuse in the continuous host view (issue 10, point 3).

The attack: a process of jprof-test2 (the victim) burns CPU with pid X and
exits; nobody then gets pid X for a process of its own and asks the host view
for `profile --pid X --last 60s`. The host view keeps time windows; the
victim's samples lie in the same window as the attacker's, and used to be
returned to the attacker because the view kept processes by pid alone.

To get the same pid for the second process, root (the harness) sets
/proc/sys/kernel/ns_last_pid to X-1 just before starting it; the processes
themselves run as the two users. Windows are up to one hour here (a length
is chosen so that the test starts well inside one), so both processes'
samples share a window (the unsafe case). The victim is killed while
sampled and the attacker starts at once, so the victim's last samples are
drained after the attacker holds its pid: they must still count as the
victim's.

Safe outcome: the attacker's profile of pid X has its own stacks and none of
the victim's (frames, names); root's profile of pid X is the process that
has the pid now too; the victim's samples are still in the view (root asks
by name), so there was something to leak."""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

# The two processes must share one host-view window, with room to spare.
MARGIN_S = 120


def bucket_inside_now():
    """A window length (the daemon takes 1..3600 s) whose current window,
    aligned to CLOCK_MONOTONIC (Python's monotonic clock) as the daemon
    aligns it, has MARGIN_S or more left. Waiting for a fixed length's
    window to roll over cost up to two minutes."""
    now = time.monotonic()
    for b in range(3600, 4 * MARGIN_S, -1):
        if now % b < b - MARGIN_S - 10:
            return b
    raise jt.TestFailure("no window length in 480..3600 s leaves %d s at %.0f"
                         % (MARGIN_S, now))
VICTIM_FRAMES = ("spin", "b")  # spin_chain: main;a;b;spin


def profile(c, **fields):
    fields.setdefault("format", "collapsed")
    fields.setdefault("last_s", 60)
    r = c.request("profile", timeout=60, **fields)
    jt.check(r.get("ok") and r.get("type") == "profile", "profile %r failed: %r"
             % (fields, {k: v for k, v in r.items() if k != "data"}))
    return r


def samples_with(stacks, frame):
    return jt.samples_matching(stacks, lambda f: frame in f)


def spawn_with_pid(pid, argv, user, timeout=20.0):
    """Starts argv as user with exactly this pid: root points the kernel's
    next pid at it. Another process on the host may fork in between and
    take it; then wait until it is free again and retry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists("/proc/%d" % pid):
            time.sleep(0.01)
            continue
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = jt.Proc(jt.as_user_argv(user, argv), os.path.basename(argv[0]))
        if p.pid == pid:
            jt.wait_exec(p)
            return p
        p.kill()
    raise jt.TestFailure("could not start a process with pid %d within %.0f s" % (pid, timeout))


def main(t):
    jt.ensure_second_user()
    bucket_s = bucket_inside_now()
    d = t.start_daemon("--rate", "99", "--host-bucket", str(bucket_s),
                       "--host-retention", str(2 * bucket_s))
    # The daemon's start took some of the margin; fail rather than pass
    # vacuously if the victim and the attacker might not share the window.
    jt.check(time.monotonic() % bucket_s < bucket_s - MARGIN_S,
             "the %d s host-view window has less than %d s left" % (bucket_s, MARGIN_S))
    tag = "%04x" % random.getrandbits(16)
    victim_comm, attacker_comm = "victim" + tag, "attacker" + tag
    victim_bin = t._copy_bin(t.prog("spin_chain"), victim_comm)
    attacker_bin = t._copy_bin(t.prog("read_zero"), attacker_comm)
    root = d.client()

    victim = t.spawn([victim_bin, "120"], user=jt.SECOND_USER, what=victim_comm, settle=0)
    x = victim.pid
    jt.wait_until(lambda: samples_with(jt.parse_collapsed(profile(root, pid=x)["data"]), "spin")
                  >= 100, 20, 0.5, "100 host-view samples of the victim (pid %d)" % x)
    victim.kill()
    attacker = spawn_with_pid(x, [attacker_bin, "120"], "nobody")
    jt.log("victim %s (%s) had pid %d; attacker %s (nobody) has it now"
           % (victim_comm, jt.SECOND_USER, x, attacker_comm))
    nobody = d.client(user="nobody")
    jt.wait_until(lambda: samples_with(jt.parse_collapsed(profile(nobody, pid=x)["data"]),
                                       "do_reads") >= 50,
                  20, 0.5, "50 host-view samples of the attacker (pid %d)" % x)

    with t.case("nobody's profile of pid X has none of the earlier process's samples"):
        r = profile(nobody, pid=x, last_s=600, group_by="pid")
        stacks = jt.parse_collapsed(r["data"])
        roots = {jt.frames_of(s)[0] for s in stacks}
        # Samples taken after setpriv dropped to nobody and before it exec'd
        # the attacker are nobody's too, under setpriv's name.
        mine = {"[%s pid=%d]" % (attacker_comm, x), "[setpriv pid=%d]" % x}
        jt.check("[%s pid=%d]" % (attacker_comm, x) in roots and roots <= mine,
                 "processes in nobody's profile: %r, want the attacker's (and setpriv's "
                 "before its exec) only" % sorted(roots))
        for f in VICTIM_FRAMES:
            jt.check(samples_with(stacks, f) == 0, "nobody's profile of pid %d has the victim's "
                     "frame %s:\n%s" % (x, f, jt.top_stacks(stacks)))
        jt.check(samples_with(stacks, "do_reads") > 0, "nobody's profile of its own process "
                 "has none of its stacks:\n%s" % jt.top_stacks(stacks))
        raw = profile(nobody, pid=x, last_s=600, format="raw")["data"]
        jt.check(victim_comm not in raw, "nobody's raw profile names the victim")
        doc = json.loads(raw)
        names = {f["name"] for f in doc["frames"]}
        jt.check(not names & set(VICTIM_FRAMES), "victim frames in nobody's raw profile: %s"
                 % sorted(names & set(VICTIM_FRAMES)))
        comms = [p.get("comm") for p in doc["processes"]]
        jt.check(attacker_comm in comms and set(comms) <= {attacker_comm, "setpriv"},
                 "process names in nobody's raw profile: %r" % comms)

    with t.case("root's profile of pid X is the process that has it now"):
        stacks = jt.parse_collapsed(profile(root, pid=x, last_s=600)["data"])
        jt.check(samples_with(stacks, "spin") == 0 and samples_with(stacks, "do_reads") > 0,
                 "root's profile of pid %d:\n%s" % (x, jt.top_stacks(stacks)))

    with t.case("the earlier process's samples are still in the host view"):
        stacks = jt.parse_collapsed(profile(root, comm=victim_comm, last_s=600,
                                            group_by="pid")["data"])
        jt.check(samples_with(stacks, "spin") >= 100,
                 "the victim's samples are gone (nothing to leak: the test proves nothing):\n%s"
                 % jt.top_stacks(stacks))
        jt.check_eq({jt.frames_of(s)[0] for s in stacks}, {"[%s pid=%d]" % (victim_comm, x)},
                    "the victim's own profile")

    nobody.close()
    root.close()
    attacker.kill()


jt.run(main)
