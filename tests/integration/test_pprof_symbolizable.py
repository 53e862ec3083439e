"""pprof profiles a backend can symbolize again: user locations carry the
sampled address, in a mapping with the path as mapped, start, limit, file
offset and the ELF build-id; `addr2line` on that file at the address the
mapping implies names the same function jprofd did; kernel locations carry
no address; `go tool pprof -top` shows the same names as the collapsed
output of the same recording. A function whose time goes to a helper it
calls from two lines, in turns, has a location per sampled (return)
address: both lines show, each with a sizeable share, and addr2line of
each location's address gives its line, in a recording and in the host
view's `profile --last -f pprof`; a
whole-host pprof opens in go tool pprof."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402


def go_env(t):
    home = t.mkdtemp("gohome-")
    return dict(os.environ, HOME=home, PPROF_TMPDIR=home, GOCACHE=os.path.join(home, "cache"),
                GOTOOLCHAIN="local", GOFLAGS="", GOPROXY="off", GOTELEMETRY="off")


def go_pprof(args, env):
    r = subprocess.run(["go", "tool", "pprof"] + args, capture_output=True, text=True,
                       timeout=120, env=env, stdin=subprocess.DEVNULL)
    jt.check(r.returncode == 0, "go tool pprof %s failed:\n%s" % (" ".join(args), r.stderr))
    return r.stdout


def parse_raw(text, lines=None):
    """Locations {id: (address, mapping id, [function names])} and mappings
    {id: (start, limit, offset, path, build-id)} of `go tool pprof -raw`;
    with a dict lines, the source line of each location's last (own)
    function goes to lines[id] (0: none)."""
    locs, maps, sect, cur = {}, {}, None, None
    for ln in text.splitlines():
        if ln.startswith("Locations"):
            sect = "loc"
            continue
        if ln.startswith("Mappings"):
            sect = "map"
            continue
        if sect == "loc":
            # A location without a mapping ("[unknown]", a sample whose
            # stack was lost) has no "M=": still a location, not a line of
            # the one before it.
            m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)\s+(?:M=(\d+)\s+)?(.*)$", ln)
            text = m.group(4) if m else ln.strip()
            if m:
                cur = int(m.group(1))
                locs[cur] = (int(m.group(2), 16), int(m.group(3) or 0), [text.split(" ")[0]])
            elif cur is not None and text:
                locs[cur][2].append(text.split(" ")[0])
            if cur is not None and text and lines is not None:
                # "name file:line s=0"
                ml = re.search(r":(\d+) s=\d+", text)
                lines[cur] = int(ml.group(1)) if ml else 0
        elif sect == "map":
            # "1: 0x5581a000/0x5581b000/0x1000 /path/to/file 4c2f... [FN]"
            m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+)\s+(\S+)\s*(\S*)", ln)
            if m:
                maps[int(m.group(1))] = (int(m.group(2), 16), int(m.group(3), 16),
                                         int(m.group(4), 16), m.group(5),
                                         m.group(6) if m.group(6) != "[FN]" else "")
    return locs, maps


def elf_build_id(path):
    r = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, timeout=30)
    m = re.search(r"Build ID: ([0-9a-f]+)", r.stdout)
    return m.group(1) if m else ""


def file_offset_to_vaddr(path, off):
    """Through the PT_LOAD segment holding file offset off (as addr2line wants)."""
    r = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, timeout=30)
    for ln in r.stdout.splitlines():
        f = ln.split()
        if f and f[0] == "LOAD":
            o, va, fsz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if o <= off < o + fsz:
                return off - o + va
    return None


def addr2line(path, vaddr, what=0):
    """Function name (what 0) or "file:line" (what 1) of vaddr in path."""
    r = subprocess.run(["addr2line", "-f", "-e", path, "0x%x" % vaddr], capture_output=True,
                       text=True, timeout=30)
    out = r.stdout.splitlines() if r.returncode == 0 else []
    return out[what] if len(out) > what else None


def marker_line(path, marker):
    with open(path) as f:
        for i, ln in enumerate(f, 1):
            if marker in ln:
                return i
    raise jt.TestFailure("marker %s not in %s" % (marker, path))


def sample_leaves(raw, mine=None):
    """{location id: samples} of the leaf locations of `go tool pprof -raw`'s
    samples ("  count  nanoseconds: loc loc ..."); with a set mine, of the
    first location in it (a sample interrupted in the kernel has kernel
    frames at its leaf)."""
    leaves, sect = {}, False
    for ln in raw.splitlines():
        if ln.startswith("Samples"):
            sect = True
            continue
        if sect and (ln.startswith("Locations") or ln.startswith("Mappings")):
            break
        m = re.match(r"\s*(\d+)\s+\d+:\s+([\d ]+)$", ln) if sect else None
        if m:
            ids = [int(x) for x in m.group(2).split()]
            leaf = next((i for i in ids if i in mine), None) if mine is not None else ids[0]
            if leaf is not None:
                leaves[leaf] = leaves.get(leaf, 0) + int(m.group(1))
    return leaves


def record_raw(t, c, pid, env, interval_us=5000):
    """Records pid for 1.5 s as pprof: (file, `go tool pprof -raw` text,
    locations, mappings)."""
    rec = c.record(pid=pid, duration_ms=1500, interval_us=interval_us, format="pprof",
                   progress=False)
    path = os.path.join(t.mkdtemp("pp-"), "%d.pb.gz" % pid)
    with open(path, "wb") as f:
        f.write(rec.data())
    raw = go_pprof(["-raw", path], env)
    locs, maps = parse_raw(raw)
    return path, raw, locs, maps


def line_two_shares(prog, raw):
    """Samples of line_two's locations by source line (0: none read yet),
    their total, and the locations: each location's line checked against
    addr2line of its address."""
    locs, maps = parse_raw(raw)
    lines = {}
    parse_raw(raw, lines)
    ours = {lid: l for lid, l in locs.items() if l[2][-1] == "line_two" and
            maps.get(l[1], (0, 0, 0, ""))[3] == prog}
    leaves = sample_leaves(raw, set(ours))
    share = {}
    for lid, (addr, mid, _) in ours.items():
        m = maps[mid]
        if not lines[lid]:
            # Its line was not read yet when the profile was rendered (a
            # frame first seen in the last drain): nothing to check.
            share[0] = share.get(0, 0) + leaves.get(lid, 0)
            continue
        vaddr = file_offset_to_vaddr(prog, addr - m[0] + m[2])
        got = addr2line(prog, vaddr, 1) if vaddr is not None else None
        gl = re.search(r":(\d+)", got or "")
        jt.check(gl and int(gl.group(1)) == lines[lid],
                 "location %d (0x%x, line %d): addr2line says %r" % (lid, addr, lines[lid], got))
        share[lines[lid]] = share.get(lines[lid], 0) + leaves.get(lid, 0)
    return share, sum(leaves.values()), {lid: (l, leaves.get(lid, 0)) for lid, l in ours.items()}


def check_two_lines(prog, raw, want, what, min_share=0.2):
    """Both hot lines of line_two (want) have their own locations, each with
    at least min_share of its samples (and at least one)."""
    share, total, ours = line_two_shares(prog, raw)
    jt.log("%s: %d locations, samples per line (0: none yet) %r of %d"
           % (what, len(ours), share, total))
    jt.check(total >= 40, "%s: only %d samples" % (what, total))
    for ln in sorted(want):
        jt.check(share.get(ln, 0) >= max(1, min_share * total),
                 "%s: line %d has %d of %d samples in line_two (lines %r):\n%s"
                 % (what, ln, share.get(ln, 0), total, share,
                    "\n".join("%r %d" % lc for lc in ours.values())))


def check_top_lines(path, want, env):
    top = go_pprof(["-lines", "-top", path], env)
    for ln in sorted(want):
        jt.check(re.search(r"line_two \S*line_spin\.c:%d\b" % ln, top),
                 "go tool pprof -lines -top lacks line_two at line %d:\n%s" % (ln, top))


def main(t):
    d = t.start_daemon("--rate", "99")
    env = go_env(t)
    spin = t.prog("spin_chain")
    # read_zero loops on read(): kernel frames in every stack.
    w = t.spawn([spin, "60"], settle=0.2)
    rz = t.workload("read_zero", 60)
    c = d.client()

    with t.case("pprof of a native process: addresses, mappings, build-id, same names"):
        path, raw, locs, maps = record_raw(t, c, w.pid, env)
        jt.check(maps and locs, "no mappings or locations in:\n%s" % raw[-3000:])
        ours = [(mid, m) for mid, m in maps.items() if m[3] == spin]
        jt.check(len(ours) >= 1, "no mapping with the path as mapped (%s):\n%s"
                 % (spin, "\n".join(map(str, maps.values()))))
        jt.check(all(m[4] == elf_build_id(spin) and m[4] for _, m in ours),
                 "build-id of %s: %r, readelf says %r" % (spin, ours, elf_build_id(spin)))
        jt.check(all(os.path.isabs(m[3]) or m[3].startswith("[") for m in maps.values()),
                 "a mapping with a basename: %r" % list(maps.values()))
        checked = 0
        for lid, (addr, mid, fns) in locs.items():
            m = maps.get(mid)
            if not m or m[3] != spin:
                continue
            jt.check(m[0] <= addr < m[1], "location %d: 0x%x outside its mapping %r" % (lid, addr, m))
            vaddr = file_offset_to_vaddr(spin, addr - m[0] + m[2])
            region = re.match(r"%s\+0x([0-9a-f]+)$" % re.escape(os.path.basename(spin)), fns[-1])
            if region and vaddr is not None:
                # Code without a symbol (a PLT stub: spin() calls through
                # one) is named by its region's start, which the address
                # lies at or after, within a page.
                start = int(region.group(1), 16)
                jt.check(start <= vaddr < start + 4096,
                         "location %d (0x%x, vaddr 0x%x) outside its region %s"
                         % (lid, addr, vaddr, fns[-1]))
                checked += 1
                continue
            got = addr2line(spin, vaddr) if vaddr is not None else None
            jt.check_eq(got, fns[-1], "addr2line of location %d (0x%x) in %s" % (lid, addr, spin))
            checked += 1
        jt.log("%d locations of %s symbolized again by addr2line; mappings:\n%s"
               % (checked, spin, "\n".join("%r" % (m,) for m in maps.values())))
        jt.check(checked >= 4, "only %d locations of %s checked:\n%s" % (checked, spin, raw[-3000:]))
        top = go_pprof(["-top", "-nodecount=5", path], env)
        jt.check(re.search(r"\bspin\s*$", top, re.M), "spin not in go tool pprof -top:\n%s" % top)
        # The same recording in collapsed form names the same functions.
        rec2 = c.record(pid=w.pid, duration_ms=1000, interval_us=5000, progress=False)
        names = {fr for st in rec2.stacks() for fr in jt.frames_of(st)}
        for fn in ("main", "a", "b", "spin"):
            jt.check(fn in names, "%s missing from the collapsed output: %r" % (fn, sorted(names)))
            jt.check(any(fn in l[2] for l in locs.values()), "%s missing from pprof" % fn)

    with t.case("kernel locations carry no address"):
        _, raw, locs, maps = record_raw(t, c, rz.pid, env)
        kmaps = {mid for mid, m in maps.items() if m[3].startswith("[kernel")}
        kern = [lid for lid, l in locs.items() if l[1] in kmaps]
        jt.check(kern, "no kernel locations in a read() loop's profile:\n%s" % raw[-3000:])
        jt.check(all(locs[lid][0] == 0 for lid in kern),
                 "kernel locations with an address: %r" % [locs[lid] for lid in kern if locs[lid][0]])
        user = [l for l in locs.values() if l[0]]
        jt.check(user, "no user location with an address in read_zero's profile")

    with t.case("one function, two hot call sites: a location per address, each with its line"):
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "progs", "line_spin.c")
        want = {marker_line(src, "LINES_TWO_A"), marker_line(src, "LINES_TWO_B")}
        prog = t.prog("line_spin")
        two = t.spawn([prog, "60", "two"], what="line_spin two")
        path, raw, locs, maps = record_raw(t, c, two.pid, env, interval_us=1000)
        check_two_lines(prog, raw, want, "line_two")
        check_top_lines(path, want, env)

    with t.case("profile --last -f pprof (the host view): a location per address, with its line"):
        path = os.path.join(t.mkdtemp("pp-"), "last.pb.gz")

        def host_view_raw():
            t.ctl(["profile", "--pid", str(two.pid), "--last", "60s", "-f", "pprof", "-o", path],
                  socket_path=d.socket, check_rc=0)
            raw = go_pprof(["-raw", path], env)
            return raw if line_two_shares(prog, raw)[1] >= 200 else None

        # 99 Hz host sampling: about 2 s of line_spin's CPU.
        raw = jt.wait_until(host_view_raw, 60, interval=0.5,
                            what="200 samples of line_two in the host view")
        check_two_lines(prog, raw, want, "profile --last")
        check_top_lines(path, want, env)

    with t.case("the first pprof of a new binary carries its names and lines ([FN][FL][LN])"):
        # A binary the daemon has never read lines of, profiled as pprof
        # once: its lines are read while the profile renders (off the loop),
        # not by a later scrape (issue 27 item 6: 6.3% of locations had a
        # line in a first scrape, and no mapping said it had functions).
        fresh = t._copy_bin(prog, "line_spin_fresh")
        # A build-id of its own: nothing read for line_spin serves it.
        old_bid = bytes.fromhex(elf_build_id(fresh))
        with open(fresh, "rb") as f:
            image = f.read()
        jt.check(image.count(old_bid) == 1, "line_spin's build-id is not found once")
        with open(fresh, "wb") as f:
            f.write(image.replace(old_bid, bytes(b ^ 0x5a for b in old_bid)))
        f2 = t.spawn([fresh, "60", "two"], what="line_spin_fresh two")
        jt.wait_until(lambda: sum(n for st, n in jt.parse_collapsed(c.request(
            "profile", timeout=60, pid=f2.pid, last_s=60, format="collapsed")["data"]).items()
            if "line_two" in st) >= 100, 60, interval=0.5,
            what="100 samples of line_spin_fresh in the host view")
        path = os.path.join(t.mkdtemp("pp-"), "first.pb.gz")
        t.ctl(["profile", "--pid", str(f2.pid), "--last", "60s", "-f", "pprof", "-o", path],
              socket_path=d.socket, check_rc=0)
        raw = go_pprof(["-raw", path], env)
        share, total, _ = line_two_shares(fresh, raw)
        flags = [ln for ln in raw.splitlines() if fresh in ln and re.match(r"\s*\d+: 0x", ln)]
        jt.log("first pprof of line_spin_fresh: samples per line %r of %d; mapping %r"
               % (share, total, flags))
        jt.check(total >= 100 and share.get(0, 0) <= 0.1 * total,
                 "%d of %d samples of line_two have no line in the first pprof" %
                 (share.get(0, 0), total))
        jt.check(flags and all("[FN]" in ln and "[LN]" in ln and "[FL]" in ln for ln in flags),
                 "the mapping of line_spin_fresh lacks [FN][FL][LN]: %r" % flags)
        f2.kill()

    with t.case("a whole-host pprof (locations per process and address) opens in go tool pprof"):
        rec = c.record(all=True, duration_ms=1000, interval_us=10000, format="pprof", progress=False)
        path = os.path.join(t.mkdtemp("pp-"), "host.pb.gz")
        with open(path, "wb") as f:
            f.write(rec.data())
        top = go_pprof(["-lines", "-top", "-cum", "-focus=line_two", path], env)
        jt.check(re.search(r"line_two \S*line_spin\.c:\d+", top),
                 "line_two with a line missing from the whole host's -lines -top:\n%s" % top)
    two.kill()

    w.kill()
    rz.kill()
    c.close()


jt.run(main)
