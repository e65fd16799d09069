# SPDX-License-Identifier: MIT
"""Issue 12 item 1, the other action and the thread budget: with
output_limit_action = drop a run over its budget keeps running, its output
past the budget is dropped (a marker when it starts, one with the total
before the end) and it completes; a thread's runs share
max_thread_output_bytes within the window."""
from rwtest import assert_gapfree, stdout_text

SUITE_CONF = """[coordinatord]
max_run_output_bytes = 1M
output_limit_action = drop
max_thread_output_bytes = 1536K
thread_output_window_ms = 3600000
"""


def drops(events):
    return [e["chunk"]["value"] for e in events
            if e["chunk"].get("type") == "CUSTOM" and
            e["chunk"].get("name") == "runwarden.output_dropped"]


def test_drop_keeps_the_run_and_counts_what_it_dropped(s):
    run = s.start_run("yes | head -c 3M; echo done >&2", thread="t-drop")
    events, status, code, _ = s.tail(run, thread="t-drop", timeout=120)
    assert status["status"] == "completed", status
    assert_gapfree(events)
    out = stdout_text(events)
    assert len(out) == 1 << 20 and set(out) == {"y", "\n"}, len(out)
    assert "done" not in stdout_text(events, "process.stderr")  # over the budget too
    d = drops(events)
    assert len(d) == 2, d
    assert d[0]["budget"] == "run" and d[0]["budgetBytes"] == 1 << 20 and d[0]["droppedBytes"] > 0
    assert d[1]["total"] is True and d[1]["droppedBytes"] == (2 << 20) + len("done\n"), d[1]
    assert "dropped" in d[1]["text"]
    # the total comes before the run's end
    names = [e["chunk"].get("name") or e["chunk"]["type"] for e in events]
    assert names.index("RUN_FINISHED") > max(i for i, n in enumerate(names)
                                             if n == "runwarden.output_dropped")


def test_thread_budget_spans_the_threads_runs(s):
    first = s.start_run("yes | head -c 900K", thread="t-budget")
    ev1, st1, _, _ = s.tail(first, thread="t-budget", timeout=60)
    assert st1["status"] == "completed" and len(stdout_text(ev1)) == 900 << 10
    assert drops(ev1) == []
    second = s.start_run("yes | head -c 900K", thread="t-budget")
    ev2, st2, _, _ = s.tail(second, thread="t-budget", timeout=60)
    assert st2["status"] == "completed", st2
    assert len(stdout_text(ev2)) == (1536 - 900) << 10
    d = drops(ev2)
    assert d and d[0]["budget"] == "thread" and d[0]["budgetBytes"] == 1536 << 10, d
    # another thread has its own window
    other = s.start_run("yes | head -c 900K", thread="t-budget2")
    ev3, st3, _, _ = s.tail(other, thread="t-budget2", timeout=60)
    assert st3["status"] == "completed" and len(stdout_text(ev3)) == 900 << 10
    assert drops(ev3) == []
