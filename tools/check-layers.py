#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Check a daemon's layers (docs/HACKING.md "Layers a machine checks").

Each daemons/<name>/LAYERS lists the daemon's files by layer, top to bottom:

    LAYER: FILE FILE ...        one line per layer (continuation lines start
                                with white space)
    leaf: FILE ...              files any layer may use; they use only leaves
    allow FILE SYMBOL  # why    one upward name kept on purpose, with its reason

A file may include the headers of its own layer and of the layers below it,
and name (call, take the address of) the functions and tables defined in the
.c files of its own layer and below. Anything else is an upward edge and
fails the check, naming the file, the line and the name. Every .c and .h of
the daemon's directory must be listed. Run by `make check`; `--graph` prints
the upward edges that remain allowed.

Names are found as ctags would: a function defined at column 0 (the house
style puts the return type on the line before) or a table `TYPE name = {`
at column 0, not static. Comments, strings and `.member`/`->member` are
stripped before looking for names."""
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAEMONS = ("coordinatord", "routerd")

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"' + r"|'(?:\\.|[^'\\\n])*'")
MEMBER = re.compile(r"(?:\.|->)\s*[A-Za-z_]\w*")
FUNC_DEF = re.compile(r"^([A-Za-z_]\w*)\(", re.M)
DATA_DEF = re.compile(r"^(?!static\b)(?:const\s+)?(?:struct\s+)?[A-Za-z_]\w*\s+(?:const\s+)?\**"
                      r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=", re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def strip(text):
    """Comments and strings blanked (newlines kept, so lines still count)."""
    keep_lines = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    text = COMMENT.sub(keep_lines, text)
    text = STRING.sub(keep_lines, text)
    return text


def parse_layers(path):
    layers, leaves, allow = [], set(), {}
    current = None
    for n, raw in enumerate(open(path), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if raw[0].isspace() and current is not None:
            current[1].extend(line.split())
            continue
        m = re.match(r"allow\s+(\S+)\s+(\S+)$", line)
        if m:
            if "#" not in raw:
                sys.exit(f"{path}:{n}: an allowed upward name needs its reason after '#'")
            allow.setdefault(m.group(1), set()).add(m.group(2))
            current = None
            continue
        m = re.match(r"([\w-]+):\s*(.*)$", line)
        if not m:
            sys.exit(f"{path}:{n}: expected 'LAYER: FILES', 'leaf: FILES' or "
                     f"'allow FILE SYMBOL  # why'")
        files = m.group(2).split()
        if m.group(1) == "leaf":
            leaves.update(files)
            current = (None, files)
            continue
        current = (m.group(1), files)
        layers.append(current)
    rank = {}
    for i, (_, files) in enumerate(layers):
        for f in files:
            if f in rank or f in leaves:
                sys.exit(f"{path}: {f} is listed twice")
            rank[f] = i
    return layers, rank, leaves, allow


def definitions(path):
    """Non-static functions and tables defined in a .c file."""
    text = strip(open(path).read())
    lines = text.split("\n")
    out = set()
    for m in FUNC_DEF.finditer(text):
        ln = text.count("\n", 0, m.start())
        prev = next((lines[i] for i in range(ln - 1, -1, -1) if lines[i].strip()), "")
        if re.match(r"\s*(static\b|.*\bstatic\b)", prev) or prev.rstrip().endswith(";"):
            continue
        if prev.rstrip().endswith((",", "(")) or m.group(1) in ("if", "for", "while", "switch"):
            continue
        if not m.group(1).isupper():  # a macro used at column 0
            out.add(m.group(1))
    for m in DATA_DEF.finditer(text):
        out.add(m.group(1))
    return out


def check(daemon, d=None):
    d = d or os.path.join(TOP, "daemons", daemon)
    layers_path = os.path.join(d, "LAYERS")
    layers, rank, leaves, allow = parse_layers(layers_path)
    names = {n: layers[i][0] for n, i in rank.items()}
    files = sorted(f for f in os.listdir(d) if f.endswith((".c", ".h")))
    problems, allowed_used = [], []
    for f in files:
        if f not in rank and f not in leaves:
            problems.append(f"daemons/{daemon}/{f}: not in {daemon}/LAYERS")
    for f in rank:
        if f not in files:
            problems.append(f"daemons/{daemon}/LAYERS: {f} does not exist")

    def above(user, target):
        """Is target in a layer above user's? Leaves use only leaves."""
        if target in leaves:
            return False
        if user in leaves:
            return True
        return rank[target] < rank[user]

    defined = {}
    for f in files:
        if f.endswith(".c") and (f in rank or f in leaves):
            for name in definitions(os.path.join(d, f)):
                defined.setdefault(name, f)
    for f in files:
        if f not in rank and f not in leaves:
            continue
        raw = open(os.path.join(d, f)).read()
        for m in INCLUDE.finditer(raw):
            h = m.group(1)
            if h in rank or h in leaves:
                if above(f, h):
                    ln = raw.count("\n", 0, m.start()) + 1
                    problems.append(f"daemons/{daemon}/{f}:{ln}: includes {h} "
                                    f"({names.get(h, 'leaf')}) from {names.get(f, 'a leaf')}")
        if not f.endswith(".c"):
            continue
        text = MEMBER.sub(lambda m: " " * len(m.group(0)), strip(raw))
        seen = set()
        for m in WORD.finditer(text):
            name = m.group(0)
            target = defined.get(name)
            if not target or target == f or name in seen or not above(f, target):
                continue
            seen.add(name)
            if name in allow.get(f, ()):
                allowed_used.append(f"{f} -> {name} ({target})")
                continue
            ln = text.count("\n", 0, m.start()) + 1
            problems.append(f"daemons/{daemon}/{f}:{ln}: names {name} of {target} "
                            f"({names.get(target, 'leaf')}) from {names.get(f, 'a leaf')}")
    for f, syms in allow.items():
        for s in syms:
            if not any(a.startswith(f"{f} -> {s} ") for a in allowed_used):
                problems.append(f"daemons/{daemon}/LAYERS: 'allow {f} {s}' is not needed")
    return problems, allowed_used


def self_test():
    """The check finds what it must: run on a made-up daemon with one of
    each fault, and on the same daemon without them."""
    import tempfile
    files = {
        "LAYERS": "top: top.h top.c\nbottom: bottom.h bottom.c\n",
        "top.h": '#include "bottom.h"\nvoid top_fn(void);\n',
        "top.c": '#include "top.h"\n/* bottom_fn in a comment */\nvoid\ntop_fn(void)\n'
                 '{\n\tbottom_fn();\n}\n',
        "bottom.h": "void bottom_fn(void);\n",
        "bottom.c": '#include "bottom.h"\nvoid\nbottom_fn(void)\n{\n\t'
                    'const char *s = "top_fn()";\n\t(void)s;\n}\n',
    }
    faults = {
        "bottom.c": '#include "top.h"\nvoid\nbottom_fn(void)\n{\n\ttop_fn();\n}\n',
        "stray.c": "int x;\n",
        "LAYERS": files["LAYERS"] + "allow top.c bottom_fn  # not upward: stale\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        clean, _ = check("self-test", d)
        for name, text in faults.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        found, _ = check("self-test", d)
    want = ["bottom.c:1: includes top.h", "bottom.c:5: names top_fn of top.c",
            "stray.c: not in", "'allow top.c bottom_fn' is not needed"]
    missing = [w for w in want if not any(w in p for p in found)]
    if clean or missing or len(found) != len(want):
        print("check-layers self-test FAILED: clean run found", clean, "; faulty run found",
              found, "; missing", missing)
        return False
    return True


def main():
    if not self_test():
        return 1
    graph = "--graph" in sys.argv
    only = [a for a in sys.argv[1:] if not a.startswith("-")] or DAEMONS
    failed = False
    for daemon in only:
        problems, allowed = check(daemon)
        for p in problems:
            print(p)
        failed |= bool(problems)
        if graph:
            for a in allowed:
                print(f"{daemon}: allowed upward: {a}")
        print(f"{daemon}: {'FAIL' if problems else 'ok'} ({len(problems)} upward or unlisted, "
              f"{len(allowed)} allowed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
