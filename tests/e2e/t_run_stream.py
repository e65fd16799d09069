# SPDX-License-Identifier: MIT
"""A run end to end: POST /runs, GET /runs/{id}, the WebSocket tail, the shell
harness in a real sandbox, durable seqs, resume with lastSeq, JSON errors."""
import json
import socket
import time

from rwtest import assert_gapfree, stdout_text

# No pool here: this module's sandboxes are built on demand (the cold path);
# t_sandbox and the others use the default pool.
SUITE_CONF = """[containerd-shim]
pool_size = 0
"""


def test_echo_hello_streams_and_completes(s):
    run = s.start_run("echo hello", thread="t-echo")
    events, status, code, reason = s.tail(run, thread="t-echo")
    assert "hello\n" == stdout_text(events), events
    assert_gapfree(events)
    types = [e["chunk"]["type"] for e in events]
    assert types[0] == "RUN_STARTED", types
    assert types[-1] == "RUN_FINISHED", types
    for t in ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"):
        assert t in types, types
    args = next(e["chunk"] for e in events if e["chunk"]["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args["delta"]) == {"command": "echo hello"}
    assert status["status"] == "completed", status
    assert status["lastSeq"] == events[-1]["seq"]
    assert status["runId"] == run and status["threadId"] == "t-echo"
    assert status["exitCode"] == 0
    sandbox = next(e["chunk"]["value"] for e in events if e["chunk"].get("name") == "sandbox.created")
    assert status["sandboxId"] == sandbox["sandboxId"] and sandbox["provider"] == "runwarden"
    assert code == 1000 and reason == "run complete", (code, reason)


def test_exit_status_fails_run_with_run_error(s):
    run = s.start_run("echo out; echo err >&2; exit 3", thread="t-exit")
    events, status, code, _ = s.tail(run, thread="t-exit")
    last = events[-1]["chunk"]
    assert last["type"] == "RUN_ERROR" and last["code"] == "exit_status", last
    assert status["status"] == "failed" and status["exitCode"] == 3, status
    assert status["error"]["code"] == "exit_status"
    assert stdout_text(events) == "out\n"
    assert stdout_text(events, "process.stderr") == "err\n"
    assert code == 1000


def test_resume_with_last_seq_gets_exactly_the_rest(s):
    run = s.start_run("for i in 1 2 3 4 5; do echo line$i; done", thread="t-resume")
    full, status, _, _ = s.tail(run, thread="t-resume")
    assert len(full) >= 6
    for k in (-1, 0, 2, len(full) - 2, len(full) - 1):
        rest, st2, code, _ = s.tail(run, thread="t-resume", last_seq=k)
        assert [e["seq"] for e in rest] == list(range(k + 1, len(full))), (k, rest)
        assert rest == full[k + 1:]
        assert st2 == status and code == 1000


def test_resume_mid_run_after_a_drop(s):
    run = s.start_run("for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.2; done", thread="t-drop")
    first, st, _, _ = s.tail(run, thread="t-drop", limit=3)
    assert st is None and len(first) == 3
    rest, status, code, _ = s.tail(run, thread="t-drop", last_seq=first[-1]["seq"])
    allev = first + rest
    assert_gapfree(allev)
    assert stdout_text(allev) == "".join(f"tick{i}\n" for i in range(1, 7))
    assert status["status"] == "completed" and code == 1000


def test_closing_the_tail_never_stops_the_run(s):
    run = s.start_run("sleep 0.5; echo still-here > /workspace/proof; echo done", thread="t-close")
    ev, st, _, _ = s.tail(run, thread="t-close", limit=1)
    assert st is None
    rec = s.wait_terminal(run, thread="t-close")
    assert rec["status"] == "completed", rec
    events, _, _, _ = s.tail(run, thread="t-close")
    assert stdout_text(events) == "done\n"


def test_get_record_and_wrong_thread_is_404(s):
    run = s.start_run("true", thread="t-get")
    rec = s.wait_terminal(run, thread="t-get")
    for k in ("runId", "threadId", "status", "lastSeq", "startedAt", "updatedAt", "finishedAt"):
        assert k in rec, rec
    st, body = s.http("GET", f"/runs/{run}?threadId=other")
    assert st == 404 and body["code"] and body["error"], body
    st, body = s.http("GET", f"/runs/{run}/stream?threadId=other",
                      headers={"Upgrade": "websocket", "Connection": "Upgrade",
                               "Sec-WebSocket-Version": "13",
                               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert st == 404, (st, body)


def test_unknown_run_is_404(s):
    st, body = s.http("GET", "/runs/00000000-0000-4000-8000-000000000000?threadId=t1")
    assert st == 404 and body == {"error": "unknown run", "code": "not_found"}, body
    st, body = s.http("GET", "/runs/00000000-0000-4000-8000-000000000000/stream?threadId=t1",
                      headers={"Upgrade": "websocket", "Connection": "Upgrade",
                               "Sec-WebSocket-Version": "13",
                               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert st == 404 and body["code"] == "not_found", body


def test_bad_last_seq_is_400(s):
    run = s.start_run("true", thread="t-ls")
    for bad in ("abc", "5x", "-2", "", "1.5"):
        st, body = s.http("GET", f"/runs/{run}/stream?threadId=t-ls&lastSeq={bad}",
                          headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                   "Sec-WebSocket-Version": "13",
                                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        assert st == 400 and body["code"] == "bad_request" and "lastSeq" in body["error"], (bad, st, body)


def test_stream_without_upgrade_is_426(s):
    run = s.start_run("true", thread="t-426")
    st, body = s.http("GET", f"/runs/{run}/stream?threadId=t-426")
    assert st == 426 and body["code"] == "upgrade_required", (st, body)


def test_bad_bodies_are_400_json(s):
    cases = [
        (b"{not json", "invalid_json"),
        (b"[]", "bad_request"),
        (b'{"threadId":"","messages":[{"role":"user","content":"x"}]}', "invalid_thread_id"),
        (b'{"threadId":"t","messages":[]}', "bad_request"),
        (b'{"threadId":"t","messages":[{"content":"x"}]}', "bad_request"),
        (b'{"threadId":"t","messages":[{"role":"user","content":"x"}],"metadata":[1]}', "bad_request"),
        (b'{"threadId":"t\\u0001x","messages":[{"role":"user","content":"x"}]}', "invalid_thread_id"),
        (b'{"threadId":"' + b"a" * 300 + b'","messages":[{"role":"user","content":"x"}]}', "invalid_thread_id"),
    ]
    for raw, code in cases:
        st, body = s.http("POST", "/runs", raw_body=raw, headers={"Content-Type": "application/json"})
        assert st == 400 and isinstance(body, dict) and body.get("code") == code and body.get("error"), (raw, st, body)
    # the daemon is still fine
    st, _ = s.http("GET", "/healthz")
    assert st == 200


def test_sandbox_has_no_network_and_only_lo(s):
    t0 = time.time()
    run = s.start_run(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
        "if bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' 2>/dev/null; then echo CONNECTED; else echo NO-NET; fi",
        thread="t-net")
    events, status, _, _ = s.tail(run, thread="t-net")
    out = stdout_text(events).split()
    assert out == ["lo", "NO-NET"], out
    assert status["status"] == "completed"
    assert time.time() - t0 < 10, "the connect attempt hung instead of failing fast"


def test_sandbox_identity_and_read_only_system(s):
    run = s.start_run("id -u; touch /usr/x 2>/dev/null && echo WROTE-USR || echo RO-USR; "
                      "ls /proc | grep -c '^[0-9]'; hostname", thread="t-id")
    events, status, _, _ = s.tail(run, thread="t-id")
    out = stdout_text(events).split()
    assert out[0] == "1000", out
    assert out[1] == "RO-USR", out
    assert int(out[2]) < 10, f"too many pids visible: {out[2]}"
    assert status["status"] == "completed"


def test_workspace_persists_across_runs_of_a_thread(s):
    r1 = s.start_run("echo from-run-1 > /workspace/note.txt", thread="t-ws")
    assert s.wait_terminal(r1, thread="t-ws")["status"] == "completed"
    r2 = s.start_run("cat /workspace/note.txt; pwd", thread="t-ws")
    events, status, _, _ = s.tail(r2, thread="t-ws")
    assert stdout_text(events) == "from-run-1\n/workspace\n", events
    r3 = s.start_run("cat /workspace/note.txt", thread="t-ws-other")
    assert s.wait_terminal(r3, thread="t-ws-other")["status"] == "failed"


def test_utf8_is_never_split(s):
    # 3-byte characters written one byte at a time with pauses between them
    run = s.start_run(r"printf '\342'; sleep 0.2; printf '\202'; sleep 0.2; printf '\254 ok\n'",
                      thread="t-utf8")
    events, status, _, _ = s.tail(run, thread="t-utf8")
    assert stdout_text(events) == "\u20ac ok\n", events
    for e in events:
        if e["chunk"].get("name") == "process.stdout":
            assert "\ufffd" not in e["chunk"]["value"]["text"]


def test_malformed_http_does_not_hurt_others(s):
    run = s.start_run("sleep 0.3; echo fine", thread="t-bad-http")
    c = socket.create_connection(("127.0.0.1", s.port))
    c.sendall(b"GARBAGE \x00\x01 HTTP/9\r\n\r\n")
    c.settimeout(5)
    resp = c.recv(4096)
    c.close()
    assert resp.startswith(b"HTTP/1.1 400"), resp
    events, status, _, _ = s.tail(run, thread="t-bad-http")
    assert stdout_text(events) == "fine\n" and status["status"] == "completed"
