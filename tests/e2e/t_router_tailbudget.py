# SPDX-License-Identifier: MIT
"""Issue 30 item 7: tails whose clients do not read are bounded in total, not
only each by ws_max_queue. 200 tails (WebSocket, SSE, /chat joins, and
Durable Streams SSE reads, held to the same budget) of a 30 MB run that
never read would hold ~100 MB in routerd at half a ws_max_queue each; with
tails_max_queued_bytes = 4M the ones backed up longest are closed (1013, the
connection dropped at once), routerd's RSS stays within a bound of the
baseline taken in the same test, the tails that read get every event, and a
closed slow tail resumes with lastSeq and gets every event after it."""
import asyncio
import json
import struct
import time

import websockets

from t_router_lib import read_all, rss_kib, sample_rss, slow_tail

SUITE_CONF = """[routerd]
server_names = x
tails_max_queued_bytes = 4M
ws_stall_timeout_ms = 120000
"""

N_SLOW = 200


def ws_seqs(data):
    """The seqs of the complete text frames after the 101 head (a cut-off
    last frame is left out), and whether a close frame came."""
    head, _, buf = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head[:100]
    seqs, closed, off = [], False, 0
    while off + 2 <= len(buf):
        op, n, o = buf[off] & 0x0F, buf[off + 1] & 0x7F, off + 2
        if n == 126:
            if o + 2 > len(buf):
                break
            n, o = struct.unpack("!H", buf[o:o + 2])[0], o + 2
        elif n == 127:
            if o + 8 > len(buf):
                break
            n, o = struct.unpack("!Q", buf[o:o + 8])[0], o + 8
        if o + n > len(buf):
            break
        if op == 1:
            seqs.append(json.loads(buf[o:o + n])["seq"])
        elif op == 8:
            closed = True
        off = o + n
    return seqs, closed


def test_non_reading_tails_are_bounded_in_total(s):
    thread = "t-budget"
    run = s.start_run("head -c 22000000 /dev/zero | base64 -w 100", thread=thread)
    rec = s.wait_terminal(run, thread=thread, timeout=120)
    assert rec["status"] == "completed", rec
    n = rec["lastSeq"] + 1
    path = f"/runs/{run}/stream?threadId={thread}"
    time.sleep(0.5)
    rss0 = rss_kib(s)
    peak = [rss0]

    # a quarter each: WebSocket and SSE tails, /chat joins, Durable Streams
    # SSE reads (not tails, but held to the same budget)
    paths = [(path, True), (path, False), (f"/chat?runId={run}&offset=-1", False),
             (f"/ds/v1/threads/{thread}/runs/{run}?offset=-1&live=sse", False)]
    slow = [slow_tail(s, *paths[i % 4]) for i in range(N_SLOW)]

    async def reader():
        uri = f"ws://127.0.0.1:{s.port}{path}"
        seqs = []
        async with websockets.connect(uri, max_size=2**24, ping_interval=None) as ws:
            try:
                while True:
                    m = json.loads(await ws.recv())
                    if m.get("type") != "status":
                        seqs.append(m["seq"])
            except websockets.ConnectionClosed:
                pass
            return seqs, ws.close_code

    async def go():
        stop = asyncio.Event()
        samp = asyncio.create_task(sample_rss(s, peak, stop))
        res = await asyncio.wait_for(asyncio.gather(*(reader() for _ in range(3))), 120)
        # the slow tails had time to back up and be closed
        deadline = time.time() + 20
        while s.metric("runwarden_router_tails_budget_closed_total") < N_SLOW - 20 and \
                time.time() < deadline:
            await asyncio.sleep(0.1)
        stop.set()
        await samp
        return res

    t0 = time.time()
    results = asyncio.run(go())
    # the readers are unharmed: every event, then the normal end
    for seqs, code in results:
        assert seqs == list(range(n)), (len(seqs), n)
        assert code == 1000, code
    closed = s.metric("runwarden_router_tails_budget_closed_total")
    queued = s.metric("runwarden_router_tails_queued_bytes")
    growth_mib = (peak[0] - rss0) / 1024
    print(f"    {N_SLOW} non-reading tails of {n} events in {time.time() - t0:.1f}s: "
          f"{closed:.0f} closed for the budget, {queued / 1048576:.1f} MiB still queued; "
          f"routerd RSS {rss0 // 1024} MiB -> peak {peak[0] // 1024} MiB")
    assert closed >= N_SLOW - 20, closed
    assert queued <= 4 * 1048576, queued
    # without the budget this grows by ~230 MiB (half a ws_max_queue per
    # tail, plus a 1 MiB read per DS reader); with 4 MiB, by 17-64 MiB (seen
    # in runs of the whole suite): the budget, a read in flight per new
    # connection, the allocator's slack, more of it when the readers are
    # fast. The bound sits between the two.
    assert growth_mib < 128, f"routerd RSS grew by {growth_mib:.0f} MiB"

    # a closed WebSocket tail: what reached it is whole events up to some
    # seq; it resumes from there and gets every event after it
    k = slow[0]
    data, _ = read_all(k, timeout=10)
    seqs, _ = ws_seqs(data)
    assert seqs == list(range(len(seqs))), seqs[:5]
    assert len(seqs) < n, "the slow tail was not cut off"
    last = seqs[-1] if seqs else -1
    events, status, code, _ = s.tail(run, thread=thread, last_seq=last, timeout=120)
    assert [e["seq"] for e in events] == list(range(last + 1, n))
    assert status["status"] == "completed" and code == 1000, (status, code)
    for k in slow:
        k.close()
