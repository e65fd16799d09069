# SPDX-License-Identifier: MIT
"""Issue 12 §4: workspaces, backups and the run log share one filesystem, and
a full workspace used to make another tenant's run fail storage_error. The run
log's blocks are now allocated at start (coordinatord.preallocate, up to
map_size), so it commits whatever the workspaces do. The state directory here
is a small tmpfs of its own: a run fills it through /workspace, then runs in
the same and in another thread still commit all their events. With
preallocate = no the same flood makes the log's commits fail (the control)."""
import os
import subprocess

import rwtest
from rwtest import stdout_text

NO_SUITE = True

CONF = """[coordinatord]
map_size = 16M
preallocate = {pre}
"""


def suite_on_small_fs(pre):
    s = rwtest.Suite(CONF.format(pre=pre))
    state = os.path.join(s.dir, "state")
    os.makedirs(state)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", state], check=True)
    return s


def flood_then_run(s):
    fill = s.start_run("dd if=/dev/zero of=/workspace/fill bs=1M 2>&1 | tail -1; df -k /workspace",
                       thread="t-fill")
    rec = s.wait_terminal(fill, thread="t-fill", timeout=120)
    run = s.start_run("seq 1 3000", thread="t-fill")
    events, status, _, _ = s.tail(run, thread="t-fill", timeout=60)
    return rec, events, status


def test_a_full_disk_does_not_stop_the_run_log():
    s = suite_on_small_fs("yes")
    try:
        s.start()
        rec, events, status = flood_then_run(s)
        assert rec["status"] in ("completed", "failed"), rec
        assert (rec.get("error") or {}).get("code") != "storage_error", rec
        assert status["status"] == "completed", status
        assert stdout_text(events) == "".join(f"{i}\n" for i in range(1, 3001))
        problems = s.stop()
        assert not problems, problems
    finally:
        s.stop()
        s.cleanup()


def test_without_preallocation_the_same_flood_breaks_commits():
    s = suite_on_small_fs("no")
    s.expected_errors += [r"commit|Commit|storage|No space|ENOSPC|run log|Run failed|append",
                          r"filesystem"]
    try:
        s.start()
        try:
            rec, events, status = flood_then_run(s)
            ok = status and status["status"] == "completed" and \
                stdout_text(events) == "".join(f"{i}\n" for i in range(1, 3001))
        except Exception:
            ok = False
        assert not ok, "the control did not fail: the test would not see a regression"
    finally:
        s.stop()
        s.cleanup()
