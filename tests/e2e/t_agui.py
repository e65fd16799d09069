# SPDX-License-Identifier: MIT
"""Issue 13 part 3: every stream runwarden stores is a valid AG-UI stream.
Every ending of every harness — shell (success, exit != 0, cancel, watchdog
stall, sandbox lost, output limit, max run time), the ndjson runner (ok, a
bad chunk, its own RUN_ERROR, a crash, a tool call left open), Claude Code
and Codex (the recorded transcripts) — is produced on the real daemons, then
tests/js/agui-check.mjs runs the stored chunks through @ag-ui/core's
EventSchemas, @ag-ui/client's verifyEvents and @tanstack/ai's
StreamProcessor / @tanstack/ai-client's ChatClient."""
import json
import os
import signal
import subprocess

from rwtest import Skip, stdout_text
from t_harness import STANDIN_HARNESSES, prepare, run_harness

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
JS = os.path.join(TOP, "tests", "js")

SUITE_CONF = """[coordinatord]
max_run_ms = 15000
stall_timeout_ms = 2500
max_run_output_bytes = 1M
sandbox_wait_ms = 1500

""" + STANDIN_HARNESSES + "max_line = 4K\n"


def check(chunks, run_id):
    """The stream through the real packages, plus the rules they do not
    enforce themselves. Returns agui-check.mjs's verdict."""
    if not os.path.isdir(os.path.join(JS, "node_modules", "@ag-ui")):
        raise Skip("tests/js/node_modules missing (cd tests/js && npm ci)")
    data = "".join(json.dumps(c) + "\n" for c in chunks)
    p = subprocess.run(["node", os.path.join(JS, "agui-check.mjs")], input=data.encode(),
                       cwd=JS, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    v = json.loads(p.stdout.decode().strip().splitlines()[-1])
    assert v["ok"], json.dumps({"verdict": v, "chunks": chunks}, indent=1)[:6000]
    assert chunks[0]["type"] == "RUN_STARTED" and chunks[0]["runId"] == run_id, chunks[:2]
    last = chunks[-1]
    assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), last
    assert [c["type"] for c in chunks].count("RUN_STARTED") == 1, chunks
    if last["type"] == "RUN_ERROR":
        assert last["runId"] == run_id, last
        assert last["metadata"]["tanstack"]["runId"] == run_id, last
    else:
        assert last["runId"] == run_id, last
    results = {c["toolCallId"]: c for c in chunks if c["type"] == "TOOL_CALL_RESULT"}
    for c in chunks:
        if c["type"] == "TOOL_CALL_START":
            r = results.get(c["toolCallId"])
            assert r and r.get("messageId"), (c, chunks)
        if c["type"] == "CUSTOM" and c["name"] == "file.changed":
            assert isinstance(c["value"].get("path"), str), c
    assert v.get("processorError") is None, v["processorError"]
    assert v.get("chatMessages"), v
    return v


def tool_parts(v):
    return [p for m in v["chatMessages"] if m["role"] == "assistant" for p in m["parts"]
            if p["type"] in ("tool-call", "tool-result")]


def shell(s, command, thread="t-agui", timeout=90):
    run = s.start_run(command, thread=thread)
    events, status, _, _ = s.tail(run, thread=thread, timeout=timeout)
    return run, events, [e["chunk"] for e in events], status


def test_shell_success_shows_its_output_in_the_tool_result(s):
    run, events, chunks, status = shell(s, "echo hello; echo oops >&2")
    assert status["status"] == "completed"
    v = check(chunks, run)
    call = [p for p in tool_parts(v) if p["type"] == "tool-call"][0]
    assert call["name"] == "shell" and call["output"]["stdout"] == "hello\n", call
    assert call["output"]["stderr"] == "oops\n" and call["state"] != "error", call
    assert stdout_text(events) == "hello\n"  # the CUSTOM events are still there


def test_shell_failure_is_an_output_error(s):
    run, _, chunks, status = shell(s, "echo partial; exit 3")
    assert status["status"] == "failed"
    v = check(chunks, run)
    res = [p for p in tool_parts(v) if p["type"] == "tool-result"][0]
    assert res["state"] == "error" and "status 3" in res["error"], res
    call = [p for p in tool_parts(v) if p["type"] == "tool-call"][0]
    assert call["output"]["stdout"] == "partial\n" and call["output"]["exitCode"] == 3, call
    assert v["chatError"] == "command exited with status 3", v.get("chatError")


def test_shell_cancel(s):
    run = s.start_run("echo started; sleep 60.31", thread="t-agui")
    last, seen = -1, ""
    while "started\n" not in seen:
        ev = s.tail(run, thread="t-agui", last_seq=last, limit=1, timeout=30)[0]
        last, seen = ev[0]["seq"], seen + stdout_text(ev)
    st, rec = s.http("POST", f"/runs/{run}/cancel?threadId=t-agui")
    assert st in (200, 202), (st, rec)
    events, status, _, _ = s.tail(run, thread="t-agui", timeout=60)
    chunks = [e["chunk"] for e in events]
    assert status["status"] == "aborted", status
    v = check(chunks, run)
    res = [p for p in tool_parts(v) if p["type"] == "tool-result"][0]
    assert res["state"] == "error" and "interrupted" in res["content"], res


def test_shell_watchdog_stall(s):
    run, _, chunks, status = shell(s, "sleep 1000.32")
    assert status["status"] == "failed" and "watchdog" in status["error"]["message"], status
    check(chunks, run)
    assert any(c["type"] == "TOOL_CALL_RESULT" and "interrupted" in c["content"] for c in chunks)


def test_shell_output_limit(s):
    run, _, chunks, status = shell(s, "yes | head -c 3000000", timeout=120)
    assert status["status"] == "failed" and status["error"]["code"] == "output_limit", status
    check(chunks, run)


def test_shell_max_run_time(s):
    run, _, chunks, status = shell(s, "echo spin; while :; do :; done", timeout=120)
    assert status["status"] == "failed" and status["error"]["code"] == "run_timeout", status
    check(chunks, run)


def test_shell_timeout_of_the_command_keeps_the_output(s):
    run, _, chunks, status = shell(s, "echo before; kill -9 $$")
    assert status["status"] == "failed", status
    v = check(chunks, run)
    call = [p for p in tool_parts(v) if p["type"] == "tool-call"][0]
    assert call["output"]["stdout"] == "before\n", call


def test_ndjson_endings(s):
    prepare(s, "t-agui-nd")
    for mode, want in (("ok", "completed"), ("error", "failed"), ("crash", "failed"),
                       ("garbage", "failed"), ("opentool", "completed")):
        run, chunks, status = run_harness(s, "t-agui-nd", "runner", mode)
        assert status["status"] == want, (mode, status)
        check(chunks, run)
    run, chunks, status = run_harness(s, "t-agui-nd", "runner", "opentool")
    v = check(chunks, run)
    assert [c["type"] for c in chunks][-4:] == ["TEXT_MESSAGE_END", "TOOL_CALL_END",
                                               "TOOL_CALL_RESULT", "RUN_FINISHED"], chunks


def test_ndjson_bad_chunk_ends_the_run_with_a_clear_error(s):
    prepare(s, "t-agui-nd")
    run, chunks, status = run_harness(s, "t-agui-nd", "runner", "badchunk")
    assert status["status"] == "failed", status
    assert chunks[-1]["message"] == ("runner sent an invalid AG-UI chunk: TOOL_CALL_START: "
                                     "\"toolCallName\" is missing or of the wrong type"), chunks[-1]
    assert not any(c.get("toolCallId") == "t1" or c.get("messageId") == "never" for c in chunks)
    check(chunks, run)
    # a chunk after the runner's own RUN_FINISHED: not stored, the run fails
    run, chunks, status = run_harness(s, "t-agui-nd", "runner", "afterfinish")
    assert status["status"] == "failed", status
    assert [c["type"] for c in chunks][-2:] == ["RUN_FINISHED", "RUN_ERROR"], chunks
    assert chunks[-1]["message"] == "runner sent a chunk after RUN_FINISHED", chunks[-1]
    assert not any(c.get("messageId") == "late" for c in chunks)
    check(chunks, run)


def test_claude_and_codex_transcripts(s):
    prepare(s, "t-agui-cli")
    for harness, fixture in (("claude", "basic"), ("claude", "error"), ("claude", "truncated"),
                             ("codex", "basic"), ("codex", "failed")):
        run, chunks, status = run_harness(s, "t-agui-cli", harness, "fixture:" + fixture)
        v = check(chunks, run)
        assert status["status"] in ("completed", "failed"), status
        assert [m for m in v["chatMessages"] if m["role"] == "assistant"], (harness, fixture, v)


def test_shell_sandbox_lost(s):
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable", r"shim"]
    run = s.start_run("echo started; sleep 30.33", thread="t-agui-lost")
    last, seen = -1, ""
    while "started\n" not in seen:
        ev = s.tail(run, thread="t-agui-lost", last_seq=last, limit=1, timeout=30)[0]
        last, seen = ev[0]["seq"], seen + stdout_text(ev)
    s.kill("containerd-shim", signal.SIGKILL)
    try:
        events, status, _, _ = s.tail(run, thread="t-agui-lost", timeout=60)
        assert status["status"] == "failed" and status["error"]["code"] == "sandbox_lost", status
        check([e["chunk"] for e in events], run)
    finally:
        s.start_daemon("containerd-shim")
        s.wait_readyz()
