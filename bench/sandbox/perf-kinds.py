#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CPU per sandbox by kind of work (issue 16, B6: the floor).

usage: bench/sandbox/perf-kinds.py PERF_DATA CPU N

PERF_DATA is a `perf record -g` (cpu-clock, 4 kHz) taken while N sandboxes
were made; CPU the processor whose samples are counted (b6.py pins the shim
and its sandboxes to 0, bwrap runs on 1). Each sample goes to the first kind
in KINDS whose function is on its stack; "other" is the rest. Prints ms per
sandbox for each kind (bench/results/sandbox-b6-floor-20261203.txt)."""
import collections, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfscript import samples  # noqa: E402
data, cpu, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
KINDS = [("seccomp load (do_seccomp)", ["do_seccomp"]),
        ("cgroup mkdir/rmdir", ["cgroup_mkdir", "cgroup_rmdir"]),
        ("network namespace (copy_net_ns, cleanup_net)", ["copy_net_ns", "cleanup_net"]),
        ("address space copy (dup_mmap)", ["dup_mmap"]),
        ("address space teardown (exit_mmap)", ["exit_mmap"]),
        ("execve", ["__x64_sys_execve"]),
        ("mount/umount", ["__x64_sys_mount", "__x64_sys_fsmount", "__x64_sys_move_mount", "__x64_sys_open_tree", "cleanup_mnt", "__x64_sys_mount_setattr", "__x64_sys_umount"]),
        ("page faults", ["asm_exc_page_fault"]),
        ("mkdir/rmdir/unlink/rename (files)", ["do_mkdirat", "do_rmdir", "do_unlinkat", "do_renameat2"]),
        ("open", ["do_sys_openat2"]),
        ("dynamic loader (_dl_*)", ["_dl_start_user", "_dl_start"]),
        ]
tot = collections.Counter(); allc = 0; idle = 0
for comm, pid, c, syms in samples(data):
    if c != cpu: continue
    if comm == "swapper": idle += 1; continue
    allc += 1
    s = set(syms)
    for name, keys in KINDS:
        if any(k in s for k in keys): tot[name] += 1; break
hz = 4000
print(f"CPU {cpu}: busy {allc/hz/n*1000:.2f} ms per sandbox, idle {idle/hz/n*1000:.2f}")
for name, _ in KINDS: print(f"  {name:48s} {tot[name]/hz/n*1000:5.2f} ms")
print(f"  {'other':48s} {(allc-sum(tot.values()))/hz/n*1000:5.2f} ms")
