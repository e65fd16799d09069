# SPDX-License-Identifier: MIT
"""snapshot_timeout_ms: a snapshot job that runs too long (its child is held
stopped) is killed, the request fails 504 job_timeout, the sandbox is thawed;
and a shim stopped (SIGTERM) while a job runs kills the job's child."""
import json
import os
import signal

from t_snapshot_jobs import Background, backups, comm, job_child, ls, no_leftovers, run_ok, snapshot

SUITE_CONF = """[containerd-shim]
snapshot_timeout_ms = 1500
"""


def test_a_job_over_snapshot_timeout_is_killed(s):
    t = "t-job-timeout"
    run_ok(s, t, "head -c 67108864 /dev/urandom > /workspace/b && echo 1 > /workspace/n")
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {})
    child = job_child(s, "rw-snapshot", bg)  # stopped: it cannot finish in time
    st, js = bg.wait()
    assert st == 504 and js["code"] == "job_timeout", (st, js)
    assert "snapshot_timeout_ms=1500" in js["error"], js
    assert comm(child) is None  # killed and reaped
    assert run_ok(s, t, "cat /workspace/n") == "1\n"  # thawed
    no_leftovers(s, t)
    # small ones still fit
    run_ok(s, t, "rm /workspace/b")
    _, rec = snapshot(s, t)
    assert sorted(os.listdir(backups(s, t))) == [rec["id"] + ".json", rec["id"] + ".tar.zst"]


def test_shim_stop_kills_a_running_job(s):
    t = "t-job-stop"
    run_ok(s, t, "head -c 67108864 /dev/urandom > /workspace/b")
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {})
    child = job_child(s, "rw-snapshot", bg)
    assert s.kill("containerd-shim", signal.SIGTERM) == 0
    assert comm(child) is None
    st, js = bg.wait()
    assert st in (500, 503), (st, js)
    assert [n for n in ls(backups(s, t)) if n.endswith(".tar.zst")] == []
