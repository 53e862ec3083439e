"""Issue 26, points 1 and 2: one user's file never names another user's
frames. A build-id is only a claim: nobody's copy of spin_chain with its
functions renamed POISONED_* keeps the original's build-id (objcopy does
not recompute it). Before, whichever of the two files the daemon read first
named both (root's profile showed POISONED_spin), and a binary without a
build-id was named with whatever ELF had been loaded last. Now symbol and
unwind tables are shared by build-id only between files no user could write
(root's, not group/other-writable), and every other file has its own.

Each step records one process with its own daemon view (record --pid), so
the file read first is the one the step says."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

CHAIN = ["main", "a", "b", "spin"]
POISON = ["main", "POISONED_a", "POISONED_b", "POISONED_spin"]


def objcopy(src, dst, *args):
    r = subprocess.run(["objcopy"] + list(args) + [src, dst], capture_output=True, text=True)
    jt.check(r.returncode == 0, "objcopy %s: %s" % (" ".join(args), r.stderr))


def build_id(path):
    r = subprocess.run(["readelf", "-n", path], capture_output=True, text=True)
    ids = [ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines() if "Build ID" in ln]
    return ids[0] if ids else None


def record(t, d, path, user):
    """Runs path as user and records it as that user: its collapsed stacks."""
    w = t.spawn([path, "30"], user=user, what=os.path.basename(path), settle=0.3)
    c = d.client(user=user)
    rec = c.record(pid=w.pid, duration_ms=1500, interval_us=10000, timeout=30)
    c.close()
    w.kill()
    jt.check(rec.profile is not None, "recording of %s failed: %s" % (path, rec.describe()))
    return rec.stacks()


def share(stacks, chain):
    total = jt.total_samples(stacks)
    return jt.samples_matching(stacks, lambda f: jt.has_seq(f, chain)), total


def main(t):
    d = t.start_daemon()
    jt.user_ids(jt.SECOND_USER)
    original = t.prog("spin_chain")
    st = os.stat(original)
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise jt.Skip("%s is not root's and unwritable by others (built as another user?): "
                      "root's side of the attack needs such a file" % original)
    mine = t.mkdtemp("nobody-", owner="nobody")
    poisoned = os.path.join(mine, "spin_chain")
    objcopy(original, poisoned, "--redefine-sym", "a=POISONED_a", "--redefine-sym",
            "b=POISONED_b", "--redefine-sym", "spin=POISONED_spin")
    nobid = os.path.join(mine, "spin_nobid")
    objcopy(original, nobid, "--remove-section", ".note.gnu.build-id")
    for f in (poisoned, nobid):
        os.chown(f, *jt.nobody_ids())
        os.chmod(f, 0o755)
    jt.check_eq(build_id(poisoned), build_id(original), "the poisoned copy's build-id")
    jt.check(build_id(nobid) is None, "the copy without build-id has one")

    with t.case("nobody's file claiming root's build-id does not name root's frames"):
        got, total = share(record(t, d, poisoned, "nobody"), POISON)
        jt.check(got >= 0.8 * total, "nobody's own POISONED_* names: %d of %d" % (got, total))
        stacks = record(t, d, original, None)
        got, total = share(stacks, CHAIN)
        bad = jt.samples_matching(stacks, lambda f: any("POISONED" in x for x in f))
        jt.check(bad == 0, "root's profile has %d of %d samples named by nobody's file:\n%s"
                 % (bad, total, jt.top_stacks(stacks)))
        jt.check(got >= 0.8 * total, "root's main;a;b;spin: %d of %d:\n%s"
                 % (got, total, jt.top_stacks(stacks)))

    with t.case("and root's file does not name nobody's, the other way round"):
        d.stop()
        d = t.start_daemon()
        record(t, d, original, None)
        stacks = record(t, d, poisoned, "nobody")
        got, total = share(stacks, POISON)
        jt.check(got >= 0.8 * total, "nobody's own names: %d of %d:\n%s"
                 % (got, total, jt.top_stacks(stacks)))

    with t.case("a binary without a build-id gets its own names, not the last file's"):
        stacks = record(t, d, nobid, jt.SECOND_USER)
        got, total = share(stacks, CHAIN)
        bad = jt.samples_matching(stacks, lambda f: any("POISONED" in x for x in f))
        jt.check(bad == 0 and got >= 0.8 * total,
                 "%s's build-id-less binary: %d of %d main;a;b;spin, %d named by nobody's "
                 "file:\n%s" % (jt.SECOND_USER, got, total, bad, jt.top_stacks(stacks)))


jt.run(main)
