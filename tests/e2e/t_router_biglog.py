# SPDX-License-Identifier: MIT
"""Issue 12 item 2: a big log can be read. A ~200 MB-output run (3,200
events of 64 KiB of JSON-escaped text: 256 of them are 24 MiB, over the
16 MiB frame limit) tails to the end from -1 and from the middle, over
WebSocket and SSE, with consecutive seqs and every byte of its output.
The tails here stream: they keep counts, not 300 MB of events."""
import asyncio
import json
import socket
import time

import websockets

from t_router_lib import connect

SUITE_CONF = """[coordinatord]
max_run_output_bytes = 512M
max_thread_output_bytes = 0
sync = no
"""

SIZE = 200 << 20
RUN = {}


def big_run(s):
    if "id" not in RUN:
        t0 = time.time()
        RUN["id"] = s.start_run(f"yes | head -c {SIZE}", thread="t-big")
        RUN["rec"] = s.wait_terminal(RUN["id"], thread="t-big", timeout=600)
        print(f"  [measure] {SIZE >> 20} MiB run took {time.time() - t0:.1f}s, "
              f"{RUN['rec']['lastSeq'] + 1} events")
    assert RUN["rec"]["status"] == "completed", RUN["rec"]
    return RUN["id"], RUN["rec"]["lastSeq"]


class Count:
    """Checks each event as it arrives: seqs consecutive from start, stdout bytes."""

    def __init__(self, start):
        self.next, self.out, self.status = start, 0, None

    def event(self, msg):
        if msg.get("type") == "status":
            assert self.status is None, "two status frames"
            self.status = msg["record"]
            return
        assert self.status is None, "event after the status frame"
        assert "seq" in msg, ("not an event", msg, "at seq", self.next - 1)
        assert msg["seq"] == self.next, ("gap or duplicate", msg["seq"], self.next)
        self.next += 1
        ch = msg["chunk"]
        if ch.get("type") == "CUSTOM" and ch.get("name") == "process.stdout":
            self.out += len(ch["value"]["text"])


def ws_tail(s, run, last_seq):
    uri = f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId=t-big&lastSeq={last_seq}"
    cnt = Count(last_seq + 1)

    async def go():
        async with websockets.connect(uri, max_size=2**24) as ws:
            try:
                while True:
                    cnt.event(json.loads(await ws.recv()))
            except websockets.ConnectionClosed:
                pass
            return ws.close_code, ws.close_reason

    code, reason = asyncio.run(asyncio.wait_for(go(), 600))
    return cnt, code, reason


def sse_tail(s, run, last_seq):
    c = connect(s.port, timeout=60)
    c.sendall(f"GET /runs/{run}/stream?threadId=t-big&lastSeq={last_seq} HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
              "Accept: text/event-stream\r\n\r\n".encode())
    cnt = Count(last_seq + 1)
    buf = b""
    while b"\r\n\r\n" not in buf:
        b = c.recv(1 << 16)
        assert b, buf
        buf += b
    head, buf = buf.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    deadline = time.time() + 600
    eof = False
    while not eof and time.time() < deadline:
        try:
            b = c.recv(1 << 20)
        except socket.timeout:
            break
        eof = not b
        buf += b
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            data, eid = [], None
            for line in block.decode().split("\n"):
                if line.startswith(":"):
                    continue
                k, _, v = line.partition(":")
                v = v[1:] if v.startswith(" ") else v
                if k == "data":
                    data.append(v)
                elif k == "id":
                    eid = v
            if data:
                msg = json.loads("\n".join(data))
                if msg.get("type") != "status":
                    assert eid == str(msg["seq"]), (eid, msg["seq"])
                cnt.event(msg)
    c.close()
    return cnt, eof


def check(cnt, start, last, why=None):
    assert cnt.status is not None, f"no status frame; stopped at seq {cnt.next - 1} ({why})"
    assert cnt.next == last + 1, (cnt.next, last)
    assert cnt.status["status"] == "completed" and cnt.status["lastSeq"] == last
    if start == 0:
        assert cnt.out == SIZE, (cnt.out, SIZE)


def test_ws_tails_a_200mb_log_from_the_start(s):
    run, last = big_run(s)
    t0 = time.time()
    cnt, code, reason = ws_tail(s, run, -1)
    check(cnt, 0, last, (code, reason))
    assert code == 1000, (code, reason)
    print(f"  [measure] WS tail of {last + 1} events: {time.time() - t0:.1f}s")


def test_ws_tails_a_200mb_log_from_the_middle(s):
    run, last = big_run(s)
    mid = last // 2
    cnt, code, reason = ws_tail(s, run, mid)
    check(cnt, mid + 1, last, (code, reason))
    assert code == 1000, (code, reason)


def test_sse_tails_a_200mb_log_from_the_start_and_the_middle(s):
    run, last = big_run(s)
    for start in (-1, last // 3):
        cnt, eof = sse_tail(s, run, start)
        check(cnt, start + 1, last)
        assert eof


def test_read_batches_are_bounded_by_bytes(s):
    import os
    from ipc import Ipc
    run, last = big_run(s)
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))
    body = c.call("RUN_READ", {"run_id": run, "from_seq": -1, "max": 256})
    c.close()
    n = len(body["events"])
    total = sum(len(e) for e in body["events"])
    assert 1 <= n < 256 and total <= 4 << 20, (n, total)
