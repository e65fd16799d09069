# SPDX-License-Identifier: MIT
"""Issue 6: host tools over the MCP bridge and /tool-exec, through routerd.
A run whose harness lists tools gets a bridge: its token is handed to the
harness on its fd 3 (RUNWARDEN_MCP_CONFIG=/dev/fd/3; the run copies it out
here, a second run on the same thread finds it nowhere), checked in constant
time, and gone
when the run ends. A tool call in flight keeps the run alive past the stall
timeout."""
import hashlib
import json
import os
import time

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")

SUITE_CONF = f"""[coordinatord]
stall_timeout_ms = 1000

[harness.tooly]
adapter = shell
tools = echo slow broken

[tool.echo]
command = ["{TOOLS}/echo-tool"]
description = Echo the arguments
schema = {{"type":"object","properties":{{"text":{{"type":"string"}}}}}}

[tool.slow]
command = ["{TOOLS}/slow-tool"]
description = Takes a while
timeout_ms = 10000

[tool.broken]
command = ["{TOOLS}/fail-tool"]
description = Always fails
"""


def start_tool_run(s, thread, command):
    st, js = s.http("POST", "/runs", {"threadId": thread, "metadata": {"harness": "tooly"},
                                      "messages": [{"role": "user", "content": command}]})
    assert st == 202, (st, js)
    return js["runId"]


EXPORT = ('echo "$RUNWARDEN_MCP_CONFIG" > /workspace/mcp.path; '
          'cat "$RUNWARDEN_MCP_CONFIG" > /workspace/mcp.tmp && mv /workspace/mcp.tmp /workspace/mcp.json; ')


def bridge_config(s, thread, run):
    """What the harness got on its fd 3 (RUNWARDEN_MCP_CONFIG), copied by the
    run itself (EXPORT) into the workspace; and that no other run of the
    thread can find it in the shared /tmp."""
    ws = os.path.dirname(gate_path(s, thread))
    deadline = time.time() + 10
    while time.time() < deadline and not os.path.exists(os.path.join(ws, "mcp.json")):
        time.sleep(0.1)
    with open(os.path.join(ws, "mcp.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(ws, "mcp.path")) as f:
        path = f.read().strip()
    token = cfg["mcpServers"]["tanstack"]["headers"]["Authorization"].split(" ", 1)[1]
    os.unlink(os.path.join(ws, "mcp.json"))
    other = s.start_run(f"ls -a /tmp; grep -rs {token} /tmp /dev/shm /proc/*/environ; true",
                        thread=thread)
    events, status, _, _ = s.tail(other, thread=thread)
    out = "".join(e["chunk"]["value"]["text"] for e in events
                  if e["chunk"].get("name") in ("process.stdout", "process.stderr"))
    assert "runwarden-mcp" not in out and "[REDACTED]" not in out and token not in out, out
    return cfg, path


def rpc(s, run, thread, token, msg):
    return s.http("POST", f"/_bridge/{run}?threadId={thread}", raw_body=json.dumps(msg).encode(),
                  headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})


def gate_path(s, thread):
    sid = hashlib.sha256(thread.encode()).hexdigest()[:16]
    return os.path.join(s.dir, "state", "sandboxes", sid, "workspace", "gate")


def test_bridge_lifecycle(s):
    # the run blocks on a FIFO (no CPU, no output) until the test opens it
    prep = s.start_run("rm -f /workspace/gate && mkfifo /workspace/gate", thread="t-br")
    assert s.wait_terminal(prep, thread="t-br")["status"] == "completed"
    run = start_tool_run(s, "t-br", EXPORT + "read x < /workspace/gate; echo over")
    cfg, path = bridge_config(s, "t-br", run)
    server = cfg["mcpServers"]["tanstack"]
    assert server["type"] == "http" and path == "/dev/fd/3", (cfg, path)
    assert server["url"].endswith(f"/_bridge/{run}?threadId=t-br")
    token = server["headers"]["Authorization"].split(" ", 1)[1]
    assert len(token) == 68, token

    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert st == 200 and body["result"]["serverInfo"]["name"] == "tanstack", body
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert st == 202, st
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    names = sorted(t["name"] for t in body["result"]["tools"])
    assert names == ["broken", "echo", "slow"], body
    echo = next(t for t in body["result"]["tools"] if t["name"] == "echo")
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    slow = next(t for t in body["result"]["tools"] if t["name"] == "slow")
    assert slow["inputSchema"] == {"type": "object", "properties": {}}
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                          "params": {"name": "echo", "arguments": {"text": "hi"}}})
    text = body["result"]["content"][0]["text"]
    assert json.loads(text) == {"echo": {"text": "hi"}, "run": run[:8]}, body
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                          "params": {"name": "broken", "arguments": {}}})
    assert body["result"]["isError"] is True and "exited with status 3" in body["result"]["content"][0]["text"]
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {}})
    assert body["error"]["code"] == -32602, body
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 6, "method": "nope"})
    assert body["error"]["code"] == -32601, body
    st, body = s.http("POST", f"/_bridge/{run}?threadId=t-br", raw_body=b"{not json",
                      headers={"Authorization": f"Bearer {token}"})
    assert st == 200 and body["error"]["code"] == -32700 and body["id"] is None, body
    st, body = rpc(s, run, "t-br", token, [1, 2])
    assert body["error"]["code"] == -32600, body

    # /tool-exec
    st, body = s.http("POST", f"/tool-exec/{run}?threadId=t-br",
                      {"name": "echo", "args": {"n": 1}}, headers={"Authorization": f"Bearer {token}"})
    assert st == 200 and body["result"]["echo"] == {"n": 1}, (st, body)
    st, body = s.http("POST", f"/tool-exec/{run}?threadId=t-br",
                      {"name": "nope", "args": {}}, headers={"Authorization": f"Bearer {token}"})
    assert st == 500 and body["error"] == "Unknown tool: nope", body
    st, body = s.http("POST", f"/tool-exec/{run}?threadId=t-br", {"args": {}},
                      headers={"Authorization": f"Bearer {token}"})
    assert st == 400 and body["error"] == "body must be { name, args }", body

    # the token: wrong, truncated, missing → 401; foreign thread → 404
    for auth in ("Bearer " + token[:-1] + ("0" if token[-1] != "0" else "1"), "Bearer " + token[:-1], None):
        h = {"Authorization": auth} if auth else {}
        st, body = s.http("POST", f"/_bridge/{run}?threadId=t-br", {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers=h)
        assert st == 401 and body["code"] == "unauthorized", (auth, st, body)
    st, body = rpc(s, run, "other", token, {"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    assert st == 404

    # a tool running past the stall timeout keeps the run alive
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                          "params": {"name": "slow", "arguments": {"seconds": 2.5}}})
    assert body["result"]["content"][0]["text"] == "done\n", body
    st, rec = s.http("GET", f"/runs/{run}?threadId=t-br")
    assert rec["status"] == "running", rec  # not failed by the watchdog meanwhile
    with open(gate_path(s, "t-br"), "w") as g:
        g.write("go\n")
    rec = s.wait_terminal(run, thread="t-br")
    assert rec["status"] == "completed", rec

    # the bridge is gone with the run
    st, body = rpc(s, run, "t-br", token, {"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
    assert st == 404 and body["error"] == "no active bridge for run", (st, body)
    # and the token never reached the log
    events, _, _, _ = s.tail(run, thread="t-br")
    assert token not in json.dumps(events)


def test_run_without_tools_has_no_bridge(s):
    run = s.start_run("sleep 0.5", thread="t-nobr")
    st, body = s.http("POST", f"/_bridge/{run}?threadId=t-nobr", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Authorization": "Bearer x"})
    assert st == 404, (st, body)
    s.wait_terminal(run, thread="t-nobr")
