#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""BENCH-RELIABILITY B4 — WebSocket tail fan-out, routerd beside
libwebsockets-test-server (lws-mirror-protocol), driven by the same C client
(bench/routerd/ws-fanout.c, built here with cc).

One producer at RATE messages/s of ~200-byte chunks; K receivers. For
routerd the producer appends with RUN_APPEND on coordinatord's socket and the
K receivers tail the run through routerd; for lws the producer is one more
mirror client and the K receivers are mirror clients. Figures per run:
delivered messages/s, delivered messages per CPU-second of the server
(routerd's, or the lws server's, /proc/PID/stat utime+stime over the
measurement window) and end-to-end latency (send time in the chunk).

Servers (all three runwarden daemons, and the lws server) pinned to CPU 0,
ws-fanout to CPU 1; warm-up 2 s, measure 10 s, 3 repetitions alternating the
order; medians with min and max of ours/ref. Raw JSON in
bench/results/routerd-b4-<time>.json.

usage: RW_BUILD_DIR=build bench/routerd/b4.py [--reps N] [--ks 1,10,100,1000]
       [--rate R] [--meas S] [--unpinned]"""
import argparse
import datetime
import json
import os
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
from ipc import Ipc  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--ks", default="1,10,100,1000")
ap.add_argument("--rate", type=float, default=1000, help="producer messages/s for every K ...")
ap.add_argument("--rates", default="1:1000,10:1000,100:500,1000:50",
                help="... unless given per K here (K:RATE,...): the default keeps K × rate within "
                     "what both servers sustain on one CPU, so p99 is not a queue's growth; "
                     "--rates '' uses --rate throughout (saturation runs)")
ap.add_argument("--warm", type=float, default=2)
ap.add_argument("--meas", type=float, default=10)
ap.add_argument("--unpinned", action="store_true", help="no taskset (the spec's unpinned figures)")
A = ap.parse_args()
KS = [int(x) for x in A.ks.split(",")]
RATES = {int(a): float(b) for a, b in (x.split(":") for x in A.rates.split(",") if x)}


def rate(k):
    return RATES.get(k, A.rate)
PIN_SRV = [] if A.unpinned else ["taskset", "-c", "0"]
PIN_CLI = [] if A.unpinned else ["taskset", "-c", "1"]
EXE = "/tmp/rw-ws-fanout"


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def client(args):
    p = subprocess.run(PIN_CLI + [EXE] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=A.warm + A.meas + 120)
    if p.returncode != 0:
        raise RuntimeError(f"ws-fanout {args[0]} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def run_ours(s, k, rep):
    sock = os.path.join(s.dir, "run", "coordinatord.sock")
    c = Ipc(sock)
    thread = f"b4-{k}-{rep}"
    run = c.call("RUN_OPEN", {"thread_id": thread})["run_id"]
    try:
        return client(["rw", s.port, k, rate(k), A.warm, A.meas, s.procs["routerd"].pid, sock, run,
                       thread])
    finally:
        c.call("RUN_FINISH", {"run_id": run, "status": "completed"})
        c.close()


def run_ref(port, pid, k):
    return client(["lws", port, k, rate(k), A.warm, A.meas, pid])


def med(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    lim = min(max(max(KS) * 4 + 1024, 8192), hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim, lim))  # inherited by the servers and client
    subprocess.run(["cc", "-O2", "-Wall", os.path.join(HERE, "ws-fanout.c"), "-o", EXE], check=True)
    lws = shutil.which("libwebsockets-test-server")
    if not lws:
        sys.exit("B4 needs libwebsockets-test-server (Debian package libwebsockets-test-server)")
    wrap = {d: PIN_SRV for d in rwtest.DAEMONS}
    s = rwtest.Suite("[routerd]\nmax_connections = 100000\n", wrap=wrap).start()
    port = rwtest.free_port()
    ref = subprocess.Popen(PIN_SRV + [lws, f"--port={port}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, cwd="/usr/share/libwebsockets-test-server")
    results = []
    try:
        wait_port(port)
        for rep in range(A.reps):
            for k in KS:
                order = ["ours", "ref"] if (rep + KS.index(k)) % 2 == 0 else ["ref", "ours"]
                for who in order:
                    r = run_ours(s, k, rep) if who == "ours" else run_ref(port, ref.pid, k)
                    r["rep"] = rep
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        ref.terminate()
        ref.wait()
        problems = s.stop()
        s.cleanup()
        if problems:
            print("\n".join(problems))

    summary = []
    print(f"\nB4 fan-out, rates {[(k, rate(k)) for k in KS]}, {'unpinned' if A.unpinned else 'servers on CPU 0, client on CPU 1'}, "
          f"{A.reps} reps; ratio = routerd/lws, median (min–max)")
    print("| K | routerd msgs/s | lws msgs/s | routerd msgs/CPU-s | lws msgs/CPU-s | ratio msgs/CPU-s "
          "| routerd p99 | lws p99 | ratio p99 | CPU routerd / lws | client CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in KS:
        o = {r["rep"]: r for r in results if r["k"] == k and r["server"] == "routerd"}
        f = {r["rep"]: r for r in results if r["k"] == k and r["server"] == "lws"}
        reps = sorted(set(o) & set(f))
        eff = [o[i]["msgs_per_cpu_s"] / f[i]["msgs_per_cpu_s"] for i in reps]
        p99 = [o[i]["p99"] / f[i]["p99"] for i in reps]
        # the mirror also echoes each message to its sender: K + 1 writes per message
        eff_w = [o[i]["msgs_per_cpu_s"] / (f[i]["msgs_per_cpu_s"] * (k + 1) / k) for i in reps]
        row = {"k": k, "rate": rate(k), "ratio_msgs_per_cpu_s": med(eff), "ratio_p99": med(p99),
               "ratio_msgs_per_cpu_s_counting_lws_echo": med(eff_w)}
        for name, d in (("routerd", o), ("lws", f)):
            for key in ("delivered_per_s", "msgs_per_cpu_s", "p50", "p99", "max",
                        "server_cpu_frac", "client_cpu_frac"):
                row[f"{name}_{key}"] = statistics.median(d[i][key] for i in reps)
            row[f"{name}_delivered_frac"] = statistics.median(
                d[i]["delivered"] / max(d[i]["expected"], 1) for i in reps)
        summary.append(row)
        print(f"| {k} @ {rate(k):.0f}/s | {row['routerd_delivered_per_s']:.0f} | {row['lws_delivered_per_s']:.0f} "
              f"| {row['routerd_msgs_per_cpu_s']:.0f} | {row['lws_msgs_per_cpu_s']:.0f} "
              f"| **{row['ratio_msgs_per_cpu_s']['median']:.2f}** "
              f"({row['ratio_msgs_per_cpu_s']['min']:.2f}–{row['ratio_msgs_per_cpu_s']['max']:.2f}) "
              f"| {row['routerd_p99'] * 1e3:.2f} ms | {row['lws_p99'] * 1e3:.2f} ms "
              f"| {row['ratio_p99']['median']:.2f} ({row['ratio_p99']['min']:.2f}–"
              f"{row['ratio_p99']['max']:.2f}) | {row['routerd_server_cpu_frac']:.2f} / "
              f"{row['lws_server_cpu_frac']:.2f} | {row['routerd_client_cpu_frac']:.2f} / "
              f"{row['lws_client_cpu_frac']:.2f} |")
    os.makedirs(os.path.join(TOP, "bench", "results"), exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(TOP, "bench", "results", f"routerd-b4-{stamp}.json")
    with open(path, "w") as fh:
        json.dump({"benchmark": "B4", "when": stamp, "rates": {k: rate(k) for k in KS}, "chunk_bytes": 200,
                   "warm_s": A.warm, "meas_s": A.meas, "reps": A.reps,
                   "pinning": "none" if A.unpinned else
                   "routerd, coordinatord, containerd-shim and libwebsockets-test-server on CPU 0 "
                   "(taskset -c 0); ws-fanout on CPU 1 (taskset -c 1)",
                   "nproc": os.cpu_count(), "kernel": os.uname().release,
                   "command": " ".join(sys.argv), "summary": summary, "runs": results}, fh, indent=1)
    print(f"(written to {path})")


main()
