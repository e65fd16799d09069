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
import collections, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfscript import samples  # noqa: E402
data, main = sys.argv[1], sys.argv[2]
groups = collections.Counter(); incl = collections.defaultdict(collections.Counter)
for comm, pid, cpu, syms in samples(data):
    g = ("shim-loop" if pid == main else comm if comm != "containerd-shim" else "spawner") + f"@{cpu}"
    groups[g] += 1
    for s in set(syms): incl[g][s] += 1
tot = sum(groups.values())
for g, n in groups.most_common(12): print(f"{g:30s} {n:6d} {n/4:8.0f} ms")
for g in sys.argv[3:]:
    print("==", g, groups[g])
    for s, n in incl[g].most_common(70): print(f"   {n:6d} {100*n/groups[g]:5.1f}%  {s}")
