"""Java frame types (JDK 17 and 25, JVMs run as nobody, agent attached at run
time): under -Xint a method is interpreted (`_[0]` with --java-types); after
warm-up the hot method is compiled (`_[j]`) and its small callee, inlined by
the JIT, is inlined (`_[i]`); compiled by C2 it is `_[j]`, by C1 only
(-XX:TieredStopAtLevel=1) `_[1]` (JSON kind java_c1); a callee kept
interpreted shows its compiled caller as compiled; JSON carries the kind;
without --java-types collapsed names stay plain. A real program (javac, its
deep stacks mixed: interpreted, C1, C2, inlined) has every Java frame typed,
not only the leaf's: at least 90 % of its Java frames in JSON (before: 13 %)."""
import json
import os
import re

import jproftest as jt
import jvmtest as jv

RECORD_S = 3
# The JVMs run until stop_alive; recordings repeat (RECORD_S each) until a
# case has its samples: the event counts CPU time, which a loaded machine
# hands out slowly.
JVM_S = 120
ROUNDS_MAX = 8
SUFFIX = re.compile(r"^(Inlining\.(?:hot|mix|main))(_\[[0ji1]\])?$")


def record(t, d, jvm, fmt, extra=()):
    path = os.path.join(t.outdir(), "types-%d-%s.%s" % (jvm.pid, "-".join(extra) or "plain", fmt))
    r = t.ctl(["record", "--pid", str(jvm.pid), "-d", "%ds" % RECORD_S, "-i", "1ms", "-o", path,
               "--format", fmt, "--no-progress", "--java", "require"] + list(extra),
              user="nobody", socket_path=d.socket, timeout=RECORD_S + 60)
    jt.check_eq(r.returncode, 0, "jprofctl exit code (stderr: %s)" % r.stderr)
    with open(path) as f:
        return f.read()


def collapsed_until(t, d, jvm, extra, enough):
    """Collapsed stacks of consecutive recordings, summed, until enough(stacks)."""
    stacks = {}
    for _ in range(ROUNDS_MAX):
        for s, n in jt.parse_collapsed(record(t, d, jvm, "collapsed", extra)).items():
            stacks[s] = stacks.get(s, 0) + n
        if enough(stacks):
            break
    return stacks


def method_samples(stacks, method):
    """Samples with a frame of method (any type suffix)."""
    return jt.samples_matching(stacks, lambda frames: any(
        f == method or f.startswith(method + "_[") for f in frames))


def hot_samples(stacks):
    return method_samples(stacks, "Inlining.hot")


def type_counts(stacks):
    """{(method, suffix or ''): samples}, counting each frame of each stack."""
    out = {}
    for s, n in stacks.items():
        for f in jt.frames_of(s):
            m = SUFFIX.match(f)
            if m:
                key = (m.group(1), m.group(2) or "")
                out[key] = out.get(key, 0) + n
    return out


def share(counts, method, suffixes):
    total = sum(n for (m, _), n in counts.items() if m == method)
    hit = sum(n for (m, s), n in counts.items() if m == method and s in suffixes)
    return hit, total


def json_kinds(doc, name):
    """{kind: samples} of the frames named name (their total, each frame)."""
    kinds = {}

    def walk(node):
        if node.get("name") == name:
            kinds[node.get("kind")] = kinds.get(node.get("kind"), 0) + node.get("total", 0)
        for c in node.get("children", []):
            walk(c)
    walk(doc["tree"])
    return kinds


def kind_totals(doc):
    """{kind: frames} over all samples: a node's total counts it once in
    each sample that passes through it."""
    kinds = {}

    def walk(node):
        k = node.get("kind")
        if k:
            kinds[k] = kinds.get(k, 0) + node.get("total", 0)
        for c in node.get("children", []):
            walk(c)
    walk(doc["tree"])
    return kinds


TYPED = ("java_interp", "java_jit", "java_c1", "java_inlined")


def main(t):
    d = t.start_daemon(*jv.agent_args())
    for jdk, _ in jv.jdks():
        with t.case("JDK %s: javac: every Java frame typed, callers too" % jdk):
            work = t.mkdtemp("javac-", owner="nobody")
            jvm = jv.Jvm(t, jdk, "JavacLoop", JVM_S, work, settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 60, what="javac's first compilation")
            typed = untyped = 0
            for _ in range(ROUNDS_MAX):
                k = kind_totals(json.loads(record(t, d, jvm, "json")))
                typed += sum(k.get(x, 0) for x in TYPED)
                untyped += k.get("java", 0)
                if typed + untyped >= 1500:
                    break
            jt.log("JDK %s javac: Java frames typed %d, untyped %d" % (jdk, typed, untyped))
            jt.check(typed + untyped >= 1500 and typed >= 0.9 * (typed + untyped),
                     "javac: %d of %d Java frames typed" % (typed, typed + untyped))
            jvm.stop_alive()

        with t.case("JDK %s: -Xint: Java frames are interpreted" % jdk):
            jvm = jv.Jvm(t, jdk, "Inlining", JVM_S, opts=["-Xint"], settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 30, what="Inlining to warm up")
            c = type_counts(collapsed_until(t, d, jvm, ["--java-types"],
                                            lambda s: hot_samples(s) >= 300))
            jt.log("JDK %s -Xint frame types: %s" % (jdk, sorted(c.items())))
            hit, total = share(c, "Inlining.hot", ("_[0]",))
            jt.check(total >= 300 and hit == total,
                     "Inlining.hot interpreted in %d of %d samples: %s" % (hit, total, c))
            jvm.stop_alive()

        with t.case("JDK %s: C1 only: the hot method is C1-compiled" % jdk):
            jvm = jv.Jvm(t, jdk, "Inlining", JVM_S, opts=["-XX:TieredStopAtLevel=1"], settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 30, what="Inlining to warm up")
            # C1 may not inline mix(): then mix is the leaf, the one frame
            # typed from the pc, and hot() its caller of unknown type.
            c1 = c2 = 0
            kinds = []
            for _ in range(ROUNDS_MAX):
                doc = json.loads(record(t, d, jvm, "json"))
                k = {m: json_kinds(doc, m) for m in ("Inlining.hot", "Inlining.mix")}
                kinds.append(k)
                c1 += sum(v.get("java_c1", 0) for v in k.values())
                c2 += sum(v.get("java_jit", 0) for v in k.values())
                if c1 >= 300:
                    break
            jt.log("JDK %s C1 only: JSON kinds per recording: %s" % (jdk, kinds))
            jt.check(c1 >= 300 and c2 <= 0.05 * c1,
                     "hot/mix C1-compiled in %d samples, C2 in %d: %s" % (c1, c2, kinds))
            jvm.stop_alive()

        with t.case("JDK %s: callers typed by walking up from an interpreted leaf" % jdk):
            # mix() kept interpreted: its callers' types come from the
            # interpreter frame chain (hot() compiled, by its return address).
            excl = ["-XX:CompileCommand=quiet", "-XX:CompileCommand=exclude,Inlining::mix"]
            jvm = jv.Jvm(t, jdk, "Inlining", JVM_S, opts=excl, settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 30, what="Inlining to warm up")
            c = type_counts(collapsed_until(
                t, d, jvm, ["--java-types"],
                lambda s: min(hot_samples(s), method_samples(s, "Inlining.mix")) >= 300))
            jt.log("JDK %s mix excluded: frame types: %s" % (jdk, sorted(c.items())))
            hit, total = share(c, "Inlining.mix", ("_[0]",))
            jt.check(total >= 300 and hit >= 0.9 * total,
                     "Inlining.mix interpreted in %d of %d samples: %s" % (hit, total, c))
            hit, total = share(c, "Inlining.hot", ("_[j]",))
            jt.check(total >= 300 and hit >= 0.8 * total,
                     "Inlining.hot compiled in %d of %d samples: %s" % (hit, total, c))
            jvm.stop_alive()

        with t.case("JDK %s: warmed up: hot method compiled, its callee inlined" % jdk):
            jvm = jv.Jvm(t, jdk, "Inlining", JVM_S, settle=0.2)
            jt.wait_until(lambda: "ready" in jvm.output(), 30, what="Inlining to warm up")
            c = type_counts(collapsed_until(t, d, jvm, ["--java-types"],
                                            lambda s: hot_samples(s) >= 300))
            jt.log("JDK %s warm frame types: %s" % (jdk, sorted(c.items())))
            # C2 (_[j]): a C1 tier (_[1]) only before the C2 code is in.
            hit, total = share(c, "Inlining.hot", ("_[j]", "_[i]"))
            jt.check(total >= 300 and hit >= 0.8 * total,
                     "Inlining.hot C2-compiled or inlined in %d of %d samples: %s"
                     % (hit, total, c))
            jt.check(c.get(("Inlining.hot", "_[0]"), 0) <= 0.05 * total,
                     "Inlining.hot still interpreted after warm-up: %s" % c)
            inl = c.get(("Inlining.mix", "_[i]"), 0)
            mix = sum(n for (m, _), n in c.items() if m == "Inlining.mix")
            jt.check(inl >= 10 and inl >= 0.8 * mix,
                     "Inlining.mix inlined in %d of %d samples: %s" % (inl, mix, c))
            # Plain collapsed: no Java suffix, the same methods.
            plain = collapsed_until(t, d, jvm, [], lambda s: hot_samples(s) >= 300)
            jt.check(not any(re.search(r"^Inlining\..*_\[[0ji1]\]$", f)
                             for s in plain for f in jt.frames_of(s)),
                     "Java type suffixes without --java-types:\n%s" % jt.top_stacks(plain))
            jt.check(jt.samples_matching(plain, lambda fr: "Inlining.hot" in fr) >= 300,
                     "plain collapsed lost Inlining.hot:\n%s" % jt.top_stacks(plain))
            # JSON: the kind of each frame.
            doc = json.loads(record(t, d, jvm, "json"))
            kinds = json_kinds(doc, "Inlining.hot")
            jt.log("JDK %s JSON kinds of Inlining.hot: %s" % (jdk, kinds))
            jt.check("java_jit" in kinds or "java_inlined" in kinds,
                     "JSON has no compiled Inlining.hot: %s" % kinds)
            jvm.stop_alive()


jt.run(main)
