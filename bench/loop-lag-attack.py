#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""loop-lag-attack.py — coordinatord's loop under tenant A's hydrate attack
(issue 30, X1), one build or two side by side (bench/README.md "Loop lag
under a hydrate attack").

Per build, one suite (the config of tests/e2e/t_tenant_loop.py: two scoped
tokens, sync = no): tenant A fills thread a-giant as t_tenant_loop does (8
POST /chat of 30,000 user messages, or at chat_input_max_messages where they
are refused; a run printing 16 MB), then ATTACKERS clients loop GET
/chat?threadId=a-giant for SECONDS. Meanwhile a probe asks tenant B's GET
/runs/{id} every 100 ms (a request waiting for the loop: the lag as a client
sees it, for builds without the metric too), and coordinatord's
runwarden_loop_lag_seconds histogram (where the build has it) is read
before and after: the share of its 100 ms ticks later than each bound, and
its max. coordinatord's peak RSS (VmHWM) beside its RSS before.

    bench/loop-lag-attack.py BUILD_DIR [BASE_BUILD_DIR] [SECONDS] [ATTACKERS]

Prints one JSON object."""
import importlib
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

BUILDS = [os.path.abspath(sys.argv[1])]
if len(sys.argv) > 2 and sys.argv[2] not in ("", "-"):
    BUILDS.append(os.path.abspath(sys.argv[2]))
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
ATTACKERS = int(sys.argv[4]) if len(sys.argv) > 4 else 3


def lag_histogram(s, adm):
    """coordinatord's loop-lag buckets {le: cumulative count} and max, or None."""
    st, text = s.http("GET", "/metrics", headers=adm)
    text = text.decode() if isinstance(text, bytes) else str(text)
    b, mx = {}, None
    for ln in text.splitlines():
        m = re.match(r'runwarden_loop_lag_seconds_bucket\{daemon="coordinatord",le="([^"]+)"\} '
                     r'(\d+)', ln)
        if m:
            b[m.group(1)] = int(m.group(2))
        m = re.match(r'runwarden_loop_lag_max_seconds\{daemon="coordinatord"\} (\S+)', ln)
        if m:
            mx = float(m.group(1))
    return (b, mx) if b else None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else None


def one_build(build):
    os.environ["RW_BUILD_DIR"] = build
    import rwtest
    importlib.reload(rwtest)
    import t_tenant_loop as t
    importlib.reload(t)
    s = rwtest.Suite(t.SUITE_CONF)
    s.start()
    try:
        pid = s.procs["coordinatord"].pid
        rwtest.poll(lambda: s.http("GET", "/readyz", headers=t.auth(t.TB))[0] == 200,
                    timeout=15)
        st, js = s.http("POST", "/runs", {"threadId": "b-lat", "messages": [
            {"role": "user", "content": "true"}]}, headers=t.auth(t.TB))
        probe_path = f"/runs/{js['runId']}?threadId=b-lat"
        statuses = t.build_giant_thread(s)
        rss_before = t.mem(pid)["VmRSS"]
        h0 = lag_histogram(s, t.auth(t.ADMIN))
        stop = threading.Event()
        hydrates, probes = [], []

        def attacker():
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    st, _ = s.http("GET", "/chat?threadId=a-giant", headers=t.auth(t.TA))
                except OSError as e:
                    st = type(e).__name__
                hydrates.append((st, time.monotonic() - t0))

        ts = [threading.Thread(target=attacker) for _ in range(ATTACKERS)]
        for th in ts:
            th.start()
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                st, _ = s.http("GET", probe_path, headers=t.auth(t.TB))
            except OSError:
                st = 0
            probes.append((st, time.monotonic() - t0))
            time.sleep(max(0, 0.1 - (time.monotonic() - t0)))
        stop.set()
        for th in ts:
            th.join()
        h1 = lag_histogram(s, t.auth(t.ADMIN))
        hwm = t.mem(pid)["VmHWM"]
        lat = [p[1] for p in probes]
        out = {"build": build, "giant_posts": statuses,
               "hydrates": len(hydrates),
               "hydrate_statuses": sorted(set(str(h[0]) for h in hydrates)),
               "hydrate_max_s": round(max(h[1] for h in hydrates), 3) if hydrates else None,
               "probe_n": len(probes), "probe_failed": sum(1 for p in probes if p[0] != 200),
               "probe_ms": {"p50": round(pct(lat, 0.5) * 1000, 1),
                            "p99": round(pct(lat, 0.99) * 1000, 1),
                            "max": round(max(lat) * 1000, 1)},
               "rss_before_mib": rss_before >> 20, "vmhwm_after_mib": hwm >> 20}
        if h0 and h1:
            b0, _ = h0
            b1, mx = h1
            n = b1["+Inf"] - b0["+Inf"]
            out["loop_lag"] = {
                "ticks": n, "max_s_since_start": mx,
                "share_later_than": {le: round(1 - (b1[le] - b0[le]) / n, 4) if n else None
                                     for le in ("0.005", "0.01", "0.025", "0.1", "0.25", "1")}}
        return out
    finally:
        s.stop()
        s.cleanup()


print(json.dumps({"seconds": SECONDS, "attackers": ATTACKERS,
                  "builds": [one_build(b) for b in BUILDS]}, indent=1))
