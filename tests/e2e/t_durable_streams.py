# SPDX-License-Identifier: MIT
"""GET|HEAD /ds/v1/threads/{threadId}/runs/{runId} is a
Durable Streams JSON-mode stream. The real @durable-streams/client (catch-up,
long-poll, SSE) and @durable-streams/tanstack-ai-transport (snapshot,
subscribe) read a finished and a live run (tests/js/ds-read.mjs); raw HTTP
checks the offsets, headers, ETag, HEAD and the refusals."""
import http.client
import json
import os
import subprocess

from rwtest import Skip, poll
from t_harness import prepare, run_harness, workspace

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
JS = os.path.join(TOP, "tests", "js")

SUITE_CONF = """[harness.runner]
adapter = ndjson
command = ["/usr/bin/python3", "/workspace/.bin/runner"]
"""


def off(next_seq):
    return "0000000000000000_%016d" % next_seq


def url(s, thread, run):
    return f"http://127.0.0.1:{s.port}/ds/v1/threads/{thread}/runs/{run}"


def raw(s, method, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def read(s, u, mode, ready=None):
    if not os.path.isdir(os.path.join(JS, "node_modules", "@durable-streams")):
        raise Skip("tests/js/node_modules missing (cd tests/js && npm ci)")
    env = dict(os.environ, DS_READY=ready) if ready else None
    return subprocess.Popen(["node", os.path.join(JS, "ds-read.mjs"), u, mode], cwd=JS,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def result(p):
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, (out, err.decode()[-2000:])
    v = json.loads(out.decode().strip().splitlines()[-1])
    assert "error" not in v, v
    return v


def test_a_finished_run_read_by_the_real_clients(s):
    run = s.start_run("echo hello", thread="t-ds")
    events, status, _, _ = s.tail(run, thread="t-ds")
    chunks = [e["chunk"] for e in events]
    assert status["status"] == "completed"
    u = url(s, "t-ds", run)
    v = result(read(s, u, "catchup"))
    assert v["items"] == chunks and v["upToDate"] and v["streamClosed"], v
    assert v["offset"] == off(len(chunks)), v
    v = result(read(s, u, "sse"))
    assert v["items"] == chunks and v["streamClosed"], v
    v = result(read(s, u, "long-poll"))
    assert v["items"] == chunks and v["streamClosed"], v
    # the transport's snapshot (it rebuilds text messages: a runner's run)
    prepare(s, "t-ds-snap")
    run, chunks, status = run_harness(s, "t-ds-snap", "runner", "ok")
    v = result(read(s, url(s, "t-ds-snap", run), "snapshot"))
    assert [m["role"] for m in v["messages"]] == ["assistant"], v
    assert v["messages"][0]["parts"] == [{"type": "text", "content": "run " + run[:8]}], v
    assert v["offset"] == off(len(chunks)), v


def test_a_live_run_read_by_the_real_clients(s):
    gate = "/workspace/ds-gate"
    run = s.start_run(f"echo one; while [ ! -e {gate} ]; do sleep 0.05; done; echo two",
                      thread="t-ds-live")
    u = url(s, "t-ds-live", run)
    marks = {m: os.path.join(s.dir, f"ds-ready-{m}") for m in ("long-poll", "sse", "subscribe")}
    readers = {m: read(s, u, m, marks[m]) for m in marks}
    # every reader has its first batch (the run is gated: still running)
    # before the run goes on, so the rest reaches each one live
    assert poll(lambda: all(os.path.exists(f) for f in marks.values()), 60), \
        {m: (os.path.exists(f), p.poll()) for (m, f), p in zip(marks.items(), readers.values())}
    st, rec = s.http("GET", f"/runs/{run}?threadId=t-ds-live")
    assert rec["status"] == "running", rec
    open(os.path.join(workspace(s, "t-ds-live"), "ds-gate"), "w").close()
    events, status, _, _ = s.tail(run, thread="t-ds-live")
    chunks = [e["chunk"] for e in events]
    assert status["status"] == "completed", status
    for m in ("long-poll", "sse"):
        v = result(readers[m])
        assert v["items"] == chunks and v["streamClosed"], (m, v)
        assert v["batches"] >= 2, (m, v)  # caught up, then live
    v = result(readers["subscribe"])
    types = [c["type"] for c in v["chunks"]]
    assert types[-1] == "RUN_FINISHED", types


def test_offsets_headers_etag_head_and_refusals(s):
    prepare(s, "t-ds-nd")
    run, chunks, status = run_harness(s, "t-ds-nd", "runner", "ok")
    base = f"/ds/v1/threads/t-ds-nd/runs/{run}"
    st, h, body = raw(s, "GET", base + "?offset=-1")
    assert st == 200 and h["content-type"].startswith("application/json"), (st, h)
    assert h["stream-next-offset"] == off(len(chunks)) and h["stream-up-to-date"] == "true"
    assert h["stream-closed"] == "true" and h["etag"], h
    assert json.loads(body) == chunks
    # served as stored: the runner's own line, byte for byte
    assert b'{"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}' in body
    # ETag
    st, h2, body2 = raw(s, "GET", base + "?offset=-1", {"If-None-Match": h["etag"]})
    assert st == 304 and body2 == b"" and h2["etag"] == h["etag"], (st, h2)
    # from an offset: only what follows
    st, h, body = raw(s, "GET", base + "?offset=" + off(2))
    assert st == 200 and json.loads(body) == chunks[2:], body
    # now: nothing, up to date, closed
    st, h, body = raw(s, "GET", base + "?offset=now")
    assert st == 200 and json.loads(body) == [] and h["stream-closed"] == "true", (st, h, body)
    # long-poll at the end of a terminal run: at once, 204 closed
    st, h, body = raw(s, "GET", base + "?offset=" + off(len(chunks)) + "&live=long-poll")
    assert st == 204 and h["stream-closed"] == "true", (st, h)
    # HEAD
    st, h, body = raw(s, "HEAD", base)
    assert st == 200 and body == b"" and h["stream-next-offset"] == off(len(chunks)), (st, h)
    # refusals
    for q, code in (("?offset=5", "bad_offset"), ("?offset=0000000000000000_12", "bad_offset"),
                    ("?live=yes", "bad_request")):
        st, h, body = raw(s, "GET", base + q)
        assert st == 400 and json.loads(body)["code"] == code, (q, st, body)
    st, h, body = raw(s, "POST", base)
    assert st == 405 and "HEAD" in h["allow"], (st, h)
    st, h, body = raw(s, "GET", f"/ds/v1/threads/t-ds-nd/runs/{'0' * 8}-0000-4000-8000-{'0' * 12}")
    assert st == 404, (st, body)
    # another thread's run is not found through this thread
    st, h, body = raw(s, "GET", f"/ds/v1/threads/t-other/runs/{run}")
    assert st == 404, (st, body)
