# SPDX-License-Identifier: MIT
"""Snapshots that neither starve the host nor mislead (issue 12 §4-5):
hardlinks are stored once and restored as links, sparse files stay sparse,
a venv's absolute symlinks are restored as links (nothing followed), what the
restorer would refuse is refused at snapshot time (422 not_restorable, the
path named), an archive of ours the restorer refuses is 422 restore_rejected,
a snapshot that outlasts routerd's coord_timeout_ms still answers with its id,
jobs run in the shim's 'jobs' cgroup and beyond snapshot_max_jobs are 429
too_many_jobs, and the temporary of a job killed with the shim (kill -9) is
gone once the shim is back.

Ordering, not times: a job is held with SIGSTOP while the other checks run."""
import json
import os
import signal
import time

from t_snapshot_jobs import (Background, backups, comm, job_child, ls, restore, run_ok,
                       sandbox_id, snapshot, workspace_parent)

COORD_TIMEOUT_MS = 3000
SUITE_CONF = f"""[containerd-shim]
restore_max_bytes = 1100M
restore_max_entries = 1000
snapshot_max_jobs = 1
snapshot_cpu_max = 50000 100000

[routerd]
coord_timeout_ms = {COORD_TIMEOUT_MS}
"""

MIB = 1 << 20


def ws(s, thread):
    return os.path.join(workspace_parent(s, thread), "workspace")


def test_hardlinks_are_stored_once_and_restored_as_links(s):
    t = "t-lim-links"
    run_ok(s, t, "head -c 20971520 /dev/urandom > /workspace/big && "
                 "for i in $(seq 1 40); do ln /workspace/big /workspace/l$i; done")
    before = run_ok(s, t, "sha256sum < /workspace/big")
    sid, rec = snapshot(s, t)
    assert rec["bytes"] < 2 * 20 * MIB, rec  # not 41 copies
    run_ok(s, t, "rm -f /workspace/big /workspace/l*")
    st, js = restore(s, t, sid)
    assert st == 200, (st, js)
    a, b = os.stat(os.path.join(ws(s, t), "big")), os.stat(os.path.join(ws(s, t), "l40"))
    assert a.st_ino == b.st_ino and a.st_nlink == 41, (a, b)
    assert run_ok(s, t, "sha256sum < /workspace/l17") == before


def test_sparse_files_stay_sparse(s):
    t = "t-lim-sparse"
    run_ok(s, t, "truncate -s 1G /workspace/sparse && printf end >> /workspace/sparse")
    before = run_ok(s, t, "sha256sum < /workspace/sparse")
    sid, rec = snapshot(s, t)
    assert rec["bytes"] < MIB, rec
    run_ok(s, t, "rm /workspace/sparse")
    st, js = restore(s, t, sid)
    assert st == 200, (st, js)
    st_ = os.stat(os.path.join(ws(s, t), "sparse"))
    assert st_.st_size == (1 << 30) + 3
    assert st_.st_blocks * 512 < MIB, st_  # the hole is a hole again
    assert run_ok(s, t, "sha256sum < /workspace/sparse") == before


def test_venv_absolute_symlinks_restore_as_links(s):
    t = "t-lim-venv"
    host_python = os.lstat("/usr/bin/python3")
    run_ok(s, t, "mkdir -p /workspace/venv/bin && ln -s /usr/bin/python3 /workspace/venv/bin/python && "
                 "ln -s python /workspace/venv/bin/python3 && ln -s /etc /workspace/etc && "
                 "echo 'home = /usr/bin' > /workspace/venv/pyvenv.cfg")
    sid, _ = snapshot(s, t)
    run_ok(s, t, "rm -rf /workspace/venv /workspace/etc")
    st, js = restore(s, t, sid)
    assert st == 200, (st, js)
    bindir = os.path.join(ws(s, t), "venv", "bin")
    assert os.readlink(os.path.join(bindir, "python")) == "/usr/bin/python3"
    assert os.readlink(os.path.join(bindir, "python3")) == "python"
    assert os.readlink(os.path.join(ws(s, t), "etc")) == "/etc"
    # nothing was followed: the host's files are as they were
    after = os.lstat("/usr/bin/python3")
    assert (after.st_ino, after.st_mtime_ns, after.st_uid) == \
        (host_python.st_ino, host_python.st_mtime_ns, host_python.st_uid)
    # and inside the sandbox the link resolves in its own root
    assert run_ok(s, t, "readlink /workspace/venv/bin/python && test -e /workspace/venv/bin/python "
                        "&& echo resolves") == "/usr/bin/python3\nresolves\n"


def test_what_restore_refuses_is_refused_at_snapshot_time(s):
    t = "t-lim-refuse"
    run_ok(s, t, "truncate -s 1200M /workspace/huge")
    n = len([x for x in ls(backups(s, t)) if x.endswith(".tar.zst")])
    st, js = s.http("POST", f"/threads/{t}/snapshots", {})
    assert st == 422 and js["code"] == "not_restorable", (st, js)
    assert "'huge'" in js["error"] and "restore_max_bytes" in js["error"], js
    run_ok(s, t, "rm /workspace/huge && mkdir /workspace/many && cd /workspace/many && "
                 "seq 1 1100 | xargs touch")
    st, js = s.http("POST", f"/threads/{t}/snapshots", {})
    assert st == 422 and js["code"] == "not_restorable", (st, js)
    assert "restore_max_entries" in js["error"], js
    # nothing stored, no temporary left
    assert len([x for x in ls(backups(s, t)) if x.endswith(".tar.zst")]) == n
    assert not [x for x in ls(backups(s, t)) if x.endswith(".tmp")]
    run_ok(s, t, "rm -rf /workspace/many")
    snapshot(s, t)


def test_a_damaged_archive_is_restore_rejected(s):
    t = "t-lim-damaged"
    run_ok(s, t, "head -c 100000 /dev/urandom > /workspace/r")
    sid, rec = snapshot(s, t)
    path = os.path.join(backups(s, t), rec["id"] + ".tar.zst")
    with open(path, "r+b") as f:  # flip a byte in the middle, same size
        f.seek(rec["bytes"] // 2)
        b = f.read(1)
        f.seek(rec["bytes"] // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    st, js = restore(s, t, sid)
    assert st == 422 and js["code"] == "restore_rejected", (st, js)
    # an id that is not ours stays not_a_backup_record
    st, js = restore(s, t, json.dumps(dict(rec, id="00000000-0000-4000-8000-000000000000")))
    assert st == 400 and js["code"] == "not_a_backup_record", (st, js)


def job_cpu_limit(pid):
    """The cgroup limiting pid's CPU (v1 cpu hierarchy, else cgroup2) and its
    quota and period in µs."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [ln.split(":", 2) for ln in f.read().splitlines()]
    for _, ctrls, path in lines:
        if "cpu" in ctrls.split(","):
            d = f"/sys/fs/cgroup/{ctrls}{path}"
            if not os.path.isdir(d):
                d = f"/sys/fs/cgroup/cpu{path}"
            with open(f"{d}/cpu.cfs_quota_us") as q, open(f"{d}/cpu.cfs_period_us") as p:
                return path, [q.read().strip(), p.read().strip()]
    for _, ctrls, path in lines:
        if ctrls == "":
            with open(f"/sys/fs/cgroup{path}/cpu.max") as f:
                return path, f.read().split()
    return None, None


def test_a_slow_snapshot_still_answers_its_id(s):
    """routerd used to give up after coord_timeout_ms (503) while the job went
    on; now it waits as long as the job may run. The held job also shows the
    jobs' cgroup and the snapshot_max_jobs cap."""
    t, other = "t-lim-slow", "t-lim-other"
    run_ok(s, t, "head -c 67108864 /dev/urandom > /workspace/b && echo 1 > /workspace/n")
    run_ok(s, other, "echo 2 > /workspace/n")
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {})
    child = job_child(s, "rw-snapshot", bg)  # stopped
    try:
        cg, limit = job_cpu_limit(child)
        assert cg is not None and cg.endswith("/jobs"), cg
        assert limit == ["50000", "100000"], limit  # snapshot_cpu_max
        # snapshot_max_jobs = 1: another thread's job is refused, not queued
        st, js = s.http("POST", f"/threads/{other}/snapshots", {})
        assert st == 429 and js["code"] == "too_many_jobs", (st, js)
        st, js = s.http("POST", f"/threads/{other}/restore", {"snapshotId": "x"})
        assert st == 429 and js["code"] == "too_many_jobs", (st, js)
        # well past routerd's coord_timeout_ms, the request still waits
        time.sleep(COORD_TIMEOUT_MS / 1000 * 1.5)
        assert not bg.done.is_set(), bg.result
    finally:
        os.kill(child, signal.SIGCONT)
    st, js = bg.wait()
    assert st == 201, (st, js)
    rec = json.loads(js["snapshotId"])
    assert os.path.exists(os.path.join(backups(s, t), rec["id"] + ".tar.zst"))
    run_ok(s, t, "echo 3 > /workspace/n")
    st, js = restore(s, t, js["snapshotId"])
    assert st == 200, (st, js)
    assert run_ok(s, t, "cat /workspace/n") == "1\n"
    snapshot(s, other)  # the slot is free again


def test_shim_killed_during_a_job_leaves_no_tmp(s):
    """Last: kills the shim (-9) while a snapshot job writes its temporary;
    the job dies with it and the restarted shim removes the temporary (and a
    killed restore's staging tree) and thaws the sandbox the job had frozen."""
    s.expected_errors += [r"shim", r"lost", r"Lost", r"unavailable"]
    t = "t-lim-crash"
    run_ok(s, t, "head -c 134217728 /dev/urandom > /workspace/b && echo 1 > /workspace/n")
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {})
    child = job_child(s, "rw-snapshot", bg)
    os.kill(child, signal.SIGCONT)
    deadline = time.time() + 60
    while not any(n.endswith(".tmp") and os.path.getsize(os.path.join(backups(s, t), n)) > 0
                  for n in ls(backups(s, t))):
        assert time.time() < deadline and not bg.done.is_set(), bg.result
        time.sleep(0.002)
    os.kill(child, signal.SIGSTOP)
    s.kill("containerd-shim", signal.SIGKILL)
    deadline = time.time() + 30
    while comm(child) is not None:  # PR_SET_PDEATHSIG
        assert time.time() < deadline, "job child outlived the shim"
        time.sleep(0.01)
    assert [n for n in ls(backups(s, t)) if n.endswith(".tmp")], ls(backups(s, t))
    st, _ = bg.wait()
    assert st in (500, 503), st
    # what a restore killed with the shim leaves: its staging tree
    staging = os.path.join(workspace_parent(s, t), ".restore-0badc0de")
    os.makedirs(os.path.join(staging, "d"))
    with open(os.path.join(staging, "d", "f"), "w") as f:
        f.write("partial")
    s.start_daemon("containerd-shim")
    deadline = time.time() + 30
    while [n for n in ls(backups(s, t)) if n.endswith(".tmp")] or os.path.exists(staging):
        assert time.time() < deadline, (ls(backups(s, t)), os.path.exists(staging))
        time.sleep(0.05)
    # the re-adopted sandbox is thawed and serves; snapshots work again
    assert run_ok(s, t, "cat /workspace/n") == "1\n"
    run_ok(s, t, "rm /workspace/b")
    snapshot(s, t)
