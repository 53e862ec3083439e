#!/usr/bin/env python3
"""The docs against the code: names that drift when one side changes.

  docs_check.py SRC_DIR [JPROFD JPROFCTL]

Compares, in both directions where both sides are lists:
  - configuration keys: daemon/api/config.c, the table of docs/operations.md,
    the shipped packaging/jprofd.conf (and with JPROFD, the defaults that
    `jprofd --check-config` prints against both);
  - jprofd's flags: its getopt table, `jprofd --help`, docs/operations.md;
  - metrics: daemon/api/metrics.c and the table of docs/metrics.md (and any
    jprofd_* name any doc mentions must exist);
  - protocol: request members per command (proto/jprof_proto.c) and the
    tables of docs/protocol.md; error codes (proto/jprof_proto.h) and its
    error table; response members and warning codes the daemon sends must be
    named in docs/protocol.md or docs/jvm.md;
  - formats: names, aliases and -o extensions (proto/jprof_formats.c) and
    the table of docs/formats.md;
  - links between README.md and docs/*.md: the file exists, the anchor is
    a heading there;
  - jprofctl: each command's options (client/) and the synopsis of
    docs/protocol.md (and with JPROFCTL, `jprofctl CMD --help`).
Standard library only; reads files, runs the two binaries with --help and
--check-config (no root, no daemon). Exit 1 with a list of differences.
"""
import os
import re
import subprocess
import sys
import tempfile

problems = []


def bad(msg):
    problems.append(msg)


def read(src, path):
    try:
        with open(os.path.join(src, path), encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        bad(f"{path}: {e.strerror}")
        return ""


def section(text, heading):
    """The lines under a markdown heading, up to the next heading of any level."""
    m = re.search(r"^#+ " + re.escape(heading) + r"\s*$", text, re.M)
    if not m:
        bad(f"no heading '{heading}'")
        return ""
    rest = text[m.end():]
    n = re.search(r"^#+ ", rest, re.M)
    return rest[: n.start()] if n else rest


def table_keys(text):
    """First-column `names` of the markdown table rows in text."""
    return re.findall(r"^\| `([A-Za-z0-9_.-]+)`[^|]*\|", text, re.M)


def diff(what, code, docs, code_name, docs_name):
    for k in sorted(set(code) - set(docs)):
        bad(f"{what}: {k} is in {code_name} but not in {docs_name}")
    for k in sorted(set(docs) - set(code)):
        bad(f"{what}: {k} is in {docs_name} but not in {code_name}")


def c_strings(s):
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', s))


def check_config(src, jprofd):
    code = re.findall(r'\[CONFIG_\w+\] = "(\w+)"', read(src, "daemon/api/config.c"))
    ops = read(src, "docs/operations.md")
    rows = {}
    for line in section(ops, "Configuration").splitlines():
        m = re.match(r"^\| `(\w+)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    diff("config key", code, rows, "config.c", "docs/operations.md's table")
    conf = dict(re.findall(r"^#(\w+) =[ ]?(.*)$", read(src, "packaging/jprofd.conf"), re.M))
    diff("config key", code, conf, "config.c", "packaging/jprofd.conf")

    def doc_default(k):
        m = re.match(r"`([^`]*)`", rows.get(k, ""))
        return m.group(1) if m else ""  # "empty (off)" and the like: no value

    for k in sorted(set(rows) & set(conf)):
        # the agent's path is the install's (the package's in jprofd.conf)
        if k != "agent" and doc_default(k) != conf[k]:
            bad(f"config default of {k}: docs/operations.md says '{doc_default(k)}', "
                f"packaging/jprofd.conf '{conf[k]}'")
    if not jprofd:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as empty:
        out = subprocess.run([jprofd, "--check-config", "--config", empty.name],
                             capture_output=True, text=True, timeout=60)
    eff = dict(re.findall(r"^\s*(\w+) = ?(.*?)\s*$", out.stdout, re.M))
    if out.returncode != 0 or not eff:
        bad(f"jprofd --check-config with an empty file: exit {out.returncode}, "
            f"{out.stdout[:200]!r} {out.stderr[:200]!r}")
        return
    for k in code:
        if k in ("agent", "socket"):
            continue  # build-specific paths
        if k not in eff:
            bad(f"config key {k}: not printed by jprofd --check-config")
        elif k in rows and doc_default(k) != eff[k]:
            bad(f"config default of {k}: jprofd says '{eff[k]}', docs/operations.md "
                f"'{doc_default(k)}'")


def check_daemon_flags(src, jprofd):
    main = read(src, "daemon/main.c")
    code = set(re.findall(r'\{ "([a-z-]+)", (?:required|no)_argument', main))
    usage = main[main.index("static void usage"): main.index("static int parse_args")]
    helptext = set(re.findall(r"--([a-z][a-z-]+)", c_strings(usage)))
    diff("jprofd flag", code, helptext, "its getopt table", "its usage text")
    if jprofd:
        out = subprocess.run([jprofd, "--help"], capture_output=True, text=True, timeout=60)
        diff("jprofd flag", code, set(re.findall(r"--([a-z][a-z-]+)", out.stdout)),
             "its getopt table", "jprofd --help")
    ops = read(src, "docs/operations.md")
    m = re.search(r"Command-line flags \((.*?)\) override the file", ops, re.S)
    if not m:
        bad("docs/operations.md: no 'Command-line flags (...) override the file'")
        return
    docs = set(re.findall(r"`--([a-z-]+)`", m.group(1)))
    docs |= {"config", "check-config", "help", "version"}
    diff("jprofd flag", code, docs, "daemon/main.c", "docs/operations.md")


def check_metrics(src):
    m = read(src, "daemon/api/metrics.c")
    code = set(re.findall(r'\b(?:counter|gauge|fcounter|family)\(\s*&?o,\s*"(jprofd_\w+)"', m))
    code |= set(re.findall(r'\{\s*"(jprofd_\w+)",', m))
    code |= set(re.findall(r'const char \*name = "(jprofd_\w+)"', m))
    table = set(re.findall(r"^\| `(jprofd_\w+)`", read(src, "docs/metrics.md"), re.M))
    diff("metric", code, table, "daemon/api/metrics.c", "docs/metrics.md")
    hist = {n + s for n in code for s in ("_bucket", "_sum", "_count")}
    for doc in sorted(os.listdir(os.path.join(src, "docs"))) + ["../README.md"]:
        if not doc.endswith(".md"):
            continue
        text = read(src, os.path.join("docs", doc))
        for name in sorted(set(re.findall(r"\bjprofd_[a-z][a-z0-9_]*[a-z0-9]\b", text))):
            if name not in code and name not in hist and name != "jprofd_agent" \
                    and not any(c.startswith(name + "_") for c in code):
                bad(f"metric {name} (docs/{doc}) does not exist")


def check_protocol(src):
    proto = read(src, "proto/jprof_proto.c")
    doc = read(src, "docs/protocol.md")
    for cmd in ("hello", "record", "cancel", "profile"):
        m = re.search(r"static const char \*const " + cmd + r"\[\] = \{(.*?)\};", proto, re.S)
        if not m:
            bad(f"proto/jprof_proto.c: no member list for {cmd}")
            continue
        code = re.findall(r'"(\w+)"', m.group(1))
        docs = table_keys(section(doc, cmd))
        diff(f"{cmd} member", code, docs, "proto/jprof_proto.c", "docs/protocol.md")
    errs = re.findall(r'#define JPROF_E_\w+ "(\w+)"', read(src, "proto/jprof_proto.h"))
    diff("error code", errs, table_keys(section(doc, "Errors")), "proto/jprof_proto.h",
         "docs/protocol.md's error table")
    named = set(re.findall(r"[A-Za-z0-9_]+", doc + read(src, "docs/jvm.md")))
    sent = set()
    warnings = set()
    for d in ("daemon", "proto"):
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in files:
                if not f.endswith(".c"):
                    continue
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    c = fh.read()
                sent |= set(re.findall(r'\b(?:jprof_json_add_u64|json_object_object_add|proto_add)'
                                       r'\(\s*[\w>.-]+\s*,\s*"(\w+)"', c))
                warnings |= set(re.findall(r'session_send_warning\([^,]+,\s*"(\w+)"', c))
    for k in sorted(sent - named):
        bad(f"response member {k}: sent by the daemon, named in neither docs/protocol.md "
            "nor docs/jvm.md")
    for k in sorted(warnings - named):
        bad(f"warning code {k}: sent by the daemon, not in docs/protocol.md or docs/jvm.md")


def check_jprofctl(src, jprofctl):
    run_h = read(src, "client/run.h")
    m = re.search(r"#define RUN_OPTIONS(.*?)\n\n", run_h, re.S)
    run_opts = re.findall(r'\{ "([a-z-]+)"', m.group(1)) if m else []
    doc = section(read(src, "docs/protocol.md"), "jprofctl")
    synopsis = re.search(r"```\n(.*?)```", doc, re.S)
    synopsis = synopsis.group(1) if synopsis else ""
    for cmd in ("status", "record", "profile", "formats"):
        c = read(src, f"client/cmd_{cmd}.c")
        m = re.search(r"static const struct option opts\[\] = \{(.*?)\};", c, re.S)
        opts = set(re.findall(r'\{ "([a-z-]+)"', m.group(1))) if m else set()
        if m and "RUN_OPTIONS" in m.group(1):
            opts |= set(run_opts)
        opts -= {"help", "socket"}  # every command's, in the synopsis once
        line = re.search(r"^jprofctl (?:\[--socket PATH\] )?" + cmd + r"\b(.*?)(?=^jprofctl|\Z)",
                         synopsis, re.S | re.M)
        shown = set(re.findall(r"--([a-z][a-z-]*)", line.group(1))) if line else set()
        # short forms in the synopsis stand for their long option
        for short, long_ in (("-d", "duration"), ("-i", "interval"), ("-e", "event"),
                             ("-o", "output"), ("-p", "pid")):
            if line and re.search(r"\[" + short + r" ", line.group(1)):
                shown.add(long_)
        diff(f"jprofctl {cmd} option", opts, shown, f"client/cmd_{cmd}.c",
             "the synopsis of docs/protocol.md")
        if jprofctl:
            out = subprocess.run([jprofctl, cmd, "--help"], capture_output=True, text=True,
                                 timeout=60)
            helped = set(re.findall(r"--([a-z][a-z-]*)", out.stdout + out.stderr))
            for o in sorted(opts - helped):
                bad(f"jprofctl {cmd} option --{o}: not in `jprofctl {cmd} --help`")


def check_formats(src):
    c = read(src, "proto/jprof_formats.c")
    arrays = {m.group(1): re.findall(r'"([^"]+)"', m.group(2))
              for m in re.finditer(r"static const char \*const (\w+)\[\] = \{(.*?)\};", c)}
    code = {}
    for m in re.finditer(r'\[JPROF_FMT_\w+\] = \{ JPROF_FMT_\w+, "(\w+)", (\w+), (\w+),', c):
        name, aliases, exts = m.groups()
        code[name] = (set([name] + arrays.get(aliases, [])), set(arrays.get(exts, [])))
    docs = {}
    for line in read(src, "docs/formats.md").splitlines():
        m = re.match(r"^\| \[[^]]+\]\(#[^)]+\) \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            names = re.findall(r"`([a-z0-9_-]+)`", m.group(1))
            if names:
                docs[names[0]] = (set(names), set(re.findall(r"`(\.[a-z.]+)`", m.group(2))))
    diff("format", code, docs, "proto/jprof_formats.c", "docs/formats.md's table")
    for f in sorted(set(code) & set(docs)):
        if code[f] != docs[f]:
            bad(f"format {f}: names/extensions {sorted(code[f][0])} {sorted(code[f][1])} in "
                f"proto/jprof_formats.c, {sorted(docs[f][0])} {sorted(docs[f][1])} in docs/formats.md")


def heading_anchor(h):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped."""
    return re.sub(r"[^\w\- ]", "", h.replace("`", "").strip().lower()).replace(" ", "-")


def check_links(src):
    files = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(src, "docs"))
                                   if f.endswith(".md"))
    anchors = {}
    for f in files:
        seen = {}
        for h in re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", read(src, f), flags=re.S),
                            re.M):
            a = heading_anchor(h)
            anchors.setdefault(f, set()).add(a if a not in seen else f"{a}-{seen[a]}")
            seen[a] = seen.get(a, 0) + 1
    for f in files:
        for target, anchor in re.findall(r"\]\(([^)#\s:]*)(?:#([^)\s]+))?\)", read(src, f)):
            t = os.path.normpath(os.path.join(os.path.dirname(f), target)) if target else f
            if not os.path.exists(os.path.join(src, t)):
                bad(f"{f}: link to {target}, which does not exist")
            elif anchor and t.endswith(".md") and anchor not in anchors.get(t, set()):
                bad(f"{f}: link to {target}#{anchor}, not a heading there")


def main():
    if len(sys.argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    jprofd, jprofctl = (sys.argv[2], sys.argv[3]) if len(sys.argv) == 4 else (None, None)
    check_config(src, jprofd)
    check_daemon_flags(src, jprofd)
    check_metrics(src)
    check_protocol(src)
    check_jprofctl(src, jprofctl)
    check_formats(src)
    check_links(src)
    for p in problems:
        print(p)
    print(f"docs_check: {len(problems)} difference(s)" if problems else "docs_check: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
