# SPDX-License-Identifier: MIT
"""The SSE transport of the tail (API.md extension) and the server's
WebSocket heartbeat: `id:`/`data:` events, Last-Event-ID resume, `event:
status` at the end, `: ping` comments, and a WebSocket that stops answering
pings is dropped."""
import json
import socket
import time

from rwtest import assert_gapfree, stdout_text
from t_router_lib import OP_PING, OP_PONG, OP_TEXT, WsClient, connect, frame, read_all

SUITE_CONF = """[routerd]
server_names = x
ws_ping_interval_ms = 300
"""


def sse_open(s, path, headers=""):
    c = connect(s.port, timeout=10)
    c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n{headers}\r\n"
              .encode())
    return c


def sse_read(c, timeout=15, max_events=None):
    """Parse the stream: (head, events[(id, event, data, comments_before)], eof)."""
    c.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = c.recv(65536)
        assert b, buf
        buf += b
    head, buf = buf.split(b"\r\n\r\n", 1)
    head = head.decode()
    events, comments, eof = [], 0, False
    deadline = time.time() + timeout
    while True:
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            ev = {"id": None, "event": None, "data": [], "retry": None}
            for line in block.decode().split("\n"):
                if line.startswith(":"):
                    comments += 1
                    continue
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                if k == "data":
                    ev["data"].append(v)
                elif k in ("id", "event", "retry"):
                    ev[k] = v
            if ev["data"]:
                events.append((ev["id"], ev["event"], json.loads("\n".join(ev["data"])), comments))
                if max_events and len(events) >= max_events:
                    return head, events, eof, comments
        if eof or time.time() > deadline:
            return head, events, eof, comments
        try:
            b = c.recv(65536)
        except socket.timeout:
            return head, events, eof, comments
        if not b:
            eof = True
        buf += b


def test_sse_streams_events_and_status(s):
    run = s.start_run("for i in 1 2 3; do echo l$i; sleep 0.1; done", thread="t-sse")
    c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse")
    head, events, eof, _ = sse_read(c)
    c.close()
    assert head.startswith("HTTP/1.1 200"), head
    assert "Content-Type: text/event-stream" in head and "Cache-Control: no-cache" in head
    assert eof, "the stream must end after the status event"
    data = [e for e in events if e[1] is None]
    status = [e for e in events if e[1] == "status"]
    assert len(status) == 1 and events[-1][1] == "status"
    for i, (eid, _, d, _) in enumerate(data):
        assert eid == str(i) and d["seq"] == i, (eid, d)
    assert_gapfree([d for _, _, d, _ in data])
    assert stdout_text([d for _, _, d, _ in data]) == "l1\nl2\nl3\n"
    rec = status[0][2]["record"]
    assert rec["status"] == "completed" and rec["lastSeq"] == len(data) - 1, rec


def test_sse_resume_with_last_event_id(s):
    run = s.start_run("echo a; echo b", thread="t-sse2")
    s.wait_terminal(run, thread="t-sse2")
    c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse2")
    _, full, _, _ = sse_read(c)
    c.close()
    n = len([e for e in full if e[1] is None])
    for k in (-1, 0, 3, n - 1):
        # Last-Event-ID wins over the lastSeq of the URL an EventSource reuses
        c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse2&lastSeq=0",
                     f"Last-Event-ID: {k}\r\n")
        _, rest, eof, _ = sse_read(c)
        c.close()
        seqs = [d["seq"] for _, ev, d, _ in rest if ev is None]
        assert seqs == list(range(k + 1, n)), (k, seqs)
        assert rest[-1][1] == "status" and eof
    c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse2&lastSeq=2")
    _, rest, _, _ = sse_read(c)
    c.close()
    assert [d["seq"] for _, ev, d, _ in rest if ev is None] == list(range(3, n))


def test_sse_errors(s):
    run = s.start_run("true", thread="t-sse3")
    for hdr, want in (("Last-Event-ID: x\r\n", 400), ("Last-Event-ID: -2\r\n", 400)):
        c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse3", hdr)
        data = c.recv(65536)
        c.close()
        assert data.startswith(b"HTTP/1.1 %d" % want), data
    c = sse_open(s, f"/runs/{run}/stream?threadId=wrong")
    data = c.recv(65536)
    c.close()
    assert data.startswith(b"HTTP/1.1 404"), data
    st, body = s.http("GET", f"/runs/{run}/stream?threadId=t-sse3", headers={"Accept": "text/html"})
    assert st == 426 and body["code"] == "upgrade_required"


def test_sse_heartbeat_comments_while_idle(s):
    run = s.start_run("sleep 1.5; echo done", thread="t-sse4")
    c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse4")
    _, events, eof, comments = sse_read(c, timeout=15)
    c.close()
    assert eof and events[-1][1] == "status"
    assert comments >= 3, f"{comments} ': ping' comments in 1.5 s at a 300 ms interval"


def test_sse_live_events_arrive_as_committed(s):
    run = s.start_run("echo first; sleep 1; echo second", thread="t-sse5")
    c = sse_open(s, f"/runs/{run}/stream?threadId=t-sse5")
    t0 = time.time()
    _, events, _, _ = sse_read(c, timeout=0.8)
    assert "first" in stdout_text([d for _, ev, d, _ in events if ev is None])
    assert time.time() - t0 < 1.5
    _, more, eof, _ = sse_read_more(c)
    c.close()


def sse_read_more(c):
    # the head was consumed already: read the rest of the body raw
    buf, _ = read_all(c, 10)
    assert b"event: status" in buf and b"second" in buf, buf
    return None, None, True, None


def test_ws_server_pings_and_keeps_a_ponging_client(s):
    run = s.start_run("sleep 3", thread="t-ping")
    w = WsClient(s.port, f"/runs/{run}/stream?threadId=t-ping")
    pings = 0
    t0 = time.time()
    while time.time() - t0 < 1.5:
        fin, rsv, op, p = w.recv_frame(2)
        if op == OP_PING:
            pings += 1
            w.send(frame(OP_PONG, p))
    assert pings >= 3, pings
    w.send(frame(OP_PING, b"alive?"))
    while True:
        fin, rsv, op, p = w.recv_frame(2)
        if op == OP_PONG:
            break
    w.close()


def test_ws_client_that_never_pongs_is_dropped(s):
    run = s.start_run("sleep 5", thread="t-noping")
    w = WsClient(s.port, f"/runs/{run}/stream?threadId=t-noping")
    t0 = time.time()
    code, reason = w.expect_close(timeout=3)
    assert code == 1011 and "pong" in reason, (code, reason)
    assert time.time() - t0 < 1.5
    assert w.expect_eof(1.5)
    w.close()
    st, text = s.http("GET", "/metrics")
    assert b'runwarden_router_ws_closes_total{reason="ping_timeout"} 1' in text, text
