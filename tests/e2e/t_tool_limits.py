# SPDX-License-Identifier: MIT
"""Issue 12 §6: one sandbox ran 256 host tool processes at once. Now a run may
have max_tool_calls_per_run host tool calls running, the host max_tool_calls in
all; a further call gets 429 too_many_tool_calls (and is counted in
runwarden_tool_calls_refused_total) instead of a process. The calls are made
from inside the sandbox, through the run's own bridge port, as an agent would."""
import json
import os
import time

from rwtest import poll

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")

SUITE_CONF = f"""[coordinatord]
max_tool_calls_per_run = 2
max_tool_calls = 3

[harness.tooly]
adapter = shell
tools = slow

[tool.slow]
command = ["{TOOLS}/slow-tool"]
description = Takes a while
timeout_ms = 30000
"""

# N concurrent tools/call of `slow` through the bridge; the statuses go to
# stdout as JSON. With a marker name, writes /workspace/MARKER once every call
# has been sent (the calls then hold their tool processes for SECONDS).
CALLS = r'''
import http.client, json, os, sys, threading, time, urllib.parse
n, seconds, marker = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
cfg = json.load(open(os.environ["RUNWARDEN_MCP_CONFIG"]))["mcpServers"]["tanstack"]
u = urllib.parse.urlsplit(cfg["url"])
out = [None] * n
def call(i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": "slow", "arguments": {"seconds": seconds}}})
    c.request("POST", u.path + "?" + u.query, body=body,
              headers={"Authorization": cfg["headers"]["Authorization"],
                       "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    out[i] = [r.status, json.loads(data).get("code") if r.status != 200 else None]
ts = [threading.Thread(target=call, args=(i,)) for i in range(n)]
for t in ts:
    t.start()
    time.sleep(0.05)
if marker != "-":
    time.sleep(0.5)
    open("/workspace/" + marker, "w").write("sent")
for t in ts:
    t.join()
print(json.dumps(out))
'''


def quote(script):
    return "'" + script.replace("'", "'\"'\"'") + "'"


def tool_run(s, thread, n, seconds, marker="-"):
    st, js = s.http("POST", "/runs", {
        "threadId": thread, "metadata": {"harness": "tooly"},
        "messages": [{"role": "user",
                      "content": f"python3 -c {quote(CALLS)} {n} {seconds} {marker}"}]})
    assert st == 202, (st, js)
    return js["runId"]


def statuses(s, run, thread):
    events, status, _, _ = s.tail(run, thread=thread, timeout=90)
    assert status["status"] == "completed", status
    out = "".join(e["chunk"]["value"]["text"] for e in events
                  if e["chunk"].get("name") == "process.stdout")
    return json.loads(out.strip().splitlines()[-1])


def test_per_run_cap(s):
    before = s.metric("runwarden_tool_calls_refused_total")
    got = statuses(s, tool_run(s, "t-tl1", 5, 3), "t-tl1")
    ok = [g for g in got if g[0] == 200]
    refused = [g for g in got if g[0] == 429]
    assert len(ok) == 2 and len(refused) == 3, got
    assert all(g[1] == "too_many_tool_calls" for g in refused), got
    assert s.metric("runwarden_tool_calls_refused_total") - before == 3


def test_host_wide_cap(s):
    a = tool_run(s, "t-tl2", 2, 6, marker="sent")
    # wait until run A's two calls hold two of the host's three tool slots
    assert poll(lambda: s.http("GET", "/threads/t-tl2/files/sent")[0] == 200, timeout=30)
    b = tool_run(s, "t-tl3", 2, 1)
    got_b = statuses(s, b, "t-tl3")
    assert sorted(g[0] for g in got_b) == [200, 429], got_b
    got_a = statuses(s, a, "t-tl2")
    assert [g[0] for g in got_a] == [200, 200], got_a
