# SPDX-License-Identifier: MIT
"""Bearer-token auth ([routerd] tokens_file), CORS ([routerd] cors_origins),
the header timeout, and the refusal to serve a non-loopback address without
tokens."""
import asyncio
import os
import subprocess
import tempfile
import time

import websockets

from rwtest import BUILD, poll, ws_count
from t_router_lib import connect, read_all, parse_responses

TOKENS = ["s3cret-token-one", "another.token_2"]
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write("# operator tokens\n\n  " + TOKENS[0] + "  \n# " + "commented-out\n" + TOKENS[1] + "\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
cors_origins = http://good.example:8080 http://other.example
server_names = x
header_timeout_ms = 500
"""


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def test_healthz_needs_no_token(s):
    st, body = s.http("GET", "/healthz")
    assert st == 200, (st, body)


def test_every_other_route_needs_a_token(s):
    for m, p in (("GET", "/readyz"), ("GET", "/metrics"), ("POST", "/runs"),
                 ("GET", "/runs/x?threadId=t"), ("GET", "/runs/x/stream?threadId=t"),
                 ("POST", "/runs/x/cancel?threadId=t"), ("GET", "/threads/t/runs"),
                 ("POST", "/threads/t/snapshots"), ("GET", "/threads/t/files/a"),
                 ("PUT", "/threads/t/files/a"), ("DELETE", "/threads/t/files/a"),
                 ("POST", "/threads/t/files/a?op=mkdir"), ("GET", "/nope")):
        for h in ({}, auth("wrong"), auth(""), {"Authorization": "Basic " + TOKENS[0]},
                  auth(TOKENS[0] + "x"), auth(TOKENS[0][:-1]),
                  {"Authorization": "Bearer"}):
            st, body = s.http(m, p, headers=h)
            assert st == 401 and body == {"error": "missing or invalid bearer token",
                                          "code": "unauthorized"}, (m, p, h, st, body)


def test_valid_tokens_pass(s):
    # the file API needs containerd-shim: wait until routerd says all is up
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(TOKENS[0]))[0] == 200, 10)
    for tok in TOKENS:
        st, body = s.http("GET", "/metrics", headers=auth(tok))
        assert st == 200, (st, body)
        st, body = s.http("GET", "/threads/t-auth/runs", headers={"authorization": "bearer " + tok})
        assert st == 200 and body == [], (st, body)
        st, body = s.http("GET", "/threads/t-auth/files/", headers=auth(tok))
        assert st == 200 and body == {"type": "directory", "entries": []}, (st, body)
    # the commented-out line is not a token
    st, _ = s.http("GET", "/metrics", headers=auth("commented-out"))
    assert st == 401


def test_401_has_www_authenticate(s):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    c.request("GET", "/readyz")
    r = c.getresponse()
    r.read()
    assert r.status == 401 and r.getheader("WWW-Authenticate", "").startswith("Bearer")
    c.close()


def test_run_and_tail_with_a_token(s):
    st, js = s.http("POST", "/runs", {"threadId": "t-auth", "messages": [
        {"role": "user", "content": "echo authed"}]}, headers=auth(TOKENS[1]))
    assert st == 202, (st, js)
    run = js["runId"]

    uri = f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId=t-auth"
    n, code = asyncio.run(ws_count(uri, auth(TOKENS[0])))
    assert n > 1 and code == 1000
    # browsers cannot set headers on a WebSocket: RFC 6750 access_token
    n, code = asyncio.run(ws_count(uri + "&access_token=" + TOKENS[1], {}))
    assert n > 1 and code == 1000
    try:
        asyncio.run(ws_count(uri + "&access_token=nope", {}))
        raise AssertionError("tail without a valid token was accepted")
    except websockets.InvalidStatusCode as e:
        assert e.status_code == 401
    # the query parameter is only for the stream route
    st, _ = s.http("GET", f"/runs/{run}?threadId=t-auth&access_token={TOKENS[0]}")
    assert st == 401


def test_tokens_never_logged(s):
    s.http("GET", "/readyz", headers=auth("wrong-token-zzz"))
    log = s.log("routerd")
    for tok in TOKENS + ["wrong-token-zzz"]:
        assert tok not in log, tok


def test_cors_preflight_and_allow_origin(s):
    def raw(req):
        c = connect(s.port)
        c.sendall(req)
        data = b""
        while not parse_responses(data)[0]:
            b = c.recv(65536)
            assert b
            data += b
        c.close()
        return parse_responses(data)[0][0]

    r = raw(b"OPTIONS /runs HTTP/1.1\r\nHost: x\r\nOrigin: http://good.example:8080\r\n"
            b"Access-Control-Request-Method: POST\r\n"
            b"Access-Control-Request-Headers: content-type, authorization\r\n\r\n")
    assert r.status == 204, r
    assert r.header("Access-Control-Allow-Origin") == "http://good.example:8080"
    assert "POST" in r.header("Access-Control-Allow-Methods")
    assert "Authorization" in r.header("Access-Control-Allow-Headers")
    r = raw(b"GET /metrics HTTP/1.1\r\nHost: x\r\nOrigin: http://other.example\r\n"
            b"Authorization: Bearer " + TOKENS[0].encode() + b"\r\n\r\n")
    assert r.status == 200 and r.header("Access-Control-Allow-Origin") == "http://other.example"
    # 401s carry it too, so the page can read the error
    r = raw(b"GET /readyz HTTP/1.1\r\nHost: x\r\nOrigin: http://other.example\r\n\r\n")
    assert r.status == 401 and r.header("Access-Control-Allow-Origin") == "http://other.example"
    # any other Origin is refused outright (t_security_front has the rest)
    r = raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n\r\n")
    assert r.status == 403 and r.header("Access-Control-Allow-Origin") is None
    assert r.json()["code"] == "origin_forbidden"
    # the message names the Origin and the key to list it in (a dev proxy)
    assert "'http://evil.example'" in r.json()["error"] and "cors_origins" in r.json()["error"]
    r = raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: http://ev\xffil\"x\r\n\r\n")
    assert r.status == 403 and r.json()["code"] == "origin_forbidden"
    assert "(unprintable)" in r.json()["error"], r.json()
    r = raw(b"OPTIONS /runs HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n"
            b"Access-Control-Request-Method: POST\r\n\r\n")
    assert r.status == 403 and r.header("Access-Control-Allow-Origin") is None


def test_slow_request_head_gets_408(s):
    c = connect(s.port)
    t0 = time.time()
    c.sendall(b"GET /healthz HTTP/1.1\r\n")
    for h in (b"Host: x\r\n", b"X-A: 1\r\n", b"X-B: 2\r\n"):
        time.sleep(0.2)  # each byte keeps the idle timeout happy
        try:
            c.sendall(h)
        except OSError:
            break
    data, closed = read_all(c, timeout=3)
    c.close()
    resps, _ = parse_responses(data)
    assert [r.status for r in resps] == [408] and closed, (resps, closed)
    assert resps[0].json()["code"] == "request_timeout"
    assert time.time() - t0 < 2


def run_routerd(conf_text, check=False):
    d = tempfile.mkdtemp(prefix="rw-auth-")
    conf = os.path.join(d, "r.conf")
    with open(conf, "w") as f:
        f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\n\n" + conf_text)
    args = [os.path.join(BUILD, "routerd"), "--config", conf] + (["--check-config"] if check else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=10)
    return p.returncode, p.stdout + p.stderr


def test_non_loopback_without_tokens_is_refused(s):
    for listen in ("0.0.0.0:8799", "[::]:8799", "192.0.2.1:8787"):
        for check in (True, False):
            rc, out = run_routerd(f"[routerd]\nlisten = {listen}\n", check)
            assert rc != 0, (listen, out)
            assert "without authentication" in out and "tokens_file" in out, out
    rc, out = run_routerd("[routerd]\nlisten = 127.0.0.2:8799\n", True)
    assert rc == 0, out
    rc, out = run_routerd(f"[routerd]\nlisten = 0.0.0.0:8799\ntokens_file = {TOKENS_FILE}\n", True)
    assert rc == 0, out
    assert TOKENS[0] not in out


def test_bad_tokens_files_are_refused(s):
    d = tempfile.mkdtemp(prefix="rw-tok-")
    empty = os.path.join(d, "empty")
    with open(empty, "w") as f:
        f.write("# nothing\n\n")
    spaced = os.path.join(d, "spaced")
    with open(spaced, "w") as f:
        f.write("two words\n")
    for path, what in ((empty, "no token"), (spaced, "only threads=LIST, harnesses=LIST and tenant=NAME"),
                       (d + "/missing", "cannot read")):
        rc, out = run_routerd(f"[routerd]\nlisten = 127.0.0.1:8799\ntokens_file = {path}\n", True)
        assert rc != 0 and what in out, (path, out)
        assert "two words" not in out
