# SPDX-License-Identifier: MIT
"""The file API never blocks the shim's loop (docs/DESIGN.md, "The file API's
worker threads"): 40 parallel 8 MiB PUTs to one thread through routerd (each a
temp file, fsync and rename on a shim worker thread) while another key runs
short execs in a row straight on the shim (shimctl --repeat: EXEC_START →
EXEC_EXIT, all on the shim's loop), and a probe times EXEC_LIST round trips
(answered from memory: what it measures is how long the loop is busy
elsewhere). Every PUT succeeds with its content whole and every exec
completes. The latencies, idle and during the storm, are printed
(bench/README.md keeps the figures; no timed assertion: the machine is
shared). An exec also writes small records to disk (its adoption record, the
exec id counter), so its latency includes the filesystem's own waits under
the storm's fsyncs; EXEC_LIST does not."""
import http.client
import os
import re
import threading
import time

from ipc import Ipc
from t_files import files, ready, req
from t_sandbox import shimctl

# 8 MiB bodies: above the 8M defaults of the caps, which are per-file limits.
# The 40 PUTs queue on the shim's workers (3 at a time, each an fsync) and
# the last ones may wait beyond routerd's 10 s default on a busy disk.
SUITE_CONF = """[routerd]
max_file_body = 9M
coord_timeout_ms = 120000

[containerd-shim]
file_api_max_bytes = 9M
"""

PUTS = 40
SIZE = 8 * 1024 * 1024
NAMES = 8  # the PUTs overwrite each other five by five: ~64 MiB at rest
BATCH = 10


def exec_batch(s, key):
    """(p50, p99) ms of BATCH execs of `true` in a row in the sandbox of key."""
    r = shimctl(s, key, "--repeat", str(BATCH), "--", "true", timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr)
    m = re.search(r"execs: p50 ([0-9.]+) ms, p99 ([0-9.]+) ms", r.stderr)
    assert m, r.stderr
    return float(m.group(1)), float(m.group(2))


def probe(s, stop, out):
    """EXEC_LIST round trips (ms), back to back, until stop is set."""
    c = Ipc(os.path.join(s.dir, "run", "containerd-shim.sock"), timeout=60)
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            c.call("EXEC_LIST", {})
            out.append((time.monotonic() - t0) * 1000)
            time.sleep(0.005)
    finally:
        c.close()


def probe_for(s, seconds):
    stop, out = threading.Event(), []
    t = threading.Thread(target=probe, args=(s, stop, out))
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return out


def put_one(s, thread, i, results):
    body = bytes([i]) * SIZE
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=300)
        st, _, data = req(s, "PUT", files(thread, f"big{i % NAMES}"), body, conn=c)
        c.close()
        results[i] = (st, data)
    except Exception as e:  # reported by the assertion below
        results[i] = ("exception", repr(e))


def test_put_storm_does_not_delay_execs(s):
    ready(s)
    storm, runner = "t-storm", "t-execs"
    exec_batch(s, runner)  # creates the sandbox: not what is measured
    assert req(s, "PUT", files(storm, "warm"), b"x")[0] == 201
    idle = [exec_batch(s, runner) for _ in range(3)]
    idle_list = probe_for(s, 2)

    results = [None] * PUTS
    stop, during_list = threading.Event(), []
    prober = threading.Thread(target=probe, args=(s, stop, during_list))
    prober.start()
    puts = [threading.Thread(target=put_one, args=(s, storm, i, results)) for i in range(PUTS)]
    t0 = time.monotonic()
    for t in puts:
        t.start()
    during = []
    while any(t.is_alive() for t in puts):
        during.append(exec_batch(s, runner))
    for t in puts:
        t.join()
    storm_s = time.monotonic() - t0
    stop.set()
    prober.join()

    bad = [(i, r) for i, r in enumerate(results) if r is None or r[0] not in (200, 201)]
    assert not bad, bad[:5]
    for n in range(NAMES):
        st, _, data = req(s, "GET", files(storm, f"big{n}"), timeout=120)
        assert st == 200 and len(data) == SIZE, (st, len(data))
        # One of the five PUTs to this name, whole (never a mix of two).
        assert data[0] % NAMES == n and data == bytes([data[0]]) * SIZE, n
    assert during, "no exec batch ran during the storm"

    def fmt(v):
        return (f"{len(v) * BATCH} execs, p50 of batches {sorted(p for p, _ in v)[len(v) // 2]:.1f} ms,"
                f" worst p99 {max(q for _, q in v):.1f} ms")
    def lfmt(v):
        v = sorted(v)
        return (f"{len(v)} calls, p50 {v[len(v) // 2]:.1f} ms, p99 {v[len(v) * 99 // 100]:.1f} ms,"
                f" max {v[-1]:.1f} ms")
    print(f"\n    exec latency idle:   {fmt(idle)}")
    print(f"    exec latency during {PUTS} x 8 MiB PUTs ({storm_s:.1f} s): {fmt(during)}")
    print(f"    EXEC_LIST idle:   {lfmt(idle_list)}")
    print(f"    EXEC_LIST during: {lfmt(during_list)}")
