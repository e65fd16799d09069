#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""cluster-routes-bench.py — the routes across nodes (issue #14's benchmarks,
bench/README.md "Cluster routes"): side by side in one invocation, a
single-host suite and two cluster nodes a and b (a three-server NATS
JetStream cluster on loopback, R = 3, tests/e2e/rwcluster.py):

  post_first_event   POST /runs → the run's first event received on a
                     WebSocket tail opened as soon as the 202 came. Single
                     host: both on the host. Cluster: POST through b for a
                     thread a owns (forwarded), the tail through b (read and
                     watched from JetStream).
  tail_delivery      an event's own timestamp (stamped by the owner when its
                     output was queued) → its arrival on a WebSocket tail.
                     Single host: the tail on the host. Cluster: a's run, the
                     tail through b (a non-owner).

    bench/cluster-routes-bench.py [BUILD_DIR] [RUNS]

Prints one JSON object (p50/p90 per side and figure, and the raw samples);
everything shares this machine's CPUs (the NATS servers too)."""
import asyncio
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
if len(sys.argv) > 1:
    os.environ["RW_BUILD_DIR"] = os.path.abspath(sys.argv[1])

import rwtest  # noqa: E402
import websockets  # noqa: E402
from rwcluster import Cluster  # noqa: E402

RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
LINES = 40


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else None


async def first_event(post_node, tail_node, thread):
    t0 = time.time()
    st, js = post_node.http("POST", "/runs", {"threadId": thread, "messages": [
        {"role": "user", "content": "echo one"}]})
    assert st == 202, (st, js)
    uri = f"ws://127.0.0.1:{tail_node.port}/runs/{js['runId']}/stream?threadId={thread}"
    async with websockets.connect(uri) as ws:
        json.loads(await ws.recv())
        dt = time.time() - t0
        try:
            while True:
                await ws.recv()
        except websockets.ConnectionClosed:
            pass
    return dt * 1000


async def delivery(run_node, tail_node, thread):
    run = run_node.start_run(f"for i in $(seq 1 {LINES}); do echo x$i; sleep 0.02; done",
                             thread=thread)
    uri = f"ws://127.0.0.1:{tail_node.port}/runs/{run}/stream?threadId={thread}"
    out = []
    async with websockets.connect(uri) as ws:
        try:
            while True:
                m = json.loads(await ws.recv())
                now = time.time() * 1000
                ch = m.get("chunk") or {}
                if ch.get("type") == "CUSTOM" and "timestamp" in ch:
                    out.append(now - ch["timestamp"])
        except websockets.ConnectionClosed:
            pass
    # the first lines may predate the tail's connection: keep the live ones
    return out[LINES // 4:]


def measure(post_node, tail_node, run_node, thread):
    fe, dl = [], []
    for _ in range(RUNS):
        fe.append(asyncio.run(first_event(post_node, tail_node, thread)))
    for _ in range(max(3, RUNS // 5)):
        dl += asyncio.run(delivery(run_node, tail_node, thread))
    return fe, dl


def summary(v):
    return {"n": len(v), "p50_ms": round(statistics.median(v), 2),
            "p90_ms": round(pct(v, 0.9), 2)}


def main():
    single = rwtest.Suite()
    single.start()
    c = Cluster(node_ttl_ms=15000)
    try:
        a, b = c.node("a"), c.node("b")
        a.wait_terminal(a.start_run("echo claim", thread="bench-a"), thread="bench-a")
        single.wait_terminal(single.start_run("echo warm", thread="bench-s"), thread="bench-s")
        res = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": RUNS,
               "load_before": os.getloadavg()}
        raw = {}
        for rep in range(2):  # alternating sides
            fe, dl = measure(single, single, single, "bench-s")
            raw.setdefault("single", {"post_first_event": [], "tail_delivery": []})
            raw["single"]["post_first_event"] += fe
            raw["single"]["tail_delivery"] += dl
            fe, dl = measure(b, b, a, "bench-a")
            raw.setdefault("cluster", {"post_first_event": [], "tail_delivery": []})
            raw["cluster"]["post_first_event"] += fe
            raw["cluster"]["tail_delivery"] += dl
        res["load_after"] = os.getloadavg()
        res["summary"] = {side: {k: summary(v) for k, v in d.items()} for side, d in raw.items()}
        res["raw"] = raw
        print(json.dumps(res))
    finally:
        single.stop()
        single.cleanup()
        c.stop_all()


if __name__ == "__main__":
    main()
