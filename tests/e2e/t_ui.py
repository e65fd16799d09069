# SPDX-License-Identifier: MIT
"""Issue 17, the run viewer: routerd serves the page's files under /ui/ from
ui_dir (content types, ETag and 304, a strict Content-Security-Policy, every
path beneath the root, deep links to index.html, 404 as JSON), GET /threads
lists the host's threads newest first, paged, within a scoped token's threads,
and the WebSocket tail takes the token from the subprotocol (a browser cannot
send Authorization). Then headless Chromium (tests/js/ui-e2e.mjs, playwright-
core) drives the page against the real daemons."""
import asyncio
import base64
import http.client
import json
import os
import subprocess
import tempfile
import time

import websockets

from rwtest import BUILD, poll

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UI = os.path.join(TOP, "ui")
ADMIN, TA = "ui-admin-token-01", "ui-tenant-a.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-ui-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{TA} threads=ua-*\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
ui_dir = {UI}
"""
ARTIFACTS = os.path.abspath(os.environ.get("RW_ARTIFACT_DIR") or os.path.join(BUILD, "test-artifacts"))


def auth(tok=ADMIN):
    return {"Authorization": f"Bearer {tok}"}


def get(s, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def start(s, thread, command, tok=ADMIN):
    body = {"threadId": thread, "messages": [{"role": "user", "content": command}]}
    st, js = s.http("POST", "/runs", body, headers=auth(tok))
    assert st == 202, (st, js)
    return js["runId"]


def wait_done(s, run, thread):
    def done():
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth())
        return st == 200 and rec["status"] in ("completed", "failed", "aborted") and rec
    rec = poll(done, 60, 0.05)
    assert rec, run
    return rec


# ---- static files ----

def test_files_have_their_content_type_csp_and_no_token(s):
    for path, ctype in [("/ui/", "text/html; charset=utf-8"),
                        ("/ui/index.html", "text/html; charset=utf-8"),
                        ("/ui/app.js", "text/javascript; charset=utf-8"),
                        ("/ui/app.css", "text/css; charset=utf-8")]:
        st, h, data = get(s, path)  # no Authorization: the files hold no data
        assert st == 200, (path, st, data[:200])
        assert h["content-type"] == ctype, (path, h)
        with open(os.path.join(UI, path[4:] or "index.html"), "rb") as f:
            assert data == f.read(), path
        csp = h["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp, csp
        assert "unsafe-inline" not in csp and "http" not in csp, csp
        assert h["x-content-type-options"] == "nosniff"
    # the page itself has no inline script or style, which the CSP would block
    with open(os.path.join(UI, "index.html")) as f:
        html = f.read()
    assert "<script>" not in html and " on" not in html.replace(" only", ""), html
    st, h, _ = get(s, "/ui")
    assert st == 308 and h["location"] == "/ui/", (st, h)


def test_etag_gives_304(s):
    st, h, _ = get(s, "/ui/app.js")
    assert st == 200 and h["etag"].startswith('"'), h
    st2, h2, data = get(s, "/ui/app.js", {"If-None-Match": h["etag"]})
    assert st2 == 304 and data == b"" and h2["etag"] == h["etag"], (st2, h2)
    st3, _, _ = get(s, "/ui/app.js", {"If-None-Match": '"other"'})
    assert st3 == 200


def test_deep_links_serve_the_page(s):
    _, _, index = get(s, "/ui/")
    for p in ["/ui/threads/t1", "/ui/threads/t1/runs/0b9c0e0c-0000-4000-8000-000000000000"]:
        st, h, data = get(s, p)
        assert st == 200 and data == index and h["content-type"].startswith("text/html"), p


def test_traversal_and_missing_files_are_404_json(s):
    secret = os.path.join(os.path.dirname(UI), "README.md")
    assert os.path.exists(secret)
    for p in ["/ui/../README.md", "/ui/%2e%2e/README.md", "/ui/..%2fREADME.md",
              "/ui/%2e%2e%2fREADME.md", "/ui/.hidden", "/ui/nope.js", "/ui/x/%2e%2e/%2e%2e/README.md"]:
        st, h, data = get(s, p)
        assert st in (400, 404), (p, st, data[:100])
        assert h["content-type"].startswith("application/json"), (p, h)
        assert b"runwarden" not in data, p
        assert json.loads(data)["code"] in ("not_found", "bad_request"), data
    # a symlink planted in the root that leads out is not followed
    link = os.path.join(UI, "zz-test-link.txt")
    try:
        os.symlink(secret, link)
        st, _, data = get(s, "/ui/zz-test-link.txt")
        assert st == 404, (st, data[:100])
    finally:
        os.unlink(link)
    st, h, _ = get(s, "/ui/")
    assert st == 200


def test_ui_methods(s):
    st, js = s.http("POST", "/ui/", {}, headers=auth())
    assert st == 405, (st, js)


# ---- GET /threads ----

def test_threads_newest_first_and_paged(s):
    ids = [f"ua-page-{i}" for i in range(5)]
    runs = {}
    for t in ids:
        runs[t] = start(s, t, "echo hi")
        wait_done(s, runs[t], t)
        time.sleep(0.005)  # distinct startedAt (ms)
    st, js = s.http("GET", "/threads?prefix=ua-page-", headers=auth())
    assert st == 200, (st, js)
    assert [t["threadId"] for t in js["threads"]] == ids[::-1], js
    assert js["threads"][0]["latestRun"]["runId"] == runs[ids[-1]]
    assert js["nextCursor"] is None
    seen, cursor = [], None
    while True:
        q = "/threads?prefix=ua-page-&limit=2" + (f"&cursor={cursor}" if cursor else "")
        st, js = s.http("GET", q, headers=auth())
        assert st == 200 and len(js["threads"]) <= 2, (st, js)
        seen += [t["threadId"] for t in js["threads"]]
        cursor = js["nextCursor"]
        if not cursor:
            break
    assert seen == ids[::-1], seen
    # a newer run moves its thread to the front
    r = start(s, ids[0], "echo again")
    wait_done(s, r, ids[0])
    st, js = s.http("GET", "/threads?prefix=ua-page-&limit=1", headers=auth())
    assert js["threads"][0]["threadId"] == ids[0] and js["nextCursor"], js
    # status filter: the newest run's status
    st, js = s.http("GET", "/threads?prefix=ua-page-&status=running", headers=auth())
    assert st == 200 and js["threads"] == [], js
    for bad in ["limit=0", "limit=201", "limit=x", "status=weird", "cursor=abc", "cursor=12"]:
        st, js = s.http("GET", f"/threads?{bad}", headers=auth())
        assert st == 400 and js["code"] == "bad_request", (bad, st, js)
    st, js = s.http("GET", "/threads")
    assert st == 401, (st, js)


def test_a_scoped_token_sees_only_its_threads(s):
    mine = start(s, "ua-scope-mine", "echo a")
    other = start(s, "ub-scope-other", "echo b")
    wait_done(s, mine, "ua-scope-mine")
    wait_done(s, other, "ub-scope-other")
    st, js = s.http("GET", "/threads?limit=200", headers=auth(TA))
    assert st == 200, (st, js)
    got = [t["threadId"] for t in js["threads"]]
    assert "ua-scope-mine" in got and all(t.startswith("ua-") for t in got), got
    st, js = s.http("GET", "/threads?prefix=ub-&limit=200", headers=auth(TA))
    assert st == 200 and js["threads"] == [], js
    st, js = s.http("GET", "/threads?limit=200", headers=auth())
    assert "ub-scope-other" in [t["threadId"] for t in js["threads"]], js


# ---- the WebSocket tail's token in the subprotocol ----

def _b64(tok):
    return base64.urlsafe_b64encode(tok.encode()).decode().rstrip("=")


def _status(e):
    return getattr(e, "status_code", None) or e.response.status_code


def test_websocket_token_in_subprotocol(s):
    run = start(s, "ua-ws", "echo over-ws")
    wait_done(s, run, "ua-ws")
    uri = f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId=ua-ws"

    async def tail(protos, selected="runwarden"):
        async with websockets.connect(uri, subprotocols=protos) as ws:
            assert ws.subprotocol == selected, ws.subprotocol
            msgs = []
            try:
                while True:
                    msgs.append(json.loads(await ws.recv()))
            except websockets.ConnectionClosed:
                pass
            return msgs

    msgs = asyncio.run(tail(["runwarden", "bearer." + _b64(ADMIN)]))
    assert msgs[-1]["type"] == "status", msgs
    # the token alone (what a browser app offers first): the server selects
    # that item, since a browser fails a handshake that selects none it offered
    alone = "bearer." + _b64(ADMIN)
    msgs = asyncio.run(tail([alone], selected=alone))
    assert msgs[-1]["type"] == "status", msgs
    for protos in (["runwarden", "bearer." + _b64("wrong-token")], ["runwarden"],
                   ["runwarden", "bearer.!!!"]):
        try:
            asyncio.run(tail(protos))
            raise AssertionError(f"accepted {protos}")
        except (websockets.exceptions.InvalidStatusCode, websockets.exceptions.InvalidHandshake) as e:
            assert _status(e) == 401, e
    # the scoped token reaches only its threads this way too
    other = start(s, "ub-ws", "echo x")
    wait_done(s, other, "ub-ws")
    async def other_thread():
        async with websockets.connect(
                f"ws://127.0.0.1:{s.port}/runs/{other}/stream?threadId=ub-ws",
                subprotocols=["runwarden", "bearer." + _b64(TA)]):
            pass
    try:
        asyncio.run(other_thread())
        raise AssertionError("scoped token tailed another thread")
    except (websockets.exceptions.InvalidStatusCode, websockets.exceptions.InvalidHandshake) as e:
        assert _status(e) == 403, e


# ---- the page in headless Chromium ----

BIG = 100_000


def big_run(s):
    """A run of BIG events appended straight to the run log (RUN_OPEN /
    RUN_APPEND, pipelined): assistant text, tool calls, terminal output."""
    from ipc import Ipc
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"), timeout=60)
    try:
        run = c.call("RUN_OPEN", {"thread_id": "ui-big"})["run_id"]
        chunks = []
        for i in range(BIG - 1):
            k = i % 10
            if k < 5:
                ch = {"type": "CUSTOM", "name": "process.stdout",
                      "value": {"text": f"\x1b[3{k}mline {i}\x1b[0m\n"}}
            elif k == 5:
                ch = {"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m{i}", "delta": f"thinking about {i} "}
            elif k == 6:
                ch = {"type": "TOOL_CALL_START", "toolCallId": f"c{i}", "toolCallName": "grep"}
            elif k == 7:
                ch = {"type": "TOOL_CALL_ARGS", "toolCallId": f"c{i - 1}", "delta": '{"pattern":"x"}'}
            elif k == 8:
                ch = {"type": "TOOL_CALL_END", "toolCallId": f"c{i - 2}"}
            else:
                ch = {"type": "TOOL_CALL_RESULT", "toolCallId": f"c{i - 3}", "content": f"result {i}"}
            chunks.append(json.dumps(ch))
        for j in range(0, len(chunks), 2000):
            ids = [c.call_async("RUN_APPEND", {"run_id": run, "chunk": ch}) for ch in chunks[j:j + 2000]]
            for rid in ids:
                c.wait(rid)
        c.call("RUN_FINISH", {"run_id": run, "status": "completed"})
        return run
    finally:
        c.close()


def test_browser(s):
    js = os.path.join(TOP, "tests", "js")
    if not os.path.isdir(os.path.join(js, "node_modules", "playwright-core")):
        raise AssertionError("tests/js/node_modules missing: ./dev test runs npm ci there")
    out = os.path.join(ARTIFACTS, "t_ui")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, RW_URL=f"http://127.0.0.1:{s.port}", RW_TOKEN=ADMIN,
               RW_ARTIFACTS=out, RW_BIG_RUN=big_run(s), RW_BIG_EVENTS=str(BIG))
    p = subprocess.run(["node", os.path.join(js, "ui-e2e.mjs")], cwd=js, env=env,
                       capture_output=True, text=True, timeout=600)
    print(p.stdout[-4000:])
    assert p.returncode == 0, (p.stdout[-4000:], p.stderr[-4000:])
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["ok"], res
    assert not res["foreign"], res["foreign"]
    assert res["bigDom"] < 2000, res["bigDom"]  # only what is visible is in the DOM
    for shot in ("runs.png", "run.png", "files.png", "big.png"):
        assert os.path.getsize(os.path.join(out, shot)) > 1000, shot
