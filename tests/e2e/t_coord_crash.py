# SPDX-License-Identifier: MIT
"""Issue 3: coordinatord survives its own death (BENCH-RELIABILITY R1/R4).

kill -9 at random moments while producers append to several runs and a
WebSocket tail keeps reconnecting with its lastSeq: every acknowledged event is
there, seqs are contiguous from 0 with no duplicate, unacknowledged events are
absent or whole, restarts are quick, and the tail sees every seq exactly once.
A shell run whose process outlives the crash is re-attached with no lost and
no repeated output; one whose sandbox is gone fails with sandbox_lost."""
import asyncio
import hashlib
import json
import os
import random
import signal
import socket
import threading
import time

import websockets

from ipc import Ipc, IpcError
from rwtest import stdout_text

ITERATIONS = int(os.environ.get("RW_CRASH_ITERATIONS", "20"))


def sock_path(s):
    return os.path.join(s.dir, "run", "coordinatord.sock")


def connect(s, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        try:
            return Ipc(sock_path(s), timeout=5)
        except (OSError, ConnectionError, AssertionError):
            if time.time() > deadline:
                raise
            time.sleep(0.01)


def restart_coordinator(s, wait_router=False):
    s.kill("coordinatord", signal.SIGKILL)
    t0 = time.time()
    s.start_daemon("coordinatord")
    c = connect(s)
    c.close()
    took = time.time() - t0
    if wait_router:
        wait_router_linked(s)
    return took


def wait_router_linked(s, timeout=10):
    """routerd reconnects with backoff; until then it answers 503."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, _ = s.http("GET", "/runs/00000000-0000-4000-8000-000000000000?threadId=x")
        if st != 503:
            return
        time.sleep(0.02)
    raise AssertionError("routerd did not reconnect to coordinatord")


class Producer(threading.Thread):
    def __init__(self, s, runs, stop):
        super().__init__(daemon=True)
        self.s, self.runs, self.stop = s, runs, stop
        self.acked = {r: [] for r in runs}  # run → [(seq, n)]
        self.sent = {r: 0 for r in runs}
        self.error = None

    def run(self):
        c = None
        try:
            while not self.stop.is_set():
                if c is None:
                    c = connect(self.s)
                run = random.choice(self.runs)
                n = self.sent[run]
                self.sent[run] += 1  # never reused, acknowledged or not
                chunk = json.dumps({"type": "CUSTOM", "name": "p", "value": {"n": n, "pad": "x" * random.randint(0, 300)}})
                try:
                    seq = c.call("RUN_APPEND", {"run_id": run, "chunk": chunk})["seq"]
                    self.acked[run].append((seq, n))
                except (OSError, ConnectionError):
                    c.close()
                    c = None
        except Exception as e:  # noqa: BLE001 — reported by the test
            self.error = e


def read_all(c, run):
    out, cur = [], -1
    while True:
        body = c.call("RUN_READ", {"run_id": run, "from_seq": cur, "max": 256})
        assert body["first_seq"] == cur + 1
        for i, t in enumerate(body["events"]):
            out.append((body["first_seq"] + i, json.loads(t)))
        cur += len(body["events"])
        rec = json.loads(body["record"])
        if cur >= rec["lastSeq"]:
            return out, rec


class Tail(threading.Thread):
    """Reconnects after every drop with the last seq it saw."""

    def __init__(self, s, run, thread):
        super().__init__(daemon=True)
        self.s, self.run_id, self.thread = s, run, thread
        self.seqs, self.status, self.connects = [], None, 0

    def run(self):
        asyncio.run(self.go())

    async def go(self):
        deadline = time.time() + 120
        while self.status is None and time.time() < deadline:
            last = self.seqs[-1] if self.seqs else -1
            uri = (f"ws://127.0.0.1:{self.s.port}/runs/{self.run_id}/stream"
                   f"?threadId={self.thread}&lastSeq={last}")
            try:
                async with websockets.connect(uri, open_timeout=5) as ws:
                    self.connects += 1
                    async for m in ws:
                        msg = json.loads(m)
                        if msg.get("type") == "status":
                            self.status = msg["record"]
                        else:
                            self.seqs.append(msg["seq"])
            except (OSError, websockets.WebSocketException, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.05)


def test_kill9_loop_loses_nothing_acknowledged(s):
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable"]
    c = connect(s)
    runs = [c.call("RUN_OPEN", {"thread_id": f"t-crash-{i}"})["run_id"] for i in range(8)]
    c.close()
    stop = threading.Event()
    producers = [Producer(s, runs[i * 2:i * 2 + 2], stop) for i in range(4)]
    for p in producers:
        p.start()
    tail = Tail(s, runs[0], "t-crash-0")
    tail.start()
    restarts = []
    for _ in range(ITERATIONS):
        time.sleep(random.uniform(0, 0.3))
        restarts.append(restart_coordinator(s))
    time.sleep(0.3)
    stop.set()
    for p in producers:
        p.join(timeout=30)
        assert p.error is None, p.error
    c = connect(s)
    total_acked = 0
    for p in producers:
        for run, acked in p.acked.items():
            events, rec = read_all(c, run)
            seqs = [seq for seq, _ in events]
            assert seqs == list(range(len(events))), f"{run}: seqs not contiguous"
            ns = [e["value"]["n"] for _, e in events]
            assert ns == sorted(set(ns)), f"{run}: duplicate or reordered events"
            by_seq = dict((seq, e["value"]["n"]) for seq, e in events)
            for seq, n in acked:
                assert by_seq.get(seq) == n, f"{run}: acknowledged seq {seq} (n={n}) missing"
            total_acked += len(acked)
            assert rec["status"] == "running"
    # end the runs so the tail gets its status frame
    for run in runs:
        c.call("RUN_FINISH", {"run_id": run, "status": "completed"})
    c.close()
    tail.join(timeout=60)
    events0, rec0 = read_all(connect(s), runs[0])
    assert tail.status is not None, "the tail never finished"
    assert tail.seqs == list(range(rec0["lastSeq"] + 1)), "the tail saw a gap or a duplicate"
    assert total_acked > ITERATIONS * 5, f"only {total_acked} appends acknowledged"
    assert max(restarts) < 1.0, f"restart took {max(restarts):.2f}s"
    print(f"    {ITERATIONS} kills, {total_acked} acknowledged appends, tail reconnected "
          f"{tail.connects} times, slowest restart {max(restarts) * 1000:.0f} ms")


def test_live_shell_run_is_reattached_after_kill9(s):
    wait_router_linked(s)
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable"]
    run = s.start_run("for i in $(seq 1 60); do echo line$i; echo err$i >&2; sleep 0.03; done",
                      thread="t-reattach")
    for _ in range(3):  # three crashes while the process keeps writing
        time.sleep(0.4)
        restart_coordinator(s, wait_router=True)
    events, status, _, _ = s.tail(run, thread="t-reattach", timeout=30)
    assert status["status"] == "completed", (status, events[-3:])
    assert stdout_text(events) == "".join(f"line{i}\n" for i in range(1, 61)), stdout_text(events)
    assert stdout_text(events, "process.stderr") == "".join(f"err{i}\n" for i in range(1, 61))
    assert [e["seq"] for e in events] == list(range(len(events)))


def test_run_whose_sandbox_is_gone_fails_sandbox_lost(s):
    wait_router_linked(s)
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable", r"shim"]
    run = s.start_run("sleep 30.02", thread="t-lost")
    s.wait_run(run, "t-lost", lambda r: r["lastSeq"] >= 4, 5)
    time.sleep(0.2)
    s.kill("coordinatord", signal.SIGKILL)
    s.kill("containerd-shim", signal.SIGKILL)
    # the sandbox outlives the shim (a restarted shim would re-adopt it): kill its
    # init, an ancestor of the run's process, and with it the whole sandbox
    def ppid_comm(pid):
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        return int(st.rsplit(")", 1)[1].split()[1]), st[st.index("(") + 1:st.rindex(")")]
    inst = "runwarden." + hashlib.sha256(os.path.join(s.dir, "state").encode()).hexdigest()[:12]
    inits = set()
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] != [b"sleep", b"30.02"]:
                    continue
            with open(f"/proc/{d}/cgroup") as f:
                if inst not in f.read():
                    continue  # another suite's (cgroup naming scheme, cgroup.h)
            pid = int(d)
            while pid > 1 and ppid_comm(pid)[1] != "sandbox-init":
                pid = ppid_comm(pid)[0]
            inits.add(pid)
        except (OSError, ValueError):
            continue
    assert len(inits) == 1 and min(inits) > 1, inits
    os.kill(inits.pop(), signal.SIGKILL)
    s.start_daemon("containerd-shim")
    s.start_daemon("coordinatord")
    s.wait_ready()
    wait_router_linked(s)
    events, status, _, _ = s.tail(run, thread="t-lost", timeout=30)
    last = events[-1]["chunk"]
    assert status["status"] == "failed" and last["type"] == "RUN_ERROR", status
    assert last["code"] == "sandbox_lost", last
