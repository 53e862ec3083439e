"""Issue 27, point 3: a frame-pointer walk stops at the first implausible
frame. Without unwind tables (a process younger than its tables, a binary
without CFI, or `--unwind frame-pointers`) user stacks are walked by frame
pointers. The kernel's walk, which the daemon used there, follows any
chain: fp_garbage's frame pointer points at itself, and every sample was
fp_selfloop repeated 127 times. The daemon's own walk takes a frame only
above the last one, and no return address into the stack or the heap.
Frame-pointer code still unwinds completely (spin_chain: main;a;b;spin from
the C library's start)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main")


def record(t, d, pid, secs):
    out = os.path.join(t.outdir(), "fp.collapsed")
    t.ctl(["record", "--pid", str(pid), "-d", "%ds" % secs, "-o", out, "-f", "collapsed",
           "--no-progress"], user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
    with open(out) as f:
        return jt.parse_collapsed(f.read())


def longest_run(frames):
    """The most times one frame follows itself."""
    best = run = 0
    for i, f in enumerate(frames):
        run = run + 1 if i and f == frames[i - 1] else 1
        best = max(best, run)
    return best


def main(t):
    d = t.start_daemon("--unwind", "frame-pointers")

    with t.case("a frame pointer that points at itself ends the walk"):
        w = t.workload("fp_garbage", 60)
        stacks = record(t, d, w.pid, 2)
        total = jt.total_samples(stacks)
        jt.check(total >= 20, "only %d samples" % total)
        ours = {s: c for s, c in stacks.items() if "fp_selfloop" in jt.frames_of(s)}
        jt.check(sum(ours.values()) >= 0.8 * total,
                 "fp_selfloop in %d of %d samples:\n%s"
                 % (sum(ours.values()), total, jt.top_stacks(stacks)))
        deepest = max(len(jt.frames_of(s)) for s in ours)
        repeats = max(longest_run(jt.frames_of(s)) for s in ours)
        jt.log("fp_garbage: %d samples, deepest stack %d frames, a frame %d times in a row"
               % (total, deepest, repeats))
        jt.check(repeats <= 2 and deepest <= 12,
                 "a looping chain was followed: a frame %d times in a row, %d frames:\n%s"
                 % (repeats, deepest, jt.top_stacks(stacks)))
        w.kill()

    with t.case("frame-pointer code still unwinds to the C library's start"):
        w = t.workload("spin_chain", 60)
        stacks = record(t, d, w.pid, 2)
        total = jt.total_samples(stacks)
        good = jt.samples_matching(
            stacks, lambda f: jt.has_seq(f, ["main", "a", "b", "spin"]) and
            any(r in f for r in ROOTS))
        jt.check(total >= 20 and good >= 0.9 * total,
                 "%d of %d samples have <libc start>..main;a;b;spin:\n%s"
                 % (good, total, jt.top_stacks(stacks)))
        w.kill()


jt.run(main)
