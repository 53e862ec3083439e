"""A process whose executable was deleted after it started is still
symbolized (the daemon must not need the path to exist)."""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]


def main(t):
    d = t.start_daemon()

    with t.case("deleted executable: frames still main;a;b;spin"):
        tmp = t.mkdtemp("deleted-")
        exe = os.path.join(tmp, "spin_chain_deleted")
        shutil.copy2(t.prog("spin_chain"), exe)
        os.chmod(exe, 0o755)
        w = t.spawn([exe, "30"], user="nobody", what="spin_chain (deleted)", settle=0.5)
        os.unlink(exe)
        link = os.readlink("/proc/%d/exe" % w.pid)
        jt.check(link.endswith(" (deleted)"), "/proc/%d/exe is %r, want a deleted file"
                 % (w.pid, link))
        c = d.client()
        rec = c.record(pid=w.pid, duration_ms=3000, interval_us=10000, timeout=20)
        jt.check(rec.profile is not None, "no profile: %s" % rec.describe())
        jt.check_eq(rec.profile.get("status"), "complete", "profile status")
        stacks = rec.stacks()
        total = jt.total_samples(stacks)
        chain = jt.samples_matching(stacks, lambda f: jt.has_seq(f, CHAIN))
        jt.check(total > 0 and chain >= 0.8 * total,
                 "%d of %d samples contain main;a;b;spin, want >= 80%%:\n%s"
                 % (chain, total, jt.top_stacks(stacks)))
        c.close()
        w.kill()


jt.run(main)
