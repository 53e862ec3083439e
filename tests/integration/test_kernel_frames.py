"""A read()-heavy process recorded by its owner (nobody) gets kernel frames,
after its user frames, in root-to-leaf order."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def main(t):
    d = t.start_daemon()

    with t.case("user frames then ksys_read/vfs_read kernel frames"):
        w = t.workload("read_zero", 30)
        out = os.path.join(t.outdir(), "out.collapsed")
        t.ctl(["record", "--pid", str(w.pid), "-d", "3s", "-o", out, "--format", "collapsed",
               "--no-progress"], user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        total = jt.total_samples(stacks)
        jt.check(total > 0, "empty profile")

        bad_order = []
        read_samples = 0
        for s, c in stacks.items():
            frames = jt.frames_of(s)
            kidx = [i for i, f in enumerate(frames) if jt.is_kernel_frame(f)]
            uidx = [i for i, f in enumerate(frames) if not jt.is_kernel_frame(f)]
            if kidx and uidx and max(uidx) > min(kidx):
                bad_order.append(s)
                continue
            if "ksys_read_[k]" in frames and "vfs_read_[k]" in frames:
                if frames.index("vfs_read_[k]") < frames.index("ksys_read_[k]"):
                    bad_order.append(s)
                    continue
            has_read = "ksys_read_[k]" in frames or "vfs_read_[k]" in frames
            if has_read and uidx and "main" in frames[:min(kidx)] and "do_reads" in frames[:min(kidx)]:
                read_samples += c
        jt.check(not bad_order, "stacks not in root-to-leaf order (user frames, then kernel "
                 "frames; ksys_read before vfs_read):\n  %s" % "\n  ".join(bad_order[:10]))
        jt.check(read_samples > 0, "no stack has main;...;do_reads user frames followed by "
                 "ksys_read_[k] or vfs_read_[k]; top stacks:\n%s" % jt.top_stacks(stacks))
        # read(64 KiB) from /dev/zero is mostly kernel time (clearing the buffer).
        jt.check(read_samples >= 0.3 * total,
                 "only %d of %d samples are in read(2) with kernel frames; top stacks:\n%s"
                 % (read_samples, total, jt.top_stacks(stacks)))
        w.kill()


jt.run(main)
