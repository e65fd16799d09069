# SPDX-License-Identifier: MIT
"""Issue 11, the holes above the kernel that routerd closes (docs/SECURITY.md):

- run ownership: every /runs/{id}... route needs the run's threadId (400
  thread_required), and coordinatord refuses a thread-less run read, watch or
  cancel from routerd;
- cross-site requests: JSON bodies need Content-Type: application/json (415),
  any Origin but routerd's own or a cors_origins one is refused (403), and a
  real headless Chromium on another loopback origin can neither start a run
  nor write a workspace file;
- DNS rebinding: a Host that does not name this server gets 421.

Each test performs the attack and shows it refused, and that nothing happened."""
import asyncio
import http.client
import json
import os
import time
import urllib.parse

import websockets

from ipc import Ipc, IpcError
from rwtest import free_port, json_response, poll
from t_router_lib import WS_KEY, connect, parse_responses

ALLOWED_PAGE = "http://allowed.example:8080"

SUITE_CONF = f"""[routerd]
cors_origins = {ALLOWED_PAGE}
"""


def req(s, method, path, body=None, headers=None):
    """One request with exactly these headers (Host may be overridden)."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request(method, path, body=body, headers=dict(headers or {}))
    return json_response(c)


def raw(s, data):
    c = connect(s.port, timeout=10)
    c.sendall(data)
    buf = b""
    while not parse_responses(buf)[0]:
        b = c.recv(65536)
        if not b:
            break
        buf += b
    c.close()
    return parse_responses(buf)[0][0]


def ws_head(path, host, extra=""):
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {WS_KEY}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{extra}\r\n").encode()


def sse_head(path, host, extra=""):
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
            f"{extra}\r\n").encode()


def thread_runs(s, thread):
    st, runs = s.http("GET", f"/threads/{thread}/runs")
    assert st == 200, (st, runs)
    return runs


def workspace_file(s, thread, path):
    return s.http("GET", f"/threads/{thread}/files/{path}?stat=1")[0]


# ---- run ownership (thread_required) ----

def test_run_routes_without_thread_are_refused(s):
    run = s.start_run("sleep 30", thread="t-owner")
    host = f"127.0.0.1:{s.port}"
    try:
        for method, path in (("GET", f"/runs/{run}"), ("POST", f"/runs/{run}/cancel"),
                             ("GET", f"/runs/{run}?lastSeq=3"),
                             ("POST", f"/runs/{run}/cancel?threadId=")):
            st, body = s.http(method, path)
            want = "invalid_thread_id" if path.endswith("threadId=") else "thread_required"
            assert st == 400 and body["code"] == want, (method, path, st, body)
        r = raw(s, ws_head(f"/runs/{run}/stream", host))
        assert r.status == 400 and r.json()["code"] == "thread_required", r
        r = raw(s, sse_head(f"/runs/{run}/stream?lastSeq=-1", host))
        assert r.status == 400 and r.json()["code"] == "thread_required", r

        async def ws(uri):
            async with websockets.connect(uri):
                pass
        try:
            asyncio.run(ws(f"ws://{host}/runs/{run}/stream"))
            raise AssertionError("a thread-less WebSocket tail was accepted")
        except websockets.InvalidStatusCode as e:
            assert e.status_code == 400

        # another thread's id: the run does not exist for it
        for method, path in (("GET", f"/runs/{run}?threadId=t-intruder"),
                             ("POST", f"/runs/{run}/cancel?threadId=t-intruder")):
            st, body = s.http(method, path)
            assert st == 404 and body["code"] == "not_found", (method, path, st, body)
        r = raw(s, sse_head(f"/runs/{run}/stream?threadId=t-intruder", host))
        assert r.status == 404, r

        # none of that touched the run
        st, rec = s.http("GET", f"/runs/{run}?threadId=t-owner")
        assert st == 200 and rec["status"] == "running" and not rec.get("cancelRequested"), rec
    finally:
        st, rec = s.http("POST", f"/runs/{run}/cancel?threadId=t-owner")
        assert st == 202, (st, rec)
    assert s.wait_terminal(run, thread="t-owner")["status"] == "aborted"


def test_coordinatord_refuses_threadless_run_requests_from_routerd(s):
    run = s.start_run("echo mine", thread="t-coord")
    s.wait_terminal(run, thread="t-coord")
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"), role="routerd")
    try:
        for name, body in (("RUN_GET", {"run_id": run}),
                           ("RUN_READ", {"run_id": run, "from_seq": -1, "max": 10}),
                           ("RUN_WATCH", {"run_id": run}),
                           ("RUN_CANCEL", {"run_id": run})):
            try:
                c.call(name, body)
                raise AssertionError(f"{name} without thread_id was answered")
            except IpcError as e:
                assert "thread_required" in (e.message or ""), (name, e)
        # the owner's thread works, another thread's is "no such run"
        assert c.call("RUN_GET", {"run_id": run, "thread_id": "t-coord"})["record"]
        c.call("RUN_WATCH", {"run_id": run, "thread_id": "t-coord"})
        c.call("RUN_UNWATCH", {"run_id": run})
        for name, body in (("RUN_GET", {"run_id": run, "thread_id": "t-other"}),
                           ("RUN_WATCH", {"run_id": run, "thread_id": "t-other"}),
                           ("RUN_READ", {"run_id": run, "thread_id": "t-other", "from_seq": -1,
                                         "max": 10})):
            try:
                c.call(name, body)
                raise AssertionError(f"{name} of another thread was answered")
            except IpcError as e:
                assert "thread_required" not in (e.message or ""), (name, e)
    finally:
        c.close()


# ---- cross-site requests ----

def test_json_bodies_need_application_json(s):
    body = json.dumps({"threadId": "t-ctype", "messages": [{"role": "user",
                                                            "content": "echo x"}]}).encode()
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", "application/jsonp", None):
        h = {"Content-Type": ctype} if ctype else {}
        st, js = req(s, "POST", "/runs", body, h)
        assert st == 415 and js["code"] == "unsupported_media_type", (ctype, st, js)
    assert thread_runs(s, "t-ctype") == []
    for path, b in (("/threads/t-ctype/snapshots", b"{}"), ("/threads/t-ctype/restore",
                                                            b'{"snapshotId":"x"}'),
                    ("/runs/00000000-0000-4000-8000-000000000000/cancel?threadId=t-ctype",
                     b"{}")):
        st, js = req(s, "POST", path, b, {"Content-Type": "text/plain"})
        assert st == 415 and js["code"] == "unsupported_media_type", (path, st, js)
    st, js = req(s, "POST", "/runs", body, {"Content-Type": "Application/JSON; charset=utf-8"})
    assert st == 202, (st, js)
    s.wait_terminal(js["runId"], thread="t-ctype")
    # the file API keeps taking raw bytes of any type
    for ctype in ("application/octet-stream", "text/plain", None):
        h = {"Content-Type": ctype} if ctype else {}
        st, js = req(s, "PUT", "/threads/t-ctype/files/raw.bin", b"\x00\x01bytes", h)
        assert st in (200, 201), (ctype, st, js)


def test_foreign_origin_is_refused_on_every_route(s):
    assert poll(lambda: s.http("GET", "/readyz")[0] == 200, 15)
    host = f"127.0.0.1:{s.port}"
    body = json.dumps({"threadId": "t-origin", "messages": [{"role": "user",
                                                             "content": "echo x"}]}).encode()
    jh = {"Content-Type": "application/json"}
    for origin in ("http://evil.example", f"http://127.0.0.1:{s.port + 1}", "null",
                   f"http://localhost.evil.example:{s.port}", f"https://{host}.evil"):
        o = {"Origin": origin}
        for method, path, b, h in (
                ("GET", "/healthz", None, {}), ("GET", "/readyz", None, {}),
                ("GET", "/metrics", None, {}), ("POST", "/runs", body, jh),
                ("OPTIONS", "/runs", None, {"Access-Control-Request-Method": "POST"}),
                ("GET", "/runs/x?threadId=t-origin", None, {}),
                ("POST", "/runs/x/cancel?threadId=t-origin", None, {}),
                ("GET", "/threads/t-origin/runs", None, {}),
                ("POST", "/threads/t-origin/snapshots", b"{}", jh),
                ("PUT", "/threads/t-origin/files/evil.txt", b"pwned", {}),
                ("POST", "/threads/t-origin/files/evil-dir?op=mkdir", None, {}),
                ("DELETE", "/threads/t-origin/files/keep.txt", None, {}),
                ("GET", "/threads/t-origin/files/", None, {})):
            st, js = req(s, method, path, b, {**h, **o})
            assert st == 403 and js["code"] == "origin_forbidden", (origin, method, path, st, js)
        r = raw(s, ws_head("/runs/x/stream?threadId=t-origin", host, f"Origin: {origin}\r\n"))
        assert r.status == 403 and r.json()["code"] == "origin_forbidden", (origin, r)
        r = raw(s, sse_head("/runs/x/stream?threadId=t-origin", host, f"Origin: {origin}\r\n"))
        assert r.status == 403 and r.json()["code"] == "origin_forbidden", (origin, r)
    assert thread_runs(s, "t-origin") == []
    assert workspace_file(s, "t-origin", "evil.txt") == 404
    assert workspace_file(s, "t-origin", "evil-dir") == 404

    # routerd's own origin (a page it served) and a cors_origins one pass
    for origin in (f"http://{host}", f"http://localhost:{s.port}", ALLOWED_PAGE):
        h = {"Origin": origin, "Content-Type": "application/json"}
        if origin.startswith("http://localhost"):
            h["Host"] = f"localhost:{s.port}"
        st, js = req(s, "POST", "/runs", body, h)
        assert st == 202, (origin, st, js)
        s.wait_terminal(js["runId"], thread="t-origin")

    async def ws(origin):
        async with websockets.connect(f"ws://{host}/runs/x/stream?threadId=t-origin",
                                      origin=origin):
            pass
    try:
        asyncio.run(ws("http://evil.example"))
        raise AssertionError("a WebSocket from a foreign origin was accepted")
    except websockets.InvalidStatusCode as e:
        assert e.status_code == 403


def test_chromium_page_of_another_origin_cannot_start_runs_or_write_files(s):
    from t_router_clients import chromium_missing, node, serve_pages
    why = chromium_missing()
    if why:
        print(f"SKIP chromium: {why}")
        return
    assert poll(lambda: s.http("GET", "/readyz")[0] == 200, 15)
    thread = "t-csrf"
    # the thread exists (a sandbox with a workspace) so a write would land
    run = s.start_run("true", thread=thread)
    s.wait_terminal(run, thread=thread)
    page_port = free_port()
    srv = serve_pages(page_port)
    log_before = len(s.log("routerd"))
    try:
        q = urllib.parse.urlencode({"api": f"http://127.0.0.1:{s.port}", "thread": thread})
        res = node("browser.js", f"http://127.0.0.1:{page_port}/attack.html?{q}", "60000",
                   timeout=180)
    finally:
        srv.shutdown()
        srv.server_close()
    # the browser did send the simple requests (and they were refused) ...
    log = s.log("routerd")[log_before:]
    assert "POST '/runs' 403" in log, (res, log[-3000:])
    assert f"POST '/threads/{thread}/files/pwned-dir' 403" in log, (res, log[-3000:])
    assert res["runNoCors"] == "opaque", res          # sent, answer unreadable
    assert str(res["putCors"]).startswith("error"), res   # preflight refused
    assert str(res["readCors"]).startswith("error"), res  # no CORS: unreadable
    # ... and nothing happened
    time.sleep(0.5)
    runs = thread_runs(s, thread)
    assert [r["runId"] for r in runs] == [run], runs
    for path in ("pwned.txt", "pwned-dir", "pwned-by-run"):
        assert workspace_file(s, thread, path) == 404, path


# ---- DNS rebinding ----

def test_host_not_naming_the_server_gets_421(s):
    port = s.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}",
                 f"localhost:{port + 1}", f"127.0.0.2:{port}", f"localhost.evil.example:{port}"):
        for method, path in (("GET", "/healthz"), ("GET", "/threads/t-dns/runs"),
                             ("GET", "/runs/x?threadId=t-dns"), ("GET", "/metrics")):
            st, js = req(s, method, path, None, {"Host": host})
            assert st == 421 and js["code"] == "misdirected_request", (host, path, st, js)
        r = raw(s, ws_head("/runs/x/stream?threadId=t-dns", host))
        assert r.status == 421, (host, r)
        r = raw(s, sse_head("/runs/x/stream?threadId=t-dns", host))
        assert r.status == 421, (host, r)
    body = json.dumps({"threadId": "t-dns", "messages": [{"role": "user",
                                                          "content": "echo x"}]}).encode()
    st, js = req(s, "POST", "/runs", body, {"Host": f"evil.example:{port}",
                                            "Content-Type": "application/json"})
    assert st == 421, (st, js)
    assert thread_runs(s, "t-dns") == []
    # the listen address and, on loopback, localhost name it (any case)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
        st, js = req(s, "GET", "/healthz", None, {"Host": host})
        assert st == 200, (host, st, js)
