# SPDX-License-Identifier: MIT
"""No leftovers (issue 32): after a sandbox is destroyed or stopped, after
SIGTERM of the shim, and after a crash (SIGKILL) and restart, no cgroup
directory, pool directory or mount point of the shim remains beyond those of
the sandboxes still alive. Counted in every hierarchy: each cgroup v1
controller and the cgroup2 hierarchy (/sys/fs/cgroup itself on a pure v2 host,
/sys/fs/cgroup/unified on a hybrid one), below the instance directories
runwarden.<instance> and runwarden-tools.<instance> (cgroup.h's naming
scheme: <instance> = 12 hex digits of SHA-256(state_dir))."""
import hashlib
import os
import signal
import subprocess

from rwtest import BUILD, poll

SUITE_CONF = """[containerd-shim]
pool_size = 2
max_instances = 8
"""

SHIMCTL = os.path.join(BUILD, "tools", "shimctl")
CG = "/sys/fs/cgroup"


def shimctl(s, key, *args):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    return subprocess.run([SHIMCTL, sock, key, *args], capture_output=True, text=True,
                          timeout=60)


def instance(s):
    return hashlib.sha256(os.path.join(s.dir, "state").encode()).hexdigest()[:12]


def cgroup_dirs(s):
    """Every directory below runwarden.<inst> and runwarden-tools.<inst>, in
    every hierarchy, as (hierarchy, relative path) — the instance directories
    themselves included."""
    inst = instance(s)
    tops = ("runwarden." + inst, "runwarden-tools." + inst)
    found = set()
    for root, dirs, _ in os.walk(CG):
        for d in list(dirs):
            if d in tops:
                base = os.path.join(root, d)
                for r2, d2, _ in os.walk(base):
                    found.add(os.path.relpath(r2, os.path.dirname(base)))
                dirs.remove(d)
            elif d.startswith(("runwarden.", "runwarden-tools.")):
                dirs.remove(d)  # another instance's: not ours to count
    return found


def sandbox_groups(s):
    """The sb-<id> names present in any hierarchy."""
    return {p.split("/")[1] for p in cgroup_dirs(s)
            if p.count("/") == 1 and p.split("/")[1].startswith("sb-")}


def pool_dirs(s):
    d = os.path.join(s.dir, "state", "sandboxes", ".pool")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def mounts_below(s, pid="self"):
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            return {ln.split()[4] for ln in f if ln.split()[4].startswith(s.dir + "/")}
    except FileNotFoundError:
        return set()


def settled_pool(s, n=2):
    return poll(lambda: len(pool_dirs(s)) == n and len(sandbox_groups(s)) >= n, 15)


def make_sandboxes(s, prefix, n=3):
    for i in range(n):
        r = shimctl(s, f"{prefix}-{i}", "--", "/bin/sh", "-c", "sleep 0")
        assert r.returncode == 0, r.stderr


def assert_only_pool(s, what):
    """What remains is the two pooled sandboxes and nothing else."""
    assert settled_pool(s), (what, pool_dirs(s), sandbox_groups(s))
    groups = poll(lambda: (lambda g: g if len(g) == 2 else None)(sandbox_groups(s)), 15) \
        or sandbox_groups(s)
    assert {g[3:] for g in groups} == pool_dirs(s), (what, groups, pool_dirs(s))
    shim_pid = s.procs["containerd-shim"].pid
    pool_root = os.path.join(s.dir, "state", "sandboxes", ".pool")
    mounted = {m for m in mounts_below(s, shim_pid) if m.startswith(pool_root + "/")}
    assert {os.path.basename(m) for m in mounted} <= pool_dirs(s), (what, mounted)


def assert_nothing_left(s, what):
    """The shim is gone: no cgroup directory of it, no pool directory, no mount."""
    left = poll(lambda: not {p for p in cgroup_dirs(s) if p.startswith("runwarden.")}, 10)
    assert left, (what, sorted(cgroup_dirs(s)))
    assert not pool_dirs(s), (what, pool_dirs(s))
    assert not mounts_below(s), (what, mounts_below(s))


def test_destroyed_sandboxes_leave_no_cgroup_or_pool_directory(s):
    assert "Sandboxes: max_instances = 8 (configured)" in s.log("containerd-shim")
    make_sandboxes(s, "lo-destroy")
    for i in range(3):
        r = shimctl(s, f"lo-destroy-{i}", "--destroy")
        assert r.returncode == 0, r.stderr
    assert_only_pool(s, "after destroy")


def test_sigterm_of_the_shim_leaves_nothing(s):
    make_sandboxes(s, "lo-term")
    r = shimctl(s, "lo-term-x", "--detach", "--", "/bin/sh", "-c", "sleep 100 & sleep 100")
    assert r.returncode == 0, r.stderr
    assert poll(lambda: len(sandbox_groups(s)) >= 6, 15), sandbox_groups(s)
    assert s.kill("containerd-shim", signal.SIGTERM) == 0
    assert_nothing_left(s, "after SIGTERM")
    s.start_daemon("containerd-shim")
    s.wait_ready()
    assert_only_pool(s, "after a restart")


def test_a_crash_and_restart_leaves_nothing_but_what_lives(s):
    make_sandboxes(s, "lo-kill")
    before = poll(lambda: (lambda g: g if len(g) >= 5 else None)(sandbox_groups(s)), 15)
    assert before, sandbox_groups(s)
    s.kill("containerd-shim", signal.SIGKILL)
    s.start_daemon("containerd-shim")
    s.wait_ready()
    # Re-adopted sandboxes keep their groups and every other one is reaped:
    # nothing but the old groups and those of the new pool.
    assert settled_pool(s), (pool_dirs(s), sandbox_groups(s))
    extra = sandbox_groups(s) - before - {"sb-" + i for i in pool_dirs(s)}
    assert not extra, extra
    for i in range(3):
        shimctl(s, f"lo-kill-{i}", "--destroy")
    assert_only_pool(s, "after a crash, a restart and destroy")
    assert s.kill("containerd-shim", signal.SIGTERM) == 0
    assert_nothing_left(s, "after a crash, a restart and SIGTERM")
    s.start_daemon("containerd-shim")
    assert_only_pool(s, "after a restart")
