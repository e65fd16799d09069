# SPDX-License-Identifier: MIT
"""/chat, the AG-UI endpoint: the stock @tanstack/ai-client (tests/js/chat.mjs,
real npm packages) with each stock adapter — fetchServerSentEvents,
fetchHttpStream, webSocket — runs shell commands to completion; a connection
cut mid-run (by a TCP proxy) is resumed by the stock engine of each adapter on
the same run with no duplicate; a second tab joins; a reload hydrates; the stock Stop cancels the
agent. And the raw protocol: the client's run id is a durable alias (a
re-POST after a coordinatord crash resumes, never restarts), bad input gets a
JSON error, the hardening of the other routes applies."""
import json
import os
import shutil
import signal
import subprocess
import time

from rwtest import Skip, poll
from t_router_lib import WsClient, connect, read_all

# short keepalives: the stock clients must skip every kind (SSE comments,
# NDJSON blank lines, {"type":"ping"} frames)
SUITE_CONF = """[routerd]
server_names = x
ws_ping_interval_ms = 300

[harness.runner]
adapter = ndjson
command = ["/usr/bin/python3", "/workspace/.bin/runner"]
"""

# An agent that talks: text, a tool call with streamed arguments and a result,
# more text in the same message.
RUNNER = """import json, sys
r = json.load(sys.stdin)
m, c = "m-" + r["runId"], "c-" + r["runId"]
def e(**k):
    print(json.dumps(k), flush=True)
e(type="RUN_STARTED", threadId=r["threadId"], runId=r["runId"])
e(type="TEXT_MESSAGE_START", messageId=m, role="assistant")
e(type="TEXT_MESSAGE_CONTENT", messageId=m, delta="Hello ")
e(type="TEXT_MESSAGE_CONTENT", messageId=m, delta="world")
e(type="TEXT_MESSAGE_END", messageId=m)
e(type="TOOL_CALL_START", toolCallId=c, toolCallName="search", parentMessageId=m)
e(type="TOOL_CALL_ARGS", toolCallId=c, delta='{"q":')
e(type="TOOL_CALL_ARGS", toolCallId=c, delta='"x"}')
e(type="TOOL_CALL_END", toolCallId=c)
e(type="TOOL_CALL_RESULT", toolCallId=c, messageId="r-" + r["runId"], content='{"hits":1}')
e(type="TEXT_MESSAGE_START", messageId=m, role="assistant")
e(type="TEXT_MESSAGE_CONTENT", messageId=m, delta="done")
e(type="TEXT_MESSAGE_END", messageId=m)
e(type="RUN_FINISHED", threadId=r["threadId"], runId=r["runId"])
"""

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "js")


def node(s, scenario, thread, arg="", timeout=120, harness=None):
    if not shutil.which("node") or not os.path.isdir(os.path.join(JS, "node_modules",
                                                                  "@tanstack", "ai-client")):
        raise Skip("node or tests/js/node_modules missing (./dev test installs them)")
    p = subprocess.run(["node", os.path.join(JS, "chat.mjs"), scenario,
                        f"http://127.0.0.1:{s.port}", thread, arg],
                       capture_output=True, text=True, timeout=timeout, cwd=JS,
                       env=dict(os.environ, **({"CHAT_HARNESS": harness} if harness else {})))
    assert p.returncode == 0, f"chat.mjs {scenario} failed:\n{p.stderr}\n{p.stdout}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def runs_of(s, thread):
    st, runs = s.http("GET", f"/threads/{thread}/runs")
    assert st == 200, (st, runs)
    return runs


def assert_shell_turn(user, assistant, command):
    assert user["role"] == "user" and user["parts"] == [{"type": "text", "content": command}], user
    assert assistant["role"] == "assistant", assistant
    call = [p for p in assistant["parts"] if p["type"] == "tool-call"]
    assert len(call) == 1 and call[0]["name"] == "shell", assistant
    assert call[0]["input"] == {"command": command} and call[0]["state"] == "complete", call
    assert call[0]["output"]["exitCode"] == 0, call


def test_stock_adapters_run_to_completion(s):
    for kind in ("sse", "ndjson", "ws"):
        thread = f"t-chat-{kind}"
        out = node(s, "run", thread, kind)
        assert out["errors"] == [], out["errors"]
        assert out["types"][0] == "RUN_STARTED" and out["types"][-1] == "RUN_FINISHED", out["types"]
        assert out["stdout"] == f"one-{kind}\ntwo-{kind}\n", out["stdout"]
        m = out["messages"]
        assert len(m) == 2, m
        assert_shell_turn(m[0], m[1], f"echo one-{kind}; echo two-{kind}")
        m2 = out["messages2"]
        assert len(m2) == 4 and m2[:2] == m, m2
        assert_shell_turn(m2[2], m2[3], f"echo three-{kind}")
        runs = runs_of(s, thread)
        assert len(runs) == 2 and all(r["status"] == "completed" for r in runs), runs


def test_cut_connection_resumes_the_same_run(s):
    # a proxy cuts the first response mid-line after some events: the stock
    # engine re-POSTs the same body with Last-Event-ID
    for kind, post in (("sse", "POST /chat HTTP/1.1"),
                       ("ndjson", "POST /chat?format=ndjson HTTP/1.1"), ("ws", None)):
        thread = f"t-chat-cut-{kind}"
        out = node(s, "cut", thread, kind)
        px = out["proxy"]
        assert px["cut"], px
        if post:
            assert [r for r in px["requests"] if r.startswith("POST")] == [post] * 2, px
            assert any(r.startswith("Last-Event-ID ") for r in px["requests"]), px
        else:
            # the conversation socket, then the adapter's resume socket on
            # the client's run id
            first, again = px["requests"]
            assert first.startswith("GET /chat?runId=run-"), px
            assert again.startswith(f"GET {first.split(' ')[1]}&offset="), px
        assert out["errors"] == [], out["errors"]
        t = out["types"]
        for once in ("RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT",
                     "RUN_FINISHED"):
            assert t.count(once) == 1, t
        lines = "".join(json.loads(x)["text"]
                        for x in out["stdout"].replace("}{", "}\n{").split("\n"))
        assert lines == "".join(f"line{i}\n" for i in range(1, 7)), lines
        runs = runs_of(s, thread)
        assert len(runs) == 1 and runs[0]["status"] == "completed", runs


def without_assistant_ids(messages):
    return [dict(m, id=None) if m["role"] == "assistant" else m for m in messages]


def test_second_tab_joins(s):
    for kind in ("sse", "ndjson"):
        out = node(s, "join", f"t-chat-join-{kind}", kind)
        assert out["errors"] == [], out["errors"]
        assert out["bTypes"][0] == "RUN_STARTED" and out["bTypes"][-1] == "RUN_FINISHED", out
        assert without_assistant_ids(out["b"]) == without_assistant_ids(out["a"]), out
        assert len(runs_of(s, f"t-chat-join-{kind}")) == 1


def test_hydrate_after_reload(s):
    out = node(s, "hydrate", "t-chat-hydrate", "sse")
    assert out["errors"] == [], out["errors"]
    assert len(out["a"]) == 4, out["a"]
    # the same messages as the live client built (the assistant message's id
    # is the client's own there)
    assert without_assistant_ids(out["b"]) == without_assistant_ids(out["a"]), out
    # an agent's text and tool calls: the rebuild must be the StreamProcessor's
    st, _ = s.http("POST", "/threads/t-chat-talk/files/.bin?op=mkdir")
    assert st == 201, st
    st, _ = s.http("PUT", "/threads/t-chat-talk/files/.bin/runner", raw_body=RUNNER.encode())
    assert st in (200, 201), st
    out = node(s, "hydrate", "t-chat-talk", "sse", harness="runner")
    assert out["errors"] == [], out["errors"]
    texts = [p["content"] for m in out["a"] for p in m["parts"] if p["type"] == "text"]
    assert "Hello world" in texts and "done" in texts, out["a"]
    assert out["b"] == out["a"], out
    st, h = s.http("GET", "/chat?threadId=t-chat-hydrate")
    assert st == 200 and h["activeRun"] is None and h["interrupts"] is None, h
    st, h = s.http("GET", "/chat?threadId=t-chat-never-used")
    assert st == 200 and h == {"messages": [], "activeRun": None, "interrupts": None}, h


def sandbox_procs(marker):
    p = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return p.stdout.split()


def test_stop_cancels_the_agent(s):
    # `sleep 301.37`: a command line no other test runs
    out = node(s, "stop", "t-chat-stop", "ws")
    assert "TOOL_CALL_START" in out["types"], out
    runs = poll(lambda: [r for r in runs_of(s, "t-chat-stop") if r["status"] != "running"] or None,
                timeout=30)
    assert runs and runs[0]["status"] == "aborted" and runs[0].get("cancelRequested"), runs
    assert poll(lambda: not sandbox_procs("sleep 301.37"), timeout=30), sandbox_procs("sleep 301.37")


def sse_events(raw):
    ev = []
    for block in raw.split("\n\n"):
        eid, data = None, []
        for line in block.split("\n"):
            if line.startswith("id: "):
                eid = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            ev.append((eid, json.loads("\n".join(data))))
    return ev


def post_chat(s, body, headers=None, path="/chat", timeout=30):
    c = connect(s.port, timeout=timeout)
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    h = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(data)),
         "Accept": "application/json",  # whatever Accept says: an event stream
         "Connection": "close"}
    h.update(headers or {})
    c.sendall((f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
               + "\r\n").encode() + data)
    buf, _ = read_all(c, timeout)
    c.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


def body_for(thread, run, command):
    return {"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u1", "role": "user",
                          "content": [{"type": "text", "text": command}]}],
            "forwardedProps": {"metadata": {"harness": "shell"}}, "data": {}}


def test_client_run_id_is_a_durable_alias(s):
    body = body_for("t-chat-alias", "run-alias-1", "echo a; echo b")
    head, raw = post_chat(s, body, {"X-Run-Id": "run-alias-1"})
    assert head.startswith("HTTP/1.1 200") and "Content-Type: text/event-stream" in head, head
    ev = sse_events(raw)
    assert [e[0] for e in ev] == [str(i) for i in range(len(ev))], ev
    assert ev[-1][1]["type"] == "RUN_FINISHED" and "status" not in raw, raw
    run_id = ev[0][1]["runId"]
    # coordinatord dies and comes back: the alias was committed with the run
    s.kill("coordinatord", signal.SIGKILL)
    s.start_daemon("coordinatord")
    poll(lambda: s.http("GET", "/chat?runId=run-alias-1&offset=-1")[0] != 503, timeout=20)
    head, raw = post_chat(s, body, {"X-Run-Id": "run-alias-1", "Last-Event-ID": "2"})
    ev2 = sse_events(raw)
    assert [e[0] for e in ev2] == [e[0] for e in ev[3:]], (ev2, ev)
    assert [e[1] for e in ev2] == [e[1] for e in ev[3:]]
    runs = runs_of(s, "t-chat-alias")
    assert [r["runId"] for r in runs] == [run_id], runs
    # a join by either id, NDJSON envelopes
    for rid in ("run-alias-1", run_id):
        st, raw = s.http("GET", f"/chat?runId={rid}&offset=4&format=ndjson")
        assert st == 200, (st, raw)
        lines = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]
        assert [x["id"] for x in lines] == [e[0] for e in ev[5:]], lines
        assert [x["chunk"] for x in lines] == [e[1] for e in ev[5:]]
    # the alias is the cancel's name too (a terminal run stays as it is)
    st, rec = s.http("POST", "/runs/run-alias-1/cancel?threadId=t-chat-alias")
    assert st == 202 and rec["runId"] == run_id and rec["status"] == "completed", (st, rec)
    # a client run id is per thread: another thread's use of it is a run of
    # its own (issue 30 item 8), and each thread's name still finds its own
    head, raw = post_chat(s, body_for("t-chat-other", "run-alias-1", "echo x"))
    assert head.startswith("HTTP/1.1 200"), head
    other = sse_events(raw)[0][1]["runId"]
    assert other != run_id and [r["runId"] for r in runs_of(s, "t-chat-other")] == [other]
    for thread, want in (("t-chat-alias", run_id), ("t-chat-other", other)):
        st, rec = s.http("GET", f"/runs/run-alias-1?threadId={thread}")
        assert st == 200 and rec["runId"] == want, (st, rec)
    # the join by the id alone (the operator's token: every thread) takes the newest
    st, raw = s.http("GET", "/chat?runId=run-alias-1&offset=-1&format=ndjson")
    assert st == 200 and json.loads(raw.decode().splitlines()[0])["chunk"]["runId"] == other


def test_websocket_join_and_keepalive(s):
    head, raw = post_chat(s, body_for("t-chat-wsjoin", "run-wsjoin", "echo w"))
    n = len(sse_events(raw))
    w = WsClient(s.port, "/chat?runId=run-wsjoin&offset=-1")
    got = []
    while True:
        fin, rsv, op, p = w.recv_frame(10)
        if op == 1:
            got.append(json.loads(p))
        elif op == 8:
            assert int.from_bytes(p[:2], "big") == 1000, p
            break
    assert [g["id"] for g in got] == [str(i) for i in range(n)], got
    assert got[-1]["chunk"]["type"] == "RUN_FINISHED"
    # the conversation socket: a protocol ping and the stock {"type":"ping"}
    w = WsClient(s.port, "/chat")
    seen = set()
    while len(seen) < 2:
        fin, rsv, op, p = w.recv_frame(5)
        if op == 9:
            seen.add("ping")
        elif op == 1:
            assert json.loads(p) == {"type": "ping"}, p
            seen.add("text")


# An agent that streams a long answer as a model does, token by token, and a
# tool call whose arguments come a character at a time. The user message's
# last two words: the number of deltas and their size.
LONG_RUNNER = """import json, sys
r = json.load(sys.stdin)
c = r["messages"][-1]["content"]
words = ("".join(p["text"] for p in c) if isinstance(c, list) else c).split()
n, size = int(words[-2]), int(words[-1])
m, k = "m-" + r["runId"], "k-" + r["runId"]
w = sys.stdout.write
def e(**x):
    w(json.dumps(x) + "\\n")
e(type="RUN_STARTED", threadId=r["threadId"], runId=r["runId"])
e(type="TEXT_MESSAGE_START", messageId=m, role="assistant")
for i in range(n):
    e(type="TEXT_MESSAGE_CONTENT", messageId=m, delta=("%d|" % i).rjust(size, "."))
e(type="TEXT_MESSAGE_END", messageId=m)
e(type="TOOL_CALL_START", toolCallId=k, toolCallName="write", parentMessageId=m)
for ch in json.dumps({"path": "a.txt", "body": "é" * 3000}):
    e(type="TOOL_CALL_ARGS", toolCallId=k, delta=ch)
e(type="TOOL_CALL_END", toolCallId=k)
e(type="TOOL_CALL_RESULT", toolCallId=k, messageId="r-" + r["runId"], content='{"ok":true}')
e(type="RUN_FINISHED", threadId=r["threadId"], runId=r["runId"])
sys.stdout.flush()
"""


def long_run(s, thread, n, size, parts=1):
    st, _ = s.http("POST", f"/threads/{thread}/files/.bin?op=mkdir")
    assert st == 201, st
    st, _ = s.http("PUT", f"/threads/{thread}/files/.bin/runner", raw_body=LONG_RUNNER.encode())
    assert st in (200, 201), st
    words = [{"type": "text", "text": f"w{i} "} for i in range(parts)]
    body = dict(body_for(thread, f"run-{thread}", ""),
                forwardedProps={"metadata": {"harness": "runner"}})
    body["messages"][0]["content"] = words + [{"type": "text", "text": f"{n} {size}"}]
    head, raw = post_chat(s, body, timeout=120)
    assert head.startswith("HTTP/1.1 200"), head
    ev = sse_events(raw)
    assert ev[-1][1]["type"] == "RUN_FINISHED", ev[-3:]
    return "".join(w["text"] for w in body["messages"][0]["content"])


def test_hydrate_of_a_long_streamed_answer(s):
    """A reload of a long answer streamed token by token (30,000 deltas), a
    tool call whose arguments came a character at a time, a user message of
    2,000 content parts: whole and exact. A thread past read_max_bytes is 413
    too_large, and coordinatord goes on serving. (The time the rebuild takes,
    which was quadratic in the deltas, is bench/chat-hydrate-bench.py's.)"""
    user = long_run(s, "t-chat-long", 30000, 8, parts=2000)
    st, h = s.http("GET", "/chat?threadId=t-chat-long")
    assert st == 200, (st, h)
    um, am = h["messages"]
    assert um["role"] == "user" and um["parts"] == [{"type": "text", "content": user}], um
    text, call, result = am["parts"]
    assert text["content"] == "".join(("%d|" % i).rjust(8, ".") for i in range(30000))
    args = json.dumps({"path": "a.txt", "body": "é" * 3000})
    assert call["arguments"] == args and call["input"] == json.loads(args), call["state"]
    assert call["state"] == "complete" and call["output"] == {"ok": True}, call
    assert result["type"] == "tool-result" and result["content"] == '{"ok":true}', result
    # 5,000 deltas of 1,000 bytes: past the 4M read_max_bytes
    long_run(s, "t-chat-huge", 5000, 1000)
    st, js = s.http("GET", "/chat?threadId=t-chat-huge")
    err(st, js, 413, "too_large")
    assert s.http("GET", "/readyz")[0] == 200
    assert s.http("GET", "/chat?threadId=t-chat-long")[1] == h


def err(st, js, status, code):
    assert st == status and isinstance(js, dict) and js.get("code") == code, (st, js)


def test_bad_inputs(s):
    st, js = s.http("GET", "/chat?runId=anything")
    err(st, js, 400, "bad_request")
    assert "offset" in js["error"]
    st, js = s.http("GET", "/chat")
    err(st, js, 400, "bad_request")
    st, js = s.http("GET", "/chat?runId=no-such-run&offset=-1")
    err(st, js, 404, "not_found")
    st, js = s.http("GET", "/chat?runId=no-such-run&offset=banana")
    err(st, js, 400, "bad_request")
    st, js = s.http("POST", "/chat", raw_body=b"{not json",
                    headers={"Content-Type": "application/json"})
    err(st, js, 400, "invalid_json")
    st, js = s.http("POST", "/chat", body={"threadId": "t", "runId": "r", "messages": []})
    err(st, js, 400, "bad_request")
    st, js = s.http("POST", "/chat", body={"threadId": "t", "messages": [{"role": "user",
                                                                          "content": "x"}]})
    err(st, js, 400, "bad_request")
    assert "runId" in js["error"]
    st, js = s.http("POST", "/chat", body=body_for("t", "r1", "x"), headers={"X-Run-Id": "r2"})
    err(st, js, 400, "bad_request")
    st, js = s.http("POST", "/chat", body=dict(body_for("t", "r1", "x"), forwardedProps=[]))
    err(st, js, 400, "bad_request")
    st, js = s.http("POST", "/chat", body=dict(body_for("t", "r1", "x"),
                                               forwardedProps={"metadata": {"harness": "nope"}}))
    err(st, js, 400, "bad_request")
    assert "harness" in js["error"]
    st, js = s.http("POST", "/chat", body=dict(body_for("t", "r1", "x"),
                                               forwardedProps={"sessionId": "--evil"}))
    err(st, js, 400, "bad_request")
    assert "sessionId" in js["error"]
    st, js = s.http("POST", "/chat", raw_body=json.dumps(body_for("t", "r1", "x")).encode(),
                    headers={"Content-Type": "text/plain"})
    err(st, js, 415, "unsupported_media_type")
    st, js = s.http("DELETE", "/chat")
    assert st == 405, (st, js)
    # the hardening of every route: a foreign Origin, a foreign Host
    st, js = s.http("POST", "/chat", body=body_for("t", "r1", "x"),
                    headers={"Origin": "http://evil.example"})
    err(st, js, 403, "origin_forbidden")
    head, raw = post_chat(s, body_for("t", "r1", "x"), {"Host": "evil.example"})
    assert head.startswith("HTTP/1.1 421"), head
    # nothing above started a run
    assert runs_of(s, "t") == []
    # a malformed frame on the conversation socket: a RUN_ERROR chunk, the
    # socket stays usable
    w = WsClient(s.port, "/chat")
    from t_router_lib import frame
    w.send(frame(1, b"[1,2"))
    fin, rsv, op, p = w.recv_frame(10)
    j = json.loads(p)
    assert op == 1 and j["type"] == "RUN_ERROR" and j["code"] == "invalid_json", j
    w.send(frame(1, json.dumps(body_for("t", "r1", "x") | {"messages": []}).encode()))
    fin, rsv, op, p = w.recv_frame(10)
    assert json.loads(p)["code"] == "bad_request", p
    assert runs_of(s, "t") == []
