# SPDX-License-Identifier: MIT
"""/chat under bearer tokens and thread scopes (docs/SECURITY.md, "Run
ownership" and "Token scoping"): every /chat request needs a token; a scoped
token cannot start, join (by either run id, with or without threadId) or
hydrate another tenant's thread, nor start one on the WebSocket; a browser's
WebSocket may carry the token as ?access_token=, no other /chat request may;
the CORS preflight allows the stock client's X-Run-Id."""
import json
import os
import tempfile

from t_chat import body_for, post_chat, sse_events
from t_router_lib import WsClient, frame

ADMIN, TA, TB = "chat-admin-token-1", "chat-tenant-a.token", "chat-tenant-b.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-chat-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{TA} threads=a-* harnesses=shell\n{TB} threads=b-*\n")

SUITE_CONF = f"""[routerd]
server_names = x
tokens_file = {TOKENS_FILE}
cors_origins = http://app.example
"""


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def test_chat_needs_a_token_and_keeps_to_its_threads(s):
    body = body_for("a-chat-1", "run-a-1", "echo a")
    head, raw = post_chat(s, body)
    assert head.startswith("HTTP/1.1 401"), head
    head, raw = post_chat(s, body, auth(TB))
    assert head.startswith("HTTP/1.1 403") and json.loads(raw)["code"] == "thread_forbidden", raw
    head, raw = post_chat(s, body, auth(TA))
    assert head.startswith("HTTP/1.1 200"), head
    ev = sse_events(raw)
    assert ev[-1][1]["type"] == "RUN_FINISHED", ev
    run_id = ev[0][1]["runId"]
    for rid in ("run-a-1", run_id):
        # by run id alone: the record's thread is checked against the scope
        st, js = s.http("GET", f"/chat?runId={rid}&offset=-1", headers=auth(TB))
        assert st == 404 and js["code"] == "not_found", (st, js)
        st, js = s.http("GET", f"/chat?runId={rid}&offset=-1&threadId=a-chat-1",
                        headers=auth(TB))
        assert st == 403 and js["code"] == "thread_forbidden", (st, js)
        # a foreign thread named by a token that may use it: not this run
        st, js = s.http("GET", f"/chat?runId={rid}&offset=-1&threadId=b-x", headers=auth(TB))
        assert st == 404, (st, js)
        for tok in (TA, ADMIN):
            st, raw = s.http("GET", f"/chat?runId={rid}&offset=-1", headers=auth(tok))
            assert st == 200 and len(sse_events(raw.decode())) == len(ev), (st, raw)
    st, js = s.http("GET", "/chat?threadId=a-chat-1", headers=auth(TB))
    assert st == 403 and js["code"] == "thread_forbidden", (st, js)
    st, js = s.http("GET", "/chat?threadId=a-chat-1", headers=auth(TA))
    assert st == 200 and len(js["messages"]) == 2, js
    # the token's harnesses
    head, raw = post_chat(s, dict(body_for("b-chat-1", "run-b-1", "echo b"),
                                  forwardedProps={"metadata": {"harness": "nope"}}), auth(TB))
    assert head.startswith("HTTP/1.1 400"), head
    # a query token is for the WebSocket only
    st, js = s.http("GET", f"/chat?runId={run_id}&offset=-1&access_token={TA}")
    assert st == 401, (st, js)
    st, js = s.http("GET", "/threads/b-chat-1/runs", headers=auth(ADMIN))
    assert st == 200 and js == [], js


def test_websocket_takes_access_token_and_keeps_its_scope(s):
    # a missing or wrong token: the upgrade is accepted only to say why, in a
    # RUN_ERROR chunk a browser's client shows, then closed 1008; what the
    # client sends meanwhile is not read (no run starts)
    for path in ("/chat", "/chat?access_token=wrong-token", "/chat?runId=x&offset=-1"):
        w = WsClient(s.port, path)
        w.send(frame(1, json.dumps(body_for("a-chat-unauth", "run-unauth", "echo no")).encode()))
        fin, rsv, op, p = w.recv_frame(10)
        j = json.loads(p)
        assert op == 1 and j["type"] == "RUN_ERROR" and j["code"] == "unauthorized", (path, j)
        fin, rsv, op, p = w.recv_frame(10)
        assert op == 8 and int.from_bytes(p[:2], "big") == 1008, (path, op, p)
    st, js = s.http("GET", "/threads/a-chat-unauth/runs", headers=auth(ADMIN))
    assert st == 200 and js == [], js
    w = WsClient(s.port, f"/chat?access_token={TA}")
    w.send(frame(1, json.dumps(body_for("b-chat-2", "run-b-2", "echo no")).encode()))
    fin, rsv, op, p = w.recv_frame(10)
    j = json.loads(p)
    assert j["type"] == "RUN_ERROR" and j["code"] == "thread_forbidden", j
    # the same socket runs an allowed one to its end and stays open
    w.send(frame(1, json.dumps(body_for("a-chat-2", "run-a-2", "echo yes")).encode()))
    got = []
    while not got or got[-1]["chunk"]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        fin, rsv, op, p = w.recv_frame(20)
        if op == 1:
            j = json.loads(p)
            if j.get("type") != "ping":
                got.append(j)
    assert got[-1]["chunk"]["type"] == "RUN_FINISHED", got
    assert [g["id"] for g in got] == [str(i) for i in range(len(got))], got
    st, js = s.http("GET", "/threads/b-chat-2/runs", headers=auth(ADMIN))
    assert st == 200 and js == [], js


def test_cors_preflight_allows_the_stock_headers(s):
    st, _ = s.http("OPTIONS", "/chat", headers={"Origin": "http://app.example",
                                                 "Access-Control-Request-Method": "POST"})
    assert st == 204
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request("OPTIONS", "/chat", headers={"Host": "x", "Origin": "http://app.example",
                                            "Access-Control-Request-Headers": "x-run-id"})
    r = c.getresponse()
    r.read()
    allow = r.getheader("Access-Control-Allow-Headers")
    assert "X-Run-Id" in allow and "Last-Event-ID" in allow, allow
    assert r.getheader("Access-Control-Allow-Origin") == "http://app.example"
    c.close()
    st, js = s.http("POST", "/chat", body=body_for("a-chat-3", "run-a-3", "echo c"),
                    headers={"Origin": "http://evil.example", **auth(TA)})
    assert st == 403 and js["code"] == "origin_forbidden", (st, js)


def test_client_run_ids_are_per_thread(s):
    """Issue 30 item 8: tenant B takes the predictable id tenant A will use,
    in B's thread; A's POST still starts A's run (no 409), each tenant's join
    by that id alone finds its own run, and probing the id in another thread
    answers exactly as an id that exists nowhere."""
    head, raw = post_chat(s, body_for("b-squat", "run-1", "echo squat"), auth(TB))
    assert head.startswith("HTTP/1.1 200"), head
    b_run = sse_events(raw)[0][1]["runId"]
    head, raw = post_chat(s, body_for("a-victim", "run-1", "echo victim"), auth(TA))
    assert head.startswith("HTTP/1.1 200"), (head, raw)
    ev = sse_events(raw)
    a_run = ev[0][1]["runId"]
    assert a_run != b_run and ev[-1][1]["type"] == "RUN_FINISHED", ev
    assert any("victim" in json.dumps(e[1]) for e in ev), ev
    # A's retry of the same id resumes A's run, never B's
    head, raw = post_chat(s, body_for("a-victim", "run-1", "echo victim"),
                          dict(auth(TA), **{"Last-Event-ID": "0"}))
    assert head.startswith("HTTP/1.1 200"), head
    assert [r["runId"] for r in s.http("GET", "/threads/a-victim/runs",
                                       headers=auth(TA))[1]] == [a_run]
    # a join by the id alone: each token finds its own run
    for tok, want in ((TA, a_run), (TB, b_run)):
        st, raw = s.http("GET", "/chat?runId=run-1&offset=-1&format=ndjson", headers=auth(tok))
        assert st == 200, (st, raw)
        assert json.loads(raw.decode().splitlines()[0])["chunk"]["runId"] == want
    # probes: an id another tenant uses, and one nobody uses, answer alike
    def probe(rid, thread):
        out = []
        st, js = s.http("GET", f"/chat?runId={rid}&offset=-1", headers=auth(TA))
        out.append((st, js))
        st, js = s.http("GET", f"/chat?runId={rid}&offset=-1&threadId={thread}",
                        headers=auth(TA))
        out.append((st, js))
        st, js = s.http("GET", f"/runs/{rid}?threadId={thread}", headers=auth(TA))
        out.append((st, js))
        st, js = s.http("POST", f"/runs/{rid}/cancel?threadId={thread}", headers=auth(TA))
        out.append((st, js))
        return out
    head, raw = post_chat(s, body_for("b-squat", "run-b-only", "echo b"), auth(TB))
    assert head.startswith("HTTP/1.1 200"), head
    used, unused = probe("run-b-only", "a-probe"), probe("run-nobody", "a-probe")
    assert used == unused, (used, unused)
    assert all(st == 404 for st, _ in used), used
    # B's real run id is no oracle either: as an unknown uuid, also when A
    # uses it as a client run id in its own thread
    fake = "00000000-0000-4000-8000-000000000abc"
    assert probe(b_run, "a-probe") == probe(fake, "a-probe")
    head, raw = post_chat(s, body_for("a-uuid", b_run, "echo a-uuid"), auth(TA))
    assert head.startswith("HTTP/1.1 200"), head
    a_alias_run = sse_events(raw)[0][1]["runId"]
    head, raw = post_chat(s, body_for("a-uuid", fake, "echo a-fake"), auth(TA))
    assert head.startswith("HTTP/1.1 200"), head
    a_fake_run = sse_events(raw)[0][1]["runId"]
    for rid, want in ((b_run, a_alias_run), (fake, a_fake_run)):
        st, rec = s.http("GET", f"/runs/{rid}?threadId=a-uuid", headers=auth(TA))
        assert st == 200 and rec["runId"] == want, (st, rec)
        st, rec = s.http("POST", f"/runs/{rid}/cancel?threadId=a-uuid", headers=auth(TA))
        assert st == 202 and rec["runId"] == want, (st, rec)
        st, raw = s.http("GET", f"/chat?runId={rid}&offset=-1&format=ndjson", headers=auth(TA))
        assert st == 200 and json.loads(raw.decode().splitlines()[0])["chunk"]["runId"] == want
    # B still joins its own run by its real id
    st, raw = s.http("GET", f"/chat?runId={b_run}&offset=-1&format=ndjson", headers=auth(TB))
    assert st == 200 and json.loads(raw.decode().splitlines()[0])["chunk"]["runId"] == b_run
