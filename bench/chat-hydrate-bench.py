#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""chat-hydrate-bench.py — GET /chat?threadId= (the hydrate: a thread's runs
rebuilt into UIMessages by coordinatord, chat.c) against reading the same
run's events through a WebSocket tail (the floor: the same log read and sent),
one build or two side by side (bench/README.md "The /chat hydrate").

For each size N, one thread with one run of an ndjson harness that streams an
answer as N TEXT_MESSAGE_CONTENT deltas of 8 bytes (a model's tokens), then
REPS times, alternating: the hydrate, and a tail of the run from its start.
While each hydrate is out, another thread's record is asked for in a loop
(`GET /runs/{id}`): its slowest answer is how long coordinatord's loop,
which serves every tenant, was held.

    bench/chat-hydrate-bench.py BUILD_DIR [BASE_BUILD_DIR] [REPS] [SIZES]

SIZES: comma-separated N, or shellM for a run of the built-in shell harness
printing M MB (100-byte lines: CUSTOM process.stdout chunks the rebuild has
no use for) instead (default 2000,20000,60000,shell60). Prints one JSON
object."""
import asyncio
import http.client
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import websockets  # noqa: E402

BUILDS = [os.path.abspath(sys.argv[1])]
if len(sys.argv) > 2 and sys.argv[2] not in ("", "-"):
    BUILDS.append(os.path.abspath(sys.argv[2]))
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
SIZES = (sys.argv[4] if len(sys.argv) > 4 else "2000,20000,60000,shell60").split(",")

CONF = """[harness.runner]
adapter = ndjson
command = ["/usr/bin/python3", "/workspace/.bin/runner"]
"""
RUNNER = """import json, sys
r = json.load(sys.stdin)
n = int(r["messages"][-1]["content"])
m = "m-" + r["runId"]
w = sys.stdout.write
def e(**k):
    w(json.dumps(k) + "\\n")
e(type="RUN_STARTED", threadId=r["threadId"], runId=r["runId"])
e(type="TEXT_MESSAGE_START", messageId=m, role="assistant")
for i in range(n):
    e(type="TEXT_MESSAGE_CONTENT", messageId=m, delta="tok%05d" % (i % 100000))
e(type="TEXT_MESSAGE_END", messageId=m)
e(type="RUN_FINISHED", threadId=r["threadId"], runId=r["runId"])
sys.stdout.flush()
"""


def get(port, path, timeout=900):
    """GET path: (status, JSON body); a hydrate of the base build may hold
    coordinatord far past rwtest's 10 s."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body)


def wait_done(s, run, thread):
    t0 = time.time()
    while time.time() - t0 < 600:
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}")
        if st == 200 and rec["status"] != "running":
            return rec
        time.sleep(0.2)
    raise RuntimeError("run did not end")


async def tail(port, run, thread):
    n = 0
    uri = f"ws://127.0.0.1:{port}/runs/{run}/stream?threadId={thread}"
    async with websockets.connect(uri, max_size=None) as ws:
        try:
            while True:
                await ws.recv()
                n += 1
        except websockets.ConnectionClosed:
            pass
    return n


def probe_while(s, thread, run, stop, out):
    while not stop.is_set():
        t0 = time.time()
        get(s.port, f"/runs/{run}?threadId={thread}")
        out.append(time.time() - t0)


def one_build(build):
    os.environ["RW_BUILD_DIR"] = build
    import importlib
    import rwtest
    importlib.reload(rwtest)
    s = rwtest.Suite(CONF)
    s.start()
    res = {"build": build, "sizes": {}}
    try:
        st, _ = s.http("POST", "/threads/probe/files/.bin?op=mkdir")
        st, js = s.http("POST", "/runs", {"threadId": "probe", "messages": [
            {"role": "user", "content": "true"}]})
        probe_run = js["runId"]
        wait_done(s, probe_run, "probe")
        for n in SIZES:
            th = f"h{n}"
            if n.startswith("shell"):
                cmd = f"head -c {int(n[5:]) * 1000000} /dev/zero | tr '\\0' a | fold -w 100"
                st, js = s.http("POST", "/runs", {"threadId": th, "messages": [
                    {"role": "user", "content": cmd}]})
            else:
                assert s.http("POST", f"/threads/{th}/files/.bin?op=mkdir")[0] == 201
                assert s.http("PUT", f"/threads/{th}/files/.bin/runner",
                              raw_body=RUNNER.encode())[0] in (200, 201)
                st, js = s.http("POST", "/runs", {"threadId": th,
                                                  "metadata": {"harness": "runner"},
                                                  "messages": [{"role": "user", "content": n}]})
            assert st == 202, (st, js)
            rec = wait_done(s, js["runId"], th)
            assert rec["status"] == "completed", rec
            hyd, tails, probes, size, codes, back = [], [], [], None, [], []
            for _ in range(REPS):
                stop, pr = threading.Event(), []
                t = threading.Thread(target=probe_while, args=(s, "probe", probe_run, stop, pr))
                t.start()
                t0 = time.time()
                st, h = get(s.port, f"/chat?threadId={th}")
                hyd.append(time.time() - t0)
                stop.set()
                t.join()
                probes.append(max(pr) if pr else 0.0)
                codes.append(st)  # routerd gives up on a coordinatord held too long: 503
                if st == 200:
                    size = len(json.dumps(h))
                else:  # until coordinatord answers again
                    while get(s.port, "/readyz")[0] != 200:
                        time.sleep(0.2)
                    back.append(time.time() - t0)
                t0 = time.time()
                ev = asyncio.run(tail(s.port, js["runId"], th))
                tails.append(time.time() - t0)
            med = statistics.median
            res["sizes"][n] = {
                "events": ev, "answer_bytes": size, "statuses": codes,
                "ready_again_after_s": back,
                "hydrate_s": hyd, "tail_s": tails, "probe_max_s": probes,
                "hydrate_p50_ms": round(med(hyd) * 1e3, 2),
                "tail_p50_ms": round(med(tails) * 1e3, 2),
                "ratio_hydrate_to_tail": round(med(hyd) / med(tails), 3),
                "probe_max_p50_ms": round(med(probes) * 1e3, 2)}
            print(json.dumps({"build": build, "n": n, **{k: v for k, v in res["sizes"][n].items()
                                                          if not isinstance(v, list)}}),
                  file=sys.stderr)
    finally:
        s.stop()
    return res


out = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "reps": REPS,
       "delta_bytes": 8, "runs": [one_build(b) for b in BUILDS]}
print(json.dumps(out))
