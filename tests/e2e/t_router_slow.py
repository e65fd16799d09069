# SPDX-License-Identifier: MIT
"""Backpressure (BENCH-RELIABILITY R9, issue 4 §5): one tail that never reads
while 100 others keep up. The slow one is dropped once its queue passes
ws_max_queue, the others get every event, the producer is not held back, and
routerd's RSS stays bounded."""
import asyncio
import json
import struct
import time

import websockets

from rwtest import assert_gapfree
from t_router_lib import connect, read_all, rss_kib, sample_rss, slow_tail

SUITE_CONF = """[routerd]
server_names = x
ws_max_queue = 64K
ws_stall_timeout_ms = 1000
"""


def test_slow_reader_is_dropped_others_get_everything(s):
    # ~1.5 MB of stdout in many events, paced so the tails are live.
    run = s.start_run("for i in $(seq 1 30); do head -c 36000 /dev/zero | base64 -w 100; "
                      "sleep 0.02; done", thread="t-slow")
    path = f"/runs/{run}/stream?threadId=t-slow"
    rss0 = rss_kib(s)

    # The slow reader: a tiny receive window and never a recv().
    slow = slow_tail(s, path, rcvbuf=2048)

    peak = [rss0]

    async def reader(i):
        uri = f"ws://127.0.0.1:{s.port}{path}"
        events, status = [], None
        async with websockets.connect(uri, max_size=2**24, ping_interval=None) as ws:
            try:
                while True:
                    m = json.loads(await ws.recv())
                    if m.get("type") == "status":
                        status = m["record"]
                    else:
                        events.append(m["seq"])
            except websockets.ConnectionClosed:
                pass
            return events, status, ws.close_code

    async def go():
        stop = asyncio.Event()
        samp = asyncio.create_task(sample_rss(s, peak, stop))
        res = await asyncio.wait_for(asyncio.gather(*(reader(i) for i in range(100))), 120)
        stop.set()
        await samp
        return res

    t0 = time.time()
    results = asyncio.run(go())
    elapsed = time.time() - t0
    rec = s.wait_terminal(run, thread="t-slow")
    n = rec["lastSeq"] + 1
    assert n > 30, rec
    for events, status, code in results:
        assert events == list(range(n)), (len(events), n)
        assert status["status"] == "completed" and code == 1000
    # the run itself was not held back by the slow tail (30 × 20 ms of sleeps)
    assert rec["finishedAt"] - rec["startedAt"] < 15000, rec

    # The slow tail was cut off: its socket ends (close frame 1008 if it made
    # it out before the close deadline, else just the TCP end).
    deadline = time.time() + 10
    while s.metric('runwarden_router_ws_closes_total{reason="slow_consumer"}') < 1:
        assert time.time() < deadline, "the slow tail was never dropped"
        time.sleep(0.1)
    data, _ = read_all(slow, timeout=10)
    slow.close()
    assert data.startswith(b"HTTP/1.1 101"), data[:100]
    # bounded memory: 101 tails at a 64 KiB queue cap, far below the 150 MB
    # that holding the whole log per slow tail would take
    growth_mib = (peak[0] - rss0) / 1024
    print(f"    100 readers × {n} events in {elapsed:.1f}s; routerd RSS {rss0 // 1024} MiB → "
          f"peak {peak[0] // 1024} MiB")
    assert growth_mib < 64, f"routerd RSS grew by {growth_mib:.0f} MiB"
    assert s.metric("runwarden_router_live_tails") == 0
