# SPDX-License-Identifier: MIT
"""Bounded runs (issue 12, item 7): a run that goes on longer than max_run_ms —
here a CPU spinner, which the stall watchdog counts as progress — is ended
failed with code run_timeout, and its exec cgroup is killed (a setsid'd child
included); and the watchdog counts only the run's own exec's CPU, so a spinner
an earlier run left behind (keep_processes) does not keep a silent run alive.
A short max_run_ms for the test; the default is 2 h."""
import random

from rwtest import stdout_text
from t_sandbox import host_pids, shimctl

SUITE_CONF = """[coordinatord]
max_run_ms = 20000
stall_timeout_ms = 2000

[harness.keep]
adapter = shell
keep_processes = true
"""

WATCHDOG = "run watchdog: no progress; orchestrator presumed dead"

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


def test_a_kept_spinner_is_no_progress_of_another_run(s):
    mark = f"spin-{TAG}"
    run = s.start_run(f"setsid sh -c 'while :; do :; done' {mark} </dev/null >/dev/null 2>&1 & "
                      "echo ok", thread="t-kept", metadata={"harness": "keep"})
    assert s.wait_terminal(run, thread="t-kept", timeout=90)["status"] == "completed"
    assert host_pids(mark), "the kept spinner is not running"
    # a silent run in the same sandbox, next to the spinner: the watchdog fails
    # it (before max_run_ms would), the spinner's CPU being none of its progress
    run = s.start_run(f"sleep 1000.{TAG}2", thread="t-kept")
    events, status, _, _ = s.tail(run, thread="t-kept", timeout=90)
    assert status["status"] == "failed" and status["error"]["message"] == WATCHDOG, status
    assert host_pids(mark), "the spinner was not running all along"
    assert shimctl(s, "t-kept", "--destroy").returncode == 0
    assert host_pids(mark) == []
