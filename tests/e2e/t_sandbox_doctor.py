# SPDX-License-Identifier: MIT
"""containerd-shim --doctor (SANDBOX.md §6 item 40): every check reported, exit
0 on this host; exit 1 with the failing checks named when the default profile
cannot be met (here: run as an unprivileged user, so no cgroups)."""
import os
import re
import shutil
import subprocess
import tempfile

from rwtest import BUILD

NO_SUITE = True
SHIM = os.path.join(BUILD, "containerd-shim")


def doctor(*prefix, extra=""):
    d = tempfile.mkdtemp(prefix="rw-doctor-")
    try:
        os.chmod(d, 0o755)
        conf = os.path.join(d, "runwarden.conf")
        with open(conf, "w") as f:
            f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\n" + extra)
        os.chmod(conf, 0o644)
        return subprocess.run([*prefix, SHIM, "--doctor", "--config", conf],
                              capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_doctor_shows_max_instances_sized_from_the_host():
    """max_instances = 0 (the default): the least of memory, CPUs, the
    per-user inotify limits and the cap, each term shown; an explicit value
    is shown as configured."""
    r = doctor()
    m = re.search(r"^info +max_instances +max_instances = (\d+) from the host: least of "
                  r"memory (\d+) MiB / 2 / 4 MiB = (\d+), (\d+) CPUs x 512 = (\d+), "
                  r"inotify instances (-?\d+) / 16 - pool 2 = (-?\d+), "
                  r"inotify watches (-?\d+) / 8192 - pool 2 = (-?\d+), cap 4096", r.stdout, re.M)
    assert m, r.stdout
    n, mem, by_mem, cpus, by_cpu, _, by_ino, _, by_watch = map(int, m.groups())
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) // 1024
    assert abs(mem - total) <= 1 and by_mem == mem // 2 // 4, (mem, total, by_mem)
    assert cpus == len(os.sched_getaffinity(0)) and by_cpu == cpus * 512, r.stdout
    terms = [by_mem, by_cpu, 4096] + [t for t in (by_ino, by_watch) if t != -1]
    assert n == max(1, min(terms)), r.stdout
    # the kernel budget then holds for what the rule chose
    assert checks(r.stdout).get("kernel quotas") == "ok", r.stdout


def test_doctor_shows_a_configured_max_instances():
    r = doctor(extra="[containerd-shim]\nmax_instances = 7\n")
    assert re.search(r"^info +max_instances +max_instances = 7 \(configured\)$", r.stdout,
                     re.M), r.stdout


def checks(out):
    return {m.group(2): m.group(1) for m in re.finditer(r"^(ok|FAIL|WARN|info) +(\S+(?: \S+)?)  ",
                                                        out, re.M)}


def test_doctor_reports_every_check_and_passes_here():
    r = doctor()
    assert r.returncode == 0, (r.stdout, r.stderr)
    c = checks(r.stdout)
    for name in ("user namespaces", "cgroup", "cgroup.kill", "seccomp", "openat2",
                 "mount API", "clone3", "pidfd"):
        assert c.get(name) == "ok", (name, r.stdout)
    assert c.get("Landlock") == "info", r.stdout
    assert re.search(r"^ok +cgroup +v[12] \(", r.stdout, re.M), r.stdout
    # workspace quotas are on by default: where the state dir's filesystem cannot
    # enforce them (this host: ext4 without prjquota) that is a WARN, not a FAIL
    assert c.get("project quotas") in ("ok", "WARN"), r.stdout
    if c["project quotas"] == "WARN":
        assert "workspaces get NO quota" in r.stdout, r.stdout
        assert r.stdout.rstrip().endswith("default profile: OK, with 1 warning (WARN above)"), \
            r.stdout
    else:
        assert r.stdout.rstrip().endswith("default profile: OK"), r.stdout


def test_doctor_fails_closed_without_privileges():
    r = doctor("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")
    assert r.returncode == 1, (r.stdout, r.stderr)
    c = checks(r.stdout)
    assert c.get("privileges") == "FAIL", r.stdout
    assert c.get("cgroup") == "FAIL", r.stdout
    assert c.get("seccomp") == "ok", r.stdout  # what works is still reported as working
    assert re.search(r"default profile: CANNOT be met \(\d+ failures\)$", r.stdout), r.stdout
