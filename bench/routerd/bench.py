#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""routerd benchmarks beside their references (BENCH-RELIABILITY B7, B9, B10),
on the real three daemons (tests/e2e/rwtest.py). Prints one line per figure
and the ratios; writes bench/results/routerd-<date>.txt.

  B7  GET /runs/{id} with wrk vs a libevent evhttp hello-world built here
  B9  append → WebSocket delivery p50/p99 vs loopback 64-byte ping-pong RTT
  B10 RSS per idle WebSocket tail (N tails) vs libwebsockets-test-server
      (lws-mirror-protocol) holding N idle connections

usage: RW_BUILD_DIR=build bench/routerd/bench.py [N_IDLE]"""
import asyncio
import datetime
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "e2e"))
import rwtest  # noqa: E402
from t_router_lib import WS_KEY  # noqa: E402

N_IDLE = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
OUT = []


def say(line):
    print(line, flush=True)
    OUT.append(line)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def wrk(url, secs=5, conns=64):
    p = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{secs}s", "--latency", url],
                       capture_output=True, text=True)
    m = re.search(r"Requests/sec:\s+([\d.]+)", p.stdout)
    p99 = re.search(r"99%\s+([\d.]+\w+)", p.stdout)
    return float(m.group(1)), p99.group(1) if p99 else "?"


def b7(s, run):
    if not shutil.which("wrk"):
        say("B7 skipped: wrk not installed (Debian package wrk)")
        return
    exe = "/tmp/rw-evhttp-hello"
    subprocess.run(["gcc", "-O2", os.path.join(HERE, "evhttp-hello.c"), "-o", exe, "-levent"],
                   check=True)
    port = rwtest.free_port()
    ref = subprocess.Popen([exe, str(port)])
    time.sleep(0.3)
    try:
        ref_rps, ref_p99 = wrk(f"http://127.0.0.1:{port}/")
    finally:
        ref.terminate()
        ref.wait()
    ours, our_p99 = wrk(f"http://127.0.0.1:{s.port}/runs/{run}?threadId=bench")
    health, _ = wrk(f"http://127.0.0.1:{s.port}/healthz")
    say(f"B7 GET /runs/{{id}}: routerd {ours:.0f} rps (p99 {our_p99}), evhttp hello-world "
        f"{ref_rps:.0f} rps (p99 {ref_p99}) → ratio {ours / ref_rps:.2f} (target ≥ 0.8; "
        f"routerd /healthz {health:.0f} rps = {health / ref_rps:.2f})")


def loopback_rtt_us(n=2000):
    a = socket.socket()
    a.bind(("127.0.0.1", 0))
    a.listen(1)
    c = socket.create_connection(a.getsockname())
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    srv, _ = a.accept()
    srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    import threading

    def echo():
        while True:
            d = srv.recv(64)
            if not d:
                return
            srv.sendall(d)
    threading.Thread(target=echo, daemon=True).start()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.sendall(b"x" * 64)
        got = 0
        while got < 64:
            got += len(c.recv(64))
        samples.append((time.perf_counter() - t0) * 1e6)
    c.close()
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def b9(s):
    """A run printing a timestamp every 20 ms; the tail compares receipt
    time with the timestamp in the chunk (same host clock)."""
    run = s.start_run("for i in $(seq 1 200); do date +%s%N; sleep 0.02; done", thread="bench-lat")
    import websockets
    import json

    async def go():
        lat = []
        uri = f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId=bench-lat"
        async with websockets.connect(uri, max_size=2**24) as ws:
            try:
                while True:
                    m = json.loads(await ws.recv())
                    now = time.time_ns()
                    ch = m.get("chunk", {})
                    if ch.get("name") == "process.stdout":
                        for line in ch["value"]["text"].split():
                            lat.append((now - int(line)) / 1000)
            except websockets.ConnectionClosed:
                pass
        return lat
    lat = sorted(asyncio.run(go()))
    rtt50, rtt99 = loopback_rtt_us()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    say(f"B9 process output → tail delivery: p50 {p50:.0f} µs, p99 {p99:.0f} µs over {len(lat)} "
        f"lines (includes the shim pipe read, the coordinator commit with fdatasync and the "
        f"python client); loopback 64 B RTT p50 {rtt50:.0f} µs, p99 {rtt99:.0f} µs → "
        f"p50 ratio {p50 / rtt50:.0f}×")


def open_idle(port, n, path, extra=""):
    """n WebSocket handshakes, one after the other (libwebsockets serves a
    limited number of handshakes at once), then leave them idle. The Host
    names the port: routerd answers 421 to a Host that is not its address."""
    socks = []
    req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {WS_KEY}\r\n{extra}\r\n").encode()
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(req)
        c.settimeout(10)
        d = c.recv(4096)
        assert d.startswith(b"HTTP/1.1 101"), d[:200]
        socks.append(c)
    return socks


def b10(s, n):
    run = s.start_run("sleep 600", thread="bench-idle")
    pid = s.procs["routerd"].pid
    time.sleep(0.5)
    r0 = rss_kib(pid)
    socks = open_idle(s.port, n, f"/runs/{run}/stream?threadId=bench-idle")
    time.sleep(1)
    r1 = rss_kib(pid)
    ours = (r1 - r0) * 1024 / n
    for x in socks:
        x.close()
    s.http("POST", f"/runs/{run}/cancel?threadId=bench-idle")
    lws = shutil.which("libwebsockets-test-server")
    if not lws:
        say(f"B10 routerd {ours:.0f} B per idle tail ({n} tails); reference skipped: "
            f"libwebsockets-test-server not installed")
        return
    port = rwtest.free_port()
    ref = subprocess.Popen([lws, f"--port={port}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           cwd="/usr/share/libwebsockets-test-server"
                           if os.path.isdir("/usr/share/libwebsockets-test-server") else None)
    time.sleep(0.5)
    try:
        q0 = rss_kib(ref.pid)
        socks = open_idle(port, n, "/", "Sec-WebSocket-Protocol: lws-mirror-protocol\r\n")
        time.sleep(1)
        q1 = rss_kib(ref.pid)
        for x in socks:
            x.close()
    finally:
        ref.terminate()
        ref.wait()
    theirs = (q1 - q0) * 1024 / n
    say(f"B10 RSS per idle WebSocket ({n}): routerd tail {ours:.0f} B, libwebsockets-test-server "
        f"mirror {theirs:.0f} B → ratio {ours / theirs:.2f} (target ≤ 1.0)")


def main():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    lim = min(max(N_IDLE * 2 + 1000, 4096), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim, lim))
    s = rwtest.Suite("[routerd]\nmax_connections = 100000\n").start()
    try:
        run = s.start_run("echo bench", thread="bench")
        s.wait_terminal(run, thread="bench")
        b7(s, run)
        b9(s)
        b10(s, N_IDLE)
    finally:
        print("\n".join(s.stop()))
        s.cleanup()
    os.makedirs(os.path.join(TOP, "bench", "results"), exist_ok=True)
    path = os.path.join(TOP, "bench", "results",
                        f"routerd-{datetime.date.today().isoformat()}.txt")
    with open(path, "w") as f:
        f.write("\n".join(OUT) + "\n")
    print(f"(written to {path})")


main()
