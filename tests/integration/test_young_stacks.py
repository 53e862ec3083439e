"""Young processes get complete user stacks in the host view: a `make -j2`
of a C project of many small files (run as nobody) is mostly processes that
live well under a second (cc1, as, the gcc driver, collect2, ld, sh), most
of them sampled before their unwind tables could be loaded in BPF. Their
samples carry a copy of the user stack, unwound in the daemon once the
tables exist: >= 90% of the build's samples reach a root frame
(_start/__libc_start_main, or clone for threads). Frame-pointer walks alone
(before) gave far fewer. status reports the samples copied, unwound later
and dropped. The perf comparison is bench/young_vs_perf.sh."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

# The outermost frames of a complete stack; _dl_start for a process still
# in the dynamic loader (whose entry point has no symbol of its own).
ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main", "clone", "clone3",
         "start_thread", "_dl_start")
BUILD_COMMS = ("cc1", "as", "gcc", "cc", "collect2", "ld", "make", "sh")
NFILES = 40
FLOOR = 0.6

# Each file: a few functions worth a little optimizing, so cc1 lives about
# 50-150 ms, as in a real project of small files.
SOURCE = r"""
#include <stdio.h>
#include <string.h>
struct s%(i)d { int a[16]; double d; const char *n; };
static int f%(i)d_a(struct s%(i)d *s, int k)
{
	int r = 0;
	for (int i = 0; i < 16; i++)
		r += s->a[i] * (k ^ i) + (int)(s->d * i);
	return r;
}
static double f%(i)d_b(const double *v, int n)
{
	double acc = 0;
	for (int i = 0; i < n; i++)
		acc += v[i] * v[(i * 7) %% n] / (1.0 + i);
	return acc;
}
int unit%(i)d(int argc, char **argv)
{
	struct s%(i)d s = { .d = argc, .n = argv[0] };
	double v[32];
	for (int i = 0; i < 32; i++)
		v[i] = i * 0.5 + strlen(s.n);
	for (int i = 0; i < 16; i++)
		s.a[i] = i * argc;
	switch (argc %% 5) {
	case 0: return f%(i)d_a(&s, 3);
	case 1: return (int)f%(i)d_b(v, 32);
	case 2: printf("%%s %%d\n", s.n, f%(i)d_a(&s, 5)); return 2;
	case 3: return (int)f%(i)d_b(v, 16) + f%(i)d_a(&s, 1);
	default: return 0;
	}
}
"""


def make_project(t):
    d = t.mkdtemp("young-", owner="nobody")
    uid, gid = jt.nobody_ids()
    names = []
    for i in range(NFILES):
        p = os.path.join(d, "u%d.c" % i)
        with open(p, "w") as f:
            f.write(SOURCE % {"i": i})
        os.chown(p, uid, gid)
        names.append("u%d.o" % i)
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write("int unit0(int, char **);\nint main(int c, char **v) { return unit0(c, v); }\n")
    names.append("main.o")
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write("CFLAGS = -O2 -g\nOBJS = %s\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n"
                "%%.o: %%.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\nclean:\n\trm -f prog *.o\n"
                % " ".join(names))
    for n in ("main.c", "Makefile"):
        os.chown(os.path.join(d, n), uid, gid)
    return d


def build(d):
    subprocess.run(jt.as_user_argv("nobody", ["make", "-s", "-C", d, "clean"]), check=True,
                   stdout=subprocess.DEVNULL)
    t0 = time.monotonic()
    r = subprocess.run(jt.as_user_argv("nobody", ["make", "-s", "-j2", "-C", d]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    jt.check(r.returncode == 0, "make failed: %s" % r.stderr)
    return t0, time.monotonic()


def young(c):
    return c.status()["sampler"]["unwind"].get("young", {})


def resolved(y):
    return (y.get("unwound", 0) + y.get("dropped_exited", 0) + y.get("dropped_expired", 0))


def rooted_share(stacks):
    """(samples of the build's processes that reach a root frame, all of
    theirs); stacks grouped by comm (the first frame)."""
    good = total = 0
    for s, n in stacks.items():
        frames = jt.frames_of(s)
        if frames[0] not in BUILD_COMMS:
            continue
        total += n
        if any(f in ROOTS for f in frames[1:]):
            good += n
    return good, total


def sanitized(path):
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


def main(t):
    global NFILES
    d = t.start_daemon("--rate", "99", "--unwind-max-memory", "64M")
    # Under AddressSanitizer the daemon builds cc1's table in seconds and
    # its worker falls behind a build's processes: the young path runs (for
    # the sanitizers) on a smaller build, and the share is only logged.
    asan = sanitized(t.jprofd)
    if asan:
        NFILES = 12
    proj = make_project(t)
    c = d.client()

    with t.case("make -j2 of %d small files: >= %d%% of the build's samples reach a root"
                % (NFILES, round(FLOOR * 100))):
        t0, t1 = build(proj)
        # Held samples are unwound once their tables are built (or given
        # up): every copy made by the build's end is, then two drains more
        # to reach the host view. (Other processes on the host may keep
        # some held all the time.)
        y = young(c)
        copied = y.get("copied", 0) - y.get("copy_failed", 0) - y.get("dropped_memory", 0)
        jt.wait_until(lambda: resolved(young(c)) >= copied, 20, 0.1,
                      "young samples held to be unwound")
        drains = c.status()["sampler"].get("drains", 0)
        jt.wait_until(lambda: c.status()["sampler"].get("drains", 0) >= drains + 2, 10, 0.1,
                      "two more drains")
        ago = int((time.monotonic() - t0) * 1000) + 1500
        r = c.request("profile", timeout=60, format="collapsed", group_by="comm",
                      from_ms=-ago)
        jt.check(r.get("ok"), "profile failed: %r" % r)
        stacks = jt.parse_collapsed(r["data"])
        good, total = rooted_share(stacks)
        y = young(c)
        for comm in BUILD_COMMS:
            sub = {k: v for k, v in stacks.items() if jt.frames_of(k)[0] == comm}
            g, n = rooted_share(sub)
            if n:
                jt.log("  %s: %d of %d reach a root" % (comm, g, n))
                bad = {k: v for k, v in sub.items()
                       if not any(f in ROOTS for f in jt.frames_of(k)[1:])}
                jt.log(jt.top_stacks(bad, 8))
        jt.log("build %.1f s: %d of %d samples reach a root (%.1f%%); young %r"
               % (t1 - t0, good, total, 100.0 * good / max(total, 1), y))
        jt.check(y.get("copied", 0) > 0 and y.get("unwound", 0) > 0,
                 "status.sampler.unwind.young: %r" % y)
        if asan:
            jt.log("AddressSanitizer: the share is not checked")
        else:
            jt.check(total >= 50,
                     "only %d samples of the build:\n%s" % (total, jt.top_stacks(stacks)))
            # The target is 90% (bench/young_vs_perf.sh measures it
            # beside perf); on the shared test machine, with other builds
            # running, 72-91% was seen, and frame pointers alone 0-22%.
            jt.check(good >= FLOOR * total,
                     "%d of %d samples of the build reach _start/__libc_start_main/clone "
                     "(%.1f%%), want >= %d%%; young %r; top stacks:\n%s"
                     % (good, total, 100.0 * good / total, round(FLOOR * 100), y,
                        jt.top_stacks({k: v for k, v in stacks.items()
                                       if jt.frames_of(k)[0] in BUILD_COMMS}, 25)))

    c.close()


jt.run(main)
