# SPDX-License-Identifier: MIT
"""Host tool calls made as an agent makes them: from inside the sandbox,
through the run's own bridge port, with the MCP configuration the harness got
(RUNWARDEN_MCP_CONFIG). One run of the test harness `tooly` runs SCRIPT with
`python3 -c`: N concurrent tools/call of one tool, 50 ms apart; with a marker
name it writes /workspace/MARKER once every call was sent (the calls then hold
their tool processes); it prints one JSON line, [{"status", "body"}, …]."""
import json

SCRIPT = r'''
import http.client, json, os, sys, threading, time, urllib.parse
name, args, n, marker = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = json.load(open(os.environ["RUNWARDEN_MCP_CONFIG"]))["mcpServers"]["tanstack"]
u = urllib.parse.urlsplit(cfg["url"])
out = [None] * n
def call(i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": name, "arguments": args}})
    c.request("POST", u.path + "?" + u.query, body=body,
              headers={"Authorization": cfg["headers"]["Authorization"],
                       "Content-Type": "application/json"})
    r = c.getresponse()
    out[i] = {"status": r.status, "body": json.loads(r.read().decode())}
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


def quote(text):
    """text as one single-quoted shell word."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def start(s, thread, tool, args, n=1, marker="-", harness="tooly"):
    """Start the run making the calls; returns its run id."""
    st, js = s.http("POST", "/runs", {
        "threadId": thread, "metadata": {"harness": harness},
        "messages": [{"role": "user", "content":
                      f"python3 -c {quote(SCRIPT)} {tool} {quote(json.dumps(args))} {n} {marker}"}]})
    assert st == 202, (st, js)
    return js["runId"]


def results(s, run, thread, timeout=120):
    """The calls' [{"status", "body"}, …], once the run completed."""
    events, status, _, _ = s.tail(run, thread=thread, timeout=timeout)
    assert status["status"] == "completed", status
    out = "".join(e["chunk"]["value"]["text"] for e in events
                  if e["chunk"].get("name") == "process.stdout")
    return json.loads(out.strip().splitlines()[-1])
