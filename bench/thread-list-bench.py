#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""thread-list-bench.py — GET /threads of a tenant whose token is scoped
(`threads=small-*`) on a host where other tenants have N threads, beside
the operator's unscoped list of the same host (the walk of every thread),
one build or two side by side (bench/README.md "A tenant's thread list").

The N threads (one direct-log run each, RUN_OPEN pipelined) and the tenant's
10 are made once per build; then REPS times, alternating, `GET
/threads?limit=50` with each token.

    bench/thread-list-bench.py BUILD_DIR [BASE_BUILD_DIR] [REPS] [N]

Prints one JSON object (p50 per token and build, the raw samples)."""
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

BUILDS = [os.path.abspath(sys.argv[1])]
if len(sys.argv) > 2 and sys.argv[2] not in ("", "-"):
    BUILDS.append(os.path.abspath(sys.argv[2]))
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 20
N = int(sys.argv[4]) if len(sys.argv) > 4 else 50000
ADMIN, TENANT = "bench-admin-token-01", "bench-tenant-token-01"


def get(port, path, tok):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("GET", path, headers={"Authorization": f"Bearer {tok}"})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, json.loads(body)


def one_build(build, tokens):
    os.environ["RW_BUILD_DIR"] = build
    import importlib
    import rwtest
    importlib.reload(rwtest)
    from ipc import Ipc
    s = rwtest.Suite(f"[routerd]\ntokens_file = {tokens}\n")
    s.start()
    try:
        c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"), timeout=120)
        t0 = time.time()
        names = [f"other-{i:07d}" for i in range(N)] + [f"small-{i}" for i in range(10)]
        for at in range(0, len(names), 500):
            ids = [c.call_async("RUN_OPEN", {"thread_id": t}) for t in names[at:at + 500]]
            for i in ids:
                c.wait(i)
        made = time.time() - t0
        lat = {"tenant": [], "admin": []}
        for _ in range(REPS):
            for who, tok in (("tenant", TENANT), ("admin", ADMIN)):
                t0 = time.time()
                st, js = get(s.port, "/threads?limit=50", tok)
                lat[who].append(time.time() - t0)
                assert st == 200, (st, js)
                if who == "tenant":
                    assert len(js["threads"]) == 10, js
        med = statistics.median
        res = {"build": build, "threads": len(names), "made_s": round(made, 1),
               "tenant_p50_ms": round(med(lat["tenant"]) * 1e3, 3),
               "admin_p50_ms": round(med(lat["admin"]) * 1e3, 3),
               "tenant_to_admin": round(med(lat["tenant"]) / med(lat["admin"]), 4),
               "samples": lat}
        print(json.dumps({k: v for k, v in res.items() if k != "samples"}), file=sys.stderr)
        return res
    finally:
        s.stop()


with tempfile.NamedTemporaryFile("w", prefix="rw-bench-tokens-", delete=False) as f:
    f.write(f"{ADMIN}\n{TENANT} threads=small-*\n")
out = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "reps": REPS, "n": N,
       "runs": [one_build(b, f.name) for b in BUILDS]}
os.unlink(f.name)
print(json.dumps(out))
