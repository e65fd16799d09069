# SPDX-License-Identifier: MIT
"""Issue 3: stall_action = kill also destroys the stale run's processes."""
import subprocess
import time

SUITE_CONF = """[coordinatord]
stall_timeout_ms = 1000
stall_action = kill
"""


def procs(marker):
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()


def test_watchdog_kill_leaves_no_process(s):
    run = s.start_run("sleep 30.03 & sleep 30.03; wait", thread="t-wdkill")
    events, status, _, _ = s.tail(run, thread="t-wdkill", timeout=10)
    assert status["status"] == "failed" and events[-1]["chunk"]["type"] == "RUN_ERROR"
    deadline = time.time() + 3
    while procs("sleep 30.03") and time.time() < deadline:
        time.sleep(0.05)
    assert not procs("sleep 30.03"), "stall_action=kill left the run's processes alive"
