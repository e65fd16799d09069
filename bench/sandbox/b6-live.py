#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""B6 "exec into a live sandbox", two builds side by side: the daemons of
each build (rwtest suites, started together, pinned to CPU 0 like b6.py)
and, alternating the order every repetition, `shimctl SOCK KEY --repeat M --
/bin/true` of each build into one live sandbox of its own shim (shimctl's own
EXEC_START → EXEC_EXIT p50/p99). Prints the medians of the repetitions.

usage: bench/sandbox/b6-live.py BASE_BUILD_DIR NEW_BUILD_DIR [--reps 5] [--live 500]"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
import rwtest  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("base")
ap.add_argument("new")
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--live", type=int, default=500)
A = ap.parse_args()

suites = {}
for name, build in (("base", A.base), ("new", A.new)):
    rwtest.BUILD = os.path.abspath(build)
    wrap = {d: ["taskset", "-c", "0"] for d in rwtest.DAEMONS}
    suites[name] = (build, rwtest.Suite("[containerd-shim]\nmax_instances = 8\n", wrap=wrap).start())
os.sched_setaffinity(0, {1})
res = {"base": [], "new": []}
try:
    for rep in range(A.reps):
        for name in (("base", "new") if rep % 2 == 0 else ("new", "base")):
            build, s = suites[name]
            sock = os.path.join(s.dir, "run", "containerd-shim.sock")
            shimctl = os.path.join(build, "tools", "shimctl")
            if not os.path.exists(shimctl):  # a base build from before shimctl moved to tools/
                shimctl = os.path.join(build, "daemons", "containerd-shim", "shimctl")
            key = f"b6live{name}{rep}"
            p = subprocess.run([shimctl, sock, key, "--repeat", str(A.live), "--", "/bin/true"],
                               capture_output=True, text=True, timeout=600)
            m = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", p.stderr)
            if p.returncode != 0 or not m:
                raise RuntimeError(f"{name}: shimctl --repeat: {p.stderr}")
            subprocess.run([shimctl, sock, key, "--destroy"], capture_output=True)
            res[name].append((float(m.group(1)), float(m.group(2))))
            print(f"rep {rep} {name}: p50 {m.group(1)} ms, p99 {m.group(2)} ms", flush=True)
finally:
    for _, s in suites.values():
        s.stop()
        s.cleanup()
for name in ("base", "new"):
    print(f"{name}: median p50 {statistics.median(x[0] for x in res[name]):.2f} ms, "
          f"median p99 {statistics.median(x[1] for x in res[name]):.2f} ms "
          f"(min-max p50 {min(x[0] for x in res[name]):.2f}-{max(x[0] for x in res[name]):.2f})")
