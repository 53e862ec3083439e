"""Issue 26, point 10: `jprofctl -o` onto a device or a FIFO writes into it
and leaves it what it was. The output used to be a temporary file renamed
over the target, so root's `jprofctl record ... -o /dev/null` turned
/dev/null into a regular 0644 file (every `>/dev/null` on the host then
filled it). The device here is a copy of /dev/null's node (char 1:3) in the
test's own directory, so a regression cannot break the machine; a regular
file is still replaced atomically."""
import os
import stat
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402


def record(t, d, pid, out, user=None):
    return t.ctl(["record", "--pid", str(pid), "-d", "1s", "-o", out, "-f", "collapsed",
                  "--no-progress"], user=user, socket_path=d.socket, timeout=60, check_rc=0)


def main(t):
    d = t.start_daemon()
    w = t.workload("spin_chain", 60)
    tmp = t.mkdtemp("out-")

    with t.case("root's -o onto a character device writes into it; it stays a device"):
        dev = os.path.join(tmp, "null")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(dev, 0o666)
        r = record(t, d, w.pid, dev)
        st = os.lstat(dev)
        jt.check(stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3),
                 "%s is no longer the char device 1:3 (mode %o): jprofctl replaced it"
                 % (dev, st.st_mode))
        jt.check("wrote %s" % dev in r.stderr, "jprofctl did not say it wrote %s: %r"
                 % (dev, r.stderr))
        jt.check_eq(sorted(os.listdir(tmp)), ["null"], "files left beside the device")

    with t.case("-o onto a FIFO: the profile goes through it, the FIFO stays"):
        fifo = os.path.join(tmp, "pipe")
        os.mkfifo(fifo, 0o666)
        os.chmod(fifo, 0o666)
        got = []

        def reader():
            with open(fifo, "rb") as f:
                got.append(f.read())
        th = threading.Thread(target=reader, daemon=True)
        th.start()
        record(t, d, w.pid, fifo, user="nobody")
        th.join(30)
        jt.check(got and b"spin" in got[0], "the FIFO's reader got no profile: %r" % got[:1])
        jt.check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "%s is no longer a FIFO" % fifo)

    with t.case("-o onto an existing regular file replaces it whole"):
        path = os.path.join(tmp, "p.collapsed")
        with open(path, "w") as f:
            f.write("old contents\n" * 1000)
        record(t, d, w.pid, path)
        with open(path) as f:
            text = f.read()
        jt.check("old contents" not in text and "spin" in text, "not replaced: %r" % text[:200])
    w.kill()


jt.run(main)
