# SPDX-License-Identifier: MIT
"""max_run_ms (issue 12, item 7): a run that goes on longer than max_run_ms —
here a CPU spinner, which the stall watchdog counts as progress — is ended
failed with code run_timeout, and its exec cgroup is killed (a setsid'd child
included). A short max_run_ms for the test; the default is 2 h."""
import random

from rwtest import stdout_text
from t_sandbox import host_pids

SUITE_CONF = """[coordinatord]
max_run_ms = 8000
# the watchdog would never fire on a spinner (CPU is progress); keep it out of the way
stall_timeout_ms = 600000
"""

TAG = f"{random.randrange(10**6):06d}"


def test_a_spinner_ends_with_run_timeout_and_its_processes_go(s):
    arg = f"1000.{TAG}1"
    run = s.start_run(f"setsid sleep {arg} </dev/null >/dev/null 2>&1 & echo spinning; "
                      "while :; do :; done", thread="t-maxrun")
    events, status, _, _ = s.tail(run, thread="t-maxrun", timeout=90)
    assert status["status"] == "failed", status
    assert status["error"]["code"] == "run_timeout", status
    assert "max_run_ms" in status["error"]["message"], status
    last = events[-1]["chunk"]
    assert last["type"] == "RUN_ERROR" and last["code"] == "run_timeout", last
    assert stdout_text(events) == "spinning\n"
    # the run's exec cgroup was killed: its setsid'd sleeper is gone with it
    assert host_pids(arg) == [], arg
    # the thread goes on: its next run is served by the same sandbox
    run = s.start_run("echo after", thread="t-maxrun")
    events, status, _, _ = s.tail(run, thread="t-maxrun", timeout=90)
    assert status["status"] == "completed" and stdout_text(events) == "after\n", status
