"""One user cannot take every other user's unwind tables away.

Unwind tables live in one BPF array (unwind_max_memory). A user mapping
many large binaries of distinct build-ids, and keeping the processes alive,
used to fill it with tables that are never evicted (they are in use), and
every process that came later, of any user, was left to frame pointers
(stacks cut after a frame or two). Now one user's processes hold at most
half of the rows (root's are not limited); the rest is counted in
status.sampler.unwind.uid_share.

The daemon runs with 4 MiB of tables (349,525 rows, half: 174,762) and no
host view, so only the recorded processes have tables. As nobody, a process
maps twelve copies of libc (28,000 rows each) with their build-ids changed,
so none shares a table, and is recorded. Then processes of another user
(root) are recorded: one mapping another such copy must get its table
(without the share there were 828 rows left), and a binary built without
frame pointers must be unwound by its CFI (main;uw_a;uw_b;uw_c in >= 90% of
samples)."""
import glob
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

COPIES = 12
ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main")

MAPPER = r'''
import mmap, os, sys
maps = []
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    maps.append(mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_EXEC))
print("mapped", flush=True)
x = 0
while True:
    x += 1
'''


def patch_build_id(path, k):
    """Changes the last bytes of the GNU build-id note of an ELF64 file."""
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        for i in range(shnum):
            sh = shoff + i * shentsize
            sh_type, = struct.unpack_from("<I", data, sh + 4)
            off, size = struct.unpack_from("<QQ", data, sh + 0x18)
            if sh_type != 7:  # SHT_NOTE
                continue
            namesz, descsz, ntype = struct.unpack_from("<III", data, off)
            if ntype == 3 and data[off + 12:off + 16] == b"GNU\0":  # NT_GNU_BUILD_ID
                desc = off + 12 + ((namesz + 3) & ~3)
                struct.pack_into("<I", data, desc + descsz - 4, 0xB1D00000 + k)
                f.seek(0)
                f.write(data)
                return
    raise jt.TestFailure("no build-id note in %s" % path)



def main(t):
    libc = sorted(glob.glob("/lib/x86_64-linux-gnu/libc.so.6"))
    if not libc:
        raise jt.Skip("no /lib/x86_64-linux-gnu/libc.so.6")
    d = t.start_daemon("--rate", "0", "--unwind-max-memory", "4M")
    c = d.client()
    work = t.mkdtemp("share-")
    os.chmod(work, 0o755)
    copies = []
    for k in range(COPIES + 1):  # the last one is root's
        path = os.path.join(work, "libc%d.so" % k)
        with open(libc[0], "rb") as src, open(path, "wb") as dst:
            dst.write(src.read())
        patch_build_id(path, k)
        os.chmod(path, 0o644)
        copies.append(path)
    script = os.path.join(work, "mapper.py")
    with open(script, "w") as f:
        f.write(MAPPER)
    os.chmod(script, 0o644)

    with t.case("nobody's tables stop at half of the rows; root's process is still unwound"):
        p = subprocess.Popen(jt.as_user_argv("nobody", ["/usr/bin/python3", script]
                                             + copies[:COPIES]),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        try:
            jt.check(jt.readline_within(p, 30) == "mapped", "the mapper did not map its copies")
            rec = c.record(pid=p.pid, duration_ms=1500)
            jt.check(rec.profile is not None, "nobody's recording: %s" % rec.describe())
            unw = c.status()["sampler"]["unwind"]
            jt.log("after nobody's recording: %r" % unw)
            jt.check(unw["uid_share"] >= 1, "no table was refused for nobody's share: %r" % unw)
            jt.check(unw["rows"] <= unw["rows_capacity"] // 2 + 1,
                     "nobody holds %d of %d rows" % (unw["rows"], unw["rows_capacity"]))

            # Root maps one more distinct copy: its table needs 28,000 rows.
            q = subprocess.Popen(["/usr/bin/python3", script, copies[COPIES]],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
            try:
                jt.check(jt.readline_within(q, 30) == "mapped", "root's mapper did not map its copy")
                rec = c.record(pid=q.pid, duration_ms=1000)
                jt.check(rec.profile is not None, "root's recording: %s" % rec.describe())
            finally:
                q.kill()
                q.wait()
            after = c.status()["sampler"]["unwind"]
            jt.log("after root's recording: %r" % after)
            jt.check(after["rows_full"] == 0 and after["rows"] >= unw["rows"] + 25000,
                     "root's libc copy got no table: rows %d -> %d, rows_full %d"
                     % (unw["rows"], after["rows"], after["rows_full"]))

            w = t.workload("unwind_chain_pie", "chain", 60, user=None)
            out = os.path.join(t.outdir(), "victim.collapsed")
            t.ctl(["record", "--pid", str(w.pid), "-d", "3s", "-o", out, "-f", "collapsed",
                   "--no-progress"], socket_path=d.socket, timeout=60, check_rc=0)
            with open(out) as f:
                stacks = jt.parse_collapsed(f.read())
            total = jt.total_samples(stacks)
            good = sum(n for s, n in stacks.items()
                       if jt.has_seq(jt.frames_of(s), ["main", "uw_a", "uw_b", "uw_c"]) and
                       any(r in jt.frames_of(s) for r in ROOTS))
            jt.check(total >= 50, "only %d samples of root's process" % total)
            jt.check(good >= 0.9 * total, "%d of %d samples of root's process have "
                     "main;uw_a;uw_b;uw_c (its table was crowded out?); status %r; top:\n%s"
                     % (good, total, c.status()["sampler"]["unwind"], jt.top_stacks(stacks)))
            w.kill()
        finally:
            p.kill()
            p.wait()


jt.run(main)
