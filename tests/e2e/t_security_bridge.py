# SPDX-License-Identifier: MIT
"""Issue 11, item 1: the tool-bridge port in a sandbox reaches nothing but its
own run's host tools. A harness with host tools gets a loopback port that the
shim joins to routerd's bridge-only socket ($runtime_dir/bridge.sock), whose
connections the shim opens with the run's id. From inside run A's sandbox,
through that port, the test tries what used to work against the whole public
API (another thread's files and runs, a new run in it, another run's bridge,
even with that run's token or an operator token, a forged first line) and
shows each refused; only A's own /_bridge and /tool-exec with A's token work.
This module runs without tokens_file; t_security_bridge_tokens runs the same
tests with one."""
import json
import os
import re
import socket
import stat
import threading
import time

from rwtest import poll

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")

HARNESSES = f"""
[harness.tooly]
adapter = shell
tools = echo

[tool.echo]
command = ["{TOOLS}/echo-tool"]
description = Echo the arguments
"""

SUITE_CONF = HARNESSES

SECRET = "victim-secret-7f3a"

# Runs inside the attacker's sandbox: every request through the bridge port,
# the statuses and bodies into /workspace/result.json.
ATTACK = r'''
import http.client, json, os, socket, sys, urllib.parse
cfg = json.load(open(os.environ["RUNWARDEN_MCP_CONFIG"]))["mcpServers"]["tanstack"]
u = urllib.parse.urlsplit(cfg["url"])
me = u.path.split("/")[2]
mine = cfg["headers"]["Authorization"]
V, VR, VT, OP = sys.argv[1:5]
def req(method, path, body=None, auth=None, ctype="application/json"):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=20)
    h = {"Authorization": auth} if auth else {}
    if body is not None:
        h["Content-Type"] = ctype
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return [r.status, r.read().decode(errors="replace")[:400]]
    except Exception as e:
        return [0, type(e).__name__ + ": " + str(e)]
    finally:
        c.close()
rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
run = json.dumps({"threadId": V, "messages": [{"role": "user", "content": "echo pwned > /workspace/x"}]})
res = {}
auths = {"none": None, "mine": mine, "victim": "Bearer " + VT}
if OP != "-":
    auths["operator"] = "Bearer " + OP
for n, a in auths.items():
    res["get_file/" + n] = req("GET", "/threads/%s/files/x" % V, auth=a)
    res["put_file/" + n] = req("PUT", "/threads/%s/files/x" % V, body="pwned", auth=a,
                               ctype="application/octet-stream")
    res["list_files/" + n] = req("GET", "/threads/%s/files/" % V, auth=a)
    res["post_run/" + n] = req("POST", "/runs", body=run, auth=a)
    res["get_run/" + n] = req("GET", "/runs/%s?threadId=%s" % (VR, V), auth=a)
    res["stream/" + n] = req("GET", "/runs/%s/stream?threadId=%s" % (VR, V), auth=a)
    res["cancel/" + n] = req("POST", "/runs/%s/cancel?threadId=%s" % (VR, V), auth=a)
    res["thread_runs/" + n] = req("GET", "/threads/%s/runs" % V, auth=a)
    res["snapshot/" + n] = req("POST", "/threads/%s/snapshots" % V, body="{}", auth=a)
    res["metrics/" + n] = req("GET", "/metrics", auth=a)
    res["healthz/" + n] = req("GET", "/healthz", auth=a)
    res["options/" + n] = req("OPTIONS", "/runs", auth=a)
    res["bridge_other/" + n] = req("POST", "/_bridge/%s?threadId=%s" % (VR, V), body=rpc, auth=a)
    res["toolexec_other/" + n] = req("POST", "/tool-exec/%s" % VR,
                                     body=json.dumps({"name": "echo", "args": {}}), auth=a)
    res["bridge_other_path/" + n] = req("POST", "/_bridge/%s/../%s" % (me, VR), body=rpc, auth=a)
res["own/none"] = req("POST", "/_bridge/%s" % me, body=rpc)
res["own/wrong"] = req("POST", "/_bridge/%s" % me, body=rpc, auth="Bearer " + "0" * 68)
res["own/victim"] = req("POST", "/_bridge/%s" % me, body=rpc, auth="Bearer " + VT)
res["own_exec/none"] = req("POST", "/tool-exec/%s" % me, body=json.dumps({"name": "echo", "args": {}}))
res["own_exec/victim"] = req("POST", "/tool-exec/%s" % me, body=json.dumps({"name": "echo", "args": {}}),
                             auth="Bearer " + VT)
res["own/get"] = req("GET", "/_bridge/%s" % me, auth=mine)
res["own/mine"] = req("POST", u.path + "?" + u.query, body=rpc, auth=mine)
res["own_exec/mine"] = req("POST", "/tool-exec/%s" % me,
                           body=json.dumps({"name": "echo", "args": {"from": "A"}}), auth=mine)
# the sandbox forges the shim's first line: it arrives second, as a request line
s = socket.create_connection((u.hostname, u.port), timeout=20)
s.sendall(("RUNWARDEN-BRIDGE %s\r\nPOST /_bridge/%s HTTP/1.1\r\nHost: x\r\n"
           "Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (VR, VR, VT, len(rpc), rpc)).encode())
data = b""
while True:
    try:
        b = s.recv(65536)
    except OSError:
        break
    if not b:
        break
    data += b
res["forged_hello"] = [int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else 0,
                       data.decode(errors="replace")[:400]]
json.dump(res, open("/workspace/result.json.tmp", "w"))
os.rename("/workspace/result.json.tmp", "/workspace/result.json")
print("attack done")
'''


def quote(script):
    return "'" + script.replace("'", "'\"'\"'") + "'"


def op_token(s):
    m = re.search(r"^tokens_file = (.*)$", s.extra_conf, re.M)
    return open(m.group(1)).read().split()[0] if m else None


def api(s, method, path, body=None, raw_body=None, headers=None):
    """The operator's own calls, on the public listener (with the operator's
    token when the suite has a tokens_file)."""
    h = dict(headers or {})
    tok = op_token(s)
    if tok:
        h["Authorization"] = f"Bearer {tok}"
    return s.http(method, path, body=body, raw_body=raw_body, headers=h)


def start(s, thread, command, harness="tooly"):
    st, js = api(s, "POST", "/runs", {"threadId": thread, "metadata": {"harness": harness},
                                      "messages": [{"role": "user", "content": command}]})
    assert st == 202, (st, js)
    return js["runId"]


def wait_terminal(s, run, thread, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, rec = api(s, "GET", f"/runs/{run}?threadId={thread}")
        assert st == 200, (st, rec)
        if rec["status"] in ("completed", "failed", "aborted"):
            return rec
        time.sleep(0.1)
    raise AssertionError(f"run {run} not terminal after {timeout}s")


def read_file(s, thread, path, timeout=30):
    deadline = time.time() + timeout
    while True:
        st, body = api(s, "GET", f"/threads/{thread}/files/{path}")
        if st == 200:
            return body if isinstance(body, bytes) else json.dumps(body).encode()
        assert time.time() < deadline, (st, body)
        time.sleep(0.1)


def victim_token(s, thread, run):
    """What the victim's harness got: the victim run itself copies its MCP
    config (its fd 3) into its workspace, read here through the file API (an
    agent could not: it sits in another thread's sandbox)."""
    deadline = time.time() + 30
    while True:  # the shell's redirect creates the file before cat fills it
        try:
            body = json.loads(read_file(s, thread, ".cfg"))
        except ValueError:
            body = None
        if isinstance(body, dict) and "mcpServers" in body:
            break
        assert time.time() < deadline, body
        time.sleep(0.1)
    api(s, "DELETE", f"/threads/{thread}/files/.cfg")
    return body["mcpServers"]["tanstack"]["headers"]["Authorization"].split(" ", 1)[1]


def test_the_bridge_port_reaches_only_its_own_runs_tools(s):
    sfx = "tok" if op_token(s) else "open"
    # the file API needs containerd-shim: until routerd says all is up
    assert poll(lambda: api(s, "GET", "/readyz")[0] == 200, 15)
    victim, attacker = f"victim-{sfx}", f"attacker-{sfx}"
    st, body = api(s, "PUT", f"/threads/{victim}/files/x", raw_body=SECRET.encode(),
                   headers={"Content-Type": "application/octet-stream"})
    assert st in (200, 201, 204), (st, body)
    # the victim: a live run with a live bridge of its own
    vrun = start(s, victim, 'cat "$RUNWARDEN_MCP_CONFIG" > /workspace/.cfg; sleep 300')
    vtok = victim_token(s, victim, vrun)
    st, before = api(s, "GET", f"/threads/{victim}/runs")
    assert st == 200, before

    arun = start(s, attacker, "python3 -c " + quote(ATTACK) +
                 f" {victim} {vrun} {vtok} {op_token(s) or '-'}")
    try:
        rec = wait_terminal(s, arun, attacker)
        assert rec["status"] == "completed", rec
        res = json.loads(read_file(s, attacker, "result.json"))
    finally:
        api(s, "POST", f"/runs/{vrun}/cancel?threadId={victim}")
    for k, (st, body) in res.items():
        assert SECRET not in body, (k, st, body)
    # no route of the public API exists on the bridge port, whatever the token
    for k, (st, body) in res.items():
        route = k.split("/")[0]
        if route in ("own", "own_exec", "forged_hello"):
            continue
        assert st == 404 and json.loads(body) == {"error": "not found", "code": "not_found"}, (k, st, body)
    # its own tools: the token of exactly this run, nothing else
    for k in ("own/none", "own/wrong", "own/victim", "own_exec/none", "own_exec/victim"):
        st, body = res[k]
        assert st == 401 and json.loads(body)["code"] == "unauthorized", (k, st, body)
    assert res["own/get"][0] == 405, res["own/get"]
    st, body = res["own/mine"]
    assert st == 200 and [t["name"] for t in json.loads(body)["result"]["tools"]] == ["echo"], (st, body)
    st, body = res["own_exec/mine"]
    assert st == 200 and json.loads(body)["result"] == {"echo": {"from": "A"}, "run": arun[:8]}, (st, body)
    # a forged first line is just a malformed request line after the shim's
    st, body = res["forged_hello"]
    assert st == 400, (st, body)

    # and nothing changed for the victim
    assert read_file(s, victim, "x") == SECRET.encode()
    st, after = api(s, "GET", f"/threads/{victim}/runs")
    assert st == 200 and [r["runId"] for r in after] == [r["runId"] for r in before], (before, after)
    rec = wait_terminal(s, vrun, victim)
    assert rec["status"] in ("aborted", "failed"), rec
    # the public listener still serves a run's bridge, with that run's token
    # (the victim's run ended: its bridge is gone)
    st, body = api(s, "POST", f"/_bridge/{vrun}?threadId={victim}",
                   raw_body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                   headers={"Authorization": f"Bearer {vtok}"})
    assert st == 404, (st, body)


def test_the_bridge_socket_is_private_and_needs_the_shims_first_line(s):
    path = os.path.join(s.dir, "run", "bridge.sock")
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    # a client that does not open with the shim's line is dropped unanswered
    for first in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"RUNWARDEN-BRIDGE a/b\r\n",
                  b"RUNWARDEN-BRIDGE " + b"a" * 200 + b"\r\n", b"RUNWARDEN-BRIDGE x\n"):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(20)
        c.connect(path)
        c.sendall(first)
        assert c.recv(100) == b"", first
        c.close()
    # with the line, still nothing but that run's host tools
    c = socket.socket(socket.AF_UNIX)
    c.settimeout(20)
    c.connect(path)
    c.sendall(b"RUNWARDEN-BRIDGE some-run\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
              b"POST /_bridge/some-run HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
              b"Authorization: Bearer x\r\nConnection: close\r\n\r\n{}")
    data = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.close()
    heads = re.findall(rb"HTTP/1.1 (\d+)", data)
    assert heads == [b"404", b"404"], data  # /healthz does not exist; some-run has no bridge
    assert b'"no active bridge for run"' in data, data


def test_the_shim_opens_each_socket_forward_with_its_run(s):
    """SANDBOX_FORWARD to a Unix socket, on the shim's socket with the raw
    client: the shim's line, then exactly the sandbox's bytes."""
    from helpers.mpack import ERROR, REPLY
    from t_sandbox_net import call, sandbox_id, sh
    assert sh(s, "bridge-fwd", "true")[0] == 0
    sb = sandbox_id("bridge-fwd")
    path = os.path.join(s.dir, "fwd-test.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen()
    srv.settimeout(30)
    got = []

    def serve_one():
        c, _ = srv.accept()
        data = b""
        while not data.endswith(b"ping"):
            b = c.recv(4096)
            if not b:
                break
            data += b
        got.append(data)
        c.sendall(b"pong")
        c.close()

    t = threading.Thread(target=serve_one, daemon=True)
    t.start()
    try:
        typ, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "run-unix_1", "target": path})
        assert typ == REPLY and 0 < b["port"] < 65536, b
        rc, out = sh(s, "bridge-fwd", "python3 -c 'import socket; c = socket.create_connection("
                     f"(\"127.0.0.1\", {b['port']})); c.sendall(b\"ping\"); print(c.recv(10).decode())'")
        t.join(30)
        assert out == "pong\n", out
        assert got == [b"RUNWARDEN-BRIDGE run-unix_1\r\nping"], got
    finally:
        srv.close()
        call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": "run-unix_1"})
    # the run id goes on that line: one plain word, or no forward at all
    for run_id in ("a b", "x/y", "r\r\nGET / HTTP/1.1", "é", "a" * 129):
        typ, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": run_id, "target": path})
        assert typ == ERROR and b["code"] == -22, (run_id, b)
    for target in ("/" + "a" * 120, "bridge.sock"):
        typ, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "r", "target": target})
        assert typ == ERROR and b["code"] == -22, (target, b)
