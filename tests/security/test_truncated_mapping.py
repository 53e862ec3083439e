"""A user truncates a file while the daemon reads it: jprofd must survive.

The unwind-table builder reads every executable file a sampled process
maps; a user's own file can be truncated at any moment, and a library is
not protected from writes while mapped. The builder used to map the file
(libelf ELF_C_READ_MMAP): a truncation during a build made the daemon's
next read of the mapping SIGBUS, and the root daemon died. Now files are
read with pread, which fails cleanly.

As nobody, a process maps copies of gcc's cc1 (the largest binary here,
~0.4 s to build a table from) executable, starts a recording of itself so
the table is built at once, and truncates each copy a little later (0 to
400 ms: some truncations land mid-build). The daemon must stay up and
answer, and the recordings must complete."""
import glob
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import jproftest as jt  # noqa: E402

ROUNDS = 8

# argv: copy dir, source binary, round. Maps the copy executable, prints
# "mapped", waits for a line on stdin, truncates, prints "truncated", then
# spins until killed (so the recording has samples).
MAPPER = r'''
import mmap, os, shutil, sys
d, src = sys.argv[1], sys.argv[2]
path = os.path.join(d, "big.%d" % os.getpid())
shutil.copyfile(src, path)
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_EXEC)
print("mapped", flush=True)
sys.stdin.readline()
os.ftruncate(fd, 0)
print("truncated", flush=True)
x = 0
while True:
    x += 1
'''



def main(t):
    cc1 = sorted(glob.glob("/usr/lib/gcc/x86_64-linux-gnu/*/cc1"))
    if not cc1:
        raise jt.Skip("no cc1 (gcc) to map")
    d = t.start_daemon()
    c = d.client()
    work = t.mkdtemp("trunc-")
    os.chmod(work, 0o777)
    script = os.path.join(work, "mapper.py")
    with open(script, "w") as f:
        f.write(MAPPER)
    os.chmod(script, 0o644)

    with t.case("files truncated while their unwind tables are built: the daemon survives"):
        for k in range(ROUNDS):
            p = subprocess.Popen(jt.as_user_argv("nobody", ["/usr/bin/python3", script, work,
                                                            cc1[-1]]),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                jt.check(jt.readline_within(p, 30) == "mapped", "the mapper did not map its copy")
                rid = c.start_record(pid=p.pid, duration_ms=1000)
                # Spread the truncations over the build (a deliberate
                # delay, not a wait for a condition).
                time.sleep(0.05 * k)
                p.stdin.write("go\n")
                p.stdin.flush()
                jt.check(jt.readline_within(p, 30) == "truncated", "the mapper did not truncate")
                rec = c.collect_record(rid, 30)
                jt.check(d.proc.running(), "jprofd died (exit %r) in round %d; stderr:\n%s"
                         % (d.proc.returncode, k, d.stderr_text()[-3000:]))
                jt.check(rec.profile is not None, "round %d: %s" % (k, rec.describe()))
            finally:
                p.kill()
                p.wait()
        st = c.status()
        unw = st["sampler"]["unwind"]
        jt.log("unwind status after the rounds: %r" % unw)
        jt.check(unw.get("builds", 0) >= 1, "no table was built: %r" % unw)


jt.run(main)
