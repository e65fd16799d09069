# SPDX-License-Identifier: MIT
"""Issue 12 §6: one sandbox ran 256 host tool processes at once. Now a run may
have max_tool_calls_per_run host tool calls running, the host max_tool_calls in
all; a further call gets 429 too_many_tool_calls (and is counted in
runwarden_tool_calls_refused_total) instead of a process. The calls are made
from inside the sandbox, through the run's own bridge port, as an agent would."""
import os

import bridgecall
from rwtest import poll

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")

SUITE_CONF = f"""[coordinatord]
max_tool_calls_per_run = 2
max_tool_calls = 3

[harness.tooly]
adapter = shell
tools = slow

[tool.slow]
command = ["{TOOLS}/slow-tool"]
description = Takes a while
timeout_ms = 30000
"""

def tool_run(s, thread, n, seconds, marker="-"):
    """n concurrent calls of `slow`, each taking seconds."""
    return bridgecall.start(s, thread, "slow", {"seconds": seconds}, n=n, marker=marker)


def statuses(s, run, thread):
    """[[HTTP status, error code or None], …] of the run's calls."""
    return [[r["status"], r["body"].get("code") if r["status"] != 200 else None]
            for r in bridgecall.results(s, run, thread, timeout=90)]


def test_per_run_cap(s):
    before = s.metric("runwarden_tool_calls_refused_total")
    got = statuses(s, tool_run(s, "t-tl1", 5, 3), "t-tl1")
    ok = [g for g in got if g[0] == 200]
    refused = [g for g in got if g[0] == 429]
    assert len(ok) == 2 and len(refused) == 3, got
    assert all(g[1] == "too_many_tool_calls" for g in refused), got
    assert s.metric("runwarden_tool_calls_refused_total") - before == 3


def test_host_wide_cap(s):
    a = tool_run(s, "t-tl2", 2, 6, marker="sent")
    # wait until run A's two calls hold two of the host's three tool slots
    assert poll(lambda: s.http("GET", "/threads/t-tl2/files/sent")[0] == 200, timeout=30)
    b = tool_run(s, "t-tl3", 2, 1)
    got_b = statuses(s, b, "t-tl3")
    assert sorted(g[0] for g in got_b) == [200, 429], got_b
    got_a = statuses(s, a, "t-tl2")
    assert [g[0] for g in got_a] == [200, 200], got_a
