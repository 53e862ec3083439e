"""Processes and threads that live shorter than a drain keep their own names:
the BPF program records the process and thread names (comm) with each
sample, so the host view and --threads do not label them "[exited]" (names
used to be read from /proc after the task was gone: 80% "[exited]" under a
fork loop)."""
import os
import resource
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

NAME = "shortlived"
RUNS = 150


def children_cpu_s():
    """CPU time of this process's reaped children (and theirs), seconds."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pid):
    """CPU time of pid, its exited threads included (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(t):
    d = t.start_daemon("--rate", "99")

    with t.case("a loop of 20 ms processes: their samples carry their own name"):
        prog = os.path.join(t.bin_dir, NAME)
        shutil.copy2(t.prog("spin_chain"), prog)
        os.chmod(prog, 0o755)
        cpu0 = children_cpu_s()
        loop = t.spawn(["/bin/sh", "-c", "i=0; while [ $i -lt %d ]; do %s 0.02; i=$((i+1)); done"
                        % (RUNS, prog)], what="fork loop", settle=0)
        loop.wait(120)
        jt.check(loop.returncode == 0, "fork loop failed: %r" % loop.returncode)
        # The CPU the loop really had (the shell reaped every process): a
        # busy machine gives 150 x 20 ms of wall time far less than 3 s.
        want = max(20, int((children_cpu_s() - cpu0) * 99 / 3))
        c = d.client()

        def sample_roots():
            r = c.request("profile", timeout=60, format="collapsed", last_s=120)
            jt.check(r.get("ok") and r.get("type") == "profile", "profile failed: %r" % (
                {k: v for k, v in r.items() if k != "data"},))
            roots = {}
            for s, n in jt.parse_collapsed(r["data"]).items():
                root = jt.frames_of(s)[0]
                roots[root] = roots.get(root, 0) + n
            return roots

        # The last processes' samples reach the host view at the next drain.
        # (Their frames may be unnamed: they are gone before symbolization;
        # the host's other processes are in the profile too.)
        roots = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            roots = sample_roots()
            if roots.get(NAME, 0) >= want:
                break
            time.sleep(0.2)
        named, exited = roots.get(NAME, 0), roots.get("[exited]", 0)
        top = sorted(roots.items(), key=lambda kv: -kv[1])[:10]
        # At 99 Hz a third of the samples the loop's CPU stands for (on a
        # quiet machine 150 x 20 ms: about 300 samples, want 100).
        jt.check(named >= want, "only %d host samples named %r (of %d 20 ms processes; want "
                 "%d); most samples by name: %r" % (named, NAME, RUNS, want, top))
        jt.check(exited <= 0.1 * named, "%d samples named [exited] beside %d named %r: "
                 "names are not taken at sample time; by name: %r" % (exited, named, NAME, top))
        c.close()

    with t.case("threads that live 30 ms are named by their own names (--threads)"):
        w = t.workload("short_threads", 60)
        out = os.path.join(t.outdir(), "t.collapsed")
        cpu0 = proc_cpu_s(w.pid)
        t.ctl(["record", "--pid", str(w.pid), "-d", "3s", "--threads", "-o", out,
               "-f", "collapsed", "--no-progress"], user="nobody", socket_path=d.socket,
              timeout=60, check_rc=0)
        # Half the samples the threads' CPU stands for at 10 ms (their
        # process's, dead threads included), at least 20.
        want = max(20, int((proc_cpu_s(w.pid) - cpu0) * 100 / 2))
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        named = exited = 0
        for s, n in stacks.items():
            frames = jt.frames_of(s)
            if "thread_spin" not in frames:
                continue
            if any(f.startswith("[short-") for f in frames[:2]):
                named += n
            elif any("exited" in f for f in frames[:2]):
                exited += n
        jt.check(named >= want, "only %d samples of thread_spin under a short-N thread (want "
                 "%d); top stacks:\n%s" % (named, want, jt.top_stacks(stacks)))
        jt.check(exited <= 0.1 * named, "%d samples of thread_spin under an [exited] thread "
                 "beside %d named: thread names are not taken at sample time" % (exited, named))
        w.kill()


jt.run(main)
