# SPDX-License-Identifier: MIT
"""Issue 3: the durable-run protocol of coordinatord — watchdog, cancel,
threads, idempotency, the direct run-log API, group commit and re-attach."""
import os
import subprocess
import threading
import time

from ipc import Ipc, IpcError, status_metrics
from rwtest import assert_gapfree, stdout_text

SUITE_CONF = """[coordinatord]
stall_timeout_ms = 1000
"""

WATCHDOG = "run watchdog: no progress; orchestrator presumed dead"


def ipc(s):
    return Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))


def host_procs(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def test_watchdog_fails_a_silent_run(s):
    t0 = time.time()
    run = s.start_run("sleep 30.01", thread="t-wd")
    events, status, code, _ = s.tail(run, thread="t-wd", timeout=10)
    took = time.time() - t0
    last = events[-1]["chunk"]
    assert last["type"] == "RUN_ERROR" and last["message"] == WATCHDOG, last
    assert status["status"] == "failed" and status["error"]["message"] == WATCHDOG, status
    assert took < 3.5, f"watchdog took {took:.2f}s"
    assert_gapfree(events)
    assert code == 1000


def test_watchdog_spares_a_busy_silent_run(s):
    # 3 s of CPU with no output: progress by CPU use, not by events
    run = s.start_run("end=$(($(date +%s)+3)); while [ $(date +%s) -lt $end ]; do :; done; echo done",
                      thread="t-busy")
    events, status, _, _ = s.tail(run, thread="t-busy", timeout=20)
    assert status["status"] == "completed", (status, events[-1])
    assert stdout_text(events) == "done\n"


def test_cancel_kills_and_aborts(s):
    run = s.start_run("sleep 60.123", thread="t-cancel")
    deadline = time.time() + 5
    while not host_procs("sleep 60.123") and time.time() < deadline:
        time.sleep(0.02)
    assert host_procs("sleep 60.123"), "the command never started"
    t0 = time.time()
    st, rec = s.http("POST", f"/runs/{run}/cancel?threadId=t-cancel")
    assert st == 202, (st, rec)
    assert rec["status"] == "aborted" and rec.get("cancelRequested") is True, rec
    assert time.time() - t0 < 1.0
    assert not host_procs("sleep 60.123"), "cancel left the process alive"
    events, status, code, _ = s.tail(run, thread="t-cancel")
    last = events[-1]["chunk"]
    # the RUN_ERROR names its run (docs/DESIGN.md "Every chunk valid"), after
    # the interrupted result of the shell's open tool call
    assert last == {"type": "RUN_ERROR", "message": "run cancelled", "code": "aborted",
                    "runId": run, "metadata": {"tanstack": {"threadId": "t-cancel", "runId": run}},
                    "timestamp": last["timestamp"]}, last
    res = events[-2]["chunk"]
    assert res["type"] == "TOOL_CALL_RESULT" and "interrupted" in res["content"], res
    assert status["status"] == "aborted" and code == 1000
    # idempotent: a second cancel changes nothing
    c = ipc(s)
    import json
    again = json.loads(c.call("RUN_CANCEL", {"run_id": run})["record"])
    c.close()
    assert again == status, (again, status)


def test_cancel_of_a_terminal_run_leaves_it(s):
    run = s.start_run("true", thread="t-cancel2")
    rec = s.wait_terminal(run, thread="t-cancel2")
    c = ipc(s)
    import json
    after = json.loads(c.call("RUN_CANCEL", {"run_id": run, "thread_id": "t-cancel2"})["record"])
    try:
        c.call("RUN_CANCEL", {"run_id": run, "thread_id": "other"})
        raise AssertionError("a foreign thread may not cancel")
    except IpcError as e:
        assert e.code == -2  # -ENOENT
    c.close()
    assert after == rec


def test_thread_listing_newest_first_and_running_filter(s):
    import json
    a = s.start_run("true", thread="t-list")
    s.wait_terminal(a, thread="t-list")
    b = s.start_run("sleep 0.8", thread="t-list")
    c = ipc(s)
    recs = [json.loads(r) for r in c.call("THREAD_RUNS", {"thread_id": "t-list"})["records"]]
    assert [r["runId"] for r in recs] == [b, a], recs
    running = [json.loads(r) for r in
               c.call("THREAD_RUNS", {"thread_id": "t-list", "status": "running"})["records"]]
    assert [r["runId"] for r in running] == [b]
    assert c.call("THREAD_RUNS", {"thread_id": "t-none"})["records"] == []
    c.close()
    # the same through the public API
    st, body = s.http("GET", "/threads/t-list/runs")
    assert st == 200 and [r["runId"] for r in body] == [b, a], (st, body)
    st, body = s.http("GET", "/threads/t-list/runs?status=running")
    assert st == 200 and [r["runId"] for r in body] == [b], (st, body)
    s.wait_terminal(b, thread="t-list")


def test_idempotency_key_returns_the_same_run(s):
    body = {"threadId": "t-idem", "messages": [{"role": "user", "content": "echo once >> /workspace/count"}]}
    st1, r1 = s.http("POST", "/runs", body, headers={"Idempotency-Key": "k-1"})
    st2, r2 = s.http("POST", "/runs", body, headers={"Idempotency-Key": "k-1"})
    assert st1 == st2 == 202 and r1 == r2, (r1, r2)
    st3, r3 = s.http("POST", "/runs", dict(body, threadId="t-idem-2"), headers={"Idempotency-Key": "k-1"})
    assert st3 == 202 and r3 != r1
    s.wait_terminal(r1["runId"], thread="t-idem")
    s.wait_terminal(r3["runId"], thread="t-idem-2")
    run = s.start_run("wc -l < /workspace/count", thread="t-idem")
    events, _, _, _ = s.tail(run, thread="t-idem")
    assert stdout_text(events).strip() == "1", "the retried POST started a second run"


def test_direct_log_api_contract(s):
    import json
    c = ipc(s)
    run = c.call("RUN_OPEN", {"thread_id": "t-direct"})["run_id"]
    again = c.call("RUN_OPEN", {"thread_id": "t-direct", "run_id": run})
    assert again == {"run_id": run, "created": False}
    seqs = [c.call("RUN_APPEND", {"run_id": run, "chunk": json.dumps({"type": "CUSTOM", "name": "n", "value": i})})["seq"]
            for i in range(5)]
    assert seqs == [0, 1, 2, 3, 4]
    for bad in ("[]", "{}", '{"type": 3}', "nope"):
        try:
            c.call("RUN_APPEND", {"run_id": run, "chunk": bad})
            raise AssertionError(bad)
        except IpcError as e:
            assert e.code == -22, (bad, e)
    rec = json.loads(c.call("RUN_FINISH", {"run_id": run, "status": "failed",
                                           "error": json.dumps({"message": "boom", "code": "x"})})["record"])
    assert rec["status"] == "failed" and rec["error"] == {"message": "boom", "code": "x"} and rec["lastSeq"] == 5
    # the first terminal status wins
    rec2 = json.loads(c.call("RUN_FINISH", {"run_id": run, "status": "completed"})["record"])
    assert rec2 == rec
    try:
        c.call("RUN_APPEND", {"run_id": run, "chunk": '{"type":"X"}'})
        raise AssertionError("append after terminal accepted")
    except IpcError as e:
        assert e.code == -116  # -ESTALE
    try:
        c.call("RUN_APPEND", {"run_id": "00000000-0000-4000-8000-000000000000", "chunk": '{"type":"X"}'})
        raise AssertionError("append to an unknown run accepted")
    except IpcError as e:
        assert e.code == -2
    c.close()
    events, status, _, _ = s.tail(run, thread="t-direct")
    assert [e["chunk"].get("value") for e in events[:5]] == [0, 1, 2, 3, 4]
    assert events[-1]["chunk"]["type"] == "RUN_ERROR" and status["status"] == "failed"


def test_group_commit_batches_concurrent_appends(s):
    """64 pipelined appends over 16 runs: all acknowledged with gap-free seqs,
    in far fewer commits than appends (one transaction per loop turn)."""
    import json
    c = ipc(s)
    runs = [c.call("RUN_OPEN", {"thread_id": f"t-gc-{i}"})["run_id"] for i in range(16)]
    before = metrics(c)
    ids = []
    for k in range(64):
        ids.append((runs[k % 16], c.call_async("RUN_APPEND", {"run_id": runs[k % 16],
                                                              "chunk": json.dumps({"type": "CUSTOM", "name": "k", "value": k})})))
    got = {}
    for run, rid in ids:
        got.setdefault(run, []).append(c.wait(rid)["seq"])
    assert all(v == [0, 1, 2, 3] for v in got.values()), got
    after = metrics(c)
    commits = after["runwarden_commit_seconds_count"] - before["runwarden_commit_seconds_count"]
    appended = after["runwarden_events_appended_total"] - before["runwarden_events_appended_total"]
    assert appended == 64, appended
    assert 1 <= commits < 32, f"{commits} commits for 64 pipelined appends"
    c.close()


def metrics(c):
    return status_metrics(c)


def test_status_get_reports_readiness(s):
    c = ipc(s)
    st = c.call("STATUS_GET", {})
    c.close()
    assert st["shim_connected"] is True and st["storage_ok"] is True
    assert "# TYPE runwarden_commit_seconds histogram" in st["metrics"]
