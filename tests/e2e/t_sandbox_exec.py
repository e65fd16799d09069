# SPDX-License-Identifier: MIT
"""The sandbox API's execs (docs/SANDBOX-API.md "Exec", "Processes"):
POST /sandboxes/{id}/exec streaming NDJSON, the WebSocket's full duplex,
background processes listed and killed, through the real three daemons.
Output arrives before the exit; exit codes, signals, cwd, env (whose value
no daemon logs and no run record shows); a missing binary is 127; stdin from
the body and its cap; kills that take what the command backgrounded; a
closed connection kills a foreground exec; the per-sandbox limit; token
scopes; a run and an exec share /workspace."""
import asyncio
import base64
import http.client
import json
import os
import socket
import tempfile
import time

import websockets

from rwtest import poll

ADMIN = "sbx-admin-token"
SCOPED = "sbx-scoped-token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{SCOPED} threads=sx-*\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
# two tokens are two tenants: not routerd's rate per tenant (t_tenant_rate) here
tenant_rate_per_second = 0

[coordinatord]
max_execs_per_sandbox = 3
tenant_max_execs = 4
exec_stdin_max = 64K
"""

H = {"Authorization": f"Bearer {ADMIN}"}


def exec_open(s, thread, body, token=ADMIN):
    """POST …/exec: the response object (status checked by the caller)."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", f"/sandboxes/{thread}/exec", body=json.dumps(body).encode(),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return c, c.getresponse()


def lines_of(r):
    """The NDJSON objects of a response, as they come (blank keepalives skipped)."""
    while True:
        line = r.readline()
        if not line:
            return
        if line.strip():
            yield json.loads(line)


def run_exec(s, thread, body, token=ADMIN):
    """(status, [objects]) or (status, error body) of a whole exec."""
    c, r = exec_open(s, thread, body, token)
    try:
        if r.status != 200:
            return r.status, json.loads(r.read())
        assert r.getheader("Content-Type").startswith("application/x-ndjson"), r.getheaders()
        return 200, list(lines_of(r))
    finally:
        c.close()


def output(objs, stream="stdout"):
    out = b""
    for o in objs:
        if o["type"] == stream:
            out += o["data"].encode() if "data" in o else base64.b64decode(o["dataBase64"])
    return out


def exit_of(objs):
    assert objs[0]["type"] == "started" and objs[0]["pid"] > 0, objs
    assert objs[-1]["type"] == "exit", objs
    return objs[-1]


def processes_of(s, thread, headers=None):
    st, js = s.http("GET", f"/sandboxes/{thread}/processes", headers=headers)
    assert st == 200, (st, js)
    return {p["pid"]: p for p in js["processes"]}


def processes(s, thread):
    st, js = s.http("GET", f"/sandboxes/{thread}/processes", headers=H)
    assert st == 200, (st, js)
    return {p["pid"]: p for p in js["processes"]}


def proc_cmdlines(s, thread, token=ADMIN):
    """Every process's command line in the sandbox, seen by another exec."""
    st, objs = run_exec(s, thread, {"command":
                                    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline "
                                    "2>/dev/null; echo; done"}, token=token)
    assert st == 200 and exit_of(objs)["exitCode"] == 0, objs
    return output(objs).decode()


def test_exec_output_streams_before_the_exit(s):
    c, r = exec_open(s, "t-x1", {"command": "echo one; echo err >&2; read x < /proc/self/fd/0; "
                                 "sleep 30; echo two"})
    try:
        assert r.status == 200, r.read()
        it = lines_of(r)
        started = next(it)
        assert started["type"] == "started", started
        seen = b""
        while b"one" not in seen:
            o = next(it)
            assert o["type"] in ("stdout", "stderr"), o
            seen += o.get("data", "").encode()
        # the first line came while the command still runs
        p = processes(s, "t-x1")[started["pid"]]
        assert p["running"] and not p["background"], p
    finally:
        c.close()


def test_exit_codes_and_signals(s):
    st, objs = run_exec(s, "t-x2", {"argv": ["sh", "-c", "echo hi; exit 7"]})
    assert st == 200, objs
    e = exit_of(objs)
    assert (e["exitCode"], e["signal"], e["reason"]) == (7, None, "exit"), e
    assert output(objs) == b"hi\n"
    st, objs = run_exec(s, "t-x2", {"command": "kill -TERM $$"})
    e = exit_of(objs)
    assert (e["signal"], e["reason"]) == (15, "signal"), e
    st, objs = run_exec(s, "t-x2", {"argv": ["/no/such/binary", "x"]})
    e = exit_of(objs)
    assert (e["exitCode"], e["reason"]) == (127, "exit"), e
    st, objs = run_exec(s, "t-x2", {"command": "sleep 5", "timeoutMs": 300})
    assert exit_of(objs)["reason"] == "timeout", objs


def test_cwd_and_env(s):
    st, objs = run_exec(s, "t-x3", {"command": "mkdir -p sub/dir && pwd"})
    assert output(objs) == b"/workspace\n", objs
    st, objs = run_exec(s, "t-x3", {"argv": ["pwd"], "cwd": "sub/dir"})
    assert output(objs) == b"/workspace/sub/dir\n", objs
    st, js = run_exec(s, "t-x3", {"argv": ["x" * 70000] * 20})  # over the shim's bound
    assert (st, js["code"]) == (400, "bad_request"), (st, js)
    st, objs = run_exec(s, "t-x3", {"argv": ["pwd"], "cwd": "/tmp"})
    assert output(objs) == b"/tmp\n", objs
    secret = "ENVVAL-7f3a9c1e55d24b"
    st, objs = run_exec(s, "t-x3", {"command": "echo $MYVAR:$HOME:$TERM",
                                    "env": {"MYVAR": secret}})
    assert output(objs) == f"{secret}:/workspace:dumb\n".encode(), objs
    st, objs = run_exec(s, "t-x3", {"argv": ["printenv", "HOME"], "env": {"HOME": "/tmp"}})
    assert output(objs) == b"/tmp\n", objs
    # the value is nowhere but in the exec's own output
    for d in ("routerd", "coordinatord", "containerd-shim"):
        assert secret not in s.log(d), d
    st, runs = s.http("GET", "/threads/t-x3/runs", headers=H)
    assert st in (200, 404) and secret not in json.dumps(runs), runs
    st, hyd = s.http("GET", "/chat?threadId=t-x3", headers=H)
    assert secret not in (hyd if isinstance(hyd, bytes) else json.dumps(hyd).encode()).decode(
        errors="replace")


def test_utf8_split_across_chunks_stays_text(s):
    # one character written in two halves, apart: its first byte waits for
    # the second, and every line is text
    st, objs = run_exec(s, "t-x4b", {"command": "printf 'a\\303'; sleep 0.5; printf '\\251b'"})
    assert exit_of(objs)["exitCode"] == 0, objs
    assert not any("dataBase64" in o for o in objs), objs
    assert output(objs) == "a\u00e9b".encode(), objs
    assert [o["data"] for o in objs if o["type"] == "stdout"] == ["a", "\u00e9b"], objs
    # a lone half at the end is no text: base64
    st, objs = run_exec(s, "t-x4b", {"command": "printf 'z\\303'"})
    assert output(objs) == b"z\xc3", objs


def test_stdin_from_the_body_and_its_cap(s):
    st, objs = run_exec(s, "t-x4", {"argv": ["cat"], "stdin": "line one\nline two\n"})
    assert output(objs) == b"line one\nline two\n", objs
    raw = bytes(range(256))
    st, objs = run_exec(s, "t-x4", {"argv": ["sha256sum"],
                                    "stdinBase64": base64.b64encode(raw).decode()})
    import hashlib
    assert output(objs).split()[0].decode() == hashlib.sha256(raw).hexdigest(), objs
    st, objs = run_exec(s, "t-x4", {"argv": ["head", "-c", "3"], "stdinBase64":
                                    base64.b64encode(b"\xff\xfe\xfdxyz").decode()})
    assert output(objs) == b"\xff\xfe\xfd", objs
    assert any("dataBase64" in o for o in objs), objs
    st, js = run_exec(s, "t-x4", {"argv": ["cat"], "stdin": "x" * (64 * 1024 + 1)})
    assert (st, js["code"]) == (413, "stdin_too_large"), (st, js)
    for bad in ({}, {"argv": []}, {"argv": ["x"], "command": "y"}, {"argv": "ls"},
                {"command": "ls", "env": {"A=B": "c"}}, {"command": "ls", "timeoutMs": -1},
                {"command": "ls", "stdinBase64": "!!"}):
        st, js = run_exec(s, "t-x4", bad)
        assert (st, js["code"]) == (400, "bad_request"), (bad, st, js)


def test_kill_takes_what_the_command_backgrounded(s):
    for sig, marker in (("SIGTERM", "1003"), ("SIGKILL", "1004")):
        st, js = s.http("POST", "/sandboxes/t-x5/exec",
                        {"command": f"sleep {marker} & sleep {marker}; echo done",
                         "background": True}, headers=H)
        assert st == 202, (st, js)
        pid = js["pid"]
        assert poll(lambda: f"sleep {marker}" in proc_cmdlines(s, "t-x5"), 10)
        p = processes(s, "t-x5")[pid]
        assert p["running"] and p["background"], p
        st, js = s.http("POST", f"/sandboxes/t-x5/processes/{pid}/kill?signal={sig}", headers=H)
        assert st == 200, (st, js)
        assert poll(lambda: not processes(s, "t-x5")[pid]["running"], 10)
        p = processes(s, "t-x5")[pid]
        assert p["reason"] in ("signal", "killed"), p
        assert poll(lambda: f"sleep {marker}" not in proc_cmdlines(s, "t-x5"), 10)
    st, js = s.http("POST", "/sandboxes/t-x5/processes/999999/kill", headers=H)
    assert (st, js["code"]) == (404, "process_not_found"), (st, js)


def test_closing_the_connection_kills_a_foreground_exec(s):
    c, r = exec_open(s, "t-x6", {"command": "sleep 1005 & sleep 1005"})
    assert r.status == 200
    pid = next(lines_of(r))["pid"]
    assert poll(lambda: "sleep 1005" in proc_cmdlines(s, "t-x6"), 10)
    r.close()  # the response holds the socket too
    c.close()
    assert poll(lambda: pid not in processes(s, "t-x6"), 10)
    assert poll(lambda: "sleep 1005" not in proc_cmdlines(s, "t-x6"), 10)


def test_keep_alive_execs_share_one_connection(s):
    # HTTP/1.1 keep-alive: a chunked body, and the next exec on the same socket
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    hdr = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    try:
        socks = []
        for i in range(3):
            c.request("POST", "/sandboxes/t-x6k/exec",
                      body=json.dumps({"command": f"echo ka-{i}; exit {i}"}).encode(), headers=hdr)
            r = c.getresponse()
            assert r.status == 200
            assert r.getheader("Transfer-Encoding") == "chunked", r.getheaders()
            assert r.getheader("Connection") is None, r.getheaders()
            objs = list(lines_of(r))
            assert output(objs) == f"ka-{i}\n".encode() and exit_of(objs)["exitCode"] == i, objs
            socks.append(c.sock)
        assert socks[0] is not None and socks.count(socks[0]) == 3, "the connection was not reused"
        # a plain request on the same connection after the stream
        c.request("GET", "/sandboxes/t-x6k/processes", headers=hdr)
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read()) is not None
    finally:
        c.close()
    # Connection: close: a close-delimited body, as before
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    try:
        c.request("POST", "/sandboxes/t-x6k/exec", body=json.dumps({"command": "echo cl"}).encode(),
                  headers={**hdr, "Connection": "close"})
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Transfer-Encoding") is None
        assert r.getheader("Connection") == "close", r.getheaders()
        assert output(list(lines_of(r))) == b"cl\n"
    finally:
        c.close()


def test_a_request_pipelined_behind_an_exec_waits_for_its_end(s):
    # sent while the exec streams: answered after its last chunk, in order
    body = json.dumps({"command": "sleep 0.3; echo first"}).encode()
    req = (f"POST /sandboxes/t-x6p/exec HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
           f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    last = (f"GET /sandboxes/t-x6p/processes HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
            f"Authorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n").encode()
    sk = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    try:
        sk.sendall(req)
        got = b""
        while b'"type":"started"' not in got:
            got += sk.recv(65536)
        sk.sendall(last)  # pipelined behind the stream
        while True:
            d = sk.recv(65536)
            if not d:
                break
            got += d
    finally:
        sk.close()
    text = got.decode()
    assert "Transfer-Encoding: chunked" in text, text
    end = text.index("\r\n0\r\n\r\n")
    assert '"data":"first\\n"' in text[:end] and '"type":"exit"' in text[:end], text
    assert text[end + 7:].startswith("HTTP/1.1 200 "), text


def test_a_reader_that_does_not_read_loses_its_exec(s):
    # routerd buffers at most ws_max_queue (1M) for the reader, then drops the
    # stream and kills the exec: nothing grows without bound
    c, r = exec_open(s, "t-x6b", {"command": "exec yes 1009-output-line"})
    assert r.status == 200
    pid = json.loads(r.readline())["pid"]
    try:
        assert poll(lambda: pid not in processes(s, "t-x6b"), 20)
        assert poll(lambda: "1009-output-line" not in proc_cmdlines(s, "t-x6b"), 10)
        assert "exec reader too slow" in s.log("routerd")
    finally:
        r.close()
        c.close()


def test_too_many_execs_and_scopes(s):
    pids = []
    for _ in range(3):
        st, js = s.http("POST", "/sandboxes/t-x7/exec",
                        {"argv": ["sleep", "1006"], "background": True}, headers=H)
        assert st == 202, (st, js)
        pids.append(js["pid"])
    st, js = run_exec(s, "t-x7", {"argv": ["true"]})
    assert (st, js["code"]) == (429, "too_many_execs"), (st, js)
    st, objs = run_exec(s, "t-x7b", {"argv": ["true"]})  # another sandbox is not counted
    assert st == 200, objs
    for pid in pids:
        st, _ = s.http("POST", f"/sandboxes/t-x7/processes/{pid}/kill", headers=H)
        assert st == 200
    assert poll(lambda: not any(p["running"] for p in processes(s, "t-x7").values()), 10)
    st, objs = run_exec(s, "t-x7", {"argv": ["true"]})
    assert st == 200, objs
    # a token scoped to sx-* may not touch t-x7, may touch sx-1
    st, js = run_exec(s, "t-x7", {"argv": ["true"]}, token=SCOPED)
    assert (st, js["code"]) == (403, "thread_forbidden"), (st, js)
    for m, p in (("GET", "/sandboxes/t-x7/processes"),
                 ("POST", f"/sandboxes/t-x7/processes/{pids[0]}/kill")):
        st, js = s.http(m, p, headers={"Authorization": f"Bearer {SCOPED}"})
        assert (st, js["code"]) == (403, "thread_forbidden"), (m, p, st, js)
    st, objs = run_exec(s, "sx-1", {"argv": ["true"]}, token=SCOPED)
    assert st == 200 and exit_of(objs)["exitCode"] == 0, objs
    st, js = run_exec(s, "t-x7", {"argv": ["true"]}, token="wrong")
    assert st == 401


def test_a_tenants_execs_are_capped_in_all_its_sandboxes(s):
    """tenant_max_execs counts a tenant's running execs in every sandbox: one
    more is 429 tenant_execs_quota, while another tenant's exec still runs."""
    started, refused = [], None
    for i in range(10):  # two a sandbox: max_execs_per_sandbox is not what stops it
        thread = f"t-q{i // 2}"
        st, js = s.http("POST", f"/sandboxes/{thread}/exec",
                        {"argv": ["sleep", "1007"], "background": True}, headers=H)
        if st != 202:
            refused = (st, js)
            break
        started.append((thread, js["pid"]))
    try:
        assert refused and refused[0] == 429 and refused[1]["code"] == "tenant_execs_quota", refused
        assert len(started) == 4, started
        st, objs = run_exec(s, "sx-q", {"argv": ["true"]}, token=SCOPED)
        assert st == 200 and exit_of(objs)["exitCode"] == 0, objs
    finally:
        for thread, pid in started:
            s.http("POST", f"/sandboxes/{thread}/processes/{pid}/kill", headers=H)
    assert poll(lambda: all(not p["running"] for t, _ in started
                            for p in processes(s, t).values()), 10)
    st, objs = run_exec(s, "t-q0", {"argv": ["true"]})
    assert st == 200, objs


def test_runs_and_execs_share_the_workspace(s):
    st, objs = run_exec(s, "t-x8", {"command": "echo from-exec > a.txt"})
    assert exit_of(objs)["exitCode"] == 0
    st, js = s.http("POST", "/runs", {"threadId": "t-x8", "messages": [
        {"role": "user", "content": "cat a.txt > c.txt; echo from-run > b.txt"}]}, headers=H)
    assert st == 202, (st, js)
    run = js["runId"]
    assert poll(lambda: s.http("GET", f"/runs/{run}?threadId=t-x8", headers=H)[1]["status"]
                in ("completed", "failed"), 30)
    st, rec = s.http("GET", f"/runs/{run}?threadId=t-x8", headers=H)
    assert rec["status"] == "completed", rec
    st, objs = run_exec(s, "t-x8", {"argv": ["cat", "b.txt", "c.txt"]})
    assert output(objs) == b"from-run\nfrom-exec\n", objs
    # the execs are not runs
    st, js = s.http("GET", "/threads/t-x8/runs", headers=H)
    assert st == 200 and len(js) == 1, js


def ws_exec(s, thread, script, token=ADMIN, timeout=20):
    """Run script(ws) on an exec WebSocket; returns (what it returned, close code)."""
    uri = f"ws://127.0.0.1:{s.port}/sandboxes/{thread}/exec"

    async def go():
        async with websockets.connect(uri, extra_headers={"Authorization": f"Bearer {token}"},
                                      max_size=2**24) as ws:
            got = await script(ws)
            try:
                while True:
                    await ws.recv()
            except websockets.ConnectionClosed:
                pass
            return got, ws.close_code

    return asyncio.run(asyncio.wait_for(go(), timeout))


def test_websocket_duplex(s):
    async def cat(ws):
        await ws.send(json.dumps({"argv": ["cat"]}))
        started = json.loads(await ws.recv())
        assert started["type"] == "started", started
        await ws.send(b"hello\n")
        o = json.loads(await ws.recv())
        assert o == {"type": "stdout", "data": "hello\n"}, o
        await ws.send(json.dumps({"type": "stdin", "data": "again\n"}))
        o = json.loads(await ws.recv())
        assert o == {"type": "stdout", "data": "again\n"}, o
        await ws.send(json.dumps({"type": "eof"}))
        return json.loads(await ws.recv())

    e, code = ws_exec(s, "t-x9", cat)
    assert (e["type"], e["exitCode"], e["reason"]) == ("exit", 0, "exit"), e
    assert code == 1000

    async def kill(ws):
        await ws.send(json.dumps({"command": "echo ready; sleep 1007"}))
        assert json.loads(await ws.recv())["type"] == "started"
        assert json.loads(await ws.recv())["data"] == "ready\n"
        await ws.send(json.dumps({"type": "kill", "signal": "SIGTERM"}))
        return json.loads(await ws.recv())

    e, code = ws_exec(s, "t-x9", kill)
    assert (e["signal"], e["reason"]) in ((15, "signal"), (15, "killed")), e

    async def too_much(ws):
        await ws.send(json.dumps({"command": "wc -c"}))
        assert json.loads(await ws.recv())["type"] == "started"
        await ws.send(b"a" * 40000)
        await ws.send(b"b" * 40000)  # 80000 in all: over exec_stdin_max (64K)
        err = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "eof"}))
        out = json.loads(await ws.recv())
        return err, out, json.loads(await ws.recv())

    (err, out, e), code = ws_exec(s, "t-x9", too_much)
    assert (err["type"], err["code"]) == ("error", "stdin_too_large"), err
    assert out["data"].strip() == "40000" and e["exitCode"] == 0, (out, e)

    async def bad(ws):
        await ws.send(b"\x00binary first")
        return None

    _, code = ws_exec(s, "t-x9", bad)
    assert code == 1008

    async def leave(ws):
        await ws.send(json.dumps({"command": "sleep 1008"}))
        return json.loads(await ws.recv())["pid"]

    pid, _ = asyncio.run(asyncio.wait_for(_leave_early(s, leave), 20)), None
    assert poll(lambda: pid not in processes(s, "t-x9"), 10)
    assert poll(lambda: "sleep 1008" not in proc_cmdlines(s, "t-x9"), 10)


async def _leave_early(s, script):
    uri = f"ws://127.0.0.1:{s.port}/sandboxes/t-x9/exec"
    async with websockets.connect(uri, extra_headers=H) as ws:
        return await script(ws)  # closed by the context manager before the exit


def test_coordinatord_restart_kills_what_nobody_knows(s):
    # a background exec outlives its request, not the coordinatord that
    # started it: a new one (which re-attaches runs, not these) kills it
    st, js = s.http("POST", "/sandboxes/t-x10/exec",
                    {"argv": ["sleep", "1010"], "background": True}, headers=H)
    assert st == 202, (st, js)
    assert poll(lambda: "sleep 1010" in proc_cmdlines(s, "t-x10"), 10)
    s.kill("coordinatord")
    s.start_daemon("coordinatord")
    assert poll(lambda: s.http("GET", "/readyz", headers=H)[0] == 200, 15)
    assert poll(lambda: "sleep 1010" not in proc_cmdlines(s, "t-x10"), 10)
    assert js["pid"] not in processes(s, "t-x10")
    assert "Killed 1 sandbox exec(s) nobody here knows" in s.log("coordinatord")


def test_websocket_token_as_subprotocol_and_scope(s):
    # a browser's WebSocket sends the token as "bearer.<b64url>" beside "runwarden"
    def b64(tok):
        return base64.urlsafe_b64encode(tok.encode()).decode().rstrip("=")

    async def go(thread, tok):
        uri = f"ws://127.0.0.1:{s.port}/sandboxes/{thread}/exec"
        async with websockets.connect(uri, subprotocols=["runwarden", "bearer." + b64(tok)]) as ws:
            assert ws.subprotocol == "runwarden", ws.subprotocol
            await ws.send(json.dumps({"argv": ["echo", "via-subprotocol"]}))
            msgs = []
            try:
                while True:
                    msgs.append(json.loads(await ws.recv()))
            except websockets.ConnectionClosed:
                return msgs, ws.close_code

    msgs, code = asyncio.run(asyncio.wait_for(go("sx-ws", SCOPED), 20))
    assert code == 1000 and output(msgs) == b"via-subprotocol\n", msgs
    for thread, tok, status in (("t-ws", SCOPED, 403), ("sx-ws", "wrong", 401)):
        try:
            asyncio.run(asyncio.wait_for(go(thread, tok), 20))
            raise AssertionError("the upgrade was accepted")
        except websockets.InvalidStatusCode as e:
            assert e.status_code == status, (thread, e)


def test_shim_restart_ends_the_stream_and_kills_the_exec(s):
    # the shim killed: the stream ends "lost" at once; the shim back (it
    # re-adopts the sandbox and the exec): coordinatord kills what no stream
    # reads any more
    import signal
    s.expected_errors += [r"containerd-shim"]
    c, r = exec_open(s, "t-x11", {"command": "echo up; sleep 1011"})
    try:
        assert r.status == 200
        it = lines_of(r)
        assert next(it)["type"] == "started"
        assert next(it)["data"] == "up\n"
        s.kill("containerd-shim", signal.SIGKILL)
        e = next(it)
        assert (e["type"], e["reason"]) == ("exit", "lost"), e
    finally:
        r.close()
        c.close()
    killed = "Killed 1 sandbox exec(s) nobody here knows"
    before = s.log("coordinatord").count(killed)
    s.start_daemon("containerd-shim")
    assert poll(lambda: s.http("GET", "/readyz", headers=H)[0] == 200, 30)
    assert poll(lambda: s.log("coordinatord").count(killed) > before, 30)
    assert poll(lambda: "sleep 1011" not in proc_cmdlines(s, "t-x11"), 10)


def test_background_exec_output_can_be_read(s):
    # a background exec's last output (16 KiB a stream) is kept: GET
    # …/processes/{pid}/output, from the offsets the client has
    st, js = s.http("POST", "/sandboxes/t-x12/exec",
                    {"command": "echo first; echo oops >&2; "
                                "sleep 0.5; echo second", "background": True}, headers=H)
    assert st == 202, (st, js)
    pid = js["pid"]

    def out(q=""):
        st, o = s.http("GET", f"/sandboxes/t-x12/processes/{pid}/output{q}", headers=H)
        assert st == 200, (st, o)
        return o

    assert poll(lambda: out()["stdout"] == "first\n", 10)
    o = out()
    assert o["running"] and o["stderr"] == "oops\n" and o["stdoutOffset"] == 0, o
    assert o["stdoutEnd"] == 6 and o["stderrEnd"] == 5, o
    assert poll(lambda: not out()["running"], 10)
    o = out("?stdoutOffset=6&stderrOffset=5")
    assert (o["stdout"], o["stderr"], o["stdoutOffset"]) == ("second\n", "", 6), o
    assert (o["exitCode"], o["reason"]) == (0, "exit"), o
    # more than is kept: the oldest bytes are gone, the offset says so
    st, js = s.http("POST", "/sandboxes/t-x12/exec",
                    {"command": "seq 1 10000", "background": True}, headers=H)
    pid = js["pid"]
    assert poll(lambda: not out()["running"], 10)
    o = out()
    full = "".join(f"{i}\n" for i in range(1, 10001))
    assert o["stdoutEnd"] == len(full) and o["stdoutOffset"] == len(full) - 16384, o
    assert o["stdout"] == full[-16384:]
    # bad offsets, a foreground exec, no such pid
    st, e = s.http("GET", f"/sandboxes/t-x12/processes/{pid}/output?stdoutOffset=-1", headers=H)
    assert (st, e["code"]) == (400, "bad_request"), (st, e)
    st, e = s.http("GET", "/sandboxes/t-x12/processes/999999/output", headers=H)
    assert (st, e["code"]) == (404, "process_not_found"), (st, e)
    c, r = exec_open(s, "t-x12", {"command": "sleep 30"})
    try:
        fg = next(lines_of(r))["pid"]
        st, e = s.http("GET", f"/sandboxes/t-x12/processes/{fg}/output", headers=H)
        assert (st, e["code"]) == (404, "process_not_found"), (st, e)
    finally:
        r.close()
        c.close()
    # another tenant's token
    st, e = s.http("GET", f"/sandboxes/t-x12/processes/{pid}/output",
                   headers={"Authorization": f"Bearer {SCOPED}"})
    assert st == 403, (st, e)


def test_an_exec_after_a_stop_or_destroy_starts_the_sandbox_again(s):
    # coordinatord sends EXEC_START right behind the ENSURE on the sandbox it
    # knew: a stopped or destroyed one refuses it, and the exec starts after
    # the ENSURE made the sandbox again
    for i, how in enumerate(("stop", "delete", "stop")):
        st, objs = run_exec(s, "t-x13", {"command": f"echo before{i} > f{i}; cat f{i}"})
        assert st == 200 and output(objs) == f"before{i}\n".encode(), (how, objs)
        if how == "stop":
            st, js = s.http("POST", "/sandboxes/t-x13/stop", headers=H)
        else:
            st, js = s.http("DELETE", "/sandboxes/t-x13", headers=H)
        assert st == (200 if how == "stop" else 204), (how, st, js)
        st, objs = run_exec(s, "t-x13", {"argv": ["sh", "-c", "echo after; ls"]})
        assert st == 200 and exit_of(objs)["exitCode"] == 0, (how, objs)
        assert output(objs).startswith(b"after\n"), (how, objs)
        # the workspace kept by a stop, gone with a destroy
        assert (f"f{i}".encode() in output(objs)) == (how == "stop"), (how, objs)
