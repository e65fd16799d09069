#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CPU per sandbox from a system-wide profile (issue 16, B6).

usage: bench/sandbox/perf-groups.py PERF_DATA SHIM_PID [GROUP...]

PERF_DATA is `perf record -g -a` (cpu-clock) taken while a known number of
sandboxes was made. Samples are grouped by process: `shim-loop` is the shim's
own pid, `spawner` the forks of the shim still named containerd-shim (the
spawners, before the init renames itself), every other group its comm
(`sandbox-init`: the inits and their exec children before execve), each with
@CPU. Prints the 12 largest groups (samples), then, for each GROUP named, the
functions on its stacks with inclusive counts and percentages of the group.
Divide samples by the sampling rate and the number of sandboxes for CPU per
sandbox (bench/results/sandbox-b6-perf-20261202.txt). Groups by comm also
collect other processes of that name on the machine (others' shims)."""
import subprocess, sys, collections
data, main = sys.argv[1], sys.argv[2]
out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,cpu,ip,sym"], capture_output=True, text=True).stdout
groups = collections.Counter(); incl = collections.defaultdict(collections.Counter)
cur = None; syms = []
def flush():
    if cur is None: return
    comm, pid, cpu = cur
    g = ("shim-loop" if pid == main else comm if comm != "containerd-shim" else "spawner") + f"@{cpu}"
    groups[g] += 1
    for s in set(syms): incl[g][s] += 1
for line in out.splitlines():
    if not line.strip():
        flush(); cur = None; syms = []; continue
    if not line.startswith(("\t", " ")):
        parts = line.split()
        # comm may contain spaces; pid is the token before [cpu]
        i = [k for k, t in enumerate(parts) if t.startswith("[") and t.endswith("]")][0]
        cur = (" ".join(parts[:i-1]), parts[i-1], parts[i].strip("[]").lstrip("0") or "0")
        continue
    p = line.split()
    if len(p) >= 2: syms.append(p[1].split("+")[0])
flush()
tot = sum(groups.values())
for g, n in groups.most_common(12): print(f"{g:30s} {n:6d} {n/4:8.0f} ms")
for g in sys.argv[3:]:
    print("==", g, groups[g])
    for s, n in incl[g].most_common(70): print(f"   {n:6d} {100*n/groups[g]:5.1f}%  {s}")
